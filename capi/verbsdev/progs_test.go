package verbsdev_test

import (
	"os/exec"
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

// needPackage skips the test with one line when a Debian program beyond
// rdma-core's is missing (scripts/deps.sh lib installs qperf, libfabric-bin
// and ucx-utils).
func needPackage(t *testing.T, pkg string, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (Debian package %s; scripts/deps.sh installs it)", tool, pkg)
		}
	}
}

// TestLibfabricInfo: libfabric's fi_info lists the devices through its verbs
// provider (Debian's libfabric1 1.17). libfabric.so.1 links libefa.so.1 for
// its efa provider and needs efadv_create_cq, efadv_cq_from_ibv_cq_ex
// (EFA_1.2) and efadv_query_ah: without them in the stub libefa.so.1 the
// loader refused fi_info itself ("version `EFA_1.2' not found").
func TestLibfabricInfo(t *testing.T) {
	lib := buildLib(t)
	needPackage(t, "libfabric-bin", "fi_info")
	addr := randomNet() + "1"
	out, errOut, err := runBounded(t, lib, "roce:"+addr, time.Minute, "fi_info", "-p", "verbs")
	if err != nil {
		t.Fatalf("fi_info -p verbs: %v\n%s\nstderr:\n%s", err, out, errOut)
	}
	for _, want := range []string{"domain: sr_roce0\n", "type: FI_EP_MSG", "domain: sr_roce0-dgram", "type: FI_EP_RDM"} {
		if !strings.Contains(out, want) {
			t.Errorf("fi_info -p verbs does not show %q:\n%s", want, out)
		}
	}
}

// TestUCXInfo: UCX's ucx_info -d loads its IB modules (libuct_ib,
// libuct_rdmacm) on the libraries and shows the rdmacm connection manager.
// libuct_ib.so.0 links libmlx5.so.1 and imports 20 mlx5dv_* functions
// (MLX5_1.1 to MLX5_1.11); the stub lacked most of them and the loader
// refused both modules (UCX_LOG_LEVEL=debug: "version `MLX5_1.2' not
// found"). UCX lists no verbs transports even so: its IB module takes only a
// device with a /dev/infiniband node (uct_ib_device_is_accessible).
func TestUCXInfo(t *testing.T) {
	lib := buildLib(t)
	needPackage(t, "ucx-utils", "ucx_info")
	out, errOut, err := runBounded(t, lib, "roce:"+randomNet()+"1", time.Minute, "ucx_info", "-d")
	if err != nil {
		t.Fatalf("ucx_info -d: %v\n%s\nstderr:\n%s", err, out, errOut)
	}
	if !strings.Contains(out, "# Connection manager: rdmacm") {
		t.Errorf("ucx_info -d shows no rdmacm connection manager (its IB modules did not load):\n%s", out)
	}
}
