package interop

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	cmGateOnce sync.Once
	cmGateSO   string
	cmGateErr  error
)

// cmGate builds testdata/cmgate.c (an LD_PRELOAD library holding a client's
// second rdma_resolve_addr until a file appears) once per test process.
func cmGate(t testing.TB) string {
	t.Helper()
	cmGateOnce.Do(func() {
		root, err := ModuleRoot()
		if err != nil {
			cmGateErr = err
			return
		}
		dir, err := os.MkdirTemp("", "softrdma-cmgate-")
		if err != nil {
			cmGateErr = err
			return
		}
		cmGateSO = filepath.Join(dir, "cmgate.so")
		if out, err := exec.Command("gcc", "-Wall", "-shared", "-fPIC", "-o", cmGateSO,
			filepath.Join(root, "test/interop/testdata/cmgate.c"), "-ldl").CombinedOutput(); err != nil {
			cmGateErr = fmt.Errorf("building cmgate.so: %v\n%s", err, out)
		}
	})
	if cmGateErr != nil {
		t.Fatalf("interop: %v", cmGateErr)
	}
	return cmGateSO
}

// CMGateSO returns the path of testdata/cmgate.c built as an LD_PRELOAD
// library (once per test process), for tests that gate programs themselves.
func CMGateSO(t testing.TB) string { return cmGate(t) }

// LibRunCMGated is LibRun for a perftest -R client whose server runs in g,
// listening for rdma_cm on port: the client's test connection (its second
// rdma_resolve_addr, see testdata/cmgate.c) waits until an rdma_cm ID in the
// guest listens on port again (`rdma resource show cm_id`, state LISTEN), so
// that it is never refused for a server that has not listened yet.
func (h *Harness) LibRunCMGated(ctx context.Context, t testing.TB, g *Guest, port int, spec, prog string, args ...string) Result {
	t.Helper()
	so := cmGate(t)
	gate := filepath.Join(t.TempDir(), "gate")
	os.Remove(gate + ".wait")
	os.Remove(gate + ".go")
	env := []string{"LD_PRELOAD=" + so, "SOFTRDMA_TEST_CMGATE=" + gate}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	var note string
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			if _, err := os.Stat(gate + ".wait"); err == nil {
				break
			}
			select {
			case <-wctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		if r := g.ExecShell(t, 70*time.Second, cmListenScript(port, time.Minute)); !r.OK() {
			note = fmt.Sprintf("interop: no rdma_cm listener on port %d in %s for the client's test connection:\n%s", port, g.Name, r)
		}
		os.WriteFile(gate+".go", nil, 0o644) // the client goes on either way: a refusal fails it
	}()
	r := run(ctx, "ip", append(libCommand(t, spec, "env", env), append([]string{prog}, args...)...)...)
	stop()
	wg.Wait()
	r.Cmd = "[host, " + LibDevicesEnv + "=" + spec + ", cmgate] " + shellQuote(append([]string{prog}, args...))
	if note != "" {
		r.Stderr += note + "\n"
	}
	return r
}

// CMGatedServer is what a perftest -R server on softrdma's libraries and its
// client in g need so that the client's test connection is never refused for
// a server that has not listened yet (testdata/cmgate.c): Env is the server's
// extra environment (it marks its second listen with a file in the guest's
// control directory), ClientEnv the guest client's (its second
// rdma_resolve_addr waits for that file).
type CMGatedServer struct {
	Env, ClientEnv []string
}

// CMGateServer prepares a fresh gate in g's control directory.
func (g *Guest) CMGateServer(t testing.TB) CMGatedServer {
	t.Helper()
	so := cmGate(t)
	ctl := filepath.Join(g.runDir(), "ctl")
	b, err := os.ReadFile(so)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ctl, "cmgate.so"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"cmgate.wait", "cmgate.go"} {
		os.Remove(filepath.Join(ctl, f))
	}
	return CMGatedServer{
		Env:       []string{"LD_PRELOAD=" + so, "SOFTRDMA_TEST_CMGATE_LISTENED=" + filepath.Join(ctl, "cmgate.go")},
		ClientEnv: []string{"LD_PRELOAD=/ctl/cmgate.so", "SOFTRDMA_TEST_CMGATE=/ctl/cmgate"},
	}
}

// HoldTeardown makes the gated server's first QP teardown (ibv_destroy_qp or
// rdma_destroy_qp; testdata/cmgate.c) wait until release is called, which the
// test does once the client has ended. perftest's server tears everything
// down right after the SEND that ends its closing handshake, and the kernel's
// siw fails its client's last SEND, already on the wire and answered, with
// IBV_WC_LOC_QP_OP_ERR when the server's FIN is processed before siw's
// transmit path returns (see cmgate.c). held reports whether the server has
// reached its teardown and waits there.
func (s *CMGatedServer) HoldTeardown(t testing.TB) (release func(), held func() bool) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "cmgate.close")
	s.Env = append(s.Env, "SOFTRDMA_TEST_CMGATE_CLOSE="+file)
	release = func() {
		if err := os.WriteFile(file, nil, 0o644); err != nil {
			t.Errorf("interop: releasing the server's teardown: %v", err)
		}
	}
	held = func() bool {
		_, err := os.Stat(file + ".wait")
		return err == nil
	}
	return release, held
}

// LibStartEnv is LibStart with env (KEY=VALUE) added to the program's
// environment.
func (h *Harness) LibStartEnv(t testing.TB, spec string, env []string, prog string, args ...string) *Proc {
	t.Helper()
	p := Start(t, nil, "ip", append(libCommand(t, spec, "env", env), append([]string{prog}, args...)...)...)
	p.res.Cmd = "[host, " + LibDevicesEnv + "=" + spec + ", " + strings.Join(env, " ") + "] " + shellQuote(append([]string{prog}, args...))
	return p
}

// cmListenScript succeeds once an rdma_cm ID in the guest listens on port
// (rxe's and siw's alike: `rdma resource show cm_id`, state LISTEN).
func cmListenScript(port int, timeout time.Duration) string {
	return fmt.Sprintf(`end=$((SECONDS+%d))
while [ $SECONDS -lt $end ]; do
  rdma resource show cm_id | grep -q "state LISTEN .*:%d " && exit 0
  sleep 0.05
done
exit 1`, int(timeout.Seconds()+0.999), port)
}

// WaitCMListen waits until an rdma_cm ID in the guest listens on port (a
// server job started with ExecBackground), failing the test after timeout.
func (g *Guest) WaitCMListen(t testing.TB, port int, timeout time.Duration) {
	t.Helper()
	if r := g.ExecShell(t, timeout+10*time.Second, cmListenScript(port, timeout)); !r.OK() {
		t.Fatalf("interop: no rdma_cm listener on port %d in %s after %v:\n%s", port, g.Name, timeout, r)
	}
}
