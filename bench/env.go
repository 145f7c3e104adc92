package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/softrdma/softrdma/counters"
	"github.com/softrdma/softrdma/device"
	"github.com/softrdma/softrdma/devspec"
	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/iwarp"
	"github.com/softrdma/softrdma/netio"
	"github.com/softrdma/softrdma/netio/netns"
	"github.com/softrdma/softrdma/pcaptap"
	"github.com/softrdma/softrdma/perf"
	"github.com/softrdma/softrdma/roce"
)

// env is one transport on one backend between the two namespaces: a
// verbs engine on each side, a way to connect RC QPs between them, and the
// raw path to compare with. Side A is the passive one (the target of WRITEs,
// the source of READs, the receiver of SENDs); B issues the requests.
type env struct {
	transport, backend string
	a, b               *ibtransport.Context
	pathMTU            int   // RoCE: the IB path MTU; iWARP: 0
	qpTimeout          uint8 // RoCE: the RC QPs' local ACK timeout (--qp-timeout)
	// connect connects qa (on a) and qb (on b), both fresh RC QPs in RESET,
	// and returns what undoes it (before the QPs are destroyed).
	connect func(qa, qb *ibtransport.QP) (func(), error)
	raw     raw
	closers []func()
	// stats describes the endpoints' counters (SOFTRDMA_BENCH_DEBUG=1).
	stats func() string
	// devices are the two engines' counters, A's then B's, named for the
	// transport, backend and MTU (envCounters).
	devices func(mtu int) []counters.Device
	// openCM starts rdma_cm on both devices (the cm setup rows).
	openCM func() (*cmSides, error)
}

func (e *env) close() {
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
}

// baselinePort is the UDP port (and TCP port) of the raw baselines:
// not 4791, so that the RoCE devices, which stay open meanwhile, never see
// the baselines' packets.
const baselinePort = 4792

// iwarpPort is the TCP port the iWARP listener of side A uses.
const iwarpPort = 4793

func openEnv(pair *netns.Pair, transport, backend string, o *Options) (*env, error) {
	var e *env
	var err error
	switch {
	case transport == "iwarp":
		e, err = openIWARP(pair, o.tap)
	case backend == "tap":
		e, err = openTAP(pair, o.tap)
	default:
		e, err = openRoCE(pair, backend, o.tap)
	}
	if e != nil {
		e.qpTimeout = o.qpTimeout()
	}
	return e, err
}

// openRoCE opens a RoCE device on the backend in each namespace with
// device.Open, as softrdma perf does, its loop running until e closes.
func openRoCE(pair *netns.Pair, backend string, tap *pcaptap.Tap) (*env, error) {
	e := &env{transport: "roce", backend: backend}
	devs := make([]*device.RoCE, 2)
	for i, s := range []*netns.Side{&pair.A, &pair.B} {
		spec := devspec.Spec{Transport: devspec.RoCE, Backend: devspec.Backend(backend), Iface: s.Link, Addr: s.IPv4.Addr()}
		cfg := device.Config{Tap: tap, Engine: engineConfig()}
		if s.Link == "" { // --addrs: an address of this host, the path MTU given
			cfg.Engine.PortMTU = roce.PathMTUFor(s.MTU)
		}
		d, err := openDevice(s.NS, spec, cfg)
		if err != nil {
			e.close()
			return nil, err
		}
		e.closers = append(e.closers, func() { d.Close() })
		devs[i] = d
	}
	if err := e.runRoCE(devs, pair.A.IPv4.Addr(), pair.B.IPv4.Addr()); err != nil {
		return nil, err
	}
	switch backend {
	case "udp":
		e.raw = &udpRaw{pair: pair}
	case "afpacket":
		e.raw = &packetRaw{pair: pair}
	}
	return e, nil
}

// openDevice opens the RoCE device spec describes in namespace ns.
func openDevice(ns *netns.NS, spec devspec.Spec, cfg device.Config) (*device.RoCE, error) {
	var d device.Device
	if err := ns.Do(func() (err error) {
		d, err = device.Open(spec, cfg)
		return err
	}); err != nil {
		return nil, fmt.Errorf("device.Open %v: %w", spec, err)
	}
	return d.(*device.RoCE), nil
}

// The TAP row's hosts, all in namespace A: the device is host .2 behind a
// TAP device whose kernel side, .1, the UDP device binds; the baseline uses
// a TAP of its own on another subnet.
var (
	tapKernel     = netip.MustParsePrefix("10.98.0.1/24")
	tapHost       = netip.MustParsePrefix("10.98.0.2/24")
	tapRawKernel  = netip.MustParsePrefix("10.97.0.1/24")
	tapRawHost    = netip.MustParsePrefix("10.97.0.2/24")
	tapName       = "srbtap0"
	tapRawName    = "srbtap1"
	tapRawHostMAC = net.HardwareAddr{0x02, 0x5f, 0x72, 0x62, 0x00, 0x02}
)

// openTAP opens the tap backend's row: in namespace A, side A is a
// device behind a TAP device (backend=tap, as softrdma perf --backend tap)
// and side B a UDP device on the kernel's side of it, so every packet
// crosses the TAP once. (The TAP is the NIC of a host, not a link between
// namespaces: this is the path TestPerfTAP runs.)
func openTAP(pair *netns.Pair, tap *pcaptap.Tap) (*env, error) {
	e := &env{transport: "roce", backend: "tap"}
	devs := make([]*device.RoCE, 2)
	for i, side := range []struct {
		spec devspec.Spec
		cfg  device.Config
	}{
		{devspec.Spec{Transport: devspec.RoCE, Backend: devspec.BackendTAP, Iface: tapName, Addr: tapHost.Addr()},
			device.Config{TAPKernelAddrs: []netip.Prefix{tapKernel}, TAPMTU: pair.A.MTU}},
		{devspec.Spec{Transport: devspec.RoCE, Backend: devspec.BackendUDP, Iface: tapName, Addr: tapKernel.Addr()}, device.Config{}},
	} {
		side.cfg.Tap, side.cfg.Engine = tap, engineConfig()
		d, err := openDevice(pair.A.NS, side.spec, side.cfg)
		if err != nil {
			e.close()
			return nil, err
		}
		e.closers = append(e.closers, func() { d.Close() })
		devs[i] = d
	}
	if err := e.runRoCE(devs, tapHost.Addr(), tapKernel.Addr()); err != nil {
		return nil, err
	}
	e.raw = &tapRaw{ns: pair.A.NS, mtu: pair.A.MTU}
	return e, nil
}

// runRoCE makes e describe devs (A's, then B's) and connect QPs between
// them, A at addrA and B at addrB.
func (e *env) runRoCE(ds []*device.RoCE, addrA, addrB netip.Addr) error {
	devs := []*roce.Device{ds[0].RoCE(), ds[1].RoCE()}
	da, db := devs[0], devs[1]
	e.envCounters([2]*ibtransport.Context{da.Context(), db.Context()}, [2]netip.Addr{addrA, addrB}, [2]*roce.Device{da, db})
	e.stats = func() string {
		var b strings.Builder
		counters.WriteText(&b, counters.Snapshot{Devices: e.devices(0)})
		for i, d := range devs {
			if u, ok := d.Endpoint().(*netio.UDPEndpoint); ok {
				fmt.Fprintf(&b, "  udp %c: %+v\n  last send error: %v\n", 'A'+i, u.Stats(), u.LastSendError())
			}
			if p, ok := d.Endpoint().(*netio.PacketEndpoint); ok {
				fmt.Fprintf(&b, "  packet %c: %+v\n", 'A'+i, p.Stats())
			}
			if p, ok := d.Endpoint().(*netio.TAPEndpoint); ok {
				fmt.Fprintf(&b, "  tap %c: %+v\n", 'A'+i, p.Stats())
			}
		}
		return b.String()
	}
	e.a, e.b = da.Context(), db.Context()
	e.openCM = func() (*cmSides, error) { return openRoCECM(ds[0], ds[1], addrA, addrB) }
	e.pathMTU = min(da.PathMTU(), db.PathMTU())
	ahA, err := da.AddressHandle(addrB)
	if err != nil {
		e.close()
		return err
	}
	ahB, err := db.AddressHandle(addrA)
	if err != nil {
		e.close()
		return err
	}
	e.connect = func(qa, qb *ibtransport.QP) (func(), error) {
		psnA, psnB := rand.Uint32()&ibtransport.PSNMask, rand.Uint32()&ibtransport.PSNMask
		if err := modifyRC(qa, ahA, e.pathMTU, e.qpTimeout, qb.QPN(), psnA, psnB); err != nil {
			return nil, err
		}
		if err := modifyRC(qb, ahB, e.pathMTU, e.qpTimeout, qa.QPN(), psnB, psnA); err != nil {
			return nil, err
		}
		return func() {}, nil
	}
	return nil
}

// maxRdAtomic is the READs outstanding per QP, both ways: perftest's
// default for ib_read_bw, the device's maximum (rxe's and ours, 128).
const maxRdAtomic = 128

// maxQP is the devices' MaxQP: the scale rows' 4096 QPs and the
// device's own (QP1 of a RoCE device).
const maxQP = 4096 + 64

// engineConfig is the engine configuration of the bench's devices
// (SOFTRDMA_BENCH_WINDOW and SOFTRDMA_BENCH_ACKREQ override the window and
// the AckReq interval, for experiments).
func engineConfig() ibtransport.ContextConfig {
	c := ibtransport.ContextConfig{Seed: rand.Uint64(), MaxQP: maxQP}
	if v, err := strconv.Atoi(os.Getenv("SOFTRDMA_BENCH_WINDOW")); err == nil {
		c.MaxUnackedPSNs = v
	}
	if v, err := strconv.Atoi(os.Getenv("SOFTRDMA_BENCH_ACKREQ")); err == nil {
		c.AckReqInterval = v
	}
	return c
}

// modifyRC moves an RC QP from RESET to RTS towards the peer QP dqpn:
// the attributes softrdma perf uses (perftest's), with the given local ACK
// timeout.
func modifyRC(qp *ibtransport.QP, ah ibtransport.AddressHandle, mtu int, timeout uint8, dqpn, sqpsn, rqpsn uint32) error {
	const all = ibtransport.AccessRemoteWrite | ibtransport.AccessRemoteRead | ibtransport.AccessRemoteAtomic
	if err := qp.Modify(&ibtransport.QPAttr{QPState: ibtransport.QPStateInit, Port: 1, AccessFlags: all},
		ibtransport.QPAttrState|ibtransport.QPAttrPKeyIndex|ibtransport.QPAttrPort|ibtransport.QPAttrAccessFlags); err != nil {
		return err
	}
	maxRd := maxRdAtomic
	if err := qp.Modify(&ibtransport.QPAttr{QPState: ibtransport.QPStateRTR, AH: ah, PathMTU: mtu, DestQPN: dqpn,
		RQPSN: rqpsn, MaxDestRdAtomic: maxRd, MinRNRTimer: perf.MinRNRTimer},
		ibtransport.QPAttrState|ibtransport.QPAttrAH|ibtransport.QPAttrPathMTU|ibtransport.QPAttrDestQPN|
			ibtransport.QPAttrRQPSN|ibtransport.QPAttrMaxDestRdAtomic|ibtransport.QPAttrMinRNRTimer); err != nil {
		return err
	}
	return qp.Modify(&ibtransport.QPAttr{QPState: ibtransport.QPStateRTS, SQPSN: sqpsn, Timeout: timeout,
		RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: maxRd},
		ibtransport.QPAttrState|ibtransport.QPAttrSQPSN|ibtransport.QPAttrTimeout|ibtransport.QPAttrRetryCnt|
			ibtransport.QPAttrRNRRetry|ibtransport.QPAttrMaxRdAtomic)
}

// openIWARP opens an iWARP device in each namespace (device.Open), a
// listener in A, and connects each QP pair with iwarp.Dial from B and
// Accept in A: the rows measure the engine on its TCP connections, without
// rdma_cm's exchanges (the cm setup rows measure those). With --pcap (tap not
// nil) the dialing side's connections are observed (device.IWARP.Params)
// and written as synthesised TCP segments (pcaptap.TCP): one side sees all
// the octets of a connection, both ways; observing the other too would
// record each connection twice under one 4-tuple with other sequence numbers.
func openIWARP(pair *netns.Pair, tap *pcaptap.Tap) (*env, error) {
	e := &env{transport: "iwarp", backend: "tcp"}
	// READs outstanding as on RoCE (and as siw allows, 128): with
	// iwarp's default of 16 the READ rows measured the round trip, not the
	// transport (64 B READ rate 0.03 of the path, issue 22).
	params := iwarp.ConnParams{IRD: maxRdAtomic, ORD: maxRdAtomic}
	devs := make([]*device.IWARP, 2)
	for i, s := range []*netns.Side{&pair.A, &pair.B} {
		cfg := device.Config{Engine: ibtransport.ContextConfig{MaxQP: maxQP}, IWARP: params}
		if i == 1 {
			cfg.Tap = tap
		}
		spec := devspec.Spec{Transport: devspec.IWARP, Addr: s.IPv4.Addr()}
		var d device.Device
		if err := s.NS.Do(func() (err error) {
			d, err = device.Open(spec, cfg)
			return err
		}); err != nil {
			e.close()
			return nil, fmt.Errorf("device.Open %v: %w", spec, err)
		}
		// First in, so last out: after the listener, once the connections
		// are closed (B's Close hands the capture's error to tap).
		e.closers = append(e.closers, func() { d.Close() })
		devs[i] = d.(*device.IWARP)
	}
	da, db := devs[0].IWARP(), devs[1].IWARP()
	e.a, e.b = da.Context(), db.Context()
	e.envCounters([2]*ibtransport.Context{e.a, e.b}, [2]netip.Addr{pair.A.IPv4.Addr(), pair.B.IPv4.Addr()}, [2]*roce.Device{})
	e.stats = func() string {
		var b strings.Builder
		counters.WriteText(&b, counters.Snapshot{Devices: e.devices(0)})
		return b.String()
	}
	addr := net.JoinHostPort(pair.A.IPv4.Addr().String(), strconv.Itoa(iwarpPort))
	var ln *iwarp.Listener
	if err := pair.A.NS.Do(func() (err error) {
		ln, err = iwarp.Listen(addr, params)
		return err
	}); err != nil {
		e.close()
		return nil, fmt.Errorf("iwarp.Listen %s: %w", addr, err)
	}
	e.closers = append(e.closers, func() { ln.Close() })
	dialParams := devs[1].Params()
	e.connect = func(qa, qb *ibtransport.QP) (func(), error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		type accepted struct {
			c   *iwarp.Conn
			err error
		}
		acc := make(chan accepted, 1)
		go func() {
			c, err := ln.Accept(ctx, qa)
			acc <- accepted{c, err}
		}()
		var cb *iwarp.Conn
		derr := pair.B.NS.Do(func() (err error) {
			cb, err = iwarp.Dial(ctx, qb, addr, dialParams)
			return err
		})
		if derr != nil {
			cancel()
			if a := <-acc; a.c != nil {
				a.c.Close()
			}
			return nil, fmt.Errorf("iwarp.Dial %s: %w", addr, derr)
		}
		a := <-acc
		if a.err != nil {
			cb.Close()
			return nil, fmt.Errorf("iwarp Accept: %w", a.err)
		}
		return func() {
			cb.Close()
			a.c.Close()
		}, nil
	}
	e.openCM = func() (*cmSides, error) { return openIWARPCM(da, db, pair) }
	e.raw = &tcpRaw{pair: pair}
	return e, nil
}

// errStall is returned when a measurement sees no completion for long.
var errStall = errors.New("no progress for 3s")

// stallTimeout is how long a measurement may go without a completion
// (a variable for tests).
var stallTimeout = 3 * time.Second

// drainLimit bounds the time a measurement takes after its window, to
// complete what is in flight.
const drainLimit = time.Minute

// addrPort is the baseline's address on a side.
func addrPort(s *netns.Side) netip.AddrPort {
	return netip.AddrPortFrom(s.IPv4.Addr(), baselinePort)
}
