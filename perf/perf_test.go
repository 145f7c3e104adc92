package perf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/softrdma/softrdma/decode"
	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/oob/perftest"
	"github.com/softrdma/softrdma/pcaptap"
)

// log is one side's output in a capture log of testdata/captures/logs.
type log struct {
	args []string // the command line after the tool's name
	out  []string // stdout lines
}

// readPerfLog splits a capture log into the server's and the client's command
// and output. Lines perftest writes to stderr ("Device not recognized ...") and
// tcpdump's trailer are dropped; so is the line perftest prints before that
// warning (read and atomic tests on an unrecognised device, rxe), which
// softrdma, knowing its own device, has no reason to print.
func readPerfLog(t *testing.T, name string) (server, client log) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "captures", "logs", name))
	if err != nil {
		t.Fatal(err)
	}
	var cur *log
	for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		switch {
		case strings.HasPrefix(l, "# server"):
			server.args = strings.Fields(l[strings.Index(l, "):")+2:])[1:]
		case strings.HasPrefix(l, "# client"):
			client.args = strings.Fields(l[strings.Index(l, "):")+2:])[1:]
		case l == "## client output":
			cur = &client
		case l == "## server output":
			cur = &server
		case strings.HasPrefix(l, "Device not recognized"), strings.HasSuffix(l, "packets captured"),
			strings.HasSuffix(l, "dropped by kernel"):
		default:
			cur.out = append(cur.out, l)
		}
	}
	for _, s := range []*log{&server, &client} {
		if len(s.out) > 1 && s.out[0]+"\n" == resultLine && s.out[1]+"\n" == resultLine {
			s.out = s.out[1:]
		}
		if len(s.out) > 1 && s.out[0]+"\n" == resultLine && s.out[1] == "" {
			s.out = s.out[1:] // the same line, before the server's banner
		}
	}
	return server, client
}

var (
	addrRE = regexp.MustCompile(`^ (local|remote) address: LID (\S+) QPN 0x([0-9a-f]+) PSN 0x([0-9a-f]+)(?: OUT 0x([0-9a-f]+))?(?: RKey 0x([0-9a-f]+) VAddr 0x([0-9a-f]+))?$`)
	gidre  = regexp.MustCompile(`^ GID: ((?:\d\d\d?:){15}\d\d\d?)$`)
)

// parsePerfDest reads an address line and its GID line back into a Dest.
func parsePerfDest(t *testing.T, addr, gid string) (string, perftest.Dest) {
	t.Helper()
	m := addrRE.FindStringSubmatch(addr)
	g := gidre.FindStringSubmatch(gid)
	if m == nil || g == nil {
		t.Fatalf("not an address: %q %q", addr, gid)
	}
	hex := func(s string) uint64 {
		if s == "" {
			return 0
		}
		v, err := strconv.ParseUint(s, 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	var d perftest.Dest
	d.QPN, d.PSN, d.OutReads, d.RKey, d.VAddr = uint32(hex(m[3])), uint32(hex(m[4])), uint32(hex(m[5])), uint32(hex(m[6])), hex(m[7])
	for i, f := range strings.Split(g[1], ":") {
		v, _ := strconv.Atoi(f)
		d.GID[i] = byte(v)
	}
	return m[1], d
}

// TestPerfOutputMatchesCaptureLogs rebuilds, for every perftest run of the
// captures, each side's whole output from softrdma's own parts: its flags
// parsed and derived as softrdma does (tx depth, CQ moderation, rx depth ...),
// the header perftest prints, the address lines reprinted from the values they
// show, and the result rows reformatted from their numbers. The text must be
// what perftest printed, byte for byte.
func TestPerfOutputMatchesCaptureLogs(t *testing.T) {
	for _, name := range []string{"rxe-write-bw.log", "rxe-read-bw.log", "rxe-send-bw.log", "rxe-atomic-fadd.log",
		"rxe-atomic-cas.log", "rxe-write-lat.log", "rxe-send-lat.log"} {
		server, client := readPerfLog(t, name)
		for _, side := range []log{server, client} {
			t.Run(name+"/"+strings.Join(side.args, " "), func(t *testing.T) {
				o, err := parseArgs(append([]string{toolTest(t, name)}, side.args...), io.Discard)
				if err != nil {
					t.Fatal(err)
				}
				p, err := derive(o)
				if err != nil {
					t.Fatal(err)
				}
				want := strings.Join(side.out, "\n") + "\n"
				var b strings.Builder
				if p.server {
					b.WriteString(waitingBanner)
				}
				outReads := 1
				if p.verb == verbRead || p.verb == verbAtomic {
					outReads = 128
				}
				ti := testInfo{p: p, device: "rxe0", mtu: 1024, gidIndex: 1, outReads: outReads}
				ti.write(&b)
				i := strings.Index(want, " local address")
				for l := 0; l+1 < len(side.out); l++ {
					if addrRE.MatchString(side.out[l]) {
						who, d := parsePerfDest(t, side.out[l], side.out[l+1])
						b.WriteString(destLines(who, d, p.verb))
					}
				}
				b.WriteString(tableHeader(p))
				for _, l := range side.out {
					f := strings.Fields(l)
					if p.bw && bwRowRE.MatchString(l) {
						r := perftest.BWReport{Size: atoi(t, f[0]), Iters: atoi(t, f[1]),
							BWPeak: atof(t, f[2]), BWAvg: atof(t, f[3]), MsgRateAvg: atof(t, f[4])}
						b.WriteString(bwLine(r, false))
					}
					if !p.bw && latRowRE.MatchString(l) {
						st := latStats{Size: atoi(t, f[0]), Iters: atoi(t, f[1]), TMin: atof(t, f[2]),
							TMax: atof(t, f[3]), TTypical: atof(t, f[4]), TAvg: atof(t, f[5]), TStdev: atof(t, f[6]),
							P99: atof(t, f[7]), P999: atof(t, f[8])}
						b.WriteString(latLine(st, false))
					}
				}
				b.WriteString(resultLine)
				if got := b.String(); got != want {
					t.Errorf("output differs from perftest's (header up to byte %d)\ngot:\n%s\nwant:\n%s", i, got, want)
				}
			})
		}
	}
}

func toolTest(t *testing.T, log string) string {
	switch {
	case strings.Contains(log, "atomic"):
		return "atomic_bw"
	case strings.Contains(log, "write-bw"):
		return "write_bw"
	case strings.Contains(log, "read-bw"):
		return "read_bw"
	case strings.Contains(log, "send-bw"):
		return "send_bw"
	case strings.Contains(log, "write-lat"):
		return "write_lat"
	case strings.Contains(log, "send-lat"):
		return "send_lat"
	}
	t.Fatalf("which test is %s?", log)
	return ""
}

func atoi(t *testing.T, s string) uint64 {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func atof(t *testing.T, s string) float64 {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestPerfCHex checks the C printf emulation of the address lines.
func TestPerfCHex(t *testing.T) {
	for _, c := range []struct {
		v     uint64
		width int
		want  string
	}{
		{0, 4, "0000"}, {0x14, 6, "0x0014"}, {0x736e15, 6, "0x736e15"}, {0x80, 4, "0x80"},
		{0x5b5, 8, "0x0005b5"}, {0x564aed094000, 16, "0x00564aed094000"}, {0x1, 4, "0x01"},
	} {
		if got := cHex(c.v, c.width); got != c.want {
			t.Errorf("cHex(%#x, %d) = %q, want %q", c.v, c.width, got, c.want)
		}
	}
}

// TestPerfLatency checks print_report_lat's arithmetic on a known run: ten
// posts whose nine intervals are 10..90 µs (shuffled); the two largest are
// dropped, leaving 7 sorted ones: 10..70.
func TestPerfLatency(t *testing.T) {
	us := int64(time.Microsecond)
	intervals := []int64{50, 10, 90, 30, 70, 20, 80, 40, 60}
	tp := []int64{1000}
	for _, d := range intervals {
		tp = append(tp, tp[len(tp)-1]+d*us)
	}
	st := latency(64, tp, 1)
	// m = 7: t_max = delta[7] = 80, the median delta[3] = 40, the mean of 10..70
	// is 40; the deviations 30, 20, 10, 0, -10, -20, -30 squared sum to 2800.
	want := latStats{Size: 64, Iters: 10, TMin: 10, TMax: 80, TTypical: 40, TAvg: 40, TStdev: math.Sqrt(2800.0 / 7), P99: 80, P999: 80}
	if st != want {
		t.Errorf("got %+v\nwant %+v", st, want)
	}
	// Round trips are halved.
	if st := latency(64, tp, 2); st.TMin != 5 || st.TAvg != 20 || st.TMax != 40 {
		t.Errorf("halved: %+v", st)
	}
	// perftest truncates each deviation to an int before squaring it: with a
	// mean of 1.5 µs and deviations ±0.5, its stdev is 0, not 0.5.
	tp = []int64{0}
	for _, d := range []int64{1, 2, 1, 2, 1, 2, 9, 9} {
		tp = append(tp, tp[len(tp)-1]+d*us)
	}
	if st := latency(2, tp, 1); st.TAvg != 1.5 || st.TStdev != 0 || st.TTypical != 1.5 {
		t.Errorf("truncation: %+v", st)
	}
	// Fewer than five iterations cannot be reported.
	if st := latency(2, tp[:4], 1); st.TMin != 0 || st.Iters != 4 {
		t.Errorf("short run: %+v", st)
	}
}

// TestPerfBWReport checks print_report_bw's arithmetic: 8 messages of 1 MiB,
// posted every 10 ms, completions counted 4 at a time.
func TestPerfBWReport(t *testing.T) {
	ms := int64(time.Millisecond)
	s := bwSamples{size: 1 << 20, iters: 8, cqMod: 4, tposted: make([]int64, 8), tcompleted: make([]int64, 8)}
	for i := range s.tposted {
		s.tposted[i] = int64(i) * 10 * ms
	}
	s.tcompleted[3] = 40 * ms  // 4 messages in 40 ms from the first post
	s.tcompleted[7] = 100 * ms // all 8 in 100 ms
	r := s.report(false)
	if r.Size != 1<<20 || r.Iters != 8 {
		t.Fatalf("%+v", r)
	}
	// Average: 8 MiB in 0.1 s = 80 MiB/s, 80 messages/s.
	if math.Abs(r.BWAvg-80) > 1e-9 || math.Abs(r.MsgRateAvg-80e-6) > 1e-12 {
		t.Errorf("average %v MiB/s, rate %v Mpps", r.BWAvg, r.MsgRateAvg)
	}
	// Peak: the best window is from post 3 (30 ms) to completion 3 (40 ms), one
	// message in 10 ms: 100 MiB/s.
	if math.Abs(r.BWPeak-100) > 1e-9 {
		t.Errorf("peak %v MiB/s, want 100", r.BWPeak)
	}
	if g := s.report(true); math.Abs(g.BWAvg-80*1048576*8/1e9) > 1e-9 {
		t.Errorf("Gb/s average %v", g.BWAvg)
	}
	s.noPeak, s.tposted, s.tcompleted = true, []int64{0}, []int64{100 * ms}
	if r := s.report(false); r.BWPeak != 0 || math.Abs(r.BWAvg-80) > 1e-9 {
		t.Errorf("noPeak: %+v", r)
	}
}

// TestPerfDerive checks perftest's defaults and dependencies.
func TestPerfDerive(t *testing.T) {
	for _, c := range []struct {
		args                 string
		size                 uint64
		iters, tx, rx, cqMod int
		noPeak               bool
		wantErr              string
	}{
		{args: "write_bw", size: 65536, iters: 5000, tx: 128, rx: 1, cqMod: 1}, // 64 KiB > 8192: every WR signalled
		{args: "write_bw -s 4096", size: 4096, iters: 5000, tx: 128, rx: 1, cqMod: 100},
		{args: "send_bw -n 5 -s 4096", size: 4096, iters: 5, tx: 5, rx: 6, cqMod: 5, noPeak: true}, // server
		{args: "send_bw -n 5 -s 4096 host", size: 4096, iters: 5, tx: 5, rx: 6, cqMod: 5},
		{args: "read_bw -a -n 5 host", size: maxSize, iters: 5, tx: 5, rx: 1, cqMod: 5},
		{args: "write_lat", size: 2, iters: 1000, tx: 1, rx: 1, cqMod: 1},
		{args: "send_lat -n 11", size: 2, iters: 11, tx: 1, rx: 12, cqMod: 1},
		{args: "write_bw -n 30000 -s 1K host", size: 1024, iters: 30000, tx: 128, rx: 1, cqMod: 100, noPeak: true},
		{args: "atomic_bw -s 16", wantErr: "cannot be changed"},
		{args: "write_lat -q 2", wantErr: "only available on bw"},
		{args: "send_lat -b", wantErr: "Bidirectional"},
		{args: "write_bw -A CMP_AND_SWAP", wantErr: "atomic"},
		{args: "write_bw -n 4", wantErr: "Iteration num"},
		{args: "write_bw -D 1 -a", wantErr: "all sizes"},
		{args: "write_bw -D 2 -f 1", wantErr: "DURATION > 2*MARGIN"},
		{args: "write_bw -m 1000", wantErr: "Invalid MTU"},
		{args: "write_bw -u 32", wantErr: "-u 32: QP timeout out of range"},
		{args: "write_bw -u -1", wantErr: "-u -1: QP timeout out of range"},
		{args: "write_bw --transport iwarp", wantErr: "needs -R"},
		{args: "write_bw -R -c UC", wantErr: "UC is not supported in librdmacm"},
		{args: "write_bw -c UD", wantErr: "UD connection only possible in SEND verb"},
		{args: "write_bw --backend xdp", wantErr: "--backend"},
		{args: "read_bw -s 2K -D 3", size: 2048, iters: 1000, tx: 128, rx: 1, cqMod: 100, noPeak: true},
	} {
		o, err := parseArgs(strings.Fields(c.args), io.Discard)
		var p *params
		if err == nil {
			p, err = derive(o)
		}
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%s: error %v, want one with %q", c.args, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.args, err)
			continue
		}
		if p.size != c.size || p.iters != c.iters || p.txDepth != c.tx || p.rxDepth != c.rx || p.cqMod != c.cqMod || p.noPeak != c.noPeak {
			t.Errorf("%s: size %d iters %d tx %d rx %d cq %d noPeak %v, want %d %d %d %d %d %v", c.args,
				p.size, p.iters, p.txDepth, p.rxDepth, p.cqMod, p.noPeak, c.size, c.iters, c.tx, c.rx, c.cqMod, c.noPeak)
		}
	}
}

// TestPerfSizes checks -s's suffixes and limits.
func TestPerfSizes(t *testing.T) {
	for s, want := range map[string]uint64{"4096": 4096, "4K": 4096, "1M": 1 << 20, "0x100": 256} {
		if got, err := ParseSize(s); err != nil || got != want {
			t.Errorf("-s %s: %d, %v", s, got, err)
		}
	}
	for _, s := range []string{"0", "-1", "x", "4G"} {
		if _, err := ParseSize(s); err == nil {
			t.Errorf("-s %s accepted", s)
		}
	}
}

// loopbackIP hands out loopback addresses for test devices: every device
// binds UDP 4791 on its own address of 127.0.0.0/8, in a /24 of this test
// process's own (127.P.79.0/24, P from the process ID), so that another test
// process on the host (a race build of an older tree, say) holding
// 127.0.79.1:4791 does not make a run fail with "address already in use".
var loopbackIP atomic.Uint32

// loopbackNet is the second octet of this process's test addresses.
var loopbackNet = 1 + os.Getpid()%250

func nextPerfIP() string {
	n := loopbackIP.Add(1)
	return fmt.Sprintf("127.%d.79.%d", loopbackNet, n)
}

// pairResult is what both sides of a run printed.
type pairResult struct {
	srvCode, cliCode int
	srv, cli         string // stdout
	srvErr, cliErr   string
}

func (r pairResult) String() string {
	return fmt.Sprintf("server exit %d\n%s%s\nclient exit %d\n%s%s", r.srvCode, r.srv, r.srvErr, r.cliCode, r.cli, r.cliErr)
}

// runPerfPair runs a server and a client of test in this process over UDP on
// loopback (no root needed), each with its own device address.
func runPerfPair(t *testing.T, test string, common, srvExtra, cliExtra []string) pairResult {
	t.Helper()
	srvIP, cliIP := nextPerfIP(), nextPerfIP()
	var srvOut, srvErr, cliOut, cliErr bytes.Buffer
	o, err := parseArgs(append(append([]string{test, "-d", srvIP, "-p", "0"}, common...), srvExtra...), &srvErr)
	if err != nil {
		t.Fatal(err)
	}
	addr := make(chan net.Addr, 1)
	o.Listening = func(a net.Addr) { addr <- a }
	done := make(chan int, 1)
	go func() { done <- Main(o, &srvOut, &srvErr) }()
	var port int
	select {
	case a := <-addr:
		port = a.(*net.TCPAddr).Port
	case code := <-done:
		t.Fatalf("server exited %d before listening: %s", code, srvErr.String())
	case <-time.After(10 * time.Second):
		t.Fatal("server does not listen")
	}
	args := append(append([]string{test, "-d", cliIP, "-p", strconv.Itoa(port)}, common...), cliExtra...)
	r := pairResult{cliCode: command(append(args, srvIP), &cliOut, &cliErr)}
	select {
	case r.srvCode = <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("server did not finish\nclient: %s%s\nserver so far: %s", cliOut.String(), cliErr.String(), srvErr.String())
	}
	r.srv, r.srvErr, r.cli, r.cliErr = srvOut.String(), srvErr.String(), cliOut.String(), cliErr.String()
	return r
}

var (
	bwRowRE  = regexp.MustCompile(`^ (\d+)\s+(\d+)\s+(\d+\.\d\d)\s+(\d+\.\d\d)\s*\t\t\s+(\d+\.\d{6})$`)
	latRowRE = regexp.MustCompile(`^ (\d+)\s+(\d+)\s+(\d+\.\d\d)\s+(\d+\.\d\d)\s+(\d+\.\d\d)\s*\t\s+(\d+\.\d\d)\s*\t(\d+\.\d\d)\s*\t\t(\d+\.\d\d)\s*\t\t(\d+\.\d\d)\s*$`)
	// REPORT_FMT_EXT: Gb/s averages below 0.1 get six decimals.
	bwExtRowRE = regexp.MustCompile(`^ (\d+)\s+(\d+)\s+(\d+\.\d{6})\s+(\d+\.\d{6})\s+(\d+\.\d{6})$`)
	// The latency -D row: tps is %-7.2f, so below 1000 (565 µs a round trip,
	// under the race detector) a space pads it.
	durRowRE = regexp.MustCompile(`^ (\d+)\s+(\d+)\s+(\d+\.\d\d)\s+(\d+\.\d\d)\s*$`)
)

// output is the parsed text of one side.
type output struct {
	local, remote []perftest.Dest
	rows          [][]string // result rows' fields
}

// parsePerfOutput checks the shape of a side's output (header block, address
// lines, table) and returns its addresses and rows.
func parsePerfOutput(t *testing.T, who, out string, bw, duration bool) output {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	var po output
	title := -1
	for i, l := range lines {
		if strings.HasSuffix(l, " Test") && strings.HasPrefix(l, "                    ") {
			title = i
		}
		if m := addrRE.FindStringSubmatch(l); m != nil && i+1 < len(lines) {
			side, d := parsePerfDest(t, l, lines[i+1])
			if side == "local" {
				po.local = append(po.local, d)
			} else {
				po.remote = append(po.remote, d)
			}
		}
		re := latRowRE
		switch {
		case bw:
			re = bwRowRE
		case duration:
			re = durRowRE
		}
		if m := re.FindStringSubmatch(l); m != nil {
			po.rows = append(po.rows, m[1:])
		} else if m := bwExtRowRE.FindStringSubmatch(l); bw && m != nil {
			po.rows = append(po.rows, m[1:])
		}
	}
	if title < 0 || lines[title-1]+"\n" != resultLine {
		t.Errorf("%s: no test title after a result line:\n%s", who, out)
	}
	if lines[len(lines)-1]+"\n" != resultLine {
		t.Errorf("%s: output does not end with a result line:\n%s", who, out)
	}
	if len(po.local) == 0 || len(po.local) != len(po.remote) {
		t.Errorf("%s: %d local and %d remote addresses:\n%s", who, len(po.local), len(po.remote), out)
	}
	return po
}

// TestPerfLoopback runs every test, softrdma against softrdma over UDP on
// loopback, with a spread of options. Both sides must exit 0, print perftest's
// layout, agree on each other's keys (QPN, PSN, rkey, address, GID), and
// report as many rows of results as sizes were run, with the iterations asked
// for; bandwidth peers report the same numbers where perftest has them agree.
func TestPerfLoopback(t *testing.T) {
	for _, c := range []struct {
		test string
		args []string
		rows int // result rows on the client (0: 1)
	}{
		// The -a rows move 8 MiB messages, 2048 packets each: under the race
		// detector on a loaded machine the responder can fall more than the
		// default timeout's 7 × 67 ms behind (RETRY_EXC_ERR, seen in make
		// test), so they wait 4.3 s for an ACK (-u 20) as a user would there.
		{test: "write_bw", args: []string{"-n", "50", "-s", "4096"}},
		{test: "write_bw", args: []string{"-n", "20", "-s", "1M"}},
		{test: "write_bw", args: []string{"-n", "200", "-s", "333", "-q", "3", "-t", "16", "-Q", "4"}},
		{test: "write_bw", args: []string{"-n", "40", "-s", "65536", "-b"}},
		{test: "write_bw", args: []string{"-n", "5", "-a", "-u", "20"}, rows: 23},
		{test: "read_bw", args: []string{"-n", "50", "-s", "10000"}},
		{test: "read_bw", args: []string{"-n", "30", "-s", "2048", "-q", "2", "-o", "4", "--report_gbits"}},
		{test: "send_bw", args: []string{"-n", "60", "-s", "5000"}},
		{test: "send_bw", args: []string{"-n", "40", "-s", "1024", "-b"}},
		{test: "send_bw", args: []string{"-n", "5", "-a", "-u", "20"}, rows: 23},
		{test: "atomic_bw", args: []string{"-n", "100"}},
		{test: "atomic_bw", args: []string{"-n", "100", "-A", "CMP_AND_SWAP", "-q", "2"}},
		{test: "write_lat", args: []string{"-n", "50", "-s", "64"}},
		{test: "write_lat", args: []string{"-n", "5", "-a", "-u", "20"}, rows: 23},
		{test: "read_lat", args: []string{"-n", "50", "-s", "4096"}},
		{test: "send_lat", args: []string{"-n", "50", "-s", "3000"}},
		{test: "send_lat", args: []string{"-n", "7", "-s", "1", "-m", "256"}},
	} {
		t.Run(c.test+" "+strings.Join(c.args, " "), func(t *testing.T) {
			r := runPerfPair(t, c.test, c.args, nil, nil)
			if r.srvCode != 0 || r.cliCode != 0 {
				t.Fatalf("exchange failed\n%s", r)
			}
			checkPerfPair(t, c.test, c.args, r, c.rows)
		})
	}
}

func checkPerfPair(t *testing.T, test string, args []string, r pairResult, rows int) {
	t.Helper()
	o, err := parseArgs(append([]string{test}, args...), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	p, err := derive(o)
	if err != nil {
		t.Fatal(err)
	}
	srv := parsePerfOutput(t, "server", r.srv, p.bw, p.durationMode())
	cli := parsePerfOutput(t, "client", r.cli, p.bw, p.durationMode())
	if fmt.Sprint(srv.local) != fmt.Sprint(cli.remote) || fmt.Sprint(cli.local) != fmt.Sprint(srv.remote) {
		t.Errorf("the sides disagree on the keys:\nserver local %v\nclient remote %v\nclient local %v\nserver remote %v",
			srv.local, cli.remote, cli.local, srv.remote)
	}
	if rows == 0 {
		rows = 1
	}
	if len(cli.rows) != rows {
		t.Errorf("client printed %d result rows, want %d:\n%s", len(cli.rows), rows, r.cli)
	}
	if !p.durationMode() {
		want := strconv.Itoa(p.iters * p.qps)
		if !p.bw {
			want = strconv.Itoa(p.iters)
		}
		for _, row := range cli.rows {
			if row[1] != want {
				t.Errorf("client row %v: %s iterations, want %s", row, row[1], want)
			}
		}
	}
	serverRows := 1
	switch {
	case test == "read_lat":
		serverRows = 0 // only the client reads
	case test == "send_bw" || test == "write_lat" || test == "send_lat" || p.duplex:
		serverRows = rows // the server measures too
	}
	if len(srv.rows) != serverRows {
		t.Errorf("server printed %d result rows, want %d:\n%s", len(srv.rows), serverRows, r.srv)
	}
	// A half-duplex server prints the client's report; -b sides print the sum.
	if (p.bw && p.verb != verbSend && !p.duplex || p.duplex && !p.durationMode()) && len(srv.rows) > 0 && len(cli.rows) > 0 {
		if fmt.Sprint(srv.rows[len(srv.rows)-1]) != fmt.Sprint(cli.rows[len(cli.rows)-1]) {
			t.Errorf("server's row %v differs from the client's %v", srv.rows[len(srv.rows)-1], cli.rows[len(cli.rows)-1])
		}
	}
}

// TestPerfDuration runs -D tests: the rows count what completed in the sample
// period.
func TestPerfDuration(t *testing.T) {
	if testing.Short() {
		t.Skip("-D runs take seconds")
	}
	for _, c := range []struct {
		test string
		args []string
	}{
		{"write_bw", []string{"-D", "2", "-s", "8192"}},
		{"send_bw", []string{"-D", "2", "-s", "4096"}},
		{"send_lat", []string{"-D", "2"}},
		{"write_lat", []string{"-D", "2"}},
	} {
		t.Run(c.test, func(t *testing.T) {
			r := runPerfPair(t, c.test, c.args, nil, nil)
			if r.srvCode != 0 || r.cliCode != 0 {
				t.Fatalf("exchange failed\n%s", r)
			}
			checkPerfPair(t, c.test, c.args, r, 1)
			po := parsePerfOutput(t, "client", r.cli, strings.HasSuffix(c.test, "_bw"), true)
			if n, _ := strconv.Atoi(po.rows[0][1]); n < 10 {
				t.Errorf("only %d iterations in 2 s:\n%s", n, r.cli)
			}
		})
	}
}

// TestPerfJSONAndPcap runs a test with --json and --pcap on both sides: the
// JSON carries the keys and results; each capture decodes with no error
// (every ICRC verifies, those of frames received on the UDP socket included)
// and holds the test's WRITEs.
func TestPerfJSONAndPcap(t *testing.T) {
	dir := t.TempDir()
	srvPcap, cliPcap := filepath.Join(dir, "server.pcap"), filepath.Join(dir, "client.pcap")
	r := runPerfPair(t, "write_bw", []string{"-n", "20", "-s", "3000", "--json"}, []string{"--pcap", srvPcap}, []string{"--pcap", cliPcap})
	if r.srvCode != 0 || r.cliCode != 0 {
		t.Fatalf("exchange failed\n%s", r)
	}
	var srv, cli result
	for _, x := range []struct {
		out string
		res *result
	}{{r.srv, &srv}, {r.cli, &cli}} {
		if err := json.Unmarshal([]byte(x.out), x.res); err != nil {
			t.Fatalf("--json output: %v\n%s", err, x.out)
		}
	}
	if cli.Role != "client" || srv.Role != "server" || cli.Test != "ib_write_bw" || cli.MTU != 4096 || cli.GIDIndex != 1 {
		t.Errorf("client JSON %+v", cli)
	}
	if len(cli.Bandwidth) != 1 || cli.Bandwidth[0].Size != 3000 || cli.Bandwidth[0].Iters != 20 || cli.Bandwidth[0].BWAvg <= 0 {
		t.Errorf("client results %+v", cli.Bandwidth)
	}
	if len(srv.Bandwidth) != 1 || srv.Bandwidth[0] != cli.Bandwidth[0] {
		t.Errorf("server results %+v, client's %+v", srv.Bandwidth, cli.Bandwidth)
	}
	if len(cli.Local) != 1 || len(srv.Remote) != 1 || cli.Local[0] != srv.Remote[0] {
		t.Errorf("keys: client local %+v, server remote %+v", cli.Local, srv.Remote)
	}
	if g, err := netip.ParseAddr(cli.Local[0].GID); err != nil || !g.Unmap().IsLoopback() {
		t.Errorf("client GID %q", cli.Local[0].GID)
	}
	for _, f := range []string{srvPcap, cliPcap} {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		res, err := decode.Run(fh, io.Discard, decode.Options{})
		fh.Close()
		if err != nil {
			t.Fatal(err)
		}
		// 20 WRITEs of 3000 bytes at MTU 4096: one packet each, and their ACKs.
		if len(res.Errors) != 0 || res.RDMAFrames < 21 {
			t.Errorf("%s: %d RDMA frames, errors %v", filepath.Base(f), res.RDMAFrames, res.Errors)
		}
	}
}

// TestPerfCPUProfile: --cpuprofile writes a CPU profile of the run (a gzipped
// protocol buffer, as pprof reads it); the server, in the same process, cannot
// profile at the same time and runs without.
func TestPerfCPUProfile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "cli.prof")
	r := runPerfPair(t, "write_bw", []string{"-n", "200", "-s", "64K"}, nil, []string{"--cpuprofile", f})
	if r.srvCode != 0 || r.cliCode != 0 {
		t.Fatalf("exchange failed\n%s", r)
	}
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 64 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("%s: %d bytes, starting % x: not a gzipped profile", f, len(b), b[:min(len(b), 4)])
	}
	var stderr bytes.Buffer
	if code := command([]string{"write_bw", "--cpuprofile", "/nonexistent/dir/p", "-n", "5", "127.0.0.1"}, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "--cpuprofile") {
		t.Errorf("unwritable --cpuprofile: exit %d, %q", code, stderr.String())
	}
}

// TestPerfErrors: bad flags exit 2; a client with no server exits 1 and says so.
func TestPerfErrors(t *testing.T) {
	for _, args := range [][]string{{}, {"bogus_bw"}, {"atomic_lat"}, {"write_bw", "--transport", "iwarp"}, {"write_bw", "a", "b"},
		{"write_lat", "-b"}, {"write_bw", "--nosuchflag"}} {
		var out, errOut bytes.Buffer
		if code := command(args, &out, &errOut); code != 2 {
			t.Errorf("perf %v: exit %d, want 2 (%s)", args, code, errOut.String())
		}
	}
	var out, errOut bytes.Buffer
	if code := command([]string{"write_bw", "--transport", "iwarp"}, &out, &errOut); !strings.Contains(errOut.String(), "needs -R") || code != 2 {
		t.Errorf("iwarp: exit %d: %s", code, errOut.String())
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	start := time.Now()
	errOut.Reset()
	if code := command([]string{"write_bw", "-p", strconv.Itoa(port), "127.0.0.1"}, &out, &errOut); code != 1 ||
		!strings.Contains(errOut.String(), "Couldn't connect") {
		t.Errorf("no server: exit %d: %s", code, errOut.String())
	}
	if d := time.Since(start); d > DialWait+5*time.Second {
		t.Errorf("gave up after %v", d)
	}
}

// TestPerfMTUFlag runs -m below the port's MTU (4096 on loopback). perftest
// prints the MTU check_mtu settled on, the smaller of the two sides' (both
// sides print it after the exchange: "Mtu : 1024[B]" in rxe-write-bw.log), and
// the QPs cut messages into packets of that size: a 1000-byte message at MTU
// 256 is a FIRST, two MIDDLEs of 256 bytes and a LAST of 232, in the capture.
func TestPerfMTUFlag(t *testing.T) {
	for _, c := range []struct {
		test               string
		common             []string
		srvExtra, cliExtra []string
		want               int
	}{
		{"send_lat", []string{"-n", "5", "-s", "1000", "-m", "256"}, nil, nil, 256},
		{"write_bw", []string{"-n", "5", "-s", "1000"}, nil, []string{"-m", "256"}, 256}, // client only
		{"send_bw", []string{"-n", "5", "-s", "1000"}, []string{"-m", "512"}, nil, 512},  // server only
	} {
		t.Run(c.test+" "+strings.Join(append(append(c.common, c.srvExtra...), c.cliExtra...), " "), func(t *testing.T) {
			pcap := filepath.Join(t.TempDir(), "client.pcap")
			r := runPerfPair(t, c.test, c.common, c.srvExtra, append([]string{"--pcap", pcap}, c.cliExtra...))
			if r.srvCode != 0 || r.cliCode != 0 {
				t.Fatalf("exchange failed\n%s", r)
			}
			line := fmt.Sprintf(" Mtu             : %d[B]\n", c.want)
			for name, out := range map[string]string{"server": r.srv, "client": r.cli} {
				if strings.Count(out, line) != 1 || strings.Count(out, " Mtu ") != 1 {
					t.Errorf("%s does not print %q once:\n%s", name, line, out)
				}
			}
			counts := map[ibtransport.Opcode]int{}
			// A packet sent again (a tail loss probe: its ACK was late, as
			// under the race detector) is counted once.
			type qpPSN struct{ qp, psn uint32 }
			seen := map[qpPSN]bool{}
			frames, err := pcaptap.ReadRoCEFrames(pcap)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range frames {
				var pk ibtransport.Packet
				if err := pk.Decode(f.IB); err != nil {
					t.Fatal(err)
				}
				op := pk.BTH.Opcode()
				payload := len(pk.Payload)
				switch op {
				case ibtransport.OpcodeRCRDMAWriteFirst, ibtransport.OpcodeRCSendFirst, ibtransport.OpcodeRCSendMiddle, ibtransport.OpcodeRCSendLast,
					ibtransport.OpcodeRCRDMAWriteMiddle, ibtransport.OpcodeRCRDMAWriteLast:
				default:
					continue
				}
				k := qpPSN{pk.BTH.DestQP(), pk.BTH.PSN()}
				if seen[k] {
					continue
				}
				seen[k] = true
				counts[op]++
				want := c.want
				if op == ibtransport.OpcodeRCSendLast || op == ibtransport.OpcodeRCRDMAWriteLast {
					want = 1000 - (1000-1)/c.want*c.want
				}
				if payload != want {
					t.Fatalf("%v packet of %d payload bytes, want %d at MTU %d", op, payload, want, c.want)
				}
			}
			first, middle, last := ibtransport.OpcodeRCSendFirst, ibtransport.OpcodeRCSendMiddle, ibtransport.OpcodeRCSendLast
			if c.test == "write_bw" {
				first, middle, last = ibtransport.OpcodeRCRDMAWriteFirst, ibtransport.OpcodeRCRDMAWriteMiddle, ibtransport.OpcodeRCRDMAWriteLast
			}
			perMsg := (1000 + c.want - 1) / c.want
			if counts[first] < 5 || counts[last] != counts[first] || counts[middle] != (perMsg-2)*counts[first] {
				t.Errorf("captured %v FIRST, %v MIDDLE, %v LAST packets; want at least 5 messages of %d packets",
					counts[first], counts[middle], counts[last], perMsg)
			}
		})
	}
}

// TestPerfQPTimeout: -u sets the RC QPs' local ACK timeout, 14 (67 ms) unless
// given, as perftest's -u / --qp-timeout.
func TestPerfQPTimeout(t *testing.T) {
	for _, c := range []struct {
		args string
		want uint8
	}{{"write_bw", DefQPTimeout}, {"write_lat -u 20", 20}, {"send_bw --qp-timeout 0 host", 0}, {"read_lat -u 31", 31}} {
		o, err := parseArgs(strings.Fields(c.args), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		p, err := derive(o)
		if err != nil {
			t.Fatalf("%s: %v", c.args, err)
		}
		if p.qpTimeout != c.want {
			t.Errorf("%s: QP timeout %d, want %d", c.args, p.qpTimeout, c.want)
		}
	}
}

// TestReaped: a completion stands for -Q WRs, but the last one of an
// iterations run only for those left, so that the sender's count of completed
// WRs ends at the iterations, never above.
func TestReaped(t *testing.T) {
	for _, c := range []struct {
		ccnt, iters, cqMod uint64
		dur                bool
		want               uint64
	}{
		{0, 512, 100, false, 100},
		{400, 512, 100, false, 100},
		{500, 512, 100, false, 12}, // the last, for WRs 500..511
		{0, 5, 100, false, 5},
		{500, 512, 100, true, 100}, // -D: no last
		{0, 1000, 1, false, 1},
	} {
		if got := reaped(c.ccnt, c.iters, c.cqMod, c.dur); got != c.want {
			t.Errorf("reaped(%d, %d, %d, %v) = %d, want %d", c.ccnt, c.iters, c.cqMod, c.dur, got, c.want)
		}
	}
}
