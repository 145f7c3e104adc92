package ibcm

import (
	"bytes"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/softrdma/softrdma/header"
	"github.com/softrdma/softrdma/sim"
)

// TestAgentPeerVanishes: a partition in the middle of the handshake ends in
// a timeout on the side left waiting, after every retry, and in no ID left.
func TestAgentPeerVanishes(t *testing.T) {
	try := cmTry(DefaultResponseTimeout, DefaultPacketLifeTime)
	budget := time.Duration(DefaultMaxRetries+1) * try
	t.Run("before REQ", func(t *testing.T) {
		p := newCMPair(t, sim.LinkConfig{})
		p.listen(t)
		p.net.Partition(p.a.port, p.b.port, p.net.Now(), time.Time{})
		start := p.net.Now()
		id, err := p.a.agent.Connect(p.connectParams(nil), p.a.handle)
		if err != nil {
			t.Fatal(err)
		}
		p.drive(2*budget, func() bool { return p.a.has(EventREQError) })
		if el := p.net.Now().Sub(start); el < budget || el > budget+time.Second {
			t.Errorf("gave up after %v, want %v", el, budget)
		}
		c := p.a.agent.Counters()
		if id.State() != StateIdle || c.IDs != 0 || c.Retries != DefaultMaxRetries || c.Timeouts != 1 ||
			c.Sent[AttrREJ-AttrREQ] != 1 || c.Sent[0] != DefaultMaxRetries+1 {
			t.Errorf("A %v %+v", id.State(), c)
		}
	})
	t.Run("after REQ", func(t *testing.T) {
		p := newCMPair(t, sim.LinkConfig{})
		p.listen(t)
		p.a.react = func(ev *Event) {
			if ev.Type == EventREP {
				// A vanishes after the REP: no RTU, ever.
				p.net.Partition(p.a.port, p.b.port, p.net.Now(), time.Time{})
			}
		}
		p.b.acceptAll(t, nil)
		if _, err := p.a.agent.Connect(p.connectParams(nil), p.a.handle); err != nil {
			t.Fatal(err)
		}
		p.drive(2*budget, func() bool { return p.b.has(EventREPError) })
		c := p.b.agent.Counters()
		// B's REP timed out: it rejects with reason timeout so that A, should it come
		// back, does not keep a half-open connection.
		if c.IDs != 0 || c.Retries != DefaultMaxRetries || c.Timeouts != 1 || c.Sent[AttrREJ-AttrREQ] != 1 {
			t.Errorf("B %+v", c)
		}
		if got, want := p.b.eventTypes(), []EventType{EventREQ, EventREPError}; !slices.Equal(got, want) {
			t.Errorf("B events %v", got)
		}
	})
	t.Run("established, DREQ unanswered", func(t *testing.T) {
		p, id, _ := newEstablishedPair(t, sim.LinkConfig{})
		p.net.Partition(p.a.port, p.b.port, p.net.Now(), time.Time{})
		id.Disconnect(nil)
		p.drive(2*budget, func() bool { return p.a.has(EventTimeWaitExit) })
		if got, want := p.a.eventTypes(), []EventType{EventREP, EventDREQError, EventTimeWaitExit}; !slices.Equal(got, want) {
			t.Errorf("A events %v", got)
		}
		if p.a.agent.Counters().IDs != 0 {
			t.Error("A keeps the connection")
		}
	})
}

// newEstablishedPair returns a pair on links cfg whose A has connected to B
// (B accepts, A sends the RTU), driven until B has the RTU, with A's and B's
// IDs of the connection.
func newEstablishedPair(t *testing.T, cfg sim.LinkConfig) (p *cmPair, a, b *ID) {
	t.Helper()
	p = newCMPair(t, cfg)
	p.listen(t)
	p.b.acceptAll(t, nil)
	p.a.rtuAll(t)
	a, _ = p.a.agent.Connect(p.connectParams(nil), p.a.handle)
	p.drive(time.Second, func() bool { return p.b.has(EventRTU) })
	return p, a, p.b.events[0].ID
}

// TestAgentDisconnectRaces: simultaneous DREQs, a lost DREP (answered again
// from TIMEWAIT), a DREQ for a connection already gone (answered anyway).
func TestAgentDisconnectRaces(t *testing.T) {
	t.Run("simultaneous", func(t *testing.T) {
		p, a, b := newEstablishedPair(t, sim.LinkConfig{Latency: time.Millisecond})
		p.a.react, p.b.react = nil, nil
		a.Disconnect(nil)
		b.Disconnect(nil)
		p.settle(time.Minute)
		for _, n := range []*cmNode{p.a, p.b} {
			if !n.has(EventDREQ) || !n.has(EventTimeWaitExit) || n.agent.Counters().IDs != 0 || n.agent.Counters().Retries != 0 {
				t.Errorf("%s: %v %+v", n.port.Name(), n.eventTypes(), n.agent.Counters())
			}
		}
	})
	t.Run("DREP lost", func(t *testing.T) {
		p, a, _ := newEstablishedPair(t, sim.LinkConfig{DropFunc: dropFirst(AttrDREP, 1)})
		a.Disconnect(nil)
		p.drive(time.Minute, func() bool { return p.a.has(EventDREP) })
		if c := p.a.agent.Counters(); c.Retries != 1 {
			t.Errorf("A %+v", c)
		}
		// B's TIMEWAIT (2.1 s) is over before A's DREQ comes again (6.4 s), as
		// with the kernel's timers: B answers the DREQ it no longer knows.
		if c := p.b.agent.Counters(); c.Drops[DropUnknownID] != 1 || c.Sent[AttrDREP-AttrREQ] != 2 {
			t.Errorf("B %+v", c)
		}
	})
	t.Run("DREP lost, long TIMEWAIT", func(t *testing.T) {
		p, a, _ := newEstablishedPair(t, sim.LinkConfig{DropFunc: dropFirst(AttrDREP, 1)})
		p.b.agent.cfg.TimeWait = time.Minute
		a.Disconnect(nil)
		p.drive(time.Minute, func() bool { return p.a.has(EventDREP) })
		// B is still in TIMEWAIT: it resends the DREP it sent.
		if c := p.b.agent.Counters(); c.Duplicates != 1 || c.Drops[DropUnknownID] != 0 || c.Sent[AttrDREP-AttrREQ] != 2 {
			t.Errorf("B %+v", c)
		}
	})
	t.Run("DREQ for a forgotten connection", func(t *testing.T) {
		p, a, b := newEstablishedPair(t, sim.LinkConfig{})
		p.b.agent.mu.Lock()
		p.b.agent.remove(b) // B forgot (restarted its CM)
		p.b.agent.mu.Unlock()
		a.Disconnect(nil)
		p.drive(time.Minute, func() bool { return p.a.has(EventDREP) })
		if c := p.b.agent.Counters(); c.Drops[DropUnknownID] != 1 || c.Sent[AttrDREP-AttrREQ] != 1 {
			t.Errorf("B %+v", c)
		}
	})
}

// TestAgentStale: a REQ from a QP that has a connection here already (its
// node restarted) is rejected as stale and the old connection is torn down.
func TestAgentStale(t *testing.T) {
	p, old, _ := newEstablishedPair(t, sim.LinkConfig{})
	// The same QP number asks again, as a new connection.
	id, err := p.a.agent.Connect(p.connectParams(nil), p.a.handle)
	if err != nil {
		t.Fatal(err)
	}
	p.drive(time.Minute, func() bool { return p.a.has(EventREJ) && p.a.has(EventDREQ) })
	if ev := p.a.last(EventREJ); ev.ID != id || ev.Reason != RejStaleConnection {
		t.Errorf("REJ %+v", ev)
	}
	if ev := p.a.last(EventDREQ); ev.ID != old {
		t.Errorf("DREQ for %p, want the old connection", ev.ID)
	}
	if c := p.b.agent.Counters(); c.Stale != 1 || countEvents(p.b, EventREQ) != 1 {
		t.Errorf("B %+v %v", c, p.b.eventTypes())
	}
}

// TestAgentSIDR: SIDR resolution of a UD service: a reply with QPN, Q_Key
// and private data; an unknown service; a lost reply; no answer.
func TestAgentSIDR(t *testing.T) {
	sidrParams := func(pd []byte) *SIDRRequestParams {
		return &SIDRRequestParams{ServiceID: CMAServiceID(RDMAPortSpaceUDP, 7174), To: MADAddress{Remote: cmIPB}, PrivateData: pd}
	}
	replyAll := func(n *cmNode) {
		n.react = func(ev *Event) {
			if ev.Type == EventSIDRREQ {
				ev.ID.SIDRReply(&SIDRReply{QPN: 0x333, QKey: 0x01234567, PrivateData: append([]byte("udp:"), ev.SIDRREQ.PrivateData[:2]...)})
			}
		}
	}
	t.Run("reply", func(t *testing.T) {
		for _, lost := range []int{0, 1} {
			p := newCMPair(t, sim.LinkConfig{DropFunc: dropFirst(AttrSIDRREP, lost)})
			if _, err := p.b.agent.Listen(CMAServiceID(RDMAPortSpaceUDP, 7174), p.b.handle); err != nil {
				t.Fatal(err)
			}
			replyAll(p.b)
			if _, err := p.a.agent.SIDRRequest(sidrParams([]byte("hi")), p.a.handle); err != nil {
				t.Fatal(err)
			}
			p.drive(time.Minute, func() bool { return p.a.has(EventSIDRREP) })
			rep := p.a.last(EventSIDRREP).SIDRREP
			if rep.Status != SIDRSuccess || rep.QPN != 0x333 || rep.QKey != 0x01234567 || !bytes.Equal(rep.PrivateData[:6], []byte("udp:hi")) ||
				rep.ServiceID != CMAServiceID(RDMAPortSpaceUDP, 7174) {
				t.Errorf("SIDR_REP %+v", rep)
			}
			p.settle(5 * time.Minute)
			if countEvents(p.b, EventSIDRREQ) != 1 || p.b.agent.Counters().Duplicates != uint64(lost) ||
				p.a.agent.Counters().IDs != 0 || p.b.agent.Counters().IDs != 0 {
				t.Errorf("lost %d: B %v %+v", lost, p.b.eventTypes(), p.b.agent.Counters())
			}
		}
	})
	t.Run("unknown service", func(t *testing.T) {
		p := newCMPair(t, sim.LinkConfig{})
		p.a.agent.SIDRRequest(sidrParams(nil), p.a.handle)
		p.drive(time.Minute, func() bool { return p.a.has(EventSIDRREP) })
		if rep := p.a.last(EventSIDRREP).SIDRREP; rep.Status != SIDRUnsupported {
			t.Errorf("SIDR_REP %+v", rep)
		}
	})
	t.Run("no answer", func(t *testing.T) {
		p := newCMPair(t, sim.LinkConfig{})
		p.net.Partition(p.a.port, p.b.port, p.net.Now(), time.Time{})
		p.a.agent.SIDRRequest(sidrParams(nil), p.a.handle)
		p.drive(10*time.Minute, func() bool { return p.a.has(EventSIDRREQError) })
		if c := p.a.agent.Counters(); c.IDs != 0 || c.Sent[AttrSIDRREQ-AttrREQ] != DefaultMaxRetries+1 {
			t.Errorf("A %+v", c)
		}
	})
}

// TestAgentBadMADs feeds every kind of bad input: each is dropped and
// counted under its reason, Get/Set MADs nobody serves are answered
// "unsupported", a DREQ for an unknown connection gets its DREP.
func TestAgentBadMADs(t *testing.T) {
	var kreq, krep, krtu, kdreq MAD
	for _, c := range captureCM(t, "rxe-rdma-cm-rping.pcap") {
		switch c.mad.Attribute() {
		case AttrREQ:
			kreq = c.mad
		case AttrREP:
			krep = c.mad
		case AttrRTU:
			krtu = c.mad
		case AttrDREQ:
			kdreq = c.mad
		}
	}
	r := newCMRig(t, 5)
	peer := r.raw("client", mac22, ip22, sim.LinkConfig{})
	srv := r.node("server", mac21, ip21, sim.LinkConfig{}, 10)
	if _, err := srv.agent.Listen(testService, srv.handle); err != nil {
		t.Fatal(err)
	}
	from := MADAddress{Remote: ip22, Local: ip21, RemoteQPN: 1}
	feed := func(m []byte) error { return srv.agent.HandleMAD(r.net.Now(), m, from) }
	edit := func(m MAD, fn func(m MAD)) MAD {
		c := MAD(bytes.Clone(m))
		fn(c)
		return c
	}
	want := [numCMDropReasons]uint64{}
	check := func(name string, m []byte, reason DropReason, kind error) {
		t.Helper()
		err := feed(m)
		var de *DropError
		if !errors.As(err, &de) || de.Reason != reason || !errors.Is(err, ErrDropped) || (kind != nil && !errors.Is(err, kind)) {
			t.Errorf("%s: %v, want a %v drop (%v)", name, err, reason, kind)
		}
		want[reason]++
	}
	// Every truncation and one byte too many.
	for n := 0; n < MADLen; n++ {
		check("truncated", kreq[:n], DropMalformed, header.ErrTruncated)
	}
	check("long", append(bytes.Clone(kreq), 0), DropMalformed, header.ErrInvalid)
	check("base version", edit(kreq, func(m MAD) { m.SetBaseVersion(2) }), DropMalformed, header.ErrUnsupported)
	check("SA Get", edit(kreq, func(m MAD) { m.SetMgmtClass(MgmtClassSubnAdm); m.SetMethod(MADMethodGet) }), DropNotCM, nil)
	check("SA Send", edit(kreq, func(m MAD) { m.SetMgmtClass(MgmtClassSubnAdm) }), DropNotCM, nil)
	check("class version 1", edit(kreq, func(m MAD) { m.SetClassVersion(1) }), DropClassVersion, header.ErrUnsupported)
	check("CM Get ClassPortInfo", edit(kreq, func(m MAD) { m.SetMethod(MADMethodGet); m.SetAttributeID(uint16(AttrClassPortInfo)) }), DropMethod, nil)
	check("response bit", edit(kreq, func(m MAD) { m.SetMethod(MADMethodSend | MADMethodResponseFlag) }), DropMethod, nil)
	check("unknown attribute", edit(kreq, func(m MAD) { m.SetAttributeID(0x20) }), DropAttribute, header.ErrUnsupported)
	check("LAP", edit(kreq, func(m MAD) { m.SetAttributeID(uint16(AttrLAP)) }), DropAttribute, nil)
	check("ClassPortInfo Send", edit(kreq, func(m MAD) { m.SetAttributeID(uint16(AttrClassPortInfo)) }), DropAttribute, nil)
	check("REP for an unknown local ID", krep, DropUnknownID, nil)
	check("RTU for an unknown local ID", krtu, DropUnknownID, nil)
	check("DREQ for an unknown local ID", kdreq, DropUnknownID, nil)
	check("MRA for an unknown local ID", edit(krtu, func(m MAD) { m.SetAttributeID(uint16(AttrMRA)) }), DropUnknownID, nil)
	check("REJ for an unknown local ID", edit(krtu, func(m MAD) { m.SetAttributeID(uint16(AttrREJ)) }), DropUnknownID, nil)
	check("SIDR_REP for an unknown request", edit(krtu, func(m MAD) { m.SetAttributeID(uint16(AttrSIDRREP)) }), DropUnknownID, nil)

	// A connection in REQ_RCVD: messages it cannot get now are dropped as such.
	if err := feed(kreq); err != nil {
		t.Fatal(err)
	}
	id := srv.events[0].ID
	ours := id.LocalCommID()
	to := func(m MAD, attr Attribute) MAD {
		return edit(m, func(m MAD) { m.SetAttributeID(uint16(attr)); cmIDs(m.Data()).setRemote(ours) })
	}
	check("RTU in REQ_RCVD", to(krtu, AttrRTU), DropState, nil)
	check("DREP in REQ_RCVD", to(krtu, AttrDREP), DropState, nil)
	check("RTU from another instance", edit(to(krtu, AttrRTU), func(m MAD) { cmIDs(m.Data()).setLocal(0x99) }), DropWrongPeer, nil)
	if err := srv.agent.HandleMAD(r.net.Now(), to(krtu, AttrRTU), MADAddress{Remote: ip21, RemoteQPN: 1}); err == nil {
		t.Error("RTU from another address accepted")
	}
	want[DropWrongPeer]++
	dreq := to(kdreq, AttrDREQ)
	check("DREQ for another QP", edit(dreq, func(m MAD) { m.DREQ().SetRemoteQPN(0x77) }), DropBadMessage, nil)

	c := srv.agent.Counters()
	if c.Drops != want {
		t.Errorf("drops %v, want %v", c.Drops, want)
	}
	// Answers on the wire: the SA Get and the CM Get got GetResp "unsupported"
	// (0x000C), the unknown DREQ its DREP; the response and Sends nothing.
	r.flush(srv)
	var got []string
	for _, m := range received(t, peer) {
		switch {
		case m.mad.Method() == MADMethodGetResp:
			if m.mad.Status() != madStatusUnsupportedAttr {
				t.Errorf("GetResp status %#x", m.mad.Status())
			}
			got = append(got, "GetResp "+m.mad.MgmtClass().String())
		default:
			got = append(got, m.mad.Attribute().String())
		}
	}
	if w := []string{"GetResp SubnAdm", "GetResp CM", "DisconnectReply"}; !slices.Equal(got, w) {
		t.Errorf("answers %v, want %v", got, w)
	}
	if c.Unsupported != 2 || c.IDs != 1 {
		t.Errorf("counters %+v", c)
	}
}
