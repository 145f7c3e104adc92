package interop_test

import (
	"context"
	"fmt"
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
// iterations: it must exit 0 and print its three tables with a number in
// every column (perftest over rxe and siw, softrdma perf over RoCE and iWARP,
// the raw UDP and TCP paths of the guest, and the ratios; the same tools
// across the link between two guests). Nothing is asserted about the numbers.
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
	// The rows of the tables start with the size; the first and the third
	// have the iterations next.
	var rows [][]string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == "65536" {
			rows = append(rows, f)
		}
	}
	if len(rows) != 3 || len(rows[0]) != 8 || len(rows[1]) != 7 || len(rows[2]) != 8 {
		t.Fatalf("want three rows for 65536 (8, 7 and 8 columns), got %q", rows)
	}
	for i, row := range rows {
		if err := checkBenchKernelRow(row, benchKernelSpecs[i]); err != nil {
			t.Errorf("table %d: %v", i+1, err)
		}
	}
}

// benchKernelSpecs say what each column of bench-kernel's two tables holds
// after the size: + a measurement, 0 a number that may be 0.00 (perftest's
// own figures: ib_write_bw over siw now and then prints 0.00 for a run that
// moved its data, even after the script's retries), /N a ratio, or "-" when
// field N is 0.
var benchKernelSpecs = [][]string{
	{"+", "0", "0", "+", "+", "/2", "/3"}, // iters rxe siw softrdma-roce softrdma-iwarp softrdma/rxe softrdma/siw
	{"+", "0", "+", "+", "0", "+"},        // raw-udp rxe/raw softrdma/raw raw-tcp siw/raw softrdma/raw
	{"+", "0", "0", "+", "+", "/2", "/3"}, // the same as the first, across the link between two guests
}

// checkBenchKernelRow checks the fields of one table row against spec.
func checkBenchKernelRow(row, spec []string) error {
	if len(row) != len(spec)+1 {
		return fmt.Errorf("%d fields, want %d: %q", len(row), len(spec)+1, row)
	}
	for j, v := range row[1:] {
		var over int
		if _, e := fmt.Sscanf(spec[j], "/%d", &over); e == nil && v == "-" {
			if d, _ := strconv.ParseFloat(row[over], 64); d == 0 {
				continue // divided by perftest's 0.00
			}
		}
		if x, err := strconv.ParseFloat(v, 64); err != nil || x < 0 || (x == 0 && spec[j] != "0") {
			return fmt.Errorf("field %d (%s): %q is not a measurement", j+2, spec[j], v)
		}
	}
	return nil
}

// TestCheckBenchKernelRow: perftest's 0.00 and the ratio it leaves empty pass;
// a missing or zero softrdma or raw-path figure does not.
func TestCheckBenchKernelRow(t *testing.T) {
	for _, c := range []struct {
		table int
		row   string
		ok    bool
	}{
		{0, "65536 20 22.38 54.73 8.56 101.87 0.38 1.86", true},
		{0, "65536 20 20.33 0.00 5.22 33.38 0.26 -", true}, // seen in CI
		{1, "65536 43.33 0.47 0.12 67.50 0.00 0.49", true},
		{0, "65536 20 20.33 54.73 0.00 33.38 0.00 0.61", false},
		{0, "65536 20 20.33 54.73 - 33.38 - 0.61", false},
		{0, "65536 20 20.33 54.73 5.22 33.38 0.26 -", false}, // siw measured, ratio missing
		{1, "65536 - 0.47 0.12 67.50 0.80 0.49", false},
		{1, "65536 43.33 0.47 0.12 67.50 0.80", false},
		{2, "65536 20 12.69 3.33 3.66 14.63 0.29 4.39", true},
		{2, "65536 20 12.69 3.33 - 14.63 - 4.39", false}, // softrdma across the link not measured
	} {
		err := checkBenchKernelRow(strings.Fields(c.row), benchKernelSpecs[c.table])
		if (err == nil) != c.ok {
			t.Errorf("%q: %v, want ok %v", c.row, err, c.ok)
		}
	}
}
