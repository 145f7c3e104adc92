package ibtransport_test

import (
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
)

// TestSetQuietWakes: while a Context's wakes are quiet, a received SEND
// queues its ACK without signalling Wake, and Output still sends it; once
// they are not, the next one signals again.
func TestSetQuietWakes(t *testing.T) {
	p := newRC(t)
	src := regMR(t, p.A.PD, pattern(64, 1), 0)
	dst := regMR(t, p.B.PD, make([]byte, 128), ib.AccessLocalWrite)
	_ = p.Wire.Run(nil, 100000) // what connecting left to send
	for i, quiet := range []bool{true, false} {
		postRecv(t, p.B.QP, ib.RecvWR{WRID: uint64(i), SGL: []ib.SGE{dst.SGE(64*i, 64)}})
		post(t, p.A.QP, ib.SendWR{WRID: uint64(10 + i), Opcode: ib.WRSend, Signaled: true, SGL: []ib.SGE{src.SGE(0, 64)}})
		p.B.Ctx.SetQuietWakes(quiet)
		woken(p.B.Ctx)
		for p.B.CQ.Len() == 0 && p.Wire.Pump() {
		}
		// B has received: its ACK is queued.
		if p.B.CQ.Len() != 1 {
			t.Fatalf("quiet %v: B has %d completions", quiet, p.B.CQ.Len())
		}
		if got := woken(p.B.Ctx); got == quiet {
			t.Errorf("quiet %v: B's Wake signalled: %v", quiet, got)
		}
		p.B.Ctx.SetQuietWakes(false)
		wantWC(t, complete(t, p, p.A.CQ, 1)[0], uint64(10+i), ib.WCSend, ib.WCSuccess) // the ACK went out
		wantWC(t, complete(t, p, p.B.CQ, 1)[0], uint64(i), ib.WCRecv, ib.WCSuccess)
	}
}
