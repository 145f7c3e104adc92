package ibtransport_test

import (
	"errors"
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
)

// TestZeroSizedQueues: a QP may have no receive queue (max_recv_wr 0), as rxe
// and siw allow, and, on a Context of RoCE's (not ExternalQPs), no send
// queue (max_send_wr 0), as rxe allows and siw does not ("QP must have send
// queue"). qperf asks for both: its rc_bw client has no receive queue, its
// rc_bw server no send queue.
func TestZeroSizedQueues(t *testing.T) {
	for _, tc := range []struct {
		name     string
		external bool
		cap      ib.QPCap
		ok       bool
	}{
		{"no receive queue", false, ib.QPCap{MaxSendWR: 4}, true},
		{"no send queue", false, ib.QPCap{MaxRecvWR: 4}, true},
		{"neither", false, ib.QPCap{}, true},
		{"negative receive depth", false, ib.QPCap{MaxSendWR: 4, MaxRecvWR: -1}, false},
		{"negative send depth", false, ib.QPCap{MaxSendWR: -1, MaxRecvWR: 4}, false},
		{"external, no receive queue", true, ib.QPCap{MaxSendWR: 4}, true},
		{"external, no send queue", true, ib.QPCap{MaxRecvWR: 4}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ib.NewContext(ib.ContextConfig{ExternalQPs: tc.external})
			pd := ctx.AllocPD()
			cq, err := ctx.CreateCQ(8)
			if err != nil {
				t.Fatal(err)
			}
			qp, err := ctx.CreateQP(pd, ib.QPInitAttr{Type: ib.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: tc.cap})
			if !tc.ok {
				if !errors.Is(err, ib.ErrInvalidArgument) {
					t.Fatalf("CreateQP(%+v): %v, want ErrInvalidArgument", tc.cap, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("CreateQP(%+v): %v", tc.cap, err)
			}
			qp.Destroy()
		})
	}
}

// TestSendOnlyQP: an RC QP without a receive queue (qperf's rc_bw and
// rc_rdma_write_bw clients) connects and writes to its peer.
func TestSendOnlyQP(t *testing.T) {
	qp, cq, p := rtsQP(t, nil, ib.QPCap{MaxSendWR: 4, MaxSendSGE: 1}, 8)
	src := regMR(t, p.A.PD, pattern(64, 1), ib.AccessLocalWrite)
	dst := regMR(t, p.B.PD, make([]byte, 64), ib.AccessLocalWrite|ib.AccessRemoteWrite)
	post(t, qp, ib.SendWR{WRID: 7, Opcode: ib.WRRDMAWrite, Signaled: true,
		SGL: []ib.SGE{{Addr: src.Addr(), Length: 64, LKey: src.LKey()}}, RemoteAddr: dst.Addr(), RKey: dst.RKey()})
	wantWC(t, complete(t, p, cq, 1)[0], 7, ib.WCRDMAWrite, ib.WCSuccess)
	if err := qp.PostRecv(ib.RecvWR{WRID: 8}); !errors.Is(err, ib.ErrQueueFull) {
		t.Errorf("PostRecv on a QP without a receive queue: %v, want ErrQueueFull", err)
	}
}

// TestReceiveOnlyQP: an RC QP without a send queue (qperf's rc_bw server)
// connects and takes receives; a send is refused as to a full queue.
func TestReceiveOnlyQP(t *testing.T) {
	qp, _, p := rtsQP(t, nil, ib.QPCap{MaxRecvWR: 4, MaxRecvSGE: 1}, 8)
	dst := regMR(t, p.A.PD, make([]byte, 64), ib.AccessLocalWrite)
	postRecv(t, qp, ib.RecvWR{WRID: 1, SGL: []ib.SGE{{Addr: dst.Addr(), Length: 64, LKey: dst.LKey()}}})
	if err := qp.PostSend(ib.SendWR{WRID: 2, Opcode: ib.WRSend}); !errors.Is(err, ib.ErrQueueFull) {
		t.Errorf("PostSend on a QP without a send queue: %v, want ErrQueueFull", err)
	}
}
