package rdmacm_test

import (
	"errors"
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/internal/tcploop"
	"github.com/softrdma/softrdma/rdmacm"
)

// TestIWARPAcceptUserQP: rdma_accept over iWARP naming, by conn_param.qp_num, a
// QP the program created and moved to INIT itself with its own access flags
// and receives posted (as siw's iw_cm takes it: conform-ctl's iWARP side).
// The connection runs on that QP, which keeps its access flags: the peer's
// SEND lands in the receive posted before the connection, its RDMA WRITE into
// a region the QP allows, while an RDMA READ, which the QP does not allow,
// breaks the connection. A number naming no RC QP is refused (EINVAL), in an
// accept and in a connect.
func TestIWARPAcceptUserQP(t *testing.T) {
	a, b := newIWHost(t), newIWHost(t)
	port := uint16(tcploop.FreePort(t))
	l := iwListen(t, b, port)
	id := iwResolve(t, a, port)
	qa := a.createQP(t, id)

	qb, err := b.pd.Context().CreateQP(b.pd, ib.QPInitAttr{Type: ib.QPTypeRC, SendCQ: b.cq, RecvCQ: b.cq,
		Cap: ib.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	must(t, qb.Modify(&ib.QPAttr{QPState: ib.QPStateInit, Port: 1, AccessFlags: ib.AccessRemoteWrite},
		ib.QPAttrState|ib.QPAttrPKeyIndex|ib.QPAttrPort|ib.QPAttrAccessFlags))
	must(t, qb.PostRecv(ib.RecvWR{WRID: 7, SGL: []ib.SGE{b.mr.SGE(0, 64)}}))

	must(t, id.Connect(rdmacm.DefaultConnParam()))
	req := wait(t, l, rdmacm.EventConnectRequest)
	cp := rdmacm.DefaultConnParam()
	cp.QPNum = 0xabcdef
	if err := req.ID.Accept(cp); !errors.Is(err, rdmacm.ErrInvalid) {
		t.Fatalf("accept naming no QP: %v, want ErrInvalid", err)
	}
	cp.QPNum = qb.QPN()
	must(t, req.ID.Accept(cp))
	wait(t, id, rdmacm.EventEstablished)
	wait(t, req.ID, rdmacm.EventEstablished)
	if qb.State() != ib.QPStateRTS || qb.Query().AccessFlags != ib.AccessRemoteWrite {
		t.Fatalf("the program's QP: %v, access %v; want RTS with its own REMOTE_WRITE", qb.State(), qb.Query().AccessFlags)
	}

	poll := func(h *iwHost, want ib.WCStatus) ib.WC {
		t.Helper()
		ctx, cancel := contextWithTimeout(10 * time.Second)
		defer cancel()
		must(t, h.cq.Wait(ctx))
		var wc [1]ib.WC
		if h.cq.Poll(wc[:]) != 1 || wc[0].Status != want {
			t.Fatalf("completion %+v, want %v", wc[0], want)
		}
		return wc[0]
	}
	copy(a.buf, "ping")
	must(t, qa.PostSend(ib.SendWR{WRID: 1, Opcode: ib.WRSend, SGL: []ib.SGE{a.mr.SGE(0, 4)}, Signaled: true}))
	poll(a, ib.WCSuccess)
	if wc := poll(b, ib.WCSuccess); wc.WRID != 7 || string(b.buf[:4]) != "ping" {
		t.Fatalf("receive %+v, buffer %q", wc, b.buf[:4])
	}
	copy(a.buf[100:], "written")
	must(t, qa.PostSend(ib.SendWR{WRID: 2, Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{a.mr.SGE(100, 7)}, Signaled: true,
		RemoteAddr: b.mr.Addr() + 200, RKey: b.mr.RKey()}))
	poll(a, ib.WCSuccess)
	must(t, qa.PostSend(ib.SendWR{WRID: 3, Opcode: ib.WRRDMARead, SGL: []ib.SGE{a.mr.SGE(300, 8)}, Signaled: true,
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}))
	if wc := poll(a, ib.WCRemAccessErr); wc.WRID != 3 {
		t.Errorf("READ against a QP without remote read: %+v", wc)
	}
	if got := string(b.mr.Buf()[200:207]); got != "written" { // Buf: the engine's lock, after its placement
		t.Errorf("the WRITE placed %q", got)
	}

	// The active side names its own QP too (TestIWARPConnectUserQP); a
	// number naming no RC QP is refused.
	id2 := iwResolve(t, a, port)
	cp2 := rdmacm.DefaultConnParam()
	cp2.QPNum = 0xabcdef
	if err := id2.Connect(cp2); !errors.Is(err, rdmacm.ErrInvalid) {
		t.Errorf("iWARP connect naming no QP: %v, want ErrInvalid", err)
	}
	for _, x := range []*rdmacm.ID{id, id2, req.ID, l} {
		x.Destroy()
	}
}
