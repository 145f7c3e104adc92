package conform

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/netio"
	"github.com/softrdma/softrdma/roce"
	"github.com/softrdma/softrdma/sim"
)

// Link carries the tester's Ethernet frames to and from the peer, on its own
// clock: virtual time on the simulator, the wall clock on a real network.
type Link interface {
	// WriteFrame sends one Ethernet frame.
	WriteFrame(frame []byte) error
	// ReadFrame returns the next frame received (a copy) and when it arrived,
	// waiting until deadline on the link's clock; it returns ErrTimeout then.
	ReadFrame(deadline time.Time) ([]byte, time.Time, error)
	// Now returns the link's time.
	Now() time.Time
	// Close releases the link.
	Close() error
}

// ErrTimeout is returned by Link.ReadFrame when the deadline passed.
var ErrTimeout = errors.New("conform: no frame before the deadline")

// SimLink is a Link on a simulated port. Reading steps the simulation: the
// network's events and the Stepped devices (the peer under test), so that the
// peer runs only while the tester waits for it, and a wait of a second of
// virtual time costs microseconds.
type SimLink struct {
	Net  *sim.Network
	Port *sim.Port
	Devs []sim.Stepped

	bufs  [][]byte
	sizes []int
}

var _ Link = (*SimLink)(nil)

// NewSimLink returns a Link on port of n that steps devs.
func NewSimLink(n *sim.Network, port *sim.Port, devs ...sim.Stepped) *SimLink {
	return &SimLink{Net: n, Port: port, Devs: devs, bufs: [][]byte{make([]byte, 16384)}, sizes: make([]int, 1)}
}

// WriteFrame writes frame to the port at the current virtual time.
func (l *SimLink) WriteFrame(frame []byte) error {
	_, err := l.Port.Write([][]byte{frame}, 0)
	return err
}

// Now returns the virtual time.
func (l *SimLink) Now() time.Time { return l.Net.Now() }

// Close closes the port.
func (l *SimLink) Close() error { return nil }

// ReadFrame runs the simulation until a frame reaches the port or the virtual
// clock reaches deadline.
func (l *SimLink) ReadFrame(deadline time.Time) ([]byte, time.Time, error) {
	for {
		n, err := l.Port.TryRead(l.bufs, l.sizes, 0)
		if err != nil {
			return nil, time.Time{}, err
		}
		now := l.Net.Now()
		if n > 0 {
			return append([]byte(nil), l.bufs[0][:l.sizes[0]]...), now, nil
		}
		if !now.Before(deadline) {
			return nil, now, ErrTimeout
		}
		moved := false
		for _, d := range l.Devs {
			m, err := d.Poll(now)
			if err != nil {
				return nil, now, err
			}
			moved = moved || m
		}
		if moved {
			continue
		}
		var due time.Time
		have := false
		for _, d := range l.Devs {
			if t, ok := d.NextDeadline(); ok && (!have || t.Before(due)) {
				due, have = t, true
			}
		}
		next, pending := l.Net.NextEventTime()
		switch {
		case pending && !next.After(deadline) && (!have || !due.Before(next)):
			l.Net.Step()
		case have && due.Before(deadline):
			if !due.After(now) {
				due = now.Add(time.Nanosecond)
			}
			l.Net.RunUntil(due)
		default:
			l.Net.RunUntil(deadline)
		}
	}
}

// EndpointLink is a Link on a netio endpoint on a real network, with the wall
// clock. A goroutine reads the endpoint.
type EndpointLink struct {
	ep     netio.Endpoint
	frames chan received
	errc   chan error
	once   sync.Once
}

type received struct {
	frame []byte
	at    time.Time
}

var _ Link = (*EndpointLink)(nil)

// NewEndpointLink returns a Link on ep; closing the link closes ep.
func NewEndpointLink(ep netio.Endpoint) *EndpointLink {
	l := &EndpointLink{ep: ep, frames: make(chan received, 4096), errc: make(chan error, 1)}
	go l.read()
	return l
}

func (l *EndpointLink) read() {
	batch := max(l.ep.BatchSize(), 1)
	bufs := make([][]byte, batch)
	for i := range bufs {
		bufs[i] = make([]byte, netio.MaxFrameLen(l.ep.MTU())+64)
	}
	sizes := make([]int, batch)
	for {
		n, err := l.ep.Read(bufs, sizes, 0)
		now := time.Now()
		for i := 0; i < n; i++ {
			select {
			case l.frames <- received{append([]byte(nil), bufs[i][:sizes[i]]...), now}:
			default: // the tester is not reading: drop, as a full NIC queue would
			}
		}
		if err != nil && !errors.Is(err, netio.ErrShortBuffer) {
			l.errc <- err
			return
		}
	}
}

// WriteFrame writes one frame.
func (l *EndpointLink) WriteFrame(frame []byte) error {
	_, err := l.ep.Write([][]byte{frame}, 0)
	return err
}

// ReadFrame waits for the next frame until deadline.
func (l *EndpointLink) ReadFrame(deadline time.Time) ([]byte, time.Time, error) {
	d := time.Until(deadline)
	if d < 0 {
		d = 0
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case r := <-l.frames:
		return r.frame, r.at, nil
	case err := <-l.errc:
		l.errc <- err
		return nil, time.Now(), err
	case <-t.C:
		return nil, time.Now(), ErrTimeout
	}
}

// Now returns the wall clock.
func (l *EndpointLink) Now() time.Time { return time.Now() }

// Close closes the endpoint.
func (l *EndpointLink) Close() error {
	var err error
	l.once.Do(func() { err = l.ep.Close() })
	return err
}

// Packet is what the tester sends: the headers, the payload and the pad, any of
// them as wrong as a case wants.
type Packet struct {
	// Fields are the BTH and extension headers, written with PacketFields.
	Fields ib.PacketFields
	// Payload follows the headers.
	Payload []byte
	// PadCount is the BTH pad count; -1 writes the right one for the payload.
	PadCount int
	// PadBytes is how many zero pad bytes follow the payload; -1 writes as many
	// as the pad count says.
	PadBytes int
	// BadICRC flips a bit of the ICRC.
	BadICRC bool
}

// NewPacket returns a packet with the right pad for payload.
func NewPacket(f ib.PacketFields, payload []byte) *Packet {
	return &Packet{Fields: f, Payload: payload, PadCount: -1, PadBytes: -1}
}

// Captured is a frame the tester received, decoded.
type Captured struct {
	// At is when it arrived, on the link's clock.
	At time.Time
	// Frame is the whole Ethernet frame.
	Frame []byte
	// IB is the transport packet, BTH through pad (Frame's bytes).
	IB []byte
	// Pkt is IB decoded (its views point into IB); zero if Err is set.
	Pkt ib.Packet
	// Err is the transport decoding error, if any.
	Err error
	// ICRCOK says that the frame's ICRC verified.
	ICRCOK bool
	// Src is the IP source address; DstPort the UDP destination port.
	Src     netip.Addr
	DstPort uint16
}

// Wire is the tester's RoCEv2 side of a Link: it frames packets from a
// template of headers (its own and the peer's addresses) and decodes what comes
// back, keeping frames that arrived while it waited for something else.
type Wire struct {
	link Link
	hdr  roce.FrameHeaders
	// zeroIPID: IPv4 ID 0 (a UDP socket endpoint writes no other); unknownIPID:
	// received IPv4 IDs were not delivered and are recovered from the ICRC.
	zeroIPID, unknownIPID bool
	ipID                  uint16
	inbox                 []*Captured
	buf                   []byte
	// Sent and Received count frames.
	Sent, Received int
	// Trace, if not nil, is told about every frame sent and received.
	Trace func(dir string, c *Captured)
}

// WireConfig configures a Wire.
type WireConfig struct {
	// Link carries the frames.
	Link Link
	// LocalIP and PeerIP are the RoCEv2 addresses (both IPv4 or both IPv6).
	LocalIP, PeerIP netip.Addr
	// LocalMAC and PeerMAC are the Ethernet addresses (ignored by a UDP socket).
	LocalMAC, PeerMAC [6]byte
	// UDPSocket says the Link is a UDP socket endpoint: IPv4 ID 0 out, and
	// received IDs recovered from the ICRC.
	UDPSocket bool
	// SrcPort is the UDP source port of every frame (default 4791: a UDP
	// socket endpoint sends from its own port without opening another).
	SrcPort uint16
	// DstPort is the RoCEv2 UDP port of the peer, and the one the tester
	// receives on (default 4791).
	DstPort uint16
}

// NewWire returns a Wire.
func NewWire(cfg WireConfig) (*Wire, error) {
	if cfg.LocalIP.Unmap().Is4() != cfg.PeerIP.Unmap().Is4() {
		return nil, fmt.Errorf("conform: local %v and peer %v are of different families", cfg.LocalIP, cfg.PeerIP)
	}
	if cfg.SrcPort == 0 {
		cfg.SrcPort = roce.UDPPort
	}
	if cfg.DstPort == 0 {
		cfg.DstPort = roce.UDPPort
	}
	return &Wire{
		link: cfg.Link,
		hdr: roce.FrameHeaders{SrcMAC: cfg.LocalMAC, DstMAC: cfg.PeerMAC, Src: cfg.LocalIP.Unmap(), Dst: cfg.PeerIP.Unmap(),
			HopLimit: 64, SrcPort: cfg.SrcPort, DstPort: cfg.DstPort},
		zeroIPID: cfg.UDPSocket, unknownIPID: cfg.UDPSocket,
		buf: make([]byte, 16384),
	}, nil
}

// Link returns the wire's link.
func (w *Wire) Link() Link { return w.link }

// Port returns the RoCEv2 UDP port.
func (w *Wire) Port() uint16 { return w.hdr.DstPort }

// LocalIP returns the tester's address.
func (w *Wire) LocalIP() netip.Addr { return w.hdr.Src }

// PeerIP returns the peer's address.
func (w *Wire) PeerIP() netip.Addr { return w.hdr.Dst }

// Now returns the link's time.
func (w *Wire) Now() time.Time { return w.link.Now() }

// Build returns the frame and the transport bytes for p (the transport bytes
// are a sub-slice of the frame).
func (w *Wire) Build(p *Packet) (frame, ibBytes []byte, err error) {
	h := w.hdr
	if !w.zeroIPID && h.Src.Is4() {
		h.IPID = w.ipID
		w.ipID++
	}
	f := p.Fields
	pad := p.PadCount
	if pad < 0 {
		pad = int(ib.PadCountFor(len(p.Payload)))
	}
	f.BTH.PadCount = uint8(pad) & 3
	padBytes := p.PadBytes
	if padBytes < 0 {
		padBytes = pad
	}
	hl := h.Len()
	ibLen := f.HeaderLen() + len(p.Payload) + padBytes
	total := hl + ibLen + roce.ICRCLen
	if total > len(w.buf) {
		return nil, nil, fmt.Errorf("conform: frame of %d bytes is too long", total)
	}
	b := w.buf[:total]
	n := hl + f.EncodeHeaders(b[hl:])
	n += copy(b[n:], p.Payload)
	clear(b[n : n+padBytes])
	if _, err := h.EncodeFrame(b, ibLen); err != nil {
		return nil, nil, err
	}
	if p.BadICRC {
		b[total-1] ^= 0x01
	}
	frame = append([]byte(nil), b...)
	return frame, frame[hl : hl+ibLen], nil
}

// Send builds p and writes it; it returns the time it left and its transport bytes.
func (w *Wire) Send(p *Packet) (time.Time, []byte, error) {
	frame, ibBytes, err := w.Build(p)
	if err != nil {
		return time.Time{}, nil, err
	}
	at := w.link.Now()
	if err := w.link.WriteFrame(frame); err != nil {
		return at, nil, err
	}
	w.Sent++
	if w.Trace != nil {
		c := &Captured{At: at, Frame: frame, IB: ibBytes, ICRCOK: !p.BadICRC}
		c.Err = c.Pkt.Decode(ibBytes)
		w.Trace("out", c)
	}
	return at, ibBytes, nil
}

// decode turns a received frame into a Captured, or nil if it is not a RoCEv2
// packet to the tester's address.
func (w *Wire) decode(frame []byte, at time.Time) *Captured {
	var f roce.Frame
	// The peer answers to the tester's port; a frame to 4791 when that is another
	// port is still decoded, so that roce.icrc.answers can say where it went.
	err := f.DecodeEthernetPort(frame, w.hdr.DstPort)
	if errors.Is(err, roce.ErrNotRoCE) && w.hdr.DstPort != roce.UDPPort {
		err = f.DecodeEthernet(frame)
	}
	if err != nil || f.Version != roce.RoCEv2 || f.Dst.Unmap() != w.hdr.Src {
		return nil
	}
	c := &Captured{At: at, Frame: frame, IB: f.IB, Src: f.Src.Unmap(), DstPort: f.DstPort}
	if w.unknownIPID && !f.IPv6 {
		_, c.ICRCOK = roce.RecoverIPv4ID(&f)
	} else {
		c.ICRCOK = roce.VerifyICRC(&f) == nil
	}
	c.Err = c.Pkt.Decode(f.IB)
	return c
}

// Next returns the first frame (kept or new) that match accepts, waiting until
// deadline; frames match refuses are kept for later calls. It returns ErrTimeout
// if none came.
func (w *Wire) Next(deadline time.Time, match func(*Captured) bool) (*Captured, error) {
	for i, c := range w.inbox {
		if match(c) {
			w.inbox = append(w.inbox[:i], w.inbox[i+1:]...)
			return c, nil
		}
	}
	for {
		frame, at, err := w.link.ReadFrame(deadline)
		if err != nil {
			return nil, err
		}
		c := w.decode(frame, at)
		if c == nil {
			continue
		}
		w.Received++
		if w.Trace != nil {
			w.Trace("in", c)
		}
		if match(c) {
			return c, nil
		}
		if len(w.inbox) < 1024 {
			w.inbox = append(w.inbox, c)
		}
	}
}

// Discard drops the kept frames that match accepts.
func (w *Wire) Discard(match func(*Captured) bool) {
	kept := w.inbox[:0]
	for _, c := range w.inbox {
		if !match(c) {
			kept = append(kept, c)
		}
	}
	clear(w.inbox[len(kept):])
	w.inbox = kept
}

// ToQP returns a match function for packets to the tester's QP qpn.
func ToQP(qpn uint32) func(*Captured) bool {
	return func(c *Captured) bool {
		return len(c.IB) >= ib.BTHLen && ib.BTH(c.IB).DestQP() == qpn
	}
}
