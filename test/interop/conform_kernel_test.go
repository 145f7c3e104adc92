package interop_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/conform"
	"github.com/softrdma/softrdma/test/interop"
)

// kernelTesterEnv makes TestConformKernelTester run: "TRANSPORT PEER OUTFILE". The
// tester runs as a child of TestConformKernel inside the harness's namespace (so
// that its UDP and TCP sockets are on the guests' bridge), in this test binary.
const kernelTesterEnv = "SOFTRDMA_CONFORM_KERNEL_TESTER"

// kernelUpdateEnv, set to 1, makes TestConformKernel rewrite the tables of
// test/conform/kernel-results.md instead of comparing the verdicts with them.
const kernelUpdateEnv = "SOFTRDMA_CONFORM_KERNEL_UPDATE"

// TestConformKernelTester is TestConformKernel's tester process; it is skipped
// unless kernelTesterEnv is set.
func TestConformKernelTester(t *testing.T) {
	spec := strings.Fields(os.Getenv(kernelTesterEnv))
	if len(spec) != 3 {
		t.Skipf("the tester process of TestConformKernel (%s not set)", kernelTesterEnv)
	}
	k := conform.KernelRun{Transport: spec[0], Peer: spec[1], AnswerTimeout: 3 * time.Second, Silence: 1500 * time.Millisecond,
		Progress: func(c conform.CaseReport) {
			t.Logf("%-14s %-24s %v %s", c.Result, c.ID, c.Duration.Round(time.Millisecond), c.Reason)
			for i, b := range c.Seen {
				t.Logf("    seen[%d] %s", i, b)
			}
		},
		Logf: t.Logf}
	rep, err := k.Run(context.Background())
	if err != nil {
		t.Fatalf("conform against %s %s: %v", spec[0], spec[1], err)
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(spec[2], b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestConformKernel runs the conformance suite against the kernel's rxe (perftest
// servers in guest conform81, 10.77.0.81) and siw (rping's persistent server in
// guest conform82, 10.77.0.82): the suite runs to completion, every case the
// kernel plan makes applicable gets a verdict from the wire (none is a setup
// error, every failure says what it saw), and the verdicts are those recorded in
// test/conform/kernel-results.md (SOFTRDMA_CONFORM_KERNEL_UPDATE=1 rewrites them).
// The kernel failing a case is a finding, not a failure of this test.
func TestConformKernel(t *testing.T) {
	h := interop.Require(t)
	root, err := interop.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	md := filepath.Join(root, "test", "conform", "kernel-results.md")
	t.Run("rxe", func(t *testing.T) {
		g := h.Boot(t, "conform81", interop.BootOptions{IP: "10.77.0.81", NoIPv6: true, Links: "rxe"})
		gid := g.GIDIndex(t, false)
		t.Logf("guest kernel %s", strings.TrimSpace(g.Exec(t, time.Minute, "uname", "-r").Stdout))
		var script strings.Builder
		for _, name := range []string{"write", "read", "atomic", "send", "send16"} {
			s := conform.DefaultPerftestServers[name]
			fmt.Fprintf(&script, "( while :; do timeout 600 %s >/dev/null 2>&1; sleep 0.2; done ) &\n",
				strings.Join(s.Args("rxe0", gid), " "))
		}
		script.WriteString("wait\n")
		job := g.ExecShellBackground(t, script.String())
		defer job.Kill("KILL")
		rep := runKernelTester(t, "roce", g.IP)
		checkKernelReport(t, rep, 42, conform.KernelRoCEPlan)
		compareKernelResults(t, md, "rxe", rep)
	})
	t.Run("siw", func(t *testing.T) {
		g := h.Boot(t, "conform82", interop.BootOptions{IP: "10.77.0.82", NoIPv6: true, Links: "siw"})
		t.Logf("guest kernel %s", strings.TrimSpace(g.Exec(t, time.Minute, "uname", "-r").Stdout))
		job := g.ExecShellBackground(t, fmt.Sprintf("while :; do rping -s -P -a %s -p %d >/dev/null 2>&1; sleep 0.2; done",
			g.IP, conform.DefaultRpingPort))
		defer job.Kill("KILL")
		time.Sleep(3 * time.Second) // rping listens within a second or two under TCG
		rep := runKernelTester(t, "iwarp", g.IP)
		checkKernelReport(t, rep, 28, conform.KernelIWARPPlan)
		compareKernelResults(t, md, "siw", rep)
	})
}

// runKernelTester runs TestConformKernelTester in the harness's namespace and
// returns its report.
func runKernelTester(t *testing.T, transport, peer string) *conform.Report {
	t.Helper()
	out := filepath.Join(t.TempDir(), transport+".json")
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", interop.Netns, os.Args[0],
		"-test.run", "^TestConformKernelTester$", "-test.v", "-test.timeout", "45m")
	cmd.Env = append(os.Environ(), kernelTesterEnv+"="+transport+" "+peer+" "+out)
	b, err := cmd.CombinedOutput()
	t.Logf("tester (%s against %s):\n%s", transport, peer, b)
	if err != nil {
		t.Fatalf("the tester did not run to completion: %v", err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("the tester wrote no report: %v", err)
	}
	var rep conform.Report
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatalf("report: %v", err)
	}
	return &rep
}

// checkKernelReport checks that every case ran, that exactly the cases plan makes
// applicable got a verdict, that none of them failed for want of setup, and that
// every failure says what was seen (bytes, or the timeout it waited).
func checkKernelReport(t *testing.T, rep *conform.Report, total int, plan map[string]conform.KernelPlan) {
	t.Helper()
	if len(rep.Cases) != total {
		t.Errorf("%d cases ran, want the whole catalogue of %d", len(rep.Cases), total)
	}
	applicable := map[string]bool{}
	for _, id := range conform.KernelApplicable(plan) {
		applicable[id] = true
	}
	for _, c := range rep.Cases {
		switch {
		case applicable[c.ID] && c.Result == conform.NotApplicable:
			t.Errorf("%s: applicable by the kernel plan, but not applicable: %s", c.ID, c.Reason)
		case !applicable[c.ID] && c.Result != conform.NotApplicable:
			t.Errorf("%s: not applicable by the kernel plan, but %s: %s", c.ID, c.Result, c.Reason)
		case c.Result == conform.Fail && strings.HasPrefix(c.Reason, "setup:"):
			t.Errorf("%s: failed to set up (the tools, not the kernel): %s", c.ID, c.Reason)
		case c.Result == conform.Fail && len(c.Seen) == 0 && !strings.Contains(c.Reason, "within") &&
			!strings.Contains(c.Reason, "expected") && !strings.Contains(c.Reason, "closed"):
			t.Errorf("%s: failed without saying what it saw: %s", c.ID, c.Reason)
		}
	}
	t.Logf("%s: %d cases, %d pass, %d fail, %d not applicable", rep.Suite, len(rep.Cases), rep.Passed, rep.Failed, rep.NotApplicable)
}

// compareKernelResults compares rep's verdicts with the table between the
// "<!-- BEGIN name -->" and "<!-- END name -->" lines of md, or rewrites it.
func compareKernelResults(t *testing.T, md, name string, rep *conform.Report) {
	t.Helper()
	b, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	begin, end := "<!-- BEGIN "+name+" -->\n", "<!-- END "+name+" -->"
	i, j := strings.Index(text, begin), strings.Index(text, end)
	if i < 0 || j < i {
		t.Fatalf("%s has no %q ... %q section", md, begin, end)
	}
	table := conform.KernelResultsTable(rep)
	if os.Getenv(kernelUpdateEnv) == "1" {
		text = text[:i+len(begin)] + table + text[j:]
		if err := os.WriteFile(md, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote the %s table of %s", name, md)
		return
	}
	want := verdicts(text[i+len(begin) : j])
	got := verdicts(table)
	for id, v := range got {
		if want[id] != v {
			t.Errorf("%s: %s, but %s records %q (rerun with %s=1 to record)", id, v, filepath.Base(md), want[id], kernelUpdateEnv)
		}
	}
}

// verdicts reads the case and verdict columns of a results table.
func verdicts(table string) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(table, "\n") {
		f := strings.Split(l, "|")
		if len(f) < 5 || !strings.HasPrefix(strings.TrimSpace(f[1]), "`") {
			continue
		}
		m[strings.Trim(strings.TrimSpace(f[1]), "`")] = strings.TrimSpace(f[3])
	}
	return m
}
