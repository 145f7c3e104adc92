// Command softrdma is soft-RoCE and soft-iWARP in user space: demo, decode, and more.
package main

import (
	"fmt"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, usage)
		return 2
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Println(usage)
		return 0
	case "decode":
		return runDecode(args[1:], os.Stdout, os.Stderr)
	case "demo":
		return demoCmd(args[1:], os.Stdout, os.Stderr)
	case "pingpong":
		return pingpongCmd(args[1:], os.Stdout, os.Stderr)
	case "perf":
		return perfCmd(args[1:], os.Stdout, os.Stderr)
	case "rping":
		return rpingCmd(args[1:], os.Stdout, os.Stderr)
	case "cmatose":
		return cmatoseCmd(args[1:], os.Stdout, os.Stderr)
	case "bench":
		return benchCmd(args[1:], os.Stdout, os.Stderr)
	case "conform":
		return conformCmd(args[1:], os.Stdout, os.Stderr)
	}
	fmt.Fprintf(os.Stderr, "softrdma: unknown command %q\n%s\n", args[0], usage)
	return 2
}

const usage = `usage: softrdma COMMAND [flags]

commands:
  decode FILE   explain a pcap/pcapng capture of RoCE and iWARP traffic, flow by flow
  demo          two nodes on a simulated network: SEND, WRITE, READ and atomics, verified
  pingpong      ibv_rc_pingpong / ibv_ud_pingpong / ibv_uc_pingpong over RoCEv2: pingpong [rc|ud|uc] [HOST]
  rping         rdma-core's rping over iWARP (or --transport roce): rping -s [-a ADDR] | rping -c -a ADDR [-p PORT] [-C N] [-S SIZE] [-vV]
  cmatose       librdmacm's ucmatose (RC) or, with --ud, udaddy (UD by SIDR) over RoCEv2: cmatose -b ADDR | cmatose -s HOST
  perf          perftest's ib_write_bw, ib_read_bw, ib_send_bw, ib_atomic_bw, ib_write_lat, ib_read_lat,
                ib_send_lat over RoCEv2: perf write_bw|read_bw|send_bw|atomic_bw|write_lat|read_lat|send_lat [HOST]
  conform       the protocol conformance suite: conform --self | conform --peer HOST | conform serve
  bench         the benchmark suite (make bench): softrdma against the raw UDP/TCP path between two
                network namespaces it creates (root), one table of ratios`
