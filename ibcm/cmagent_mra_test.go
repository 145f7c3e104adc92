package ibcm

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/roce"
	"github.com/softrdma/softrdma/sim"
)

// frameMAD returns the MAD a frame carries, or nil.
func frameMAD(frame []byte) MAD {
	var f roce.Frame
	if f.DecodeEthernet(frame) != nil {
		return nil
	}
	var p ibtransport.Packet
	if p.Decode(f.IB) != nil {
		return nil
	}
	m, err := MADFromPacket(&p)
	if err != nil {
		return nil
	}
	return m
}

// alarm is a sim.Stepped that does nothing but has a deadline, so that Drive
// stops the clock there instead of jumping past it to the next timer.
type alarm time.Time

func (alarm) Poll(time.Time) (bool, error)      { return false, nil }
func (t alarm) NextDeadline() (time.Time, bool) { return time.Time(t), true }

// driveUntil drives both nodes until the virtual time is at.
func (p *cmPair) driveUntil(at time.Time) {
	p.t.Helper()
	err := p.net.Drive(at.Sub(p.net.Now())+time.Second, func() bool { return !p.net.Now().Before(at) }, nil,
		p.a.dev, p.a.agent, p.b.dev, p.b.agent, alarm(at))
	if err != nil {
		p.t.Fatal(err)
	}
}

// TestAgentMRAForREP: A answers B's REP with an MRA instead of an RTU
// (REP_RCVD → MRA_REP_SENT); B, in MRA_REP_RCVD, holds its REP timer for the
// MRA's service timeout — longer than its whole REP retry budget — and A's RTU,
// sent after that budget, still connects. Without the MRA the same late RTU
// finds B gone: it gave up with REJ(timeout) at the end of the budget.
func TestAgentMRAForREP(t *testing.T) {
	// B's REP retry budget: the REQ's response timeout and the packet lifetime
	// B derives from the REQ's local ACK timeout (19 - 1), per try, 1 + 15 tries.
	try := cmTry(DefaultResponseTimeout, LocalACKTimeout(DefaultPacketLifeTime, DefaultCAACKDelay)-1)
	budget := time.Duration(DefaultMaxRetries+1) * try // ≈ 103 s
	// The MRA asks for 2^25 × 4.096 µs ≈ 137 s: its wait alone outlasts the
	// budget, so B must not resend its REP before the MRA's time is up.
	const serviceTimeout = 25
	mraWait := Timeout(serviceTimeout) + 2*Timeout(DefaultPacketLifeTime)
	if mraWait <= budget+time.Second {
		t.Fatalf("MRA wait %v not beyond the REP budget %v", mraWait, budget)
	}
	for _, withMRA := range []bool{true, false} {
		name := "MRA"
		if !withMRA {
			name = "no MRA"
		}
		t.Run(name, func(t *testing.T) {
			// REJs never reach A, so that without the MRA A is still in
			// REP_RCVD and can send the late RTU; the test records them.
			var rejs []RejectReason
			p := newCMPair(t, sim.LinkConfig{DropFunc: func(_ sim.Direction, frame []byte) bool {
				if m := frameMAD(frame); m != nil && m.Attribute() == AttrREJ {
					rejs = append(rejs, m.REJ().Reason())
					return true
				}
				return false
			}})
			p.listen(t)
			var repAt, mraAt time.Time
			p.b.acceptAll(t, nil)
			accept := p.b.react
			p.b.react = func(ev *Event) {
				switch ev.Type {
				case EventREQ:
					repAt = p.net.Now()
				case EventMRA:
					mraAt = p.net.Now()
				}
				accept(ev)
			}
			p.a.react = func(ev *Event) {
				if ev.Type == EventREP && withMRA {
					if err := ev.ID.SendMRA(serviceTimeout, []byte("busy")); err != nil {
						t.Error(err)
					}
				}
			}
			id, err := p.a.agent.Connect(p.connectParams(nil), p.a.handle)
			if err != nil {
				t.Fatal(err)
			}
			p.drive(time.Second, func() bool { return p.a.has(EventREP) && (!withMRA || p.b.has(EventMRA)) })
			b := p.b.events[0].ID
			if withMRA {
				if id.State() != StateMRAREPSent || b.State() != StateMRAREPRcvd {
					t.Fatalf("after the MRA: A %v, B %v", id.State(), b.State())
				}
				ev := p.b.last(EventMRA)
				if ev.ID != b || ev.ServiceTimeout != serviceTimeout || !bytes.Equal(ev.PrivateData[:4], []byte("busy")) {
					t.Errorf("B's MRA event %+v", ev)
				}
				// B's REP timer is now the MRA's service timeout plus the round trip.
				if dl, ok := p.b.agent.NextDeadline(); !ok || !dl.Equal(mraAt.Add(mraWait)) {
					t.Errorf("B's timer at %v (%v after the MRA), want %v after it", dl, dl.Sub(mraAt), mraWait)
				}
			} else if id.State() != StateREPRcvd || b.State() != StateREPSent {
				t.Fatalf("after the REP: A %v, B %v", id.State(), b.State())
			}

			// Past the whole REP retry budget, but within the MRA's time.
			late := repAt.Add(budget + time.Second)
			p.driveUntil(late)
			cb := p.b.agent.Counters()
			if withMRA {
				if b.State() != StateMRAREPRcvd || p.b.has(EventREPError) || cb.Retries != 0 || cb.Timeouts != 0 ||
					cb.Sent[AttrREP-AttrREQ] != 1 || len(rejs) != 0 {
					t.Fatalf("B did not wait for the MRA's time: %v, events %v, REJs %v, %+v", b.State(), p.b.eventTypes(), rejs, cb)
				}
			} else {
				if got, want := p.b.eventTypes(), []EventType{EventREQ, EventREPError}; !slices.Equal(got, want) ||
					cb.Retries != DefaultMaxRetries || cb.Timeouts != 1 || cb.IDs != 0 ||
					!slices.Equal(rejs, []RejectReason{RejTimeout}) {
					t.Fatalf("B did not give up after its REP budget: events %v, REJs %v, %+v", got, rejs, cb)
				}
			}

			// The late RTU.
			if id.State() != StateMRAREPSent && id.State() != StateREPRcvd {
				t.Fatalf("A in %v before its RTU", id.State())
			}
			if err := id.SendRTU([]byte("ready")); err != nil {
				t.Fatal(err)
			}
			if id.State() != StateEstablished {
				t.Errorf("A %v after its RTU", id.State())
			}
			if withMRA {
				p.drive(time.Second, func() bool { return p.b.has(EventRTU) })
				if b.State() != StateEstablished || !bytes.Equal(p.b.last(EventRTU).PrivateData[:5], []byte("ready")) {
					t.Errorf("B %v after the late RTU, events %v", b.State(), p.b.eventTypes())
				}
				if got, want := p.b.eventTypes(), []EventType{EventREQ, EventMRA, EventRTU}; !slices.Equal(got, want) {
					t.Errorf("B events %v, want %v", got, want)
				}
				if c := p.b.agent.Counters(); c.Retries != 0 || c.Timeouts != 0 || c.Drops != ([numCMDropReasons]uint64{}) {
					t.Errorf("B %+v", c)
				}
			} else {
				// B no longer knows the connection: the RTU is dropped.
				p.drive(time.Second, func() bool { return p.b.agent.Counters().Drops[DropUnknownID] == 1 })
				if p.b.has(EventRTU) || b.State() != StateIdle {
					t.Errorf("the late RTU connected B without an MRA: %v, events %v", b.State(), p.b.eventTypes())
				}
			}
		})
	}
}

// TestAgentTimeWaitDuplicateREQ: the kernel's REQ replayed to a connection
// in TIMEWAIT that ended with DREQ/DREP (not a REJ) gets a REJ with reason
// stale connection (IBTA Vol. 1 ch. 12: a REQ for a connection the CM still
// holds in TimeWait is stale) and is counted as stale; TIMEWAIT itself goes
// on unchanged. Once TIMEWAIT is over, the CM has forgotten the connection and
// the same REQ bytes are a new REQ: a new ID, a REQ event, a REP.
func TestAgentTimeWaitDuplicateREQ(t *testing.T) {
	kc := kernelConns[0]
	req, rep, rtu, dreq, _ := connectionMADs(t, captureCM(t, kc.capture), kc.reqComm)
	r := newCMRig(t, 5)
	kernelREP := rep.mad.REP()
	repComm := kernelREP.LocalCommID() // the server takes it (kernelServer)
	srv, peer, from := r.kernelServer(t, 13, kc.port, rep, ReplyParams{QPN: kernelREP.LocalQPN(), StartingPSN: kernelREP.StartingPSN(),
		RNRRetryCount: 7})
	feed := func(what string, m MAD) {
		t.Helper()
		if err := srv.agent.HandleMAD(r.net.Now(), bytes.Clone(m), from); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		r.flush(srv)
	}
	// only returns the one MAD the server answered with, of attribute attr.
	only := func(what string, attr Attribute) MAD {
		t.Helper()
		out := received(t, peer)
		if len(out) != 1 || out[0].mad.Attribute() != attr {
			var got []Attribute
			for _, o := range out {
				got = append(got, o.mad.Attribute())
			}
			t.Fatalf("after %s the server sent %v, want one %v", what, got, attr)
		}
		return out[0].mad
	}

	feed("REQ", req.mad)
	only("the REQ", AttrREP)
	feed("RTU", rtu.mad)
	feed("DREQ", dreq.mad)
	only("the DREQ", AttrDREP)
	id := srv.events[0].ID
	if id.State() != StateTimeWait {
		t.Fatalf("state %v after the DREP", id.State())
	}
	exit, _ := srv.agent.NextDeadline()

	// Halfway through TIMEWAIT, the REQ again.
	r.net.RunFor(srv.agent.Config().TimeWait / 2)
	srv.agent.Poll(r.net.Now())
	before := srv.agent.Counters()
	feed("REQ in TIMEWAIT", req.mad)
	m := only("the REQ in TIMEWAIT", AttrREJ)
	j := m.REJ()
	if j.Reason() != RejStaleConnection || j.Reason() != 10 || j.MessageRejected() != cmRejectedREQ ||
		j.RemoteCommID() != kc.reqComm || j.LocalCommID() != repComm || m.TransactionID() != req.mad.TransactionID() {
		t.Errorf("REJ reason %v, message %d, comm %#x/%#x, TID %#x; want stale connection for the REQ %#x/%#x, TID %#x",
			j.Reason(), j.MessageRejected(), j.LocalCommID(), j.RemoteCommID(), m.TransactionID(), repComm, kc.reqComm,
			req.mad.TransactionID())
	}
	after := srv.agent.Counters()
	if after.Stale != before.Stale+1 || after.Duplicates != before.Duplicates+1 || after.Rejects != before.Rejects+1 {
		t.Errorf("counters before %+v\nafter %+v", before, after)
	}
	if dl, _ := srv.agent.NextDeadline(); id.State() != StateTimeWait || !dl.Equal(exit) || len(srv.events) != 3 {
		t.Errorf("after the stale REJ: %v, TIMEWAIT ends %v (was %v), events %v", id.State(), dl, exit, srv.eventTypes())
	}

	// After TIMEWAIT the connection is gone: the same REQ is a new one.
	r.net.RunUntil(exit)
	srv.agent.Poll(r.net.Now())
	if got, want := srv.eventTypes(), []EventType{EventREQ, EventRTU, EventDREQ, EventTimeWaitExit}; !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	feed("REQ after TIMEWAIT", req.mad)
	nrep := only("the REQ after TIMEWAIT", AttrREP)
	if nrep.REP().RemoteCommID() != kc.reqComm || nrep.TransactionID() != req.mad.TransactionID() {
		t.Errorf("REP for comm %#x TID %#x", nrep.REP().RemoteCommID(), nrep.TransactionID())
	}
	last := srv.events[len(srv.events)-1]
	if last.Type != EventREQ || last.ID == id || last.ID.State() != StateREPSent {
		t.Errorf("after TIMEWAIT: last event %v for %p (old %p) in %v", last.Type, last.ID, id, last.ID.State())
	}
	if c := srv.agent.Counters(); c.Stale != after.Stale || c.IDs != 1 || c.Drops != ([numCMDropReasons]uint64{}) {
		t.Errorf("counters %+v", c)
	}
}
