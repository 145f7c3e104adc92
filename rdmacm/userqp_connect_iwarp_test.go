package rdmacm_test

import (
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/internal/tcploop"
	"github.com/softrdma/softrdma/rdmacm"
)

// TestIWARPConnectUserQP: rdma_connect over iWARP naming, by
// conn_param.qp_num, a QP the program created and moved to INIT itself with
// receives posted, as iw_cm takes it (iw_cm_connect finds the QP by number;
// rping -q's client does this). The connection runs on that QP: it is in RTS
// once established, and the peer's SEND lands in the receive posted before
// the connection. It was refused (EOPNOTSUPP).
func TestIWARPConnectUserQP(t *testing.T) {
	a, b := newIWHost(t), newIWHost(t)
	port := uint16(tcploop.FreePort(t))
	l := iwListen(t, b, port)
	id := iwResolve(t, a, port)

	qa, err := a.pd.Context().CreateQP(a.pd, ib.QPInitAttr{Type: ib.QPTypeRC, SendCQ: a.cq, RecvCQ: a.cq,
		Cap: ib.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	must(t, qa.Modify(&ib.QPAttr{QPState: ib.QPStateInit, Port: 1, AccessFlags: ib.AccessRemoteWrite},
		ib.QPAttrState|ib.QPAttrPKeyIndex|ib.QPAttrPort|ib.QPAttrAccessFlags))
	must(t, qa.PostRecv(ib.RecvWR{WRID: 9, SGL: []ib.SGE{a.mr.SGE(0, 64)}}))

	cp := rdmacm.DefaultConnParam()
	cp.QPNum = qa.QPN()
	must(t, id.Connect(cp))
	req := wait(t, l, rdmacm.EventConnectRequest)
	qb := b.createQP(t, req.ID)
	must(t, req.ID.Accept(rdmacm.DefaultConnParam()))
	wait(t, id, rdmacm.EventEstablished)
	wait(t, req.ID, rdmacm.EventEstablished)
	if qa.State() != ib.QPStateRTS {
		t.Fatalf("the program's QP is %v, want RTS", qa.State())
	}

	copy(b.buf, "pong")
	must(t, qb.PostSend(ib.SendWR{WRID: 1, Opcode: ib.WRSend, SGL: []ib.SGE{b.mr.SGE(0, 4)}, Signaled: true}))
	ctx, cancel := contextWithTimeout(10 * time.Second)
	defer cancel()
	must(t, a.cq.Wait(ctx))
	var wc [1]ib.WC
	if a.cq.Poll(wc[:]) != 1 || wc[0].Status != ib.WCSuccess || wc[0].WRID != 9 || string(a.buf[:4]) != "pong" {
		t.Fatalf("receive %+v, buffer %q; want WR 9 with \"pong\"", wc[0], a.buf[:4])
	}
	for _, x := range []*rdmacm.ID{id, req.ID, l} {
		x.Destroy()
	}
}
