package rdmacm_test

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/softrdma/softrdma/ibcm"
	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/rdmacm"
	"github.com/softrdma/softrdma/roce"
	"github.com/softrdma/softrdma/sim"
)

var (
	macA = [6]byte{2, 0, 0, 0, 0xB, 1}
	macB = [6]byte{2, 0, 0, 0, 0xB, 2}
	ipA  = netip.MustParseAddr("10.0.0.1")
	ipB  = netip.MustParseAddr("10.0.0.2")
)

const rpingPort = 7174

// pair is A (the client) and B (the server, listening on rping's port).
type pair struct {
	*world
	a, b *host
	l    *rdmacm.ID
}

func newPair(t *testing.T, cfgA sim.LinkConfig) *pair {
	w := newWorld(t, 1)
	p := &pair{world: w}
	p.a = w.host("a", macA, ipA, cfgA)
	p.b = w.host("b", macB, ipB, sim.LinkConfig{})
	p.l = w.listen(p.b, rdmacm.PortSpaceTCP, rpingPort)
	return p
}

// connect runs the client side up to Connect.
func (p *pair) connect(pd string) (*rdmacm.ID, *ib.QP) {
	p.t.Helper()
	id := p.resolve(p.a, rdmacm.PortSpaceTCP, netip.AddrPortFrom(ipB, rpingPort))
	qp := p.a.createQP(p.t, id)
	cp := rdmacm.DefaultConnParam()
	cp.PrivateData = []byte(pd)
	if err := id.Connect(cp); err != nil {
		p.t.Fatal(err)
	}
	return id, qp
}

// closeAll destroys ids, in order, and the listener, lets the CMs settle for
// d, and checks that neither host leaked (noLeak): qa and qb, the QPs A and B
// held (nil for none), must be destroyed with their IDs.
func (p *pair) closeAll(d time.Duration, qa, qb *ib.QP, ids ...*rdmacm.ID) {
	p.t.Helper()
	for _, id := range ids {
		if err := id.Destroy(); err != nil {
			p.t.Fatal(err)
		}
	}
	if err := p.l.Destroy(); err != nil {
		p.t.Fatal(err)
	}
	p.settle(d)
	for _, h := range []struct {
		host *host
		qp   *ib.QP
	}{{p.a, qa}, {p.b, qb}} {
		if h.qp != nil {
			noLeak(p.t, h.host, h.qp)
		} else {
			noLeak(p.t, h.host)
		}
	}
}

// request waits for the server's CONNECT_REQUEST.
func (p *pair) request(limit time.Duration) rdmacm.Event {
	p.t.Helper()
	return p.next(p.l, rdmacm.EventConnectRequest, limit)
}

func (p *pair) accept(ev rdmacm.Event, pd string) *ib.QP {
	p.t.Helper()
	qp := p.b.createQP(p.t, ev.ID)
	cp := rdmacm.DefaultConnParam()
	cp.PrivateData = []byte(pd)
	if err := ev.ID.Accept(cp); err != nil {
		p.t.Fatal(err)
	}
	return qp
}

// TestRoCEConnectTrafficDisconnect is the whole life of a connection through
// the rdmacm API: resolution, connect and accept with private data both
// ways, the QPs' attributes, RC SEND, WRITE and READ after ESTABLISHED,
// disconnect with DISCONNECTED and TIMEWAIT_EXIT on both sides, and nothing left.
func TestRoCEConnectTrafficDisconnect(t *testing.T) {
	p := newPair(t, sim.LinkConfig{Latency: 50 * time.Microsecond})
	id, qa := p.connect("hello from a")
	req := p.request(time.Second)
	if err := prefix(req.Param.PrivateData, "hello from a"); err != nil || len(req.Param.PrivateData) != rdmacm.MaxREQPrivateData {
		t.Errorf("CONNECT_REQUEST private data (%d bytes): %v", len(req.Param.PrivateData), err)
	}
	if req.Listener != p.l || req.ID.RemoteAddr() != id.LocalAddr() || req.ID.LocalAddr() != netip.AddrPortFrom(ipB, rpingPort) ||
		req.Param.ResponderResources != 1 || req.Param.InitiatorDepth != 1 || req.Param.RetryCount != 7 || req.Param.QPNum != qa.QPN() {
		t.Errorf("CONNECT_REQUEST %+v: remote %v (client %v) local %v", req.Param, req.ID.RemoteAddr(), id.LocalAddr(), req.ID.LocalAddr())
	}
	if port := id.LocalAddr().Port(); port < 32768 || port > 60999 {
		t.Errorf("client port %d not ephemeral", port)
	}
	sid := req.ID
	qb := p.accept(req, "hello from b")
	est := p.next(id, rdmacm.EventEstablished, time.Second)
	if err := prefix(est.Param.PrivateData, "hello from b"); err != nil || len(est.Param.PrivateData) != rdmacm.MaxREPPrivateData ||
		est.Param.QPNum != qb.QPN() {
		t.Errorf("ESTABLISHED %+v: %v", est.Param, err)
	}
	p.next(sid, rdmacm.EventEstablished, time.Second)

	// The QPs are connected to each other as rdma_cm connects them.
	aa, ba := qa.Query(), qb.Query()
	if qa.State() != ib.QPStateRTS || qb.State() != ib.QPStateRTS || aa.DestQPN != qb.QPN() || ba.DestQPN != qa.QPN() ||
		aa.SQPSN != ba.RQPSN || ba.SQPSN != aa.RQPSN || aa.PathMTU != 1024 || aa.Timeout != 19 || ba.Timeout != 19 ||
		aa.RetryCnt != 7 || aa.RNRRetry != 7 || ba.RNRRetry != 7 || aa.AH.FlowLabel != roce.CMFlowLabel(id.LocalAddr().Port(), rpingPort) ||
		ba.AH.FlowLabel != aa.AH.FlowLabel || aa.AccessFlags&ib.AccessRemoteRead == 0 || aa.MaxRdAtomic != 1 || ba.MaxDestRdAtomic != 1 {
		t.Errorf("QP attributes:\nA %+v\nB %+v", aa, ba)
	}

	// Traffic: a SEND each way, then a WRITE and a READ from A into B's buffer.
	copy(p.a.buf, "ping")
	copy(p.b.buf[1024:], "pong")
	copy(p.b.buf[8192:], "readable")
	must(t, qb.PostRecv(ib.RecvWR{WRID: 1, SGL: []ib.SGE{p.b.mr.SGE(0, 1024)}}))
	must(t, qa.PostRecv(ib.RecvWR{WRID: 2, SGL: []ib.SGE{p.a.mr.SGE(2048, 1024)}}))
	must(t, qa.PostSend(ib.SendWR{WRID: 3, Opcode: ib.WRSend, SGL: []ib.SGE{p.a.mr.SGE(0, 4)}, Signaled: true}))
	must(t, qb.PostSend(ib.SendWR{WRID: 4, Opcode: ib.WRSend, SGL: []ib.SGE{p.b.mr.SGE(1024, 4)}, Signaled: true}))
	p.completions(p.a, 2)
	p.completions(p.b, 2)
	copy(p.a.buf[4096:], "written")
	must(t, qa.PostSend(ib.SendWR{WRID: 5, Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{p.a.mr.SGE(4096, 7)}, Signaled: true,
		RemoteAddr: p.b.mr.Addr() + 16384, RKey: p.b.mr.RKey()}))
	must(t, qa.PostSend(ib.SendWR{WRID: 6, Opcode: ib.WRRDMARead, SGL: []ib.SGE{p.a.mr.SGE(12288, 8)}, Signaled: true,
		RemoteAddr: p.b.mr.Addr() + 8192, RKey: p.b.mr.RKey()}))
	p.completions(p.a, 2)
	if string(p.b.buf[:4]) != "ping" || string(p.a.buf[2048:2052]) != "pong" || string(p.b.buf[16384:16391]) != "written" ||
		string(p.a.buf[12288:12296]) != "readable" {
		t.Errorf("data: %q %q %q %q", p.b.buf[:4], p.a.buf[2048:2052], p.b.buf[16384:16391], p.a.buf[12288:12296])
	}

	// A disconnects: B hears the DREQ, answers it with its own Disconnect.
	must(t, id.Disconnect())
	p.next(sid, rdmacm.EventDisconnected, time.Second)
	must(t, sid.Disconnect())
	if ev := p.next(id, rdmacm.EventDisconnected, time.Second); ev.Status != 0 {
		t.Errorf("A DISCONNECTED status %d", ev.Status)
	}
	if qa.State() != ib.QPStateErr || qb.State() != ib.QPStateErr {
		t.Errorf("QPs %v %v after disconnect", qa.State(), qb.State())
	}
	p.next(id, rdmacm.EventTimewaitExit, 10*time.Second)
	p.next(sid, rdmacm.EventTimewaitExit, 10*time.Second)
	noEvent(t, id)
	noEvent(t, sid)
	p.closeAll(time.Minute, qa, qb, id, sid)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestRoCEReject: rdma_reject's private data reaches the client with
// REJECTED and the IB CM reason 28 (consumer reject).
func TestRoCEReject(t *testing.T) {
	p := newPair(t, sim.LinkConfig{})
	id, qa := p.connect("may I?")
	req := p.request(time.Second)
	must(t, req.ID.Reject([]byte("no you may not")))
	ev := p.next(id, rdmacm.EventRejected, time.Second)
	if ev.Status != int(ibcm.RejConsumer) || len(ev.Param.PrivateData) != rdmacm.MaxREJPrivateData || prefix(ev.Param.PrivateData, "no you may not") != nil {
		t.Errorf("REJECTED status %d private data %q", ev.Status, ev.Param.PrivateData)
	}
	if qa.State() != ib.QPStateErr {
		t.Errorf("client QP %v", qa.State())
	}
	p.closeAll(5*time.Minute, qa, nil, id, req.ID)
}

// TestRoCEUnknownService: nobody listens on the port: REJECTED with reason 8
// (invalid service ID), from the server's CM.
func TestRoCEUnknownService(t *testing.T) {
	p := newPair(t, sim.LinkConfig{})
	id := p.resolve(p.a, rdmacm.PortSpaceTCP, netip.AddrPortFrom(ipB, 9999))
	qa := p.a.createQP(t, id)
	must(t, id.Connect(rdmacm.DefaultConnParam()))
	if ev := p.next(id, rdmacm.EventRejected, time.Second); ev.Status != int(ibcm.RejInvalidServiceID) {
		t.Errorf("status %d", ev.Status)
	}
	must(t, id.Destroy())
	p.settle(time.Minute)
	noLeak(t, p.a, qa)
}

// dropFirst drops the first n frames with a CM MAD of attribute attr.
func dropFirst(attr ibcm.Attribute, n int) sim.DropFunc {
	return func(_ sim.Direction, frame []byte) bool {
		var f roce.Frame
		if n == 0 || f.DecodeEthernet(frame) != nil {
			return false
		}
		var pk ib.Packet
		if pk.Decode(f.IB) != nil {
			return false
		}
		if m, err := ibcm.MADFromPacket(&pk); err == nil && m.Attribute() == attr {
			n--
			return true
		}
		return false
	}
}

// TestRoCEHandshakeLoss: a lost REQ is retried after the CM response timeout;
// a lost REP makes the client retry its REQ, which the server answers with
// the same REP (one connection, one CONNECT_REQUEST); a lost RTU is covered
// by the client's data: the server counts it established when its REP timer
// finds the QP has received packets.
func TestRoCEHandshakeLoss(t *testing.T) {
	try := ibcm.Timeout(ibcm.DefaultResponseTimeout) + 2*ibcm.Timeout(ibcm.DefaultPacketLifeTime)
	for _, lost := range []ibcm.Attribute{ibcm.AttrREQ, ibcm.AttrREP, ibcm.AttrRTU} {
		t.Run(lost.String(), func(t *testing.T) {
			p := newPair(t, sim.LinkConfig{DropFunc: dropFirst(lost, 1)})
			start := p.net.Now()
			id, qa := p.connect("x")
			req := p.request(time.Minute)
			qb := p.accept(req, "y")
			p.next(id, rdmacm.EventEstablished, time.Minute)
			if lost == ibcm.AttrRTU {
				must(t, qb.PostRecv(ib.RecvWR{WRID: 1, SGL: []ib.SGE{p.b.mr.SGE(0, 64)}}))
				must(t, qa.PostSend(ib.SendWR{WRID: 2, Opcode: ib.WRSend, SGL: []ib.SGE{p.a.mr.SGE(0, 8)}, Signaled: true}))
			}
			p.next(req.ID, rdmacm.EventEstablished, time.Minute)
			if el := p.net.Now().Sub(start); lost != ibcm.AttrRTU && el < try {
				t.Errorf("established after %v: before the retry at %v", el, try)
			}
			p.settle(time.Minute)
			noEvent(t, p.l)
			ca, cb := p.a.agent.Counters(), p.b.agent.Counters()
			switch lost {
			case ibcm.AttrREQ:
				if ca.Retries != 1 || cb.Duplicates != 0 {
					t.Errorf("A %+v\nB %+v", ca, cb)
				}
			case ibcm.AttrREP:
				if ca.Retries != 1 || cb.Duplicates == 0 || cb.Sent[ibcm.AttrREP-ibcm.AttrREQ] < 2 {
					t.Errorf("A %+v\nB %+v", ca, cb)
				}
			case ibcm.AttrRTU:
				if cb.Retries != 0 || cb.Received[ibcm.AttrRTU-ibcm.AttrREQ] != 0 {
					t.Errorf("B %+v", cb)
				}
			}
		})
	}
}

// TestRoCEPeerVanishes: a partition in the middle of the handshake ends in
// UNREACHABLE (ETIMEDOUT) on the side left waiting, after every CM retry; its
// Destroy leaves no QP and no CM state.
func TestRoCEPeerVanishes(t *testing.T) {
	budget := time.Duration(ibcm.DefaultMaxRetries+1) *
		(ibcm.Timeout(ibcm.DefaultResponseTimeout) + 2*ibcm.Timeout(ibcm.DefaultPacketLifeTime))
	t.Run("server gone before the REQ", func(t *testing.T) {
		p := newPair(t, sim.LinkConfig{})
		p.net.Partition(p.a.port, p.b.port, p.net.Now(), time.Time{})
		id, qa := p.connect("anyone?")
		ev := p.next(id, rdmacm.EventUnreachable, 2*budget)
		if ev.Status != rdmacm.StatusTimedOut {
			t.Errorf("status %d", ev.Status)
		}
		must(t, id.Destroy())
		noLeak(t, p.a, qa)
	})
	t.Run("client gone after the REQ", func(t *testing.T) {
		p := newPair(t, sim.LinkConfig{})
		id, qa := p.connect("bye")
		req := p.request(time.Second)
		p.net.Partition(p.a.port, p.b.port, p.net.Now(), time.Time{})
		qb := p.accept(req, "")
		if ev := p.next(req.ID, rdmacm.EventUnreachable, 2*budget); ev.Status != rdmacm.StatusTimedOut {
			t.Errorf("server: status %d", ev.Status)
		}
		if ev := p.next(id, rdmacm.EventUnreachable, 2*budget); ev.Status != rdmacm.StatusTimedOut {
			t.Errorf("client: status %d", ev.Status)
		}
		p.closeAll(time.Minute, qa, qb, req.ID, id)
	})
}

// TestRoCEBacklog: with the backlog full, a REQ is dropped unanswered and the
// client's retry gets through once the server answered the first.
func TestRoCEBacklog(t *testing.T) {
	w := newWorld(t, 2)
	a := w.host("a", macA, ipA, sim.LinkConfig{})
	b := w.host("b", macB, ipB, sim.LinkConfig{})
	l, _ := b.m.CreateID(rdmacm.PortSpaceTCP)
	must(t, l.BindAddr(netip.AddrPortFrom(ipB, rpingPort)))
	must(t, l.Listen(1))
	var ids []*rdmacm.ID
	for range 2 {
		id := w.resolve(a, rdmacm.PortSpaceTCP, netip.AddrPortFrom(ipB, rpingPort))
		a.createQP(t, id)
		must(t, id.Connect(rdmacm.DefaultConnParam()))
		ids = append(ids, id)
	}
	first := w.next(l, rdmacm.EventConnectRequest, time.Second)
	w.settle(time.Second)
	noEvent(t, l)
	if b.m.Counters().RequestsRefused != 1 {
		t.Errorf("counters %+v", b.m.Counters())
	}
	b.createQP(t, first.ID)
	must(t, first.ID.Accept(rdmacm.DefaultConnParam()))
	second := w.next(l, rdmacm.EventConnectRequest, time.Minute)
	b.createQP(t, second.ID)
	must(t, second.ID.Accept(rdmacm.DefaultConnParam()))
	for _, id := range ids {
		w.next(id, rdmacm.EventEstablished, time.Minute)
	}
}

// TestRoCERequestBurst: more connection requests than an ID's event channel
// holds (64) reach a listener asked for the default backlog (0: 1024, as
// ucma_listen) before the program reads any: each is delivered, in the first
// second, none refused. Before, the 65th and later were dropped as for a full
// backlog and came again only with the client's REQ retry, seconds later
// (rdma-core's cmtime -c 100: a connect step of 6.4 s).
func TestRoCERequestBurst(t *testing.T) {
	const n = 150
	w := newWorld(t, 5)
	a := w.host("a", macA, ipA, sim.LinkConfig{})
	b := w.host("b", macB, ipB, sim.LinkConfig{})
	l, err := b.m.CreateID(rdmacm.PortSpaceTCP)
	must(t, err)
	must(t, l.BindAddr(netip.AddrPortFrom(ipB, rpingPort)))
	must(t, l.Listen(0))
	for range n {
		id := w.resolve(a, rdmacm.PortSpaceTCP, netip.AddrPortFrom(ipB, rpingPort))
		a.createQP(t, id)
		must(t, id.Connect(rdmacm.DefaultConnParam()))
	}
	w.settle(time.Second)
	if c := b.m.Counters(); c.RequestsRefused != 0 {
		t.Fatalf("%d of %d requests refused", c.RequestsRefused, n)
	}
	seen := map[*rdmacm.ID]bool{}
	for len(seen) < n {
		select {
		case ev := <-l.Events():
			if ev.Type != rdmacm.EventConnectRequest || seen[ev.ID] {
				t.Fatalf("event %v for %p (seen: %v)", ev.Type, ev.ID, seen[ev.ID])
			}
			seen[ev.ID] = true
		case <-time.After(10 * time.Second): // a safety bound: the requests are there already
			t.Fatalf("%d of %d requests delivered", len(seen), n)
		}
	}
	must(t, l.Destroy())
}

// TestRoCEUD: rdma_cm over UD (RDMA_PS_UDP): SIDR resolves the server's QPN
// and Q_Key, private data both ways, then UD SENDs each way with the
// addresses the events gave.
func TestRoCEUD(t *testing.T) {
	w := newWorld(t, 3)
	a := w.host("a", macA, ipA, sim.LinkConfig{})
	b := w.host("b", macB, ipB, sim.LinkConfig{})
	l := w.listen(b, rdmacm.PortSpaceUDP, rpingPort)
	id := w.resolve(a, rdmacm.PortSpaceUDP, netip.AddrPortFrom(ipB, rpingPort))
	qa := a.createQP(t, id)
	if qa.Type() != ib.QPTypeUD || qa.State() != ib.QPStateRTS || qa.Query().QKey != rdmacm.UDPQKey {
		t.Fatalf("UD QP %v %v %+v", qa.Type(), qa.State(), qa.Query())
	}
	must(t, id.Connect(rdmacm.ConnParam{PrivateData: []byte("ud?")}))
	req := w.next(l, rdmacm.EventConnectRequest, time.Second)
	if prefix(req.UD.PrivateData, "ud?") != nil || len(req.UD.PrivateData) != rdmacm.MaxSIDRREQPrivateData {
		t.Errorf("request private data %q", req.UD.PrivateData)
	}
	qb := b.createQP(t, req.ID)
	must(t, req.ID.Accept(rdmacm.ConnParam{PrivateData: []byte("ud!")}))
	est := w.next(id, rdmacm.EventEstablished, time.Second)
	if est.UD.QPNum != qb.QPN() || est.UD.QKey != rdmacm.UDPQKey || prefix(est.UD.PrivateData, "ud!") != nil {
		t.Fatalf("ESTABLISHED %+v", est.UD)
	}
	// A sends to B with the event's address; B answers to the sender's QP.
	copy(a.buf, "datagram")
	must(t, qb.PostRecv(ib.RecvWR{WRID: 1, SGL: []ib.SGE{b.mr.SGE(0, 40+256)}}))
	ah := est.UD.AH
	must(t, qa.PostSend(ib.SendWR{WRID: 2, Opcode: ib.WRSend, SGL: []ib.SGE{a.mr.SGE(0, 8)}, Signaled: true,
		AH: &ah, RemoteQPN: est.UD.QPNum, RemoteQKey: est.UD.QKey}))
	wcs := w.completions(b, 1)
	if wcs[0].SrcQP != qa.QPN() || string(b.buf[40:48]) != "datagram" {
		t.Fatalf("B received %v %q", wcs[0], b.buf[40:48])
	}
	w.completions(a, 1)
	copy(b.buf[1024:], "reply")
	must(t, qa.PostRecv(ib.RecvWR{WRID: 3, SGL: []ib.SGE{a.mr.SGE(1024, 40+256)}}))
	back := req.UD.AH
	must(t, qb.PostSend(ib.SendWR{WRID: 4, Opcode: ib.WRSend, SGL: []ib.SGE{b.mr.SGE(1024, 5)}, Signaled: true,
		AH: &back, RemoteQPN: wcs[0].SrcQP, RemoteQKey: rdmacm.UDPQKey}))
	w.completions(a, 1)
	if string(a.buf[1024+40:1024+45]) != "reply" {
		t.Errorf("A received %q", a.buf[1024+40:1024+45])
	}
	// A UD request nobody listens to: UNREACHABLE with the SIDR status.
	id2 := w.resolve(a, rdmacm.PortSpaceUDP, netip.AddrPortFrom(ipB, 9))
	a.createQP(t, id2)
	must(t, id2.Connect(rdmacm.ConnParam{}))
	if ev := w.next(id2, rdmacm.EventUnreachable, time.Second); ev.Status != int(ibcm.SIDRUnsupported) {
		t.Errorf("status %d", ev.Status)
	}
	// A rejected one.
	id3 := w.resolve(a, rdmacm.PortSpaceUDP, netip.AddrPortFrom(ipB, rpingPort))
	a.createQP(t, id3)
	must(t, id3.Connect(rdmacm.ConnParam{}))
	r3 := w.next(l, rdmacm.EventConnectRequest, time.Second)
	must(t, r3.ID.Reject([]byte("full")))
	if ev := w.next(id3, rdmacm.EventUnreachable, time.Second); ev.Status != int(ibcm.SIDRReject) || prefix(ev.UD.PrivateData, "full") != nil {
		t.Errorf("status %d %q", ev.Status, ev.UD.PrivateData)
	}
	for _, x := range []*rdmacm.ID{id, id2, id3, req.ID, r3.ID, l} {
		must(t, x.Destroy())
	}
	w.settle(5 * time.Minute)
	noLeak(t, a, qa)
	noLeak(t, b, qb)
}

// TestRoCEResolveErrors: an address no neighbour knows is ADDR_ERROR after
// the timeout; an address no device reaches fails at once; calls out of
// order fail with ErrInvalidState.
func TestRoCEResolveErrors(t *testing.T) {
	w := newWorld(t, 4)
	a := w.host("a", macA, ipA, sim.LinkConfig{})
	id, _ := a.m.CreateID(rdmacm.PortSpaceTCP)
	if err := id.Connect(rdmacm.ConnParam{}); err == nil {
		t.Error("connect before resolution")
	}
	must(t, id.ResolveAddr(netip.Addr{}, netip.MustParseAddrPort("10.0.0.77:1"), 2*time.Second))
	start := w.net.Now()
	ev := w.next(id, rdmacm.EventAddrError, 10*time.Second)
	if ev.Status != rdmacm.StatusHostUnreach || w.net.Now().Sub(start) > 3*time.Second {
		t.Errorf("ADDR_ERROR status %d after %v", ev.Status, w.net.Now().Sub(start))
	}
	id2, _ := a.m.CreateID(rdmacm.PortSpaceTCP)
	if err := id2.ResolveAddr(netip.Addr{}, netip.MustParseAddrPort("[fd00::1]:1"), time.Second); err == nil {
		t.Error("IPv6 destination with no IPv6 device resolved")
	}
	if err := id2.ResolveRoute(time.Second); err == nil {
		t.Error("route before address")
	}
	l1, _ := a.m.CreateID(rdmacm.PortSpaceTCP)
	must(t, l1.BindAddr(netip.AddrPortFrom(ipA, 5000)))
	l2, _ := a.m.CreateID(rdmacm.PortSpaceTCP)
	if err := l2.BindAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), 5000)); err == nil {
		t.Error("wildcard bind over a bound port")
	}
	u, _ := a.m.CreateID(rdmacm.PortSpaceUDP)
	must(t, u.BindAddr(netip.AddrPortFrom(ipA, 5000))) // another port space
}

// TestRoCEKernelREQ replays the kernel's rping client (rxe-rdma-cm-rping.pcap)
// at a softrdma server through the whole stack: the captured REQ frame on the
// wire, rdmacm's CONNECT_REQUEST from its CMA header, Accept, and the REP that
// goes back is the kernel's REP but for the server's own comm ID, QPN and PSN;
// then the captured RTU and DREQ (their comm IDs changed to the server's).
func TestRoCEKernelREQ(t *testing.T) {
	frames := captureFrames(t, "rxe-rdma-cm-rping.pcap")
	w := newWorld(t, 5)
	ip21, ip22 := netip.MustParseAddr("10.77.0.21"), netip.MustParseAddr("10.77.0.22")
	kernel := w.raw("kernel", [6]byte{0x52, 0x54, 0, 0x77, 0, 2}, ip22, sim.LinkConfig{})
	srv := w.host("server", [6]byte{0x52, 0x54, 0, 0x77, 0, 1}, ip21, sim.LinkConfig{})
	l := w.listen(srv, rdmacm.PortSpaceTCP, rpingPort)
	kreq, krep, krtu, kdreq, kdrep := kernelCM(frames)
	inject(t, kernel, kreq.raw)
	req := w.next(l, rdmacm.EventConnectRequest, time.Second)
	if req.ID.RemoteAddr() != netip.MustParseAddrPort("10.77.0.22:47139") || req.Param.QPNum != 0x1b ||
		req.Param.ResponderResources != 1 || !bytes.Equal(req.Param.PrivateData, make([]byte, 56)) {
		t.Errorf("CONNECT_REQUEST from %v %+v", req.ID.RemoteAddr(), req.Param)
	}
	qp := srv.createQP(t, req.ID)
	must(t, req.ID.Accept(rdmacm.DefaultConnParam()))
	w.settle(time.Millisecond)
	got := oneMAD(t, kernel, ibcm.AttrREP, "the server sent %d MADs")
	rep := got
	// The kernel's REP with this server's comm ID, QPN and PSN.
	likeKernel(t, "REP", rep, krep.mad, func(want ibcm.MAD) {
		want.REP().SetLocalCommID(rep.REP().LocalCommID())
		want.REP().SetLocalQPN(qp.QPN())
		want.REP().SetStartingPSN(rep.REP().StartingPSN())
	})
	if qp.State() != ib.QPStateRTS || qp.Query().DestQPN != 0x1b || qp.Query().SQPSN != kreq.mad.REQ().StartingPSN() ||
		qp.Query().RQPSN != rep.REP().StartingPSN() || qp.Query().AH.FlowLabel != kreq.mad.REQ().PrimaryPath().FlowLabel() {
		t.Errorf("server QP %v %+v", qp.State(), qp.Query())
	}
	ours := rep.REP().LocalCommID()
	inject(t, kernel, krtu.withIDs(t, func(m ibcm.MAD) { m.RTU().SetRemoteCommID(ours) }))
	w.next(req.ID, rdmacm.EventEstablished, time.Second)
	inject(t, kernel, kdreq.withIDs(t, func(m ibcm.MAD) { m.DREQ().SetRemoteCommID(ours); m.DREQ().SetRemoteQPN(qp.QPN()) }))
	w.next(req.ID, rdmacm.EventDisconnected, time.Second)
	must(t, req.ID.Disconnect())
	w.settle(time.Millisecond)
	got = oneMAD(t, kernel, ibcm.AttrDREP, "the server sent %d MADs for the DREQ")
	likeKernel(t, "DREP", got, kdrep.mad, func(want ibcm.MAD) { want.DREP().SetLocalCommID(ours) })
	w.next(req.ID, rdmacm.EventTimewaitExit, 10*time.Second)
}

// likeKernel fails the test unless got is the kernel's MAD k once edit has
// put this side's own IDs, numbers and port into a copy of it.
func likeKernel(t *testing.T, what string, got, k ibcm.MAD, edit func(want ibcm.MAD)) {
	t.Helper()
	want := ibcm.MAD(bytes.Clone(k))
	edit(want)
	if !bytes.Equal(got, want) {
		t.Errorf("%s\n%x\nwant (the kernel's, with our IDs)\n%x", what, []byte(got), []byte(want))
	}
}

// oneMAD reads the MADs p holds and fails the test (message format, given
// their number) unless there is exactly one, of attribute attr; it returns it.
func oneMAD(t *testing.T, p *sim.Port, attr ibcm.Attribute, format string) ibcm.MAD {
	t.Helper()
	out := readMADs(t, p)
	if len(out) != 1 || out[0].mad.Attribute() != attr {
		t.Fatalf(format, len(out))
	}
	return out[0].mad
}

// kernelCM picks the REQ, REP, RTU, DREQ and DREP of a captured connection
// (the last of each attribute).
func kernelCM(frames []capturedFrame) (req, rep, rtu, dreq, drep capturedFrame) {
	for _, f := range frames {
		switch f.mad.Attribute() {
		case ibcm.AttrREQ:
			req = f
		case ibcm.AttrREP:
			rep = f
		case ibcm.AttrRTU:
			rtu = f
		case ibcm.AttrDREQ:
			dreq = f
		case ibcm.AttrDREP:
			drep = f
		}
	}
	return req, rep, rtu, dreq, drep
}

// TestRoCEKernelREP connects a softrdma client through rdmacm to a kernel
// rping server replayed from rxe-rdma-cm-rping.pcap: the REQ rdmacm builds is
// the kernel client's REQ but for this client's comm ID, QPN, PSN and port
// (the CMA header's source port and the flow label made from it); the
// captured REP (addressed to this client's comm ID) connects the QP as the
// kernel's QP was connected; the RTU and DREQ are the kernel's but for the IDs.
func TestRoCEKernelREP(t *testing.T) {
	frames := captureFrames(t, "rxe-rdma-cm-rping.pcap")
	w := newWorld(t, 6)
	ip21, ip22 := netip.MustParseAddr("10.77.0.21"), netip.MustParseAddr("10.77.0.22")
	kernel := w.raw("kernel", [6]byte{0x52, 0x54, 0, 0x77, 0, 1}, ip21, sim.LinkConfig{})
	cli := w.host("client", [6]byte{0x52, 0x54, 0, 0x77, 0, 2}, ip22, sim.LinkConfig{})
	kreq, krep, krtu, kdreq, kdrep := kernelCM(frames)
	id := w.resolve(cli, rdmacm.PortSpaceTCP, netip.AddrPortFrom(ip21, rpingPort))
	qp := cli.createQP(t, id)
	must(t, id.Connect(rdmacm.DefaultConnParam())) // rping's: one READ each way, 7 and 7 retries
	w.settle(time.Millisecond)
	got := oneMAD(t, kernel, ibcm.AttrREQ, "the client sent %d MADs")
	req := got
	port := id.LocalAddr().Port()
	likeKernel(t, "REQ", req, kreq.mad, func(want ibcm.MAD) {
		want.SetTransactionID(req.TransactionID())
		r := want.REQ()
		r.SetLocalCommID(req.REQ().LocalCommID())
		r.SetLocalQPN(qp.QPN())
		r.SetStartingPSN(req.REQ().StartingPSN())
		r.PrimaryPath().SetFlowLabel(roce.CMFlowLabel(port, rpingPort))
		ibcm.CMAHeader(r.PrivateData()).SetSrcPort(port)
	})
	ours := req.REQ().LocalCommID()
	inject(t, kernel, krep.withIDs(t, func(m ibcm.MAD) { m.REP().SetRemoteCommID(ours) }))
	est := w.next(id, rdmacm.EventEstablished, time.Second)
	a := qp.Query()
	if est.Param.QPNum != 0x1b || qp.State() != ib.QPStateRTS || a.DestQPN != 0x1b || a.SQPSN != krep.mad.REP().StartingPSN() ||
		a.RQPSN != req.REQ().StartingPSN() || a.MaxRdAtomic != 1 || a.MaxDestRdAtomic != 1 || a.RNRRetry != 7 || a.Timeout != 19 {
		t.Errorf("client QP %v %+v", qp.State(), a)
	}
	w.settle(time.Millisecond)
	got = oneMAD(t, kernel, ibcm.AttrRTU, "after the REP the client sent %d MADs")
	likeKernel(t, "RTU", got, krtu.mad, func(want ibcm.MAD) {
		want.SetTransactionID(req.TransactionID())
		want.RTU().SetLocalCommID(ours)
	})
	must(t, id.Disconnect())
	w.settle(time.Millisecond)
	got = oneMAD(t, kernel, ibcm.AttrDREQ, "Disconnect sent %d MADs")
	likeKernel(t, "DREQ", got, kdreq.mad, func(want ibcm.MAD) {
		want.SetTransactionID(req.TransactionID())
		want.DREQ().SetLocalCommID(ours)
	})
	inject(t, kernel, kdrep.withIDs(t, func(m ibcm.MAD) { m.DREP().SetRemoteCommID(ours) }))
	w.next(id, rdmacm.EventDisconnected, time.Second)
	w.next(id, rdmacm.EventTimewaitExit, 10*time.Second)
	must(t, id.Destroy())
	noLeak(t, cli, qp)
}

// TestRoCEIPv6: the same over IPv6 (the CMA header's IP version 6, the GIDs
// the addresses themselves).
func TestRoCEIPv6(t *testing.T) {
	w := newWorld(t, 8)
	a6, b6 := netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")
	a := w.host("a", macA, a6, sim.LinkConfig{})
	b := w.host("b", macB, b6, sim.LinkConfig{})
	l, _ := b.m.CreateID(rdmacm.PortSpaceTCP)
	must(t, l.BindAddr(netip.AddrPortFrom(netip.IPv6Unspecified(), rpingPort)))
	must(t, l.Listen(1))
	id := w.resolve(a, rdmacm.PortSpaceTCP, netip.AddrPortFrom(b6, rpingPort))
	qa := a.createQP(t, id)
	must(t, id.Connect(rdmacm.ConnParam{PrivateData: []byte("v6"), RetryCount: 7}))
	req := w.next(l, rdmacm.EventConnectRequest, time.Second)
	if req.ID.RemoteAddr().Addr() != a6 || req.ID.LocalAddr().Addr() != b6 || prefix(req.Param.PrivateData, "v6") != nil {
		t.Errorf("request from %v to %v", req.ID.RemoteAddr(), req.ID.LocalAddr())
	}
	qb := b.createQP(t, req.ID)
	must(t, req.ID.Accept(rdmacm.ConnParam{}))
	w.next(id, rdmacm.EventEstablished, time.Second)
	w.next(req.ID, rdmacm.EventEstablished, time.Second)
	must(t, qb.PostRecv(ib.RecvWR{WRID: 1, SGL: []ib.SGE{b.mr.SGE(0, 64)}}))
	must(t, qa.PostSend(ib.SendWR{WRID: 2, Opcode: ib.WRSend, SGL: []ib.SGE{a.mr.SGE(0, 8)}, Signaled: true}))
	w.completions(b, 1)
	if ah := qa.Query().AH; netip.AddrFrom16(ah.DGID) != b6 || ah.FlowLabel != roce.CMFlowLabel(id.LocalAddr().Port(), rpingPort) {
		t.Errorf("AH %+v", ah)
	}
}

// TestRoCEBadCMAHeader replays the kernel rping client's REQ with its rdma_cm
// private-data header spoiled: a header version other than 0, an IP version that
// is neither 4 nor 6, a destination address no device here owns. No ID takes such a
// REQ (cma_check_req_qp_type / cma_save_ip_info refuse it): the listener sees no
// CONNECT_REQUEST, the kernel side gets the consumer's REJ (reason 28), and the
// manager counts a refused request.
func TestRoCEBadCMAHeader(t *testing.T) {
	var kreq capturedFrame
	for _, f := range captureFrames(t, "rxe-rdma-cm-rping.pcap") {
		if f.mad.Attribute() == ibcm.AttrREQ {
			kreq = f
		}
	}
	for _, tc := range []struct {
		name  string
		spoil func(h ibcm.CMAHeader)
	}{
		{"version 1", func(h ibcm.CMAHeader) { h.SetVersion(1) }},
		{"ip version 0", func(h ibcm.CMAHeader) { h.SetIPVersion(0) }},
		{"destination not ours", func(h ibcm.CMAHeader) { h.SetDstAddr(netip.MustParseAddr("10.77.0.99")) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, 5)
			kernel := w.raw("kernel", [6]byte{0x52, 0x54, 0, 0x77, 0, 2}, netip.MustParseAddr("10.77.0.22"), sim.LinkConfig{})
			srv := w.host("server", [6]byte{0x52, 0x54, 0, 0x77, 0, 1}, netip.MustParseAddr("10.77.0.21"), sim.LinkConfig{})
			l := w.listen(srv, rdmacm.PortSpaceTCP, rpingPort)
			inject(t, kernel, kreq.withIDs(t, func(m ibcm.MAD) { tc.spoil(ibcm.CMAHeader(m.REQ().PrivateData())) }))
			w.settle(time.Millisecond)
			select {
			case ev := <-l.Events():
				t.Fatalf("listener got %v", ev.Type)
			default:
			}
			got := oneMAD(t, kernel, ibcm.AttrREJ, "the server sent %d MADs, want one REJ")
			rej := got.REJ()
			if rej.Reason() != ibcm.RejConsumer || rej.RemoteCommID() != kreq.mad.REQ().LocalCommID() {
				t.Errorf("REJ reason %v, remote comm ID %#x", rej.Reason(), rej.RemoteCommID())
			}
			if c := srv.m.Counters(); c.RequestsRefused != 1 {
				t.Errorf("counters %+v", c)
			}
		})
	}
}

// TestRoCEQPGoneBeforeREP: the client destroys its QP while its REQ is out; the REP
// that comes back has no QP to connect, so the client rejects it (consumer reject)
// and reports CONNECT_ERROR, and the server, rejected, reports REJECTED.
func TestRoCEQPGoneBeforeREP(t *testing.T) {
	p := newPair(t, sim.LinkConfig{})
	id, _ := p.connect("")
	req := p.request(time.Second)
	must(t, id.DestroyQP())
	qb := p.accept(req, "")
	p.next(id, rdmacm.EventConnectError, time.Second)
	if ev := p.next(req.ID, rdmacm.EventRejected, time.Second); ev.Status != int(ibcm.RejConsumer) {
		t.Errorf("server REJECTED status %d, want %d", ev.Status, ibcm.RejConsumer)
	}
	if qb.State() != ib.QPStateErr {
		t.Errorf("server QP %v after the REJ", qb.State())
	}
	p.closeAll(5*time.Minute, nil, qb, id, req.ID)
}

// TestRoCERejectReason: rdma_reject_ece's REJ carries reason 35 (vendor
// option not supported) to the client's REJECTED; the kernel's rdma_cm
// takes no other reason than 28 and 35.
func TestRoCERejectReason(t *testing.T) {
	p := newPair(t, sim.LinkConfig{})
	id, qa := p.connect("")
	req := p.request(time.Second)
	if err := req.ID.RejectReason(nil, ibcm.RejTimeout); !errors.Is(err, rdmacm.ErrInvalid) {
		t.Errorf("reject with reason %d: %v, want ErrInvalid", ibcm.RejTimeout, err)
	}
	must(t, req.ID.RejectReason(nil, ibcm.RejVendorOptionNotSupported))
	if ev := p.next(id, rdmacm.EventRejected, time.Second); ev.Status != int(ibcm.RejVendorOptionNotSupported) {
		t.Errorf("REJECTED status %d, want %d", ev.Status, ibcm.RejVendorOptionNotSupported)
	}
	p.closeAll(5*time.Minute, qa, nil, id, req.ID)
}

// TestRoCENotify: Notify answers as the kernel's rdma_notify over an IB CM
// (ib_cm_notify) at each step of a connection's life.
func TestRoCENotify(t *testing.T) {
	p := newPair(t, sim.LinkConfig{})
	type check struct {
		name string
		id   *rdmacm.ID
		ev   rdmacm.NotifyEvent
		want error
	}
	run := func(cs []check) {
		t.Helper()
		for _, c := range cs {
			if err := c.id.Notify(c.ev); !errors.Is(err, c.want) && (err != nil || c.want != nil) {
				t.Errorf("%s: Notify(%d) = %v, want %v", c.name, c.ev, err, c.want)
			}
		}
	}
	id := p.resolve(p.a, rdmacm.PortSpaceTCP, netip.AddrPortFrom(ipB, rpingPort))
	run([]check{
		{"route resolved", id, rdmacm.NotifyCommEst, rdmacm.ErrInvalidState},
		{"listener", p.l, rdmacm.NotifyCommEst, rdmacm.ErrInvalidState},
	})
	qa := p.a.createQP(t, id)
	must(t, id.Connect(rdmacm.DefaultConnParam()))
	req := p.request(time.Second)
	run([]check{
		{"connecting", id, rdmacm.NotifyCommEst, rdmacm.ErrInvalidState},
		{"requested", req.ID, rdmacm.NotifyPathMig, rdmacm.ErrInvalidState},
	})
	qb := p.accept(req, "")
	p.next(id, rdmacm.EventEstablished, time.Second)
	p.next(req.ID, rdmacm.EventEstablished, time.Second)
	run([]check{
		{"established, COMM_EST", id, rdmacm.NotifyCommEst, rdmacm.ErrConnected},
		{"established, PATH_MIG", req.ID, rdmacm.NotifyPathMig, nil},
		{"established, QP_FATAL", id, rdmacm.NotifyEvent(1), rdmacm.ErrInvalidState},
	})
	must(t, id.Disconnect())
	p.next(req.ID, rdmacm.EventDisconnected, time.Second)
	run([]check{{"disconnecting", id, rdmacm.NotifyPathMig, rdmacm.ErrInvalidState}})
	p.closeAll(5*time.Minute, qa, qb, id, req.ID)
}

// TestRoCENotifyCommEst: the client's RTU is lost; the server's program,
// its QP having received, reports COMM_EST with rdma_notify: the connection
// is established at once (ESTABLISHED, as for the RTU; the kernel's
// cm_establish), a second report is ErrConnected (EISCONN), and the REP is
// not resent.
func TestRoCENotifyCommEst(t *testing.T) {
	p := newPair(t, sim.LinkConfig{DropFunc: dropFirst(ibcm.AttrRTU, 1)})
	id, qa := p.connect("")
	req := p.request(time.Second)
	qb := p.accept(req, "")
	p.next(id, rdmacm.EventEstablished, time.Second)
	noEvent(t, req.ID)
	must(t, req.ID.Notify(rdmacm.NotifyCommEst))
	p.next(req.ID, rdmacm.EventEstablished, time.Second)
	if err := req.ID.Notify(rdmacm.NotifyCommEst); !errors.Is(err, rdmacm.ErrConnected) {
		t.Errorf("second COMM_EST: %v, want ErrConnected", err)
	}
	p.settle(10 * time.Second)
	noEvent(t, req.ID)
	noEvent(t, id)
	p.closeAll(5*time.Minute, qa, qb, id, req.ID)
}

// TestRoCEPortSpaceIB: RDMA_PS_IB is a port space of its own with RC QPs, as
// in the kernel's rdma_cm (ucma_get_qp_type, cma_pernet's ib_ps): an IB
// listener binds the port a TCP listener holds, a PS_IB client's request
// (service ID 0x013F<<16 | port) reaches the IB listener and connects, and a
// TCP client's request still reaches the TCP listener. Before, CreateID
// refused the port space (rdma_create_id: EOPNOTSUPP).
func TestRoCEPortSpaceIB(t *testing.T) {
	p := newPair(t, sim.LinkConfig{})
	lib := p.listen(p.b, rdmacm.PortSpaceIB, rpingPort)
	id := p.resolve(p.a, rdmacm.PortSpaceIB, netip.AddrPortFrom(ipB, rpingPort))
	qa := p.a.createQP(t, id)
	must(t, id.Connect(rdmacm.DefaultConnParam()))
	req := p.next(lib, rdmacm.EventConnectRequest, time.Second)
	if req.ID.PortSpace() != rdmacm.PortSpaceIB || req.ID.LocalAddr() != netip.AddrPortFrom(ipB, rpingPort) {
		t.Errorf("CONNECT_REQUEST: port space %v, local %v", req.ID.PortSpace(), req.ID.LocalAddr())
	}
	qb := p.accept(req, "")
	p.next(id, rdmacm.EventEstablished, time.Second)
	p.next(req.ID, rdmacm.EventEstablished, time.Second)
	if qa.State() != ib.QPStateRTS || qb.State() != ib.QPStateRTS {
		t.Errorf("QPs %v %v", qa.State(), qb.State())
	}
	noEvent(t, p.l)

	tcp := p.resolve(p.a, rdmacm.PortSpaceTCP, netip.AddrPortFrom(ipB, rpingPort))
	qt := p.a.createQP(t, tcp)
	must(t, tcp.Connect(rdmacm.DefaultConnParam()))
	treq := p.request(time.Second)
	must(t, treq.ID.Reject(nil))
	p.next(tcp, rdmacm.EventRejected, time.Second)
	noEvent(t, lib)

	must(t, lib.Destroy())
	p.closeAll(5*time.Minute, nil, nil, id, req.ID, tcp, treq.ID)
	for _, q := range []*ib.QP{qa, qb, qt} {
		if err := q.Modify(&ib.QPAttr{QPState: ib.QPStateErr}, ib.QPAttrState); !errors.Is(err, ib.ErrDestroyed) {
			t.Errorf("QP %#x not destroyed: %v", q.QPN(), err)
		}
	}
}
