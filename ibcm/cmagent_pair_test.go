package ibcm

import (
	"bytes"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/roce"
	"github.com/softrdma/softrdma/sim"
)

// Two agents on a simulated switch: A (10.0.0.1) connects to B (10.0.0.2).

var (
	cmMACA = [6]byte{2, 0, 0, 0, 0xA, 1}
	cmMACB = [6]byte{2, 0, 0, 0, 0xA, 2}
	cmIPA  = netip.MustParseAddr("10.0.0.1")
	cmIPB  = netip.MustParseAddr("10.0.0.2")
)

const testService = 0x0000000001061c06

// madAttr returns the CM attribute of a frame carrying a MAD, or 0.
func madAttr(frame []byte) Attribute {
	var f roce.Frame
	if f.DecodeEthernet(frame) != nil {
		return 0
	}
	var p ibtransport.Packet
	if p.Decode(f.IB) != nil {
		return 0
	}
	m, err := MADFromPacket(&p)
	if err != nil {
		return 0
	}
	return m.Attribute()
}

// dropFirst drops the first n frames carrying attr.
func dropFirst(attr Attribute, n int) sim.DropFunc {
	return func(_ sim.Direction, frame []byte) bool {
		if n > 0 && madAttr(frame) == attr {
			n--
			return true
		}
		return false
	}
}

type cmPair struct {
	*cmRig
	a, b *cmNode
}

func newCMPair(t *testing.T, cfgA sim.LinkConfig) *cmPair {
	r := newCMRig(t, 3)
	p := &cmPair{cmRig: r}
	p.a = r.node("a", cmMACA, cmIPA, cfgA, 11)
	p.b = r.node("b", cmMACB, cmIPB, sim.LinkConfig{}, 12)
	return p
}

func (p *cmPair) connectParams(pd []byte) *ConnectParams {
	return &ConnectParams{
		ServiceID: testService,
		Path: PathFields{LocalLID: 0xFFFF, RemoteLID: 0xFFFF, LocalGID: cmIPA.As16(), RemoteGID: cmIPB.As16(),
			FlowLabel: roce.CMFlowLabel(40000, 7174), HopLimit: 64},
		QPN: 0x111, StartingPSN: 0xabcdef, ResponderResources: 4, InitiatorDepth: 4, RetryCount: 7, RNRRetryCount: 7,
		PrivateData: pd,
	}
}

func (p *cmPair) drive(limit time.Duration, done func() bool) {
	p.t.Helper()
	if err := p.cmRig.drive(limit, done, p.a, p.b); err != nil {
		p.t.Fatal(err)
	}
}

func (p *cmPair) settle(limit time.Duration) { p.cmRig.settle(limit, p.a, p.b) }

func (n *cmNode) has(t EventType) bool {
	for _, ev := range n.events {
		if ev.Type == t {
			return true
		}
	}
	return false
}

func (n *cmNode) last(t EventType) *Event {
	for i := len(n.events) - 1; i >= 0; i-- {
		if n.events[i].Type == t {
			return &n.events[i]
		}
	}
	return nil
}

// acceptAll makes b accept every REQ with private data pd and answer DREQs.
func (n *cmNode) acceptAll(t *testing.T, pd []byte) {
	n.react = func(ev *Event) {
		switch ev.Type {
		case EventREQ:
			if err := ev.ID.Accept(&ReplyParams{QPN: 0x222, StartingPSN: 0x123456, ResponderResources: 4, InitiatorDepth: 4,
				RNRRetryCount: 7, PrivateData: pd}); err != nil {
				t.Error(err)
			}
		case EventDREQ:
			if err := ev.ID.Disconnect(nil); err != nil {
				t.Error(err)
			}
		}
	}
}

// rtuAll makes a answer every REP with an RTU and every DREQ with a DREP.
func (n *cmNode) rtuAll(t *testing.T) {
	n.react = func(ev *Event) {
		switch ev.Type {
		case EventREP:
			if err := ev.ID.SendRTU(nil); err != nil {
				t.Error(err)
			}
		case EventDREQ:
			if err := ev.ID.Disconnect(nil); err != nil {
				t.Error(err)
			}
		}
	}
}

func (p *cmPair) listen(t *testing.T) {
	if _, err := p.b.agent.Listen(testService, p.b.handle); err != nil {
		t.Fatal(err)
	}
}

// TestAgentConnectDisconnect: private data both ways, parameters carried,
// disconnect, TIMEWAIT, nothing left.
func TestAgentConnectDisconnect(t *testing.T) {
	p := newCMPair(t, sim.LinkConfig{Latency: 100 * time.Microsecond})
	p.listen(t)
	p.b.acceptAll(t, []byte("welcome"))
	p.a.rtuAll(t)
	id, err := p.a.agent.Connect(p.connectParams([]byte("hello")), p.a.handle)
	if err != nil {
		t.Fatal(err)
	}
	p.drive(time.Second, func() bool { return p.b.has(EventRTU) })
	req := p.b.events[0].REQ
	if !bytes.Equal(req.PrivateData[:5], []byte("hello")) || len(req.PrivateData) != REQPrivateDataLen ||
		req.LocalQPN != 0x111 || req.StartingPSN != 0xabcdef || req.ResponderResources != 4 || req.MaxCMRetries != 15 {
		t.Errorf("REQ %+v", req)
	}
	rep := p.a.last(EventREP).REP
	if !bytes.Equal(rep.PrivateData[:7], []byte("welcome")) || rep.LocalQPN != 0x222 || rep.StartingPSN != 0x123456 {
		t.Errorf("REP %+v", rep)
	}
	if id.State() != StateEstablished || p.b.events[0].ID.State() != StateEstablished {
		t.Fatalf("states %v %v", id.State(), p.b.events[0].ID.State())
	}
	if err := id.Disconnect([]byte("bye")); err != nil {
		t.Fatal(err)
	}
	p.settle(time.Minute)
	if d := p.b.last(EventDREQ); d == nil || !bytes.Equal(d.PrivateData[:3], []byte("bye")) {
		t.Errorf("DREQ event %+v", d)
	}
	if got, want := p.a.eventTypes(), []EventType{EventREP, EventDREP, EventTimeWaitExit}; !slices.Equal(got, want) {
		t.Errorf("A events %v, want %v", got, want)
	}
	if got, want := p.b.eventTypes(), []EventType{EventREQ, EventRTU, EventDREQ, EventTimeWaitExit}; !slices.Equal(got, want) {
		t.Errorf("B events %v, want %v", got, want)
	}
	for _, n := range []*cmNode{p.a, p.b} {
		if c := n.agent.Counters(); c.IDs != 0 || c.Retries != 0 || c.Drops != ([numCMDropReasons]uint64{}) {
			t.Errorf("%s counters %+v", n.port.Name(), c)
		}
	}
}

// TestAgentLoss: each message of the handshake lost once is recovered by
// the retry of the side waiting for it, with exactly one connection made.
func TestAgentLoss(t *testing.T) {
	try := cmTry(DefaultResponseTimeout, DefaultPacketLifeTime)
	for _, tc := range []struct {
		lost      Attribute
		retriesA  uint64
		retriesB  uint64
		dupsB     uint64
		dupsA     uint64
		minTime   time.Duration
		aEvents   []EventType
		bEventsIn []EventType
	}{
		// The REQ is resent after the response timeout.
		{lost: AttrREQ, retriesA: 1, minTime: try},
		// The REQ is resent; B, in REP_SENT, resends the REP (duplicate REQ).
		// B's own REP timer fires at the same time, and A sees that REP twice.
		{lost: AttrREP, retriesA: 1, retriesB: 1, dupsB: 2, dupsA: 1, minTime: try},
		// B resends the REP; A, established, resends the RTU (duplicate REP).
		{lost: AttrRTU, retriesB: 1, dupsA: 1},
	} {
		t.Run(tc.lost.String(), func(t *testing.T) {
			p := newCMPair(t, sim.LinkConfig{DropFunc: dropFirst(tc.lost, 1)})
			p.listen(t)
			p.b.acceptAll(t, nil)
			p.a.rtuAll(t)
			start := p.net.Now()
			id, err := p.a.agent.Connect(p.connectParams(nil), p.a.handle)
			if err != nil {
				t.Fatal(err)
			}
			p.drive(time.Minute, func() bool { return p.b.has(EventRTU) && id.State() == StateEstablished })
			if el := p.net.Now().Sub(start); el < tc.minTime {
				t.Errorf("connected after %v, before the retry time %v", el, tc.minTime)
			}
			p.settle(time.Minute)
			ca, cb := p.a.agent.Counters(), p.b.agent.Counters()
			if ca.Retries != tc.retriesA || cb.Retries != tc.retriesB || cb.Duplicates != tc.dupsB || ca.Duplicates != tc.dupsA {
				t.Errorf("A %+v\nB %+v", ca, cb)
			}
			if n := countEvents(p.b, EventREQ); n != 1 {
				t.Errorf("B saw %d REQs", n)
			}
		})
	}
}

func countEvents(n *cmNode, t EventType) int {
	k := 0
	for _, ev := range n.events {
		if ev.Type == t {
			k++
		}
	}
	return k
}

// TestAgentMRA: B's consumer takes longer than A's response timeout; the
// duplicate REQ gets an MRA, A waits the service timeout, and B's late REP
// connects.
func TestAgentMRA(t *testing.T) {
	p := newCMPair(t, sim.LinkConfig{})
	p.listen(t)
	p.a.rtuAll(t)
	var pending *ID
	p.b.react = func(ev *Event) {
		if ev.Type == EventREQ {
			pending = ev.ID
		}
	}
	id, err := p.a.agent.Connect(p.connectParams(nil), p.a.handle)
	if err != nil {
		t.Fatal(err)
	}
	try := cmTry(DefaultResponseTimeout, DefaultPacketLifeTime)
	p.drive(2*try, func() bool { return id.State() == StateMRAREQRcvd })
	if pending.State() != StateMRAREQSent || !p.a.has(EventMRA) || p.a.last(EventMRA).ServiceTimeout != DefaultMRAServiceTimeout {
		t.Fatalf("B %v, A events %v", pending.State(), p.a.eventTypes())
	}
	// A's timer is now the MRA's service timeout: far beyond its retries.
	p.net.RunFor(20 * try)
	p.drive(time.Second, func() bool { return true })
	if id.State() != StateMRAREQRcvd || p.a.has(EventREQError) {
		t.Fatalf("A gave up during the MRA's time: %v %v", id.State(), p.a.eventTypes())
	}
	if err := pending.Accept(&ReplyParams{QPN: 0x222}); err != nil {
		t.Fatal(err)
	}
	p.drive(time.Second, func() bool { return p.b.has(EventRTU) })
	if id.State() != StateEstablished {
		t.Errorf("A %v", id.State())
	}
}

// TestAgentReject: a consumer's REJ with ARI and private data reaches A; a
// lost REJ is answered again from TIMEWAIT when A's REQ comes back.
func TestAgentReject(t *testing.T) {
	for _, lost := range []int{0, 1} {
		p := newCMPair(t, sim.LinkConfig{DropFunc: dropFirst(AttrREJ, lost)})
		p.listen(t)
		p.b.react = func(ev *Event) {
			if ev.Type == EventREQ {
				if err := ev.ID.Reject(RejConsumer, []byte{1, 2}, []byte("go away")); err != nil {
					t.Error(err)
				}
			}
		}
		id, err := p.a.agent.Connect(p.connectParams(nil), p.a.handle)
		if err != nil {
			t.Fatal(err)
		}
		p.drive(time.Minute, func() bool { return p.a.has(EventREJ) })
		ev := p.a.last(EventREJ)
		if ev.Reason != RejConsumer || !bytes.Equal(ev.ARI, []byte{1, 2}) || !bytes.Equal(ev.PrivateData[:7], []byte("go away")) ||
			len(ev.PrivateData) != REJPrivateDataLen {
			t.Errorf("REJ event %+v", ev)
		}
		if id.State() != StateIdle || countEvents(p.b, EventREQ) != 1 {
			t.Errorf("lost %d: A %v, B events %v", lost, id.State(), p.b.eventTypes())
		}
		p.settle(5 * time.Minute) // B holds the REJ through A's retry budget
		if p.a.agent.Counters().IDs != 0 || p.b.agent.Counters().IDs != 0 || p.b.agent.Counters().Duplicates != uint64(lost) {
			t.Errorf("lost %d: counters %+v %+v", lost, p.a.agent.Counters(), p.b.agent.Counters())
		}
	}
}

// TestAgentREQRejects: REQs the agent cannot take (the kernel's, edited)
// get a REJ with the reason IBTA names and no connection is made.
func TestAgentREQRejects(t *testing.T) {
	var kreq MAD
	for _, c := range captureCM(t, "rxe-rdma-cm-rping.pcap") {
		if c.mad.Attribute() == AttrREQ {
			kreq = c.mad
		}
	}
	other := netip.MustParseAddr("10.77.0.99")
	otherGID := other.As16()
	for _, tc := range []struct {
		name   string
		edit   func(r REQ)
		listen bool
		reason RejectReason
		ari    []byte
	}{
		{"unknown service", func(REQ) {}, false, RejInvalidServiceID, nil},
		{"not our GID", func(r REQ) { r.PrimaryPath().SetRemoteGID(other.As16()) }, true, RejInvalidGID, otherGID[:]},
		{"MTU 4096 > 1024", func(r REQ) { r.SetPathMTU(5) }, true, RejInvalidMTU, []byte{3 << 4}},
		{"MTU code 0", func(r REQ) { r.SetPathMTU(0) }, true, RejInvalidMTU, []byte{3 << 4}},
		{"RD", func(r REQ) { r.SetTransportServiceType(2) }, true, RejInvalidTransportType, nil},
		{"XRC", func(r REQ) { r.SetExtendedTransportType(1) }, true, RejInvalidTransportType, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newCMRig(t, 4)
			peer := r.raw("client", mac22, ip22, sim.LinkConfig{})
			srv := r.node("server", mac21, ip21, sim.LinkConfig{}, 9)
			if tc.listen {
				if _, err := srv.agent.Listen(testService, srv.handle); err != nil {
					t.Fatal(err)
				}
			}
			m := MAD(bytes.Clone(kreq))
			tc.edit(m.REQ())
			if err := srv.agent.HandleMAD(r.net.Now(), m, MADAddress{Remote: ip22, Local: ip21, RemoteQPN: 1}); err != nil {
				t.Fatal(err)
			}
			r.flush(srv)
			out := received(t, peer)
			if len(out) != 1 || out[0].mad.Attribute() != AttrREJ {
				t.Fatalf("answer: %d MADs", len(out))
			}
			j := out[0].mad.REJ()
			if j.Reason() != tc.reason || !bytes.Equal(j.ARI(), tc.ari) || j.RemoteCommID() != kreq.REQ().LocalCommID() ||
				j.LocalCommID() != 0 || j.MessageRejected() != cmRejectedREQ || out[0].mad.TransactionID() != kreq.TransactionID() {
				t.Errorf("REJ %v ARI %x comm %#x/%#x msg %d, want %v ARI %x", j.Reason(), j.ARI(), j.LocalCommID(), j.RemoteCommID(),
					j.MessageRejected(), tc.reason, tc.ari)
			}
			if c := srv.agent.Counters(); c.IDs != 0 || c.Rejects != 1 || len(srv.events) != 0 {
				t.Errorf("counters %+v events %v", c, srv.eventTypes())
			}
		})
	}
}
