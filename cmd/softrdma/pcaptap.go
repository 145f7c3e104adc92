package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/softrdma/softrdma/netio"
	"github.com/softrdma/softrdma/roce"
)

// pcapTap is the --pcap file of a command that records several things into one
// file: frames written to it directly (WriteFrame), and what captures that write
// pcap streams of their own record (a device's roce.OpenConfig.Capture, a
// tcpPcap of iWARP connections), merged record by record through Source. The
// file is classic pcap with nanosecond timestamps, LINKTYPE_ETHERNET, as
// netio.CaptureWriter writes; each frame is cut to the snap length, its length
// on the wire kept. It is safe for concurrent use.
type pcapTap struct {
	mu      sync.Mutex
	buf     *bufio.Writer
	w       *pcapgo.Writer
	snaplen int
	err     error // first write error, sticky
	frames  uint64
}

// newPcapTap writes the file header to w; snaplen 0 keeps whole frames
// (netio.CaptureSnapLen).
func newPcapTap(w io.Writer, snaplen int) (*pcapTap, error) {
	if snaplen <= 0 || snaplen > netio.CaptureSnapLen {
		snaplen = netio.CaptureSnapLen
	}
	t := &pcapTap{buf: bufio.NewWriterSize(w, 1<<16), snaplen: snaplen}
	t.w = pcapgo.NewWriterNanos(t.buf)
	if err := t.w.WriteFileHeader(uint32(snaplen), layers.LinkTypeEthernet); err != nil {
		return nil, fmt.Errorf("pcap: %w", err)
	}
	return t, nil
}

// WriteFrame records frame, seen at ts.
func (t *pcapTap) WriteFrame(ts time.Time, frame []byte) error {
	return t.write(ts, frame, len(frame))
}

// write records frame (of wireLen bytes on the wire) cut to the snap length.
func (t *pcapTap) write(ts time.Time, frame []byte, wireLen int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return t.err
	}
	if ts.IsZero() {
		ts = time.Unix(0, 0) // as netio.CaptureWriter: pcapgo would put the wall clock
	}
	data := frame[:min(len(frame), t.snaplen)]
	ci := gopacket.CaptureInfo{Timestamp: ts, CaptureLength: len(data), Length: max(wireLen, len(frame))}
	if err := t.w.WritePacket(ci, data); err != nil {
		t.err = fmt.Errorf("pcap: %w", err)
		return t.err
	}
	t.frames++
	return nil
}

// Frames returns the number of frames recorded so far.
func (t *pcapTap) Frames() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.frames
}

// fail keeps err as the tap's error if it has none (a source's, say).
func (t *pcapTap) fail(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		t.err = fmt.Errorf("pcap: %w", err)
	}
}

// Flush writes out what is buffered and returns the first error of any write.
func (t *pcapTap) Flush() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		if err := t.buf.Flush(); err != nil {
			t.err = fmt.Errorf("pcap: %w", err)
		}
	}
	return t.err
}

// Source returns a writer for a classic pcap stream (Ethernet) whose records go
// into the tap; with restoreIDs, the stream is a UDP endpoint's, whose received
// frames carry IPv4 ID 0 for the ID the socket hid, which is recovered as
// ppCapture does (pcapIPv4IDRestorer). Close it once its capture is flushed: it
// waits for the last record to be in the tap. A stream that cannot be read is
// the tap's error (Flush returns it); one that never began (its capture was
// never made) is none.
func (t *pcapTap) Source(restoreIDs bool) *pcapTapSource {
	pr, pw := io.Pipe()
	s := &pcapTapSource{pw: pw, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer io.Copy(io.Discard, pr) // never leave the capture blocked on the pipe
		r, err := pcapgo.NewReader(pr)
		if errors.Is(err, io.EOF) {
			return
		}
		if err == nil && r.LinkType() != layers.LinkTypeEthernet {
			err = fmt.Errorf("link type %v, want Ethernet", r.LinkType())
		}
		if err != nil {
			s.err = err
			t.fail(err)
			return
		}
		var ids pcapIPv4IDRestorer
		for {
			data, ci, err := r.ZeroCopyReadPacketData()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					s.err = err
					t.fail(err)
				}
				return
			}
			if restoreIDs && ci.CaptureLength == ci.Length {
				data = ids.restore(data)
			}
			if err := t.write(ci.Timestamp, data, ci.Length); err != nil {
				s.err = err
				return
			}
		}
	}()
	return s
}

// pcapTapSource is the writer end of a pcapTap.Source.
type pcapTapSource struct {
	pw   *io.PipeWriter
	done chan struct{}
	err  error // set by the reading goroutine before done closes
	once sync.Once
}

// Write takes the stream's next bytes.
func (s *pcapTapSource) Write(b []byte) (int, error) { return s.pw.Write(b) }

// Close ends the stream and waits until all of it is in the tap; it returns the
// first error of reading it.
func (s *pcapTapSource) Close() error {
	s.once.Do(func() { s.pw.Close() })
	<-s.done
	if s.err != nil {
		return fmt.Errorf("pcap: %w", s.err)
	}
	return nil
}

// pcapIPv4IDRestorer puts back the IPv4 Identification that a UDP socket hides
// (netio.IPv4IDPolicy.UnknownIPv4ID: the endpoint writes 0) into a RoCEv2
// frame, recovered from the ICRC (roce.RecoverIPv4ID) as the device recovers it,
// with the header checksum redone: the frame as it was on the wire, whose ICRC
// verifies in the capture. A frame whose ICRC matches no ID (corrupted, as the
// conformance tests send them) is recorded as it came.
type pcapIPv4IDRestorer struct {
	scratch []byte
	frame   roce.Frame
}

// restore returns b, or the restored frame in the restorer's buffer (valid
// until the next call).
func (r *pcapIPv4IDRestorer) restore(b []byte) []byte {
	f := &r.frame
	if f.DecodeEthernet(b) != nil || f.IPv6 || f.Version != roce.RoCEv2 || binary.BigEndian.Uint16(f.IP[4:]) != 0 {
		return b
	}
	id, ok := roce.RecoverIPv4ID(f) // only reads b (the ID is 0 already)
	if !ok || id == 0 {
		return b
	}
	if cap(r.scratch) < len(b) {
		r.scratch = make([]byte, len(b), max(len(b), 2048))
	}
	s := r.scratch[:len(b)]
	copy(s, b)
	ip := s[len(f.Ethernet) : len(f.Ethernet)+len(f.IP)]
	binary.BigEndian.PutUint16(ip[4:], id)
	binary.BigEndian.PutUint16(ip[10:], 0)
	binary.BigEndian.PutUint16(ip[10:], ppIPv4Checksum(ip[:4*int(ip[0]&0x0f)]))
	return s
}
