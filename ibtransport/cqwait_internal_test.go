package ibtransport

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// TestCQWaitAllocs: a consumer that blocks in Wait for each completion, the
// way an application waits for a large message, costs no heap allocation per
// completion (a Wait that closed and replaced a channel to wake its waiters
// cost one per wake: 1 per 1 MiB WRITE in softrdma bench), and every
// completion pushed is seen.
func TestCQWaitAllocs(t *testing.T) {
	c := NewContext(ContextConfig{})
	cq, err := c.CreateCQ(64)
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	ready := make(chan struct{}, 1)
	done := make(chan int)
	go func() {
		var wc [1]WC
		got := 0
		for got < n {
			ready <- struct{}{}
			if err := cq.Wait(context.Background()); err != nil {
				t.Error(err)
				break
			}
			got += cq.Poll(wc[:])
		}
		done <- got
	}()
	var before, after runtime.MemStats
	for i := range n {
		if i == n/4 {
			runtime.ReadMemStats(&before) // warmed up
		}
		<-ready
		// Let the consumer park (it usually has by the time the lock is taken).
		runtime.Gosched()
		c.mu.Lock()
		cq.push(WC{WRID: uint64(i)}, false)
		c.mu.Unlock()
	}
	got := <-done
	runtime.ReadMemStats(&after)
	if got != n {
		t.Fatalf("saw %d of %d completions", got, n)
	}
	per := float64(after.Mallocs-before.Mallocs) / (n - n/4)
	t.Logf("%.3f allocations per completion waited for", per)
	if per >= 0.25 {
		t.Errorf("%.2f heap allocations per completion waited for, want 0", per)
	}
}

// TestCQWaitCompetingConsumers: three goroutines wait on one CQ and race to
// poll each completion, so that a Wait often wakes to find the completion
// taken; none may miss a later wake (a shared pool of wake tokens let one
// Wait take another's and leave it parked uncounted). Once 3000 completions
// are consumed the producer keeps adding completions until every consumer has
// returned, for at most 10 s.
func TestCQWaitCompetingConsumers(t *testing.T) {
	c := NewContext(ContextConfig{})
	cq, err := c.CreateCQ(64)
	if err != nil {
		t.Fatal(err)
	}
	const n, consumers = 3000, 3
	var consumed atomic.Int64
	stop := make(chan struct{})
	exited := make(chan struct{}, consumers)
	for range consumers {
		go func() {
			defer func() { exited <- struct{}{} }()
			var wc [1]WC
			for {
				if err := cq.Wait(context.Background()); err != nil {
					t.Error(err)
					return
				}
				if cq.Poll(wc[:]) == 1 {
					consumed.Add(1)
				}
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
	}
	push := func() {
		c.mu.Lock()
		cq.push(WC{}, false)
		c.mu.Unlock()
	}
	for i := range n {
		push()
		for consumed.Load() <= int64(i) {
			runtime.Gosched()
		}
	}
	close(stop)
	deadline := time.Now().Add(10 * time.Second)
	for left := consumers; left > 0; {
		select {
		case <-exited:
			left--
		case <-time.After(time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d waiters still parked after 10 s of completions", left, consumers)
			}
			push()
		}
	}
}
