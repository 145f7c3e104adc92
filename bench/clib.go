package bench

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
// rounds rounds alternating C and Go; a row gives the medians, the ratio
// (C/Go for bandwidth, Go/C for latency: 1 is "as good as softrdma perf"), the
// latency difference, and the CPU time of the C pair per message. Without the
// library or perftest the row says why it has no number.

// CLib describes one clib row: the C program and the softrdma perf test
// it is measured against, with their common arguments.
type CLib struct {
	Prog, Perf string
	Size       int
	Lat        bool
}

// CLibRows are the clib rows, in table order.
var CLibRows = []CLib{
	{Prog: "ib_write_bw", Perf: "write_bw", Size: 65536},
	{Prog: "ib_send_lat", Perf: "send_lat", Size: 64, Lat: true},
}

// cLibResult is one run of a tool: its client's result and the CPU time
// of both processes.
type cLibResult struct {
	value float64 // BW average MB/s, or t_typical us
	mtu   int     // the MTU the tool chose (its "Mtu : N[B]" line)
	cpu   time.Duration
}

// cLibAddrs are the two addresses the clib rows run between.
func cLibAddrs(o *Options) (server, client netip.Addr) {
	if len(o.Addrs) == 2 {
		return o.Addrs[0], o.Addrs[1]
	}
	return netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
}

// runCLib emits the clib rows.
func runCLib(o *Options, progress io.Writer, emit func(Row)) {
	srv, cli := cLibAddrs(o)
	fmt.Fprintf(progress, "softrdma bench: C verbs programs on the library vs softrdma perf, %v <-> %v (RoCEv2, udp), %d iterations, %d rounds\n", srv, cli, o.CLibIters, rounds)
	exe, err := os.Executable()
	if err != nil {
		emit(Row{Transport: "roce", Backend: "udp", Test: "clib", Note: "not measured: " + err.Error()})
		return
	}
	lib, libErr := launch.FindLib(o.Lib, os.Getenv(launch.LibEnvVar), exe)
	for _, c := range CLibRows {
		r := Row{Transport: "roce", Backend: "udp", Test: c.Prog + " / perf " + c.Perf, Size: c.Size, Unit: "MB/s"}
		if c.Lat {
			r.Unit = "us"
		}
		if libErr != nil {
			r.Note = "not measured: " + libErr.Error()
			emit(r)
			continue
		}
		if _, err := exec.LookPath(c.Prog); err != nil {
			r.Note = "not measured: needs perftest's " + c.Prog + " (apt-get install perftest)"
			emit(r)
			continue
		}
		emit(cLibRow(r, c, o, exe, lib, srv, cli))
	}
}

// cLibRow measures one row: rounds rounds of the C program, then
// softrdma perf.
func cLibRow(r Row, c CLib, o *Options, exe, lib string, srv, cli netip.Addr) Row {
	args := []string{"-s", strconv.Itoa(c.Size), "-n", strconv.Itoa(o.CLibIters)}
	if !c.Lat {
		args = append(args, "-N") // no peak: perftest's peak is quadratic in -n
	}
	var cs, gs []float64
	var cpu time.Duration
	cMTU, gMTU := 0, 0
	for range rounds {
		res, err := cLibPair(c, args, exe, lib, srv, cli, false)
		if err != nil {
			return failed(r, c.Prog, err)
		}
		cs, cpu, cMTU = append(cs, res.value), cpu+res.cpu, res.mtu
		if res, err = cLibPair(c, args, exe, lib, srv, cli, true); err != nil {
			return failed(r, "softrdma perf "+c.Perf, err)
		}
		gs, gMTU = append(gs, res.value), res.mtu
	}
	r.Value, r.Base = median(cs), median(gs)
	r.Samples, r.BaseCount = rounds*o.CLibIters, rounds*o.CLibIters
	r.CPUPerMsg = float64(cpu.Microseconds()) / float64(rounds*o.CLibIters)
	r.Baseline = fmt.Sprintf("softrdma perf %s (Go), same addresses; MTU %d (C) and %d (Go)", c.Perf, cMTU, gMTU)
	r.Ratio = ratio(r.Value, r.Base)
	if c.Lat {
		r.Test = c.Prog + " / perf " + c.Perf + " t_typical"
		r.Ratio = ratio(r.Base, r.Value)
		r.Baseline += fmt.Sprintf("; C - Go = %+.1f us", r.Value-r.Base)
	}
	return r
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// cLibTimeout bounds one run of a tool.
const cLibTimeout = 2 * time.Minute

// cLibPair runs one tool as a server on srv and a client on cli: the C
// program on the library (goTool false), else softrdma perf (exe). It
// returns the client's result.
func cLibPair(c CLib, args []string, exe, lib string, srv, cli netip.Addr, goTool bool) (cLibResult, error) {
	port, err := freePort(srv)
	if err != nil {
		return cLibResult{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cLibTimeout)
	defer cancel()
	start := func(addr netip.Addr, extra ...string) (*exec.Cmd, *bytes.Buffer, error) {
		var cmd *exec.Cmd
		if goTool {
			a := append([]string{"perf", c.Perf, "-d", addr.String(), "-p", strconv.Itoa(port)}, args...)
			cmd = exec.CommandContext(ctx, exe, append(a, extra...)...)
			cmd.Env = os.Environ()
		} else {
			a := append([]string{"-d", "sr_roce0", "-p", strconv.Itoa(port)}, args...)
			cmd = exec.CommandContext(ctx, c.Prog, append(a, extra...)...)
			cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib, "SOFTRDMA_DEVICES=roce:"+addr.String())
		}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		return cmd, &out, cmd.Start()
	}
	server, sout, err := start(srv)
	if err != nil {
		return cLibResult{}, err
	}
	// perftest's client connects once: wait until the server listens, by
	// looking (a connection would be the server's one).
	for deadline := time.Now().Add(30 * time.Second); !listening(server.Process.Pid, port); {
		if time.Now().After(deadline) {
			server.Process.Kill()
			server.Wait()
			return cLibResult{}, fmt.Errorf("server never listened: %s", tail(sout))
		}
		time.Sleep(10 * time.Millisecond)
	}
	client, cout, err := start(cli, srv.String())
	if err != nil {
		server.Process.Kill()
		server.Wait()
		return cLibResult{}, err
	}
	cerr := client.Wait()
	serr := server.Wait()
	if cerr != nil || serr != nil {
		return cLibResult{}, fmt.Errorf("client: %v: %s; server: %v: %s", cerr, tail(cout), serr, tail(sout))
	}
	res, err := parsePerftest(cout.String(), c.Lat)
	if err != nil {
		return res, err
	}
	for _, p := range []*os.ProcessState{client.ProcessState, server.ProcessState} {
		res.cpu += p.UserTime() + p.SystemTime()
	}
	return res, nil
}

var (
	mtuLine = regexp.MustCompile(`(?m)^\s*Mtu\s*:\s*([0-9]+)\[B\]`)
	// The result row: the line after the "#bytes" header.
	resultRow = regexp.MustCompile(`(?m)^\s*#bytes[^\n]*\n\s*([0-9][^\n]*)`)
)

// parsePerftest reads perftest's (and softrdma perf's) client output:
// the BW average (MB/sec) of a bandwidth row, or t_typical (usec) of a latency
// row.
func parsePerftest(out string, lat bool) (cLibResult, error) {
	var res cLibResult
	if m := mtuLine.FindStringSubmatch(out); m != nil {
		res.mtu, _ = strconv.Atoi(m[1])
	}
	m := resultRow.FindStringSubmatch(out)
	if m == nil {
		return res, fmt.Errorf("no result row in %q", tail(bytes.NewBufferString(out)))
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

// tail is the last lines of a tool's output, for an error.
func tail(b *bytes.Buffer) string {
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	return strings.Join(lines[max(0, len(lines)-4):], " | ")
}

// freePort returns a TCP port that was free on a a moment ago.
func freePort(a netip.Addr) (int, error) {
	l, err := net.Listen("tcp", netip.AddrPortFrom(a, 0).String())
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// listening reports whether a TCP socket listens on port in the network
// namespace of process pid, from /proc/PID/net/tcp and tcp6 (state 0A is
// LISTEN; softrdma perf listens on the IPv6 wildcard). Not /proc/net: that
// is the namespace of this process's main thread, which the bench's
// namespace set-up can leave in namespace A while the tools run in this one.
func listening(pid, port int) bool {
	want := fmt.Sprintf(":%04X", port)
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "net", f))
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
