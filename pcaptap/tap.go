// Package pcaptap writes the --pcap file of a softrdma command: a pcap, or a
// pcapng for a FILE.pcapng (netio.FormatForPath), into which several captures merge (Tap: a device's own capture stream
// through Source, frames written directly), the IPv4 Identification a UDP
// socket hides put back into received RoCEv2 frames (IPv4IDRestorer), and the
// octets of iWARP connections as synthesised TCP segments (TCP).
package pcaptap

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/softrdma/softrdma/header"
	"github.com/softrdma/softrdma/netio"
	"github.com/softrdma/softrdma/roce"
)

// Tap is the --pcap file of a command that records several things into one
// file: frames written to it directly (WriteFrame), the frames of RoCE
// devices (Record) and the octets of iWARP connections (TCP), each written
// into the file's one netio.CaptureWriter as it is seen. The
// file is a netio.CaptureWriter's pcap or pcapng, each frame cut to the snap
// length, its length on the wire kept. It is safe for concurrent use.
type Tap struct {
	w *netio.CaptureWriter

	mu     sync.Mutex
	srcErr error // the first Source's stream that could not be read
}

// New writes the file header of format to w (netio.FormatForPath gives the
// format a --pcap FILE asks for: pcapng for FILE.pcapng); snaplen 0 keeps
// whole frames (netio.CaptureSnapLen).
func New(w io.Writer, format netio.CaptureFormat, snaplen int) (*Tap, error) {
	cw, err := netio.NewCaptureWriterSnapLen(w, format, snaplen)
	if err != nil {
		return nil, err
	}
	return &Tap{w: cw}, nil
}

// WriteFrame records frame, seen at ts.
func (t *Tap) WriteFrame(ts time.Time, frame []byte) error { return t.w.WriteFrame(ts, frame) }

// Frames returns the number of frames recorded so far.
func (t *Tap) Frames() uint64 { return t.w.Frames() }

// SnapLen returns the snap length frames are cut to.
func (t *Tap) SnapLen() int { return t.w.SnapLen() }

// Fail keeps err, a source's, as the tap's error if it has none: Flush
// returns it.
func (t *Tap) Fail(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.srcErr == nil {
		t.srcErr = fmt.Errorf("pcap: %w", err)
	}
}

// Flush writes out what is buffered and returns the first error of a source or
// of any write.
func (t *Tap) Flush() error {
	err := t.w.Flush()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.srcErr != nil {
		return t.srcErr
	}
	return err
}

// Record makes the device oc opens record its frames straight into the tap
// (roce.OpenConfig.CaptureWriter: no stream of its own to parse back); with
// restoreIDs the device is a UDP endpoint's, whose received frames carry IPv4
// ID 0 for the ID the socket hid, which is recovered (IPv4IDRestorer). The
// device's Close flushes what it recorded.
func (t *Tap) Record(oc *roce.OpenConfig, restoreIDs bool) {
	oc.CaptureWriter, oc.CaptureReceived = t.w, nil
	if restoreIDs {
		oc.CaptureReceived = new(IPv4IDRestorer).Restore
	}
}

// TCP returns a writer of iWARP connections' octets as synthesised TCP
// segments (see TCP) into the tap.
func (t *Tap) TCP() *TCP { return newTCP(t.w, false) }

// IPv4IDRestorer puts back the IPv4 Identification that a UDP socket hides
// (netio.IPv4IDPolicy.UnknownIPv4ID: the endpoint writes 0) into a RoCEv2
// frame, recovered from the ICRC (roce.RecoverIPv4ID) as the device recovers it,
// with the header checksum redone: the frame as it was on the wire, whose ICRC
// verifies in the capture. A frame whose ICRC matches no ID (corrupted, as the
// conformance tests send them) is recorded as it came.
type IPv4IDRestorer struct {
	scratch []byte
	frame   roce.Frame
}

// Restore returns b, or the restored frame in the restorer's buffer (valid
// until the next call).
func (r *IPv4IDRestorer) Restore(b []byte) []byte {
	f := &r.frame
	if f.DecodeEthernet(b) != nil || f.IPv6 || f.Version != roce.RoCEv2 || header.IPv4(f.IP).ID() != 0 {
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
	ip := header.IPv4(s[len(f.Ethernet) : len(f.Ethernet)+len(f.IP)])
	ip.SetID(id)
	ip.SetChecksum(ip.CalculateChecksum())
	return s
}
