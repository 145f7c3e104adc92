package ibtransport

import (
	"testing"
)

// qpnTestRig is a Context with a PD and a CQ to create QPs on.
type qpnTestRig struct {
	ctx *Context
	pd  *PD
	cq  *CQ
}

func newQPNTestRig(t *testing.T, cfg ContextConfig) *qpnTestRig {
	t.Helper()
	ctx := NewContext(cfg)
	cq, err := ctx.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	return &qpnTestRig{ctx: ctx, pd: ctx.AllocPD(), cq: cq}
}

func (r *qpnTestRig) create(t *testing.T, typ QPType) *QP {
	t.Helper()
	qp, err := r.ctx.CreateQP(r.pd, QPInitAttr{Type: typ, SendCQ: r.cq, RecvCQ: r.cq,
		Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatalf("create %s qp: %v", typ, err)
	}
	return qp
}

// TestQPNFreshContext: a fresh Context hands out consecutive QPNs starting in
// 0x11..0x20000, rxe's range (never the reserved 0 and 1), the same ones for the same seed, and
// the GSI QP is QP1 whatever the allocator's position.
func TestQPNFreshContext(t *testing.T) {
	for _, seed := range []uint64{0, 1, 42, 0xdeadbeef} {
		r := newQPNTestRig(t, ContextConfig{Seed: seed})
		gsi := r.create(t, QPTypeGSI)
		if gsi.QPN() != 1 {
			t.Fatalf("seed %d: GSI QPN %#x, want 1", seed, gsi.QPN())
		}
		var got []uint32
		for i := range 5 {
			typ := []QPType{QPTypeRC, QPTypeUC, QPTypeUD}[i%3]
			got = append(got, r.create(t, typ).QPN())
		}
		if got[0] < 0x11 || got[0] > 0x20000 {
			t.Errorf("seed %d: first QPN %#x not in 0x11..0x20000", seed, got[0])
		}
		for i := 1; i < len(got); i++ {
			if got[i] != got[0]+uint32(i) {
				t.Errorf("seed %d: QPNs %#x not consecutive", seed, got)
				break
			}
		}
		again := newQPNTestRig(t, ContextConfig{Seed: seed})
		if n := again.create(t, QPTypeRC).QPN(); n != got[0] {
			t.Errorf("seed %d: a second context's first QPN %#x, want %#x", seed, n, got[0])
		}
	}
}

// TestQPNWrap: the allocator wraps at 2^24 back to 2, skipping 0 and 1 (SMI and
// GSI) and every QPN still in use, and a destroyed QP's number is handed out again
// only once the allocator comes round to it.
func TestQPNWrap(t *testing.T) {
	r := newQPNTestRig(t, ContextConfig{Seed: 7})
	gsi := r.create(t, QPTypeGSI)
	low := r.create(t, QPTypeRC) // somewhere in 0x11..0x20000

	// Occupy 2, 3 and 5 so the wrap has to skip them: move the allocator to 2,
	// create three QPs, destroy the one at 4.
	r.ctx.nextQPN = 2
	var occupied []*QP
	for range 4 {
		occupied = append(occupied, r.create(t, QPTypeUD))
	}
	for i, qp := range occupied {
		if qp.QPN() != uint32(2+i) {
			t.Fatalf("QPN %#x after moving the allocator to 2, want %#x", qp.QPN(), 2+i)
		}
	}
	if err := occupied[2].Destroy(); err != nil { // frees QPN 4
		t.Fatal(err)
	}

	r.ctx.nextQPN = QPNMask - 2
	var got []uint32
	for range 5 {
		got = append(got, r.create(t, QPTypeRC).QPN())
	}
	want := []uint32{QPNMask - 2, QPNMask - 1, QPNMask, 4, 6}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("QPNs across the wrap %#x, want %#x", got, want)
		}
	}

	// The same when the counter itself holds 2^24 or more (only the low 24 bits
	// count) and QPN 1 is free because no GSI QP exists.
	if err := gsi.Destroy(); err != nil {
		t.Fatal(err)
	}
	r.ctx.nextQPN = 1 << 24
	if n := r.create(t, QPTypeUC).QPN(); n != 7 {
		t.Fatalf("QPN %#x from counter 2^24 with 2..6 in use, want 7", n)
	}
	r.ctx.nextQPN = 1
	if n := r.create(t, QPTypeUC).QPN(); n != 8 {
		t.Fatalf("QPN %#x from counter 1 (no GSI QP) with 2..7 in use, want 8", n)
	}

	// Every live QP has a distinct QPN above 1 (or is the GSI QP) and the QP
	// table maps it to that QP.
	seen := map[uint32]bool{}
	for n, qp := range r.ctx.qps {
		if qp.QPN() != n || n > QPNMask || (n < 2 && qp.typ != QPTypeGSI) || seen[n] {
			t.Fatalf("QP table entry %#x holds QPN %#x (type %s)", n, qp.QPN(), qp.typ)
		}
		seen[n] = true
	}
	if !seen[low.QPN()] {
		t.Fatalf("QP %#x lost from the table", low.QPN())
	}
}

// TestQPNNeverInUse: with the allocator at 2^24-1 and every QPN of a stretch
// after the wrap in use but a few, creation fills exactly the holes, and once
// MaxQP QPs exist CreateQP fails instead of reusing a number.
func TestQPNNeverInUse(t *testing.T) {
	const maxQP = 40
	r := newQPNTestRig(t, ContextConfig{Seed: 3, MaxQP: maxQP})
	r.ctx.nextQPN = 2
	var qps []*QP
	for range maxQP {
		qps = append(qps, r.create(t, QPTypeRC))
	}
	// QPNs 2..41 are in use; free 9, 20 and 41.
	holes := map[uint32]bool{}
	for _, i := range []int{7, 18, 39} {
		holes[qps[i].QPN()] = true
		if err := qps[i].Destroy(); err != nil {
			t.Fatal(err)
		}
	}
	r.ctx.nextQPN = QPNMask
	// Three QPs fit under MaxQP again: QPNMask (free), then past the wrap the
	// holes 9 and 20, never 2..8 or 10..19 which are in use.
	var got []uint32
	for range 3 {
		got = append(got, r.create(t, QPTypeRC).QPN())
	}
	want := []uint32{QPNMask, 9, 20}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("QPNs %#x, want %#x (holes %v)", got, want, holes)
		}
	}
	if _, err := r.ctx.CreateQP(r.pd, QPInitAttr{Type: QPTypeRC, SendCQ: r.cq, RecvCQ: r.cq,
		Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1}}); err == nil {
		t.Fatalf("CreateQP past MaxQP %d succeeded", maxQP)
	}
	if len(r.ctx.qps) != maxQP {
		t.Fatalf("%d QPs in the table, want %d", len(r.ctx.qps), maxQP)
	}
}
