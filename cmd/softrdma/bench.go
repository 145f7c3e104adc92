package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/softrdma/softrdma/launch"
	"github.com/softrdma/softrdma/netio/netns"
	"github.com/softrdma/softrdma/pcaptap"
	"github.com/softrdma/softrdma/perf"
)

// softrdma bench is the benchmark suite behind `make bench`. It creates two
// network namespaces joined by a veth pair, opens a device in each (RoCEv2 on
// the udp and afpacket backends, iWARP over TCP; for the tap backend, a device
// behind a TAP and a UDP device on its kernel side, both in namespace A), and
// measures, one row at a
// time, WRITE/READ/SEND bandwidth, the 64-byte message rate and the latency,
// each beside the raw baseline of the same path measured right before it:
// batched datagrams of the RoCE packets' size through the same netio endpoint
// type and batch size (a UDP blaster; raw frames for afpacket), or a TCP
// stream for iWARP; round trips of datagrams (messages) of the same sizes for
// the latencies. Both sides run in this one process (each device's sockets
// live in its namespace), so the verbs are connected directly, without an
// out-of-band exchange, and one CPU profile (--cpuprofile) covers both ends.
//
// It is a subcommand rather than a test binary so that it needs nothing but
// the softrdma binary (and root), prints one table, and can be profiled and
// run with other sizes without rebuilding; `go test ./cmd/softrdma` checks
// that it runs (TestBenchRuns, tiny sizes, nothing asserted about numbers).

// benchOptions are softrdma bench's flags.
type benchOptions struct {
	json       bool
	measure    time.Duration // measured time of each measurement
	warm       time.Duration // unmeasured time before it
	transports []string      // roce, iwarp
	backends   []string      // RoCE backends: udp, afpacket, tap
	tests      []string      // write, read, send (bandwidth), rate, lat
	sizes      []int         // bandwidth message sizes
	rateSize   int           // message rate size
	latSize    int           // latency size
	qps        []int         // QP pairs of the scale rows (qps)
	mtu        int           // veth MTU of the pair being measured (mtus[0], then the others)
	mtus       []int         // --mtu: the first for every row, the others for the bandwidth rows
	cpuProfile string
	trace      string // --trace: an execution trace (go tool trace)
	memProfile string
	noBaseline bool   // for profiling softrdma alone
	lib        string // --lib: the drop-in library's directory (clib rows)
	clibIters  int    // --clib-iters: -n of the clib rows' tools
	// addrs, if set, are two IPv4 addresses of this host to run between
	// (--addrs) instead of two namespaces on a veth pair.
	addrs []netip.Addr

	pcap        string       // --pcap FILE
	pcapSnaplen int          // --pcap-snaplen
	tap         *pcaptap.Tap // the --pcap file while it runs
}

// benchDefaultSnaplen is --pcap-snaplen's default: every header of a RoCE
// packet (Ethernet, IPv6, UDP, BTH and the largest extension header, the 28
// octets of an AtomicETH: 102 octets) and of an iWARP FPDU (Ethernet, IP, TCP,
// MPA, DDP and RDMAP, a Read Request's 28 octets included) fits in it.
const benchDefaultSnaplen = 128

const benchUsage = `usage: softrdma bench [flags]

Runs the benchmark suite between two network namespaces that it creates (needs
root) and prints one table: for each transport and backend, WRITE/READ/SEND
bandwidth, the 64-byte message rate and latency, each beside the raw baseline
of the same path measured in the same run, and the ratio. Without root it says
so and exits 0.

flags:
`

// benchAllTests are the kinds of row, in table order.
var benchAllTests = []string{"write", "read", "send", "rate", "lat", "qps", "clib"}

func benchCmd(args []string, stdout, stderr io.Writer) int {
	o := &benchOptions{}
	fs := newFlagSet("bench", benchUsage, stderr)
	var sizes, addrs []string
	fs.BoolVar(&o.json, "json", false, "print the rows as JSON instead of a table")
	fs.DurationVar(&o.measure, "time", time.Second, "measured time of each measurement (softrdma and baseline alike)")
	fs.DurationVar(&o.warm, "warm", 200*time.Millisecond, "unmeasured warm-up before each measurement")
	fs.StringSliceVar(&o.transports, "transport", []string{"roce", "iwarp"}, "transports to measure: roce, iwarp")
	fs.StringSliceVar(&o.backends, "backend", []string{"udp", "afpacket", "tap"}, "RoCE backends to measure: udp, afpacket, tap")
	fs.StringSliceVar(&o.tests, "tests", benchAllTests, "rows to run: write, read, send (bandwidth), rate (64-byte message rate), lat (latency), qps (scale: --qps QP pairs moving 4 KiB WRITEs, their setup rate and memory), clib (perftest's ib_write_bw and ib_send_lat on the drop-in libibverbs vs softrdma perf, on loopback or --addrs)")
	fs.IntSliceVar(&o.qps, "qps", []int{1, 16, 256, 4096}, "QP pairs of the scale rows (--tests qps)")
	fs.StringSliceVar(&sizes, "sizes", []string{"4K", "64K", "1M"}, "bandwidth message sizes (K and M suffixes)")
	fs.IntVar(&o.rateSize, "rate-size", 64, "message size of the message-rate rows")
	fs.IntVar(&o.latSize, "lat-size", 64, "message size of the latency rows")
	fs.IntSliceVar(&o.mtus, "mtu", []int{1500}, "MTUs of the veth pair (the IB MTU follows as rxe derives it: 1500 gives 1024, 9000 gives 4096): every row runs at the first, the bandwidth rows (write, read, send) at each of the others as well (make bench: 1500,9000)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	fs.StringVar(&o.trace, "trace", "", "write an execution trace of the whole run to this file (go tool trace: goroutine wake-ups, blocking, system calls)")
	fs.StringVar(&o.memProfile, "memprofile", "", "write an allocation profile (every allocation sampled) to this file")
	fs.StringSliceVar(&addrs, "addrs", nil, "run between these two IPv4 addresses of this host (e.g. 127.0.0.1,127.0.0.2, or two addresses of one NIC, whose traffic the kernel loops back) instead of two network namespaces: no root needed, the udp backend and iwarp only, and --mtu is the path MTU assumed")
	fs.BoolVar(&o.noBaseline, "no-baseline", false, "measure softrdma alone (to profile it): no baseline, no ratio")
	fs.StringVar(&o.lib, "lib", "", "clib rows: the directory of the drop-in libibverbs.so.1 (make lib; default $"+launch.LibEnvVar+", else lib/ beside bin/)")
	fs.IntVar(&o.clibIters, "clib-iters", 5000, "clib rows: iterations (-n) of each run of ib_write_bw, ib_send_lat and softrdma perf")
	fs.StringVar(&o.pcap, "pcap", "", "write every frame both devices send and receive (iWARP: the TCP octets of the connections, as synthesised segments) to this pcap `FILE`; the bench moves hundreds of MB per row, so the file gets large (a tenth of the traffic or more, cut to --pcap-snaplen; gigabytes with whole frames), and the capture slows the devices, which the numbers show")
	fs.IntVar(&o.pcapSnaplen, "pcap-snaplen", benchDefaultSnaplen, "octets of each frame the --pcap file keeps (the headers: the rest is cut, the length on the wire kept; 0 keeps whole frames)")
	if err := parseFlags(fs, args, stderr); err != nil {
		return flagsExit(err)
	}
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
		o.sizes = append(o.sizes, int(n))
	}
	for _, a := range addrs {
		ip, err := netip.ParseAddr(a)
		if err != nil || !ip.Is4() {
			fmt.Fprintf(stderr, "softrdma bench: --addrs %q: want an IPv4 address\n", a)
			return 2
		}
		o.addrs = append(o.addrs, ip)
	}
	if len(o.addrs) > 0 && !fs.Changed("backend") {
		o.backends = []string{"udp"}
	}
	if err := o.check(); err != nil {
		fmt.Fprintf(stderr, "softrdma bench: %v\n", err)
		return 2
	}
	if len(o.addrs) > 0 {
		// This host's own addresses: no namespace to create.
	} else if err := netns.Check(); err != nil {
		fmt.Fprintf(stdout, "softrdma bench: skipped: cannot create network namespaces (%v); run it as root\n", err)
		return 0
	}
	if err := benchMain(o, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "softrdma bench: %v\n", err)
		return 1
	}
	return 0
}

func (o *benchOptions) check() error {
	for _, t := range o.transports {
		if t != "roce" && t != "iwarp" {
			return fmt.Errorf("--transport %q: want roce or iwarp", t)
		}
	}
	for _, b := range o.backends {
		if b != "udp" && b != "afpacket" && b != "tap" {
			return fmt.Errorf("--backend %q: want udp, afpacket or tap", b)
		}
	}
	for _, t := range o.tests {
		if !containsString(benchAllTests, t) {
			return fmt.Errorf("--tests %q: want %s", t, strings.Join(benchAllTests, ", "))
		}
	}
	if o.measure <= 0 || o.warm < 0 {
		return errors.New("--time must be positive and --warm not negative")
	}
	for _, n := range o.qps {
		if n < 1 || n > 4096 {
			return fmt.Errorf("--qps %d: want 1..4096 (the engine's MaxQP)", n)
		}
	}
	if o.clibIters < 5 {
		return fmt.Errorf("--clib-iters %d: perftest wants 5 or more", o.clibIters)
	}
	if o.rateSize < 1 || o.latSize < 2 {
		return errors.New("--rate-size must be at least 1 and --lat-size at least 2")
	}
	if len(o.mtus) == 0 {
		return errors.New("--mtu: want at least one MTU")
	}
	for _, m := range o.mtus {
		if m < 1280 || m > 65535 {
			return fmt.Errorf("--mtu %d: want 1280..65535", m)
		}
	}
	o.mtu = o.mtus[0]
	if n := len(o.addrs); n != 0 {
		if n != 2 || o.addrs[0] == o.addrs[1] {
			return fmt.Errorf("--addrs %v: want two different addresses", o.addrs)
		}
		for _, b := range o.backends {
			if b != "udp" {
				return fmt.Errorf("--backend %s with --addrs: only udp runs between two addresses of one host (afpacket and tap need interfaces of their own)", b)
			}
		}
	}
	if o.pcapSnaplen < 0 {
		return fmt.Errorf("--pcap-snaplen %d: want 0 (whole frames) or more", o.pcapSnaplen)
	}
	return nil
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// benchRow is one line of the table: a softrdma measurement beside its
// baseline. Ratio is softrdma/baseline for rates, baseline/softrdma for
// latencies, so that 1 always means "as good as the raw path".
type benchRow struct {
	Transport string  `json:"transport"`
	Backend   string  `json:"backend"`
	MTU       int     `json:"mtu"`  // the veth pair's (or, with --addrs, the assumed path MTU)
	Test      string  `json:"test"` // e.g. "WRITE bw", "SEND rate", "READ lat p99"
	Size      int     `json:"bytes"`
	Unit      string  `json:"unit"` // MiB/s, Mmsg/s or us
	Value     float64 `json:"softrdma"`
	Base      float64 `json:"baseline"`
	Ratio     float64 `json:"ratio"`
	Baseline  string  `json:"baseline_path"`  // what the baseline is
	Allocs    float64 `json:"allocs_per_msg"` // heap allocations per message (both ends, whole process)
	// CPUPerMsg is the process's CPU time (user and system, both ends, the
	// kernel's work on their behalf included) per message of the measured
	// window, in microseconds (bandwidth and rate rows): less disturbed by
	// other load on the machine than the rate is.
	CPUPerMsg float64 `json:"cpu_us_per_msg,omitempty"`
	Note      string  `json:"note,omitempty"`       // why a row has no number
	Samples   int     `json:"samples,omitempty"`    // messages (bw, rate) or round trips (lat) measured
	BaseCount int     `json:"base_count,omitempty"` // datagrams / round trips of the baseline
}

// benchReport is the --json output.
type benchReport struct {
	Date      string     `json:"date"`
	GoVersion string     `json:"go"`
	CPUs      int        `json:"cpus"`
	VethMTU   int        `json:"veth_mtu"`
	Measure   string     `json:"measure_per_row"`
	Rows      []benchRow `json:"rows"`
	Elapsed   string     `json:"elapsed"`
	// PcapFrames is how many frames the --pcap file holds, cut to PcapSnaplen octets.
	PcapFrames  uint64 `json:"pcap_frames,omitempty"`
	PcapSnaplen int    `json:"pcap_snaplen,omitempty"`
}

func benchMain(o *benchOptions, stdout, stderr io.Writer) error {
	start := time.Now()
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if o.trace != "" {
		f, err := os.Create(o.trace)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := trace.Start(f); err != nil {
			return err
		}
		defer trace.Stop()
	}
	if o.memProfile != "" {
		runtime.MemProfileRate = 1
		defer func() {
			if f, err := os.Create(o.memProfile); err == nil {
				pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}()
	}
	if o.pcap != "" {
		f, err := os.Create(o.pcap)
		if err != nil {
			return fmt.Errorf("--pcap: %w", err)
		}
		defer f.Close()
		if o.tap, err = pcaptap.New(f, o.pcapSnaplen); err != nil {
			return fmt.Errorf("--pcap: %w", err)
		}
	}
	progress := stderr
	if o.json {
		progress = io.Discard
	}
	var rows []benchRow
	emit := func(r benchRow) {
		r.MTU = o.mtu
		rows = append(rows, r)
		fmt.Fprintf(progress, "  %-5s %-8s %5d %-14s %8s  %s\n", r.Transport, r.Backend, r.MTU, r.Test, benchSizeString(r.Size), benchValue(r))
	}
	tests := o.tests
	engineTests := slices.DeleteFunc(slices.Clone(tests), func(t string) bool { return t == "clib" })
	for i, mtu := range o.mtus {
		if len(engineTests) == 0 {
			break // the clib rows alone
		}
		o.mtu, o.tests = mtu, tests
		if i > 0 {
			// The other MTUs: the bandwidth rows, where the packet size counts.
			o.tests = nil
			for _, t := range tests {
				if t == "write" || t == "read" || t == "send" {
					o.tests = append(o.tests, t)
				}
			}
			if len(o.tests) == 0 {
				break
			}
		}
		if err := benchAtMTU(o, progress, emit); err != nil {
			return err
		}
	}
	o.mtu, o.tests = o.mtus[0], tests
	if slices.Contains(tests, "clib") {
		benchRunCLib(o, progress, emit)
	}
	elapsed := time.Since(start)
	var pcapFrames uint64
	if o.tap != nil {
		// Every device and connection is closed: all their frames are in.
		if err := o.tap.Flush(); err != nil {
			return fmt.Errorf("--pcap: %w", err)
		}
		pcapFrames = o.tap.Frames()
		fmt.Fprintf(progress, "softrdma bench: --pcap %s: %d frames, each cut to %d octets\n", o.pcap, pcapFrames, o.tap.SnapLen())
	}
	if o.json {
		rep := benchReport{Date: start.UTC().Format(time.RFC3339), GoVersion: runtime.Version(), CPUs: runtime.NumCPU(),
			VethMTU: o.mtu, Measure: o.measure.String(), Rows: rows, Elapsed: elapsed.Round(time.Millisecond).String()}
		if o.tap != nil {
			rep.PcapFrames, rep.PcapSnaplen = pcapFrames, o.tap.SnapLen()
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	benchPrintTable(stdout, rows, o, elapsed)
	return nil
}

// benchAtMTU measures o.tests of every transport and backend on a pair of
// MTU o.mtu.
func benchAtMTU(o *benchOptions, progress io.Writer, emit func(benchRow)) error {
	pair, err := benchPair(o)
	if err != nil {
		return err
	}
	defer pair.Close()
	fmt.Fprintf(progress, "softrdma bench: %s, %v per measurement\n", benchPath(o, pair), o.measure)
	for _, t := range o.transports {
		backends := o.backends
		if t == "iwarp" {
			backends = []string{"tcp"}
		}
		for _, b := range backends {
			env, err := benchOpenEnv(pair, t, b, o)
			if err != nil {
				emit(benchRow{Transport: t, Backend: b, Test: "(all)", Note: "not measured: " + err.Error()})
				continue
			}
			benchRunEnv(env, o, emit)
			env.close()
		}
	}
	return nil
}

// benchPair is the two sides the bench runs between: two fresh namespaces on
// a veth pair, or with --addrs two addresses of this namespace.
func benchPair(o *benchOptions) (*netns.Pair, error) {
	if len(o.addrs) == 0 {
		return netns.NewPair(netns.PairConfig{MTU: o.mtu, Prefix: "softrdma-bench-"})
	}
	cur := netns.Current()
	side := func(a netip.Addr) netns.Side {
		// No link: a zero MAC for the baseline's frames, which the UDP socket strips.
		return netns.Side{NS: cur, IPv4: netip.PrefixFrom(a, 32), MTU: o.mtu, MAC: make(net.HardwareAddr, 6)}
	}
	return &netns.Pair{A: side(o.addrs[0]), B: side(o.addrs[1])}, nil
}

// benchPath says what the bench runs between, for its first lines.
func benchPath(o *benchOptions, pair *netns.Pair) string {
	if len(o.addrs) > 0 {
		return fmt.Sprintf("addresses %v and %v of this host (path MTU %d assumed)", o.addrs[0], o.addrs[1], o.mtu)
	}
	if pair != nil {
		return fmt.Sprintf("namespaces %s and %s, veth MTU %d", pair.A.NS.Name(), pair.B.NS.Name(), o.mtu)
	}
	m := strings.Trim(strings.Join(strings.Fields(fmt.Sprint(o.mtus)), ", "), "[]")
	return fmt.Sprintf("two network namespaces on a veth pair (MTU %s)", m)
}

// benchPrintTable prints the rows as one table.
func benchPrintTable(w io.Writer, rows []benchRow, o *benchOptions, elapsed time.Duration) {
	fmt.Fprintf(w, "softrdma bench: %s, %d CPUs, %v measured per number (%d rounds, alternating with the baseline), %v in all\n",
		benchPath(o, nil), runtime.NumCPU(), o.measure, benchRounds, elapsed.Round(time.Second))
	fmt.Fprintln(w, "ratio = softrdma/baseline for rates, baseline/softrdma for latencies (1 = as good as the raw path)")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "transport\tbackend\tmtu\ttest\tsize\tsoftrdma\tbaseline\tunit\tratio\tallocs/msg\tbaseline path")
	for _, r := range rows {
		if r.Note != "" {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t-\t-\t\t-\t\t%s\n", r.Transport, r.Backend, r.MTU, r.Test, benchSizeString(r.Size), r.Note)
			continue
		}
		ratio := fmt.Sprintf("%.2f", r.Ratio)
		if r.Base == 0 {
			ratio = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%9s\t%9s\t%s\t%5s\t%10s\t%s\n", r.Transport, r.Backend, r.MTU, r.Test, benchSizeString(r.Size),
			benchNum(r.Value), benchNum(r.Base), r.Unit, ratio, benchNum(r.Allocs), r.Baseline)
	}
	tw.Flush()
}

func benchValue(r benchRow) string {
	if r.Note != "" {
		return r.Note
	}
	return fmt.Sprintf("%s %s vs %s: %.2f (%s allocs/msg)", benchNum(r.Value), r.Unit, benchNum(r.Base), r.Ratio, benchNum(r.Allocs))
}

// benchNum prints a number with three significant digits or so.
func benchNum(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case v >= 0.01:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case v >= 0.001:
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
	return "<0.001"
}

func benchSizeString(n int) string {
	switch {
	case n == 0:
		return ""
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + " KiB"
	}
	return strconv.Itoa(n) + " B"
}
