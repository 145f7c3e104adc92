package conform

import (
	"context"
	"net"
	"net/netip"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/netio"
	"github.com/softrdma/softrdma/roce"
	"github.com/softrdma/softrdma/sim"
)

// Fault makes an in-process peer misbehave on the wire, to show that the cases
// notice. Each function sees one RoCE transport packet (BTH through pad) and may
// change its bytes in place (not its length) or drop it by returning false; the
// ICRC is recomputed after a change.
type Fault struct {
	// Name says what the fault does.
	Name string
	// Out edits the packets the peer sends.
	Out func(pkt []byte) bool
	// In edits the packets the peer receives, before its device checks them.
	In func(pkt []byte) bool
	// AcceptBadICRC recomputes the ICRC of every packet the peer receives, so
	// that corrupted ones reach its engine.
	AcceptBadICRC bool
	// BreakICRC flips a bit of the ICRC of every packet the peer sends.
	BreakICRC bool
	// EditQP changes the attributes the tester asked create_qp for before the
	// peer applies them (a peer that ignores its configuration).
	EditQP func(*QPSpec)
	// ReportPathMTU, if not zero, is the MTU the peer's control server claims
	// instead of its real one.
	ReportPathMTU int
}

// Addresses of the simulated tester and peer.
var (
	SelfTesterIP  = netip.MustParseAddr("10.47.91.1")
	SelfPeerIP    = netip.MustParseAddr("10.47.91.2")
	SelfTesterMAC = [6]byte{0x02, 0xc0, 0x4f, 0, 0, 1}
	SelfPeerMAC   = [6]byte{0x02, 0xc0, 0x4f, 0, 0, 2}
)

// SelfConfig configures NewSelfRoCE.
type SelfConfig struct {
	// Seed seeds the simulator and the peer's engine (the same seed gives the
	// same run).
	Seed uint64
	// MTU is the link's Ethernet MTU (default 1500: IB MTU 1024).
	MTU int
	// Latency is the one-way link latency (default 2µs).
	Latency time.Duration
	// Fault, if not nil, makes the peer misbehave.
	Fault *Fault
	// Engine configures the peer's verbs engine (Seed is taken from Seed).
	Engine ib.ContextConfig
	// WrapLink, if not nil, wraps the tester's link before its wire uses it
	// (a capture of every frame the tester sends and receives, say).
	WrapLink func(Link) Link
}

// SelfRoCE is an in-process softrdma RoCE peer on a simulated link, with the
// tester on the other end and the control protocol between them over an
// in-memory connection. Everything runs in virtual time, deterministically.
type SelfRoCE struct {
	// Env is the tester's environment: run RoCECases(s.Env).
	Env *RoCEEnv
	// Net is the simulated network.
	Net *sim.Network
	// Device is the peer under test.
	Device *roce.Device

	client *Client
	done   chan struct{}
}

// NewSelfRoCE builds the simulated network, the peer device and its control
// server, and the tester's wire.
func NewSelfRoCE(ctx context.Context, cfg SelfConfig) (*SelfRoCE, error) {
	if cfg.MTU == 0 {
		cfg.MTU = netio.DefaultMTU
	}
	if cfg.Latency == 0 {
		cfg.Latency = 2 * time.Microsecond
	}
	n := sim.New(cfg.Seed)
	pt := n.AddNode("tester", SelfTesterMAC)
	pp := n.AddNode("peer", SelfPeerMAC)
	n.Connect(pt, pp, sim.LinkConfig{Latency: cfg.Latency, MTU: cfg.MTU})
	var ep netio.Endpoint = pp
	if cfg.Fault != nil {
		ep = &faultEndpoint{Port: pp, fault: cfg.Fault}
	}
	eng := cfg.Engine
	eng.Seed = cfg.Seed
	dev, err := roce.NewDevice(roce.DeviceConfig{Endpoint: ep, MAC: SelfPeerMAC, Addrs: []netip.Addr{SelfPeerIP},
		Neighbors: roce.StaticNeighbors{SelfTesterIP: SelfTesterMAC}, Engine: eng})
	if err != nil {
		return nil, err
	}
	a, b := net.Pipe()
	s := &SelfRoCE{Net: n, Device: dev, client: NewClient(a), done: make(chan struct{})}
	srv := &Server{Device: dev}
	if f := cfg.Fault; f != nil {
		srv.editQP, srv.reportMTU = f.EditQP, f.ReportPathMTU
	}
	go func() {
		defer close(s.done)
		srv.ServeConn(b)
	}()
	var link Link = NewSimLink(n, pt, dev)
	if cfg.WrapLink != nil {
		link = cfg.WrapLink(link)
	}
	wire, err := NewWire(WireConfig{Link: link, LocalIP: SelfTesterIP, PeerIP: SelfPeerIP,
		LocalMAC: SelfTesterMAC, PeerMAC: SelfPeerMAC})
	if err != nil {
		s.Close()
		return nil, err
	}
	if s.Env, err = NewRoCEEnv(ctx, wire, s.client); err != nil {
		s.Close()
		return nil, err
	}
	// Virtual time is free: wait generously.
	s.Env.AnswerTimeout, s.Env.Silence = time.Second, 200*time.Millisecond
	return s, nil
}

// Close stops the control server and the device.
func (s *SelfRoCE) Close() error {
	s.client.Close()
	<-s.done
	s.Device.Close()
	return s.Net.Close()
}

// faultEndpoint wraps the peer's simulated port with a Fault.
type faultEndpoint struct {
	*sim.Port
	fault *Fault
}

var (
	_ netio.Endpoint = (*faultEndpoint)(nil)
	_ netio.Poller   = (*faultEndpoint)(nil)
)

// apply runs f on the RoCE packet in frame and recomputes its ICRC if the
// packet changed (or always, with force), then flips an ICRC bit with breakICRC;
// it reports whether to keep the frame.
func apply(frame []byte, f func([]byte) bool, force, breakICRC bool) bool {
	var fr roce.Frame
	if fr.DecodeEthernet(frame) != nil || fr.Version != roce.RoCEv2 {
		return true
	}
	before := append([]byte(nil), fr.IB...)
	keep := true
	if f != nil {
		keep = f(fr.IB)
	}
	if keep && (force || string(before) != string(fr.IB)) {
		roce.SetICRC(&fr)
	}
	if breakICRC {
		frame[len(fr.Ethernet)+len(fr.IP)+len(fr.UDP)+len(fr.IB)] ^= 0x01
	}
	return keep
}

// Write sends the peer's frames through Fault.Out.
func (e *faultEndpoint) Write(bufs [][]byte, offset int) (int, error) {
	if e.fault.Out == nil && !e.fault.BreakICRC {
		return e.Port.Write(bufs, offset)
	}
	kept := make([][]byte, 0, len(bufs))
	for _, b := range bufs {
		frame := append([]byte(nil), b[offset:]...)
		if apply(frame, e.fault.Out, false, e.fault.BreakICRC) {
			kept = append(kept, frame)
		}
	}
	if _, err := e.Port.Write(kept, 0); err != nil {
		return 0, err
	}
	return len(bufs), nil
}

// TryRead reads frames for the peer through Fault.In.
func (e *faultEndpoint) TryRead(bufs [][]byte, sizes []int, offset int) (int, error) {
	for {
		n, err := e.Port.TryRead(bufs, sizes, offset)
		if n == 0 || (e.fault.In == nil && !e.fault.AcceptBadICRC) {
			return n, err
		}
		k := e.keep(bufs, sizes, offset, n)
		if k > 0 || err != nil {
			return k, err
		}
	}
}

// keep moves those of the first n frames that Fault.In lets through (after
// it has rewritten them) to the front of bufs and sizes, in order, and
// returns how many there are: the filter of TryRead and Read.
func (e *faultEndpoint) keep(bufs [][]byte, sizes []int, offset, n int) int {
	k := 0
	for i := 0; i < n; i++ {
		if apply(bufs[i][offset:offset+sizes[i]], e.fault.In, e.fault.AcceptBadICRC, false) {
			bufs[k], bufs[i] = bufs[i], bufs[k]
			sizes[k] = sizes[i]
			k++
		}
	}
	return k
}

// Read is TryRead for a blocking reader (not used by the simulated device).
func (e *faultEndpoint) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	for {
		n, err := e.Port.Read(bufs, sizes, offset)
		k := e.keep(bufs, sizes, offset, n)
		if k > 0 || err != nil {
			return k, err
		}
	}
}
