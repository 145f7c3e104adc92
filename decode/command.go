package decode

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/softrdma/softrdma/progress"
)

// CommandOptions are the flags of softrdma decode (the command's flag set fills
// them).
type CommandOptions struct {
	JSON      bool     // --json
	Flows     bool     // --flows
	NoSummary bool     // --no-summary
	Flow      []string // --flow N|ADDR|ADDR:PORT (repeatable)
	QP        []string // --qp N (repeatable)
	Opcode    []string // --opcode NAME (repeatable)
	Time      string   // --time START:END
	TimeSet   bool     // --time given (an empty range is still a filter)
	HTML      string   // --html FILE
	Annotate  string   // --annotate FILE
	// Interface is -i: capture live from this interface instead of reading
	// a file, for at most Count frames (-c) and Duration (--duration).
	Interface string
	Count     int
	Duration  time.Duration
	// Write is -w: with -i, every frame read is also written to this file
	// (as tcpdump -w; pcapng if its name ends in .pcapng, else pcap).
	Write string
}

// Command is softrdma decode after its flags: it decodes the capture name
// (stdin for "-"), prints the packets and summary to stdout, writes the --html
// report and the --annotate copy, names each bad frame on stderr and returns the
// exit status: 0 every RDMA frame well formed, 1 some frame bad, 2 not a capture
// or cannot be read or written.
func Command(name string, stdin io.Reader, o CommandOptions, stdout, stderr io.Writer) int {
	filter, err := commandFilter(o.Flow, o.QP, o.Opcode, o.Time, o.TimeSet)
	if err != nil {
		fmt.Fprintf(stderr, "softrdma decode: %v\n", err)
		return 2
	}
	if o.Interface != "" {
		return commandLive(o, filter, stdout, stderr) // command_live.go
	}
	in, closeIn, err := openInput(name, stdin)
	if err != nil {
		fmt.Fprintf(stderr, "softrdma decode: %v\n", err)
		return 2
	}
	defer closeIn()
	if name == "-" {
		name = "standard input"
	}
	opts := Options{JSON: o.JSON, Flows: o.Flows, Summary: !o.NoSummary, Verdicts: o.Annotate != "", Filter: filter, Report: o.HTML != ""}
	// The annotated copy reads the capture a second time: a file from its start, standard
	// input from memory.
	var again io.ReadSeeker
	if o.Annotate != "" {
		if again, err = rereadable(in); err != nil {
			fmt.Fprintf(stderr, "softrdma decode: %s: %v\n", name, err)
			return 2
		}
		in = again
	}
	out := bufio.NewWriterSize(stdout, 64<<10)
	// On a terminal, how much of the capture has been read; piped, nothing.
	meter := progress.New(stderr)
	src := in
	if meter.Active() {
		var size int64
		if f, ok := in.(*os.File); ok {
			if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
				size = st.Size()
			}
		}
		src = progress.NewReader(in, meter, "softrdma decode: "+name, size)
	}
	if isStream(in) {
		// tcpdump -U -w - | softrdma decode -: each packet's line shows as the
		// stream brings it, not at the end of the stream (64 KiB later, or
		// never if the pipeline is interrupted).
		src = &flushBeforeRead{r: src, w: out}
		defer outlastInterrupt()()
	}
	res, err := Run(src, out, opts)
	meter.Done()
	if ferr := out.Flush(); err == nil && ferr != nil {
		err = ferr
	}
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
	if o.Annotate != "" {
		if err := writeAnnotated(o.Annotate, again, &res); err != nil {
			fmt.Fprintf(stderr, "softrdma decode: --annotate %s: %v\n", o.Annotate, err)
			return 2
		}
	}
	for _, e := range res.Errors {
		fmt.Fprintf(stderr, "softrdma decode: %s: %v\n", name, e)
	}
	return res.ExitCode()
}

// openInput opens the capture named on the command line: stdin for "-",
// else the file, which must not be a directory (reading one fails with EISDIR only at
// the first read, which the decoder would otherwise report as a file with no bytes).
func openInput(name string, stdin io.Reader) (r io.Reader, closeFn func(), err error) {
	if name == "-" {
		return stdin, func() {}, nil
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, nil, err
	}
	if st, err := f.Stat(); err == nil && st.IsDir() {
		f.Close()
		return nil, nil, fmt.Errorf("%s: is a directory, not a capture file", name)
	}
	return f, func() { f.Close() }, nil
}

// rereadable returns in as a reader that can go back to its start: a regular file as it
// is, anything else (standard input, a pipe) read into memory.
func rereadable(in io.Reader) (io.ReadSeeker, error) {
	if f, ok := in.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
			return f, nil
		}
	}
	b, err := io.ReadAll(in)
	if err != nil {
		return nil, err
	}
	return bytes.NewReader(b), nil
}

// writeAnnotated writes the capture in (read again from its start) with res's verdicts
// to the pcapng file name.
func writeAnnotated(name string, in io.ReadSeeker, res *Result) error {
	if _, err := in.Seek(0, io.SeekStart); err != nil {
		return err
	}
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 256<<10)
	err = Annotate(in, w, res)
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// commandFilter makes the decoder's filter from the flags, nil if none is given.
func commandFilter(flows, qps, opcodes []string, timeRange string, timeSet bool) (*Filter, error) {
	var f Filter
	if timeSet {
		var err error
		if f, err = ParseTimeRange(timeRange); err != nil {
			return nil, fmt.Errorf("--time: %v", err)
		}
	}
	f.Flows, f.Opcodes = flows, opcodes
	for _, q := range qps {
		n, err := ParseQP(q)
		if err != nil {
			return nil, fmt.Errorf("--qp: %v", err)
		}
		f.QPs = append(f.QPs, n)
	}
	if err := f.Check(); err != nil {
		return nil, fmt.Errorf("--flow/--opcode: %v", err)
	}
	if len(f.Flows) == 0 && len(f.QPs) == 0 && len(f.Opcodes) == 0 && !timeSet {
		return nil, nil
	}
	return &f, nil
}

// writeHTMLReport writes decode's HTML report of res to the file name.
func writeHTMLReport(name string, res *Result, capture string) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	err = WriteHTML(f, res, capture)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// isStream reports whether in is a stream whose next bytes may be a while
// coming (a pipe, a terminal, a socket), not a regular file or a reader that
// can seek (which holds its bytes already).
func isStream(in io.Reader) bool {
	if f, ok := in.(*os.File); ok {
		st, err := f.Stat()
		return err != nil || !st.Mode().IsRegular()
	}
	_, seeks := in.(io.Seeker)
	return !seeks
}

// flushBeforeRead flushes w before each read of r: whatever the decoder has
// printed goes out before it waits for more input, and a file read in large
// blocks costs a flush per block.
type flushBeforeRead struct {
	r io.Reader
	w *bufio.Writer
}

func (f *flushBeforeRead) Read(p []byte) (int, error) {
	if f.w.Buffered() > 0 {
		if err := f.w.Flush(); err != nil {
			return 0, err
		}
	}
	return f.r.Read(p)
}

// outlastInterrupt makes the first SIGINT or SIGTERM not end the process: a
// Ctrl-C of 'tcpdump -w - | softrdma decode -' reaches both, tcpdump ends the
// stream, and decode prints the summary of what came, as decode -i does at a
// Ctrl-C. A second one ends it as usual. The returned func undoes it.
func outlastInterrupt() (stop func()) {
	c := make(chan os.Signal, 1)
	signal.Notify(c, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-c:
			signal.Reset(os.Interrupt, syscall.SIGTERM)
		case <-done:
		}
	}()
	return func() {
		signal.Stop(c)
		close(done)
	}
}
