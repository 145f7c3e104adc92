package interop_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/conform"
	"github.com/softrdma/softrdma/test/interop"
)

// TestConformKernelCtl runs the RoCE conformance catalogue against the kernel's
// rxe driven through conform-ctl (capi/conformctl, built on the host: the
// guest's userland is the host's root filesystem, the binary comes in through
// /project), which serves the whole control protocol (conform/CONTROL.md) on
// rxe0 in guest conform83 (10.77.0.83), so that every case runs, the ones that
// need memory read back, the peer as requester, RNR timing or UD included,
// which the perftest-driven TestConformKernel marks not applicable. The tester
// (softrdma conform --peer) runs in the harness's namespace with the waivers
// of test/conform/kernel-rxe-6.1.waivers: every failure must be waived (each
// waiver says which finding of kernel-results.md it is), no waiver may be
// stale, and the verdicts are those of kernel-results.md's "rxe-ctl" table
// (SOFTRDMA_CONFORM_KERNEL_UPDATE=1 rewrites it).
func TestConformKernelCtl(t *testing.T) {
	h := interop.Require(t)
	root, err := interop.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("needs gcc to build conform-ctl (scripts/deps.sh installs it)")
	}
	if _, err := os.Stat("/usr/include/infiniband/verbs.h"); err != nil {
		t.Skip("needs rdma-core's headers (libibverbs-dev) to build conform-ctl (scripts/deps.sh installs them)")
	}
	// Built before the guest boots: its root (the host's, over 9p, cache=loose)
	// may not show files added while it runs.
	dir := t.TempDir()
	if out, err := exec.Command("make", "-s", "-C", root, "conform-ctl-build", "CTLDIR="+dir).CombinedOutput(); err != nil {
		t.Fatalf("make conform-ctl-build: %v\n%s", err, out)
	}
	md := filepath.Join(root, "test", "conform", "kernel-results.md")
	waivers := filepath.Join(root, "test", "conform", "kernel-rxe-6.1.waivers")

	g := h.Boot(t, "conform83", interop.BootOptions{IP: "10.77.0.83", NoIPv6: true, Links: "rxe", Project: dir})
	t.Logf("guest kernel %s", strings.TrimSpace(g.Exec(t, time.Minute, "uname", "-r").Stdout))
	job := g.ExecBackground(t, "/project/conform-ctl", "--device", "rxe0", "--listen", g.IP+":7471")
	defer job.Kill("KILL")
	g.WaitListenTCP(t, 7471, 2*time.Minute)

	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	r := h.HostRun(ctx, t, "conform", "--peer", g.IP+":7471", "--peer-ip", g.IP, "--timeout", "3s", "--silence", "1.5s",
		"--waivers", waivers, "--json", "-v")
	t.Logf("tester:\n%s", r.Stderr)
	var rep conform.Report
	if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil {
		t.Fatalf("tester: no report (%v):\n%s", err, r)
	}
	if rep.Failed != 0 || r.ExitCode != 0 {
		t.Errorf("tester exit %d: %d failures the waivers do not list", r.ExitCode, rep.Failed)
	}
	if len(rep.StaleWaivers) > 0 {
		t.Errorf("waived but passed: %v", rep.StaleWaivers)
	}
	n := len(conform.RoCECases(nil))
	if len(rep.Cases) != n || rep.NotApplicable != 0 {
		t.Errorf("%d cases ran, %d not applicable; want all %d applicable", len(rep.Cases), rep.NotApplicable, n)
	}
	for _, c := range rep.Cases {
		if c.Result == conform.Pass {
			continue
		}
		t.Logf("%s %s: %s", c.Result, c.ID, c.Reason)
		for i, b := range c.Seen {
			t.Logf("    seen[%d] %s", i, b)
		}
		if c.Result != conform.NotApplicable && strings.HasPrefix(c.Reason, "setup:") {
			t.Errorf("%s: failed to set up (conform-ctl, not the kernel): %s", c.ID, c.Reason)
		}
	}
	if !strings.HasPrefix(rep.Peer, "conform-ctl (libibverbs rxe0)") {
		t.Errorf("peer %q: want conform-ctl on rxe0", rep.Peer)
	}
	compareKernelResults(t, md, "rxe-ctl", &rep)
}
