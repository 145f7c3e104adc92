package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/counters"
	"github.com/softrdma/softrdma/internal/syncbuf"
	"github.com/softrdma/softrdma/internal/tcploop"
)

// TestMetricsLongRunning: pingpong's and rping's servers, run with --metrics
// 0 and --dump-counters FILE.json, serve their device's counters while they
// wait for a client (counters.Fetch of the address they print finds this
// process and the device on the server's address, active), and write them
// when they end: the device closed, with the packets the run received.
func TestMetricsLongRunning(t *testing.T) {
	urlRE := regexp.MustCompile(`counters on (http://\S+/metrics)`)
	for _, c := range []struct {
		name           string
		server, client func(srv, cli, port string) []string
	}{
		{"pingpong",
			func(srv, _, port string) []string {
				return []string{"pingpong", "-g", "1", "-n", "20", "-p", port, "--timeout", "60s", "-d", srv}
			},
			func(srv, cli, port string) []string {
				return []string{"pingpong", "-g", "1", "-n", "20", "-p", port, "--timeout", "60s", "-d", cli, srv}
			}},
		{"rping",
			func(srv, _, port string) []string {
				return []string{"rping", "--transport", "roce", "-s", "-a", srv, "-p", port, "-C", "3", "--timeout", "60s"}
			},
			func(srv, cli, port string) []string {
				return []string{"rping", "--transport", "roce", "-c", "-a", srv, "-I", cli, "-p", port, "-C", "3", "--timeout", "60s"}
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
			net := loopbackNet()
			srv, cli := net+"1", net+"2"
			port := strconv.Itoa(tcploop.FreePort(t))
			dump := filepath.Join(t.TempDir(), "counters.json")
			var srvOut, srvErr syncbuf.Buffer
			done := make(chan int, 1)
			go func() {
				done <- runCommand(append(c.server(srv, cli, port), "--metrics", "0", "--dump-counters", dump), &srvOut, &srvErr)
			}()
			var url string
			for deadline := time.Now().Add(20 * time.Second); url == "" && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				if m := urlRE.FindStringSubmatch(srvErr.String()); m != nil {
					url = m[1]
				}
			}
			if url == "" {
				t.Fatalf("no 'counters on' line; stderr %q", srvErr.String())
			}
			// The device opens before the server waits; fetch until it is there.
			var dev *counters.Device
			var snap counters.Snapshot
			for deadline := time.Now().Add(20 * time.Second); dev == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				s, err := counters.Fetch(ctx, url)
				cancel()
				if err != nil {
					t.Fatalf("fetch %s: %v", url, err)
				}
				snap = s
				for i := range s.Devices {
					if s.Devices[i].Address == srv && s.Devices[i].State == "active" {
						dev = &s.Devices[i]
					}
				}
			}
			if dev == nil || snap.PID != os.Getpid() || dev.Transport != "roce" {
				t.Fatalf("%s: pid %d (want %d), no active roce device on %s: %+v", url, snap.PID, os.Getpid(), srv, snap.Devices)
			}
			var cliOut, cliErr bytes.Buffer
			if code := runCommand(c.client(srv, cli, port), &cliOut, &cliErr); code != 0 {
				t.Fatalf("client exit %d: %s%s", code, cliOut.String(), cliErr.String())
			}
			if code := <-done; code != 0 {
				t.Fatalf("server exit %d: %s%s", code, srvOut.String(), srvErr.String())
			}
			checkCountersDump(t, dump, srv)
		})
	}
}

// TestMetricsConformServe: conform serve with --metrics 0 and
// --dump-counters FILE.json serves its device's counters while it waits for a
// tester, and writes them when it ends: the device closed, with the packets
// of the cases the tester ran against it.
func TestMetricsConformServe(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	net := loopbackNet()
	srv, tester := net+"1", net+"2"
	dump := filepath.Join(t.TempDir(), "counters.json")
	var srvOut, srvErr syncbuf.Buffer
	o, err := conformServeParse([]string{"--addr", srv, "--listen", srv + ":0", "--metrics", "0", "--dump-counters", dump}, &srvErr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- o.metrics.run("conform serve", &srvErr, func() int { return conformServe(ctx, o, &srvOut, &srvErr) })
	}()
	urlRE := regexp.MustCompile(`counters on (http://\S+/metrics)`)
	var url, addr string
	for deadline := time.Now().Add(20 * time.Second); (url == "" || addr == "") && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if m := urlRE.FindStringSubmatch(srvErr.String()); m != nil {
			url = m[1]
		}
		if m := conformServeAddrRE.FindStringSubmatch(srvOut.String()); m != nil {
			addr = m[1]
		}
	}
	if url == "" || addr == "" {
		cancel()
		t.Fatalf("conform serve did not start (exit %d): %s%s", <-done, srvOut.String(), srvErr.String())
	}
	fctx, fcancel := context.WithTimeout(context.Background(), 5*time.Second)
	snap, err := counters.Fetch(fctx, url)
	fcancel()
	if err != nil {
		t.Fatalf("fetch %s: %v", url, err)
	}
	active := false
	for _, d := range snap.Devices {
		active = active || (d.Address == srv && d.State == "active" && d.Transport == "roce")
	}
	if !active || snap.PID != os.Getpid() {
		t.Fatalf("%s: pid %d (want %d), no active roce device on %s: %+v", url, snap.PID, os.Getpid(), srv, snap.Devices)
	}
	var out, errOut bytes.Buffer
	if code := conformCmd([]string{"--peer", addr, "--local", tester, "--case", "rc.dup.read,ud.*"}, &out, &errOut); code != 0 {
		t.Fatalf("tester exit %d:\n%s%s", code, out.String(), errOut.String())
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("server exit %d: %s%s", code, srvOut.String(), srvErr.String())
	}
	checkCountersDump(t, dump, srv)
}

// checkCountersDump checks the JSON file --dump-counters wrote: it holds the
// device on addr, closed, with packets each way, in snake_case keys.
func checkCountersDump(t *testing.T, dump, addr string) {
	t.Helper()
	b, err := os.ReadFile(dump)
	if err != nil {
		t.Fatalf("--dump-counters: %v", err)
	}
	var s counters.Snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("--dump-counters: %v\n%s", err, b)
	}
	found := false
	for _, d := range s.Devices {
		if d.Address == addr {
			found = true
			if d.State != "closed" || d.Counters.PacketsIn == 0 || d.Counters.PacketsOut == 0 {
				t.Errorf("dumped device %+v: want closed, with packets each way", d)
			}
		}
	}
	if !found || !strings.Contains(string(b), `"packets_in"`) {
		t.Errorf("--dump-counters: no device on %s:\n%s", addr, b)
	}
}
