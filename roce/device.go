package roce

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/softrdma/softrdma/header"
	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/neigh"
	"github.com/softrdma/softrdma/netio"
)

// maxRXEHeaderLen is what rxe subtracts from the netdev MTU to get the largest IB
// MTU (RXE_MAX_HDR_LENGTH in rxe_param.h): a 1500-byte link gives 1024, 9000 gives 4096.
const maxRXEHeaderLen = 80

// PathMTUFor returns the IB path MTU (256..4096) that rxe derives from an
// interface MTU: the largest IB MTU not above mtu minus rxe's header allowance.
func PathMTUFor(ifaceMTU int) int {
	for m := 4096; m > 256; m >>= 1 {
		if ifaceMTU-maxRXEHeaderLen >= m {
			return m
		}
	}
	return 256
}

// Neighbors resolves next-hop IP addresses to MAC addresses for a device that
// writes whole Ethernet frames: see neigh.Resolver (neigh.Host speaks ARP/NDP
// behind a TAP, neigh.Kernel asks the kernel, StaticNeighbors is a table). An
// address being resolved returns ErrNeighborPending, and the device keeps the
// frame in a small queue (MaxPendingFrames, PendingTimeout) and asks again on
// each Flush; an address that cannot be resolved returns
// ErrNeighborUnreachable (or another error), and the frame is dropped and
// counted (Unresolved).
type Neighbors = neigh.Resolver

// NeighborWaker is a Neighbors that wakes the device's Run: neigh.Waker.
type NeighborWaker = neigh.Waker

// NeighborProtocol is a Neighbors that speaks the link's neighbour protocol
// itself: neigh.Protocol.
type NeighborProtocol = neigh.Protocol

// StaticNeighbors is a fixed neighbour table: neigh.Static.
type StaticNeighbors = neigh.Static

// Errors of neighbour resolution (Neighbors.Resolve): neigh's.
var (
	ErrNeighborPending     = neigh.ErrPending
	ErrNeighborUnreachable = neigh.ErrUnreachable
)

// LinkLocalGID returns the IPv6 link-local address an interface with the
// given MAC derives (modified EUI-64): the default GID, index 0 of a RoCE GID
// table. It is neigh.LinkLocalAddr.
func LinkLocalGID(mac [6]byte) netip.Addr { return neigh.LinkLocalAddr(mac) }

// Bounds of the queue of frames waiting for their next hop's MAC address,
// like the kernel's unresolved-neighbour queue: a frame that waits longer than
// PendingTimeout, or finds MaxPendingBytes of frames already waiting, is
// dropped and counted (DeviceCounters.Unresolved). The bytes are the kernel's
// default unres_qlen_bytes (SK_WMEM_MAX), room for a QP's first window of
// packets; three seconds are the kernel's three ARP or NDP probes one second
// apart.
const (
	MaxPendingBytes = 212992
	PendingTimeout  = 3 * time.Second
)

// DeviceConfig configures a RoCEv2 device on a frame or datagram endpoint.
type DeviceConfig struct {
	// Endpoint carries the device's packets: Ethernet frames (a
	// netio.Endpoint: AF_PACKET, TAP, a capture, a pipe) or UDP datagrams
	// (netio.DatagramReader and netio.DatagramWriter: the UDP socket
	// backend, netio.UDPEndpoint, which nothing need wrap in frames).
	Endpoint netio.Link
	// MAC is the device's Ethernet address.
	MAC [6]byte
	// Addrs are the interface's IP addresses: they make the GID table, and
	// frames to them (or to a GID) are the device's.
	Addrs []netip.Addr
	// GIDs is the GID table; nil means GIDTable(MAC, Addrs). AddressHandle
	// takes source GIDs only among Addrs (and the link-local index 0).
	GIDs []netip.Addr
	// Neighbors resolves next-hop MAC addresses; nil for endpoints that route
	// by IP address themselves (the UDP socket backend). A NeighborProtocol
	// also gets the non-RoCE frames and sends its own.
	Neighbors Neighbors
	// UDPPort is the RoCEv2 UDP destination port, of frames sent and
	// received (default 4791, UDPPort).
	UDPPort uint16
	// Version is the encapsulation of the address handles AddressHandle
	// returns (default RoCEv2). RoCEv1 needs a raw Ethernet endpoint.
	Version Version
	// Engine configures the verbs engine; a zero PortMTU is derived from the
	// endpoint's MTU as rxe does (PathMTUFor); a larger one than that is an
	// error (the endpoint could not carry its full-size packets).
	Engine ibtransport.ContextConfig
	// HopLimit is the IPv4 TTL / IPv6 hop limit of frames whose address handle
	// gives none (default 64, as rxe).
	HopLimit uint8
	// Batch is how many frames move per endpoint call (default: the
	// endpoint's BatchSize).
	Batch int
}

// DeviceCounters count what the device dropped before the engine saw it, and
// what the engine refused. Their JSON keys are snake_case, as every softrdma
// command's (pingpong --json prints them).
type DeviceCounters struct {
	FramesIn      uint64 `json:"frames_in"`
	FramesOut     uint64 `json:"frames_out"`
	NotRoCE       uint64 `json:"not_roce"`        // frames that are neither RoCEv1 nor RoCEv2
	Malformed     uint64 `json:"malformed"`       // RoCE frames with bad lengths
	NotForUs      uint64 `json:"not_for_us"`      // destination IP is none of the device's addresses
	BadICRC       uint64 `json:"bad_icrc"`        // ICRC did not verify
	BadIPChecksum uint64 `json:"bad_ip_checksum"` // IPv4 header checksum did not verify (as the kernel, dropped before the ICRC: it masks the checksum)
	EngineDrops   uint64 `json:"engine_drops"`    // the engine dropped the packet (see its counters)
	Unroutable    uint64 `json:"unroutable"`      // output packets with a bad source GID index or mixed address families
	Neighbor      uint64 `json:"neighbor"`        // ARP and NDP frames handled by the NeighborProtocol
	Queued        uint64 `json:"queued"`          // output frames that waited for their next hop's MAC
	Unresolved    uint64 `json:"unresolved"`      // output frames dropped: their next hop did not resolve (failed, timed out or queue full)
	WriteErrors   uint64 `json:"write_errors"`
}

// Device is a RoCE device: it joins a verbs engine (ibtransport.Context) to a
// frame endpoint, adding and checking the Ethernet/IP/UDP headers (RoCEv2) or
// the Ethernet header and GRH (RoCEv1) and the ICRC.
// It is sans-goroutine: Poll and Flush do the work, driven either by a
// simulator loop or by Run.
type Device struct {
	outside atomic.Pointer[outsideHooks] // Run's loop, for PollInput (pollinput.go)

	cfg   DeviceConfig
	fe    netio.Endpoint // cfg.Endpoint if it carries frames, else nil
	ctx   *ibtransport.Context
	gids  []netip.Addr
	mtu   int
	port  uint16
	proto NeighborProtocol // cfg.Neighbors, if it is one
	wake  <-chan struct{}  // cfg.Neighbors' Wake, if it has one

	closeOnce sync.Once
	closers   []io.Closer // what Open started, closed after the endpoint

	mu         sync.Mutex // serialises Poll/Flush: buffers and the output counters
	out        *ibtransport.OutputBatch
	frames     [][]byte
	rbufs      [][]byte
	sizes      []int
	dgrams     []netio.Datagram // Poll's datagrams (a DatagramReader endpoint)
	pollFrames [][]byte         // Poll's frames in place (a FrameReader endpoint)
	dghdr      datagramHeaders  // Poll's scratch headers for them

	// Scatter/gather output (a VectorWriter endpoint): the engine hands out
	// payloads in place and each frame is written as pieces.
	vw      netio.VectorWriter
	vecs    [][][]byte // the frames of one write
	pieces  [][]byte   // their pieces, maxFramePieces per frame
	icrcIn  [][]byte   // ICRC input: headers, payload pieces, pad
	seal    func(int)  // d.sealGathered or d.sealDatagrams, bound once
	sealNow time.Time  // the time of the Flush that seal frames for

	// Datagram output (a DatagramWriter endpoint: the UDP backend), also
	// gathered: each packet leaves as its IB bytes in pieces plus the
	// addresses, ports, TOS, TTL and IPv4 ID of its datagram.
	dw netio.DatagramWriter
	// deferred: Run's reader left output for a woken application
	// goroutine's post or wait (inputDone).
	deferred atomic.Bool
	txICRC   flowICRC            // the ICRCs of IPv4 datagrams (under d.mu)
	dgs      []netio.OutDatagram // the datagrams of one write
	run      outRun              // the IPv4 ID run of dgs' last datagram
	// runMax and runBytes bound a run (dw.IPv4Run, read at each Flush).
	runMax, runBytes int
	ipID             uint16
	counters         DeviceCounters // output side (FramesOut, Unroutable, ...), under mu
	pending          []pendingFrame // frames waiting for their next hop, oldest first
	pendingN         int            // their bytes

	// inMu guards in, the verdicts of the frames received: not mu, which
	// Flush holds through the send system call (and, on a veth pair, the
	// peer's receive processing that the kernel runs inside it). Under mu,
	// Run's reader waited for every send to finish before it could count a
	// batch and read the next one (go tool trace of softrdma bench's 64 B
	// rows: 0.57 s of 0.61 s blocked on mutexes was addTally).
	inMu sync.Mutex
	in   tally

	// zeroIPID and unknownIPID follow the endpoint's netio.IPv4IDPolicy: a
	// UDP socket sends IPv4 ID 0 and cannot report received IDs.
	zeroIPID, unknownIPID bool

	mc mcastState // multicast groups joined on the network (mcast.go)
}

// headroom is room for the longest header stack the device writes before a BTH:
// Ethernet with a VLAN tag and IPv6 + UDP.
const headroom = EthernetLen + VLANTagLen + IPv6Len + UDPLen

// maxFramePieces is the most pieces of a frame the device writes: headers,
// the payload in at most maxFramePieces-2 slices, then pad and ICRC.
const maxFramePieces = netio.MaxWritePieces

// zeroPad are the pad bytes of a gathered packet, for its ICRC.
var zeroPad [3]byte

// DefaultDeviceWindow is a device's requester window (PSNs in flight per QP)
// unless DeviceConfig.Engine sets one: larger than rxe's 128 because a
// user-space responder's ACK takes a goroutine hand-off or two to come back
// (and, while the AF_PACKET ring was TPACKET_V3, up to a block's retire
// timeout, 1 ms). softrdma bench, WRITE 64 KiB, 2 CPUs: udp 730-930 MiB/s
// with 128, 1420 with 512; afpacket (then) 62 vs 192.
const DefaultDeviceWindow = 512

// NewDevice returns a device on cfg.Endpoint.
func NewDevice(cfg DeviceConfig) (*Device, error) {
	if cfg.Endpoint == nil {
		return nil, errors.New("roce: device needs an endpoint")
	}
	if len(cfg.Addrs) == 0 {
		return nil, errors.New("roce: device needs at least one IP address")
	}
	if cfg.HopLimit == 0 {
		cfg.HopLimit = 64
	}
	if cfg.Batch <= 0 {
		cfg.Batch = cfg.Endpoint.BatchSize()
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 1
	}
	mtu := PathMTUFor(cfg.Endpoint.MTU())
	if cfg.Engine.MaxUnackedPSNs == 0 {
		cfg.Engine.MaxUnackedPSNs = DefaultDeviceWindow
	}
	if cfg.Engine.PortMTU == 0 {
		cfg.Engine.PortMTU = mtu
	} else if cfg.Engine.PortMTU > mtu {
		// The endpoint would drop every packet longer than its MTU
		// (DroppedOversize), and RC QPs at this path MTU would retry until
		// IBV_WC_RETRY_EXC_ERR with nothing said about why.
		return nil, fmt.Errorf("roce: Engine.PortMTU %d: above %d, the largest IB MTU that the endpoint's MTU %d carries with RoCE's headers",
			cfg.Engine.PortMTU, mtu, cfg.Endpoint.MTU())
	}
	if cfg.UDPPort == 0 {
		cfg.UDPPort = UDPPort
	}
	if cfg.Version == 0 {
		cfg.Version = RoCEv2
	}
	if cfg.Version != RoCEv1 && cfg.Version != RoCEv2 {
		return nil, fmt.Errorf("roce: unknown RoCE version %d", cfg.Version)
	}
	gids := cfg.GIDs
	if gids == nil {
		gids = GIDTable(cfg.MAC, cfg.Addrs)
	}
	d := &Device{cfg: cfg, mtu: cfg.Engine.PortMTU, gids: gids, port: cfg.UDPPort}
	d.fe, _ = cfg.Endpoint.(netio.Endpoint)
	if d.fe == nil {
		_, dr := cfg.Endpoint.(netio.DatagramReader)
		_, dw := cfg.Endpoint.(netio.DatagramWriter)
		if !dr || !dw {
			return nil, fmt.Errorf("roce: device endpoint %T: neither a frame endpoint (netio.Endpoint) nor a datagram one (netio.DatagramReader and DatagramWriter)", cfg.Endpoint)
		}
	}
	d.proto, _ = cfg.Neighbors.(NeighborProtocol)
	if w, ok := cfg.Neighbors.(NeighborWaker); ok {
		d.wake = w.Wake()
	}
	// A wrapper (a capture) keeps the policy of the endpoint it wraps.
	for ep := cfg.Endpoint; ep != nil; {
		if p, ok := ep.(netio.IPv4IDPolicy); ok {
			d.zeroIPID, d.unknownIPID = p.IPv4IDZero(), p.UnknownIPv4ID()
			break
		}
		u, ok := ep.(interface{ Unwrap() netio.Endpoint })
		if !ok {
			break
		}
		ep = u.Unwrap()
	}
	d.ctx = ibtransport.NewContext(cfg.Engine)
	d.ctx.SetMulticastHook(d.multicastChanged)
	d.out = ibtransport.NewOutputBatch(cfg.Batch, headroom, ICRCLen)
	d.frames = make([][]byte, 0, cfg.Batch)
	// A capture records what it is given to write after the seal, outside
	// the engine's lock, when the memory regions are no longer the engine's
	// alone: the input path may scatter into a buffer a packet is sent from
	// (a buffer posted both to send and to receive, as ibv_rc_pingpong's) and
	// the application may reuse a buffer whose request completed. A gathered
	// payload would then be recorded as it is by then, not as its ICRC was
	// computed (and, under the race detector, the capture's copy races with
	// the scatter). So under a capture the engine copies each payload after
	// the packet's headers when it seals it: one copy, which the capture
	// makes anyway.
	_, capturing := cfg.Endpoint.(netio.CaptureEndpoint)
	if dw, ok := cfg.Endpoint.(netio.DatagramWriter); ok {
		// The UDP backend: datagrams, their payload gathered in place, no
		// Ethernet/IP/UDP header written for the endpoint to parse.
		d.dw = dw
		if !capturing {
			d.out.Gather(maxFramePieces - 2)
		}
		d.dgs = make([]netio.OutDatagram, 0, cfg.Batch)
		d.pieces = make([][]byte, cfg.Batch*maxFramePieces)
		d.icrcIn = make([][]byte, 0, maxFramePieces)
		d.seal = d.sealDatagrams
	} else if vw, ok := cfg.Endpoint.(netio.VectorWriter); ok {
		// No copy of the payload: the endpoint gathers it from the memory
		// region (the pad and ICRC go in the packet buffer after the headers).
		d.vw = vw
		if !capturing {
			d.out.Gather(maxFramePieces - 2)
		}
		d.vecs = make([][][]byte, 0, cfg.Batch)
		d.pieces = make([][]byte, cfg.Batch*maxFramePieces)
		d.icrcIn = make([][]byte, 0, maxFramePieces)
		d.seal = d.sealGathered
	}
	if _, ok := cfg.Endpoint.(netio.DatagramReader); ok {
		d.dgrams = make([]netio.Datagram, cfg.Batch)
	}
	frameLen := netio.MaxFrameLen(cfg.Endpoint.MTU()) + VLANTagLen
	mem := make([]byte, frameLen*cfg.Batch)
	d.rbufs = make([][]byte, cfg.Batch)
	for i := range d.rbufs {
		d.rbufs[i] = mem[i*frameLen : (i+1)*frameLen : (i+1)*frameLen]
	}
	d.sizes = make([]int, cfg.Batch)
	return d, nil
}

// GIDTable returns RoCEv2 GIDs in the order Linux gives them when an rxe
// device is created on an interface (roce_rescan_device in
// drivers/infiniband/core/roce_gid_mgmt.c): the default GID, the link-local
// address derived from the MAC, at index 0; then the IPv4 addresses as
// IPv4-mapped GIDs, then the IPv6 addresses, each family in the order given
// (for an interface: the kernel's own list order, which RTM_GETADDR dumps);
// an address already in the table (the link-local one, usually) is not
// added twice (ib_cache_gid_add finds it), and unspecified ones are skipped.
func GIDTable(mac [6]byte, addrs []netip.Addr) []netip.Addr {
	gids := []netip.Addr{LinkLocalGID(mac)}
	for _, v4 := range []bool{true, false} {
		for _, a := range addrs {
			if !a.IsValid() || a.Unmap().IsUnspecified() || a.Unmap().Is4() != v4 {
				continue
			}
			g := netip.AddrFrom16(a.As16())
			dup := false
			for _, o := range gids {
				dup = dup || o == g
			}
			if !dup {
				gids = append(gids, g)
			}
		}
	}
	return gids
}

// Context returns the device's verbs engine.
func (d *Device) Context() *ibtransport.Context { return d.ctx }

// GIDs returns the GID table.
func (d *Device) GIDs() []netip.Addr { return d.gids }

// Addrs returns DeviceConfig.Addrs: the addresses the device sends from
// (AddressHandle's source GIDs). The GID table may list more: a device on a
// UDP socket bound to one address has every address of the interface in its
// table, but a datagram from any other one is dropped by the socket.
func (d *Device) Addrs() []netip.Addr { return d.cfg.Addrs }

// PathMTU returns the port's active IB MTU.
func (d *Device) PathMTU() int { return d.mtu }

// Endpoint returns the device's endpoint (DeviceConfig.Endpoint): on the UDP
// backend a datagram endpoint, which netio.FramesOf offers as frames.
func (d *Device) Endpoint() netio.Link { return d.cfg.Endpoint }

// MAC returns the device's Ethernet address (DeviceConfig.MAC).
func (d *Device) MAC() [6]byte { return d.cfg.MAC }

// Neighbors returns the device's neighbour resolution, or nil.
func (d *Device) Neighbors() Neighbors { return d.cfg.Neighbors }

// Close closes the endpoint (which ends Run) and then stops whatever Open
// started for the device (neighbour resolution, the reserved UDP port).
// It returns the first error and is idempotent.
func (d *Device) Close() error {
	var err error
	d.closeOnce.Do(func() {
		err = d.cfg.Endpoint.Close()
		d.closeMulticast()
		for _, c := range d.closers {
			if e := c.Close(); err == nil {
				err = e
			}
		}
	})
	return err
}

// Counters returns a snapshot of the device counters.
func (d *Device) Counters() DeviceCounters {
	d.mu.Lock()
	c := d.counters
	d.mu.Unlock()
	d.inMu.Lock()
	t := d.in
	d.inMu.Unlock()
	for _, n := range t {
		c.FramesIn += n
	}
	c.NotRoCE = t[verdictNotRoCE]
	c.Malformed = t[verdictMalformed]
	c.NotForUs = t[verdictNotForUs]
	c.BadICRC = t[verdictBadICRC]
	c.BadIPChecksum = t[verdictBadIPChecksum]
	c.Neighbor = t[verdictNeighbor]
	c.EngineDrops = t[verdictEngineDrop]
	return c
}

// AddressHandle returns an address handle for the remote address dst, in the
// device's RoCE version (DeviceConfig.Version), with the source GID of the
// same family: the link-local GID 0 for a link-local dst, else the first of
// the device's addresses in the table.
func (d *Device) AddressHandle(dst netip.Addr) (ibtransport.AddressHandle, error) {
	return d.AddressHandleVersion(dst, d.cfg.Version)
}

// AddressHandleVersion is AddressHandle for RoCE version v. A RoCEv1 handle
// carries v as its Opaque value, which the device reads to frame the QP's
// packets with a GRH (from the source and destination GIDs) under Ethertype
// 0x8915; any other Opaque value means RoCEv2.
func (d *Device) AddressHandleVersion(dst netip.Addr, v Version) (ibtransport.AddressHandle, error) {
	if v != RoCEv1 && v != RoCEv2 {
		return ibtransport.AddressHandle{}, fmt.Errorf("roce: unknown RoCE version %d", v)
	}
	ah := ibtransport.AddressHandle{DGID: dst.As16(), HopLimit: d.cfg.HopLimit}
	if v == RoCEv1 {
		ah.Opaque = RoCEv1
	}
	u := dst.Unmap()
	if u.IsLinkLocalUnicast() && u.Is6() {
		return ah, nil // SGIDIndex 0, the link-local GID
	}
	for i, g := range d.gids {
		if i == 0 || g.Unmap().Is4() != u.Is4() || !d.isAddr(g) {
			continue
		}
		ah.SGIDIndex = uint8(i)
		return ah, nil
	}
	return ibtransport.AddressHandle{}, fmt.Errorf("roce: no source GID of the family of %v", dst)
}

// isAddr reports whether ip is one of DeviceConfig.Addrs.
func (d *Device) isAddr(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, a := range d.cfg.Addrs {
		if a.Unmap() == ip {
			return true
		}
	}
	return false
}

// isOurs reports whether ip is one of the device's addresses or GIDs.
func (d *Device) isOurs(ip netip.Addr) bool {
	if d.isAddr(ip) {
		return true
	}
	for _, g := range d.gids {
		if g == ip || g.Unmap() == ip {
			return true
		}
	}
	return false
}

// ahVersion returns the RoCE version of an address handle.
func ahVersion(ah *ibtransport.AddressHandle) Version {
	if v, ok := ah.Opaque.(Version); ok && v == RoCEv1 {
		return RoCEv1
	}
	return RoCEv2
}

// Poll reads every frame waiting on a pollable endpoint, hands the RoCE
// packets to the engine, then sends what the engine has to send. It reports
// whether it moved any frame in either direction.
func (d *Device) Poll(now time.Time) (bool, error) {
	moved := false
	if dr, ok := d.cfg.Endpoint.(netio.DatagramReader); ok && d.dgrams != nil {
		for {
			n, err := dr.TryReadDatagrams(d.dgrams)
			if n > 0 {
				moved = true
				d.inputDatagrams(now, d.dgrams[:n], &d.dghdr)
			}
			if err != nil {
				return moved, err
			}
			if n < len(d.dgrams) {
				break
			}
		}
	} else if fr, ok := d.cfg.Endpoint.(netio.FrameReader); ok {
		if d.pollFrames == nil {
			d.pollFrames = make([][]byte, len(d.rbufs)) // pointed into the ring
		}
		frames := d.pollFrames
		for {
			n, err := fr.TryReadFrames(frames)
			if n > 0 {
				moved = true
				d.inputFrames(now, frames[:n])
			}
			if err != nil {
				return moved, err
			}
			if n < len(frames) {
				break
			}
		}
	} else {
		p, ok := d.fe.(netio.Poller)
		if !ok {
			return false, netio.ErrNotPollable
		}
		for {
			n, err := p.TryRead(d.rbufs, d.sizes, 0)
			if n > 0 {
				moved = true
				d.Input(now, d.rbufs[:n], d.sizes[:n])
			}
			if err != nil {
				return moved, err
			}
			if n < len(d.rbufs) {
				break
			}
		}
	}
	sent, err := d.Flush(now)
	return moved || sent > 0, err
}

// verdict is what became of a received frame: delivered to the engine, or
// the counter of the reason it was not.
type verdict uint8

const (
	verdictDelivered verdict = iota
	verdictNotRoCE
	verdictMalformed
	verdictNotForUs
	verdictBadICRC
	verdictBadIPChecksum
	verdictNeighbor
	verdictEngineDrop
	numVerdicts
)

// tally counts the verdicts of a batch of frames, added to the device's
// counters under one lock.
type tally [numVerdicts]uint64

func (d *Device) addTally(t *tally) {
	d.inMu.Lock()
	for i, n := range t {
		d.in[i] += n
	}
	d.inMu.Unlock()
}

// Input hands received frames to the engine: frames[i][:sizes[i]].
func (d *Device) Input(now time.Time, frames [][]byte, sizes []int) {
	var f Frame
	var t tally
	for i, b := range frames {
		t[d.input(now, &f, b[:sizes[i]])]++
	}
	d.addTally(&t)
}

// inputFrames is Input for frames a FrameReader handed over in place.
func (d *Device) inputFrames(now time.Time, frames [][]byte) {
	var f Frame
	var t tally
	for _, b := range frames {
		t[d.input(now, &f, b)]++
	}
	clear(frames) // the ring's blocks go back to the kernel at the next read
	d.addTally(&t)
}

func (d *Device) input(now time.Time, f *Frame, b []byte) verdict {
	if v := d.check(now, f, b); v != verdictDelivered {
		return v
	}
	return d.deliver(now, f)
}

// deliver hands a checked frame's IB packet to the engine.
func (d *Device) deliver(now time.Time, f *Frame) verdict {
	meta := ibtransport.InputMeta{
		HasGRH:       true,
		SGID:         f.Src.As16(),
		DGID:         f.Dst.As16(),
		TrafficClass: f.trafficClass(),
		FlowLabel:    f.flowLabel(),
		HopLimit:     f.hopLimit(),
	}
	var grh [GRHLen]byte
	if ibtransport.BTH(f.IB).Opcode().Service() == ibtransport.ServiceUD {
		switch {
		case f.Version == RoCEv1:
			meta.GRH = f.GRH
		case len(f.IP) <= GRHLen:
			// What rxe puts in the 40-byte GRH area of a UD receive: the IPv6
			// header, or for IPv4 the IPv4 header in the last 20 bytes.
			copy(grh[GRHLen-len(f.IP):], f.IP)
			meta.GRH = grh[:]
		}
	}
	if d.ctx.Input(now, f.IB, meta) != nil {
		return verdictEngineDrop
	}
	return verdictDelivered
}

// check decodes a received frame and returns verdictDelivered for a RoCE
// packet addressed to the device whose ICRC verifies, else the reason to drop
// it. Non-RoCE frames go to the neighbour protocol, if there is one.
func (d *Device) check(now time.Time, f *Frame, b []byte) verdict {
	err := d.decode(f, b)
	switch {
	case errors.Is(err, ErrNotRoCE):
		if d.proto != nil && d.proto.HandleFrame(now, b) {
			return verdictNeighbor
		}
		return verdictNotRoCE
	case err != nil:
		return verdictMalformed
	case f.Version == RoCEv2 && !f.IPv6 && !header.IPv4(f.IP).IsChecksumValid():
		// The ICRC masks the IPv4 checksum, so a flipped TTL or TOS would
		// pass it; the kernel's ip_rcv drops such a frame, and so do we.
		return verdictBadIPChecksum
	}
	return d.verify(f)
}

// verify checks a decoded frame's destination and ICRC.
func (d *Device) verify(f *Frame) verdict {
	switch {
	case !d.isOurs(f.Dst) && !d.isGroup(f.Dst):
		return verdictNotForUs
	case d.unknownIPID && f.Version == RoCEv2 && !f.IPv6:
		// The sender's IPv4 ID is covered by the ICRC but was not
		// delivered: recover it, keeping 16 bits of the check.
		if _, ok := RecoverIPv4ID(f); !ok {
			return verdictBadICRC
		}
	case VerifyICRC(f) != nil:
		return verdictBadICRC
	}
	return verdictDelivered
}

// verifyDatagram is verify for a frame of a datagram (datagramFrame): the
// ICRC of an IPv4 one comes from hdr's flowICRC, not from its headers.
func (d *Device) verifyDatagram(f *Frame, hdr *datagramHeaders) verdict {
	if f.IPv6 || !d.isOurs(f.Dst) {
		return d.verify(f)
	}
	icrc := hdr.icrc.sum(f.Src, f.Dst, f.SrcPort, f.DstPort, 0, len(f.IB), f.IB)
	if d.unknownIPID {
		// The sender's IPv4 ID is covered by the ICRC but was not
		// delivered: recover it, keeping 16 bits of the check.
		if _, ok := idFromDiff(icrc^f.ICRC, IPv4Len-posID-2+UDPLen+len(f.IB)); !ok {
			return verdictBadICRC
		}
	} else if icrc != f.ICRC {
		return verdictBadICRC
	}
	return verdictDelivered
}

// datagramHeaders is room for the IP and UDP headers of a datagram that a
// DatagramReader delivered without them (the ICRC covers them), with what
// they were last written for: the datagrams of a stream have the same
// addresses, ports, TOS, TTL and, mostly, length, and then keep them. icrc
// computes the ICRC of an IPv4 one without hashing them (icrcflow.go).
type datagramHeaders struct {
	b    [IPv6Len + UDPLen]byte
	key  datagramKey
	hlen int
	icrc flowICRC
}

// datagramKey is what a datagram's IP and UDP headers are written from.
type datagramKey struct {
	src, dst netip.AddrPort
	tos, ttl uint8
	n        int // the UDP payload length
}

// inputDatagrams hands received UDP datagrams to the engine, decoding each
// where the endpoint received it (no copy; the engine's copy into the memory
// region is the only one). hdr is scratch space for the headers.
func (d *Device) inputDatagrams(now time.Time, dgs []netio.Datagram, hdr *datagramHeaders) {
	var f Frame
	var t tally
	for i := range dgs {
		v := d.datagramFrame(&f, &dgs[i], hdr)
		if v == verdictDelivered {
			v = d.verifyDatagram(&f, hdr)
		}
		if v == verdictDelivered {
			v = d.deliver(now, &f)
		}
		t[v]++
	}
	d.addTally(&t)
}

// datagramFrame makes f the RoCEv2 frame of a datagram: its payload in
// place, and in hdr the IP and UDP headers roce builds from the fields the
// endpoint returns with it (addresses, ports, TOS, TTL), as the pseudo-header
// the ICRC covers: IPv4 ID 0 (the socket does not report it; verify recovers
// it) and DF, UDP checksum 0, IPv6 flow label 0 (both masked out of the
// ICRC). Nothing the endpoint wrote is parsed back.
func (d *Device) datagramFrame(f *Frame, dg *netio.Datagram, hdr *datagramHeaders) verdict {
	*f = Frame{}
	if dg.Dst.Port() != d.port {
		return verdictNotRoCE
	}
	n := len(dg.Payload)
	if n < minIBLen+ICRCLen || n > 0xFFFF-IPv6Len-UDPLen {
		return verdictMalformed
	}
	src, dst := dg.Src.Addr().Unmap(), dg.Dst.Addr().Unmap()
	v4 := src.Is4() && dst.Is4()
	if !v4 && !(src.Is6() && dst.Is6()) {
		return verdictMalformed
	}
	f.IPv6 = !v4
	// ID 0 (unknown), DF. The IPv4 checksum is not covered by the ICRC;
	// EncodeIPUDP writes it anyway.
	if k := (datagramKey{src: dg.Src, dst: dg.Dst, tos: dg.TOS, ttl: dg.TTL, n: n}); hdr.hlen == 0 || k != hdr.key {
		hdr.hlen = header.EncodeIPUDP(hdr.b[:], v4, &header.IPUDPFields{Src: dg.Src, Dst: dg.Dst, TOS: dg.TOS, TTL: dg.TTL, PayloadLen: n})
		hdr.key = k
	}
	hlen := hdr.hlen
	ip, udp := hdr.b[:hlen-UDPLen], hdr.b[hlen-UDPLen:hlen]
	f.Version = RoCEv2
	f.IP, f.UDP = ip[:len(ip):len(ip)], udp[:UDPLen:UDPLen]
	f.Src, f.Dst = src, dst
	f.SrcPort, f.DstPort = dg.Src.Port(), dg.Dst.Port()
	f.setIB(dg.Payload)
	return verdictDelivered
}

// decode is f.DecodeEthernet(b) for RoCEv2 on the device's UDP port; b is
// only read (it may lie in a ring shared with the kernel).
func (d *Device) decode(f *Frame, b []byte) error {
	return f.DecodeEthernetPort(b, d.port)
}

func (f *Frame) trafficClass() uint8 {
	if f.Version == RoCEv1 {
		return f.GRH.TClass()
	}
	if f.IPv6 {
		return header.IPv6(f.IP).TrafficClass()
	}
	return header.IPv4(f.IP).TOS()
}

func (f *Frame) flowLabel() uint32 {
	if f.Version == RoCEv1 {
		return f.GRH.FlowLabel()
	}
	if f.IPv6 {
		return header.IPv6(f.IP).FlowLabel()
	}
	return 0
}

func (f *Frame) hopLimit() uint8 {
	if f.Version == RoCEv1 {
		return f.GRH.HopLmt()
	}
	if f.IPv6 {
		return header.IPv6(f.IP).HopLimit()
	}
	return header.IPv4(f.IP).TTL()
}

// Flush takes everything the engine has to send, frames it and writes it to
// the endpoint, and returns the number of frames written. Frames that waited
// for their next hop go first, and the neighbour protocol's frames with them.
func (d *Device) Flush(now time.Time) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.flushLocked(now)
}

// flushLocked is Flush with d.mu held.
func (d *Device) flushLocked(now time.Time) (int, error) {
	d.frames = d.appendPending(now, d.frames[:0])
	if d.proto != nil {
		d.frames = d.proto.AppendFrames(now, d.frames)
	}
	total, err := d.write(d.frames)
	if err != nil {
		return total, err
	}
	for {
		d.out.Reset()
		d.frames = d.frames[:0]
		var seal func(int)
		if d.dw != nil {
			d.dgs, d.sealNow, seal = d.dgs[:0], now, d.seal
			d.runMax, d.runBytes = d.dw.IPv4Run()
		} else if d.vw != nil {
			d.vecs, d.sealNow, seal = d.vecs[:0], now, d.seal
		}
		if d.ctx.OutputSealed(now, d.out, seal) == 0 {
			return total, nil
		}
		var n int
		var err error
		if d.dw != nil {
			n, err = d.writeDatagrams(d.dgs)
			clear(d.pieces[:len(d.out.Packets)*maxFramePieces]) // keep no reference to the memory regions
		} else if d.vw != nil {
			n, err = d.writeVectors(d.vecs)
			clear(d.pieces[:len(d.out.Packets)*maxFramePieces]) // keep no reference to the memory regions
		} else {
			for i := range d.out.Packets {
				if fr, _, ok := d.frame(now, &d.out.Packets[i], nil); ok {
					d.frames = append(d.frames, fr)
				}
			}
		}
		if d.proto != nil {
			// The requests that resolving these frames' next hops started.
			d.frames = d.proto.AppendFrames(now, d.frames)
		}
		if err == nil {
			var m int
			m, err = d.write(d.frames)
			n += m
		}
		total += n
		if err != nil {
			return total, err
		}
	}
}

// sealGathered frames the packets of d.out from first on, whose payloads lie
// in the memory regions (a VectorWriter endpoint), into d.vecs. It runs under
// the engine's lock (OutputSealed): the ICRC is computed over the payload
// where it lies, which the application may rewrite once the packet's work
// request completes, and none completes meanwhile. (The endpoint's write
// reads the payload after the lock is released: a packet whose request has
// completed by then is a retransmission the peer has already acknowledged.)
func (d *Device) sealGathered(first int) {
	for i := first; i < len(d.out.Packets); i++ {
		room := d.pieces[i*maxFramePieces : i*maxFramePieces : (i+1)*maxFramePieces]
		if _, v, ok := d.frame(d.sealNow, &d.out.Packets[i], room); ok {
			d.vecs = append(d.vecs, v)
		}
	}
}

// writeVectors writes frames in pieces to the VectorWriter endpoint, in
// batches of at most cfg.Batch.
func (d *Device) writeVectors(frames [][][]byte) (int, error) {
	total := 0
	for len(frames) > 0 {
		k := min(len(frames), d.cfg.Batch)
		n, err := d.vw.WriteVectors(frames[:k])
		d.counters.FramesOut += uint64(n)
		total += n
		if err != nil {
			d.counters.WriteErrors++
			clear(d.vecs)
			return total, err
		}
		frames = frames[k:]
	}
	clear(d.vecs)
	return total, nil
}

// writeDatagrams writes datagrams to the DatagramWriter endpoint, in batches
// of at most cfg.Batch (where runID starts its runs anew).
func (d *Device) writeDatagrams(dgs []netio.OutDatagram) (int, error) {
	defer clear(d.dgs) // keep no reference to the memory regions
	total := 0
	for len(dgs) > 0 {
		k := min(len(dgs), d.cfg.Batch)
		n, err := d.dw.WriteDatagrams(dgs[:k])
		d.counters.FramesOut += uint64(n)
		total += n
		if err != nil {
			d.counters.WriteErrors++
			return total, err
		}
		dgs = dgs[k:]
	}
	return total, nil
}

// write writes frames to the endpoint, in batches of at most cfg.Batch.
func (d *Device) write(frames [][]byte) (int, error) {
	total := 0
	for len(frames) > 0 {
		k := min(len(frames), d.cfg.Batch)
		if d.fe == nil {
			// No neighbour protocol or pending frame on a datagram endpoint.
			clear(d.frames)
			return total, fmt.Errorf("roce: %d frames for a datagram endpoint (%T)", len(frames), d.cfg.Endpoint)
		}
		n, err := d.fe.Write(frames[:k], 0)
		d.counters.FramesOut += uint64(n)
		total += n
		if err != nil {
			d.counters.WriteErrors++
			clear(d.frames) // keep no reference to pending or protocol buffers
			return total, err
		}
		frames = frames[k:]
	}
	return total, nil
}

// pendingFrame is a frame waiting for the MAC address of its next hop: a copy
// (the engine's buffers are reused at once), made only on this slow path.
type pendingFrame struct {
	nextHop netip.Addr
	frame   []byte
	since   time.Time
}

// appendPending appends to frames the waiting frames whose next hop has
// resolved, with its MAC filled in, drops those whose next hop failed or that
// waited PendingTimeout, and keeps the rest in order. Once a frame to a next
// hop stays, every later frame to it stays too: the resolver may finish
// during the pass (neigh.Host learns from frames the reader hands it
// meanwhile), and a later frame sent while an earlier one waits would arrive
// first (RC: a PSN gap, a NAK and a resend of the whole burst).
func (d *Device) appendPending(now time.Time, frames [][]byte) [][]byte {
	if len(d.pending) == 0 {
		return frames
	}
	kept := d.pending[:0]
	var failed []netip.Addr // next hops found unreachable in this pass
	var held []netip.Addr   // next hops with a frame kept in this pass
	for _, p := range d.pending {
		var mac [6]byte
		err := ErrNeighborUnreachable
		switch {
		case containsAddr(held, p.nextHop):
			err = ErrNeighborPending
		case !containsAddr(failed, p.nextHop):
			mac, err = d.cfg.Neighbors.Resolve(now, p.nextHop)
		}
		switch {
		case err == nil:
			copy(p.frame[0:6], mac[:]) // the ICRC does not cover Ethernet
			frames = append(frames, p.frame)
		case errors.Is(err, ErrNeighborPending) && now.Sub(p.since) < PendingTimeout:
			if !containsAddr(held, p.nextHop) {
				held = append(held, p.nextHop)
			}
			kept = append(kept, p)
			continue
		default:
			if !errors.Is(err, ErrNeighborPending) {
				failed = append(failed, p.nextHop)
			}
			d.counters.Unresolved++
		}
		d.pendingN -= len(p.frame)
	}
	clear(d.pending[len(kept):])
	d.pending = kept
	return frames
}

func containsAddr(list []netip.Addr, a netip.Addr) bool {
	for _, b := range list {
		if a == b {
			return true
		}
	}
	return false
}

// waiting reports whether frames to nextHop are queued: later frames to it
// must queue behind them to keep their order.
func (d *Device) waiting(nextHop netip.Addr) bool {
	for i := range d.pending {
		if d.pending[i].nextHop == nextHop {
			return true
		}
	}
	return false
}

// frame writes the RoCE headers and ICRC around one output packet, in its
// headroom and tailroom: no copy of the packet. RoCEv2 takes the IP
// addresses from the GIDs (unmapping IPv4-mapped ones); RoCEv1 puts the GIDs
// themselves in the GRH. It returns the frame in one piece, and, if pieces is
// not nil, as pieces appended to it; a packet whose payload is in place
// (OutputPacket.Payload) has pieces only.
func (d *Device) frame(now time.Time, p *ibtransport.OutputPacket, pieces [][]byte) ([]byte, [][]byte, bool) {
	ah := p.AH
	if int(ah.SGIDIndex) >= len(d.gids) {
		d.counters.Unroutable++
		return nil, nil, false
	}
	ib := p.Packet()
	h := FrameHeaders{
		SrcMAC:       d.cfg.MAC,
		TrafficClass: ah.TrafficClass,
		FlowLabel:    ah.FlowLabel,
		HopLimit:     ah.HopLimit,
	}
	if h.HopLimit == 0 {
		h.HopLimit = d.cfg.HopLimit
	}
	dgid := netip.AddrFrom16(ah.DGID)
	nextHop := dgid.Unmap()
	if ahVersion(ah) == RoCEv1 {
		h.Version = RoCEv1
		h.Src, h.Dst = d.gids[ah.SGIDIndex], dgid
	} else {
		h.Src, h.Dst = d.gids[ah.SGIDIndex].Unmap(), nextHop
		if h.Src.Is4() != h.Dst.Is4() {
			d.counters.Unroutable++
			return nil, nil, false
		}
		h.SrcPort, h.DstPort = d.srcPort(p, ib), d.port
		if h.Src.Is4() && !d.zeroIPID {
			h.IPID = d.ipID // rxe counts IDs per packet; the ICRC covers them
			d.ipID++
		}
	}
	var err error
	direct := true
	if mac, ok := neigh.MulticastMAC(nextHop); ok {
		h.DstMAC = mac
	} else if mac, ok := neigh.LinkLocalMAC(nextHop); ok && h.Version == RoCEv1 {
		h.DstMAC = mac // a RoCEv1 link-local GID names its MAC (rdma_get_ll_mac)
	} else if d.cfg.Neighbors != nil {
		direct = false
		if d.waiting(nextHop) {
			err = ErrNeighborPending
		} else {
			h.DstMAC, err = d.cfg.Neighbors.Resolve(now, nextHop)
		}
	}
	if err != nil && !errors.Is(err, ErrNeighborPending) {
		d.counters.Unresolved++
		return nil, nil, false
	}
	hl := h.Len()
	start := p.Offset - hl
	if p.Payload != nil {
		return d.frameGathered(now, p, &h, start, nextHop, !direct && err != nil, pieces)
	}
	buf := p.Buf[start : p.Offset+len(ib)+ICRCLen]
	if _, err := h.EncodeFrame(buf, len(ib)); err != nil {
		d.counters.Unroutable++
		return nil, nil, false
	}
	if !direct && err != nil {
		d.queue(now, nextHop, buf)
		return nil, nil, false
	}
	if pieces != nil {
		pieces = append(pieces, buf)
	}
	return buf, pieces, true
}

// frameGathered frames a packet whose payload is in place (a VectorWriter
// endpoint): the headers in the headroom before the BTH, the pad and ICRC in
// the buffer after the packet's headers, and the ICRC computed over the
// payload where it lies. It returns the frame as pieces appended to pieces:
// headers, payload, pad and ICRC; nothing is copied (but a frame that must
// wait for its next hop).
func (d *Device) frameGathered(now time.Time, p *ibtransport.OutputPacket, h *FrameHeaders, start int, nextHop netip.Addr,
	wait bool, pieces [][]byte) ([]byte, [][]byte, bool) {
	tail, ok := d.sealInPlace(p, h, start)
	if !ok {
		d.counters.Unroutable++
		return nil, nil, false
	}
	end := len(p.Buf)
	if wait {
		// The slow path: the frame waits in one piece, a copy.
		frame := append([]byte(nil), p.Buf[start:end]...)
		for _, s := range p.Payload {
			frame = append(frame, s...)
		}
		d.queue(now, nextHop, append(frame, tail...))
		return nil, nil, false
	}
	pieces = append(pieces, p.Buf[start:end])
	pieces = append(pieces, p.Payload...)
	return nil, append(pieces, tail), true
}

// sealDatagrams turns the packets of d.out from first on into datagrams
// (a DatagramWriter endpoint), in d.dgs. Like sealGathered it runs under the
// engine's lock, the ICRC computed over the payload where it lies.
func (d *Device) sealDatagrams(first int) {
	for i := first; i < len(d.out.Packets); i++ {
		room := d.pieces[i*maxFramePieces : i*maxFramePieces : (i+1)*maxFramePieces]
		if dg, ok := d.datagram(&d.out.Packets[i], room); ok {
			d.dgs = append(d.dgs, dg)
		}
	}
}

// datagram makes the RoCEv2 datagram of one output packet: its addresses,
// ports, TOS, TTL and IPv4 ID, and its UDP payload as pieces (IB headers,
// payload in place, pad and ICRC) appended to pieces. The ICRC covers IP and
// UDP headers that are never sent (the kernel writes the real ones): roce
// writes them, as the pseudo-header it knows, into the packet's headroom
// and computes the ICRC over them. There is no next hop to resolve: the
// kernel routes.
func (d *Device) datagram(p *ibtransport.OutputPacket, pieces [][]byte) (netio.OutDatagram, bool) {
	ah := p.AH
	if int(ah.SGIDIndex) >= len(d.gids) || ahVersion(ah) == RoCEv1 {
		d.counters.Unroutable++ // RoCEv1 has no UDP
		return netio.OutDatagram{}, false
	}
	ib := p.Packet()
	h := FrameHeaders{
		Src:          d.gids[ah.SGIDIndex].Unmap(),
		Dst:          netip.AddrFrom16(ah.DGID).Unmap(),
		TrafficClass: ah.TrafficClass,
		FlowLabel:    ah.FlowLabel,
		HopLimit:     ah.HopLimit,
		SrcPort:      d.srcPort(p, ib),
		DstPort:      d.port,
	}
	if h.HopLimit == 0 {
		h.HopLimit = d.cfg.HopLimit
	}
	if h.Src.Is4() != h.Dst.Is4() {
		d.counters.Unroutable++
		return netio.OutDatagram{}, false
	}
	ibLen := len(ib)
	if p.Payload != nil {
		ibLen = p.Len()
	}
	dg := netio.OutDatagram{Src: h.Src, SrcPort: h.SrcPort, Dst: netip.AddrPortFrom(h.Dst, d.port),
		TOS: h.TrafficClass, TTL: h.HopLimit}
	start := p.Offset - h.Len()
	if h.Src.Is4() {
		dg.IPv4ID = d.runID(&dg, ibLen+ICRCLen)
		h.IPID = dg.IPv4ID
		return d.datagram4(p, dg, ibLen, pieces)
	}
	if p.Payload == nil {
		// The payload was copied after the IB headers: one piece.
		buf := p.Buf[start : p.Offset+ibLen+ICRCLen]
		if _, err := h.EncodeFrame(buf, ibLen); err != nil {
			d.counters.Unroutable++
			d.run = outRun{}
			return netio.OutDatagram{}, false
		}
		dg.Payload = append(pieces, p.Buf[p.Offset:p.Offset+ibLen+ICRCLen])
		return dg, true
	}
	tail, ok := d.sealInPlace(p, &h, start)
	if !ok {
		d.counters.Unroutable++
		d.run = outRun{}
		return netio.OutDatagram{}, false
	}
	pieces = append(pieces, p.Buf[p.Offset:len(p.Buf)])
	pieces = append(pieces, p.Payload...)
	dg.Payload = append(pieces, tail)
	return dg, true
}

// datagram4 is datagram for IPv4, whose pseudo-header the ICRC covers
// without being written (flowICRC): dg has its fields, the IB packet is
// ibLen bytes.
func (d *Device) datagram4(p *ibtransport.OutputPacket, dg netio.OutDatagram, ibLen int, pieces [][]byte) (netio.OutDatagram, bool) {
	if ibLen+ICRCLen > 0xFFFF-IPv4Len-UDPLen {
		d.counters.Unroutable++
		d.run = outRun{}
		return netio.OutDatagram{}, false
	}
	if p.Payload == nil {
		// The payload was copied after the IB headers: one piece.
		buf := p.Buf[p.Offset : p.Offset+ibLen+ICRCLen]
		PutICRC(buf[ibLen:], d.txICRC.sum(dg.Src, dg.Dst.Addr(), dg.SrcPort, dg.Dst.Port(), dg.IPv4ID, ibLen, buf[:ibLen]))
		dg.Payload = append(pieces, buf)
		return dg, true
	}
	end := len(p.Buf)
	if cap(p.Buf)-end < p.Pad+ICRCLen {
		d.counters.Unroutable++
		d.run = outRun{}
		return netio.OutDatagram{}, false
	}
	tail := p.Buf[end : end+p.Pad+ICRCLen]
	copy(tail, zeroPad[:p.Pad])
	in := append(d.icrcIn[:0], p.Packet())
	in = append(in, p.Payload...)
	in = append(in, tail[:p.Pad])
	PutICRC(tail[p.Pad:], d.txICRC.sum(dg.Src, dg.Dst.Addr(), dg.SrcPort, dg.Dst.Port(), dg.IPv4ID, ibLen, in...))
	clear(in)
	pieces = append(pieces, p.Buf[p.Offset:len(p.Buf)])
	pieces = append(pieces, p.Payload...)
	dg.Payload = append(pieces, tail)
	return dg, true
}

// outRun is the run of IPv4 IDs 0, 1, ... that the last datagram of a
// write belongs to (see netio.DatagramWriter): the UDP GSO send the
// endpoint makes of it gives segment j the ID j, which the ICRC covers.
type outRun struct {
	n     int // datagrams in the run
	size  int // the first one's payload length
	last  int // the last one's
	bytes int // the run's payload bytes
}

// runID returns the IPv4 ID of dg, a datagram of plen payload bytes about
// to follow d.dgs: the next ID of the run of the datagram before it if dg
// may continue that run (same addresses, port, TOS and TTL; no longer than
// the run's first, which the one before it matches; within IPv4Run's
// bounds and the same write), else 0, starting a run.
func (d *Device) runID(dg *netio.OutDatagram, plen int) uint16 {
	r := &d.run
	k := len(d.dgs)
	if k%d.cfg.Batch != 0 && r.n < d.runMax && r.last == r.size && plen <= r.size && r.bytes+plen <= d.runBytes {
		prev := &d.dgs[k-1]
		if prev.Dst == dg.Dst && prev.SrcPort == dg.SrcPort && prev.Src == dg.Src && prev.TOS == dg.TOS && prev.TTL == dg.TTL {
			r.n++
			r.last = plen
			r.bytes += plen
			return uint16(r.n - 1)
		}
	}
	*r = outRun{n: 1, size: plen, last: plen, bytes: plen}
	return 0
}

// sealInPlace writes h's headers into p's headroom from start, and after
// p's packet headers the pad and the ICRC, computed over the headers and
// the payload where it lies (p.Payload); it returns that tail (pad and
// ICRC), or false if the headers or the tail do not fit.
func (d *Device) sealInPlace(p *ibtransport.OutputPacket, h *FrameHeaders, start int) ([]byte, bool) {
	end := len(p.Buf)
	if _, err := h.Encode(p.Buf[start:p.Offset], p.Len()); err != nil || cap(p.Buf)-end < p.Pad+ICRCLen {
		return nil, false
	}
	tail := p.Buf[end : end+p.Pad+ICRCLen]
	copy(tail, zeroPad[:p.Pad])
	in := append(d.icrcIn[:0], p.Packet())
	in = append(in, p.Payload...)
	in = append(in, tail[:p.Pad])
	PutICRC(tail[p.Pad:], h.ICRC(p.Buf[start:p.Offset], in...))
	clear(in)
	return tail, true
}

// queue keeps a copy of a frame until its next hop resolves, if there is
// room.
func (d *Device) queue(now time.Time, nextHop netip.Addr, buf []byte) {
	if d.pendingN+len(buf) > MaxPendingBytes {
		d.counters.Unresolved++
		return
	}
	d.counters.Queued++
	d.pendingN += len(buf)
	d.pending = append(d.pending, pendingFrame{nextHop: nextHop, frame: append([]byte(nil), buf...), since: now})
}

// srcPort chooses the UDP source port as rxe does: UD QPs keep the port hashed
// from their own QPN; connected QPs use the one derived from the path.
func (d *Device) srcPort(p *ibtransport.OutputPacket, ib []byte) uint16 {
	if ibtransport.BTH(ib).Opcode().Service() == ibtransport.ServiceUD {
		return UDPSourcePort(p.SrcQPN)
	}
	return ConnectedUDPSourcePort(p.AH.FlowLabel, p.SrcQPN, p.DestQPN)
}

// NextDeadline returns the device's next timer deadline: the engine's, the
// neighbour protocol's, or when the oldest waiting frame times out.
func (d *Device) NextDeadline() (time.Time, bool) {
	t, ok := d.ctx.NextDeadline()
	earliest := func(u time.Time, have bool) {
		if have && (!ok || u.Before(t)) {
			t, ok = u, true
		}
	}
	if d.proto != nil {
		earliest(d.proto.NextDeadline())
	}
	d.mu.Lock()
	if len(d.pending) > 0 {
		earliest(d.pending[0].since.Add(PendingTimeout), true)
	}
	d.mu.Unlock()
	return t, ok
}

// Run drives the device on a blocking endpoint until ctx ends or the endpoint
// closes: one goroutine reads and hands frames to the engine, this one sends
// whenever the engine has output, a work request was posted, or a timer is due.
func (d *Device) Run(ctx context.Context, clock netio.Clock) error {
	if clock == nil {
		clock = netio.SystemClock{}
	}
	errc := make(chan error, 1)
	kick := make(chan struct{}, 1)
	var plan loopPlan
	kickLoop := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	soon := time.NewTimer(time.Hour) // output left for the application's post (inputDone)
	soon.Stop()
	defer soon.Stop()
	later := func() { soon.Reset(outputDefer) }
	d.ctx.SetPostHook(func() { d.postFlush(clock.Now(), &plan, kickLoop) }) // rtc.go
	defer d.ctx.SetPostHook(nil)
	d.ctx.SetWaitHook(func() { d.waitFlush(clock.Now(), &plan, kickLoop) })
	defer d.ctx.SetWaitHook(nil)
	d.outside.Store(&outsideHooks{plan: &plan, kick: kickLoop}) // pollinput.go
	defer d.outside.Store(nil)
	go func() {
		// The datagrams of a DatagramReader are decoded where they landed;
		// other endpoints copy frames into these buffers.
		dr, _ := d.cfg.Endpoint.(netio.DatagramReader)
		fr, _ := d.cfg.Endpoint.(netio.FrameReader)
		var dgs []netio.Datagram
		var hdr datagramHeaders
		var bufs [][]byte
		var sizes []int
		if dr != nil {
			dgs = make([]netio.Datagram, len(d.rbufs))
		} else if fr != nil {
			bufs = make([][]byte, len(d.rbufs)) // pointed into the endpoint's ring
		} else {
			bufs = make([][]byte, len(d.rbufs))
			frameLen := cap(d.rbufs[0])
			for i := range bufs {
				bufs[i] = make([]byte, frameLen)
			}
			sizes = make([]int, len(bufs))
		}
		for {
			var n int
			var err error
			switch {
			case dr != nil:
				n, err = dr.ReadDatagrams(dgs)
			case fr != nil:
				n, err = fr.ReadFrames(bufs)
			default:
				n, err = d.fe.Read(bufs, sizes, 0)
			}
			if n > 0 {
				rtc := d.beginBatch(n) // run to completion (rtc.go)
				switch {
				case dr != nil:
					d.inputDatagrams(clock.Now(), dgs[:n], &hdr)
				case fr != nil:
					d.inputFrames(clock.Now(), bufs[:n])
				default:
					d.Input(clock.Now(), bufs[:n], sizes[:n])
				}
				if rtc {
					d.inputDone(clock.Now(), &plan, kickLoop, later)
				} else {
					kickLoop()
				}
			}
			if err != nil {
				errc <- err
				return
			}
		}
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if _, err := d.Flush(clock.Now()); err != nil && !errors.Is(err, net.ErrClosed) {
			return err
		}
		wait := time.Hour
		plan.planning()
		t, ok := d.NextDeadline()
		if ok {
			wait = max(t.Sub(clock.Now()), 0)
		}
		plan.planned(t, ok)
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errc:
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		case <-kick:
		case <-d.ctx.Wake():
		case <-d.wake:
		case <-timer.C:
		case <-soon.C:
		}
	}
}
