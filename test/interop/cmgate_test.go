package interop_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/test/interop"
)

// TestCMGateHoldsTeardown checks, without a guest, the ordering TestLibsSiw's
// lib-server perftest rows rely on (CMGatedServer.HoldTeardown): a perftest -R
// server on softrdma's libraries, given the hold, must not start its teardown
// (its first ibv_destroy_qp or rdma_destroy_qp, where its FIN leaves) before
// the test releases it, which the test does after its client has ended. Both
// ends run on the libraries (iWARP on loopback) in a network namespace this
// test creates, the client gated as TestLibsSiw's kernel clients are. Without
// the hold the server ends, torn down, right after its closing handshake: the
// test fails at "ended without holding".
func TestCMGateHoldsTeardown(t *testing.T) {
	for _, tool := range []string{"ib_write_bw", "ib_read_bw"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs perftest's %s", tool)
		}
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root (a network namespace)")
	}
	libs := interop.Libs(t)
	requireRdmacm(t)
	so := interop.CMGateSO(t)
	ns := fmt.Sprintf("srcmgate%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Skipf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	if out, err := exec.Command("ip", "-n", ns, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("lo up: %v: %s", err, out)
	}
	for _, args := range [][]string{
		{"ib_write_bw", "-R", "-F", "-n", "5", "-s", "65536"},
		{"ib_read_bw", "-R", "-F", "-n", "5", "-s", "4096"},
	} {
		t.Run(args[0], func(t *testing.T) {
			dir := t.TempDir()
			gate := interop.CMGatedServer{Env: []string{"LD_PRELOAD=" + so, "SOFTRDMA_TEST_CMGATE_LISTENED=" + filepath.Join(dir, "gate.go")}}
			release, held := gate.HoldTeardown(t)
			cmd := func(env []string, a ...string) []string {
				return append(append([]string{"netns", "exec", ns, "env", "LD_LIBRARY_PATH=" + libs,
					interop.LibDevicesEnv + "=iwarp:127.0.0.1"}, env...), a...)
			}
			srv := interop.Start(t, nil, "ip", cmd(gate.Env, args...)...)
			if !srv.WaitListenTCP(18515, time.Minute) {
				t.Fatalf("the server did not listen:\n%s", srv.Wait(time.Second))
			}
			cli := interop.Start(t, nil, "ip", cmd([]string{"LD_PRELOAD=" + so, "SOFTRDMA_TEST_CMGATE=" + filepath.Join(dir, "gate")},
				append(args, "127.0.0.1")...)...)
			if r := cli.Wait(2 * time.Minute); !r.OK() {
				release()
				t.Fatalf("client failed:\n%s\nserver:\n%s", r, srv.Wait(10*time.Second))
			}
			// The server must now be holding at its teardown: it made the
			// .wait file and still runs. It cannot pass the hold before the
			// release, so this waits only for it to get there.
			for !held() {
				if srv.Done() {
					t.Fatalf("the server ended without holding its teardown for the client's end:\n%s", srv.Wait(time.Second))
				}
				time.Sleep(10 * time.Millisecond)
			}
			if srv.Done() {
				t.Fatalf("the server ended while holding its teardown:\n%s", srv.Wait(time.Second))
			}
			release()
			r := srv.Wait(2 * time.Minute)
			if !r.OK() {
				t.Fatalf("server failed after the release:\n%s", r)
			}
			if f := strings.Fields(perfResultRow(r.Stdout)); len(f) < 2 || f[1] != "5" {
				t.Errorf("the server printed no result row of 5 iterations:\n%s", r)
			}
		})
	}
}
