package rdmacm_test

import (
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/rdmacm"
)

// TestModifyAsSiw: a modify of an iWARP QP that the engine's IBTA table
// refuses and siw performs as a no-op keeps the state and applies only the
// access flags (rdma_init_qp_attr's iWARP masks, rping -q); one siw refuses
// too, a bad port, and any refusal on a RoCE QP stay refused.
func TestModifyAsSiw(t *testing.T) {
	const (
		stAccPort = ib.QPAttrState | ib.QPAttrAccessFlags | ib.QPAttrPort
		rw        = ib.AccessRemoteWrite | ib.AccessRemoteRead
	)
	for _, c := range []struct {
		name     string
		external bool
		from     ib.QPState // INIT or RTS (RTS: through the engine's own path)
		to       ib.QPState
		mask     ib.QPAttrMask
		port     uint8
		ok       bool
	}{
		{"iWARP INIT→RTR with state, access, port", true, ib.QPStateInit, ib.QPStateRTR, stAccPort, 1, true},
		{"iWARP RTS→INIT", true, ib.QPStateRTS, ib.QPStateInit, stAccPort, 1, true},
		{"iWARP RTS→RTR", true, ib.QPStateRTS, ib.QPStateRTR, stAccPort, 1, true},
		{"iWARP RTS, port only", true, ib.QPStateRTS, ib.QPStateRTS, ib.QPAttrPort, 1, true},
		{"iWARP INIT→RTR on port 2", true, ib.QPStateInit, ib.QPStateRTR, stAccPort, 2, false},
		{"iWARP INIT→RTS", true, ib.QPStateInit, ib.QPStateRTS, stAccPort, 1, false},
		{"iWARP RTS→SQE", true, ib.QPStateRTS, ib.QPStateSQE, ib.QPAttrState, 1, false},
		{"RoCE INIT→RTR with state, access, port", false, ib.QPStateInit, ib.QPStateRTR, stAccPort, 1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := ib.NewContext(ib.ContextConfig{ExternalQPs: c.external})
			pd := ctx.AllocPD()
			cq, err := ctx.CreateCQ(8)
			if err != nil {
				t.Fatal(err)
			}
			q, err := ctx.CreateQP(pd, ib.QPInitAttr{Type: ib.QPTypeRC, SendCQ: cq, RecvCQ: cq,
				Cap: ib.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
			if err != nil {
				t.Fatal(err)
			}
			mustModify(t, q, ib.QPAttr{QPState: ib.QPStateInit, Port: 1}, ib.QPAttrState|ib.QPAttrPKeyIndex|ib.QPAttrPort|ib.QPAttrAccessFlags)
			if c.from == ib.QPStateRTS {
				mustModify(t, q, ib.QPAttr{QPState: ib.QPStateRTR, PathMTU: 1024, AH: ib.AddressHandle{Opaque: "peer"}},
					ib.QPAttrState|ib.QPAttrAH|ib.QPAttrPathMTU|ib.QPAttrDestQPN|ib.QPAttrRQPSN|ib.QPAttrMaxDestRdAtomic|ib.QPAttrMinRNRTimer)
				mustModify(t, q, ib.QPAttr{QPState: ib.QPStateRTS},
					ib.QPAttrState|ib.QPAttrSQPSN|ib.QPAttrTimeout|ib.QPAttrRetryCnt|ib.QPAttrRNRRetry|ib.QPAttrMaxRdAtomic)
			}
			a := ib.QPAttr{QPState: c.to, AccessFlags: rw, Port: c.port}
			err = q.Modify(&a, c.mask)
			if err == nil {
				t.Fatalf("the engine took %v→%v with %v", c.from, c.to, c.mask)
			}
			err = rdmacm.ModifyAsSiw(q, &a, c.mask, err)
			switch {
			case (err == nil) != c.ok:
				t.Fatalf("ModifyAsSiw: %v, want ok %v", err, c.ok)
			case q.State() != c.from:
				t.Errorf("the QP is %v, want %v", q.State(), c.from)
			case c.ok && c.mask&ib.QPAttrAccessFlags != 0 && q.Query().AccessFlags != rw:
				t.Errorf("access %v, want %v", q.Query().AccessFlags, rw)
			case !c.ok && q.Query().AccessFlags != 0:
				t.Errorf("a refused modify changed the access to %v", q.Query().AccessFlags)
			}
		})
	}
}

func mustModify(t *testing.T, q *ib.QP, a ib.QPAttr, m ib.QPAttrMask) {
	t.Helper()
	if err := q.Modify(&a, m); err != nil {
		t.Fatal(err)
	}
}
