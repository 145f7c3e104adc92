package sim

import (
	"io"

	"github.com/softrdma/softrdma/netio"
)

// CapturePoint says where on a link a capture taps.
type CapturePoint int

const (
	// CaptureDelivered records frames as the far end receives them, at the
	// delivery time: corrupted, duplicated and reordered as delivered, lost
	// ones absent. This is what a capture on the receiving host shows.
	CaptureDelivered CapturePoint = iota
	// CaptureTransmitted records frames as they are put on the wire, at the
	// time they were handed to the link, before loss, corruption and delay.
	// Frames refused at the entrance (down, DropFunc, MTU, queue) are absent.
	CaptureTransmitted
)

type linkCapture struct {
	w     *netio.CaptureWriter
	point CapturePoint
}

// CaptureLink records every frame delivered over l, in both directions, to
// w as a classic pcap file with virtual nanosecond timestamps. The caller
// flushes the returned writer (or calls FlushCaptures) before closing w.
func (n *Network) CaptureLink(l *Link, w io.Writer) (*netio.CaptureWriter, error) {
	return n.CaptureLinkAt(l, w, netio.FormatPcap, CaptureDelivered)
}

// CaptureLinkAt is CaptureLink with a choice of file format and tap point.
func (n *Network) CaptureLinkAt(l *Link, w io.Writer, format netio.CaptureFormat, point CapturePoint) (*netio.CaptureWriter, error) {
	cw, err := netio.NewCaptureWriter(w, format)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	l.captures = append(l.captures, linkCapture{w: cw, point: point})
	return cw, nil
}

// FlushCaptures flushes every link capture and returns the first error.
func (n *Network) FlushCaptures() error {
	n.mu.Lock()
	var ws []*netio.CaptureWriter
	for _, l := range n.links {
		for _, c := range l.captures {
			ws = append(ws, c.w)
		}
	}
	n.mu.Unlock()
	var first error
	for _, w := range ws {
		if err := w.Flush(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// captureLocked records frame at virtual time at on every capture of l that
// taps point. Capture errors are sticky in the writer and surface at Flush.
func (l *Link) captureLocked(point CapturePoint, at int64, frame []byte) {
	for _, c := range l.captures {
		if c.point == point {
			_ = c.w.WriteFrame(l.n.timeOf(at), frame)
		}
	}
}
