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

	"github.com/softrdma/softrdma/netio"
)

// commandLive is softrdma decode -i IFACE: the interface's frames decoded as
// they pass, printed as a capture file's would be, until -c frames, the
// --duration or Ctrl-C; then the summary, the --html report, and the exit
// status as for a file. --annotate needs a capture to write back, and
// --flow/--qp a file to number the flows over: both are refused.
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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := Options{JSON: o.JSON, Flows: o.Flows, Summary: !o.NoSummary, Filter: filter, Report: o.HTML != ""}
	// Each packet's line as it comes: flushed at each frame would cost a
	// write per frame, which a terminal watcher wants and a pipe does not
	// mind at these rates.
	out := &lineFlusher{w: bufio.NewWriter(stdout)}
	res, err := RunLive(ctx, lc, out, opts, LiveOptions{Count: o.Count, Duration: o.Duration})
	if ferr := out.w.Flush(); err == nil && ferr != nil {
		err = ferr
	}
	name := "-i " + o.Interface
	if err != nil {
		fmt.Fprintf(stderr, "softrdma decode: %s: %v\n", name, err)
		return 2
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
