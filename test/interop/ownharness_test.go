package interop_test

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/test/interop"
)

// TestOwnHarness proves the project's own kernel harness (interop/ at the
// module root) end to end: a guest it boots, in its own namespace on its own
// bridge, runs Debian's stock kernel with both soft RDMA drivers (rxe0 and
// siw0 on eth0, as `rdma link show` and `ibv_devices` see them, siw out of tree
// with the kernel's vermagic), and one real exchange with softrdma on the host
// goes through it: softrdma pingpong ↔ ibv_rc_pingpong over rxe, both
// directions, with every check of TestRXEPingpong. Guest 10.77.0.91.
func TestOwnHarness(t *testing.T) {
	h := interop.Require(t)
	if !h.Own {
		t.Skipf("interop: Require chose %s, not the project's harness (see %s)", h.Dir, interop.HarnessEnv)
	}
	if interop.Netns == "softrdma" || interop.Bridge == "srbr0" {
		t.Errorf("the project's harness uses the shared harness's netns %q / bridge %q", interop.Netns, interop.Bridge)
	}
	g := h.Boot(t, "own91", interop.BootOptions{IP: "10.77.0.91", IP6: "fd77::91"})
	if got := g.Env["netns"]; got != interop.Netns {
		t.Errorf("guest's netns %q, want %q", got, interop.Netns)
	}

	links := g.Exec(t, time.Minute, "rdma", "link", "show")
	if !links.OK() {
		t.Fatalf("rdma link show:\n%s", links)
	}
	for _, dev := range []string{"rxe0", "siw0"} {
		re := regexp.MustCompile(`(?m)^link ` + dev + `/1 state ACTIVE physical_state LINK_UP netdev eth0\s*$`)
		if !re.MatchString(links.Stdout) {
			t.Errorf("rdma link show has no active %s on eth0:\n%s", dev, links.Stdout)
		}
	}
	devs := g.Exec(t, time.Minute, "ibv_devices")
	if !devs.OK() {
		t.Fatalf("ibv_devices:\n%s", devs)
	}
	for _, dev := range []string{"rxe0", "siw0"} {
		if !regexp.MustCompile(`(?m)^\s+` + dev + `\s+[0-9a-f]{16}\s*$`).MatchString(devs.Stdout) {
			t.Errorf("ibv_devices does not list %s:\n%s", dev, devs.Stdout)
		}
	}
	// The guest runs the stock kernel, and siw (which Debian does not ship) was
	// built for exactly that kernel.
	kernel := g.Exec(t, time.Minute, "sh", "-c", "uname -r; lsmod")
	if !kernel.OK() {
		t.Fatalf("uname/lsmod:\n%s", kernel)
	}
	lines := strings.Split(kernel.Stdout, "\n")
	if want := g.Env["SOFTRDMA_GUEST_KERNEL"]; want == "" || lines[0] != want || !strings.HasSuffix(want, "-amd64") {
		t.Errorf("guest kernel %q, guest.env says %q (want a Debian -amd64 kernel)", lines[0], want)
	}
	for _, mod := range []string{"rdma_rxe", "siw", "ib_core", "rdma_cm"} {
		if !regexp.MustCompile(`(?m)^` + mod + `\s`).MatchString(kernel.Stdout) {
			t.Errorf("module %s not loaded in the guest:\n%s", mod, kernel.Stdout)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// One real exchange with the host's softrdma, both ways.
	for _, server := range []bool{false, true} {
		c := pingpongCase{mode: "rc", size: 4096, softrdmaServer: server}
		t.Run(c.String(), func(t *testing.T) { runPingpongCase(t, h, g, c) })
	}
	t.Logf("harness %s: netns %s, bridge %s, guest %s booted in %ss", filepath.Base(h.Dir), interop.Netns, interop.Bridge, g.Name, g.Env["boot_seconds"])
}
