package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/bench"
)

// TestBenchCLib runs the clib rows (ib_write_bw and ib_send_lat on the
// drop-in library, built here with make lib, beside softrdma perf, this test
// binary run as softrdma) with a few iterations between two random loopback
// addresses: each row must run and carry a number for both tools. Nothing is
// asserted about the numbers. It skips without gcc, rdma-core's headers or
// perftest.
func TestBenchCLib(t *testing.T) {
	for _, tool := range []string{"make", "gcc", "ib_write_bw", "ib_send_lat"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (scripts/deps.sh installs gcc and libibverbs-dev; apt-get install perftest)", tool)
		}
	}
	if _, err := os.Stat("/usr/include/infiniband/verbs.h"); err != nil {
		t.Skip("needs rdma-core's headers, libibverbs-dev")
	}
	lib := t.TempDir()
	if out, err := exec.Command("make", "-s", "-C", filepath.Join("..", ".."), "lib", "LIBDIR="+lib).CombinedOutput(); err != nil {
		t.Fatalf("make lib: %v\n%s", err, out)
	}
	t.Setenv(mainEnv, "1") // softrdma perf is this binary
	net3 := fmt.Sprintf("127.%d.%d.", 100+rand.IntN(100), 1+rand.IntN(250))
	var stdout, stderr bytes.Buffer
	args := []string{"--tests", "clib", "--addrs", net3 + "1," + net3 + "2", "--clib-iters", "20", "--lib", lib, "--json"}
	if code := benchCmd(args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	var rep bench.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, stdout.String())
	}
	if len(rep.Rows) != len(bench.CLibRows) {
		t.Fatalf("%d rows, want %d: %+v", len(rep.Rows), len(bench.CLibRows), rep.Rows)
	}
	for i, r := range rep.Rows {
		c := bench.CLibRows[i]
		if !strings.HasPrefix(r.Test, c.Prog+" / perf "+c.Perf) || r.Size != c.Size {
			t.Errorf("row %d: %s %d, want %s at %d", i, r.Test, r.Size, c.Prog, c.Size)
		}
		if r.Note != "" || r.Value <= 0 || r.Base <= 0 || r.Ratio <= 0 {
			t.Errorf("%s: no numbers: %+v", r.Test, r)
		}
		if err := benchMeasured(r); err != nil {
			t.Error(err)
		}
	}
}
