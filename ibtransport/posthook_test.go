package ibtransport_test

import (
	"context"
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
)

// TestPostHook: with a post hook set (SetPostHook), a post to a QP whose
// send queue is empty calls the hook after PostSend released the Context's
// lock, and does not signal Wake; a post behind work in flight signals Wake
// and does not call the hook (the loop sends a stream's posts together), and
// so does a post on a QP whose poster flushes (SetPosterFlushes) not call it.
func TestPostHook(t *testing.T) {
	for _, tc := range []struct {
		name          string
		busy, flushes bool
		hook, wake    bool
	}{
		{name: "idle QP", hook: true},
		{name: "work in flight", busy: true, wake: true},
		{name: "poster flushes", flushes: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newRC(t)
			src := regMR(t, p.A.PD, pattern(64, 1), 0)
			dst := regMR(t, p.B.PD, make([]byte, 64), allAccess)
			_ = p.Wire.Run(nil, 100000)
			p.A.QP.SetPosterFlushes(tc.flushes)
			calls := 0
			p.A.Ctx.SetPostHook(func() {
				calls++
				p.A.QP.State() // the Context's lock is free
			})
			write := ib.SendWR{Opcode: ib.WRRDMAWrite, Signaled: true, SGL: []ib.SGE{src.SGE(0, 64)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()}
			if tc.busy {
				write.WRID = 1
				post(t, p.A.QP, write)
				p.A.Ctx.Output(p.Wire.Clock.Now(), ib.NewOutputBatch(32, 0, 0)) // sent, not acknowledged: lost
				calls = 0
			}
			woken(p.A.Ctx)
			write.WRID = 2
			post(t, p.A.QP, write)
			if (calls == 1) != tc.hook || calls > 1 {
				t.Errorf("the hook was called %d times, want it called %v", calls, tc.hook)
			}
			if got := woken(p.A.Ctx); got != tc.wake {
				t.Errorf("Wake signalled %v, want %v", got, tc.wake)
			}
			if tc.busy {
				wantWC(t, complete(t, p, p.A.CQ, 1)[0], 1, ib.WCRDMAWrite, ib.WCSuccess)
			}
			wantWC(t, complete(t, p, p.A.CQ, 1)[0], 2, ib.WCRDMAWrite, ib.WCSuccess)
		})
	}
}

// TestWaitHook: with a wait hook set (SetWaitHook), CQ.Wait calls it, with
// the Context's lock free, each time it is about to block; without, not.
func TestWaitHook(t *testing.T) {
	ctx := ib.NewContext(ib.ContextConfig{})
	cq, err := ctx.CreateCQ(4)
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	ctx.SetWaitHook(func() {
		calls++
		cq.Len() // the Context's lock is free
	})
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for i := 1; i <= 2; i++ {
		if err := cq.Wait(done); err == nil || calls != i {
			t.Fatalf("wait %d on an empty CQ: %v, %d hook calls; want the context's error and %d calls", i, err, calls, i)
		}
	}
	ctx.SetWaitHook(nil)
	if err := cq.Wait(done); err == nil || calls != 2 {
		t.Fatalf("wait without a hook: %v, %d hook calls; want the context's error and still 2", err, calls)
	}
}
