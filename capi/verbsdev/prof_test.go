package verbsdev_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestCPUProfile runs ibv_devices with SOFTRDMA_CPUPROFILE set: the library
// profiles its Go side from load to exit and writes the profile (a gzipped
// protocol buffer, what go tool pprof reads) when the program exits.
func TestCPUProfile(t *testing.T) {
	lib := buildLib(t)
	file := filepath.Join(t.TempDir(), "cpu.prof")
	t.Setenv("SOFTRDMA_CPUPROFILE", file)
	if _, stderr, err := run(t, lib, "roce:127.0.0.1", "ibv_devices"); err != nil {
		t.Fatalf("ibv_devices: %v\n%s", err, stderr)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("no profile: %v", err)
	}
	if !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		t.Errorf("%s: %d bytes, not a gzipped profile: % x", file, len(b), b[:min(len(b), 16)])
	}
}

// TestPollSleeps (testdata/pollwait.c): a program's busy-poll loop sleeps
// while the device's CQs are empty (ten polls of an empty CQ take the eight
// 100 ms sleeps they ask for), and a completion on another CQ of the device
// ends a sleep of a minute at once.
func TestPollSleeps(t *testing.T) {
	lib := buildLib(t)
	prog := filepath.Join(t.TempDir(), "pollwait")
	if o, err := exec.Command("gcc", "-Wall", "-pthread", "-o", prog, "testdata/pollwait.c", filepath.Join(lib, "libibverbs.so.1")).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, o)
	}
	for _, tc := range []struct {
		mode, sleep, want string
	}{
		{"idle", "100000", "idle polls: 0 completions, slept: yes\n"},
		{"wake", "60000000", "connected to itself: rc=0\na completion on another CQ woke the poll: yes, 0 completions on the idle CQ\nreceived: success, through the wire and back\nsent: success\n"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Setenv("SOFTRDMA_POLL_SPIN_US", "0")
			t.Setenv("SOFTRDMA_POLL_SLEEP_US", tc.sleep)
			addr := fmt.Sprintf("roce:127.%d.%d.1", 100+rand.IntN(100), 1+rand.IntN(250))
			out, errOut, err := run(t, lib, addr, prog, tc.mode)
			if err != nil || out != tc.want {
				t.Errorf("pollwait %s: %v\n%s%s\nwant\n%s", tc.mode, err, out, errOut, tc.want)
			}
		})
	}
}
