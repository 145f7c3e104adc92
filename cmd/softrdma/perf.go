package main

import (
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

// softrdma perf speaks perftest 4.5-0.17's out-of-band exchange (package
// oob/perftest) and measures the way ib_write_bw and friends do, so that either
// side can be the real tool. The defaults and the rules that derive one
// parameter from another (tx depth, CQ moderation, rx depth, ...) are read from
// perftest's perftest_parameters.c (init_perftest_params, force_dependecies,
// parser); the measurement loops from perftest_resources.c (run_iter_bw,
// run_iter_bw_server, run_iter_bi, run_iter_lat, run_iter_lat_write,
// run_iter_lat_send); the report arithmetic from print_report_bw and
// print_report_lat. No code was taken from perftest.

// perfVerb is perftest's VerbType: what the test's work requests do.
type perfVerb uint8

const (
	perfSend perfVerb = iota
	perfWrite
	perfRead
	perfAtomic
)

// perfVerbNames are testsStr[verb]: the first word of the test's title.
var perfVerbNames = [...]string{perfSend: "Send", perfWrite: "RDMA_Write", perfRead: "RDMA_Read", perfAtomic: "Atomic"}

// perfAtomicTypes are atomicTypesStr: -A's values.
var perfAtomicTypes = [...]string{"CMP_AND_SWAP", "FETCH_AND_ADD"}

// perftest's defaults (perftest_parameters.h).
const (
	perfDefSizeBW     = 65536
	perfDefSizeLat    = 2
	perfDefSizeAtomic = 8
	perfDefIters      = 1000
	perfDefItersWB    = 5000 // ib_write_bw
	perfDefTxBW       = 128
	perfDefTxLat      = 1
	perfDefRxSend     = 512
	perfDefCQMod      = 100
	perfDefQPTimeout  = 14
	perfMinIters      = 5
	perfMaxIters      = 100000000
	perfMaxSize       = 8388608 // MAX_SIZE: -a's largest message, and its buffers
	perfCQModLimit    = 8192    // MSG_SIZE_CQ_MOD_LIMIT: larger messages signal every WR
	perfNoPeakIters   = 20000   // beyond this many iterations the peak is not computed
	perfMinRNRTimer   = 12
	perfHopLimit      = 0xFF // ctx_modify_qp_to_rtr's grh.hop_limit
)

// perfOptions are the flags of softrdma perf, named as perftest names them.
type perfOptions struct {
	test      perftest.Test
	host      string // the server to connect to; "" runs the server
	size      string // -s, with perftest's K and M suffixes
	iters     int
	duration  int
	margin    int
	all       bool
	gidIndex  int
	port      int
	qps       int
	cpuFreq   bool
	gbits     bool
	mtu       int
	device    string
	txDepth   int
	rxDepth   int
	cqMod     int
	outReads  int
	atomic    string
	duplex    bool
	noPeak    bool
	conn      string
	rdmaCM    bool
	useCM     bool
	json      bool
	transport string
	crc       string // iWARP's MPA CRC policy
	backend   string
	pcap      string
	tapPeer   string
	tapName   string
	wait      time.Duration
	// cpuProfile, if set, is where a CPU profile of the run goes.
	cpuProfile string

	set map[string]bool // flags given on the command line

	// listening, if set, is told the server's listening address (tests use
	// -p 0 and learn the port from it).
	listening func(net.Addr)
}

// perfParams are perftest's user_param after parser and force_dependecies: the
// values the test runs with.
type perfParams struct {
	test     perftest.Test
	verb     perfVerb
	bw       bool // a _bw test (perftest's tst == BW)
	server   bool
	size     uint64
	iters    int
	duration int // seconds; 0 = an iterations test
	margin   int
	all      bool
	qps      int
	txDepth  int
	rxDepth  int
	cqMod    int
	outReads int // -o as given; the device's maximum when 0 (read and atomic tests)
	atomic   int // index in perfAtomicTypes
	duplex   bool
	noPeak   bool
	gbits    bool
	gidIndex int  // -x, or -1
	mtu      int  // -m in bytes, or 0
	rdmaCM   bool // -R: rdma_cm connects the test QPs
	useCM    bool // -R or -z: the parameters travel over rdma_cm
}

func (p *perfParams) durationMode() bool { return p.duration > 0 }

func perfCmd(args []string, stdout, stderr io.Writer) int {
	o, err := perfParseArgs(args, stderr)
	if err != nil {
		var fe *flagsError
		if errors.Is(err, pflag.ErrHelp) || errors.As(err, &fe) {
			return flagsExit(err) // parseFlags has said why
		}
		fmt.Fprintf(stderr, "softrdma perf: %v\n", err)
		return 2
	}
	return perfMain(o, stdout, stderr)
}

// perfMain runs a parsed command; its exit code is perftest's idea of success.
func perfMain(o *perfOptions, stdout, stderr io.Writer) int {
	p, err := perfDerive(o)
	if err != nil {
		fmt.Fprintf(stderr, "softrdma perf: %v\n", err)
		return 2
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
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
	if err := perfRun(o, p, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "softrdma perf: %v\n", err)
		return 1
	}
	return 0
}

const perfUsage = `usage: softrdma perf TEST [flags] [HOST]

TEST is write_bw, read_bw, send_bw, atomic_bw, write_lat, read_lat or send_lat
(also with perftest's ib_ prefix). Without HOST it is the server and waits for
a client; with HOST it connects to the server there. Either side may be
perftest's own tool (ib_write_bw ...) on another machine.

flags:
`

func perfParseArgs(args []string, stderr io.Writer) (*perfOptions, error) {
	o := &perfOptions{set: map[string]bool{}}
	fs := newFlagSet("perf", perfUsage, stderr)
	fs.StringVarP(&o.size, "size", "s", "", "message size in bytes, with a K or M suffix (default 65536 for _bw, 2 for _lat, 8 for atomics)")
	fs.IntVarP(&o.iters, "iters", "n", 0, "iterations (default 5000 for write_bw, 1000 otherwise)")
	fs.IntVarP(&o.duration, "duration", "D", 0, "run for this many seconds instead of -n iterations")
	fs.IntVarP(&o.margin, "margin", "f", -1, "with -D, seconds at each end not measured (default duration/4)")
	fs.BoolVarP(&o.all, "all", "a", false, "run every message size from 2 to 2^23 bytes")
	fs.IntVarP(&o.gidIndex, "gid-index", "x", -1, "source GID index (default: the first of the peer's IP family)")
	fs.IntVarP(&o.port, "port", "p", perftest.DefaultPort, "TCP port of the out-of-band exchange")
	fs.IntVarP(&o.qps, "qp", "q", 1, "number of QPs (_bw tests)")
	fs.BoolVarP(&o.cpuFreq, "CPU-freq", "F", false, "accepted for perftest compatibility (softrdma measures with the monotonic clock)")
	fs.BoolVar(&o.gbits, "report_gbits", false, "report bandwidth in Gb/s instead of MB/s (2^20 bytes/s)")
	fs.IntVarP(&o.mtu, "mtu", "m", 0, "IB MTU: 256, 512, 1024, 2048 or 4096 (default: the port's active MTU)")
	fs.StringVarP(&o.device, "ib-dev", "d", "", "device: an interface name or one of its IP addresses (default: the interface towards the peer)")
	fs.IntVarP(&o.txDepth, "tx-depth", "t", 0, "send queue depth: WRs in flight (default 128 for _bw, 1 for _lat; at most -n)")
	fs.IntVarP(&o.rxDepth, "rx-depth", "r", 0, "receive queue depth of send tests (default 512, at most -n)")
	fs.IntVarP(&o.cqMod, "cq-mod", "Q", 0, "signal one completion every this many WRs (default 100, 1 for messages above 8192 bytes)")
	fs.IntVarP(&o.outReads, "outs", "o", 0, "outstanding READs/atomics (read and atomic tests; default the device's maximum, 128)")
	fs.StringVarP(&o.atomic, "atomic_type", "A", "FETCH_AND_ADD", "atomic_bw's operation: CMP_AND_SWAP or FETCH_AND_ADD")
	fs.BoolVarP(&o.duplex, "bidirectional", "b", false, "measure both directions at once (_bw tests)")
	fs.BoolVarP(&o.noPeak, "noPeak", "N", false, "do not compute the peak bandwidth")
	fs.StringVarP(&o.conn, "connection", "c", "RC", "connection type; only RC is implemented")
	fs.BoolVarP(&o.rdmaCM, "rdma_cm", "R", false, "connect the test QPs with rdma_cm, and exchange the parameters over an rdma_cm QP (RoCE: IB CM on QP1; iWARP: TCP and MPA)")
	fs.BoolVarP(&o.useCM, "comm_rdma_cm", "z", false, "exchange the parameters over an rdma_cm QP; the test QPs are connected by their keys")
	fs.BoolVar(&o.json, "json", false, "print the results as JSON instead of perftest's table")
	fs.StringVar(&o.transport, "transport", "roce", "roce or iwarp (iWARP over TCP, with -R: rdma_cm over MPA, as perftest over siw)")
	fs.StringVar(&o.crc, "crc", "accept", "--transport iwarp: MPA CRCs: accept (siw's default: if the peer asks), request or require")
	fs.StringVar(&o.backend, "backend", "udp", "how RoCE frames move: udp (a UDP socket on port 4791, no root), afpacket (raw frames on -d INTERFACE) or tap (a TAP device whose host has the address -d ADDR)")
	fs.StringVar(&o.pcap, "pcap", "", "write every RoCE frame sent and received to this pcap file (iWARP: each connection's TCP octets, as synthesised segments)")
	fs.StringVar(&o.tapPeer, "tap-peer", "", "--backend tap: ADDR/PREFIX to give the kernel's side of the TAP device")
	fs.StringVar(&o.tapName, "tap-name", "", "--backend tap: the TAP device to create or attach to (default: the kernel picks tapN)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of this process's run to this file")
	fs.DurationVar(&o.wait, "wait", perfDialWait, "client: how long to retry connecting to a server that is not listening yet")
	if err := parseFlags(fs, args, stderr); err != nil {
		return nil, err
	}
	fs.Visit(func(f *pflag.Flag) { o.set[f.Name] = true })
	pos := fs.Args()
	if len(pos) == 0 {
		fs.Usage()
		return nil, errors.New("which test? write_bw, read_bw, send_bw, atomic_bw, write_lat, read_lat or send_lat")
	}
	t, err := perftest.ParseTest(pos[0])
	if err != nil || t == perftest.AtomicLat {
		return nil, fmt.Errorf("unknown test %q: want write_bw, read_bw, send_bw, atomic_bw, write_lat, read_lat or send_lat", pos[0])
	}
	o.test = t
	switch len(pos) {
	case 1:
	case 2:
		o.host = pos[1]
	default:
		return nil, fmt.Errorf("too many arguments: %q", pos[2:])
	}
	return o, nil
}

// perfParseSize reads -s as perftest does: a number (strtol base 0) with an
// optional K or M suffix.
func perfParseSize(s string) (uint64, error) {
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

// perfDerive applies perftest's defaults and dependencies to the options.
func perfDerive(o *perfOptions) (*perfParams, error) {
	switch o.transport {
	case "roce":
		if o.set["crc"] {
			return nil, errors.New("--crc is iWARP's (MPA CRCs): use it with --transport iwarp")
		}
	case "iwarp":
		if err := perfCheckIWARP(o); err != nil { // perf_iwarp.go
			return nil, err
		}
	default:
		return nil, fmt.Errorf("--transport %q: want roce or iwarp", o.transport)
	}
	switch o.backend {
	case "udp", "afpacket", "tap":
	case "tcp": // iWARP's
	default:
		return nil, fmt.Errorf("--backend %q: want udp, afpacket or tap", o.backend)
	}
	if !strings.EqualFold(o.conn, "RC") {
		return nil, fmt.Errorf("-c %s: only RC is implemented", o.conn)
	}
	t := o.test
	p := &perfParams{test: t, bw: t.Bandwidth(), server: o.host == "", all: o.all, qps: o.qps,
		duplex: o.duplex, noPeak: o.noPeak, gbits: o.gbits, gidIndex: o.gidIndex, outReads: o.outReads,
		rdmaCM: o.rdmaCM, useCM: o.rdmaCM || o.useCM}
	switch t {
	case perftest.WriteBW, perftest.WriteLat:
		p.verb = perfWrite
	case perftest.ReadBW, perftest.ReadLat:
		p.verb = perfRead
	case perftest.SendBW, perftest.SendLat:
		p.verb = perfSend
	case perftest.AtomicBW:
		p.verb = perfAtomic
	default:
		return nil, fmt.Errorf("test %v is not implemented", t)
	}
	// init_perftest_params
	p.size = perfDefSizeLat
	if p.bw {
		p.size = perfDefSizeBW
	}
	if p.verb == perfAtomic {
		p.size = perfDefSizeAtomic
	}
	p.iters = perfDefIters
	if t == perftest.WriteBW {
		p.iters = perfDefItersWB
	}
	p.txDepth = perfDefTxLat
	if p.bw {
		p.txDepth = perfDefTxBW
	}
	p.rxDepth = 1
	if p.verb == perfSend {
		p.rxDepth = perfDefRxSend
	}
	p.cqMod = perfDefCQMod
	p.atomic = 1 // FETCH_AND_ADD
	// parser
	if o.set["size"] {
		size, err := perfParseSize(o.size)
		if err != nil {
			return nil, err
		}
		if p.verb == perfAtomic && size != perfDefSizeAtomic {
			return nil, errors.New("Message size cannot be changed for Atomic tests")
		}
		p.size = size
	}
	if o.set["iters"] {
		if o.iters < perfMinIters || o.iters > perfMaxIters {
			return nil, fmt.Errorf("-n %d: Iteration num should be between %d and %d", o.iters, perfMinIters, perfMaxIters)
		}
		p.iters = o.iters
	}
	if o.set["tx-depth"] {
		if o.txDepth < 1 || o.txDepth > 15000 {
			return nil, fmt.Errorf("-t %d: Tx depth should be between 1 and 15000", o.txDepth)
		}
		p.txDepth = o.txDepth
	}
	if o.set["rx-depth"] {
		if o.rxDepth < 1 || o.rxDepth > 15000 {
			return nil, fmt.Errorf("-r %d: Rx depth should be between 1 and 15000", o.rxDepth)
		}
		if p.verb != perfSend && o.rxDepth > 1 {
			return nil, errors.New("-r: rx depth is for send tests")
		}
		p.rxDepth = o.rxDepth
	}
	if o.set["cq-mod"] {
		if o.cqMod < 1 || o.cqMod > 1024 {
			return nil, fmt.Errorf("-Q %d: CQ moderation should be between 1 and 1024", o.cqMod)
		}
		p.cqMod = o.cqMod
	}
	if o.set["qp"] {
		if !p.bw {
			return nil, errors.New("-q: Multiple QPs only available on bw tests")
		}
		if o.qps < 1 || o.qps > 16384 {
			return nil, fmt.Errorf("-q %d: num of Qps should be between 1 and 16384", o.qps)
		}
	}
	if o.set["outs"] && p.verb != perfRead && p.verb != perfAtomic {
		return nil, errors.New("-o: Setting Outstanding reads only available on READ verb")
	}
	if o.set["atomic_type"] {
		if p.verb != perfAtomic {
			return nil, errors.New("-A: You are not running the atomic_lat/bw test!")
		}
		switch o.atomic {
		case perfAtomicTypes[0]:
			p.atomic = 0
		case perfAtomicTypes[1]:
			p.atomic = 1
		default:
			return nil, fmt.Errorf("-A %q: Invalid Atomic type! please choose from {CMP_AND_SWAP,FETCH_AND_ADD}", o.atomic)
		}
	}
	if o.duplex && !p.bw {
		return nil, errors.New("-b: Bidirectional is only available in BW test")
	}
	if o.noPeak && !p.bw {
		return nil, errors.New("-N: NoPeak only valid for BW tests")
	}
	if o.set["gid-index"] && (o.gidIndex < 0 || o.gidIndex > 255) {
		return nil, fmt.Errorf("-x %d: Gid index should be between 0 and 255", o.gidIndex)
	}
	if o.set["mtu"] {
		if _, ok := perftest.MTUFromBytes(o.mtu); !ok {
			return nil, fmt.Errorf("-m %d: Invalid MTU - %d (want 256, 512, 1024, 2048 or 4096)", o.mtu, o.mtu)
		}
		p.mtu = o.mtu
	}
	if o.port < 0 || o.port > 65535 {
		return nil, fmt.Errorf("-p %d: not a TCP port", o.port)
	}
	// -D in seconds becomes a time.Duration (int64 nanoseconds): a C int's
	// worth of seconds fits. -f is -1 (unset: duration/4) or seconds. -o 0 is
	// the device's maximum.
	if err := checkFlags(
		intRange("-D", o.duration, 0, math.MaxInt32),
		intRange("-f", o.margin, -1, math.MaxInt32),
		intRange("-o", o.outReads, 0, math.MaxInt32),
		durationNonNegative("--wait", o.wait),
	); err != nil {
		return nil, err
	}
	if o.set["duration"] {
		if o.duration < 1 {
			return nil, fmt.Errorf("-D %d: Duration period must be positive", o.duration)
		}
		if o.all {
			return nil, errors.New("Duration mode currently doesn't support running on all sizes.")
		}
		p.duration = o.duration
	}
	// force_dependecies
	if !p.durationMode() {
		p.txDepth = min(p.txDepth, p.iters)
		if p.verb == perfSend {
			p.rxDepth = min(p.rxDepth, p.iters)
		}
	}
	if p.size > perfCQModLimit && !p.all && !o.set["cq-mod"] {
		p.cqMod = 1
	}
	p.cqMod = min(p.cqMod, p.txDepth)
	if p.all {
		p.size = perfMaxSize
	}
	if p.verb == perfSend && p.bw && p.server && !p.duplex {
		p.noPeak = true
	}
	if p.durationMode() {
		p.noPeak = true
		p.margin = o.margin
		if p.margin < 0 {
			p.margin = p.duration / 4
		}
		if p.duration <= 2*p.margin {
			return nil, errors.New("please check that DURATION > 2*MARGIN")
		}
	}
	if p.verb == perfSend && p.rxDepth%2 == 1 && !p.all {
		p.rxDepth++ // perftest's "WA for a bug when rx_depth is odd in SEND"
	}
	if !p.durationMode() && p.iters > perfNoPeakIters && p.bw {
		p.noPeak = true
	}
	if o.transport == "iwarp" {
		switch {
		case p.verb == perfAtomic:
			return nil, errors.New("--transport iwarp: iWARP has no atomics (RFC 7306's are not in siw)")
		case p.verb == perfSend && p.duplex:
			return nil, errors.New("--transport iwarp: send_bw -b is not implemented (its receive credits in both directions)")
		}
	}
	return p, nil
}
