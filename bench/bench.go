// Package bench is softrdma bench, the benchmark suite behind `make bench`. It creates two
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
package bench

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

	"github.com/softrdma/softrdma/counters"
	"github.com/softrdma/softrdma/netio"
	"github.com/softrdma/softrdma/netio/netns"
	"github.com/softrdma/softrdma/pcaptap"
	"github.com/softrdma/softrdma/perf"
	"github.com/softrdma/softrdma/progress"
)

// Options are softrdma bench's flags.
type Options struct {
	JSON       bool
	Measure    time.Duration // measured time of each measurement
	Warm       time.Duration // unmeasured time before it
	Transports []string      // roce, iwarp
	Backends   []string      // RoCE backends: udp, afpacket, tap
	Tests      []string      // write, read, send (bandwidth), rate, lat
	Sizes      []int         // bandwidth message sizes
	RateSize   int           // message rate size
	LatSize    int           // latency size
	QPs        []int         // QP pairs of the scale rows (qps)
	mtu        int           // veth MTU of the pair being measured (mtus[0], then the others)
	MTUs       []int         // --mtu: the first for every row, the others for the bandwidth rows
	CPUProfile string
	Trace      string // --trace: an execution trace (go tool trace)
	MemProfile string
	NoBaseline bool   // for profiling softrdma alone
	Lib        string // --lib: the drop-in library's directory (clib rows)
	CLibIters  int    // --clib-iters: -n of the clib rows' tools
	// Addrs, if set, are two IPv4 addresses of this host to run between
	// (--addrs) instead of two namespaces on a veth pair.
	Addrs []netip.Addr

	Pcap        string // --pcap FILE
	PcapSnaplen int    // --pcap-snaplen
	// QPTimeout is the RoCE RC QPs' local ACK timeout (4.096 µs ×
	// 2^QPTimeout, 0 to 31); nil is perftest's default, perf.DefQPTimeout.
	QPTimeout *int
	tap       *pcaptap.Tap // the --pcap file while it runs
	// counters are the devices' counters of every transport and backend
	// measured, each taken before it closed (Report.Counters).
	counters []counters.Device
}

// qpTimeout is the local ACK timeout the RoCE QPs get.
func (o *Options) qpTimeout() uint8 {
	if o.QPTimeout == nil {
		return perf.DefQPTimeout
	}
	return uint8(*o.QPTimeout)
}

// DefaultSnaplen is --pcap-snaplen's default: every header of a RoCE
// packet (Ethernet, IPv6, UDP, BTH and the largest extension header, the 28
// octets of an AtomicETH: 102 octets) and of an iWARP FPDU (Ethernet, IP, TCP,
// MPA, DDP and RDMAP, a Read Request's 28 octets included) fits in it.
const DefaultSnaplen = 128

const Usage = `usage: softrdma bench [flags]

Runs the benchmark suite between two network namespaces that it creates (needs
root) and prints one table: for each transport and backend, WRITE/READ/SEND
bandwidth, the 64-byte message rate and latency, each beside the raw baseline
of the same path measured in the same run, and the ratio. Without root it says
so and exits 0.

flags:
`

// AllTests are the kinds of row, in table order.
var AllTests = []string{"write", "read", "send", "rate", "lat", "qps", "clib"}

// Check checks the options and completes them (the first MTU is the one
// every row runs at).
func (o *Options) Check() error { return o.check() }

func (o *Options) check() error {
	if o.QPTimeout != nil && (*o.QPTimeout < 0 || *o.QPTimeout > 31) {
		return fmt.Errorf("--qp-timeout %d: want 0 to 31", *o.QPTimeout)
	}
	for _, t := range o.Transports {
		if t != "roce" && t != "iwarp" {
			return fmt.Errorf("--transport %q: want roce or iwarp", t)
		}
	}
	for _, b := range o.Backends {
		if b != "udp" && b != "afpacket" && b != "tap" {
			return fmt.Errorf("--backend %q: want udp, afpacket or tap", b)
		}
	}
	for _, t := range o.Tests {
		if !containsString(AllTests, t) {
			return fmt.Errorf("--tests %q: want %s", t, strings.Join(AllTests, ", "))
		}
	}
	if o.Measure <= 0 || o.Warm < 0 {
		return errors.New("--time must be positive and --warm not negative")
	}
	for _, n := range o.QPs {
		if n < 1 || n > 4096 {
			return fmt.Errorf("--qps %d: want 1..4096 (the engine's MaxQP)", n)
		}
	}
	if o.CLibIters < 5 {
		return fmt.Errorf("--clib-iters %d: perftest wants 5 or more", o.CLibIters)
	}
	if o.RateSize < 1 || o.LatSize < 2 {
		return errors.New("--rate-size must be at least 1 and --lat-size at least 2")
	}
	if len(o.MTUs) == 0 {
		return errors.New("--mtu: want at least one MTU")
	}
	for _, m := range o.MTUs {
		if m < 1280 || m > 65535 {
			return fmt.Errorf("--mtu %d: want 1280..65535", m)
		}
	}
	o.mtu = o.MTUs[0]
	if n := len(o.Addrs); n != 0 {
		if n != 2 || o.Addrs[0] == o.Addrs[1] {
			return fmt.Errorf("--addrs %v: want two different addresses", o.Addrs)
		}
		for _, b := range o.Backends {
			if b != "udp" {
				return fmt.Errorf("--backend %s with --addrs: only udp runs between two addresses of one host (afpacket and tap need interfaces of their own)", b)
			}
		}
	}
	if o.PcapSnaplen < 0 {
		return fmt.Errorf("--pcap-snaplen %d: want 0 (whole frames) or more", o.PcapSnaplen)
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

// Row is one line of the table: a softrdma measurement beside its
// baseline. Ratio is softrdma/baseline for rates, baseline/softrdma for
// latencies, so that 1 always means "as good as the raw path".
type Row struct {
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

// Report is the --json output.
type Report struct {
	Date      string `json:"date"`
	GoVersion string `json:"go"`
	CPUs      int    `json:"cpus"`
	VethMTU   int    `json:"veth_mtu"`
	Measure   string `json:"measure_per_row"`
	Rows      []Row  `json:"rows"`
	Elapsed   string `json:"elapsed"`
	// PcapFrames is how many frames the --pcap file holds, cut to PcapSnaplen octets.
	PcapFrames  uint64 `json:"pcap_frames,omitempty"`
	PcapSnaplen int    `json:"pcap_snaplen,omitempty"`
	// Counters are the counters of each transport's, backend's and MTU's
	// two devices (named TRANSPORT-BACKEND-MTU-a and -b, a the passive
	// side) after their last row, as softrdma stat gives them: what was
	// retransmitted, NAKed or dropped while the rows ran.
	Counters counters.Snapshot `json:"counters"`
}

func Main(o *Options, stdout, stderr io.Writer) error {
	start := time.Now()
	o.counters = nil
	if o.CPUProfile != "" {
		f, err := os.Create(o.CPUProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if o.Trace != "" {
		f, err := os.Create(o.Trace)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := trace.Start(f); err != nil {
			return err
		}
		defer trace.Stop()
	}
	if o.MemProfile != "" {
		runtime.MemProfileRate = 1
		defer func() {
			if f, err := os.Create(o.MemProfile); err == nil {
				pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}()
	}
	if o.Pcap != "" {
		f, err := os.Create(o.Pcap)
		if err != nil {
			return fmt.Errorf("--pcap: %w", err)
		}
		defer f.Close()
		if o.tap, err = pcaptap.New(f, netio.FormatForPath(o.Pcap), o.PcapSnaplen); err != nil {
			return fmt.Errorf("--pcap: %w", err)
		}
	}
	// Each row as it completes, on a terminal only: piped or redirected,
	// stderr gets errors and the --pcap line alone.
	onTerminal := !o.JSON && progress.IsTerminal(stderr)
	progress := io.Discard
	if onTerminal {
		progress = stderr
	}
	var rows []Row
	emit := func(r Row) {
		r.MTU = o.mtu
		rows = append(rows, r)
		fmt.Fprintf(progress, "  %-5s %-8s %5d %-14s %8s  %s\n", r.Transport, r.Backend, r.MTU, r.Test, sizeString(r.Size), value(r))
	}
	tests := o.Tests
	engineTests := slices.DeleteFunc(slices.Clone(tests), func(t string) bool { return t == "clib" })
	for i, mtu := range o.MTUs {
		if len(engineTests) == 0 {
			break // the clib rows alone
		}
		o.mtu, o.Tests = mtu, tests
		if i > 0 {
			// The other MTUs: the bandwidth rows, where the packet size counts.
			o.Tests = nil
			for _, t := range tests {
				if t == "write" || t == "read" || t == "send" {
					o.Tests = append(o.Tests, t)
				}
			}
			if len(o.Tests) == 0 {
				break
			}
		}
		if err := atMTU(o, progress, emit); err != nil {
			return err
		}
	}
	o.mtu, o.Tests = o.MTUs[0], tests
	if slices.Contains(tests, "clib") {
		runCLib(o, progress, emit)
	}
	elapsed := time.Since(start)
	var pcapFrames uint64
	if o.tap != nil {
		// Every device and connection is closed: all their frames are in.
		if err := o.tap.Flush(); err != nil {
			return fmt.Errorf("--pcap: %w", err)
		}
		pcapFrames = o.tap.Frames()
		if !o.JSON {
			fmt.Fprintf(stderr, "softrdma bench: --pcap %s: %d frames, each cut to %d octets\n", o.Pcap, pcapFrames, o.tap.SnapLen())
		}
	}
	if o.JSON {
		rep := Report{Date: start.UTC().Format(time.RFC3339), GoVersion: runtime.Version(), CPUs: runtime.NumCPU(),
			VethMTU: o.mtu, Measure: o.Measure.String(), Rows: rows, Elapsed: elapsed.Round(time.Millisecond).String(),
			Counters: counters.Snapshot{Devices: append([]counters.Device{}, o.counters...)}}
		if o.tap != nil {
			rep.PcapFrames, rep.PcapSnaplen = pcapFrames, o.tap.SnapLen()
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printTable(stdout, rows, o, elapsed)
	return nil
}

// atMTU measures o.Tests of every transport and backend on a pair of
// MTU o.mtu.
func atMTU(o *Options, progress io.Writer, emit func(Row)) error {
	pair, err := pair(o)
	if err != nil {
		return err
	}
	defer pair.Close()
	fmt.Fprintf(progress, "softrdma bench: %s, %v per measurement\n", path(o, pair), o.Measure)
	for _, t := range o.Transports {
		backends := o.Backends
		if t == "iwarp" {
			backends = []string{"tcp"}
		}
		for _, b := range backends {
			env, err := openEnv(pair, t, b, o)
			if err != nil {
				emit(Row{Transport: t, Backend: b, Test: "(all)", Note: "not measured: " + err.Error()})
				continue
			}
			runEnv(env, o, emit)
			if env.devices != nil {
				o.counters = append(o.counters, env.devices(o.mtu)...)
			}
			env.close()
		}
	}
	return nil
}

// pair is the two sides the bench runs between: two fresh namespaces on
// a veth pair, or with --addrs two addresses of this namespace.
func pair(o *Options) (*netns.Pair, error) {
	if len(o.Addrs) == 0 {
		p, err := netns.NewPair(netns.PairConfig{MTU: o.mtu, Prefix: "softrdma-bench-"})
		if err != nil {
			return p, err
		}
		if err := staticNeighbors(p); err != nil {
			p.Close()
			return nil, err
		}
		return p, nil
	}
	cur := netns.Current()
	side := func(a netip.Addr) netns.Side {
		// No link: a zero MAC for the baseline's frames, which the UDP socket strips.
		return netns.Side{NS: cur, IPv4: netip.PrefixFrom(a, 32), MTU: o.mtu, MAC: make(net.HardwareAddr, 6)}
	}
	return &netns.Pair{A: side(o.Addrs[0]), B: side(o.Addrs[1])}, nil
}

// path says what the bench runs between, for its first lines.
func path(o *Options, pair *netns.Pair) string {
	if len(o.Addrs) > 0 {
		return fmt.Sprintf("addresses %v and %v of this host (path MTU %d assumed)", o.Addrs[0], o.Addrs[1], o.mtu)
	}
	if pair != nil {
		return fmt.Sprintf("namespaces %s and %s, veth MTU %d", pair.A.NS.Name(), pair.B.NS.Name(), o.mtu)
	}
	m := strings.Trim(strings.Join(strings.Fields(fmt.Sprint(o.MTUs)), ", "), "[]")
	return fmt.Sprintf("two network namespaces on a veth pair (MTU %s)", m)
}

// printTable prints the rows as one table.
func printTable(w io.Writer, rows []Row, o *Options, elapsed time.Duration) {
	fmt.Fprintf(w, "softrdma bench: %s, %d CPUs, %v measured per number (%d rounds, alternating with the baseline), %v in all\n",
		path(o, nil), runtime.NumCPU(), o.Measure, rounds, elapsed.Round(time.Second))
	fmt.Fprintln(w, "ratio = softrdma/baseline for rates, baseline/softrdma for latencies (1 = as good as the raw path)")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "transport\tbackend\tmtu\ttest\tsize\tsoftrdma\tbaseline\tunit\tratio\tallocs/msg\tbaseline path")
	for _, r := range rows {
		if r.Note != "" {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t-\t-\t\t-\t\t%s\n", r.Transport, r.Backend, r.MTU, r.Test, sizeString(r.Size), r.Note)
			continue
		}
		ratio := fmt.Sprintf("%.2f", r.Ratio)
		if r.Base == 0 {
			ratio = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%9s\t%9s\t%s\t%5s\t%10s\t%s\n", r.Transport, r.Backend, r.MTU, r.Test, sizeString(r.Size),
			num(r.Value), num(r.Base), r.Unit, ratio, num(r.Allocs), r.Baseline)
	}
	tw.Flush()
}

func value(r Row) string {
	if r.Note != "" {
		return r.Note
	}
	if r.Base == 0 {
		// No baseline (--no-baseline, or a row with none): no ratio, as the
		// table's "-".
		return fmt.Sprintf("%s %s (%s allocs/msg)", num(r.Value), r.Unit, num(r.Allocs))
	}
	return fmt.Sprintf("%s %s vs %s: %.2f (%s allocs/msg)", num(r.Value), r.Unit, num(r.Base), r.Ratio, num(r.Allocs))
}

// num prints a number with three significant digits or so.
func num(v float64) string {
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

func sizeString(n int) string {
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
