package verbsdev_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/counters"
	"github.com/softrdma/softrdma/devspec"
)

// TestCountersDump runs ibv_rc_pingpong at both ends on softrdma's library
// (pair) with SOFTRDMA_COUNTERS_DUMP=DIR/c-%p.json: each process writes its
// device's counters at exit, in its own file (%p, its PID). Each end sent
// its 20 messages of 64 bytes (one packet each: BTH and payload) once, plus
// what it sent again and its ACKs and NAKs (16 bytes: BTH and AETH); the
// QP, destroyed before exit, is in the device's totals.
func TestCountersDump(t *testing.T) {
	lib := buildLib(t)
	dir := t.TempDir()
	t.Setenv("SOFTRDMA_COUNTERS_DUMP", filepath.Join(dir, "c-%p.json"))
	const n, size = 20, 64
	pair(t, lib, "ibv_rc_pingpong", "-g", "1", "-n", "20", "-s", "64")
	files, _ := filepath.Glob(filepath.Join(dir, "c-*.json"))
	if len(files) != 2 {
		t.Fatalf("dump files %v, want one per process", files)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var s counters.Snapshot
		if err := json.Unmarshal(b, &s); err != nil || len(s.Devices) != 1 {
			t.Fatalf("%s: %v\n%s", f, err, b)
		}
		d := s.Devices[0]
		c := d.Counters
		var naks uint64
		for _, k := range counters.NAKCodes {
			naks += c.NAKsSent[k]
		}
		acks := c.AcksSent + naks + c.RNRNAKsSent
		sends := c.PacketsOut - acks - c.Retransmissions - c.Probes
		if d.Name != "sr_roce0" || d.Transport != "roce" || !strings.HasPrefix(d.Address, "127.") || len(d.QPs) != 0 {
			t.Errorf("%s: device %s %s %s, %d live QPs; want sr_roce0, roce, a loopback address, none", f, d.Name, d.Transport, d.Address, len(d.QPs))
		}
		if sends != n || c.BytesOut != (c.PacketsOut-acks)*(12+size)+acks*16 {
			t.Errorf("%s: packets_out %d bytes_out %d (ACKs and NAKs %d, retransmissions %d, probes %d): want %d SENDs of %d bytes once each",
				f, c.PacketsOut, c.BytesOut, acks, c.Retransmissions, c.Probes, n, 12+size)
		}
	}
}

// TestMetricsEndpoint starts ibv_rc_pingpong's server on softrdma's library
// with SOFTRDMA_METRICS=0: the library says on stderr where it serves the
// counters, and counters.Fetch of that address finds the process (its PID)
// and its device sr_roce0, active, once the program has opened it. A client
// then ends the server.
func TestMetricsEndpoint(t *testing.T) {
	lib := buildLib(t)
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir()) // its announce file goes there
	net3 := randomNet()
	srvAddr, cliAddr := net3+"1", net3+"2"
	port := fmt.Sprint(freeTCPPort(t))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := func(addr string, env []string, extra ...string) (*exec.Cmd, *syncBuffer) {
		cmd := exec.CommandContext(ctx, "ibv_rc_pingpong", append([]string{"-d", "sr_roce0", "-g", "1", "-n", "5", "-p", port}, extra...)...)
		cmd.Env = append(append(os.Environ(), "LD_LIBRARY_PATH="+lib, devspec.EnvVar+"=roce:"+addr), env...)
		out := &syncBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, out
	}
	srv, so := start(srvAddr, []string{"SOFTRDMA_METRICS=0"})
	defer func() { srv.Process.Kill() }()
	url := regexp.MustCompile(`softrdma: counters on (http://127\.0\.0\.1:\d+/metrics)`)
	var found *counters.Device
	var s counters.Snapshot
	for restarts := 0; found == nil; {
		if ctx.Err() != nil {
			t.Fatalf("no device in the server's counters: %+v\n%s", s, so.String())
		}
		time.Sleep(20 * time.Millisecond)
		if strings.Contains(so.String(), "Couldn't listen to port") && restarts < 5 {
			// Another process took the port after freeTCPPort: a new one.
			srv.Process.Kill()
			srv.Wait()
			restarts++
			port = fmt.Sprint(freeTCPPort(t))
			srv, so = start(srvAddr, []string{"SOFTRDMA_METRICS=0"})
			continue
		}
		m := url.FindStringSubmatch(so.String())
		if m == nil || !listening(t, port) {
			continue
		}
		var err error
		if s, err = counters.Fetch(ctx, m[1]); err != nil {
			t.Fatalf("Fetch %s: %v", m[1], err)
		}
		for i, d := range s.Devices {
			if d.Name == "sr_roce0" && d.Address == srvAddr && d.State == "active" {
				found = &s.Devices[i]
			}
		}
	}
	if s.PID != srv.Process.Pid || !strings.HasPrefix(s.Command, "ibv_rc_pingpong ") || found.Transport != "roce" {
		t.Errorf("server's counters: pid %d command %q device %+v; want pid %d, ibv_rc_pingpong", s.PID, s.Command, found, srv.Process.Pid)
	}
	cli, co := start(cliAddr, nil, srvAddr)
	if err := cli.Wait(); err != nil {
		t.Fatalf("client: %v\n%s", err, co.String())
	}
	if err := srv.Wait(); err != nil {
		t.Fatalf("server: %v\n%s", err, so.String())
	}
}
