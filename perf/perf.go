// Package perf is softrdma perf: perftest's ib_write_bw, ib_read_bw,
// ib_send_bw, ib_atomic_bw, ib_write_lat, ib_read_lat and ib_send_lat over a
// softrdma device (package device), RoCE or iWARP. It speaks perftest 4.5-0.17's out-of-band exchange (package
// oob/perftest) and measures the way ib_write_bw and friends do, so that either
// side can be the real tool. The defaults and the rules that derive one
// parameter from another (tx depth, CQ moderation, rx depth, ...) are read from
// perftest's perftest_parameters.c (init_perftest_params, force_dependecies,
// parser); the measurement loops from perftest_resources.c (run_iter_bw,
// run_iter_bw_server, run_iter_bi, run_iter_lat, run_iter_lat_write,
// run_iter_lat_send); the report arithmetic from print_report_bw and
// print_report_lat. No code was taken from perftest.
package perf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/softrdma/softrdma/oob/perftest"
)

// verb is perftest's VerbType: what the test's work requests do.
type verb uint8

const (
	verbSend verb = iota
	verbWrite
	verbRead
	verbAtomic
)

// verbNames are testsStr[verb]: the first word of the test's title.
var verbNames = [...]string{verbSend: "Send", verbWrite: "RDMA_Write", verbRead: "RDMA_Read", verbAtomic: "Atomic"}

// atomicTypes are atomicTypesStr: -A's values.
var atomicTypes = [...]string{"CMP_AND_SWAP", "FETCH_AND_ADD"}

// perftest's defaults (perftest_parameters.h).
const (
	defSizeBW     = 65536
	defSizeLat    = 2
	defSizeAtomic = 8
	defIters      = 1000
	defItersWB    = 5000 // ib_write_bw
	defTxBW       = 128
	defTxLat      = 1
	defRxSend     = 512
	ucMaxRx       = 16000 // UC_MAX_RX
	defCQMod      = 100
	DefQPTimeout  = 14
	DefRetryCount = 7   // DEF_RETRY_COUNT
	maxInline     = 912 // MAX_INLINE
	maxInlineUD   = 884 // MAX_INLINE_UD
	defDuration   = 5   // DEF_DURATION: seconds
	minIters      = 5
	maxIters      = 100000000
	maxSize       = 8388608 // MAX_SIZE: -a's largest message, and its buffers
	CQModLimit    = 8192    // MSG_SIZE_CQ_MOD_LIMIT: larger messages signal every WR
	noPeakIters   = 20000   // beyond this many iterations the peak is not computed
	MinRNRTimer   = 12
	hopLimit      = 0xFF // ctx_modify_qp_to_rtr's grh.hop_limit
)

// Options are the flags of softrdma perf, named as perftest names them.
type Options struct {
	Test      perftest.Test
	Host      string // the server to connect to; "" runs the server
	Size      string // -s, with perftest's K and M suffixes
	Iters     int
	Duration  int
	Margin    int
	All       bool
	GIDIndex  int
	Port      int
	QPs       int
	CPUFreq   bool
	Gbits     bool
	MTU       int
	Device    string
	TxDepth   int
	RxDepth   int
	CQMod     int
	OutReads  int
	QPTimeout int
	Atomic    string
	Duplex    bool
	NoPeak    bool
	Conn      string
	RDMACM    bool
	UseCM     bool
	JSON      bool
	// OutJSON and OutJSONFile are perftest's --out_json and --out_json_file:
	// perftest's report file (outjson.go).
	OutJSON     bool
	OutJSONFile string
	Inline      int  // -I, perftest's --inline_size (0, as perftest on rxe, unless given)
	RetryCount  int  // --retry_count: the rdma_cm connections' retry count
	ReportBoth  bool // --report-both: -b's two directions, each on its own
	// RunInfinitely is --run_infinitely: a _bw test that runs until it is
	// stopped, printing a row every -D seconds (default 5).
	RunInfinitely bool
	// Context, if set, stops the run when it is done (softrdma perf
	// --run_infinitely: SIGINT and SIGTERM; tests).
	Context   context.Context
	Transport string
	CRC       string // iWARP's MPA CRC policy
	Backend   string
	Pcap      string
	TAPPeer   string
	TAPName   string
	Wait      time.Duration
	// CPUProfile, if set, is where a CPU profile of the run goes.
	CPUProfile string

	Set map[string]bool // flags given on the command line

	// Listening, if set, is told the server's listening address (tests use
	// -p 0 and learn the port from it).
	Listening func(net.Addr)
}

// context is Options.Context, or context.Background.
func (o *Options) context() context.Context {
	if o.Context != nil {
		return o.Context
	}
	return context.Background()
}

// params are perftest's user_param after parser and force_dependecies: the
// values the test runs with.
type params struct {
	test      perftest.Test
	verb      verb
	bw        bool // a _bw test (perftest's tst == BW)
	server    bool
	size      uint64
	iters     int
	duration  int // seconds; 0 = an iterations test
	margin    int
	all       bool
	qps       int
	txDepth   int
	rxDepth   int
	cqMod     int
	outReads  int   // -o as given; the device's maximum when 0 (read and atomic tests)
	qpTimeout uint8 // -u: the RC QPs' local ACK timeout, 4.096 µs × 2^qpTimeout
	atomic    int   // index in atomicTypes
	duplex    bool
	noPeak    bool
	gbits     bool
	gidIndex  int    // -x, or -1
	mtu       int    // -m in bytes, or 0
	rdmaCM    bool   // -R: rdma_cm connects the test QPs
	useCM     bool   // -R or -z: the parameters travel over rdma_cm
	conn      string // -c: RC, UC or UD
	inline    int    // -I: sends of at most this many bytes are posted inline
	retry     uint8  // --retry_count, at most 7 (the CM REQ's 3-bit field)
	// reportBoth is --report-both: -b prints each direction's row too.
	reportBoth bool
	// infinite is --run_infinitely: duration mode with no end, a row every
	// duration seconds (perftest's RUN_INFINITELY).
	infinite bool
}

func (p *params) durationMode() bool { return p.duration > 0 }

// inlined says whether a message of size bytes is posted inline
// (ctx_set_send_reg_wqes: size <= inline_size; inline is 0 for READs and
// atomics).
func (p *params) inlined(size uint64) bool { return size <= uint64(p.inline) }

// Main runs a parsed command; its exit code is perftest's idea of success.
func Main(o *Options, stdout, stderr io.Writer) int {
	p, err := derive(o)
	if err != nil {
		fmt.Fprintf(stderr, "softrdma perf: %v\n", err)
		return 2
	}
	if o.CPUProfile != "" {
		f, err := os.Create(o.CPUProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(stderr, "softrdma perf: --cpuprofile: %v\n", err)
			return 2
		}
		defer f.Close()
		defer pprof.StopCPUProfile()
	}
	if err := run(o, p, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "softrdma perf: %v\n", err)
		return 1
	}
	return 0
}

const Usage = `usage: softrdma perf TEST [flags] [HOST]

TEST is write_bw, read_bw, send_bw, atomic_bw, write_lat, read_lat or send_lat
(also with perftest's ib_ prefix). Without HOST it is the server and waits for
a client; with HOST it connects to the server there. Either side may be
perftest's own tool (ib_write_bw ...) on another machine.

flags:
`

// AddFlags defines perftest's flags on fs, bound to o's fields, with
// perftest's defaults.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVarP(&o.Size, "size", "s", "", "message size in bytes, with a K or M suffix (default 65536 for _bw, 2 for _lat, 8 for atomics)")
	fs.IntVarP(&o.Iters, "iters", "n", 0, "iterations (default 5000 for write_bw, 1000 otherwise)")
	fs.IntVarP(&o.Duration, "duration", "D", 0, "run for this many seconds instead of -n iterations")
	fs.IntVarP(&o.Margin, "margin", "f", -1, "with -D, seconds at each end not measured (default duration/4)")
	fs.BoolVarP(&o.All, "all", "a", false, "run every message size from 2 to 2^23 bytes")
	fs.IntVarP(&o.GIDIndex, "gid-index", "x", -1, "source GID index (default: the first of the peer's IP family)")
	fs.IntVarP(&o.Port, "port", "p", perftest.DefaultPort, "TCP port of the out-of-band exchange")
	fs.IntVarP(&o.QPs, "qp", "q", 1, "number of QPs (_bw tests)")
	fs.BoolVarP(&o.CPUFreq, "CPU-freq", "F", false, "accepted for perftest compatibility (softrdma measures with the monotonic clock)")
	fs.BoolVar(&o.Gbits, "report_gbits", false, "report bandwidth in Gb/s instead of MB/s (2^20 bytes/s)")
	fs.IntVarP(&o.MTU, "mtu", "m", 0, "IB MTU: 256, 512, 1024, 2048 or 4096 (default: the port's active MTU)")
	fs.StringVarP(&o.Device, "ib-dev", "d", "", "device: an interface name or one of its IP addresses (default: the interface towards the peer)")
	fs.IntVarP(&o.TxDepth, "tx-depth", "t", 0, "send queue depth: WRs in flight (default 128 for _bw, 1 for _lat; at most -n)")
	fs.IntVarP(&o.RxDepth, "rx-depth", "r", 0, "receive queue depth of send tests (default 512, at most -n)")
	fs.IntVarP(&o.CQMod, "cq-mod", "Q", 0, "signal one completion every this many WRs (default 100, 1 for messages above 8192 bytes)")
	fs.IntVarP(&o.OutReads, "outs", "o", 0, "outstanding READs/atomics (read and atomic tests; default the device's maximum, 128)")
	fs.IntVarP(&o.QPTimeout, "qp-timeout", "u", DefQPTimeout, "QP timeout: an unacknowledged request is resent after 4.096 µs × 2^timeout (0 to 31)")
	fs.StringVarP(&o.Atomic, "atomic_type", "A", "FETCH_AND_ADD", "atomic_bw's operation: CMP_AND_SWAP or FETCH_AND_ADD")
	fs.BoolVarP(&o.Duplex, "bidirectional", "b", false, "measure both directions at once (_bw tests)")
	fs.BoolVarP(&o.NoPeak, "noPeak", "N", false, "do not compute the peak bandwidth")
	fs.StringVarP(&o.Conn, "connection", "c", "RC", "connection type: RC; UC (write and send tests; not with -R) or UD (send tests); iWARP is RC only")
	fs.BoolVarP(&o.RDMACM, "rdma_cm", "R", false, "connect the test QPs with rdma_cm, and exchange the parameters over an rdma_cm QP (RoCE: IB CM on QP1; iWARP: TCP and MPA)")
	fs.BoolVarP(&o.UseCM, "comm_rdma_cm", "z", false, "exchange the parameters over an rdma_cm QP; the test QPs are connected by their keys")
	fs.BoolVar(&o.JSON, "json", false, "print the results as JSON (snake_case keys) instead of perftest's table")
	fs.BoolVar(&o.OutJSON, "out_json", false, "also write perftest's report file (perftest's own format, not strict JSON) to --out_json_file")
	fs.StringVar(&o.OutJSONFile, "out_json_file", DefaultOutJSONFile, "the --out_json file")
	fs.IntVarP(&o.Inline, "inline_size", "I", 0, "post WRITEs and SENDs of at most this many bytes inline (0 to 912 as perftest takes it, but softrdma's devices inline at most 512 bytes; 0, as perftest on rxe, unless given)")
	fs.IntVar(&o.RetryCount, "retry_count", DefRetryCount, "-R: the transport retry count the rdma_cm connections ask for (0 or more; the CM carries at most 7)")
	fs.BoolVar(&o.ReportBoth, "report-both", false, "-b: also print each direction's results (Local results, Remote results)")
	fs.BoolVar(&o.RunInfinitely, "run_infinitely", false, "_bw tests: run until stopped (Ctrl-C), printing the results of every -D seconds (default 5)")
	fs.StringVar(&o.Transport, "transport", "roce", "roce or iwarp (iWARP over TCP, with -R: rdma_cm over MPA, as perftest over siw)")
	fs.StringVar(&o.CRC, "crc", "accept", "--transport iwarp: MPA CRCs: accept (siw's default: if the peer asks), request or require")
	fs.StringVar(&o.Backend, "backend", "udp", "how RoCE frames move: udp (a UDP socket on port 4791, no root), afpacket (raw frames on -d INTERFACE) or tap (a TAP device whose host has the address -d ADDR)")
	fs.StringVar(&o.Pcap, "pcap", "", "write every RoCE frame sent and received to this pcap file (iWARP: each connection's TCP octets, as synthesised segments) (pcapng if its name ends in .pcapng)")
	fs.StringVar(&o.TAPPeer, "tap-peer", "", "--backend tap: ADDR/PREFIX to give the kernel's side of the TAP device")
	fs.StringVar(&o.TAPName, "tap-name", "", "--backend tap: the TAP device to create or attach to (default: the kernel picks tapN)")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of this process's run to this file")
	fs.DurationVar(&o.Wait, "wait", DialWait, "client: how long to retry connecting to a server that is not listening yet")
}

// ErrNoTest is SetArgs's error when no TEST is given.
var ErrNoTest = errors.New("which test? write_bw, read_bw, send_bw, atomic_bw, write_lat, read_lat or send_lat")

// SetArgs takes what fs parsed besides the flags' values: the flags given
// (Options.Set), the TEST and the HOST.
func (o *Options) SetArgs(fs *pflag.FlagSet) error {
	o.Set = map[string]bool{}
	fs.Visit(func(f *pflag.Flag) { o.Set[f.Name] = true })
	pos := fs.Args()
	if len(pos) == 0 {
		return ErrNoTest
	}
	t, err := perftest.ParseTest(pos[0])
	if err != nil || t == perftest.AtomicLat {
		return fmt.Errorf("unknown test %q: want write_bw, read_bw, send_bw, atomic_bw, write_lat, read_lat or send_lat", pos[0])
	}
	o.Test = t
	switch len(pos) {
	case 1:
	case 2:
		o.Host = pos[1]
	default:
		return fmt.Errorf("too many arguments: %q", pos[2:])
	}
	return nil
}

// ParseSize reads -s as perftest does: a number (strtol base 0) with an
// optional K or M suffix.
func ParseSize(s string) (uint64, error) {
	factor := uint64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		factor, s = 1024, strings.TrimSuffix(s, "K")
	case strings.HasSuffix(s, "M"):
		factor, s = 1024*1024, strings.TrimSuffix(s, "M")
	}
	v, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		return 0, fmt.Errorf("-s %q: not a number", s)
	}
	// v is compared before it is multiplied: 2^54K would wrap to 0.
	if v < 1 || uint64(v) > (1<<31-1)/factor {
		return 0, fmt.Errorf("-s: Message Size should be between 1 and %d", uint32(1<<31-1))
	}
	size := uint64(v) * factor
	if size > 1<<31-1 {
		return 0, fmt.Errorf("-s: Message Size should be between 1 and %d", uint32(1<<31-1))
	}
	return size, nil
}

// derive applies perftest's defaults and dependencies to the options:
// checkOptions, then init_perftest_params (setDefaults), parser (parseOptions)
// and force_dependecies (forceDependencies).
func derive(o *Options) (*params, error) {
	if err := checkOptions(o); err != nil {
		return nil, err
	}
	t := o.Test
	p := &params{test: t, bw: t.Bandwidth(), server: o.Host == "", all: o.All, qps: o.QPs,
		duplex: o.Duplex, noPeak: o.NoPeak, gbits: o.Gbits, gidIndex: o.GIDIndex, outReads: o.OutReads,
		rdmaCM: o.RDMACM, useCM: o.RDMACM || o.UseCM, qpTimeout: uint8(o.QPTimeout), conn: strings.ToUpper(o.Conn),
		reportBoth: o.ReportBoth}
	switch t {
	case perftest.WriteBW, perftest.WriteLat:
		p.verb = verbWrite
	case perftest.ReadBW, perftest.ReadLat:
		p.verb = verbRead
	case perftest.SendBW, perftest.SendLat:
		p.verb = verbSend
	case perftest.AtomicBW:
		p.verb = verbAtomic
	default:
		return nil, fmt.Errorf("test %v is not implemented", t)
	}
	p.setDefaults()
	if err := p.parseOptions(o); err != nil {
		return nil, err
	}
	if err := p.forceDependencies(o); err != nil {
		return nil, err
	}
	return p, nil
}

// checkOptions checks what softrdma adds to perftest's options: the
// transport, the backend and the connection type.
func checkOptions(o *Options) error {
	switch o.Transport {
	case "roce":
		if o.Set["crc"] {
			return errors.New("--crc is iWARP's (MPA CRCs): use it with --transport iwarp")
		}
	case "iwarp":
		if err := checkIWARP(o); err != nil { // iwarp.go
			return err
		}
	default:
		return fmt.Errorf("--transport %q: want roce or iwarp", o.Transport)
	}
	switch o.Backend {
	case "udp", "afpacket", "tap":
	case "tcp": // iWARP's
	default:
		return fmt.Errorf("--backend %q: want udp, afpacket or tap", o.Backend)
	}
	return checkConn(o) // conn.go
}

// setDefaults is init_perftest_params: the defaults of the test's verb and
// kind.
func (p *params) setDefaults() {
	t := p.test
	p.size = defSizeLat
	if p.bw {
		p.size = defSizeBW
	}
	if p.verb == verbAtomic {
		p.size = defSizeAtomic
	}
	p.iters = defIters
	if t == perftest.WriteBW {
		p.iters = defItersWB
	}
	p.txDepth = defTxLat
	if p.bw {
		p.txDepth = defTxBW
	}
	p.rxDepth = 1
	if p.verb == verbSend {
		p.rxDepth = defRxSend
	}
	p.cqMod = defCQMod
	p.atomic = 1 // FETCH_AND_ADD
}

// parseOptions is perftest's parser: each option given replaces its default,
// after its range check.
func (p *params) parseOptions(o *Options) error {
	if o.Set["size"] {
		size, err := ParseSize(o.Size)
		if err != nil {
			return err
		}
		if p.verb == verbAtomic && size != defSizeAtomic {
			return errors.New("Message size cannot be changed for Atomic tests")
		}
		p.size = size
	}
	if o.Set["iters"] {
		if o.Iters < minIters || o.Iters > maxIters {
			return fmt.Errorf("-n %d: Iteration num should be between %d and %d", o.Iters, minIters, maxIters)
		}
		p.iters = o.Iters
	}
	if o.Set["tx-depth"] {
		if o.TxDepth < 1 || o.TxDepth > 15000 {
			return fmt.Errorf("-t %d: Tx depth should be between 1 and 15000", o.TxDepth)
		}
		p.txDepth = o.TxDepth
	}
	if o.Set["rx-depth"] {
		if o.RxDepth < 1 || o.RxDepth > 15000 {
			return fmt.Errorf("-r %d: Rx depth should be between 1 and 15000", o.RxDepth)
		}
		if p.verb != verbSend && o.RxDepth > 1 {
			return errors.New("-r: rx depth is for send tests")
		}
		p.rxDepth = o.RxDepth
	}
	if o.Set["cq-mod"] {
		if o.CQMod < 1 || o.CQMod > 1024 {
			return fmt.Errorf("-Q %d: CQ moderation should be between 1 and 1024", o.CQMod)
		}
		p.cqMod = o.CQMod
	}
	if o.Set["qp"] {
		if !p.bw {
			return errors.New("-q: Multiple QPs only available on bw tests")
		}
		if o.QPs < 1 || o.QPs > 16384 {
			return fmt.Errorf("-q %d: num of Qps should be between 1 and 16384", o.QPs)
		}
	}
	if o.Set["outs"] && p.verb != verbRead && p.verb != verbAtomic {
		return errors.New("-o: Setting Outstanding reads only available on READ verb")
	}
	if o.Set["atomic_type"] {
		if p.verb != verbAtomic {
			return errors.New("-A: You are not running the atomic_lat/bw test!")
		}
		switch o.Atomic {
		case atomicTypes[0]:
			p.atomic = 0
		case atomicTypes[1]:
			p.atomic = 1
		default:
			return fmt.Errorf("-A %q: Invalid Atomic type! please choose from {CMP_AND_SWAP,FETCH_AND_ADD}", o.Atomic)
		}
	}
	if o.Duplex && !p.bw {
		return errors.New("-b: Bidirectional is only available in BW test")
	}
	if o.NoPeak && !p.bw {
		return errors.New("-N: NoPeak only valid for BW tests")
	}
	if o.Set["gid-index"] && (o.GIDIndex < 0 || o.GIDIndex > 255) {
		return fmt.Errorf("-x %d: Gid index should be between 0 and 255", o.GIDIndex)
	}
	if o.Set["mtu"] {
		if _, ok := perftest.MTUFromBytes(o.MTU); !ok {
			return fmt.Errorf("-m %d: Invalid MTU - %d (want 256, 512, 1024, 2048 or 4096)", o.MTU, o.MTU)
		}
		p.mtu = o.MTU
	}
	// The local ACK timeout is a 5-bit field (IBTA 11.2.4.2; rxe_qp_chk_attr
	// refuses more than 31 with EINVAL).
	if o.QPTimeout < 0 || o.QPTimeout > 31 {
		return fmt.Errorf("-u %d: QP timeout out of range: want 0 to 31", o.QPTimeout)
	}
	if o.Set["inline_size"] {
		if o.Inline < 0 || o.Inline > maxInline {
			return fmt.Errorf("-I %d: Max inline should be between 0 and %d", o.Inline, maxInline)
		}
		p.inline = o.Inline
	}
	if o.RetryCount < 0 {
		return fmt.Errorf("--retry_count %d: Retry Count should be a non-negative number", o.RetryCount)
	}
	// rdma_connect's retry_count goes into the CM REQ's 3-bit field: the
	// kernel's cma keeps min(7, retry_count), and so does rdmacm here.
	p.retry = uint8(min(o.RetryCount, 7))
	if o.Port < 0 || o.Port > 65535 {
		return fmt.Errorf("-p %d: not a TCP port", o.Port)
	}
	// -D in seconds becomes a time.Duration (int64 nanoseconds): a C int's
	// worth of seconds fits. -f is -1 (unset: duration/4) or seconds. -o 0 is
	// the device's maximum.
	for _, c := range []struct {
		flag   string
		v, min int
	}{{"-D", o.Duration, 0}, {"-f", o.Margin, -1}, {"-o", o.OutReads, 0}} {
		if c.v < c.min || c.v > math.MaxInt32 {
			return fmt.Errorf("%s %v: want %v to %v", c.flag, c.v, c.min, math.MaxInt32)
		}
	}
	if o.Wait < 0 {
		return fmt.Errorf("--wait %v: want a duration of 0 or more", o.Wait)
	}
	if o.Set["duration"] {
		if o.Duration < 1 {
			return fmt.Errorf("-D %d: Duration period must be positive", o.Duration)
		}
		p.duration = o.Duration
	}
	if o.RunInfinitely {
		// parser and force_dependecies: RUN_INFINITELY is a DURATION test
		// whose period (-D, DEF_DURATION 5) is the interval between rows,
		// with no peak; BW tests only, and not ib_send_bw -b.
		switch {
		case !p.bw:
			return errors.New("--run_infinitely: run_infinitely exists only in BW tests for now.")
		case p.duplex && p.verb == verbSend:
			return errors.New("--run_infinitely: run_infinitely mode is not supported in SEND Bidirectional BW test")
		case o.All:
			return errors.New("--run_infinitely runs one message size: drop -a")
		}
		p.infinite = true
		if p.duration == 0 {
			p.duration = defDuration
		}
	}
	if o.Set["duration"] && o.All {
		return errors.New("Duration mode currently doesn't support running on all sizes.")
	}
	return nil
}

// forceDependencies is force_dependecies: the rules that derive one
// parameter from another; then what iWARP cannot do.
func (p *params) forceDependencies(o *Options) error {
	if !p.durationMode() {
		p.txDepth = min(p.txDepth, p.iters)
		if p.verb == verbSend {
			p.rxDepth = min(p.rxDepth, p.iters)
		}
	}
	if p.size > CQModLimit && !p.all && !o.Set["cq-mod"] {
		p.cqMod = 1
	}
	p.cqMod = min(p.cqMod, p.txDepth)
	if p.all {
		p.size = maxSize
	}
	if p.verb == verbSend && p.bw && p.server && !p.duplex {
		p.noPeak = true
	}
	if p.durationMode() {
		p.noPeak = true
		p.margin = o.Margin
		if p.margin < 0 {
			p.margin = p.duration / 4
		}
		if p.duration <= 2*p.margin {
			return errors.New("please check that DURATION > 2*MARGIN")
		}
	}
	if !p.durationMode() && (p.conn == "UC" || p.conn == "UD") && p.rxDepth == defRxSend {
		// force_dependecies: an unreliable receiver has no RNR NAK to slow
		// the sender down, so it posts a receive for every message (up to
		// UC_MAX_RX) unless -r says otherwise.
		p.rxDepth = min(p.iters, ucMaxRx)
	}
	if p.verb == verbRead || p.verb == verbAtomic {
		p.inline = 0 // force_dependecies: READs and atomics carry no data out
	}
	if p.conn == "UD" && p.inline > maxInlineUD {
		p.inline = maxInlineUD // "Setting inline size to 884 (Max inline size in UD)"
	}
	if p.verb == verbSend && p.rxDepth%2 == 1 && !p.all {
		p.rxDepth++ // perftest's "WA for a bug when rx_depth is odd in SEND"
	}
	if !p.durationMode() && p.iters > noPeakIters && p.bw {
		p.noPeak = true
	}
	if o.Transport == "iwarp" {
		switch {
		case p.verb == verbAtomic:
			return errors.New("--transport iwarp: iWARP has no atomics (RFC 7306's are not in siw)")
		case p.verb == verbSend && p.duplex:
			return errors.New("--transport iwarp: send_bw -b is not implemented (its receive credits in both directions)")
		}
	}
	return nil
}
