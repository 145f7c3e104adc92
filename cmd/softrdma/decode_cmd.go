package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/softrdma/softrdma/decode"
	"github.com/spf13/pflag"
)

const decodeUsage = `usage: softrdma decode FILE|- [--json] [--flows=false] [--no-summary] [--annotate OUT.pcapng] [--html OUT.html]
                       [--flow N|ADDR|ADDR:PORT]... [--qp N]... [--opcode NAME]... [--time START:END]
       softrdma decode -i IFACE [-w FILE] [-c COUNT] [--duration D] [--json] [--html OUT.html]
                       [--flow ADDR|ADDR:PORT]... [--qp N]... [--opcode NAME]... [--time START:END]

Explains a pcap or pcapng capture (FILE, or standard input for -, as in
'tcpdump -w - | softrdma decode -') of RoCEv1, RoCEv2 and iWARP traffic: one line per RDMA
packet, then a summary per flow. Every RoCE ICRC and every FPDU CRC32c is verified.
Exit status: 0 all RDMA frames well formed, 1 some frame bad (named on stderr), 2 not a
capture or cannot be read.

--flow, --qp, --opcode and --time restrict the packets printed and summarized (the
flows keep the numbers they have without a filter; verdicts such as PSN gaps are
found over every packet). --opcode matches a part of the opcode name, any case
("write", "Read Request", "RC Acknowledge"; "nak" and "rnr" find the NAKs by their
AETH); --time is in seconds since the first frame, either end may be left out.

--html writes one self-contained HTML report: per flow a PSN-over-time plot (sends,
retransmissions, ACKs, NAKs, RNR NAKs), the throughput over time, the RTT distribution
and the verdict table.

--annotate writes the capture back as pcapng, every frame kept, each RDMA frame with
softrdma's verdict as a packet comment (Wireshark: pkt_comment / frame.comment).

-i captures live from an interface instead (AF_PACKET: root or CAP_NET_RAW), both
directions, and prints the same as for a capture file of those frames, each packet as
it passes; it stops after -c frames (all frames counted, as tcpdump counts them),
after --duration, or at Ctrl-C, then prints the summary. The filters work as on a
file, each packet matched as it passes: --flow by address (ADDR or ADDR:PORT; the flow
numbers are given at the end), --qp by the packet's QP, its UD source QP, or its QP
pair as the CM REQ and REP seen before it give it. -w FILE also writes every frame
read, filtered or not, to FILE (as tcpdump -w; pcapng if FILE ends in .pcapng).
`

// decodeStdin is what "softrdma decode -" reads: standard input (tests replace it).
var decodeStdin io.Reader = os.Stdin

// runDecode is the decode subcommand: flags around decode.Command.
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
	iface := fs.StringP("interface", "i", "", "capture live from this interface instead of reading FILE (root or CAP_NET_RAW)")
	count := fs.IntP("count", "c", 0, "-i: stop after this many frames (0: no limit)")
	duration := fs.Duration("duration", 0, "-i: stop after this long (0: no limit; Ctrl-C stops too)")
	write := fs.StringP("write", "w", "", "-i: also write every frame read to this `FILE` (pcapng if it ends in .pcapng, else pcap)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "softrdma decode: %v\n", err)
		fs.Usage()
		return 2
	}
	want := 1 // FILE
	if *iface != "" {
		want = 0
	} else if fs.Changed("count") || fs.Changed("duration") || fs.Changed("write") {
		fmt.Fprintln(stderr, "softrdma decode: -c, --duration and -w are for a live capture: use them with -i IFACE")
		return 2
	}
	if fs.NArg() != want {
		fs.Usage()
		return 2
	}
	return decode.Command(fs.Arg(0), decodeStdin, decode.CommandOptions{
		JSON: *jsonOut, Flows: *flows, NoSummary: *noSummary, Flow: *flowSel, QP: *qps, Opcode: *opcodes,
		Time: *timeRange, TimeSet: fs.Changed("time"), HTML: *htmlOut, Annotate: *annotate,
		Interface: *iface, Count: *count, Duration: *duration, Write: *write,
	}, stdout, stderr)
}
