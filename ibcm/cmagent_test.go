package ibcm

import (
	"bytes"
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/roce"
	"github.com/softrdma/softrdma/sim"
)

// The MAC addresses of the captures' two guests: their node GUIDs are in the
// REQs and REPs (0x505400fffe7700NN).
var (
	mac21 = [6]byte{0x52, 0x54, 0x00, 0x77, 0x00, 0x01}
	mac22 = [6]byte{0x52, 0x54, 0x00, 0x77, 0x00, 0x02}
)

// capturedMAD is a MAD of a capture with the frame that carried it.
type capturedMAD struct {
	mad   MAD
	frame roce.Frame
	pkt   ibtransport.Packet
}

func captureCM(tb testing.TB, name string) []capturedMAD {
	tb.Helper()
	var out []capturedMAD
	for i, f := range roceFrames(tb, name) {
		var p ibtransport.Packet
		if err := p.Decode(f.IB); err != nil {
			tb.Fatalf("%s frame %d: %v", name, i, err)
		}
		if p.BTH.DestQP() != GSIQPN {
			continue
		}
		m, err := MADFromPacket(&p)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, capturedMAD{mad: MAD(bytes.Clone(m)), frame: f, pkt: p})
	}
	return out
}

// cmNode is a device with a CM agent on a simulated port; its handler records
// every event and then calls react, if set.
type cmNode struct {
	t      testing.TB
	port   *sim.Port
	dev    *roce.Device
	agent  *Agent
	events []Event
	react  func(ev *Event)
}

func (n *cmNode) handle(ev *Event) {
	n.events = append(n.events, *ev)
	if n.react != nil {
		n.react(ev)
	}
}

// eventTypes lists the types of the events recorded so far.
func (n *cmNode) eventTypes() []EventType {
	var ts []EventType
	for _, ev := range n.events {
		ts = append(ts, ev.Type)
	}
	return ts
}

// cmRig is a simulated network of CM nodes and raw ports.
type cmRig struct {
	t   testing.TB
	net *sim.Network
	sw  *sim.Switch
	nbr roce.StaticNeighbors
}

func newCMRig(t testing.TB, seed uint64) *cmRig {
	n := sim.New(seed)
	return &cmRig{t: t, net: n, sw: n.AddSwitch("sw"), nbr: roce.StaticNeighbors{}}
}

// raw adds a port without a device (the test reads and writes its frames).
func (r *cmRig) raw(name string, mac [6]byte, ip netip.Addr, cfg sim.LinkConfig) *sim.Port {
	p := r.net.AddNode(name, mac)
	r.net.ConnectSwitch(p, r.sw, cfg)
	r.nbr[ip] = mac
	return p
}

// node adds a device with a CM agent.
func (r *cmRig) node(name string, mac [6]byte, ip netip.Addr, cfg sim.LinkConfig, seed uint64) *cmNode {
	r.t.Helper()
	p := r.raw(name, mac, ip, cfg)
	dev, err := roce.NewDevice(roce.DeviceConfig{Endpoint: p, MAC: mac, Addrs: []netip.Addr{ip}, Neighbors: r.nbr,
		Engine: ibtransport.ContextConfig{Seed: seed}})
	if err != nil {
		r.t.Fatal(err)
	}
	a, err := NewAgent(AgentConfig{Device: dev, Clock: r.net.Clock(), Seed: seed})
	if err != nil {
		r.t.Fatal(err)
	}
	return &cmNode{t: r.t, port: p, dev: dev, agent: a}
}

// flush sends what n's device has and delivers it.
func (r *cmRig) flush(nodes ...*cmNode) {
	r.t.Helper()
	for _, n := range nodes {
		if _, err := n.dev.Flush(r.net.Now()); err != nil {
			r.t.Fatal(err)
		}
	}
	r.net.RunFor(time.Millisecond)
}

// drive runs the network and nodes until done or the virtual limit.
func (r *cmRig) drive(limit time.Duration, done func() bool, nodes ...*cmNode) error {
	var devs []sim.Stepped
	for _, n := range nodes {
		devs = append(devs, n.dev, n.agent)
	}
	return r.net.Drive(limit, done, nil, devs...)
}

// settle drives until nothing is left to happen.
func (r *cmRig) settle(limit time.Duration, nodes ...*cmNode) {
	r.t.Helper()
	if err := r.drive(limit, func() bool { return false }, nodes...); err != nil && !errors.Is(err, sim.ErrStalled) {
		r.t.Fatal(err)
	}
}

// received returns the MADs (and their frames) waiting on a raw port.
func received(tb testing.TB, p *sim.Port) []capturedMAD {
	tb.Helper()
	var out []capturedMAD
	bufs := [][]byte{make([]byte, 9000)}
	sizes := []int{0}
	for {
		n, err := p.TryRead(bufs, sizes, 0)
		if err != nil {
			tb.Fatal(err)
		}
		if n == 0 {
			return out
		}
		b := bytes.Clone(bufs[0][:sizes[0]])
		var f roce.Frame
		if err := f.DecodeEthernet(b); err != nil {
			continue // ARP and such
		}
		if err := roce.VerifyICRC(&f); err != nil {
			tb.Fatalf("frame from the agent: %v", err)
		}
		var pk ibtransport.Packet
		if err := pk.Decode(f.IB); err != nil {
			tb.Fatal(err)
		}
		m, err := MADFromPacket(&pk)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, capturedMAD{mad: MAD(bytes.Clone(m)), frame: f, pkt: pk})
	}
}

// sameMAD compares two MADs byte by byte, skipping [skipFrom, skipTo).
func sameMAD(t *testing.T, what string, got, want MAD, skipFrom, skipTo int) {
	t.Helper()
	for i := range MADLen {
		if i >= skipFrom && i < skipTo {
			continue
		}
		if got[i] != want[i] {
			t.Errorf("%s differs from the kernel's from byte %d (data offset %d): %x, want %x", what, i, i-MADHeaderLen,
				got[i:min(i+8, MADLen)], want[i:min(i+8, MADLen)])
			return
		}
	}
}

// sameTransport checks the headers our device put around a MAD against the
// kernel's: opcode, P_Key, destination QP, the AckReq bit, PSN, Q_Key, source
// QP, the UDP source port (rxe's hash of QPN 1), IP TTL, TOS and DF.
func sameTransport(t *testing.T, what string, got, want capturedMAD, checkPSN bool) {
	t.Helper()
	g, w := got.pkt.BTH, want.pkt.BTH
	if g.Opcode() != w.Opcode() || g.PKey() != w.PKey() || g.DestQP() != w.DestQP() ||
		(checkPSN && g.PSN() != w.PSN()) || g[1] != w[1] {
		t.Errorf("%s BTH %x, kernel's %x", what, []byte(g), []byte(w))
	}
	// rxe sets AckReq on QP1's sends (and not on other UD QPs' sends, see
	// rxe-ud-pingpong.pcap); the engine sets it on RC only. A UD receiver
	// ignores the bit (IBTA 9.2.6), so this is reported, not failed.
	if g.AckReq() != w.AckReq() {
		t.Logf("%s: AckReq %v, the kernel's %v (engine behaviour, harmless on UD)", what, g.AckReq(), w.AckReq())
	}
	if !bytes.Equal(got.pkt.DETH, want.pkt.DETH) {
		t.Errorf("%s DETH %x, kernel's %x", what, []byte(got.pkt.DETH), []byte(want.pkt.DETH))
	}
	if got.frame.SrcPort != want.frame.SrcPort || got.frame.DstPort != want.frame.DstPort {
		t.Errorf("%s UDP ports %d→%d, kernel's %d→%d", what, got.frame.SrcPort, got.frame.DstPort, want.frame.SrcPort, want.frame.DstPort)
	}
	gi, wi := got.frame.IP, want.frame.IP
	if gi[1] != wi[1] || gi[8] != wi[8] || gi[6]&0xE0 != wi[6]&0xE0 || got.frame.Src != want.frame.Src || got.frame.Dst != want.frame.Dst {
		t.Errorf("%s IPv4 TOS/TTL/flags/addresses %x %v→%v, kernel's %x %v→%v", what, gi[:20], got.frame.Src, got.frame.Dst, wi[:20], want.frame.Src, want.frame.Dst)
	}
}

// connectionMADs finds a captured connection's REQ, REP, RTU, DREQ and DREP by
// the REQ's local comm ID.
func connectionMADs(t *testing.T, all []capturedMAD, reqComm uint32) (req, rep, rtu, dreq, drep capturedMAD) {
	t.Helper()
	var repComm uint32
	for _, c := range all {
		m := c.mad
		switch m.Attribute() {
		case AttrREQ:
			if m.REQ().LocalCommID() == reqComm {
				req = c
			}
		case AttrREP:
			if m.REP().RemoteCommID() == reqComm {
				rep, repComm = c, m.REP().LocalCommID()
			}
		case AttrRTU:
			if m.RTU().LocalCommID() == reqComm {
				rtu = c
			}
		case AttrDREQ:
			if m.DREQ().LocalCommID() == reqComm && m.DREQ().RemoteCommID() == repComm {
				dreq = c
			}
		case AttrDREP:
			if m.DREP().RemoteCommID() == reqComm {
				drep = c
			}
		}
	}
	if req.mad == nil || rep.mad == nil || rtu.mad == nil || dreq.mad == nil || drep.mad == nil {
		t.Fatalf("connection %#x incomplete in the capture", reqComm)
	}
	return
}

// kernelConns are the captured rdma_cm connections replayed against the agent.
var kernelConns = []struct {
	capture string
	reqComm uint32
	port    uint16 // rdma_cm port of the service
	srcPort uint16 // the active side's rdma_cm port
	gsiPSN  bool   // the connection's MADs are the first of each side's QP1
}{
	{"rxe-rdma-cm-rping.pcap", 0x20054e4f, 7174, 0xb823, true},
	{"rxe-write-bw-rdma-cm.pcap", 0x21054e4f, 18515, 0xb0cb, false},
	{"rxe-write-bw-rdma-cm.pcap", 0x22054e4f, 18515, 0xa4dc, false},
}

var (
	ip21 = netip.MustParseAddr("10.77.0.21")
	ip22 = netip.MustParseAddr("10.77.0.22")
)

// TestAgentPassiveKernel plays the kernel's active side (the captured REQ,
// RTU and DREQ) against the agent as the server, and compares the agent's REP
// and DREP with the kernel's, byte for byte.
func TestAgentPassiveKernel(t *testing.T) {
	for _, kc := range kernelConns {
		t.Run(kc.capture, func(t *testing.T) {
			req, rep, rtu, dreq, drep := connectionMADs(t, captureCM(t, kc.capture), kc.reqComm)
			r := newCMRig(t, 1)
			// Accept as rping's server does: its QP and PSN, one READ each
			// way (none for perftest), RNR retry 7.
			kernelREP := rep.mad.REP()
			srv, peer, from := r.kernelServer(t, 7, kc.port, rep, ReplyParams{QPN: kernelREP.LocalQPN(), StartingPSN: kernelREP.StartingPSN(),
				ResponderResources: kernelREP.ResponderResources(), InitiatorDepth: kernelREP.InitiatorDepth(), RNRRetryCount: 7})
			if srv.agent.GUID() != kernelREP.LocalCAGUID() {
				t.Fatalf("GUID %#x, kernel's %#x", srv.agent.GUID(), kernelREP.LocalCAGUID())
			}
			if err := srv.agent.HandleMAD(r.net.Now(), req.mad, from); err != nil {
				t.Fatalf("kernel's REQ: %v", err)
			}
			if len(srv.events) != 1 || srv.events[0].Type != EventREQ {
				t.Fatalf("events %v", srv.eventTypes())
			}
			ev := srv.events[0]
			if want := req.mad.REQ().Fields(); !reqFieldsEqual(*ev.REQ, want) || ev.From.Remote != ip22 {
				t.Errorf("REQ event %+v from %v, want %+v", *ev.REQ, ev.From, want)
			}
			id := ev.ID
			r.sentLikeKernel(t, srv, peer, "after the REQ", rep, 0, 0, kc.gsiPSN)
			if id.State() != StateREPSent {
				t.Errorf("state %v", id.State())
			}

			if err := srv.agent.HandleMAD(r.net.Now(), rtu.mad, from); err != nil {
				t.Fatalf("kernel's RTU: %v", err)
			}
			if id.State() != StateEstablished || srv.events[len(srv.events)-1].Type != EventRTU {
				t.Fatalf("after RTU: %v, events %v", id.State(), srv.eventTypes())
			}
			if err := srv.agent.HandleMAD(r.net.Now(), dreq.mad, from); err != nil {
				t.Fatalf("kernel's DREQ: %v", err)
			}
			r.sentLikeKernel(t, srv, peer, "after the DREQ", drep, 0, 0, kc.gsiPSN)
			if id.State() != StateTimeWait {
				t.Errorf("state %v after DREP", id.State())
			}
			r.net.RunFor(srv.agent.Config().TimeWait)
			srv.agent.Poll(r.net.Now())
			want := []EventType{EventREQ, EventRTU, EventDREQ, EventTimeWaitExit}
			if got := srv.eventTypes(); !slices.Equal(got, want) {
				t.Errorf("events %v, want %v", got, want)
			}
			if c := srv.agent.Counters(); c.IDs != 0 || c.Drops != ([numCMDropReasons]uint64{}) {
				t.Errorf("counters %+v", c)
			}
		})
	}
}

// kernelServer makes the agent the server of a replayed kernel connection: the
// raw port "client" (mac22, ip22) plays the kernel's client, and the node
// "server" (mac21, ip21, seed) listens on the rdma_cm TCP port, takes the
// communication ID of the kernel's REP, accepts a REQ with reply and answers a
// DREQ with a DREP. from is the address the kernel's MADs come from.
func (r *cmRig) kernelServer(t *testing.T, seed uint64, port uint16, rep capturedMAD, reply ReplyParams) (srv *cmNode, peer *sim.Port, from MADAddress) {
	t.Helper()
	peer = r.raw("client", mac22, ip22, sim.LinkConfig{})
	srv = r.node("server", mac21, ip21, sim.LinkConfig{}, seed)
	repComm := rep.mad.REP().LocalCommID()
	srv.agent.newCommID = func() uint32 { return repComm }
	srv.react = func(ev *Event) {
		switch ev.Type {
		case EventREQ:
			p := reply
			if err := ev.ID.Accept(&p); err != nil {
				t.Error(err)
			}
		case EventDREQ:
			if err := ev.ID.Disconnect(nil); err != nil {
				t.Error(err)
			}
		}
	}
	if _, err := srv.agent.Listen(CMAServiceID(RDMAPortSpaceTCP, port), srv.handle); err != nil {
		t.Fatal(err)
	}
	return srv, peer, MADAddress{Remote: ip22, Local: ip21, RemoteQPN: 1}
}

// sentLikeKernel flushes n and fails the test unless peer then received exactly
// one MAD, and it is like the kernel's want: the same bytes but [skipFrom, skipTo)
// (sameMAD) and the same transport headers (sameTransport). step names what made
// n send it. It returns the MAD n sent.
func (r *cmRig) sentLikeKernel(t *testing.T, n *cmNode, peer *sim.Port, step string, want capturedMAD, skipFrom, skipTo int, checkPSN bool) capturedMAD {
	t.Helper()
	r.flush(n)
	out := received(t, peer)
	attr := want.mad.Attribute()
	if len(out) != 1 || out[0].mad.Attribute() != attr {
		t.Fatalf("%s the agent sent %d MADs, want one %v", step, len(out), attr)
	}
	sameMAD(t, attr.String(), out[0].mad, want.mad, skipFrom, skipTo)
	sameTransport(t, attr.String(), out[0], want, checkPSN)
	return out[0]
}

// reqFieldsEqual compares two REQs' fields, private data included.
func reqFieldsEqual(a, b REQFields) bool {
	pa, pb := a.PrivateData, b.PrivateData
	a.PrivateData, b.PrivateData = nil, nil
	return reflect.DeepEqual(a, b) && bytes.Equal(pa, pb)
}

// TestAgentActiveKernel connects from the agent as rping's and perftest's
// clients did, compares the REQ, RTU and DREQ with the kernel's (all but the
// transaction ID, which is the kernel's MAD agent's own number), and feeds the
// captured REP and DREP back.
func TestAgentActiveKernel(t *testing.T) {
	for _, kc := range kernelConns {
		t.Run(kc.capture, func(t *testing.T) {
			req, rep, rtu, dreq, drep := connectionMADs(t, captureCM(t, kc.capture), kc.reqComm)
			r := newCMRig(t, 2)
			peer := r.raw("server", mac21, ip21, sim.LinkConfig{})
			cli := r.node("client", mac22, ip22, sim.LinkConfig{}, 8)
			cli.agent.newCommID = func() uint32 { return kc.reqComm }
			kr := req.mad.REQ()
			pd := make([]byte, CMAHeaderLen)
			CMAHeader(pd).Encode(&CMAHeaderFields{SrcPort: kc.srcPort, Src: ip22, Dst: ip21})
			p := &ConnectParams{
				ServiceID: CMAServiceID(RDMAPortSpaceTCP, kc.port),
				Path: PathFields{LocalLID: 0xFFFF, RemoteLID: 0xFFFF, LocalGID: ip22.As16(), RemoteGID: ip21.As16(),
					FlowLabel: roce.CMFlowLabel(kc.srcPort, kc.port), HopLimit: 64},
				QPN: kr.LocalQPN(), StartingPSN: kr.StartingPSN(),
				ResponderResources: kr.ResponderResources(), InitiatorDepth: kr.InitiatorDepth(),
				RetryCount: 7, RNRRetryCount: 7, PrivateData: pd,
			}
			cli.react = func(ev *Event) {
				if ev.Type == EventREP {
					if err := ev.ID.SendRTU(nil); err != nil {
						t.Fatal(err)
					}
				}
			}
			id, err := cli.agent.Connect(p, cli.handle)
			if err != nil {
				t.Fatal(err)
			}
			ourTID := r.sentLikeKernel(t, cli, peer, "on Connect", req, 8, 16, kc.gsiPSN).mad.TransactionID()

			from := MADAddress{Remote: ip21, Local: ip22, RemoteQPN: 1}
			if err := cli.agent.HandleMAD(r.net.Now(), rep.mad, from); err != nil {
				t.Fatalf("kernel's REP: %v", err)
			}
			if len(cli.events) != 1 || cli.events[0].Type != EventREP {
				t.Fatalf("events %v", cli.eventTypes())
			}
			if got, want := cli.events[0].REP, rep.mad.REP().Fields(); got.LocalQPN != want.LocalQPN ||
				got.StartingPSN != want.StartingPSN || got.ResponderResources != want.ResponderResources ||
				got.RNRRetryCount != want.RNRRetryCount || got.LocalCAGUID != want.LocalCAGUID || !bytes.Equal(got.PrivateData, want.PrivateData) {
				t.Errorf("REP event %+v, want %+v", got, want)
			}
			sent := r.sentLikeKernel(t, cli, peer, "after the REP", rtu, 8, 16, kc.gsiPSN)
			if sent.mad.TransactionID() != ourTID || id.State() != StateEstablished {
				t.Errorf("RTU TID %#x (REQ's %#x), state %v", sent.mad.TransactionID(), ourTID, id.State())
			}

			if err := id.Disconnect(nil); err != nil {
				t.Fatal(err)
			}
			sent = r.sentLikeKernel(t, cli, peer, "on Disconnect", dreq, 8, 16, kc.gsiPSN)
			d := bytes.Clone(drep.mad)
			MAD(d).SetTransactionID(sent.mad.TransactionID()) // a DREP echoes the DREQ's TID
			if err := cli.agent.HandleMAD(r.net.Now(), d, from); err != nil {
				t.Fatalf("kernel's DREP: %v", err)
			}
			r.net.RunFor(cli.agent.Config().TimeWait)
			cli.agent.Poll(r.net.Now())
			want := []EventType{EventREP, EventDREP, EventTimeWaitExit}
			if got := cli.eventTypes(); !slices.Equal(got, want) {
				t.Errorf("events %v, want %v", got, want)
			}
			if c := cli.agent.Counters(); c.IDs != 0 || c.Drops != ([numCMDropReasons]uint64{}) || c.Retries != 0 {
				t.Errorf("counters %+v", c)
			}
		})
	}
}
