package ibtransport

import (
	"context"
	"runtime"
	"testing"
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
