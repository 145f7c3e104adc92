package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/softrdma/softrdma/cmd/softrdma/decode"
	"github.com/spf13/pflag"
)

const decodeUsage = `usage: softrdma decode FILE|- [--json] [--flows=false] [--no-summary] [--annotate OUT.pcapng] [--html OUT.html]
                       [--flow N|ADDR|ADDR:PORT]... [--qp N]... [--opcode NAME]... [--time START:END]

Explains a pcap or pcapng capture (FILE, or standard input for -, as in
'tcpdump -w - | softrdma decode -') of RoCEv1, RoCEv2 and iWARP traffic: one line per RDMA
packet, then a summary per flow. Every RoCE ICRC and every FPDU CRC32c is verified.
Exit status: 0 all RDMA frames well formed, 1 some frame bad (named on stderr), 2 not a
capture or cannot be read.

--flow, --qp, --opcode and --time restrict the packets printed and summarized (the
flows keep the numbers they have without a filter; verdicts such as PSN gaps are
found over every packet). --opcode matches a part of the opcode name, any case
("write", "Read Request", "RC Acknowledge"); --time is in seconds since the first
frame, either end may be left out.

--html writes one self-contained HTML report: per flow a PSN-over-time plot (sends,
retransmissions, ACKs, NAKs, RNR NAKs), the throughput over time, the RTT distribution
and the verdict table.

--annotate writes the capture back as pcapng, every frame kept, each RDMA frame with
softrdma's verdict as a packet comment (Wireshark: pkt_comment / frame.comment).
`

// decodeStdin is what "softrdma decode -" reads: standard input (tests replace it).
var decodeStdin io.Reader = os.Stdin

// runDecode is the decode subcommand: flags around decode.Run.
func runDecode(args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("decode", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, decodeUsage)
		fs.PrintDefaults()
	}
	jsonOut := fs.Bool("json", false, "print one JSON object per line instead of text")
	flows := fs.Bool("flows", true, "include the per-flow summary")
	noSummary := fs.Bool("no-summary", false, "print no summary at all, only the packets")
	flowSel := fs.StringSlice("flow", nil, "show only flow N (as the summary numbers them), or the flows with an end at ADDR or ADDR:PORT (repeatable)")
	qps := fs.StringSlice("qp", nil, "show only the packets of QP N (decimal or 0x hex), either end (repeatable)")
	opcodes := fs.StringArray("opcode", nil, "show only the packets whose opcode name contains NAME, any case (repeatable)")
	timeRange := fs.String("time", "", "show only the packets in START:END, seconds since the first frame")
	htmlOut := fs.String("html", "", "write a self-contained HTML report (plots per flow) to this file")
	annotate := fs.String("annotate", "", "write the capture with each RDMA frame's verdict as a pcapng packet comment to this file")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "softrdma decode: %v\n", err)
		fs.Usage()
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	filter, err := decodeFilter(*flowSel, *qps, *opcodes, *timeRange, fs.Changed("time"))
	if err != nil {
		fmt.Fprintf(stderr, "softrdma decode: %v\n", err)
		return 2
	}
	name := fs.Arg(0)
	in, closeIn, err := openDecodeInput(name)
	if err != nil {
		fmt.Fprintf(stderr, "softrdma decode: %v\n", err)
		return 2
	}
	defer closeIn()
	if name == "-" {
		name = "standard input"
	}
	opts := decode.Options{JSON: *jsonOut, Flows: *flows, Summary: !*noSummary, Verdicts: *annotate != "", Filter: filter, Report: *htmlOut != ""}
	// The annotated copy reads the capture a second time: a file from its start, standard
	// input from memory.
	var again io.ReadSeeker
	if *annotate != "" {
		if again, err = rereadable(in); err != nil {
			fmt.Fprintf(stderr, "softrdma decode: %s: %v\n", name, err)
			return 2
		}
		in = again
	}
	out := bufio.NewWriterSize(stdout, 64<<10)
	res, err := decode.Run(in, out, opts)
	if ferr := out.Flush(); err == nil && ferr != nil {
		err = ferr
	}
	if err != nil {
		fmt.Fprintf(stderr, "softrdma decode: %s: %v\n", name, err)
		return 2
	}
	if *htmlOut != "" {
		if err := writeHTMLReport(*htmlOut, &res, name); err != nil {
			fmt.Fprintf(stderr, "softrdma decode: --html %s: %v\n", *htmlOut, err)
			return 2
		}
	}
	if *annotate != "" {
		if err := writeAnnotated(*annotate, again, &res); err != nil {
			fmt.Fprintf(stderr, "softrdma decode: --annotate %s: %v\n", *annotate, err)
			return 2
		}
	}
	for _, e := range res.Errors {
		fmt.Fprintf(stderr, "softrdma decode: %s: %v\n", name, e)
	}
	return res.ExitCode()
}

// openDecodeInput opens the capture named on the command line: standard input for "-",
// else the file, which must not be a directory (reading one fails with EISDIR only at
// the first read, which the decoder would otherwise report as a file with no bytes).
func openDecodeInput(name string) (r io.Reader, closeFn func(), err error) {
	if name == "-" {
		return decodeStdin, func() {}, nil
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
func writeAnnotated(name string, in io.ReadSeeker, res *decode.Result) error {
	if _, err := in.Seek(0, io.SeekStart); err != nil {
		return err
	}
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 256<<10)
	err = decode.Annotate(in, w, res)
	if ferr := w.Flush(); err == nil {
		err = ferr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// decodeFilter makes the decoder's filter from the flags, nil if none is given.
func decodeFilter(flows, qps, opcodes []string, timeRange string, timeSet bool) (*decode.Filter, error) {
	var f decode.Filter
	if timeSet {
		var err error
		if f, err = decode.ParseTimeRange(timeRange); err != nil {
			return nil, fmt.Errorf("--time: %v", err)
		}
	}
	f.Flows, f.Opcodes = flows, opcodes
	for _, q := range qps {
		n, err := decode.ParseQP(q)
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
func writeHTMLReport(name string, res *decode.Result, capture string) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	err = decode.WriteHTML(f, res, capture)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
