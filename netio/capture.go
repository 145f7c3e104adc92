package netio

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/softrdma/softrdma/header"
)

// CaptureFormat selects the file format a CaptureWriter writes.
type CaptureFormat int

const (
	// FormatPcap is classic libpcap format with nanosecond timestamps
	// (magic 0xa1b23c4d), LINKTYPE_ETHERNET.
	FormatPcap CaptureFormat = iota
	// FormatPcapNG is pcapng with one Ethernet interface and nanosecond
	// timestamps (if_tsresol 9).
	FormatPcapNG
)

// String returns "pcap" or "pcapng".
func (f CaptureFormat) String() string {
	switch f {
	case FormatPcap:
		return "pcap"
	case FormatPcapNG:
		return "pcapng"
	}
	return fmt.Sprintf("CaptureFormat(%d)", int(f))
}

// CaptureSnapLen is the largest number of bytes of one frame a CaptureWriter
// records; longer frames are truncated, their original length kept.
const CaptureSnapLen = 262144

// CaptureWriter writes frames with timestamps to a pcap or pcapng stream:
// the one capture writer of the module (netio.Capture, sim, the --pcap file
// of every command, decode --annotate). pcapng adds what pcap cannot hold:
// an application name and comments on the section, comments on packets,
// and frames of several link types in one file. It is safe for concurrent
// use. Output is buffered: call Flush (or Close) before closing the
// underlying writer.
type CaptureWriter struct {
	mu      sync.Mutex
	buf     *bufio.Writer
	pcap    *pcapgo.Writer // FormatPcap
	ng      *ngWriter      // FormatPcapNG
	link    LinkType
	snaplen int
	err     error // first write error, sticky
	frames  uint64
}

// LinkType is a capture's link-layer header type (LINKTYPE_*,
// tcpdump.org/linktypes): 16 bits in pcap and pcapng (gopacket's
// layers.LinkType has 8).
type LinkType uint16

// The link types softrdma writes.
const (
	LinkTypeEthernet LinkType = 1
	LinkTypeRaw      LinkType = 101 // raw IPv4 or IPv6
)

// CaptureConfig configures NewCaptureWriterConfig.
type CaptureConfig struct {
	Format CaptureFormat
	// SnapLen is the most bytes of each frame recorded (tcpdump -s: the
	// headers of a long run without its payloads); 0, or more than
	// CaptureSnapLen, means CaptureSnapLen.
	SnapLen int
	// LinkType is the link type of the frames WriteFrame records (and of a
	// pcap file, which holds one); 0 means Ethernet.
	LinkType LinkType
	// Application and Comments go in a pcapng section header
	// (shb_userappl, opt_comment); Application "" means "softrdma".
	Application string
	Comments    []string
}

// NewCaptureWriter writes the file header for format to w and returns a
// writer for Ethernet frames.
func NewCaptureWriter(w io.Writer, format CaptureFormat) (*CaptureWriter, error) {
	return NewCaptureWriterConfig(w, CaptureConfig{Format: format})
}

// NewCaptureWriterSnapLen is NewCaptureWriter recording at most snaplen bytes
// of each frame (see CaptureConfig.SnapLen).
func NewCaptureWriterSnapLen(w io.Writer, format CaptureFormat, snaplen int) (*CaptureWriter, error) {
	return NewCaptureWriterConfig(w, CaptureConfig{Format: format, SnapLen: snaplen})
}

// NewCaptureWriterConfig writes the file header cfg describes to w and
// returns a writer for frames.
func NewCaptureWriterConfig(w io.Writer, cfg CaptureConfig) (*CaptureWriter, error) {
	snaplen := cfg.SnapLen
	if snaplen <= 0 || snaplen > CaptureSnapLen {
		snaplen = CaptureSnapLen
	}
	link := cfg.LinkType
	if link == 0 {
		link = LinkTypeEthernet
	}
	c := &CaptureWriter{snaplen: snaplen, link: link, buf: bufio.NewWriter(w)}
	switch cfg.Format {
	case FormatPcap:
		if link > 0xff {
			return nil, fmt.Errorf("netio: capture: link type %d in a pcap file: gopacket's pcap writer holds 8 bits", link)
		}
		c.pcap = pcapgo.NewWriterNanos(c.buf)
		if err := c.pcap.WriteFileHeader(uint32(snaplen), layers.LinkType(link)); err != nil {
			return nil, fmt.Errorf("netio: capture: writing pcap header: %w", err)
		}
	case FormatPcapNG:
		app := cfg.Application
		if app == "" {
			app = "softrdma"
		}
		ng, err := newNgWriter(c.buf, snaplen, app, cfg.Comments)
		if err != nil {
			return nil, fmt.Errorf("netio: capture: writing pcapng header: %w", err)
		}
		c.ng = ng
	default:
		return nil, fmt.Errorf("netio: capture: unknown format %d", int(cfg.Format))
	}
	return c, nil
}

// FormatForPath returns the format a capture file named path is written
// in: pcapng if its name ends in .pcapng (in any case), else classic pcap.
func FormatForPath(path string) CaptureFormat {
	if strings.HasSuffix(strings.ToLower(path), ".pcapng") {
		return FormatPcapNG
	}
	return FormatPcap
}

// WritePacket records data, wireLen bytes on the wire (a record of another
// capture, already cut; at least len(data)), of link type link, with
// timestamp ts and, in pcapng, comments (pcap has no place for them: they
// are dropped). A pcap file holds one link type: another is an error.
func (c *CaptureWriter) WritePacket(ts time.Time, link LinkType, data []byte, wireLen int, comments []string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pcap != nil && link != c.link {
		return fmt.Errorf("netio: capture: link type %d in a pcap file of link type %d", link, c.link)
	}
	return c.writeLocked(ts, link, data, max(wireLen, len(data)), comments)
}

// WriteFrame records frame with timestamp ts. A zero ts is written as the
// Unix epoch (pcapgo would otherwise substitute the wall clock, which would
// make simulated captures irreproducible). After a write error every later
// call returns that error.
func (c *CaptureWriter) WriteFrame(ts time.Time, frame []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writeLocked(ts, c.link, frame, len(frame), nil)
}

// WriteFrameLen is WriteFrame for a frame that was wireLen bytes on the wire,
// of which frame holds the first (a record of another capture, already cut).
func (c *CaptureWriter) WriteFrameLen(ts time.Time, frame []byte, wireLen int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writeLocked(ts, c.link, frame, max(wireLen, len(frame)), nil)
}

// WriteFrames records each frames[i][offset:offset+sizes[i]] (or the whole of
// frames[i][offset:] when sizes is nil) with timestamp ts, under one lock.
func (c *CaptureWriter) WriteFrames(ts time.Time, frames [][]byte, sizes []int, offset int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, f := range frames {
		if offset > len(f) {
			continue
		}
		f = f[offset:]
		if sizes != nil && sizes[i] <= len(f) {
			f = f[:sizes[i]]
		}
		if err := c.writeLocked(ts, c.link, f, len(f), nil); err != nil {
			return err
		}
	}
	return nil
}

func (c *CaptureWriter) writeLocked(ts time.Time, link LinkType, frame []byte, wireLen int, comments []string) error {
	if c.err != nil {
		return c.err
	}
	if ts.IsZero() {
		ts = time.Unix(0, 0)
	}
	data := frame[:min(len(frame), c.snaplen)]
	var err error
	if c.pcap != nil {
		err = c.pcap.WritePacket(gopacket.CaptureInfo{Timestamp: ts, CaptureLength: len(data), Length: wireLen}, data)
	} else {
		err = c.ng.writePacket(ts, link, data, wireLen, comments)
	}
	if err != nil {
		c.err = fmt.Errorf("netio: capture: %w", err)
		return c.err
	}
	c.frames++
	return nil
}

// SnapLen returns the most bytes of a frame recorded.
func (c *CaptureWriter) SnapLen() int { return c.snaplen }

// Frames returns the number of frames recorded so far.
func (c *CaptureWriter) Frames() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.frames
}

// Flush writes buffered data to the underlying writer and returns the first
// error seen by any write or flush.
func (c *CaptureWriter) Flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	if err := c.buf.Flush(); err != nil {
		c.err = fmt.Errorf("netio: capture: flush: %w", err)
	}
	return c.err
}

// Capture is an Endpoint that records every frame read from or written to
// the wrapped endpoint in a capture file, timestamped by a Clock. Read and
// Write may run concurrently. Failures to write the capture never disturb
// the traffic: the first one is kept and returned by Flush and Close.
//
// NewCapture returns it as a CaptureEndpoint whose dynamic type also offers
// each optional fast-path interface the wrapped endpoint offers
// (DatagramReader, FrameReader, VectorWriter, DatagramWriter) and no other, so that a device
// keeps its zero-copy path under a capture. What those paths move is
// recorded as the frames Read and Write would have moved.
type Capture struct {
	ep    Endpoint
	clock Clock
	w     *CaptureWriter

	rx   []byte     // scratch for frames made from datagrams
	rxMu sync.Mutex // serialises recordDatagrams (the endpoint's reader, multicast member sockets)

	// received, if not nil, rewrites each received frame before it is
	// recorded (NewCaptureInto).
	received func([]byte) []byte

	txMu sync.Mutex
	tx   []byte // scratch for frames gathered from pieces
}

// CaptureEndpoint is what NewCapture returns: the Endpoint, Poller and
// IPv4IDPolicy of a *Capture, and the optional interfaces of the endpoint it
// wraps (check for them with a type assertion, as on any Endpoint).
type CaptureEndpoint interface {
	Endpoint
	Poller
	IPv4IDPolicy
	// Flush writes buffered capture data out and returns the first capture error.
	Flush() error
	// Writer returns the CaptureWriter the capture records into.
	Writer() *CaptureWriter
	// Unwrap returns the wrapped endpoint.
	Unwrap() Endpoint
}

// NewCapture wraps ep so that every frame it reads or writes is written to w
// in the given format with timestamps from clock (SystemClock if nil).
func NewCapture(ep Endpoint, w io.Writer, format CaptureFormat, clock Clock) (CaptureEndpoint, error) {
	cw, err := NewCaptureWriter(w, format)
	if err != nil {
		return nil, err
	}
	return NewCaptureInto(ep, cw, clock, nil), nil
}

// NewCaptureInto wraps ep so that every frame it reads or writes is recorded
// in w, which other captures may share (a command's --pcap file), with
// timestamps from clock (SystemClock if nil). received, if not nil, is given
// each received frame and returns the frame to record (it may return a
// buffer of its own, used before its next call): the IPv4 Identification a
// UDP socket hides, put back. Close flushes w but does not close its writer.
func NewCaptureInto(ep Endpoint, w *CaptureWriter, clock Clock, received func([]byte) []byte) CaptureEndpoint {
	if clock == nil {
		clock = SystemClock{}
	}
	c := &Capture{ep: ep, clock: clock, w: w, received: received}
	if _, wall := clock.(SystemClock); wall {
		// Frames received in one batch keep the kernel's time of each
		// (Datagram.Stamp) instead of sharing the time the batch is
		// recorded at. A failure leaves the batch time.
		if ts, ok := ep.(RxTimestamper); ok {
			_ = ts.EnableRxTimestamps()
		}
	}
	return withFastPaths(c, &captureFast{c: c})
}

//go:generate go run gen_capture_paths.go

// captureFast serves a Capture's optional fast paths through the wrapped
// endpoint's (the fields withFastPaths fills in); the Capture offers only
// those the endpoint has.
type captureFast struct {
	c  *Capture
	dr DatagramReader
	rl ReadLender
	fr FrameReader
	vw VectorWriter
	dw DatagramWriter
}

// ReadDatagrams reads datagrams from the wrapped endpoint and records each
// as the frame Read would have returned for it.
func (x *captureFast) ReadDatagrams(d []Datagram) (int, error) {
	n, err := x.dr.ReadDatagrams(d)
	x.c.recordDatagrams(d[:n])
	return n, err
}

// TryReadDatagrams is ReadDatagrams without blocking.
func (x *captureFast) TryReadDatagrams(d []Datagram) (int, error) {
	n, err := x.dr.TryReadDatagrams(d)
	x.c.recordDatagrams(d[:n])
	return n, err
}

// LendReads lends the wrapped endpoint's reads: the outside thread reads
// through the capture's TryReadDatagrams (roce.Device.PollInput), so what
// it reads is recorded too.
func (x *captureFast) LendReads(active func() bool) (sock int, ok bool) {
	return x.rl.LendReads(active)
}

// datagramFramer is implemented by endpoints that know the frame their Read
// would return for a datagram (the UDP backend: its MAC addresses and IP version).
type datagramFramer interface {
	appendDatagramFrame(b []byte, d *Datagram) []byte
	// appendOutDatagramFrame appends the frame that leaves for d.
	appendOutDatagramFrame(b []byte, d *OutDatagram) []byte
}

func (c *Capture) recordDatagrams(d []Datagram) {
	if len(d) == 0 {
		return
	}
	c.rxMu.Lock()
	defer c.rxMu.Unlock()
	ts := c.clock.Now()
	df, _ := c.ep.(datagramFramer)
	for i := range d {
		if df != nil {
			c.rx = df.appendDatagramFrame(c.rx[:0], &d[i])
		} else {
			c.rx = appendDatagramFrame(c.rx[:0], &d[i])
		}
		frame := c.rx
		if c.received != nil {
			frame = c.received(frame)
		}
		at := ts
		if d[i].Stamp != 0 {
			at = time.Unix(0, d[i].Stamp)
		}
		_ = c.w.WriteFrame(at, frame)
	}
}

// appendDatagramFrame appends to b an Ethernet (zero MAC addresses), IP and
// UDP frame carrying d, IPv4 if both addresses are (after unmapping).
func appendDatagramFrame(b []byte, d *Datagram) []byte {
	v4 := d.Src.Addr().Unmap().Is4() && d.Dst.Addr().Unmap().Is4()
	return appendUDPFrame(b, [6]byte{}, [6]byte{}, v4, &header.IPUDPFields{
		Src: d.Src, Dst: d.Dst, TOS: d.TOS, TTL: d.TTL, PayloadLen: len(d.Payload),
	}, d.Payload)
}

// appendUDPFrame appends to b the Ethernet, IP (IPv4 if v4) and UDP headers
// for f, then the payload pieces.
func appendUDPFrame(b []byte, dstMAC, srcMAC [6]byte, v4 bool, f *header.IPUDPFields, payload ...[]byte) []byte {
	eth := header.EthernetFields{Dst: dstMAC, Src: srcMAC, Type: header.EtherTypeIPv6}
	ipLen := header.IPv6Len
	if v4 {
		eth.Type, ipLen = header.EtherTypeIPv4, header.IPv4MinLen
	}
	start := len(b)
	b = append(b, make([]byte, header.EthernetLen+ipLen+header.UDPLen)...)
	header.Ethernet(b[start:]).Encode(&eth)
	header.EncodeIPUDP(b[start+header.EthernetLen:], v4, f)
	for _, p := range payload {
		b = append(b, p...)
	}
	return b
}

// ReadFrames reads frames where they lie in the wrapped endpoint and records them.
func (x *captureFast) ReadFrames(frames [][]byte) (int, error) {
	n, err := x.fr.ReadFrames(frames)
	x.c.record(frames[:n], nil, 0)
	return n, err
}

// TryReadFrames is ReadFrames without blocking.
func (x *captureFast) TryReadFrames(frames [][]byte) (int, error) {
	n, err := x.fr.TryReadFrames(frames)
	x.c.record(frames[:n], nil, 0)
	return n, err
}

// WriteVectors records each frame (its pieces joined) and writes them to the
// wrapped endpoint, recording before writing as Write does.
func (x *captureFast) WriteVectors(frames [][][]byte) (int, error) {
	if len(frames) > 0 {
		c := x.c
		ts := c.clock.Now()
		c.txMu.Lock()
		for _, pieces := range frames {
			c.tx = c.tx[:0]
			for _, p := range pieces {
				c.tx = append(c.tx, p...)
			}
			_ = c.w.WriteFrame(ts, c.tx)
		}
		c.txMu.Unlock()
	}
	return x.vw.WriteVectors(frames)
}

// WriteDatagrams records each datagram as the frame that leaves (the UDP
// endpoint's addresses and MACs, the IPv4 ID the sender chose) and writes
// them to the wrapped endpoint, recording before writing as Write does.
func (x *captureFast) WriteDatagrams(d []OutDatagram) (int, error) {
	if len(d) > 0 {
		c := x.c
		ts := c.clock.Now()
		df, _ := c.ep.(datagramFramer)
		c.txMu.Lock()
		for i := range d {
			if df != nil {
				c.tx = df.appendOutDatagramFrame(c.tx[:0], &d[i])
			} else {
				c.tx = appendOutDatagramFrame(c.tx[:0], [6]byte{}, [6]byte{}, d[i].Src, &d[i])
			}
			_ = c.w.WriteFrame(ts, c.tx)
		}
		c.txMu.Unlock()
	}
	return x.dw.WriteDatagrams(d)
}

// IPv4Run passes on the wrapped endpoint's.
func (x *captureFast) IPv4Run() (datagrams, bytes int) { return x.dw.IPv4Run() }

// appendOutDatagramFrame appends to b the Ethernet, IP and UDP frame that
// carries d from src (the unspecified address of d.Dst's family if src is
// not valid): IPv4 with d.IPv4ID and DF, UDP checksum 0, flow label 0.
func appendOutDatagramFrame(b []byte, dstMAC, srcMAC [6]byte, src netip.Addr, d *OutDatagram) []byte {
	plen := 0
	for _, p := range d.Payload {
		plen += len(p)
	}
	// An invalid src is written as zeros: the unspecified address.
	return appendUDPFrame(b, dstMAC, srcMAC, d.Dst.Addr().Unmap().Is4(), &header.IPUDPFields{
		Src: netip.AddrPortFrom(src, d.SrcPort), Dst: d.Dst, TOS: d.TOS, TTL: d.TTL, IPv4ID: d.IPv4ID, PayloadLen: plen,
	}, d.Payload...)
}

// Read reads from the wrapped endpoint and records the frames read.
func (c *Capture) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	n, err := c.ep.Read(bufs, sizes, offset)
	c.record(bufs[:n], sizes[:n], offset)
	return n, err
}

// TryRead reads from the wrapped endpoint without blocking and records the
// frames read; it returns ErrNotPollable if the wrapped endpoint is not a
// Poller.
func (c *Capture) TryRead(bufs [][]byte, sizes []int, offset int) (int, error) {
	p, ok := c.ep.(Poller)
	if !ok {
		return 0, ErrNotPollable
	}
	n, err := p.TryRead(bufs, sizes, offset)
	c.record(bufs[:n], sizes[:n], offset)
	return n, err
}

// Write writes the frames to the wrapped endpoint and records the ones it
// consumed, timestamped when Write was called. What is recorded is exactly
// bufs[i][offset:], which the Endpoint contract forbids Write to modify.
func (c *Capture) Write(bufs [][]byte, offset int) (int, error) {
	if len(bufs) == 0 {
		return c.ep.Write(bufs, offset)
	}
	// Recorded before they are written, as the sender made them.
	ts := c.clock.Now()
	valid := len(bufs)
	for i, b := range bufs {
		if offset < 0 || offset > len(b) {
			valid = i
			break
		}
	}
	c.recordAt(ts, bufs[:valid], nil, offset)
	return c.ep.Write(bufs, offset)
}

// record records received frames: bufs[i][offset:offset+sizes[i]] (all of
// bufs[i][offset:] if sizes is nil).
func (c *Capture) record(bufs [][]byte, sizes []int, offset int) {
	if len(bufs) == 0 {
		return
	}
	ts := c.clock.Now()
	if c.received == nil {
		c.recordAt(ts, bufs, sizes, offset)
		return
	}
	for i, f := range bufs {
		if offset > len(f) {
			continue
		}
		f = f[offset:]
		if sizes != nil && sizes[i] <= len(f) {
			f = f[:sizes[i]]
		}
		_ = c.w.WriteFrame(ts, c.received(f))
	}
}

func (c *Capture) recordAt(ts time.Time, bufs [][]byte, sizes []int, offset int) {
	// The error is sticky inside the CaptureWriter and reported by Flush.
	_ = c.w.WriteFrames(ts, bufs, sizes, offset)
}

// IPv4IDZero passes on the wrapped endpoint's IPv4IDPolicy (false without one).
func (c *Capture) IPv4IDZero() bool {
	p, ok := c.ep.(IPv4IDPolicy)
	return ok && p.IPv4IDZero()
}

// UnknownIPv4ID passes on the wrapped endpoint's IPv4IDPolicy (false without one).
func (c *Capture) UnknownIPv4ID() bool {
	p, ok := c.ep.(IPv4IDPolicy)
	return ok && p.UnknownIPv4ID()
}

// BatchSize returns the wrapped endpoint's batch size.
func (c *Capture) BatchSize() int { return c.ep.BatchSize() }

// MTU returns the wrapped endpoint's MTU.
func (c *Capture) MTU() int { return c.ep.MTU() }

// Flush writes buffered capture data out and returns the first capture
// error, if any.
func (c *Capture) Flush() error { return c.w.Flush() }

// Close closes the wrapped endpoint and flushes the capture; it does not
// close the capture's io.Writer.
func (c *Capture) Close() error {
	err := c.ep.Close()
	if ferr := c.w.Flush(); err == nil {
		err = ferr
	}
	return err
}

// Writer returns the CaptureWriter the capture records into.
func (c *Capture) Writer() *CaptureWriter { return c.w }

// Unwrap returns the wrapped endpoint.
func (c *Capture) Unwrap() Endpoint { return c.ep }

var (
	_ CaptureEndpoint = (*Capture)(nil)
	_ DatagramReader  = (*captureFast)(nil)
	_ ReadLender      = (*captureFast)(nil)
	_ FrameReader     = (*captureFast)(nil)
	_ VectorWriter    = (*captureFast)(nil)
	_ DatagramWriter  = (*captureFast)(nil)
)
