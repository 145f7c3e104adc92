package ibcm

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/softrdma/softrdma/sim"
)

// fuzzRecord is one step of FuzzAgentMAD's input: a flag byte, then up to a
// MAD's bytes (the last record may be short: a truncated MAD).
const fuzzRecord = 1 + MADLen

// FuzzAgentMAD feeds sequences of MADs to an agent that listens on the
// captures' services, has a connection of its own under way, and answers
// everything (Accept, RTU, DREP, SIDR_REP), with the clock moved between
// steps so that timers fire. Invariants: no panic; every MAD is counted once,
// and dropped (with a *DropError and one drop counted) or handled; the
// agent's indexes name only live CMIDs in a state other than IDLE.
func FuzzAgentMAD(f *testing.F) {
	all := captureCM(f, "rxe-rdma-cm-rping.pcap")
	var seq []byte
	for _, c := range all {
		seq = append(seq, 0x04)
		seq = append(seq, c.mad...)
	}
	f.Add(seq)
	for _, c := range all {
		f.Add(append([]byte{0}, c.mad...))
	}
	for _, c := range captureCM(f, "rxe-write-bw-rdma-cm.pcap") {
		f.Add(append([]byte{0x41}, c.mad...))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 16*fuzzRecord {
			return
		}
		r := newCMRig(t, 6)
		peer := r.raw("client", mac22, ip22, sim.LinkConfig{})
		peer.SetReceiveQueueLimit(4)
		srv := r.node("server", mac21, ip21, sim.LinkConfig{}, 13)
		ids := []uint32{0x20054e4f, 0xfcc6d299}
		next := uint32(1000)
		srv.agent.newCommID = func() uint32 {
			if len(ids) > 0 {
				v := ids[0]
				ids = ids[1:]
				return v
			}
			next++
			return next
		}
		srv.react = func(ev *Event) {
			switch ev.Type {
			case EventREQ:
				ev.ID.Accept(&ReplyParams{QPN: 0x1b, StartingPSN: 1})
			case EventREP:
				ev.ID.SendRTU(nil)
			case EventDREQ:
				ev.ID.Disconnect(nil)
			case EventSIDRREQ:
				ev.ID.SIDRReply(&SIDRReply{QPN: 0x1c, QKey: 0x01234567})
			}
		}
		for _, port := range []uint16{7174, 18515} {
			srv.agent.Listen(CMAServiceID(RDMAPortSpaceTCP, port), srv.handle)
			srv.agent.Listen(CMAServiceID(RDMAPortSpaceUDP, port), srv.handle)
		}
		srv.agent.Connect(&ConnectParams{ServiceID: CMAServiceID(RDMAPortSpaceTCP, 7174),
			Path: PathFields{LocalGID: ip21.As16(), RemoteGID: ip22.As16()}, QPN: 0x1b}, srv.handle)
		froms := []MADAddress{
			{Remote: ip22, Local: ip21, RemoteQPN: 1},
			{Remote: ip21, Local: ip21, RemoteQPN: 1},
			{Remote: netip.MustParseAddr("10.77.0.99"), Local: ip21, RemoteQPN: 1},
			{},
		}
		for len(data) > 0 {
			n := min(len(data), fuzzRecord)
			flags, mad := data[0], data[1:n]
			data = data[n:]
			before := srv.agent.Counters()
			err := srv.agent.HandleMAD(r.net.Now(), mad, froms[flags&3])
			after := srv.agent.Counters()
			var de *DropError
			if err != nil && !errors.As(err, &de) {
				t.Fatalf("HandleMAD: %v", err)
			}
			drops := func(c Counters) (s uint64) {
				for _, d := range c.Drops {
					s += d
				}
				return s
			}
			if after.MADsIn != before.MADsIn+1 {
				t.Fatalf("MADsIn %d → %d", before.MADsIn, after.MADsIn)
			}
			if dd := drops(after) - drops(before); (err != nil) != (dd == 1) || dd > 1 {
				t.Fatalf("err %v but %d drops counted", err, dd)
			}
			r.net.RunFor(time.Millisecond << (flags >> 2 & 0xF))
			srv.agent.Poll(r.net.Now())
			srv.dev.Flush(r.net.Now())
			checkAgentIndexes(t, srv.agent)
		}
	})
}

// checkAgentIndexes checks that every index of the agent names a live ID in
// a state other than IDLE, filed under its own keys.
func checkAgentIndexes(t *testing.T, a *Agent) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	for lid, id := range a.ids {
		if id.gone || id.localID != lid || id.state == StateIdle || id.state == StateListen {
			t.Fatalf("id %#x: gone %v local %#x state %v", lid, id.gone, id.localID, id.state)
		}
	}
	for k, id := range a.byRemote {
		if a.ids[id.localID] != id || id.remoteID != k.v || id.remoteGUID != k.guid {
			t.Fatalf("byRemote %+v names a dead or misfiled id (%v)", k, id.state)
		}
	}
	for k, id := range a.byQPN {
		if a.ids[id.localID] != id || id.remoteQPN != k.v {
			t.Fatalf("byQPN %+v names a dead or misfiled id", k)
		}
	}
	for k, id := range a.sidr {
		if a.ids[id.localID] != id || id.sidrReq != k {
			t.Fatalf("sidr %+v names a dead or misfiled id", k)
		}
	}
}
