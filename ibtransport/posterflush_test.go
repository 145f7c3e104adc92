package ibtransport_test

import (
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/ibtransport/ibtest"
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

// TestPosterFlushesRetransmits: a device loop that asked NextDeadline
// before a quiet post (SetPosterFlushes: the post does not wake it) and slept
// until the answer wakes no later than the retransmission timer the post's
// Output started on the poster's thread, so a lost packet is sent again on
// time. Without the quiet QP's own deadline the loop had none and would
// sleep through the timer (the peer never answers a lost packet).
func TestPosterFlushesRetransmits(t *testing.T) {
	p := newRC(t)
	src := regMR(t, p.A.PD, pattern(64, 1), 0)
	dst := regMR(t, p.B.PD, make([]byte, 64), ib.AccessLocalWrite)
	_ = p.Wire.Run(nil, 100000) // what connecting left to send
	p.A.QP.SetPosterFlushes(true)
	clock := p.Wire.Clock
	batch := ib.NewOutputBatch(32, 0, 0)
	p.A.Ctx.Output(clock.Now(), batch) // the loop flushes, then asks when to wake
	wake, ok := p.A.Ctx.NextDeadline()
	if !ok {
		t.Fatal("no deadline: the device loop would sleep until a packet comes")
	}
	clock.Advance(time.Millisecond)
	postRecv(t, p.B.QP, ib.RecvWR{WRID: 1, SGL: []ib.SGE{dst.SGE(0, 64)}})
	post(t, p.A.QP, ib.SendWR{WRID: 2, Opcode: ib.WRSend, Signaled: true, SGL: []ib.SGE{src.SGE(0, 64)}})
	batch.Reset()
	if n := p.A.Ctx.Output(clock.Now(), batch); n != 1 { // the poster's flush; the packet is lost
		t.Fatalf("the post's Output sent %d packets, want 1", n)
	}
	timer, ok := p.A.Ctx.NextDeadline()
	if !ok || wake.After(timer) {
		t.Fatalf("the loop wakes at +%v, the retransmission timer runs out at +%v (%v)", wake.Sub(ibtest.Epoch), timer.Sub(ibtest.Epoch), ok)
	}
	clock.Set(wake)
	batch.Reset()
	if n := p.A.Ctx.Output(clock.Now(), batch); n != 0 && wake.Before(timer) {
		t.Fatalf("%d packets sent at the loop's wake-up, before the timer", n)
	}
	if next, _ := p.A.Ctx.NextDeadline(); !next.Equal(timer) {
		t.Fatalf("after waking at +%v the loop sleeps until +%v, want the timer's +%v", wake.Sub(ibtest.Epoch), next.Sub(ibtest.Epoch), timer.Sub(ibtest.Epoch))
	}
	// The timer runs out: the packet goes again, through the wire this time.
	clock.Set(timer)
	wantWC(t, complete(t, p, p.B.CQ, 1)[0], 1, ib.WCRecv, ib.WCSuccess)
	wantWC(t, complete(t, p, p.A.CQ, 1)[0], 2, ib.WCSend, ib.WCSuccess)
	if c := p.A.QP.Counters(); c.Timeouts != 1 {
		t.Errorf("%d retransmission timeouts, want 1", c.Timeouts)
	}
}
