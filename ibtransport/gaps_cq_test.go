package ibtransport_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
)

// parkedWaiters returns how many goroutines are blocked inside CQ.Wait: their
// stack is in (*CQ).Wait and their state is a channel wait (select or receive),
// that is, parked on the CQ's wake-up channel or the context, not running the
// check before it.
func parkedWaiters() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	parked := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		header, _, _ := strings.Cut(g, "\n")
		blocked := strings.Contains(header, "[select") || strings.Contains(header, "[chan receive")
		if blocked && strings.Contains(g, "ibtransport.(*CQ).Wait(") {
			parked++
		}
	}
	return parked
}

// waitParked waits (bounded) until n goroutines are parked in CQ.Wait.
func waitParked(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for parkedWaiters() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines parked in CQ.Wait after 10 s, want %d", parkedWaiters(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// startWaiters starts n goroutines that call cq.Wait(ctx) and waits until every
// one of them is parked inside it.
func startWaiters(t *testing.T, ctx context.Context, cq *ib.CQ, n int) <-chan error {
	t.Helper()
	base := parkedWaiters()
	started := make(chan struct{})
	done := make(chan error, n)
	for range n {
		go func() {
			started <- struct{}{}
			done <- cq.Wait(ctx)
		}()
	}
	for range n {
		<-started
	}
	waitParked(t, base+n)
	select {
	case err := <-done:
		t.Fatalf("Wait returned %v before anything happened", err)
	default:
	}
	return done
}

func waitDone(t *testing.T, done <-chan error, n int, want error) {
	t.Helper()
	for i := range n {
		select {
		case err := <-done:
			if !errors.Is(err, want) {
				t.Fatalf("waiter %d: Wait returned %v, want %v", i, err, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("waiter %d of %d still blocked 10 s after the wake-up", i, n)
		}
	}
}

// TestCQWaitParkedWakes: a waiter really parked in CQ.Wait (its goroutine blocked
// on the CQ's wake-up channel, checked from its stack) returns nil once a
// completion arrives, and the completion is there to poll.
func TestCQWaitParkedWakes(t *testing.T) {
	p := newRC(t)
	// A completion that was added and polled before leaves no stale "available"
	// state that lets Wait return while the CQ is empty.
	dst := regMR(t, p.B.PD, make([]byte, 16), ib.AccessLocalWrite)
	postRecv(t, p.B.QP, ib.RecvWR{WRID: 1, SGL: []ib.SGE{dst.SGE(0, 16)}})
	post(t, p.A.QP, ib.SendWR{WRID: 1, Opcode: ib.WRSend})
	complete(t, p, p.B.CQ, 1)

	done := startWaiters(t, context.Background(), p.B.CQ, 1)
	postRecv(t, p.B.QP, ib.RecvWR{WRID: 2, SGL: []ib.SGE{dst.SGE(0, 16)}})
	post(t, p.A.QP, ib.SendWR{WRID: 2, Opcode: ib.WRSend})
	if err := p.Wire.Run(func() bool { return p.B.CQ.Len() > 0 }, 10000); err != nil {
		t.Fatal(err)
	}
	waitDone(t, done, 1, nil)
	wantWC(t, complete(t, p, p.B.CQ, 1)[0], 2, ib.WCRecv, ib.WCSuccess)
}

// TestCQWaitParkedWakesAll: Wait does not consume the completion, so every parked
// waiter returns when one arrives, not just one of them.
func TestCQWaitParkedWakesAll(t *testing.T) {
	p := newRC(t)
	const waiters = 3
	done := startWaiters(t, context.Background(), p.B.CQ, waiters)
	dst := regMR(t, p.B.PD, make([]byte, 16), ib.AccessLocalWrite)
	postRecv(t, p.B.QP, ib.RecvWR{WRID: 1, SGL: []ib.SGE{dst.SGE(0, 16)}})
	post(t, p.A.QP, ib.SendWR{WRID: 1, Opcode: ib.WRSend})
	if err := p.Wire.Run(func() bool { return p.B.CQ.Len() > 0 }, 10000); err != nil {
		t.Fatal(err)
	}
	waitDone(t, done, waiters, nil)
}

// TestCQWaitParkedCancel: cancelling the context of a parked waiter returns
// context.Canceled.
func TestCQWaitParkedCancel(t *testing.T) {
	p := newRC(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := startWaiters(t, ctx, p.A.CQ, 1)
	cancel()
	waitDone(t, done, 1, context.Canceled)
}

// TestCQWaitParkedDestroy: destroying a CQ wakes a parked waiter with
// ErrDestroyed instead of leaving it blocked forever.
func TestCQWaitParkedDestroy(t *testing.T) {
	ctx := ib.NewContext(ib.ContextConfig{})
	cq, err := ctx.CreateCQ(4)
	if err != nil {
		t.Fatal(err)
	}
	done := startWaiters(t, context.Background(), cq, 1)
	if err := cq.Destroy(); err != nil {
		t.Fatal(err)
	}
	waitDone(t, done, 1, ib.ErrDestroyed)
	if err := cq.Wait(context.Background()); !errors.Is(err, ib.ErrDestroyed) {
		t.Fatalf("Wait on a destroyed CQ: %v", err)
	}
}
