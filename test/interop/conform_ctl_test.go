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

// TestConformKernelCtl runs the conformance catalogues against the kernel's rxe
// and siw driven through conform-ctl (capi/conformctl, built on the host: the
// guest's userland is the host's root filesystem, the binary comes in through
// /project), which serves the whole control protocol (conform/CONTROL.md) in
// the guest: on rxe0 in guest conform83 (10.77.0.83), on siw0 in guest
// conform84 (10.77.0.84), its QPs listening there for the tester's MPA
// connections. So every case runs, the ones that need memory read back, the
// peer as requester, RNR timing or UD included, which the tool-driven
// TestConformKernel marks not applicable. The tester (softrdma conform --peer)
// runs in the harness's namespace with the waivers of
// test/conform/kernel-{rxe,siw}-6.1.waivers: every failure must be waived (each
// waiver says which finding of kernel-results.md it is), no waiver may be
// stale, and the verdicts are those of kernel-results.md's "rxe-ctl" and
// "siw-ctl" tables (SOFTRDMA_CONFORM_KERNEL_UPDATE=1 rewrites them).
func TestConformKernelCtl(t *testing.T) {
	h := interop.Require(t)
	root, err := interop.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("needs gcc to build conform-ctl (scripts/deps.sh installs it)")
	}
	for _, h := range []string{"/usr/include/infiniband/verbs.h", "/usr/include/rdma/rdma_cma.h"} {
		if _, err := os.Stat(h); err != nil {
			t.Skip("needs rdma-core's headers (libibverbs-dev, librdmacm-dev) to build conform-ctl (scripts/deps.sh installs them)")
		}
	}
	// Built before the guests boot: their root (the host's, over 9p,
	// cache=loose) may not show files added while they run.
	dir := t.TempDir()
	if out, err := exec.Command("make", "-s", "-C", root, "conform-ctl-build", "CTLDIR="+dir).CombinedOutput(); err != nil {
		t.Fatalf("make conform-ctl-build: %v\n%s", err, out)
	}
	md := filepath.Join(root, "test", "conform", "kernel-results.md")
	for _, tc := range []struct {
		name, guest, ip, dev, transport string
		tester                          []string
		n                               int
	}{
		{"rxe", "conform83", "10.77.0.83", "rxe0", "roce", nil, len(conform.RoCECases(nil))},
		// siw 6.1 loses an FPDU that comes right after its MPA Reply
		// (test/interop/README.md): the tester waits 300ms first.
		{"siw", "conform84", "10.77.0.84", "siw0", "iwarp", []string{"--settle", "300ms"}, len(conform.IWARPCases(nil))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := h.Boot(t, tc.guest, interop.BootOptions{IP: tc.ip, NoIPv6: true, Links: tc.name, Project: dir})
			t.Logf("guest kernel %s", strings.TrimSpace(g.Exec(t, time.Minute, "uname", "-r").Stdout))
			job := g.ExecBackground(t, "/project/conform-ctl", "--device", tc.dev, "--listen", g.IP+":7471")
			defer job.Kill("KILL")
			g.WaitListenTCP(t, 7471, 2*time.Minute)

			waivers := filepath.Join(root, "test", "conform", "kernel-"+tc.name+"-6.1.waivers")
			ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
			defer cancel()
			args := append([]string{"conform", "--transport", tc.transport, "--peer", g.IP + ":7471", "--peer-ip", g.IP,
				"--timeout", "3s", "--silence", "1.5s", "--waivers", waivers, "--json", "-v"}, tc.tester...)
			r := h.HostRun(ctx, t, args...)
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
			if len(rep.Cases) != tc.n || rep.NotApplicable != 0 {
				t.Errorf("%d cases ran, %d not applicable; want all %d applicable", len(rep.Cases), rep.NotApplicable, tc.n)
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
			if want := "conform-ctl (libibverbs " + tc.dev + ")"; !strings.HasPrefix(rep.Peer, want) {
				t.Errorf("peer %q: want %s", rep.Peer, want)
			}
			compareKernelResults(t, md, tc.name+"-ctl", &rep)
		})
	}
}
