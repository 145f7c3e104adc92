package ibtransport_test

import (
	"errors"
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
)

// TestCQResize: Resize (ibv_resize_cq) refuses what rxe refuses (0, beyond
// MaxCQE, below the completions waiting), keeps the waiting completions in
// order across a ring that has wrapped, a shrink to exactly what waits, a
// grow and a shrink, and the new depth is what the CQ then holds: one more
// completion than that overruns it.
func TestCQResize(t *testing.T) {
	p := newRC(t)
	cq := p.A.CQ
	dst := regMR(t, p.B.PD, make([]byte, 64), ib.AccessLocalWrite|ib.AccessRemoteWrite)
	src := regMR(t, p.A.PD, []byte("x"), 0)
	write := func(from, n int) {
		t.Helper()
		for i := from; i < from+n; i++ {
			post(t, p.A.QP, ib.SendWR{WRID: uint64(i), Opcode: ib.WRRDMAWrite, Signaled: true,
				SGL: []ib.SGE{src.SGE(0, 1)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()})
		}
		_ = p.Wire.Run(nil, 100000)
	}
	if err := cq.Resize(4); err != nil {
		t.Fatalf("Resize(4) of an empty CQ: %v", err)
	}
	// Completions 0..2 at ring slots 0..2; polling two and adding 3 and 4
	// wraps the ring: 2, 3, 4 wait at slots 2, 3, 0.
	write(0, 3)
	var wc [8]ib.WC
	if n := cq.Poll(wc[:2]); n != 2 {
		t.Fatalf("polled %d, want 2", n)
	}
	write(3, 2)
	max := p.A.Ctx.Config().MaxCQE
	for _, tt := range []struct {
		depth int
		ok    bool
	}{
		{0, false}, {-1, false}, {max + 1, false},
		{2, false}, // below the 3 completions waiting
		{3, true},  // exactly what waits: full
		{16, true}, // grow
		{5, true},  // shrink, above what waits
	} {
		err := cq.Resize(tt.depth)
		if tt.ok != (err == nil) || err != nil && !errors.Is(err, ib.ErrInvalidArgument) {
			t.Errorf("Resize(%d): %v, want ok %v (else ErrInvalidArgument)", tt.depth, err, tt.ok)
		}
	}
	if cq.Depth() != 5 || cq.Len() != 3 {
		t.Fatalf("depth %d holding %d, want 5 holding 3", cq.Depth(), cq.Len())
	}
	write(5, 2) // fills the 5
	if cq.Err() != nil || cq.Len() != 5 {
		t.Fatalf("holding %d (%v), want 5", cq.Len(), cq.Err())
	}
	n := cq.Poll(wc[:])
	for i := range n {
		if wc[i].WRID != uint64(2+i) || wc[i].Status != ib.WCSuccess {
			t.Errorf("completion %d: WRID %d status %v, want %d success", i, wc[i].WRID, wc[i].Status, 2+i)
		}
	}
	if n != 5 {
		t.Fatalf("polled %d, want 5", n)
	}
	write(7, 6) // one more than the depth
	if !errors.Is(cq.Err(), ib.ErrCQOverrun) {
		t.Fatalf("6 completions in a CQ resized to 5: %v, want an overrun", cq.Err())
	}
	if err := p.A.QP.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := cq.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := cq.Resize(8); !errors.Is(err, ib.ErrDestroyed) {
		t.Errorf("Resize of a destroyed CQ: %v, want ErrDestroyed", err)
	}
}
