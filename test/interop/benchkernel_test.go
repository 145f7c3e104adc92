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
// across the link between two guests), and the scale table's row for 2 QP
// pairs with a number in each of its 12 columns. Nothing is asserted about
// the numbers.
func TestBenchKernel(t *testing.T) {
	h := interop.Require(t)
	script := filepath.Join(h.ModuleRoot, "scripts", "bench-kernel.sh")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Env = append(os.Environ(), "BENCH_KERNEL_SIZES=65536", "BENCH_KERNEL_ITERS=20",
		"BENCH_KERNEL_RAW_TIME=300ms", "BENCH_KERNEL_QPS=2", "SOFTRDMA_INTEROP_DIR="+h.Dir)
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
	var rows, scale [][]string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 0 && f[0] == "65536":
			rows = append(rows, f)
		case len(f) > 0 && f[0] == "2":
			scale = append(scale, f)
		}
	}
	// The scale table's row for 2 QP pairs: the four tools' MB/s, their
	// connections per second through rdma_cm (cmtime) and memory per pair.
	if len(scale) != 1 {
		t.Errorf("want one scale row for 2 QPs, got %q", scale)
	} else if err := checkBenchKernelRow(scale[0], benchKernelScaleSpec); err != nil {
		t.Errorf("scale table: %v", err)
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

// benchKernelSpecs say what each column of bench-kernel's three tables holds
// after the size: + a measurement, /N the ratio of a measurement to field N.
// A measurement is any number, 0.00 too: under emulation on a loaded machine
// a run that moved its data can measure nothing worth printing (the raw UDP
// path of a 300 ms run came out 0.00 in a guest), and nothing is asserted
// about the numbers; "-", a tool that did not run or failed, fails. A ratio
// is a number, or "-" when its divisor, field N, is 0.
var benchKernelSpecs = [][]string{
	{"+", "+", "+", "+", "+", "/2", "/3"}, // iters rxe siw softrdma-roce softrdma-iwarp softrdma/rxe softrdma/siw
	{"+", "/1", "/1", "+", "/4", "/4"},    // raw-udp rxe/raw softrdma/raw raw-tcp siw/raw softrdma/raw
	{"+", "+", "+", "+", "+", "/2", "/3"}, // the same as the first, across the link between two guests
}

// benchKernelScaleSpec: the scale table's columns after the QP count, each a
// measurement (rxe siw softrdma-roce softrdma-iwarp MB/s, the same tools'
// connections per second, then their KiB per QP pair).
var benchKernelScaleSpec = []string{"+", "+", "+", "+", "+", "+", "+", "+", "+", "+", "+", "+"}

// checkBenchKernelRow checks the fields of one table row against spec.
func checkBenchKernelRow(row, spec []string) error {
	if len(row) != len(spec)+1 {
		return fmt.Errorf("%d fields, want %d: %q", len(row), len(spec)+1, row)
	}
	for j, v := range row[1:] {
		var over int
		if _, e := fmt.Sscanf(spec[j], "/%d", &over); e == nil && v == "-" {
			if d, err := strconv.ParseFloat(row[over], 64); err == nil && d == 0 {
				continue // divided by 0
			}
		}
		if x, err := strconv.ParseFloat(v, 64); err != nil || x < 0 {
			return fmt.Errorf("field %d (%s): %q is not a measurement", j+2, spec[j], v)
		}
	}
	return nil
}

// TestCheckBenchKernelRow: every measured figure passes, 0.00 too, and the
// ratio it leaves empty; a tool that did not run ("-") does not, nor a ratio
// missing beside a divisor that is not 0.
func TestCheckBenchKernelRow(t *testing.T) {
	for _, c := range []struct {
		table int
		row   string
		ok    bool
	}{
		{0, "65536 20 22.38 54.73 8.56 101.87 0.38 1.86", true},
		{0, "65536 20 20.33 0.00 5.22 33.38 0.26 -", true}, // seen in CI
		{1, "65536 43.33 0.47 0.12 67.50 0.00 0.49", true},
		{1, "65536 0.00 - - 67.50 0.80 0.49", true}, // raw UDP in a loaded guest, seen in make test
		{1, "65536 43.33 0.47 0.12 0.00 - -", true},
		{0, "65536 20 20.33 54.73 0.00 33.38 0.00 0.61", true},
		{0, "65536 20 0.00 0.00 0.00 0.00 - -", true},
		{0, "65536 20 20.33 54.73 - 33.38 - 0.61", false},    // softrdma did not run
		{0, "65536 20 20.33 54.73 5.22 33.38 0.26 -", false}, // siw measured, ratio missing
		{0, "65536 20 20.33 - 5.22 33.38 0.26 -", false},     // siw did not run
		{1, "65536 - 0.47 0.12 67.50 0.80 0.49", false},
		{1, "65536 - - - 67.50 0.80 0.49", false},
		{1, "65536 43.33 0.47 0.12 67.50 0.80", false},
		{1, "65536 43.33 - 0.12 67.50 0.80 0.49", false}, // ratio missing beside a raw path measured
		{2, "65536 20 12.69 3.33 3.66 14.63 0.29 4.39", true},
		{2, "65536 20 12.69 3.33 - 14.63 - 4.39", false}, // softrdma across the link not measured
		{2, "65536 20 12.69 3.33 abc 14.63 0.29 4.39", false},
		{2, "65536 20 0.00 4.67 3.47 19.49 - 4.17", true},    // rxe measured 0 across the link, seen in CI
		{0, "65536 20 0.00 54.73 5.22 33.38 - 0.61", true},   // the same in one guest
		{0, "65536 20 20.33 54.73 0.00 33.38 - 0.61", false}, // rxe measured, ratio missing
		{2, "65536 20 12.69 3.33 3.66 14.63 - 4.39", false},  // the same across the link
		{0, "65536 20 20.33 54.73 5.22 0.00 0.26 -", false},  // iWARP measured 0 is not a 0 divisor
	} {
		err := checkBenchKernelRow(strings.Fields(c.row), benchKernelSpecs[c.table])
		if (err == nil) != c.ok {
			t.Errorf("%q: %v, want ok %v", c.row, err, c.ok)
		}
	}
}

// TestBenchKernelParse runs the guest's parsers (scripts/bench-kernel-parse.sh)
// on outputs of perftest, softrdma perf and softrdma bench: a measured 0 is a
// number, a softrdma bench row that failed (a note, its baseline field 0) is
// "-" and a NOTE, and an output without the figure gives nothing.
func TestBenchKernelParse(t *testing.T) {
	root, err := interop.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	files := map[string]string{
		"perftest.out": ` #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]
 65536      20             0.00               0.00                 0.000000
`,
		"perftest-none.out": "Couldn't connect to 10.77.0.90:18515\n",
		"perf.json":         `{"test": "write_bw", "bytes": 65536, "bw_peak": 0, "bw_average": 0, "msg_rate": 0}` + "\n",
		"raw.json": `{
  "date": "2026-12-06T15:00:00Z",
  "rows": [
    {
      "transport": "roce",
      "backend": "udp",
      "test": "WRITE bw",
      "bytes": 65536,
      "unit": "MiB/s",
      "softrdma": 3.1,
      "baseline": 0,
      "ratio": 0,
      "baseline_path": "UDP blaster, 1066-B datagrams, batches of 64 (GSO)",
      "allocs_per_msg": 0.1,
      "samples": 20
    },
    {
      "transport": "iwarp",
      "backend": "tcp",
      "test": "WRITE bw",
      "bytes": 65536,
      "unit": "MiB/s",
      "softrdma": 0,
      "baseline": 0,
      "ratio": 0,
      "baseline_path": "TCP stream, writes of 65536 B",
      "allocs_per_msg": 0,
      "note": "baseline: dial tcp 10.77.0.90:4792: connection refused"
    }
  ],
  "elapsed": "1.2s"
}
`,
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ call, want string }{
		{"bw_of 65536 perftest.out", "0.00"},
		{"bw_of 4096 perftest.out", ""},
		{"bw_of 65536 perftest-none.out", ""},
		{"softrdma_bw_of perf.json", "0"},
		{"raw_results raw.json", "RESULT raw-udp 65536 0\n" +
			"NOTE raw-tcp 65536: baseline: dial tcp 10.77.0.90:4792: connection refused\n" +
			"RESULT raw-tcp 65536 -"},
	} {
		cmd := exec.Command("bash", "-c", ". "+filepath.Join(root, "scripts", "bench-kernel-parse.sh")+" && "+c.call)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if got := strings.TrimSpace(string(out)); err != nil || got != c.want {
			t.Errorf("%s: %v, %q, want %q", c.call, err, got, c.want)
		}
	}
}
