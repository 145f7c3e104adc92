package main

import (
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/softrdma/softrdma/bench"
	"github.com/softrdma/softrdma/launch"
	"github.com/softrdma/softrdma/netio/netns"
	"github.com/softrdma/softrdma/perf"
)

// benchCmd is softrdma bench: the benchmark suite (package bench).
func benchCmd(args []string, stdout, stderr io.Writer) int {
	o := &bench.Options{}
	fs := newFlagSet("bench", bench.Usage, stderr)
	var sizes, addrs []string
	fs.BoolVar(&o.JSON, "json", false, "print the rows as JSON instead of a table")
	fs.DurationVar(&o.Measure, "time", time.Second, "measured time of each measurement (softrdma and baseline alike)")
	fs.DurationVar(&o.Warm, "warm", 200*time.Millisecond, "unmeasured warm-up before each measurement")
	fs.StringSliceVar(&o.Transports, "transport", []string{"roce", "iwarp"}, "transports to measure: roce, iwarp")
	fs.StringSliceVar(&o.Backends, "backend", []string{"udp", "afpacket", "tap"}, "RoCE backends to measure: udp, afpacket, tap")
	fs.StringSliceVar(&o.Tests, "tests", bench.AllTests, "rows to run: write, read, send (bandwidth), rate (64-byte message rate), lat (latency), qps (scale: --qps QP pairs moving 4 KiB WRITEs, their setup rate, directly and through rdma_cm, and memory), clib (perftest's ib_write_bw and ib_send_lat on the drop-in libibverbs vs softrdma perf, on loopback or --addrs)")
	fs.IntSliceVar(&o.QPs, "qps", []int{1, 16, 256, 4096}, "QP pairs of the scale rows (--tests qps)")
	fs.StringSliceVar(&sizes, "sizes", []string{"4K", "64K", "1M"}, "bandwidth message sizes (K and M suffixes)")
	fs.IntVar(&o.RateSize, "rate-size", 64, "message size of the message-rate rows")
	fs.IntVar(&o.LatSize, "lat-size", 64, "message size of the latency rows")
	fs.IntSliceVar(&o.MTUs, "mtu", []int{1500}, "MTUs of the veth pair (the IB MTU follows as rxe derives it: 1500 gives 1024, 9000 gives 4096): every row runs at the first, the bandwidth rows (write, read, send) at each of the others as well (make bench: 1500,9000)")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	fs.StringVar(&o.Trace, "trace", "", "write an execution trace of the whole run to this file (go tool trace: goroutine wake-ups, blocking, system calls)")
	fs.StringVar(&o.MemProfile, "memprofile", "", "write an allocation profile (every allocation sampled) to this file")
	fs.StringSliceVar(&addrs, "addrs", nil, "run between these two IPv4 addresses of this host (e.g. 127.0.0.1,127.0.0.2, or two addresses of one NIC, whose traffic the kernel loops back) instead of two network namespaces: no root needed, the udp backend and iwarp only, and --mtu is the path MTU assumed")
	fs.BoolVar(&o.NoBaseline, "no-baseline", false, "measure softrdma alone (to profile it): no baseline, no ratio")
	fs.StringVar(&o.Lib, "lib", "", "clib rows: the directory of the drop-in libibverbs.so.1 (make lib; default $"+launch.LibEnvVar+", else lib/ beside bin/)")
	fs.IntVar(&o.CLibIters, "clib-iters", 5000, "clib rows: iterations (-n) of each run of ib_write_bw, ib_send_lat and softrdma perf")
	fs.StringVar(&o.Pcap, "pcap", "", "write every frame both devices send and receive (iWARP: the TCP octets of the connections, as synthesised segments) to this pcap `FILE` (pcapng if its name ends in .pcapng); the bench moves hundreds of MB per row, so the file gets large (a tenth of the traffic or more, cut to --pcap-snaplen; gigabytes with whole frames), and the capture slows the devices, which the numbers show")
	fs.IntVar(&o.PcapSnaplen, "pcap-snaplen", bench.DefaultSnaplen, "octets of each frame the --pcap file keeps (the headers: the rest is cut, the length on the wire kept; 0 keeps whole frames)")
	qpTimeout := fs.Int("qp-timeout", perf.DefQPTimeout, "RoCE RC QPs' local ACK timeout: a request unacknowledged for 4.096 µs × 2^N is resent, 7 times (perftest's -u)")
	if err := parseFlags(fs, args, stderr); err != nil {
		return flagsExit(err)
	}
	o.QPTimeout = qpTimeout
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "softrdma bench: unexpected arguments %q\n", fs.Args())
		return 2
	}
	for _, s := range sizes {
		n, err := perf.ParseSize(s)
		if err != nil {
			fmt.Fprintf(stderr, "softrdma bench: --sizes: %v\n", err)
			return 2
		}
		o.Sizes = append(o.Sizes, int(n))
	}
	for _, a := range addrs {
		ip, err := netip.ParseAddr(a)
		if err != nil || !ip.Is4() {
			fmt.Fprintf(stderr, "softrdma bench: --addrs %q: want an IPv4 address\n", a)
			return 2
		}
		o.Addrs = append(o.Addrs, ip)
	}
	if len(o.Addrs) > 0 && !fs.Changed("backend") {
		o.Backends = []string{"udp"}
	}
	if err := o.Check(); err != nil {
		fmt.Fprintf(stderr, "softrdma bench: %v\n", err)
		return 2
	}
	if len(o.Addrs) > 0 {
		// This host's own addresses: no namespace to create.
	} else if err := netns.Check(); err != nil {
		fmt.Fprintf(stdout, "softrdma bench: skipped: cannot create network namespaces (%v); run it as root\n", err)
		return 0
	}
	if err := bench.Main(o, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "softrdma bench: %v\n", err)
		return 1
	}
	return 0
}
