package ibtransport_test

import (
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
)

// TestOnCompletion: the hook runs once for every completion added to any CQ
// of the Context (each side's here: B's receive, A's send), and not after it
// is removed.
func TestOnCompletion(t *testing.T) {
	p := newRC(t)
	src := regMR(t, p.A.PD, make([]byte, 4), 0)
	dst := regMR(t, p.B.PD, make([]byte, 16), ib.AccessLocalWrite)
	var a, b int
	p.A.Ctx.OnCompletion(func() { a++ })
	p.B.Ctx.OnCompletion(func() { b++ })
	if p.A.CQ.Context() != p.A.Ctx {
		t.Fatal("CQ.Context is not the context that made it")
	}
	for i := range 3 {
		postRecv(t, p.B.QP, ib.RecvWR{WRID: uint64(i), SGL: []ib.SGE{dst.SGE(0, 16)}})
		post(t, p.A.QP, ib.SendWR{WRID: uint64(i), Opcode: ib.WRSend, Signaled: true, SGL: []ib.SGE{src.SGE(0, 4)}})
		complete(t, p, p.B.CQ, 1)
		complete(t, p, p.A.CQ, 1)
		if a != i+1 || b != i+1 {
			t.Fatalf("after %d messages: hooks ran %d (sender) and %d (receiver) times", i+1, a, b)
		}
	}
	p.A.Ctx.OnCompletion(nil)
	postRecv(t, p.B.QP, ib.RecvWR{WRID: 9, SGL: []ib.SGE{dst.SGE(0, 16)}})
	post(t, p.A.QP, ib.SendWR{WRID: 9, Opcode: ib.WRSend, Signaled: true, SGL: []ib.SGE{src.SGE(0, 4)}})
	complete(t, p, p.A.CQ, 1)
	if a != 3 {
		t.Fatalf("removed hook ran: %d", a)
	}
}
