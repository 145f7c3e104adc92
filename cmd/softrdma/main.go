// Command softrdma is soft-RoCE and soft-iWARP in user space: demo, decode, and more.
package main

import (
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	return runCommand(args, os.Stdout, os.Stderr)
}

// commands is the command table: each subcommand by name, and its entry
// point, which parses its own flags (parseFlags) and returns the exit code.
var commands = []struct {
	name string
	run  func(args []string, stdout, stderr io.Writer) int
}{
	{"decode", runDecode},
	{"demo", demoCmd},
	{"pingpong", pingpongCmd},
	{"perf", perfCmd},
	{"rping", rpingCmd},
	{"cmatose", cmatoseCmd},
	{"bench", benchCmd},
	{"conform", conformCmd},
	{"run", runCmd},
}

// runCommand runs the subcommand args[0] with the rest of args.
func runCommand(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprintln(stdout, usage)
		return 0
	}
	for _, c := range commands {
		if c.name == args[0] {
			return c.run(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "softrdma: unknown command %q\n%s\n", args[0], usage)
	return 2
}

const usage = `usage: softrdma COMMAND [flags]

commands:
  run           run an unmodified verbs program (ibv_*, perftest, rping...) on softrdma's
                libibverbs/librdmacm (make lib): run [--device SPEC]... -- PROGRAM [ARGS]
  decode FILE|-  explain a pcap/pcapng capture (- reads standard input) of RoCE and iWARP traffic, flow by flow
  demo          two nodes on a simulated network: SEND, WRITE, READ and atomics, verified
  pingpong      ibv_rc_pingpong / ibv_ud_pingpong / ibv_uc_pingpong over RoCEv2: pingpong [rc|ud|uc] [HOST]
  rping         rdma-core's rping over iWARP (or --transport roce): rping -s [-a ADDR] | rping -c -a ADDR [-p PORT] [-C N] [-S SIZE] [-vV]
  cmatose       librdmacm's ucmatose (RC) or, with --ud, udaddy (UD by SIDR) over RoCEv2: cmatose -b ADDR | cmatose -s HOST
  perf          perftest's ib_write_bw, ib_read_bw, ib_send_bw, ib_atomic_bw, ib_write_lat, ib_read_lat,
                ib_send_lat over RoCEv2: perf write_bw|read_bw|send_bw|atomic_bw|write_lat|read_lat|send_lat [HOST]
  conform       the protocol conformance suite: conform --self | conform --peer HOST | conform serve
  bench         the benchmark suite (make bench): softrdma against the raw UDP/TCP path between two
                network namespaces it creates (root), one table of ratios`
