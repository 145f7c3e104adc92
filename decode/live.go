package decode

import (
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"time"

	"github.com/google/gopacket"
)

// Live capture (softrdma decode -i IFACE): the frames of an interface, read
// as they pass (netio.LiveCapture), go through the same decoder as a file's,
// so the output is the same as decoding a capture of those frames. The run
// ends after Count frames, after Duration, or when its context ends (Ctrl-C);
// the frames the socket already holds then are decoded first.

// FrameReader is a live source of Ethernet frames (netio.LiveCapture).
type FrameReader interface {
	// ReadFrame waits for the next frame (valid until the next call), and
	// returns its receive time and its length on the wire; after the read
	// deadline an error that is os.ErrDeadlineExceeded.
	ReadFrame() (frame []byte, ts time.Time, length int, err error)
	// TryReadFrame returns a frame already there, if any, without waiting.
	TryReadFrame() (frame []byte, ts time.Time, length int, ok bool, err error)
	// SetReadDeadline bounds ReadFrame's wait.
	SetReadDeadline(t time.Time) error
}

// LiveOptions bound a live capture: at most Count frames (0: no limit), for
// at most Duration (0: no limit).
type LiveOptions struct {
	Count    int
	Duration time.Duration
}

// liveSource is a frameSource over a FrameReader.
type liveSource struct {
	fr       FrameReader
	o        LiveOptions
	n        int
	draining bool

	mu      sync.Mutex
	stopped bool // the context ended or the duration is over
}

// stop makes the next reads drain what the socket holds, then end.
func (s *liveSource) stop() {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	s.fr.SetReadDeadline(time.Now())
}

func (s *liveSource) isStopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

func (s *liveSource) next() (data []byte, ci gopacket.CaptureInfo, link linkType, err error) {
	if s.o.Count > 0 && s.n >= s.o.Count {
		return nil, ci, linkEthernet, io.EOF
	}
	var ts time.Time
	var length int
	for !s.draining {
		data, ts, length, err = s.fr.ReadFrame()
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) || !s.isStopped() {
			return nil, ci, linkEthernet, err
		}
		s.draining = true
	}
	if s.draining {
		var ok bool
		if data, ts, length, ok, err = s.fr.TryReadFrame(); err != nil || !ok {
			if err == nil {
				err = io.EOF
			}
			return nil, ci, linkEthernet, err
		}
	}
	s.n++
	ci = gopacket.CaptureInfo{Timestamp: ts, CaptureLength: len(data), Length: length}
	return data, ci, linkEthernet, nil
}

func (s *liveSource) format() string { return "live" }

// RunLive decodes the frames fr reads, as Run decodes a capture's, until
// lo's bound or ctx ends. --flow and --qp match each packet as it passes
// (live_filter.go); a flow number, given when a capture ends, cannot be used.
func RunLive(ctx context.Context, fr FrameReader, w io.Writer, opts Options, lo LiveOptions) (Result, error) {
	if f := opts.Filter; f != nil {
		if err := f.Check(); err != nil {
			return Result{}, err
		}
		if err := f.checkLive(); err != nil {
			return Result{}, err
		}
	}
	src := &liveSource{fr: fr, o: lo}
	done := make(chan struct{})
	defer close(done)
	var timeout <-chan time.Time
	if lo.Duration > 0 {
		t := time.NewTimer(lo.Duration)
		defer t.Stop()
		timeout = t.C
	}
	go func() {
		select {
		case <-ctx.Done():
		case <-timeout:
		case <-done:
			return
		}
		src.stop()
	}()
	d := newDecoder(w, opts)
	d.live = true
	d.run(src)
	return d.res, d.out.err
}
