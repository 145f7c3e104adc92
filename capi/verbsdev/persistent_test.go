package verbsdev_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/devspec"
)

// serveOn starts prog with the libraries and one device of transport tr on
// addr, its output in a lockedBuffer, killed at the end of the test; it
// returns once the library says rdma_listen listens (SOFTRDMA_DEBUG).
func serveOn(t *testing.T, ctx context.Context, lib, tr, addr, prog string, args ...string) *lockedBuffer {
	t.Helper()
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib, devspec.EnvVar+"="+tr+":"+addr, "SOFTRDMA_DEBUG=1")
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	waitFor(t, ctx, prog+" listening", func() bool { return strings.Contains(out.String(), listenLine) })
	return out
}

// runOn runs prog to its end like serveOn, and returns its output; it must succeed.
func runOn(t *testing.T, ctx context.Context, lib, tr, addr, prog string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib, devspec.EnvVar+"="+tr+":"+addr, "SOFTRDMA_DEBUG=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %q: %v\n%s", prog, args, err, out)
	}
	return string(out)
}

// TestPersistentServers runs rdma-core's servers that serve until killed,
// both ends on the libraries, over RoCE and iWARP:
//   - rping -P (a persistent server: a thread per connection), two clients in
//     turn, three round trips each, validated by the client (-V); the server's
//     own output stays in its stdio buffer until it exits, which it does not;
//   - cmtime, 10 connections at once through every rdma_cm step (create id,
//     resolve address and route, create QP, connect, disconnect, destroy), the
//     client printing its timing table.
func TestPersistentServers(t *testing.T) {
	lib := buildLib(t)
	needTools(t, "rping", "cmtime")
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			net3 := randomNet()
			srv, cli := net3+"1", net3+"2"

			port := fmt.Sprint(20000 + rand.IntN(20000))
			serveOn(t, ctx, lib, tr, srv, "rping", "-s", "-P", "-a", srv, "-p", port, "-C", "3", "-V", "-v")
			for i := range 2 {
				co := runOn(t, ctx, lib, tr, cli, "rping", "-c", "-a", srv, "-p", port, "-C", "3", "-V", "-v")
				if !strings.Contains(co, "ping data: rdma-ping-2: ") {
					t.Errorf("rping client %d: no third ping:\n%s", i, co)
				}
			}

			// Addresses of their own: the rping server, still running, holds
			// RoCE's UDP port on srv.
			srv, cli = net3+"3", net3+"4"
			port = fmt.Sprint(20000 + rand.IntN(20000))
			serveOn(t, ctx, lib, tr, srv, "cmtime", "-b", srv, "-p", port, "-c", "10")
			co := runOn(t, ctx, lib, tr, cli, "cmtime", "-s", srv, "-p", port, "-c", "10")
			for _, step := range []string{"create id", "resolve addr", "resolve route", "create qp", "connect", "disconnect", "destroy"} {
				if !regexp.MustCompile(`(?m)^` + step + ` *:`).MatchString(co) {
					t.Errorf("cmtime: no %q row:\n%s", step, co)
				}
			}
			if r := debugLines(co); strings.Contains(strings.Join(r, "\n"), "not implemented") {
				t.Errorf("cmtime: a call was refused:\n%s", co)
			}
		})
	}
}
