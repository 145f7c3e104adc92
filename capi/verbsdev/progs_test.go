package verbsdev_test

import (
	"strings"
	"testing"
	"time"
)

// TestForkedChildrenSeeds (testdata/forkseed.c): a forking server's children
// (qperf --listen forks one per test) each open the device and make a QP and
// a memory region; their QPNs and keys must differ, as two processes' do on
// a kernel device. They were the same: the engine was seeded from math/rand,
// whose seed in a library is the process's AT_RANDOM bytes, which every
// child of one parent shares. qperf's second test in one run then got a REP
// from a QPN the client still had in time-wait and rejected it as stale.
func TestForkedChildrenSeeds(t *testing.T) {
	lib := buildLib(t)
	prog := compile(t, lib, "forkseed")
	out, errOut, err := runBounded(t, lib, "roce:"+randomNet()+"1", time.Minute, prog)
	if err != nil {
		t.Fatalf("forkseed: %v\n%s\nstderr:\n%s", err, out, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("forkseed printed %d lines, want 2 (qpn lkey rkey of each child):\n%s", len(lines), out)
	}
	if lines[0] == lines[1] {
		t.Errorf("both children drew QPN, lkey and rkey %q: their engines were seeded alike", lines[0])
	}
}
