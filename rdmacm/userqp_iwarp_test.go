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
	a, b, port, l, id := userQPSetup(t)
	qa := a.createQP(t, id)
	qb := iwUserQP(t, b, 7)

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

	copy(a.buf, "ping")
	must(t, qa.PostSend(ib.SendWR{WRID: 1, Opcode: ib.WRSend, SGL: []ib.SGE{a.mr.SGE(0, 4)}, Signaled: true}))
	pollOne(t, a, ib.WCSuccess)
	if wc := pollOne(t, b, ib.WCSuccess); wc.WRID != 7 || string(b.buf[:4]) != "ping" {
		t.Fatalf("receive %+v, buffer %q", wc, b.buf[:4])
	}
	copy(a.buf[100:], "written")
	must(t, qa.PostSend(ib.SendWR{WRID: 2, Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{a.mr.SGE(100, 7)}, Signaled: true,
		RemoteAddr: b.mr.Addr() + 200, RKey: b.mr.RKey()}))
	pollOne(t, a, ib.WCSuccess)
	must(t, qa.PostSend(ib.SendWR{WRID: 3, Opcode: ib.WRRDMARead, SGL: []ib.SGE{a.mr.SGE(300, 8)}, Signaled: true,
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}))
	if wc := pollOne(t, a, ib.WCRemAccessErr); wc.WRID != 3 {
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

// TestIWARPConnectUserQP: rdma_connect over iWARP naming, by
// conn_param.qp_num, a QP the program created and moved to INIT itself with
// receives posted, as iw_cm takes it (iw_cm_connect finds the QP by number;
// rping -q's client does this). The connection runs on that QP: it is in RTS
// once established, and the peer's SEND lands in the receive posted before
// the connection. It was refused (EOPNOTSUPP).
func TestIWARPConnectUserQP(t *testing.T) {
	a, b, _, l, id := userQPSetup(t)
	qa := iwUserQP(t, a, 9)

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
	if wc := pollOne(t, a, ib.WCSuccess); wc.WRID != 9 || string(a.buf[:4]) != "pong" {
		t.Fatalf("receive %+v, buffer %q; want WR 9 with \"pong\"", wc, a.buf[:4])
	}
	for _, x := range []*rdmacm.ID{id, req.ID, l} {
		x.Destroy()
	}
}

// userQPSetup is the start of the user-QP tests: two iWARP hosts, b listening
// on a free loopback port and a's ID resolved to it (not yet connected).
func userQPSetup(t *testing.T) (a, b *iwHost, port uint16, l, id *rdmacm.ID) {
	t.Helper()
	a, b = newIWHost(t), newIWHost(t)
	port = uint16(tcploop.FreePort(t))
	l = iwListen(t, b, port)
	id = iwResolve(t, a, port)
	return a, b, port, l, id
}

// iwUserQP is the program's own QP of the user-QP tests: an RC QP on h's CQ,
// moved to INIT by the program with REMOTE_WRITE access only, and a receive
// of 64 bytes (WR recvID) posted before any connection, as iw_cm takes it.
func iwUserQP(t *testing.T, h *iwHost, recvID uint64) *ib.QP {
	t.Helper()
	q := newUserQP(t, h.pd, h.cq, ib.AccessRemoteWrite)
	must(t, q.PostRecv(ib.RecvWR{WRID: recvID, SGL: []ib.SGE{h.mr.SGE(0, 64)}}))
	return q
}

// pollOne waits up to 10 s for h's CQ and takes one completion, which must
// have status want.
func pollOne(t *testing.T, h *iwHost, want ib.WCStatus) ib.WC {
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
