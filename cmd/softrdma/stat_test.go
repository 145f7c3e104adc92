package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/internal/syncbuf"

	"github.com/softrdma/softrdma/counters"
)

// TestPerfCounters runs softrdma perf write_bw, server and client, in this
// process on two loopback addresses: 50 WRITEs of 4096 bytes. The server
// serves --metrics on a port the kernel picks and says where on stderr;
// softrdma stat --from reads it while the server waits (its device active,
// nothing counted yet; JSON keys snake_case). The client's
// --report-counters prints its device's line after the result, and
// --dump-counters FILE.json of both sides hold the exchange: the client sent
// each WRITE once plus what it sent again, every packet a BTH, a RETH and
// 4096 bytes; the server received only such packets.
func TestPerfCounters(t *testing.T) {
	for _, asJSON := range []bool{false, true} {
		t.Run(fmt.Sprintf("json=%v", asJSON), func(t *testing.T) { testPerfCounters(t, asJSON) })
	}
}

// testPerfCounters is TestPerfCounters with the client's result as text
// or, with asJSON, perf --json: the counters are then a second JSON
// document.
func testPerfCounters(t *testing.T, asJSON bool) {
	const n, pkt = 50, 12 + 16 + 4096 // WRITEs; BTH, RETH, -s 4096
	// Addresses of their own in each run (go test -count): this
	// process's registry keeps the devices of the runs before, and the
	// metrics endpoint sums devices of the same name and address.
	perfCountersRuns++
	srvAddr := fmt.Sprintf("127.0.94.%d", 2*perfCountersRuns+1)
	cliAddr := fmt.Sprintf("127.0.94.%d", 2*perfCountersRuns+2)
	dir := t.TempDir()
	srvDump, cliDump := filepath.Join(dir, "server.json"), filepath.Join(dir, "client.json")
	var srvOut, srvErr syncbuf.Buffer
	done := make(chan int, 1)
	go func() {
		done <- runCommand([]string{"perf", "write_bw", "-d", srvAddr, "-p", "18531", "-s", "4096", "-n", "50",
			"--metrics", "127.0.0.1:0", "--dump-counters", srvDump}, &srvOut, &srvErr)
	}()
	url := regexp.MustCompile(`counters on http://(127\.0\.0\.1:\d+)/metrics`)
	var addr string
	for deadline := time.Now().Add(20 * time.Second); addr == ""; {
		if m := url.FindStringSubmatch(srvErr.String()); m != nil {
			addr = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("the server said no metrics address: %q", srvErr.String())
		} else {
			time.Sleep(10 * time.Millisecond)
		}
	}
	// The server's device opens after the endpoint starts: wait for it.
	var stat struct{ Processes []counters.Snapshot }
	var statOut string
	for deadline := time.Now().Add(20 * time.Second); ; {
		var out, errb bytes.Buffer
		if code := runCommand([]string{"stat", "--from", addr, "--json"}, &out, &errb); code != 0 {
			t.Fatalf("stat --from %s: exit %d: %s", addr, code, errb.String())
		}
		statOut = out.String()
		if err := json.Unmarshal(out.Bytes(), &stat); err != nil {
			t.Fatalf("stat --json: %v\n%s", err, statOut)
		}
		if len(stat.Processes) == 1 && serverDevice(stat.Processes[0], srvAddr) != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stat --from: no device:\n%s", statOut)
		}
		time.Sleep(10 * time.Millisecond)
	}
	p := stat.Processes[0]
	if d := serverDevice(p, srvAddr); p.PID != os.Getpid() || d.Transport != "roce" || d.Counters.PacketsOut != 0 || len(d.QPs) != 0 {
		t.Errorf("stat --from while the server waits: %+v", p)
	}
	for _, m := range regexp.MustCompile(`"([^"]+)":`).FindAllStringSubmatch(statOut, -1) {
		if !regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`).MatchString(m[1]) {
			t.Errorf("stat --json key %q is not snake_case", m[1])
		}
	}
	// -d NAME keeps that device's lines only.
	for _, c := range []struct {
		name string
		want bool
	}{{"lo", true}, {"nosuch", false}} {
		var out, errb bytes.Buffer
		code := runCommand([]string{"stat", "--from", addr, "-d", c.name}, &out, &errb)
		if got := strings.Contains(out.String(), "\nlink lo/1 transport roce address "+srvAddr+" state active "); code != 0 || got != c.want {
			t.Errorf("stat --from -d %s: exit %d, server's line there %v, want %v:\n%s%s", c.name, code, got, c.want, out.String(), errb.String())
		}
	}

	var out, errb bytes.Buffer
	args := []string{"perf", "write_bw", "-d", cliAddr, "-p", "18531", "-s", "4096", "-n", "50",
		"--report-counters", "--dump-counters", cliDump, srvAddr}
	if asJSON {
		args = append(args, "--json")
	}
	if code := runCommand(args, &out, &errb); code != 0 {
		t.Fatalf("perf client: exit %d\n%s%s", code, out.String(), errb.String())
	}
	if code := <-done; code != 0 {
		t.Fatalf("perf server: exit %d\n%s%s", code, srvOut.String(), srvErr.String())
	}
	if asJSON {
		// The result, then {"counters": SNAPSHOT}, the same as the dump's.
		dec := json.NewDecoder(bytes.NewReader(out.Bytes()))
		var result map[string]any
		var report struct{ Counters counters.Snapshot }
		if err := dec.Decode(&result); err != nil || result["test"] != "ib_write_bw" {
			t.Fatalf("perf --json: %v, %v\n%s", err, result, out.String())
		}
		if err := dec.Decode(&report); err != nil || len(report.Counters.Devices) != 1 || report.Counters.Devices[0].Address != cliAddr {
			t.Errorf("--report-counters --json: %v, %+v\n%s", err, report, out.String())
		}
	} else if !strings.Contains(out.String(), "counters:\nlink lo/1 transport roce address "+cliAddr+" state closed ") {
		t.Errorf("--report-counters: no counters after the result:\n%s", out.String())
	}
	// Each dump has the devices opened in this process since its command
	// started: the server's has the client's too (one process here).
	read := func(f, addr string) counters.Counters {
		t.Helper()
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var s counters.Snapshot
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatalf("%s: %v\n%s", f, err, b)
		}
		for _, d := range s.Devices {
			if d.Address == addr && d.State == "closed" {
				return d.Counters
			}
		}
		t.Fatalf("%s: no closed device on %s:\n%s", f, addr, b)
		return counters.Counters{}
	}
	c, s := read(cliDump, cliAddr), read(srvDump, srvAddr)
	if sent := c.PacketsOut - c.Retransmissions - c.Probes; sent != n || c.BytesOut != c.PacketsOut*pkt {
		t.Errorf("client: packets_out %d (retransmissions %d, probes %d), bytes_out %d; want %d WRITEs of %d bytes once each",
			c.PacketsOut, c.Retransmissions, c.Probes, c.BytesOut, n, pkt)
	}
	if s.PacketsIn < n || s.BytesIn != s.PacketsIn*pkt || s.PacketsOut != s.AcksSent+s.NAKsSent["psn_sequence_error"] {
		t.Errorf("server: packets_in %d bytes_in %d packets_out %d acks_sent %d; want %d+ WRITE packets of %d bytes in, ACKs out",
			s.PacketsIn, s.BytesIn, s.PacketsOut, s.AcksSent, n, pkt)
	}
}

var perfCountersRuns int

// serverDevice is TestPerfCounters' server's device in s: active on addr.
func serverDevice(s counters.Snapshot, addr string) *counters.Device {
	for i, d := range s.Devices {
		if d.Address == addr && d.State == "active" {
			return &s.Devices[i]
		}
	}
	return nil
}

// TestMetricsFlags: every long-running command takes --metrics and
// --dump-counters; a --metrics address that cannot be listened on fails
// the command before it starts, naming the flag.
func TestMetricsFlags(t *testing.T) {
	for _, cmd := range [][]string{{"perf"}, {"pingpong"}, {"rping"}, {"conform", "serve"}} {
		var out, errb bytes.Buffer
		runCommand(append(cmd, "--help"), &out, &errb)
		for _, f := range []string{"--metrics string", "--dump-counters string"} {
			if !strings.Contains(errb.String(), f) {
				t.Errorf("softrdma %s --help: no %s", strings.Join(cmd, " "), f)
			}
		}
	}
	var out, errb bytes.Buffer
	code := runCommand([]string{"rping", "-s", "-a", "127.0.0.1", "--timeout", "5s", "--metrics", "198.51.100.1:1"}, &out, &errb)
	if code != 1 || !strings.HasPrefix(errb.String(), "softrdma rping: --metrics 198.51.100.1:1: metrics: listen tcp 198.51.100.1:1: ") {
		t.Errorf("rping --metrics 198.51.100.1:1: exit %d, stderr %q", code, errb.String())
	}
}

// TestStatNone: softrdma stat with no process announced says how to get
// one, exit 1.
func TestStatNone(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	var out, errb bytes.Buffer
	if code := runCommand([]string{"stat"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "no process serves counters") ||
		!strings.Contains(errb.String(), "--metrics ADDR") {
		t.Errorf("stat: exit %d, stderr %q", code, errb.String())
	}
}
