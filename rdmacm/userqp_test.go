package rdmacm_test

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/rdmacm"
	"github.com/softrdma/softrdma/sim"
)

// userQP makes an RC QP outside any ID, as a program does with ibv_create_qp
// for rping -q, and moves it to INIT itself.
func (h *host) userQP(t *testing.T) *ib.QP {
	t.Helper()
	return newUserQP(t, h.pd, h.cq, 0)
}

// newUserQP makes an RC QP on cq outside any ID (ibv_create_qp) and moves it
// to INIT itself with the access flags given.
func newUserQP(t *testing.T, pd *ib.PD, cq *ib.CQ, access ib.Access) *ib.QP {
	t.Helper()
	qp, err := pd.Context().CreateQP(pd, ib.QPInitAttr{Type: ib.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: ib.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	must(t, qp.Modify(&ib.QPAttr{QPState: ib.QPStateInit, Port: 1, AccessFlags: access},
		ib.QPAttrState|ib.QPAttrPKeyIndex|ib.QPAttrPort|ib.QPAttrAccessFlags))
	return qp
}

// toRTS moves qp through INIT, RTR and RTS with id's InitQPAttr (rping's
// rping_self_modify_qp).
func toRTS(t *testing.T, id *rdmacm.ID, qp *ib.QP) {
	t.Helper()
	for _, s := range []ib.QPState{ib.QPStateInit, ib.QPStateRTR, ib.QPStateRTS} {
		a, m, err := id.InitQPAttr(s)
		if err != nil {
			t.Fatalf("InitQPAttr(%v): %v", s, err)
		}
		if err := qp.Modify(&a, m); err != nil {
			t.Fatalf("modify to %v with %v: %v", s, m, err)
		}
	}
}

// TestRoCEUserQP: connections whose QPs the program creates and moves itself
// (rdma_init_qp_attr, conn_param.qp_num, rdma_establish), as rping -q does on
// the kernel's rdma_cm: RTR before the peer is known is refused; the server
// moves its QP with the REQ's attributes before accepting; the client gets
// CONNECT_RESPONSE (not ESTABLISHED), moves its QP, and Establish sends the
// RTU that gives the server ESTABLISHED. The QPs are then connected to each
// other (QPNs, PSNs both ways) and carry a SEND each way.
func TestRoCEUserQP(t *testing.T) {
	p := newPair(t, sim.LinkConfig{Latency: 50 * time.Microsecond})
	id := p.resolve(p.a, rdmacm.PortSpaceTCP, netip.AddrPortFrom(ipB, rpingPort))
	qa := p.a.userQP(t)
	if _, _, err := id.InitQPAttr(ib.QPStateRTR); !errors.Is(err, rdmacm.ErrInvalidState) {
		t.Errorf("InitQPAttr(RTR) before the REP: %v, want ErrInvalidState", err)
	}
	if a, m, err := id.InitQPAttr(ib.QPStateInit); err != nil || a.Port != 1 || m&ib.QPAttrPort == 0 || a.AccessFlags != 0 {
		t.Errorf("InitQPAttr(INIT) before the REP: %+v %v %v", a, m, err)
	}
	if err := id.Connect(rdmacm.ConnParam{}); !errors.Is(err, rdmacm.ErrInvalidState) {
		t.Errorf("Connect with neither a QP nor a QP number: %v", err)
	}
	cp := rdmacm.DefaultConnParam()
	cp.QPNum = qa.QPN()
	must(t, id.Connect(cp))

	req := p.request(time.Second)
	if req.Param.QPNum != qa.QPN() {
		t.Errorf("REQ names QP %#x, want %#x", req.Param.QPNum, qa.QPN())
	}
	sid := req.ID
	qb := p.b.userQP(t)
	toRTS(t, sid, qb)
	cp = rdmacm.DefaultConnParam()
	cp.QPNum = qb.QPN()
	must(t, sid.Accept(cp))

	resp := p.next(id, rdmacm.EventConnectResponse, time.Second)
	if resp.Param.QPNum != qb.QPN() {
		t.Errorf("CONNECT_RESPONSE names QP %#x, want %#x", resp.Param.QPNum, qb.QPN())
	}
	toRTS(t, id, qa)
	noEvent(t, sid)
	must(t, id.Establish())
	p.next(sid, rdmacm.EventEstablished, time.Second)
	noEvent(t, id)
	if err := id.Establish(); err == nil {
		t.Error("a second Establish succeeded")
	}

	aa, ba := qa.Query(), qb.Query()
	if qa.State() != ib.QPStateRTS || qb.State() != ib.QPStateRTS || aa.DestQPN != qb.QPN() || ba.DestQPN != qa.QPN() ||
		aa.SQPSN != ba.RQPSN || ba.SQPSN != aa.RQPSN || aa.AccessFlags&ib.AccessRemoteWrite == 0 {
		t.Errorf("QP attributes:\nA %+v\nB %+v", aa, ba)
	}
	copy(p.a.buf, "ping")
	copy(p.b.buf[1024:], "pong")
	must(t, qb.PostRecv(ib.RecvWR{WRID: 1, SGL: []ib.SGE{p.b.mr.SGE(0, 1024)}}))
	must(t, qa.PostRecv(ib.RecvWR{WRID: 2, SGL: []ib.SGE{p.a.mr.SGE(2048, 1024)}}))
	must(t, qa.PostSend(ib.SendWR{WRID: 3, Opcode: ib.WRSend, SGL: []ib.SGE{p.a.mr.SGE(0, 4)}, Signaled: true}))
	must(t, qb.PostSend(ib.SendWR{WRID: 4, Opcode: ib.WRSend, SGL: []ib.SGE{p.b.mr.SGE(1024, 4)}, Signaled: true}))
	p.completions(p.a, 2)
	p.completions(p.b, 2)
	if string(p.b.buf[:4]) != "ping" || string(p.a.buf[2048:2052]) != "pong" {
		t.Errorf("data: %q %q", p.b.buf[:4], p.a.buf[2048:2052])
	}

	must(t, id.Disconnect())
	p.next(sid, rdmacm.EventDisconnected, time.Second)
	must(t, sid.Disconnect())
	p.next(id, rdmacm.EventDisconnected, time.Second)
	must(t, id.Destroy())
	must(t, sid.Destroy())
	must(t, p.l.Destroy())
	must(t, qa.Destroy())
	must(t, qb.Destroy())
	p.settle(time.Minute)
	noLeak(t, p.a)
	noLeak(t, p.b)
}
