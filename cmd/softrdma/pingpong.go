package main

import (
	"fmt"
	"io"
	"math"
	"net/netip"

	"github.com/softrdma/softrdma/counters"
	oobpingpong "github.com/softrdma/softrdma/oob/pingpong"
	"github.com/softrdma/softrdma/pingpong"
)

const pingpongUsage = `usage: softrdma pingpong [rc|ud|uc] [flags] [HOST]

rdma-core's ibv_rc_pingpong, ibv_ud_pingpong and ibv_uc_pingpong (v44), over softrdma's
user-space RoCEv2: the same TCP exchange (port 18515), flags and output, so either side
can be the real tool. Without HOST it is the server and waits for one client. The first
word picks the QP type (default rc). HOST must not be called rc, ud or uc.

-d names a network interface instead of an IB device (or one of an interface's
addresses, to use that address alone); its GID table is rxe's: index 0 the link-local
address from the MAC, then its IPv4 addresses (as ::ffff:a.b.c.d), then its global IPv6
addresses, so -g 1 is RoCEv2 over IPv4 and -g 2 over IPv6 as with rxe. Without -d the
client uses the interface that routes to HOST and the server the first one up.
Without -g the tools send a zero GID; softrdma then addresses the peer by the IP address
of the TCP connection (the kernel tools need -g on RoCE).

Backends: udp (default) needs no privileges: RoCEv2 datagrams on a UDP socket bound to
the address of the GID index, port 4791. afpacket sends and receives raw frames on the
interface -d names (CAP_NET_RAW), sharing its addresses with the kernel. tap creates a
TAP device (-d its name, optional) and is a host of its own behind it, with the
addresses --tap-addr gives (CAP_NET_ADMIN); --tap-kernel-addr addresses the kernel's side.

flags:
`

// pingpongCmd is softrdma pingpong: ibv_rc_pingpong, ibv_ud_pingpong and
// ibv_uc_pingpong (package pingpong).
func pingpongCmd(args []string, stdout, stderr io.Writer) int {
	o := pingpong.Options{Mode: "rc"}
	if len(args) > 0 {
		switch args[0] {
		case "rc", "ud", "uc":
			o.Mode, args = args[0], args[1:]
		}
	}
	fs := newFlagSet("pingpong", pingpongUsage, stderr)
	fs.SortFlags = false
	fs.IntVarP(&o.Port, "port", "p", oobpingpong.DefaultPort, "listen on/connect to TCP `port`")
	fs.StringVarP(&o.Device, "ib-dev", "d", "", "use network interface `dev` (or the interface address dev)")
	fs.IntVarP(&o.IBPort, "ib-port", "i", 1, "use `port` of the device (softrdma devices have port 1 only)")
	fs.IntVarP(&o.Size, "size", "s", 0, "`size` of message to exchange (default 4096; ud 1024)")
	fs.IntVarP(&o.MTU, "mtu", "m", 1024, "path MTU (rc, uc)")
	fs.IntVarP(&o.RxDepth, "rx-depth", "r", 500, "number of receives to post at a time")
	fs.IntVarP(&o.Iters, "iters", "n", 1000, "number of exchanges")
	fs.IntVarP(&o.SL, "sl", "l", 0, "service level value")
	fs.BoolVarP(&o.Events, "events", "e", false, "sleep on CQ events (default poll)")
	fs.IntVarP(&o.GIDIndex, "gid-idx", "g", -1, "local port gid `index`")
	fs.BoolVarP(&o.Check, "chk", "c", false, "validate received buffer (as rdma-core: the server checks the first byte of each page)")
	fs.StringVar(&o.Transport, "transport", "roce", "transport: roce (iwarp: not yet)")
	fs.StringVar(&o.Backend, "backend", "udp", "RoCE backend: udp (a UDP socket, no privileges), afpacket, tap")
	fs.StringVar(&o.Pcap, "pcap", "", "write every RoCE frame sent and received to this pcap `file` (pcapng if its name ends in .pcapng)")
	tapAddrs := fs.StringSlice("tap-addr", nil, "--backend tap: the device's own address `prefix` behind the TAP device, e.g. 10.99.0.2/24 (repeatable)")
	tapKernelAddrs := fs.StringSlice("tap-kernel-addr", nil, "--backend tap: an address `prefix` for the kernel's side of the TAP device (repeatable)")
	fs.BoolVar(&o.JSON, "json", false, "print the result as JSON instead of the tools' lines")
	fs.DurationVar(&o.Wait, "wait", 0, "client: keep retrying the TCP connection this long (the tools try once)")
	fs.DurationVar(&o.Timeout, "timeout", 0, "give up after this long (0: never, as the tools)")
	metrics := addMetricsFlags(fs)
	if err := parseFlags(fs, args, stderr); err != nil {
		return flagsExit(err)
	}
	for _, l := range []struct {
		in  []string
		out *[]netip.Prefix
	}{{*tapAddrs, &o.TAPAddrs}, {*tapKernelAddrs, &o.TAPKernelAddrs}} {
		for _, a := range l.in {
			p, err := netip.ParsePrefix(a)
			if err != nil {
				fmt.Fprintf(stderr, "softrdma pingpong: %v\n", err)
				return 1
			}
			*l.out = append(*l.out, p)
		}
	}
	switch fs.NArg() {
	case 0:
	case 1:
		o.Server = fs.Arg(0)
	default:
		fs.Usage()
		return 1
	}
	if o.Transport != "roce" {
		if o.Transport == "iwarp" {
			fmt.Fprintln(stderr, "softrdma pingpong: --transport iwarp: not yet: the pingpong tools need RC/UC/UD QPs over RoCE; iWARP pingpong is not implemented")
		} else {
			fmt.Fprintf(stderr, "softrdma pingpong: --transport %q: want roce or iwarp\n", o.Transport)
		}
		return 2
	}
	if !fs.Changed("size") {
		o.Size = 4096
		if o.Mode == "ud" {
			// ud_pingpong.c's default; its usage text says 2048.
			o.Size = 1024
		}
	}
	if err := ppValidate(o); err != nil {
		fmt.Fprintf(stderr, "softrdma pingpong: %v\n", err)
		return 2
	}
	if o.IBPort != 1 {
		fmt.Fprintf(stderr, "Couldn't get port info (softrdma devices have port 1 only, not %d)\n", o.IBPort)
		return 1
	}
	return metrics.run("pingpong", stderr, func() int { return ppRun(o, stdout, stderr) })
}

// ppRun runs pingpong and reports its result.
func ppRun(o pingpong.Options, stdout, stderr io.Writer) int {
	var res pingpong.Result
	mark := counters.Default.Mark()
	err := pingpong.Run(o, stdout, &res)
	if o.JSON {
		if err != nil {
			res.Error = err.Error()
		}
		pingpong.WriteReport(stdout, res, counters.Default.Since(mark))
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

// ppMTUValid accepts the IB MTUs pp_mtu_to_enum knows.
// ppMaxSize is the largest -s: the message buffer is allocated (and
// registered) whole before anything is exchanged.
const ppMaxSize = 1 << 30

// ppValidate reports the first numeric flag out of its range, before anything
// starts. -r has no upper bound here: the QP's creation names the engine's
// (MaxQPWR), as the tools' "Couldn't create QP".
func ppValidate(o pingpong.Options) error {
	return checkFlags(
		intRange("-p", o.Port, 0, 65535),
		intRange("-i", o.IBPort, 1, 255),
		intRange("-s", o.Size, 1, ppMaxSize),
		flagRange{"-m", o.MTU, ppMTUValid(o.MTU) == nil, "256, 512, 1024, 2048 or 4096"},
		intRange("-r", o.RxDepth, 1, math.MaxInt32),
		intRange("-n", o.Iters, 0, math.MaxInt32),
		intRange("-l", o.SL, 0, 15),
		intRange("-g", o.GIDIndex, -1, 255),
		durationNonNegative("--wait", o.Wait),
		durationNonNegative("--timeout", o.Timeout),
	)
}

func ppMTUValid(m int) error {
	switch m {
	case 256, 512, 1024, 2048, 4096:
		return nil
	}
	return fmt.Errorf("mtu %d: want 256, 512, 1024, 2048 or 4096", m)
}
