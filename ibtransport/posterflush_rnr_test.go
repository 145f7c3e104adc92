package ibtransport_test

import (
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/ibtransport/ibtest"
)

// TestPosterFlushesRNRWait: a quiet poster's QP (SetPosterFlushes, as the C
// library's) whose SEND meets an RNR NAK, sent by the poster's own flush and
// answered while the device loop sleeps until the deadline it asked
// NextDeadline for before the post, has the RNR wait's end as its next
// deadline, earlier than the loop's plan (the loop is kicked for it: roce
// loopPlan.late), and resends then; the receive posted meanwhile takes it.
// TestThreadsPostPoll/recv (capi/verbsdev) runs this with min_rnr_timer 1
// and rnr_retry 7, as DefaultConnOptions.
func TestPosterFlushesRNRWait(t *testing.T) {
	p := newRC(t)
	src := regMR(t, p.A.PD, pattern(64, 1), 0)
	dst := regMR(t, p.B.PD, make([]byte, 64), ib.AccessLocalWrite)
	_ = p.Wire.Run(nil, 100000) // what connecting left to send
	p.A.QP.SetPosterFlushes(true)
	clock := p.Wire.Clock
	p.A.Ctx.Output(clock.Now(), ib.NewOutputBatch(32, 0, 0)) // the loop flushes, then asks when to wake
	plan, ok := p.A.Ctx.NextDeadline()
	if !ok {
		t.Fatal("no deadline: the device loop would sleep until a packet comes")
	}
	post(t, p.A.QP, ib.SendWR{WRID: 2, Opcode: ib.WRSend, Signaled: true, SGL: []ib.SGE{src.SGE(0, 64)}})
	// The poster's flush, B's RNR NAK and its input on A, all at once.
	for i := 0; i < 8 && p.A.QP.Counters().RNRNAKsReceived == 0; i++ {
		p.Wire.Pump()
	}
	if n := p.A.QP.Counters().RNRNAKsReceived; n != 1 {
		t.Fatalf("%d RNR NAKs received, want 1", n)
	}
	rnrEnd := clock.Now().Add(ib.RNRTimerDuration(ibtest.DefaultConnOptions().MinRNRTimer))
	next, ok := p.A.Ctx.NextDeadline()
	if !ok || next.After(rnrEnd) || !next.Before(plan) {
		t.Fatalf("after the RNR NAK the next deadline is +%v (%v), want the RNR wait's end +%v, before the loop's plan +%v",
			next.Sub(ibtest.Epoch), ok, rnrEnd.Sub(ibtest.Epoch), plan.Sub(ibtest.Epoch))
	}
	postRecv(t, p.B.QP, ib.RecvWR{WRID: 1, SGL: []ib.SGE{dst.SGE(0, 64)}})
	clock.Set(next)
	wantWC(t, complete(t, p, p.B.CQ, 1)[0], 1, ib.WCRecv, ib.WCSuccess)
	wantWC(t, complete(t, p, p.A.CQ, 1)[0], 2, ib.WCSend, ib.WCSuccess)
	if got := clock.Now(); got.After(rnrEnd.Add(ib.RNRTimerDuration(ibtest.DefaultConnOptions().MinRNRTimer))) {
		t.Errorf("the SEND completed at +%v, long after the RNR wait's end +%v", got.Sub(ibtest.Epoch), rnrEnd.Sub(ibtest.Epoch))
	}
	if c := p.A.QP.Counters(); c.Timeouts != 0 {
		t.Errorf("%d retransmission timeouts, want 0", c.Timeouts)
	}
}
