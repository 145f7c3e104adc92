package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"

	"github.com/softrdma/softrdma/conform"
	"github.com/softrdma/softrdma/conform/cli"
	"github.com/softrdma/softrdma/roce"
)

const conformUsage = `usage: softrdma conform [flags] (--self | --peer HOST[:PORT])
       softrdma conform serve [flags]
       softrdma conform --list

A protocol conformance suite: a scripted peer sends exactly the packets each case
asks for (good ones and wrong ones: a bad ICRC, a wrong P_Key or Q_Key, a PSN from
the future, an opcode out of sequence, an impossible pad count ...), captures the
answer, and judges it against the specification: IBTA Vol. 1 chapter 9 for RoCE
(--transport roce, the default), RFC 5044/6581 (MPA), 5041 (DDP) and 5040 (RDMAP)
for iWARP (--transport iwarp, where the tester speaks MPA on TCP connections to the
QPs the peer's control server makes listen). Each case passes, fails (with the
bytes seen, in hex), or is not applicable (the peer lacks a control the case needs).

--self runs the suite against softrdma itself, in process: RoCE on the simulator
(--backend sim, the default: deterministic, virtual time, a few milliseconds) or
over UDP sockets on the loopback interface (--backend udp, 127.0.0.1 and
127.0.0.2); iWARP on loopback TCP.

--peer HOST[:PORT] tests another machine. The cases get their side channel (a QP
connected to the tester's QPN and PSN, a registered region, receives, memory read
back, a QP's state) from the control protocol of conform/CONTROL.md, which
"softrdma conform serve" speaks on TCP port 7471 (of 127.0.0.1 unless told
otherwise with its --listen); the peer's RoCE address is HOST
(or --peer-ip). Without a control server at HOST every case is not applicable.
conform-ctl (make conform-ctl) serves the same protocol for any libibverbs device:
a hardware RNIC, the kernel's rxe or siw, softrdma's own libraries:
  conform-ctl --device rxe0 --listen IP:7471        (on the peer)
  softrdma conform --peer IP:7471                    (on the tester)
The tester's frames go out over --backend udp (a UDP socket on port 4791 of
--local, by default the address that routes to the peer) or afpacket (raw frames
on --interface, CAP_NET_RAW).

--peer-kind kernel --peer IP tests the Linux kernel's rxe (--transport roce) or
siw (--transport iwarp) at IP, which serve no control protocol: the side channel
comes from the kernel's own tools, which must be running there in a loop. For
RoCE, perftest servers (the tester is their client over perftest's TCP exchange,
on the ports and with the options of conform.DefaultPerftestServers):
  while :; do ib_write_bw -d rxe0 -x GIDX -p 18515 -n 5 -s 16384; done &
  while :; do ib_read_bw -d rxe0 -x GIDX -p 18516 -n 5 -s 16384; done &
  while :; do ib_atomic_bw -d rxe0 -x GIDX -p 18517 -n 5 -A FETCH_AND_ADD; done &
  while :; do ib_send_bw -d rxe0 -x GIDX -p 18518 -n 16 -s 4096; done &
  while :; do ib_send_bw -d rxe0 -x GIDX -p 18519 -n 16 -s 16; done &
For iWARP, rping's persistent server: rping -s -P -a IP -p 7174. The cases that
need what those tools cannot give (memory read back, the peer as requester, a
given QP configuration) are not applicable, with the reason; completions and QP
states are not observable, and a case that needs them passes on its wire checks
alone, saying so (test/conform/kernel-results.md).

The exit status is 0 only if every applicable case passed (and at least one did),
1 if one failed, 2 for usage errors.

flags:
`

const conformServeUsage = `usage: softrdma conform serve [--transport roce|iwarp] [--listen ADDR] [--backend udp|afpacket] [--addr IP] [--interface IF] [--max-session-memory SIZE] [--pcap FILE]

Opens a softrdma RoCE device (or an iWARP device, whose QPs then listen on --addr
for the tester's TCP connections) and serves the conformance control protocol for
it on TCP, so that "softrdma conform --peer HOST" can test it. Each connection is a
session: what it creates is destroyed when it ends.

The protocol has no authentication: whoever reaches the port creates QPs and
registers memory the device's peers can write. So it listens on 127.0.0.1:7471
unless --listen says otherwise: for a tester on another machine, give the
address it reaches (--listen 10.0.0.2:7471, or --listen :7471 for every
interface) on a network you trust. The regions one session holds are at most
--max-session-memory (a reg_mr beyond it is refused; reset frees them).

flags:
`

func conformCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "serve" {
		return conformServeCmd(args[1:], stdout, stderr)
	}
	var o cli.Options
	fs := newFlagSet("conform", conformUsage, stderr)
	fs.SortFlags = false
	fs.StringVar(&o.Transport, "transport", "roce", "transport under test: roce or iwarp")
	fs.BoolVar(&o.Self, "self", false, "test an in-process softrdma peer")
	fs.StringVar(&o.Peer, "peer", "", "control address HOST[:PORT] of the peer under test (port 7471 by default)")
	fs.StringVar(&o.PeerKind, "peer-kind", "control", "what serves the peer's side channel: control (conform serve) or kernel (rxe/siw with perftest/rping servers)")
	fs.StringVar(&o.PeerIP, "peer-ip", "", "the peer's RoCE address (default: HOST of --peer)")
	fs.StringVar(&o.Backend, "backend", "", "how the tester's frames travel: sim (--self only), udp or afpacket (default sim with --self, else udp)")
	fs.StringVar(&o.Local, "local", "", "the tester's address (default: the one that routes to the peer)")
	fs.StringVarP(&o.Interface, "interface", "d", "", "network interface (afpacket: required)")
	fs.StringVar(&o.Pattern, "case", "", "run only the cases whose IDs match these comma-separated globs, e.g. 'rc.dup.*,ud.*'")
	fs.StringVar(&o.JUnit, "junit", "", "also write the report as JUnit XML to `FILE`")
	fs.BoolVar(&o.JSON, "json", false, "print the report as JSON instead of a table")
	fs.BoolVar(&o.List, "list", false, "list the catalogue and exit")
	fs.StringVar(&o.Waivers, "waivers", "", "the peer's expected failures: a `FILE` of lines 'CASE-GLOB reason'; a listed case that fails reports XFAIL and does not fail the run")
	fs.BoolVarP(&o.Verbose, "verbose", "v", false, "print each case's result as it finishes (to stderr)")
	fs.DurationVar(&o.Timeout, "timeout", 0, "how long to wait for an answer the specification requires (default 200ms; 1s virtual on the simulator)")
	fs.DurationVar(&o.Silence, "silence", 0, "how long no answer must come where the specification requires none (default 100ms)")
	fs.DurationVar(&o.Settle, "settle", 0, "iWARP: how long to wait after the MPA Reply before the first FPDU (siw 6.1 needs 300ms: test/interop/README.md)")
	fs.Uint64Var(&o.Seed, "seed", 1, "simulator seed (--self --backend sim)")
	fs.Uint16Var(&o.UDPPort, "udp-port", roce.UDPPort, "RoCEv2 UDP port")
	fs.StringVar(&o.Pcap, "pcap", "", "write every frame the tester sends and receives (iWARP: the TCP octets of its connections, as synthesised segments), the deliberately broken ones exactly as sent, to this pcap `FILE` (pcapng if its name ends in .pcapng)")
	if err := parseFlags(fs, args, stderr); err != nil {
		return flagsExit(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "softrdma conform: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	return cli.Run(o, stdout, stderr)
}

// conformServeOptions are the flags of softrdma conform serve: cli.ServeOptions
// with --max-session-memory as the flag's byteSize.
type conformServeOptions struct {
	cli.ServeOptions
	maxSessionMemory byteSize      // --max-session-memory; 0: conform.DefaultMaxSessionMemory
	metrics          *metricsFlags // --metrics, --dump-counters
}

// conformServeCmd serves the control protocol for a softrdma device.
func conformServeCmd(args []string, stdout, stderr io.Writer) int {
	o, err := conformServeParse(args, stderr)
	if err != nil {
		return flagsExit(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return o.metrics.run("conform serve", stderr, func() int { return conformServe(ctx, o, stdout, stderr) })
}

// conformServeParse reads conform serve's flags (parseFlags).
func conformServeParse(args []string, stderr io.Writer) (conformServeOptions, error) {
	var o conformServeOptions
	fs := newFlagSet("conform serve", conformServeUsage, stderr)
	fs.StringVar(&o.Listen, "listen", "127.0.0.1:"+strconv.Itoa(conform.DefaultControlPort), "TCP address of the control protocol (loopback only unless given: the protocol has no authentication)")
	o.maxSessionMemory = conform.DefaultMaxSessionMemory
	fs.Var(&o.maxSessionMemory, "max-session-memory", "octets of memory regions one session may hold registered (K, M, G suffixes)")
	fs.StringVar(&o.Transport, "transport", "roce", "the device: roce or iwarp")
	fs.StringVar(&o.Backend, "backend", "udp", "the device's backend: udp or afpacket")
	fs.StringVar(&o.Addr, "addr", "", "the device's RoCE address (udp: the address to bind; default the interface's first)")
	fs.StringVarP(&o.Interface, "interface", "d", "", "network interface (afpacket: required; udp: where the address comes from)")
	fs.Uint16Var(&o.UDPPort, "udp-port", roce.UDPPort, "RoCEv2 UDP port")
	fs.StringVar(&o.Pcap, "pcap", "", "write every frame the device sends and receives (iWARP: the TCP octets of its QPs' connections, as synthesised segments) to this pcap `FILE` (pcapng if its name ends in .pcapng)")
	o.metrics = addMetricsFlags(fs)
	if err := parseFlags(fs, args, stderr); err != nil {
		return o, err
	}
	if o.maxSessionMemory < 1 {
		fmt.Fprintf(stderr, "softrdma conform serve: --max-session-memory %d: want 1 or more\n", o.maxSessionMemory)
		return o, &flagsError{errors.New("--max-session-memory")}
	}
	return o, nil
}

// conformServe serves until ctx ends (cli.Serve).
func conformServe(ctx context.Context, o conformServeOptions, stdout, stderr io.Writer) int {
	so := o.ServeOptions
	so.MaxSessionMemory = int64(o.maxSessionMemory)
	return cli.Serve(ctx, so, stdout, stderr)
}
