package decode

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/softrdma/softrdma/netio"
)

// commandLive is softrdma decode -i IFACE: the interface's frames decoded as
// they pass, printed as a capture file's would be, until -c frames, the
// --duration or Ctrl-C; then the summary, the --html report, and the exit
// status as for a file. --annotate needs a capture to write back: refused;
// --flow and --qp match each packet as it passes (a flow number is refused,
// RunLive). With -w FILE every frame read is also written to FILE, filtered
// or not, as tcpdump -w writes it (pcapng for a name ending in .pcapng).
func commandLive(o CommandOptions, filter *Filter, stdout, stderr io.Writer) int {
	if o.Annotate != "" {
		fmt.Fprintln(stderr, "softrdma decode: --annotate writes a capture file back: with -i, capture with tcpdump -w first")
		return 2
	}
	if o.Count < 0 || o.Duration < 0 {
		fmt.Fprintf(stderr, "softrdma decode: -c %d --duration %v: want 0 (no limit) or more\n", o.Count, o.Duration)
		return 2
	}
	lc, err := netio.OpenLiveCapture(o.Interface)
	if err != nil {
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) {
			err = fmt.Errorf("%w (a live capture needs root or CAP_NET_RAW)", err)
		}
		fmt.Fprintf(stderr, "softrdma decode: -i %s: %v\n", o.Interface, err)
		return 2
	}
	defer lc.Close()
	var fr FrameReader = lc
	var saved *savingReader
	if o.Write != "" {
		if saved, err = newSavingReader(lc, o.Write); err != nil {
			fmt.Fprintf(stderr, "softrdma decode: -w %s: %v\n", o.Write, err)
			return 2
		}
		fr = saved
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := Options{JSON: o.JSON, Flows: o.Flows, Summary: !o.NoSummary, Filter: filter, Report: o.HTML != ""}
	// Each packet's line as it comes: flushed at each frame would cost a
	// write per frame, which a terminal watcher wants and a pipe does not
	// mind at these rates.
	out := &lineFlusher{w: bufio.NewWriter(stdout)}
	res, err := RunLive(ctx, fr, out, opts, LiveOptions{Count: o.Count, Duration: o.Duration})
	if ferr := out.w.Flush(); err == nil && ferr != nil {
		err = ferr
	}
	name := "-i " + o.Interface
	if err != nil {
		if saved != nil {
			saved.close()
		}
		fmt.Fprintf(stderr, "softrdma decode: %s: %v\n", name, err)
		return 2
	}
	if saved != nil {
		if err := saved.close(); err != nil {
			fmt.Fprintf(stderr, "softrdma decode: -w %s: %v\n", o.Write, err)
			return 2
		}
	}
	if o.HTML != "" {
		if err := writeHTMLReport(o.HTML, &res, name); err != nil {
			fmt.Fprintf(stderr, "softrdma decode: --html %s: %v\n", o.HTML, err)
			return 2
		}
	}
	for _, e := range res.Errors {
		fmt.Fprintf(stderr, "softrdma decode: %s: %v\n", name, e)
	}
	return res.ExitCode()
}

// lineFlusher writes through a buffer and flushes at the end of each write
// that ends a line, so that a live capture's packets show as they pass.
type lineFlusher struct{ w *bufio.Writer }

func (l *lineFlusher) Write(b []byte) (int, error) {
	n, err := l.w.Write(b)
	if err == nil && len(b) > 0 && b[len(b)-1] == '\n' {
		err = l.w.Flush()
	}
	return n, err
}

// savingReader is a FrameReader that writes every frame it reads to a
// capture file (decode -i IFACE -w FILE).
type savingReader struct {
	FrameReader
	f *os.File
	w *netio.CaptureWriter
}

func newSavingReader(fr FrameReader, path string) (*savingReader, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	w, err := netio.NewCaptureWriter(f, netio.FormatForPath(path))
	if err != nil {
		f.Close()
		return nil, err
	}
	return &savingReader{FrameReader: fr, f: f, w: w}, nil
}

func (s *savingReader) ReadFrame() ([]byte, time.Time, int, error) {
	frame, ts, length, err := s.FrameReader.ReadFrame()
	if err == nil {
		err = s.save(frame, ts, length)
	}
	return frame, ts, length, err
}

func (s *savingReader) TryReadFrame() ([]byte, time.Time, int, bool, error) {
	frame, ts, length, ok, err := s.FrameReader.TryReadFrame()
	if err == nil && ok {
		err = s.save(frame, ts, length)
	}
	return frame, ts, length, ok, err
}

// save writes a frame; a write error ends the capture (RunLive returns it).
func (s *savingReader) save(frame []byte, ts time.Time, length int) error {
	if err := s.w.WriteFrameLen(ts, frame, length); err != nil {
		return fmt.Errorf("-w: %w", err)
	}
	return nil
}

// close flushes the file and closes it.
func (s *savingReader) close() error {
	err := s.w.Flush()
	if cerr := s.f.Close(); err == nil {
		err = cerr
	}
	return err
}
