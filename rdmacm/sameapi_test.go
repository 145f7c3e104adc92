package rdmacm_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/internal/tcploop"
	"github.com/softrdma/softrdma/rdmacm"
	"github.com/softrdma/softrdma/sim"
)

// cmEnd is what the transport-neutral test needs of one host.
type cmEnd struct {
	m    *rdmacm.Manager
	pd   *ib.PD
	cq   *ib.CQ
	mr   *ib.MR
	buf  []byte
	addr netip.Addr
}

// TestSameCodeBothTransports runs one body of application code, written once
// against the rdmacm API, over RoCE (IB CM on QP1, the devices and agents in
// their own goroutines) and over iWARP (MPA on loopback TCP): resolve,
// connect and accept with private data both ways, a SEND, disconnect.
func TestSameCodeBothTransports(t *testing.T) {
	t.Run("roce", func(t *testing.T) {
		w := newWorld(t, 11)
		a := w.host("a", macA, ipA, sim.LinkConfig{Latency: 100 * time.Microsecond})
		b := w.host("b", macB, ipB, sim.LinkConfig{})
		defer w.runRealtime(a, b)()
		// IB CM: the active side takes its depths from the REP (cm_rep_handler).
		connectSendDisconnect(t, cmEnd{a.m, a.pd, a.cq, a.mr, a.buf, a.ip}, cmEnd{b.m, b.pd, b.cq, b.mr, b.buf, b.ip}, rpingPort, activeDepths{1, 3})
	})
	t.Run("iwarp", func(t *testing.T) {
		a, b := newIWHost(t), newIWHost(t)
		// MPA v2: the initiator keeps its own IRD/ORD when the reply's are compatible
		// (ORD 2 <= the responder's IRD 3, the responder's ORD 1 <= IRD 4), as siw does.
		connectSendDisconnect(t, cmEnd{a.m, a.pd, a.cq, a.mr, a.buf, loopback}, cmEnd{b.m, b.pd, b.cq, b.mr, b.buf, loopback}, uint16(tcploop.FreePort(t)), activeDepths{4, 2})
	})
}

// activeDepths is what the active side ends with when it asks for 4 responder
// resources and initiator depth 2 and the passive side accepts with 3 and 1: the
// ESTABLISHED event's ResponderResources and InitiatorDepth, which are also its QP's
// MaxDestRdAtomic and MaxRdAtomic. The transports negotiate differently.
type activeDepths struct{ responder, initiator uint8 }

// connectSendDisconnect is the application: the same calls whatever the
// transport under the Manager.
func connectSendDisconnect(t *testing.T, a, b cmEnd, port uint16, want activeDepths) {
	t.Helper()
	l, err := b.m.CreateID(rdmacm.PortSpaceTCP)
	must(t, err)
	must(t, l.BindAddr(netip.AddrPortFrom(b.addr, port)))
	must(t, l.Listen(1))
	id, err := a.m.CreateID(rdmacm.PortSpaceTCP)
	must(t, err)
	must(t, id.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(b.addr, port), time.Second))
	wait(t, id, rdmacm.EventAddrResolved)
	must(t, id.ResolveRoute(time.Second))
	wait(t, id, rdmacm.EventRouteResolved)
	attr := ib.QPInitAttr{SendCQ: a.cq, RecvCQ: a.cq, Cap: ib.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}}
	qa, err := id.CreateQP(a.pd, attr)
	must(t, err)
	cp := rdmacm.DefaultConnParam()
	cp.PrivateData = []byte("hello")
	// Four distinct READ/atomic depths, so that a swap anywhere shows: the active side
	// accepts 4 and issues 2, the passive side accepts 3 and issues 1.
	cp.ResponderResources, cp.InitiatorDepth = 4, 2
	must(t, id.Connect(cp))
	req := wait(t, l, rdmacm.EventConnectRequest)
	if got := string(req.Param.PrivateData[:5]); got != "hello" {
		t.Errorf("CONNECT_REQUEST private data %q", req.Param.PrivateData)
	}
	// rdma_cm reports the peer's depths from the listener's side: what it may issue
	// (the peer's responder resources) as InitiatorDepth, and the reverse.
	if rr, id := req.Param.ResponderResources, req.Param.InitiatorDepth; rr != 2 || id != 4 {
		t.Errorf("CONNECT_REQUEST responder resources %d, initiator depth %d; want 2, 4", rr, id)
	}
	attr.SendCQ, attr.RecvCQ = b.cq, b.cq
	qb, err := req.ID.CreateQP(b.pd, attr)
	must(t, err)
	must(t, qb.PostRecv(ib.RecvWR{WRID: 1, SGL: []ib.SGE{b.mr.SGE(0, 64)}}))
	cp.PrivateData = []byte("welcome")
	cp.ResponderResources, cp.InitiatorDepth = 3, 1
	must(t, req.ID.Accept(cp))
	est := wait(t, id, rdmacm.EventEstablished)
	if len(est.Param.PrivateData) < 7 || string(est.Param.PrivateData[:7]) != "welcome" {
		t.Errorf("ESTABLISHED private data %q", est.Param.PrivateData)
	}
	if rr, id := est.Param.ResponderResources, est.Param.InitiatorDepth; rr != want.responder || id != want.initiator {
		t.Errorf("ESTABLISHED responder resources %d, initiator depth %d; want %d, %d", rr, id, want.responder, want.initiator)
	}
	wait(t, req.ID, rdmacm.EventEstablished)
	// Each QP accepts what its peer issues and issues what its peer accepts.
	for _, c := range []struct {
		side          string
		qp            *ib.QP
		dest, initiat int
	}{{"active", qa, int(want.responder), int(want.initiator)}, {"passive", qb, 3, 1}} {
		if q := c.qp.Query(); q.MaxDestRdAtomic != c.dest || q.MaxRdAtomic != c.initiat {
			t.Errorf("%s QP: MaxDestRdAtomic %d, MaxRdAtomic %d; want %d, %d", c.side, q.MaxDestRdAtomic, q.MaxRdAtomic, c.dest, c.initiat)
		}
	}
	copy(a.buf, "same code")
	must(t, qa.PostSend(ib.SendWR{WRID: 2, Opcode: ib.WRSend, SGL: []ib.SGE{a.mr.SGE(0, 9)}, Signaled: true}))
	for _, e := range []cmEnd{a, b} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var wc [1]ib.WC
		for e.cq.Poll(wc[:]) == 0 {
			must(t, e.cq.Wait(ctx))
		}
		cancel()
		if wc[0].Status != ib.WCSuccess {
			t.Fatalf("completion %v", wc[0])
		}
	}
	if string(b.buf[:9]) != "same code" {
		t.Errorf("received %q", b.buf[:9])
	}
	must(t, id.Disconnect())
	wait(t, req.ID, rdmacm.EventDisconnected)
	_ = req.ID.Disconnect() // RoCE: the passive side's DREP; iWARP: already closed
	wait(t, id, rdmacm.EventDisconnected)
	for _, x := range []*rdmacm.ID{id, req.ID, l} {
		must(t, x.Destroy())
	}
}
