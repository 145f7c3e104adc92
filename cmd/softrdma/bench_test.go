package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/netio/netns"
)

// TestBenchRuns runs softrdma bench with tiny measurement times over every
// kind of row (RoCE on the UDP and TAP backends, and iWARP): it must print one JSON
// report with every row there, a number or a note in each, and one table
// without --json. Nothing is asserted about the numbers. Without root the
// command must say, in one line, that it skipped, and succeed.
func TestBenchRuns(t *testing.T) {
	args := []string{"--time", "60ms", "--warm", "10ms", "--sizes", "4K", "--backend", "udp,tap", "--transport", "roce,iwarp"}
	var stdout, stderr bytes.Buffer
	if netns.Check() != nil {
		if code := benchCmd(args, &stdout, &stderr); code != 0 || !strings.HasPrefix(stdout.String(), "softrdma bench: skipped:") ||
			strings.Count(stdout.String(), "\n") != 1 {
			t.Fatalf("without namespaces: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
		}
		return
	}
	if code := benchCmd(append(args, "--json"), &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	var rep benchReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, stdout.String())
	}
	seen := map[string]bool{}
	for _, r := range rep.Rows {
		seen[r.Transport+" "+r.Test] = true
		if r.Note != "" {
			t.Logf("%s %s %s %d: %s", r.Transport, r.Backend, r.Test, r.Size, r.Note)
			continue
		}
		if r.Samples == 0 || r.Unit == "" || r.Baseline == "" {
			t.Errorf("row without measurement: %+v", r)
		}
	}
	for _, want := range []string{"roce WRITE bw", "roce READ bw", "roce SEND bw", "roce WRITE rate", "roce READ rate",
		"roce SEND rate", "roce WRITE_IMM lat median", "roce READ lat p99", "roce SEND lat min", "iwarp WRITE bw"} {
		if !seen[want] {
			t.Errorf("no %q row", want)
		}
	}
	backends := map[string]bool{}
	for _, r := range rep.Rows {
		if r.Transport == "roce" && r.Test == "WRITE bw" {
			backends[r.Backend] = true
			if r.Note != "" {
				t.Errorf("RoCE WRITE over %s did not run: %s", r.Backend, r.Note)
			}
		}
		if r.Backend == "tap" && r.Test == "READ bw" && !strings.Contains(r.Baseline, "TAP host blaster") {
			t.Errorf("TAP READ row measured against %q, not the TAP-to-UDP direction READ data takes", r.Baseline)
		}
	}
	if !backends["udp"] || !backends["tap"] {
		t.Errorf("RoCE WRITE rows for backends %v, want udp and tap", backends)
	}

	stdout.Reset()
	stderr.Reset()
	if code := benchCmd([]string{"--time", "30ms", "--warm", "5ms", "--sizes", "4K", "--backend", "udp", "--transport", "roce",
		"--tests", "write"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[2], "transport") || !strings.Contains(lines[3], "WRITE bw") {
		t.Errorf("table:\n%s", stdout.String())
	}
}

// TestBenchFlags refuses what it cannot run, with exit code 2.
func TestBenchFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--transport", "ib"},
		{"--backend", "rdma"},
		{"--tests", "atomic"},
		{"--sizes", "lots"},
		{"--time", "0s"},
		{"--mtu", "100"},
		{"extra"},
	} {
		var stdout, stderr bytes.Buffer
		if code := benchCmd(args, &stdout, &stderr); code != 2 || stderr.Len() == 0 {
			t.Errorf("%q: exit %d, stderr %q", args, code, stderr.String())
		}
	}
}
