package ibtransport_test

import (
	"errors"
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/ibtransport/ibtest"
)

// TestSRQResize: Resize (ibv_modify_srq IBV_SRQ_MAX_WR) refuses what rxe
// refuses (0, beyond MaxSRQWR, below the WRs posted, below the armed limit),
// keeps the posted WRs in order across a grow and a shrink, and the new depth
// is what the SRQ then holds.
func TestSRQResize(t *testing.T) {
	p := newRC(t)
	srq, err := p.B.Ctx.CreateSRQ(p.B.PD, ib.SRQInitAttr{MaxWR: 4, MaxSGE: 1, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	dst := regMR(t, p.B.PD, make([]byte, 16*16), ib.AccessLocalWrite)
	postN := func(from, n int) error {
		for i := from; i < from+n; i++ {
			if err := srq.PostRecv(ib.RecvWR{WRID: uint64(100 + i), SGL: []ib.SGE{dst.SGE(16*(i%16), 16)}}); err != nil {
				return err
			}
		}
		return nil
	}
	if err := postN(0, 3); err != nil {
		t.Fatal(err)
	}
	max := p.B.Ctx.Config().MaxSRQWR
	for _, tt := range []struct {
		depth int
		ok    bool
	}{
		{0, false}, {-1, false}, {max + 1, false},
		{2, false}, // below the 3 WRs posted (and at the limit)
		{1, false}, // below the armed limit, 2
		{3, true},  // exactly the WRs posted: full
		{12, true}, // grow
		{6, true},  // shrink, above what is posted
	} {
		err := srq.Resize(tt.depth)
		if tt.ok != (err == nil) || err != nil && !errors.Is(err, ib.ErrInvalidArgument) {
			t.Errorf("Resize(%d): %v, want ok %v (else ErrInvalidArgument)", tt.depth, err, tt.ok)
		}
		if tt.depth == 3 && err == nil {
			if err := postN(3, 1); !errors.Is(err, ib.ErrQueueFull) {
				t.Errorf("post into a full resized SRQ: %v", err)
			}
		}
	}
	if srq.Depth() != 6 || srq.Len() != 3 {
		t.Fatalf("depth %d holding %d, want 6 holding 3", srq.Depth(), srq.Len())
	}
	if err := postN(3, 3); err != nil {
		t.Fatalf("filling to the new depth: %v", err)
	}
	if err := postN(6, 1); !errors.Is(err, ib.ErrQueueFull) {
		t.Fatalf("beyond the new depth: %v", err)
	}
	// The WRs come out in the order posted, across the resizes.
	aq, _ := connectToSRQ(t, p, srq, ib.QPCap{MaxSendWR: 8, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}, ibtest.DefaultConnOptions())
	src := regMR(t, p.A.PD, []byte("x"), 0)
	for i := range 6 {
		post(t, aq, ib.SendWR{WRID: uint64(i), Opcode: ib.WRSend, SGL: []ib.SGE{src.SGE(0, 1)}})
	}
	for i, wc := range complete(t, p, p.B.CQ, 6) {
		if wc.WRID != uint64(100+i) || wc.Status != ib.WCSuccess {
			t.Errorf("receive %d: WRID %d status %v, want %d success", i, wc.WRID, wc.Status, 100+i)
		}
	}
	if err := srq.Resize(4); err != nil {
		t.Errorf("Resize(4) of an empty SRQ: %v", err)
	}
}
