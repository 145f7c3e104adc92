package roce

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/softrdma/softrdma/ibtransport"
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

// Neighbors resolves an IP address to the MAC address frames to it go to, like
// the kernel's neighbour table.
type Neighbors interface {
	Resolve(ip netip.Addr) (mac [6]byte, ok bool)
}

// StaticNeighbors is a fixed neighbour table.
type StaticNeighbors map[netip.Addr][6]byte

// Resolve looks ip up; an IPv4-mapped address is looked up as IPv4.
func (s StaticNeighbors) Resolve(ip netip.Addr) ([6]byte, bool) {
	mac, ok := s[ip.Unmap()]
	return mac, ok
}

// DeviceConfig configures a RoCEv2 device on a frame endpoint.
type DeviceConfig struct {
	// Endpoint carries the device's Ethernet frames.
	Endpoint netio.Endpoint
	// MAC is the device's Ethernet address.
	MAC [6]byte
	// Addrs are the interface's IP addresses: they make the GID table.
	Addrs []netip.Addr
	// Neighbors resolves next-hop MAC addresses; nil for endpoints that route
	// by IP address themselves (the UDP socket backend).
	Neighbors Neighbors
	// Engine configures the verbs engine; a zero PortMTU is derived from the
	// endpoint's MTU as rxe does (PathMTUFor).
	Engine ibtransport.ContextConfig
	// HopLimit is the IPv4 TTL / IPv6 hop limit of frames whose address handle
	// gives none (default 64, as rxe).
	HopLimit uint8
	// Batch is how many frames move per endpoint call (default: the
	// endpoint's BatchSize).
	Batch int
}

// DeviceCounters count what the device dropped before the engine saw it, and
// what the engine refused.
type DeviceCounters struct {
	FramesIn, FramesOut uint64
	NotRoCE             uint64 // frames that are neither RoCEv1 nor RoCEv2
	Malformed           uint64 // RoCE frames with bad lengths
	NotForUs            uint64 // destination IP is none of the device's addresses
	BadICRC             uint64 // ICRC did not verify
	EngineDrops         uint64 // the engine dropped the packet (see its counters)
	Unroutable          uint64 // output packets whose destination could not be resolved
	WriteErrors         uint64
}

// Device is a RoCEv2 device: it joins a verbs engine (ibtransport.Context) to a
// frame endpoint, adding and checking the Ethernet/IP/UDP headers and the ICRC.
// It is sans-goroutine: Poll and Flush do the work, driven either by a
// simulator loop or by Run.
type Device struct {
	cfg  DeviceConfig
	ctx  *ibtransport.Context
	gids []netip.Addr
	mtu  int

	mu       sync.Mutex // serialises Poll/Flush: buffers and counters
	out      *ibtransport.OutputBatch
	frames   [][]byte
	rbufs    [][]byte
	sizes    []int
	ipID     uint16
	counters DeviceCounters

	// zeroIPID and unknownIPID follow the endpoint's netio.IPv4IDPolicy: a
	// UDP socket sends IPv4 ID 0 and cannot report received IDs.
	zeroIPID, unknownIPID bool
}

// headroom is room for the longest header stack the device writes before a BTH:
// Ethernet with a VLAN tag and IPv6 + UDP.
const headroom = EthernetLen + VLANTagLen + IPv6Len + UDPLen

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
	if cfg.Engine.PortMTU == 0 {
		cfg.Engine.PortMTU = mtu
	}
	d := &Device{cfg: cfg, mtu: cfg.Engine.PortMTU, gids: GIDTable(cfg.MAC, cfg.Addrs)}
	if p, ok := cfg.Endpoint.(netio.IPv4IDPolicy); ok {
		d.zeroIPID, d.unknownIPID = p.IPv4IDZero(), p.UnknownIPv4ID()
	}
	d.ctx = ibtransport.NewContext(cfg.Engine)
	d.out = ibtransport.NewOutputBatch(cfg.Batch, headroom, ICRCLen)
	d.frames = make([][]byte, 0, cfg.Batch)
	frameLen := netio.MaxFrameLen(cfg.Endpoint.MTU()) + VLANTagLen
	mem := make([]byte, frameLen*cfg.Batch)
	d.rbufs = make([][]byte, cfg.Batch)
	for i := range d.rbufs {
		d.rbufs[i] = mem[i*frameLen : (i+1)*frameLen : (i+1)*frameLen]
	}
	d.sizes = make([]int, cfg.Batch)
	return d, nil
}

// GIDTable returns RoCEv2 GIDs in the order Linux gives them: the link-local
// address derived from the MAC first, then each address (IPv4 as IPv4-mapped).
func GIDTable(mac [6]byte, addrs []netip.Addr) []netip.Addr {
	ll := [16]byte{0: 0xfe, 1: 0x80}
	ll[8], ll[9], ll[10] = mac[0]^0x02, mac[1], mac[2]
	ll[11], ll[12] = 0xff, 0xfe
	ll[13], ll[14], ll[15] = mac[3], mac[4], mac[5]
	gids := []netip.Addr{netip.AddrFrom16(ll)}
	for _, a := range addrs {
		gids = append(gids, netip.AddrFrom16(a.As16()))
	}
	return gids
}

// Context returns the device's verbs engine.
func (d *Device) Context() *ibtransport.Context { return d.ctx }

// GIDs returns the GID table.
func (d *Device) GIDs() []netip.Addr { return d.gids }

// PathMTU returns the port's active IB MTU.
func (d *Device) PathMTU() int { return d.mtu }

// Counters returns a snapshot of the device counters.
func (d *Device) Counters() DeviceCounters {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.counters
}

// AddressHandle returns an address handle for the remote address dst, with the
// source GID of the same family.
func (d *Device) AddressHandle(dst netip.Addr) (ibtransport.AddressHandle, error) {
	for i, g := range d.gids {
		if i == 0 {
			continue // link-local: not used for routed RoCEv2 here
		}
		if g.Unmap().Is4() == dst.Unmap().Is4() {
			return ibtransport.AddressHandle{DGID: dst.As16(), SGIDIndex: uint8(i), HopLimit: d.cfg.HopLimit}, nil
		}
	}
	return ibtransport.AddressHandle{}, fmt.Errorf("roce: no source GID of the family of %v", dst)
}

// isOurs reports whether ip is one of the device's addresses.
func (d *Device) isOurs(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, a := range d.cfg.Addrs {
		if a.Unmap() == ip {
			return true
		}
	}
	return false
}

// Poll reads every frame waiting on a pollable endpoint, hands the RoCE
// packets to the engine, then sends what the engine has to send. It reports
// whether it moved any frame in either direction.
func (d *Device) Poll(now time.Time) (bool, error) {
	p, ok := d.cfg.Endpoint.(netio.Poller)
	if !ok {
		return false, netio.ErrNotPollable
	}
	moved := false
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
	sent, err := d.Flush(now)
	return moved || sent > 0, err
}

// Input hands received frames to the engine: frames[i][:sizes[i]].
func (d *Device) Input(now time.Time, frames [][]byte, sizes []int) {
	var f Frame
	for i, b := range frames {
		d.input(now, &f, b[:sizes[i]])
	}
}

func (d *Device) input(now time.Time, f *Frame, b []byte) {
	counter := d.check(f, b)
	if counter == nil {
		meta := ibtransport.InputMeta{
			HasGRH:       true,
			SGID:         f.Src.As16(),
			DGID:         f.Dst.As16(),
			TrafficClass: f.trafficClass(),
			FlowLabel:    f.flowLabel(),
			HopLimit:     f.hopLimit(),
		}
		var grh [GRHLen]byte
		if ibtransport.BTH(f.IB).Opcode().Service() == ibtransport.ServiceUD && len(f.IP) <= GRHLen {
			// What rxe puts in the 40-byte GRH area of a UD receive: the IPv6
			// header, or for IPv4 the IPv4 header in the last 20 bytes.
			copy(grh[GRHLen-len(f.IP):], f.IP)
			meta.GRH = grh[:]
		}
		if d.ctx.Input(now, f.IB, meta) != nil {
			counter = &d.counters.EngineDrops
		}
	}
	d.mu.Lock()
	d.counters.FramesIn++
	if counter != nil {
		*counter++
	}
	d.mu.Unlock()
}

// check decodes a received frame and returns the counter of the reason to drop
// it, or nil for a RoCE packet addressed to the device whose ICRC verifies.
func (d *Device) check(f *Frame, b []byte) *uint64 {
	err := f.DecodeEthernet(b)
	switch {
	case errors.Is(err, ErrNotRoCE):
		return &d.counters.NotRoCE
	case err != nil:
		return &d.counters.Malformed
	case !d.isOurs(f.Dst):
		return &d.counters.NotForUs
	case d.unknownIPID && !f.IPv6:
		// The sender's IPv4 ID is covered by the ICRC but was not
		// delivered: recover it, keeping 16 bits of the check.
		if _, ok := RecoverIPv4ID(f); !ok {
			return &d.counters.BadICRC
		}
	case VerifyICRC(f) != nil:
		return &d.counters.BadICRC
	}
	return nil
}

func (f *Frame) trafficClass() uint8 {
	if f.IPv6 {
		return uint8(f.IP[0]<<4 | f.IP[1]>>4)
	}
	return f.IP[1]
}

func (f *Frame) flowLabel() uint32 {
	if f.IPv6 {
		return uint32(f.IP[1]&0x0f)<<16 | uint32(f.IP[2])<<8 | uint32(f.IP[3])
	}
	return 0
}

func (f *Frame) hopLimit() uint8 {
	if f.IPv6 {
		return f.IP[7]
	}
	return f.IP[8]
}

// Flush takes everything the engine has to send, frames it and writes it to
// the endpoint, and returns the number of frames written.
func (d *Device) Flush(now time.Time) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	total := 0
	for {
		d.out.Reset()
		if d.ctx.Output(now, d.out) == 0 {
			return total, nil
		}
		d.frames = d.frames[:0]
		for i := range d.out.Packets {
			if fr, ok := d.frame(&d.out.Packets[i]); ok {
				d.frames = append(d.frames, fr)
			}
		}
		n, err := d.cfg.Endpoint.Write(d.frames, 0)
		d.counters.FramesOut += uint64(n)
		total += n
		if err != nil {
			d.counters.WriteErrors++
			return total, err
		}
	}
}

// frame writes the RoCEv2 headers and ICRC around one output packet, in its
// headroom and tailroom: no copy of the packet.
func (d *Device) frame(p *ibtransport.OutputPacket) ([]byte, bool) {
	ah := p.AH
	dst := netip.AddrFrom16(ah.DGID).Unmap()
	if int(ah.SGIDIndex) >= len(d.gids) {
		d.counters.Unroutable++
		return nil, false
	}
	src := d.gids[ah.SGIDIndex].Unmap()
	var mac [6]byte
	ok := true
	if d.cfg.Neighbors != nil {
		mac, ok = d.cfg.Neighbors.Resolve(dst)
	}
	if !ok || src.Is4() != dst.Is4() {
		d.counters.Unroutable++
		return nil, false
	}
	ib := p.Packet()
	h := FrameHeaders{
		DstMAC:       mac,
		SrcMAC:       d.cfg.MAC,
		Src:          src,
		Dst:          dst,
		TrafficClass: ah.TrafficClass,
		FlowLabel:    ah.FlowLabel,
		HopLimit:     ah.HopLimit,
		SrcPort:      d.srcPort(p, ib),
	}
	if h.HopLimit == 0 {
		h.HopLimit = d.cfg.HopLimit
	}
	if src.Is4() && !d.zeroIPID {
		h.IPID = d.ipID // rxe counts IDs per packet; the ICRC covers them
		d.ipID++
	}
	hl := h.Len()
	start := p.Offset - hl
	buf := p.Buf[start : p.Offset+len(ib)+ICRCLen]
	if _, err := h.EncodeFrame(buf, len(ib)); err != nil {
		d.counters.Unroutable++
		return nil, false
	}
	return buf, true
}

// srcPort chooses the UDP source port as rxe does: UD QPs keep the port hashed
// from their own QPN; connected QPs use the one derived from the path.
func (d *Device) srcPort(p *ibtransport.OutputPacket, ib []byte) uint16 {
	if ibtransport.BTH(ib).Opcode().Service() == ibtransport.ServiceUD {
		return UDPSourcePort(p.SrcQPN)
	}
	return ConnectedUDPSourcePort(p.AH.FlowLabel, p.SrcQPN, p.DestQPN)
}

// NextDeadline returns the engine's next timer deadline.
func (d *Device) NextDeadline() (time.Time, bool) { return d.ctx.NextDeadline() }

// Run drives the device on a blocking endpoint until ctx ends or the endpoint
// closes: one goroutine reads and hands frames to the engine, this one sends
// whenever the engine has output, a work request was posted, or a timer is due.
func (d *Device) Run(ctx context.Context, clock netio.Clock) error {
	if clock == nil {
		clock = netio.SystemClock{}
	}
	errc := make(chan error, 1)
	kick := make(chan struct{}, 1)
	go func() {
		bufs := make([][]byte, len(d.rbufs))
		frameLen := cap(d.rbufs[0])
		for i := range bufs {
			bufs[i] = make([]byte, frameLen)
		}
		sizes := make([]int, len(bufs))
		for {
			n, err := d.cfg.Endpoint.Read(bufs, sizes, 0)
			if n > 0 {
				d.Input(clock.Now(), bufs[:n], sizes[:n])
				select {
				case kick <- struct{}{}:
				default:
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
		if t, ok := d.NextDeadline(); ok {
			wait = max(t.Sub(clock.Now()), 0)
		}
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
		case <-timer.C:
		}
	}
}
