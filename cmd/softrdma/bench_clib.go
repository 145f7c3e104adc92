package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/softrdma/softrdma/launch"
)

// The clib rows (--tests clib) measure unmodified C verbs programs on the
// drop-in library (make lib) beside softrdma's own Go tools, on the same path
// in the same run, as issue 20 asks: perftest's ib_write_bw at 64 KiB against
// softrdma perf write_bw, and ib_send_lat at 64 B against softrdma perf
// send_lat. Each tool runs as two processes, a server and a client, over
// RoCEv2 on the udp backend between two addresses of this host (--addrs, else
// 127.0.0.1 and 127.0.0.2: the loopback path, no namespace, no root), in
// benchRounds rounds alternating C and Go; a row gives the medians, the ratio
// (C/Go for bandwidth, Go/C for latency: 1 is "as good as softrdma perf"), the
// latency difference, and the CPU time of the C pair per message. Without the
// library or perftest the row says why it has no number.

// benchCLib describes one clib row: the C program and the softrdma perf test
// it is measured against, with their common arguments.
type benchCLib struct {
	prog, perf string
	size       int
	lat        bool
}

var benchCLibRows = []benchCLib{
	{prog: "ib_write_bw", perf: "write_bw", size: 65536},
	{prog: "ib_send_lat", perf: "send_lat", size: 64, lat: true},
}

// benchCLibResult is one run of a tool: its client's result and the CPU time
// of both processes.
type benchCLibResult struct {
	value float64 // BW average MB/s, or t_typical us
	mtu   int     // the MTU the tool chose (its "Mtu : N[B]" line)
	cpu   time.Duration
}

// benchCLibAddrs are the two addresses the clib rows run between.
func benchCLibAddrs(o *benchOptions) (server, client netip.Addr) {
	if len(o.addrs) == 2 {
		return o.addrs[0], o.addrs[1]
	}
	return netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
}

// benchRunCLib emits the clib rows.
func benchRunCLib(o *benchOptions, progress io.Writer, emit func(benchRow)) {
	srv, cli := benchCLibAddrs(o)
	fmt.Fprintf(progress, "softrdma bench: C verbs programs on the library vs softrdma perf, %v <-> %v (RoCEv2, udp), %d iterations, %d rounds\n", srv, cli, o.clibIters, benchRounds)
	exe, err := os.Executable()
	if err != nil {
		emit(benchRow{Transport: "roce", Backend: "udp", Test: "clib", Note: "not measured: " + err.Error()})
		return
	}
	lib, libErr := launch.FindLib(o.lib, os.Getenv(launch.LibEnvVar), exe)
	for _, c := range benchCLibRows {
		r := benchRow{Transport: "roce", Backend: "udp", Test: c.prog + " / perf " + c.perf, Size: c.size, Unit: "MB/s"}
		if c.lat {
			r.Unit = "us"
		}
		if libErr != nil {
			r.Note = "not measured: " + libErr.Error()
			emit(r)
			continue
		}
		if _, err := exec.LookPath(c.prog); err != nil {
			r.Note = "not measured: needs perftest's " + c.prog + " (apt-get install perftest)"
			emit(r)
			continue
		}
		emit(benchCLibRow(r, c, o, exe, lib, srv, cli))
	}
}

// benchCLibRow measures one row: benchRounds rounds of the C program, then
// softrdma perf.
func benchCLibRow(r benchRow, c benchCLib, o *benchOptions, exe, lib string, srv, cli netip.Addr) benchRow {
	args := []string{"-s", strconv.Itoa(c.size), "-n", strconv.Itoa(o.clibIters)}
	if !c.lat {
		args = append(args, "-N") // no peak: perftest's peak is quadratic in -n
	}
	var cs, gs []float64
	var cpu time.Duration
	cMTU, gMTU := 0, 0
	for range benchRounds {
		res, err := benchCLibPair(c, args, exe, lib, srv, cli, false)
		if err != nil {
			return failed(r, c.prog, err)
		}
		cs, cpu, cMTU = append(cs, res.value), cpu+res.cpu, res.mtu
		if res, err = benchCLibPair(c, args, exe, lib, srv, cli, true); err != nil {
			return failed(r, "softrdma perf "+c.perf, err)
		}
		gs, gMTU = append(gs, res.value), res.mtu
	}
	r.Value, r.Base = benchMedian(cs), benchMedian(gs)
	r.Samples, r.BaseCount = benchRounds*o.clibIters, benchRounds*o.clibIters
	r.CPUPerMsg = float64(cpu.Microseconds()) / float64(benchRounds*o.clibIters)
	r.Baseline = fmt.Sprintf("softrdma perf %s (Go), same addresses; MTU %d (C) and %d (Go)", c.perf, cMTU, gMTU)
	r.Ratio = benchRatio(r.Value, r.Base)
	if c.lat {
		r.Test = c.prog + " / perf " + c.perf + " t_typical"
		r.Ratio = benchRatio(r.Base, r.Value)
		r.Baseline += fmt.Sprintf("; C - Go = %+.1f us", r.Value-r.Base)
	}
	return r
}

func benchMedian(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// benchCLibTimeout bounds one run of a tool.
const benchCLibTimeout = 2 * time.Minute

// benchCLibPair runs one tool as a server on srv and a client on cli: the C
// program on the library (goTool false), else softrdma perf (exe). It
// returns the client's result.
func benchCLibPair(c benchCLib, args []string, exe, lib string, srv, cli netip.Addr, goTool bool) (benchCLibResult, error) {
	port, err := benchFreePort(srv)
	if err != nil {
		return benchCLibResult{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), benchCLibTimeout)
	defer cancel()
	start := func(addr netip.Addr, extra ...string) (*exec.Cmd, *bytes.Buffer, error) {
		var cmd *exec.Cmd
		if goTool {
			a := append([]string{"perf", c.perf, "-d", addr.String(), "-p", strconv.Itoa(port)}, args...)
			cmd = exec.CommandContext(ctx, exe, append(a, extra...)...)
			cmd.Env = os.Environ()
		} else {
			a := append([]string{"-d", "sr_roce0", "-p", strconv.Itoa(port)}, args...)
			cmd = exec.CommandContext(ctx, c.prog, append(a, extra...)...)
			cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib, "SOFTRDMA_DEVICES=roce:"+addr.String())
		}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		return cmd, &out, cmd.Start()
	}
	server, sout, err := start(srv)
	if err != nil {
		return benchCLibResult{}, err
	}
	// perftest's client connects once: wait until the server listens, by
	// looking (a connection would be the server's one).
	for deadline := time.Now().Add(30 * time.Second); !benchListening(port); {
		if time.Now().After(deadline) {
			server.Process.Kill()
			server.Wait()
			return benchCLibResult{}, fmt.Errorf("server never listened: %s", benchTail(sout))
		}
		time.Sleep(10 * time.Millisecond)
	}
	client, cout, err := start(cli, srv.String())
	if err != nil {
		server.Process.Kill()
		server.Wait()
		return benchCLibResult{}, err
	}
	cerr := client.Wait()
	serr := server.Wait()
	if cerr != nil || serr != nil {
		return benchCLibResult{}, fmt.Errorf("client: %v: %s; server: %v: %s", cerr, benchTail(cout), serr, benchTail(sout))
	}
	res, err := benchParsePerftest(cout.String(), c.lat)
	if err != nil {
		return res, err
	}
	for _, p := range []*os.ProcessState{client.ProcessState, server.ProcessState} {
		res.cpu += p.UserTime() + p.SystemTime()
	}
	return res, nil
}

var (
	benchMTULine = regexp.MustCompile(`(?m)^\s*Mtu\s*:\s*([0-9]+)\[B\]`)
	// The result row: the line after the "#bytes" header.
	benchResultRow = regexp.MustCompile(`(?m)^\s*#bytes[^\n]*\n\s*([0-9][^\n]*)`)
)

// benchParsePerftest reads perftest's (and softrdma perf's) client output:
// the BW average (MB/sec) of a bandwidth row, or t_typical (usec) of a latency
// row.
func benchParsePerftest(out string, lat bool) (benchCLibResult, error) {
	var res benchCLibResult
	if m := benchMTULine.FindStringSubmatch(out); m != nil {
		res.mtu, _ = strconv.Atoi(m[1])
	}
	m := benchResultRow.FindStringSubmatch(out)
	if m == nil {
		return res, fmt.Errorf("no result row in %q", benchTail(bytes.NewBufferString(out)))
	}
	f := strings.Fields(m[1])
	// bw: #bytes #iterations peak average msgrate; lat: #bytes #iterations
	// t_min t_max t_typical ...
	i := 3
	if lat {
		i = 4
	}
	if len(f) <= i {
		return res, fmt.Errorf("result row %q: %d fields", m[1], len(f))
	}
	v, err := strconv.ParseFloat(f[i], 64)
	if err != nil {
		return res, fmt.Errorf("result row %q: field %d: %w", m[1], i, err)
	}
	res.value = v
	return res, nil
}

// benchTail is the last lines of a tool's output, for an error.
func benchTail(b *bytes.Buffer) string {
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	return strings.Join(lines[max(0, len(lines)-4):], " | ")
}

// benchFreePort returns a TCP port that was free on a a moment ago.
func benchFreePort(a netip.Addr) (int, error) {
	l, err := net.Listen("tcp", netip.AddrPortFrom(a, 0).String())
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// benchListening reports whether a TCP socket listens on port, from
// /proc/net/tcp and tcp6 (state 0A is LISTEN; softrdma perf listens on
// the IPv6 wildcard).
func benchListening(port int) bool {
	want := fmt.Sprintf(":%04X", port)
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(filepath.Join("/proc", "net", f))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) > 3 && strings.HasSuffix(f[1], want) && f[3] == "0A" {
				return true
			}
		}
	}
	return false
}
