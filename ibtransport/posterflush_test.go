package ibtransport_test

import (
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
)

// woken reports whether ctx's Wake channel holds a signal, taking it.
func woken(ctx *ib.Context) bool {
	select {
	case <-ctx.Wake():
		return true
	default:
		return false
	}
}

// TestSetPosterFlushes: a post on a QP whose poster flushes does not signal
// Context.Wake (the C library sends from the posting thread; the signal only
// woke the device loop for nothing), and the message is still sent and
// completes; a post on any other QP signals, as do the answers a received
// packet calls for.
func TestSetPosterFlushes(t *testing.T) {
	for _, flushes := range []bool{false, true} {
		p := newRC(t)
		src := regMR(t, p.A.PD, pattern(64, 1), 0)
		dst := regMR(t, p.B.PD, make([]byte, 64), ib.AccessLocalWrite)
		p.A.QP.SetPosterFlushes(flushes)
		_ = p.Wire.Run(nil, 100000) // what connecting left to send
		woken(p.A.Ctx)
		woken(p.B.Ctx)
		postRecv(t, p.B.QP, ib.RecvWR{WRID: 1, SGL: []ib.SGE{dst.SGE(0, 64)}})
		post(t, p.A.QP, ib.SendWR{WRID: 2, Opcode: ib.WRSend, Signaled: true, SGL: []ib.SGE{src.SGE(0, 64)}})
		if got := woken(p.A.Ctx); got == flushes {
			t.Fatalf("poster flushes %v: the post signalled Wake: %v", flushes, got)
		}
		wantWC(t, complete(t, p, p.B.CQ, 1)[0], 1, ib.WCRecv, ib.WCSuccess)
		wantWC(t, complete(t, p, p.A.CQ, 1)[0], 2, ib.WCSend, ib.WCSuccess)
		// B's ACK was output on B's wake, whoever posts on A.
		_ = p.Wire.Run(nil, 100000)
		woken(p.A.Ctx)
		woken(p.B.Ctx)
		back := regMR(t, p.A.PD, make([]byte, 64), ib.AccessLocalWrite)
		postRecv(t, p.A.QP, ib.RecvWR{WRID: 3, SGL: []ib.SGE{back.SGE(0, 64)}})
		post(t, p.B.QP, ib.SendWR{WRID: 4, Opcode: ib.WRSend, Signaled: true, SGL: []ib.SGE{dst.SGE(0, 64)}})
		if !woken(p.B.Ctx) {
			t.Fatal("a post on a QP without SetPosterFlushes did not signal Wake")
		}
		wantWC(t, complete(t, p, p.A.CQ, 1)[0], 3, ib.WCRecv, ib.WCSuccess)
	}
}
