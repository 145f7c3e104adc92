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

// TestCMAgentPeerVanishes: a partition in the middle of the handshake ends in
// a timeout on the side left waiting, after every retry, and in no CMID left.
func TestCMAgentPeerVanishes(t *testing.T) {
	try := cmTry(DefaultCMResponseTimeout, DefaultPacketLifeTime)
	budget := time.Duration(DefaultMaxCMRetries+1) * try
	t.Run("before REQ", func(t *testing.T) {
		p := newCMPair(t, sim.LinkConfig{})
		p.listen(t)
		p.net.Partition(p.a.port, p.b.port, p.net.Now(), time.Time{})
		start := p.net.Now()
		id, err := p.a.agent.Connect(p.connectParams(nil), p.a.handle)
		if err != nil {
			t.Fatal(err)
		}
		p.drive(2*budget, func() bool { return p.a.has(CMEventREQError) })
		if el := p.net.Now().Sub(start); el < budget || el > budget+time.Second {
			t.Errorf("gave up after %v, want %v", el, budget)
		}
		c := p.a.agent.Counters()
		if id.State() != CMStateIdle || c.IDs != 0 || c.Retries != DefaultMaxCMRetries || c.Timeouts != 1 ||
			c.Sent[CMAttrREJ-CMAttrREQ] != 1 || c.Sent[0] != DefaultMaxCMRetries+1 {
			t.Errorf("A %v %+v", id.State(), c)
		}
	})
	t.Run("after REQ", func(t *testing.T) {
		p := newCMPair(t, sim.LinkConfig{})
		p.listen(t)
		p.a.react = func(ev *CMEvent) {
			if ev.Type == CMEventREP {
				// A vanishes after the REP: no RTU, ever.
				p.net.Partition(p.a.port, p.b.port, p.net.Now(), time.Time{})
			}
		}
		p.b.acceptAll(t, nil)
		if _, err := p.a.agent.Connect(p.connectParams(nil), p.a.handle); err != nil {
			t.Fatal(err)
		}
		p.drive(2*budget, func() bool { return p.b.has(CMEventREPError) })
		c := p.b.agent.Counters()
		// B's REP timed out: it rejects with reason timeout so that A, should it come
		// back, does not keep a half-open connection.
		if c.IDs != 0 || c.Retries != DefaultMaxCMRetries || c.Timeouts != 1 || c.Sent[CMAttrREJ-CMAttrREQ] != 1 {
			t.Errorf("B %+v", c)
		}
		if got, want := p.b.eventTypes(), []CMEventType{CMEventREQ, CMEventREPError}; !slices.Equal(got, want) {
			t.Errorf("B events %v", got)
		}
	})
	t.Run("established, DREQ unanswered", func(t *testing.T) {
		p := newCMPair(t, sim.LinkConfig{})
		p.listen(t)
		p.b.acceptAll(t, nil)
		p.a.rtuAll(t)
		id, _ := p.a.agent.Connect(p.connectParams(nil), p.a.handle)
		p.drive(time.Second, func() bool { return p.b.has(CMEventRTU) })
		p.net.Partition(p.a.port, p.b.port, p.net.Now(), time.Time{})
		id.Disconnect(nil)
		p.drive(2*budget, func() bool { return p.a.has(CMEventTimeWaitExit) })
		if got, want := p.a.eventTypes(), []CMEventType{CMEventREP, CMEventDREQError, CMEventTimeWaitExit}; !slices.Equal(got, want) {
			t.Errorf("A events %v", got)
		}
		if p.a.agent.Counters().IDs != 0 {
			t.Error("A keeps the connection")
		}
	})
}

// TestCMAgentDisconnectRaces: simultaneous DREQs, a lost DREP (answered again
// from TIMEWAIT), a DREQ for a connection already gone (answered anyway).
func TestCMAgentDisconnectRaces(t *testing.T) {
	setup := func(t *testing.T, cfg sim.LinkConfig) (*cmPair, *CMID, *CMID) {
		p := newCMPair(t, cfg)
		p.listen(t)
		p.b.acceptAll(t, nil)
		p.a.rtuAll(t)
		a, _ := p.a.agent.Connect(p.connectParams(nil), p.a.handle)
		p.drive(time.Second, func() bool { return p.b.has(CMEventRTU) })
		return p, a, p.b.events[0].ID
	}
	t.Run("simultaneous", func(t *testing.T) {
		p, a, b := setup(t, sim.LinkConfig{Latency: time.Millisecond})
		p.a.react, p.b.react = nil, nil
		a.Disconnect(nil)
		b.Disconnect(nil)
		p.settle(time.Minute)
		for _, n := range []*cmNode{p.a, p.b} {
			if !n.has(CMEventDREQ) || !n.has(CMEventTimeWaitExit) || n.agent.Counters().IDs != 0 || n.agent.Counters().Retries != 0 {
				t.Errorf("%s: %v %+v", n.port.Name(), n.eventTypes(), n.agent.Counters())
			}
		}
	})
	t.Run("DREP lost", func(t *testing.T) {
		p, a, _ := setup(t, sim.LinkConfig{DropFunc: dropFirst(CMAttrDREP, 1)})
		a.Disconnect(nil)
		p.drive(time.Minute, func() bool { return p.a.has(CMEventDREP) })
		if c := p.a.agent.Counters(); c.Retries != 1 {
			t.Errorf("A %+v", c)
		}
		// B's TIMEWAIT (2.1 s) is over before A's DREQ comes again (6.4 s), as
		// with the kernel's timers: B answers the DREQ it no longer knows.
		if c := p.b.agent.Counters(); c.Drops[CMDropUnknownID] != 1 || c.Sent[CMAttrDREP-CMAttrREQ] != 2 {
			t.Errorf("B %+v", c)
		}
	})
	t.Run("DREP lost, long TIMEWAIT", func(t *testing.T) {
		p, a, _ := setup(t, sim.LinkConfig{DropFunc: dropFirst(CMAttrDREP, 1)})
		p.b.agent.cfg.TimeWait = time.Minute
		a.Disconnect(nil)
		p.drive(time.Minute, func() bool { return p.a.has(CMEventDREP) })
		// B is still in TIMEWAIT: it resends the DREP it sent.
		if c := p.b.agent.Counters(); c.Duplicates != 1 || c.Drops[CMDropUnknownID] != 0 || c.Sent[CMAttrDREP-CMAttrREQ] != 2 {
			t.Errorf("B %+v", c)
		}
	})
	t.Run("DREQ for a forgotten connection", func(t *testing.T) {
		p, a, b := setup(t, sim.LinkConfig{})
		p.b.agent.mu.Lock()
		p.b.agent.remove(b) // B forgot (restarted its CM)
		p.b.agent.mu.Unlock()
		a.Disconnect(nil)
		p.drive(time.Minute, func() bool { return p.a.has(CMEventDREP) })
		if c := p.b.agent.Counters(); c.Drops[CMDropUnknownID] != 1 || c.Sent[CMAttrDREP-CMAttrREQ] != 1 {
			t.Errorf("B %+v", c)
		}
	})
}

// TestCMAgentStale: a REQ from a QP that has a connection here already (its
// node restarted) is rejected as stale and the old connection is torn down.
func TestCMAgentStale(t *testing.T) {
	p := newCMPair(t, sim.LinkConfig{})
	p.listen(t)
	p.b.acceptAll(t, nil)
	p.a.rtuAll(t)
	old, _ := p.a.agent.Connect(p.connectParams(nil), p.a.handle)
	p.drive(time.Second, func() bool { return p.b.has(CMEventRTU) })
	// The same QP number asks again, as a new connection.
	id, err := p.a.agent.Connect(p.connectParams(nil), p.a.handle)
	if err != nil {
		t.Fatal(err)
	}
	p.drive(time.Minute, func() bool { return p.a.has(CMEventREJ) && p.a.has(CMEventDREQ) })
	if ev := p.a.last(CMEventREJ); ev.ID != id || ev.Reason != CMRejStaleConnection {
		t.Errorf("REJ %+v", ev)
	}
	if ev := p.a.last(CMEventDREQ); ev.ID != old {
		t.Errorf("DREQ for %p, want the old connection", ev.ID)
	}
	if c := p.b.agent.Counters(); c.Stale != 1 || countEvents(p.b, CMEventREQ) != 1 {
		t.Errorf("B %+v %v", c, p.b.eventTypes())
	}
}

// TestCMAgentSIDR: SIDR resolution of a UD service: a reply with QPN, Q_Key
// and private data; an unknown service; a lost reply; no answer.
func TestCMAgentSIDR(t *testing.T) {
	sidrParams := func(pd []byte) *SIDRRequestParams {
		return &SIDRRequestParams{ServiceID: CMAServiceID(RDMAPortSpaceUDP, 7174), To: MADAddress{Remote: cmIPB}, PrivateData: pd}
	}
	replyAll := func(n *cmNode) {
		n.react = func(ev *CMEvent) {
			if ev.Type == CMEventSIDRREQ {
				ev.ID.SIDRReply(&SIDRReply{QPN: 0x333, QKey: 0x01234567, PrivateData: append([]byte("udp:"), ev.SIDRREQ.PrivateData[:2]...)})
			}
		}
	}
	t.Run("reply", func(t *testing.T) {
		for _, lost := range []int{0, 1} {
			p := newCMPair(t, sim.LinkConfig{DropFunc: dropFirst(CMAttrSIDRREP, lost)})
			if _, err := p.b.agent.Listen(CMAServiceID(RDMAPortSpaceUDP, 7174), p.b.handle); err != nil {
				t.Fatal(err)
			}
			replyAll(p.b)
			if _, err := p.a.agent.SIDRRequest(sidrParams([]byte("hi")), p.a.handle); err != nil {
				t.Fatal(err)
			}
			p.drive(time.Minute, func() bool { return p.a.has(CMEventSIDRREP) })
			rep := p.a.last(CMEventSIDRREP).SIDRREP
			if rep.Status != CMSIDRSuccess || rep.QPN != 0x333 || rep.QKey != 0x01234567 || !bytes.Equal(rep.PrivateData[:6], []byte("udp:hi")) ||
				rep.ServiceID != CMAServiceID(RDMAPortSpaceUDP, 7174) {
				t.Errorf("SIDR_REP %+v", rep)
			}
			p.settle(5 * time.Minute)
			if countEvents(p.b, CMEventSIDRREQ) != 1 || p.b.agent.Counters().Duplicates != uint64(lost) ||
				p.a.agent.Counters().IDs != 0 || p.b.agent.Counters().IDs != 0 {
				t.Errorf("lost %d: B %v %+v", lost, p.b.eventTypes(), p.b.agent.Counters())
			}
		}
	})
	t.Run("unknown service", func(t *testing.T) {
		p := newCMPair(t, sim.LinkConfig{})
		p.a.agent.SIDRRequest(sidrParams(nil), p.a.handle)
		p.drive(time.Minute, func() bool { return p.a.has(CMEventSIDRREP) })
		if rep := p.a.last(CMEventSIDRREP).SIDRREP; rep.Status != CMSIDRUnsupported {
			t.Errorf("SIDR_REP %+v", rep)
		}
	})
	t.Run("no answer", func(t *testing.T) {
		p := newCMPair(t, sim.LinkConfig{})
		p.net.Partition(p.a.port, p.b.port, p.net.Now(), time.Time{})
		p.a.agent.SIDRRequest(sidrParams(nil), p.a.handle)
		p.drive(10*time.Minute, func() bool { return p.a.has(CMEventSIDRREQError) })
		if c := p.a.agent.Counters(); c.IDs != 0 || c.Sent[CMAttrSIDRREQ-CMAttrREQ] != DefaultMaxCMRetries+1 {
			t.Errorf("A %+v", c)
		}
	})
}

// TestCMAgentBadMADs feeds every kind of bad input: each is dropped and
// counted under its reason, Get/Set MADs nobody serves are answered
// "unsupported", a DREQ for an unknown connection gets its DREP.
func TestCMAgentBadMADs(t *testing.T) {
	var kreq, krep, krtu, kdreq MAD
	for _, c := range captureCM(t, "rxe-rdma-cm-rping.pcap") {
		switch c.mad.CMAttribute() {
		case CMAttrREQ:
			kreq = c.mad
		case CMAttrREP:
			krep = c.mad
		case CMAttrRTU:
			krtu = c.mad
		case CMAttrDREQ:
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
	check := func(name string, m []byte, reason CMDropReason, kind error) {
		t.Helper()
		err := feed(m)
		var de *CMDropError
		if !errors.As(err, &de) || de.Reason != reason || !errors.Is(err, ErrCMDropped) || (kind != nil && !errors.Is(err, kind)) {
			t.Errorf("%s: %v, want a %v drop (%v)", name, err, reason, kind)
		}
		want[reason]++
	}
	// Every truncation and one byte too many.
	for n := 0; n < MADLen; n++ {
		check("truncated", kreq[:n], CMDropMalformed, header.ErrTruncated)
	}
	check("long", append(bytes.Clone(kreq), 0), CMDropMalformed, header.ErrInvalid)
	check("base version", edit(kreq, func(m MAD) { m.SetBaseVersion(2) }), CMDropMalformed, header.ErrUnsupported)
	check("SA Get", edit(kreq, func(m MAD) { m.SetMgmtClass(MgmtClassSubnAdm); m.SetMethod(MADMethodGet) }), CMDropNotCM, nil)
	check("SA Send", edit(kreq, func(m MAD) { m.SetMgmtClass(MgmtClassSubnAdm) }), CMDropNotCM, nil)
	check("class version 1", edit(kreq, func(m MAD) { m.SetClassVersion(1) }), CMDropClassVersion, header.ErrUnsupported)
	check("CM Get ClassPortInfo", edit(kreq, func(m MAD) { m.SetMethod(MADMethodGet); m.SetAttributeID(uint16(CMAttrClassPortInfo)) }), CMDropMethod, nil)
	check("response bit", edit(kreq, func(m MAD) { m.SetMethod(MADMethodSend | MADMethodResponseFlag) }), CMDropMethod, nil)
	check("unknown attribute", edit(kreq, func(m MAD) { m.SetAttributeID(0x20) }), CMDropAttribute, header.ErrUnsupported)
	check("LAP", edit(kreq, func(m MAD) { m.SetAttributeID(uint16(CMAttrLAP)) }), CMDropAttribute, nil)
	check("ClassPortInfo Send", edit(kreq, func(m MAD) { m.SetAttributeID(uint16(CMAttrClassPortInfo)) }), CMDropAttribute, nil)
	check("REP for an unknown local ID", krep, CMDropUnknownID, nil)
	check("RTU for an unknown local ID", krtu, CMDropUnknownID, nil)
	check("DREQ for an unknown local ID", kdreq, CMDropUnknownID, nil)
	check("MRA for an unknown local ID", edit(krtu, func(m MAD) { m.SetAttributeID(uint16(CMAttrMRA)) }), CMDropUnknownID, nil)
	check("REJ for an unknown local ID", edit(krtu, func(m MAD) { m.SetAttributeID(uint16(CMAttrREJ)) }), CMDropUnknownID, nil)
	check("SIDR_REP for an unknown request", edit(krtu, func(m MAD) { m.SetAttributeID(uint16(CMAttrSIDRREP)) }), CMDropUnknownID, nil)

	// A connection in REQ_RCVD: messages it cannot get now are dropped as such.
	if err := feed(kreq); err != nil {
		t.Fatal(err)
	}
	id := srv.events[0].ID
	ours := id.LocalCommID()
	to := func(m MAD, attr CMAttribute) MAD {
		return edit(m, func(m MAD) { m.SetAttributeID(uint16(attr)); binary32(m.Data()[4:], ours) })
	}
	check("RTU in REQ_RCVD", to(krtu, CMAttrRTU), CMDropState, nil)
	check("DREP in REQ_RCVD", to(krtu, CMAttrDREP), CMDropState, nil)
	check("RTU from another instance", edit(to(krtu, CMAttrRTU), func(m MAD) { binary32(m.Data(), 0x99) }), CMDropWrongPeer, nil)
	if err := srv.agent.HandleMAD(r.net.Now(), to(krtu, CMAttrRTU), MADAddress{Remote: ip21, RemoteQPN: 1}); err == nil {
		t.Error("RTU from another address accepted")
	}
	want[CMDropWrongPeer]++
	dreq := to(kdreq, CMAttrDREQ)
	check("DREQ for another QP", edit(dreq, func(m MAD) { m.DREQ().SetRemoteQPN(0x77) }), CMDropBadMessage, nil)

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
			got = append(got, m.mad.CMAttribute().String())
		}
	}
	if w := []string{"GetResp SubnAdm", "GetResp CM", "DisconnectReply"}; !slices.Equal(got, w) {
		t.Errorf("answers %v, want %v", got, w)
	}
	if c.Unsupported != 2 || c.IDs != 1 {
		t.Errorf("counters %+v", c)
	}
}

func binary32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
}
