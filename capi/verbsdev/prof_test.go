package verbsdev_test

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/decode"
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

// TestBlockProfile runs ibv_devices with SOFTRDMA_BLOCKPROFILE set: the
// library writes Go's block profile to the file and the mutex profile beside
// it (FILE.mutex) when the program exits, both gzipped protocol buffers.
func TestBlockProfile(t *testing.T) {
	lib := buildLib(t)
	file := filepath.Join(t.TempDir(), "block.prof")
	t.Setenv("SOFTRDMA_BLOCKPROFILE", file)
	if _, stderr, err := run(t, lib, "roce:127.0.0.1", "ibv_devices"); err != nil {
		t.Fatalf("ibv_devices: %v\n%s", err, stderr)
	}
	for _, f := range []string{file, file + ".mutex"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatalf("no profile: %v", err)
		}
		if !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
			t.Errorf("%s: %d bytes, not a gzipped profile: % x", f, len(b), b[:min(len(b), 16)])
		}
	}
}

// TestExecutionTrace: SOFTRDMA_TRACE=FILE writes a Go execution trace of the
// library's Go side (go tool trace), from load to exit: its header, and the
// names of the verbs' Go halves the program's traffic ran (its stacks).
func TestExecutionTrace(t *testing.T) {
	lib := buildLib(t)
	prog := compile(t, lib, "pollwait")
	file := filepath.Join(t.TempDir(), "lib.trace")
	t.Setenv("SOFTRDMA_TRACE", file)
	addr := "roce:" + randomNet() + "1"
	if out, errOut, err := run(t, lib, addr, prog, "sends", "10"); err != nil {
		t.Fatalf("pollwait sends 10: %v\n%s%s", err, out, errOut)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("no trace: %v", err)
	}
	if !bytes.HasPrefix(b, []byte("go 1.")) || !bytes.Contains(b[:16], []byte(" trace")) {
		t.Fatalf("%s: %d bytes, not a Go execution trace: %q", file, len(b), b[:min(len(b), 16)])
	}
	if !bytes.Contains(b, []byte("srgo_post_send")) {
		t.Errorf("%s: no stack names srgo_post_send", file)
	}
}

// TestPollSleeps (testdata/pollwait.c): a program's busy-poll loop sleeps
// while the device's CQs are empty (ten polls of an empty CQ sleep, at least
// half of the eight 100 ms sleeps they ask for, with no spin asked and by
// default, where they would take microseconds without), and a
// completion on another CQ of the device ends a sleep of a minute at once.
func TestPollSleeps(t *testing.T) {
	lib := buildLib(t)
	prog := compile(t, lib, "pollwait")
	for _, tc := range []struct {
		name, mode, spin, sleep, want string
	}{
		{"idle", "idle", "0", "100000", "idle polls: 0 completions, slept: yes\n"},
		// No spin by default: the polls sleep from the second.
		{"idle-default", "idle", "", "100000", "idle polls: 0 completions, slept: yes\n"},
		{"wake", "wake", "0", "60000000", "connected to itself: rc=0\na completion on another CQ woke the poll: yes, 0 completions on the idle CQ\nreceived: success, through the wire and back\nsent: success\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("SOFTRDMA_POLL_SPIN_US", tc.spin)
			t.Setenv("SOFTRDMA_POLL_SLEEP_US", tc.sleep)
			addr := "roce:" + randomNet() + "1"
			out, errOut, err := run(t, lib, addr, prog, tc.mode)
			if err != nil || out != tc.want {
				t.Errorf("pollwait %s: %v\n%s%s\nwant\n%s", tc.mode, err, out, errOut, tc.want)
			}
		})
	}
}

// TestPollStaysInC (testdata/pollwait.c spin, never sleeping): polls of a CQ
// that nothing was added to since a poll found it empty stay in C, without a
// call into the engine (Go: two signal-mask changes, the runtime's system-call
// bookkeeping, the engine's lock): of 1000 polls of an empty CQ at most the
// first two go in (the library learns the engine's completion count at the
// first), and a completion added afterwards is still found. The count is the
// library's SOFTRDMA_STATS line.
func TestPollStaysInC(t *testing.T) {
	lib := buildLib(t)
	prog := compile(t, lib, "pollwait")
	t.Setenv("SOFTRDMA_POLL_SPIN_US", "-1")
	t.Setenv("SOFTRDMA_STATS", "1")
	addr := "roce:" + randomNet() + "1"
	out, errOut, err := run(t, lib, addr, prog, "spin")
	want := "connected to itself: rc=0\nspun: 0 completions\nreceived: success, through the wire and back\n"
	if err != nil || out != want {
		t.Fatalf("pollwait spin: %v\n%s%s\nwant\n%s", err, out, errOut, want)
	}
	var calls, inGo int
	if _, err := fmt.Sscanf(errOut, "softrdma: ibv_poll_cq: %d calls, %d into the engine\n", &calls, &inGo); err != nil {
		t.Fatalf("no SOFTRDMA_STATS line: %v\n%s", err, errOut)
	}
	// 1000 polls of the empty CQ, then at least one of the receive CQ.
	if calls < 1001 || inGo-(calls-1000) > 2 {
		t.Errorf("%d polls, %d into the engine: want at most 2 of the 1000 empty ones (the receive CQ's %d may all go in)", calls, inGo, calls-1000)
	}
}

// TestPollOfDrainedCQStaysInC (testdata/pollwait.c cycles N): a poll that
// takes the last completion of a CQ leaves it known empty, so the program's
// next poll, before anything else completes, stays in C. Each of 200 round
// trips to itself (one receive polled until it comes, then one more poll)
// went into the engine twice: the poll that found the CQ empty was the one
// that marked it so.
func TestPollOfDrainedCQStaysInC(t *testing.T) {
	lib := buildLib(t)
	prog := compile(t, lib, "pollwait")
	t.Setenv("SOFTRDMA_POLL_SPIN_US", "-1")
	t.Setenv("SOFTRDMA_STATS", "1")
	const cycles = 200
	addr := "roce:" + randomNet() + "1"
	out, errOut, err := run(t, lib, addr, prog, "cycles", fmt.Sprint(cycles))
	if want := fmt.Sprintf("connected to itself: rc=0\ncycles: %d of %d\n", cycles, cycles); err != nil || out != want {
		t.Fatalf("pollwait cycles: %v\n%s%s\nwant\n%s", err, out, errOut, want)
	}
	var calls, inGo int
	if _, err := fmt.Sscanf(errOut, "softrdma: ibv_poll_cq: %d calls, %d into the engine\n", &calls, &inGo); err != nil {
		t.Fatalf("no SOFTRDMA_STATS line: %v\n%s", err, errOut)
	}
	// One poll per cycle takes the receive; a few more may go in while the
	// engine's count moves for other reasons (the first polls, before the
	// count is known).
	if inGo > cycles+cycles/10 {
		t.Errorf("%d polls, %d into the engine: want about one per cycle (%d cycles)", calls, inGo, cycles)
	}
}

// TestPollReadsSocket (testdata/pollwait.c cycles N): with
// SOFTRDMA_POLL_READS=1 a program's thread that waits for a completion reads
// the device's socket itself (sharedreads.go) and the messages still arrive
// (200 round trips to itself, each waited for); with 0 it never does. With
// SOFTRDMA_PCAP set as well it still does (the capture forwards LendReads;
// it did not, and a capture turned the shared reads off) and the capture
// holds the 200 SENDs.
func TestPollReadsSocket(t *testing.T) {
	lib := buildLib(t)
	prog := compile(t, lib, "pollwait")
	t.Setenv("SOFTRDMA_POLL_SPIN_US", "0")
	t.Setenv("SOFTRDMA_STATS", "1")
	const cycles = 200
	for _, tc := range []struct {
		name, env string
		pcap      bool
		reads     bool
	}{{"SOFTRDMA_POLL_READS=1", "1", false, true}, {"SOFTRDMA_POLL_READS=0", "0", false, false}, {"SOFTRDMA_PCAP", "1", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("SOFTRDMA_POLL_READS", tc.env)
			pcap := ""
			if tc.pcap {
				pcap = filepath.Join(t.TempDir(), "reads.pcapng")
			}
			t.Setenv("SOFTRDMA_PCAP", pcap)
			addr := "roce:" + randomNet() + "1"
			out, errOut, err := run(t, lib, addr, prog, "cycles", fmt.Sprint(cycles))
			if want := fmt.Sprintf("connected to itself: rc=0\ncycles: %d of %d\n", cycles, cycles); err != nil || out != want {
				t.Fatalf("pollwait cycles: %v\n%s%s\nwant\n%s", err, out, errOut, want)
			}
			_, line, ok := strings.Cut(errOut, "softrdma: socket reads by the program's threads: ")
			var reads int
			if _, err := fmt.Sscanf(line, "%d", &reads); !ok || err != nil {
				t.Fatalf("no socket read count: %v\n%s", err, errOut)
			}
			if (reads > 0) != tc.reads {
				t.Errorf("%d socket reads by the program's thread, want some: %v", reads, tc.reads)
			}
			if pcap == "" {
				return
			}
			b, err := os.ReadFile(pcap)
			if err != nil {
				t.Fatal(err)
			}
			res, err := decode.Run(bytes.NewReader(b), io.Discard, decode.Options{Flows: true})
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			sends := 0
			for _, fl := range res.Flows {
				sends += fl.Messages["SEND"]
			}
			// Each SEND is recorded as sent and as received (read by the
			// program's thread, or by the reader goroutine).
			t.Logf("capture: %d frames, %d RDMA frames, %d SEND messages", res.Frames, res.RDMAFrames, sends)
			if len(res.Errors) != 0 || sends < cycles || res.RDMAFrames < 2*cycles {
				t.Errorf("capture: %d RDMA frames, %d SEND messages, errors %v; want at least %d and %d, none",
					res.RDMAFrames, sends, res.Errors, 2*cycles, cycles)
			}
		})
	}
}

// TestInlineSendAllocs (testdata/pollwait.c sends N): an inline send, its
// receive and their completions allocate nothing on the Go side: 1100
// messages cost fewer than 100 heap allocations more than 100 do (the
// library's SOFTRDMA_STATS count). The inline data was copied into a new
// slice at every ibv_post_send.
func TestInlineSendAllocs(t *testing.T) {
	lib := buildLib(t)
	prog := compile(t, lib, "pollwait")
	t.Setenv("SOFTRDMA_STATS", "1")
	allocs := func(n int) int {
		addr := "roce:" + randomNet() + "1"
		out, errOut, err := run(t, lib, addr, prog, "sends", fmt.Sprint(n))
		want := fmt.Sprintf("connected to itself: rc=0\nsent inline and received: %d of %d\n", n, n)
		if err != nil || out != want {
			t.Fatalf("pollwait sends %d: %v\n%s%s\nwant\n%s", n, err, out, errOut, want)
		}
		_, line, ok := strings.Cut(errOut, "softrdma: Go heap allocations: ")
		var a int
		if _, err := fmt.Sscanf(line, "%d", &a); !ok || err != nil {
			t.Fatalf("no allocation count: %v\n%s", err, errOut)
		}
		return a
	}
	few, many := allocs(100), allocs(1100)
	if many-few >= 100 {
		t.Errorf("1000 more messages made %d more heap allocations (%d for 100 messages, %d for 1100)", many-few, few, many)
	}
}
