package netio

import (
	"bufio"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
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

// CaptureWriter writes Ethernet frames with timestamps to a pcap or pcapng
// stream. It is safe for concurrent use. Output is buffered: call Flush (or
// Close) before closing the underlying writer.
type CaptureWriter struct {
	mu      sync.Mutex
	buf     *bufio.Writer // the pcap path's buffer; nil for pcapng (NgWriter buffers itself)
	pcap    *pcapgo.Writer
	ng      *pcapgo.NgWriter
	snaplen int
	err     error // first write error, sticky
	frames  uint64
}

// NewCaptureWriter writes the file header for format to w and returns a
// writer for frames.
func NewCaptureWriter(w io.Writer, format CaptureFormat) (*CaptureWriter, error) {
	return NewCaptureWriterSnapLen(w, format, CaptureSnapLen)
}

// NewCaptureWriterSnapLen is NewCaptureWriter recording at most snaplen bytes
// of each frame (0, or more than CaptureSnapLen: CaptureSnapLen), as
// tcpdump -s does: the headers of a long run without its payloads.
func NewCaptureWriterSnapLen(w io.Writer, format CaptureFormat, snaplen int) (*CaptureWriter, error) {
	if snaplen <= 0 || snaplen > CaptureSnapLen {
		snaplen = CaptureSnapLen
	}
	c := &CaptureWriter{snaplen: snaplen}
	switch format {
	case FormatPcap:
		c.buf = bufio.NewWriter(w)
		c.pcap = pcapgo.NewWriterNanos(c.buf)
		if err := c.pcap.WriteFileHeader(uint32(snaplen), layers.LinkTypeEthernet); err != nil {
			return nil, fmt.Errorf("netio: capture: writing pcap header: %w", err)
		}
	case FormatPcapNG:
		intf := pcapgo.DefaultNgInterface
		intf.Name = "softrdma"
		intf.LinkType = layers.LinkTypeEthernet
		intf.SnapLength = uint32(snaplen)
		opts := pcapgo.DefaultNgWriterOptions
		opts.SectionInfo.Application = "softrdma"
		ng, err := pcapgo.NewNgWriterInterface(w, intf, opts)
		if err != nil {
			return nil, fmt.Errorf("netio: capture: writing pcapng header: %w", err)
		}
		c.ng = ng
	default:
		return nil, fmt.Errorf("netio: capture: unknown format %d", int(format))
	}
	return c, nil
}

// WriteFrame records frame with timestamp ts. A zero ts is written as the
// Unix epoch (pcapgo would otherwise substitute the wall clock, which would
// make simulated captures irreproducible). After a write error every later
// call returns that error.
func (c *CaptureWriter) WriteFrame(ts time.Time, frame []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writeLocked(ts, frame, len(frame))
}

// WriteFrameLen is WriteFrame for a frame that was wireLen bytes on the wire,
// of which frame holds the first (a record of another capture, already cut).
func (c *CaptureWriter) WriteFrameLen(ts time.Time, frame []byte, wireLen int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writeLocked(ts, frame, max(wireLen, len(frame)))
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
		if err := c.writeLocked(ts, f, len(f)); err != nil {
			return err
		}
	}
	return nil
}

func (c *CaptureWriter) writeLocked(ts time.Time, frame []byte, wireLen int) error {
	if c.err != nil {
		return c.err
	}
	if ts.IsZero() {
		ts = time.Unix(0, 0)
	}
	data := frame[:min(len(frame), c.snaplen)]
	ci := gopacket.CaptureInfo{Timestamp: ts, CaptureLength: len(data), Length: wireLen}
	var err error
	if c.pcap != nil {
		err = c.pcap.WritePacket(ci, data)
	} else {
		err = c.ng.WritePacket(ci, data)
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
	var err error
	if c.buf != nil {
		err = c.buf.Flush()
	} else {
		err = c.ng.Flush()
	}
	if err != nil {
		c.err = fmt.Errorf("netio: capture: flush: %w", err)
	}
	return c.err
}

// Capture is an Endpoint that records every frame read from or written to
// the wrapped endpoint in a capture file, timestamped by a Clock. Read and
// Write may run concurrently. Failures to write the capture never disturb
// the traffic: the first one is kept and returned by Flush and Close.
type Capture struct {
	ep    Endpoint
	clock Clock
	w     *CaptureWriter
}

// NewCapture wraps ep so that every frame it reads or writes is written to w
// in the given format with timestamps from clock (SystemClock if nil).
func NewCapture(ep Endpoint, w io.Writer, format CaptureFormat, clock Clock) (*Capture, error) {
	cw, err := NewCaptureWriter(w, format)
	if err != nil {
		return nil, err
	}
	if clock == nil {
		clock = SystemClock{}
	}
	return &Capture{ep: ep, clock: clock, w: cw}, nil
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
	// Recorded before they are written: an endpoint may change what it
	// sends (a UDP endpoint's IPv4GSO hook changes the ICRC of GSO segments
	// for the IDs the kernel gives them, which the capture cannot show).
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

func (c *Capture) record(bufs [][]byte, sizes []int, offset int) {
	if len(bufs) == 0 {
		return
	}
	c.recordAt(c.clock.Now(), bufs, sizes, offset)
}

func (c *Capture) recordAt(ts time.Time, bufs [][]byte, sizes []int, offset int) {
	// The error is sticky inside the CaptureWriter and reported by Flush.
	_ = c.w.WriteFrames(ts, bufs, sizes, offset)
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
	_ Endpoint = (*Capture)(nil)
	_ Poller   = (*Capture)(nil)
)
