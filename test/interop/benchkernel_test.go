package interop_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/test/interop"
)

// TestBenchKernel runs make bench-kernel's script at one size and a few
// iterations: it must exit 0 and print both tables with a number in every
// column (perftest over rxe and siw, softrdma perf over RoCE and iWARP, the
// raw UDP and TCP paths of the guest, and the ratios). Nothing is asserted
// about the numbers.
func TestBenchKernel(t *testing.T) {
	h := interop.Require(t)
	script := filepath.Join(h.ModuleRoot, "scripts", "bench-kernel.sh")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Env = append(os.Environ(), "BENCH_KERNEL_SIZES=65536", "BENCH_KERNEL_ITERS=20",
		"BENCH_KERNEL_RAW_TIME=300ms", "SOFTRDMA_INTEROP_DIR="+h.Dir)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("bench-kernel (%v):\n%s", time.Since(start).Round(time.Second), out)
	if err != nil {
		t.Fatalf("bench-kernel: %v", err)
	}
	if strings.Contains(string(out), "bench-kernel: skipped:") {
		t.Skip(lastLine(string(out)))
	}
	// The rows of both tables start with the size; the first has the
	// iterations next.
	var rows [][]string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "65536" {
			rows = append(rows, f)
		}
	}
	if len(rows) != 2 || len(rows[0]) != 8 || len(rows[1]) != 7 {
		t.Fatalf("want two rows for 65536 (8 and 7 columns), got %q", rows)
	}
	for i, row := range rows {
		for j, v := range row[1:] {
			if x, err := strconv.ParseFloat(v, 64); err != nil || x <= 0 {
				t.Errorf("table %d, column %d: %q is not a measurement", i+1, j+2, v)
			}
		}
	}
}
