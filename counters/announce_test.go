//go:build linux

package counters_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/softrdma/softrdma/counters"
)

// TestAnnounce: Serve leaves its address in AnnounceDir under its PID
// ($XDG_RUNTIME_DIR/softrdma/metrics) until Close; Announced lists it and
// removes the file of a process that has ended; Fetch of the listed
// address answers with this process's PID.
func TestAnnounce(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	dir := counters.AnnounceDir()
	if want := filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), "softrdma", "metrics"); dir != want {
		t.Fatalf("AnnounceDir = %s, want %s", dir, want)
	}
	// A process that has ended: its file is stale.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Skipf("cannot run true: %v", err)
	}
	srv, err := counters.Serve("0", &counters.Registry{})
	if err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, strconv.Itoa(dead.Process.Pid))
	if err := os.WriteFile(stale, []byte("127.0.0.1:1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	eps, err := counters.Announced(dir)
	if err != nil || len(eps) != 1 || eps[0].PID != os.Getpid() || eps[0].Addr != srv.Addr.String() {
		t.Errorf("Announced = %+v, %v; want this process at %v", eps, err, srv.Addr)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the ended process's file is still there: %v", err)
	}
	s, err := counters.Fetch(context.Background(), eps[0].Addr)
	if err != nil || s.PID != os.Getpid() || len(s.Devices) != 0 {
		t.Errorf("Fetch = %+v, %v; want PID %d and no devices", s, err, os.Getpid())
	}
	srv.Close()
	if eps, err := counters.Announced(dir); err != nil || len(eps) != 0 {
		t.Errorf("after Close: Announced = %+v, %v; want none", eps, err)
	}
}

// TestListenAddr: a bare port or :PORT is on the loopback address, an
// explicit host is kept.
func TestListenAddr(t *testing.T) {
	for in, want := range map[string]string{
		"": "127.0.0.1:0", "0": "127.0.0.1:0", "9464": "127.0.0.1:9464", ":9464": "127.0.0.1:9464",
		"0.0.0.0:9464": "0.0.0.0:9464", "[::1]:80": "[::1]:80", "localhost:1": "localhost:1",
	} {
		if got, err := counters.ListenAddr(in); err != nil || got != want {
			t.Errorf("ListenAddr(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := counters.ListenAddr("a:b:c"); err == nil {
		t.Error("ListenAddr(a:b:c): no error")
	}
}
