package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/softrdma/softrdma/cmd/softrdma/decode"
	"github.com/spf13/pflag"
)

const decodeUsage = `usage: softrdma decode FILE|- [--json] [--flows=false] [--no-summary]

Explains a pcap or pcapng capture (FILE, or standard input for -, as in
'tcpdump -w - | softrdma decode -') of RoCEv1, RoCEv2 and iWARP traffic: one line per RDMA
packet, then a summary per flow. Every RoCE ICRC and every FPDU CRC32c is verified.
Exit status: 0 all RDMA frames well formed, 1 some frame bad (named on stderr), 2 not a
capture or cannot be read.
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
	out := bufio.NewWriterSize(stdout, 64<<10)
	res, err := decode.Run(in, out, decode.Options{JSON: *jsonOut, Flows: *flows, Summary: !*noSummary})
	if ferr := out.Flush(); err == nil && ferr != nil {
		err = ferr
	}
	if err != nil {
		fmt.Fprintf(stderr, "softrdma decode: %s: %v\n", name, err)
		return 2
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
