package verbsdev_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/counters"
	"github.com/softrdma/softrdma/devspec"
)

// TestCmtime runs rdma-core's unmodified cmtime, the connection setup rate
// test: the client opens 200 rdma_cm IDs and connects them all at once to a
// server that listens with the default backlog (rdma_listen(id, 0)) and
// accepts from a worker thread. Both ends on the libraries, over both
// transports; the server runs until it is ended. Over RoCE each connection
// must take one REQ, one RTU and one DREQ from the client (its device's
// packets out, the counters it dumps at exit): a request the server lost
// waits for the client's REQ retry, seconds later. Before, the 65th and later
// of a burst were lost twice over: past the 64 receive buffers of the
// server's QP1, and past the 64 events a listener's channel held (rdmacm's
// push dropped them as for a full backlog); cmtime -c 100 took 6.4 s to
// connect, -c 500 26 s.
func TestCmtime(t *testing.T) {
	lib := buildLib(t)
	needTools(t, "cmtime")
	const n = 200
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			net3 := randomNet()
			srvAddr, cliAddr := net3+"1", net3+"2"
			port := fmt.Sprint(20000 + rand.IntN(20000))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			dump := filepath.Join(t.TempDir(), "client.json")
			start := func(addr string, env []string, args ...string) (*exec.Cmd, *syncBuffer) {
				cmd := exec.CommandContext(ctx, "cmtime", args...)
				cmd.Env = append(append(os.Environ(), "LD_LIBRARY_PATH="+lib, devspec.EnvVar+"="+tr+":"+addr, "SOFTRDMA_DEBUG=1"), env...)
				cmd.WaitDelay = 5 * time.Second
				out := new(syncBuffer)
				cmd.Stdout, cmd.Stderr = out, out
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				return cmd, out
			}
			srv, so := start(srvAddr, nil, "-b", srvAddr, "-p", port)
			srvDone := make(chan error, 1)
			go func() { srvDone <- srv.Wait() }()
			defer func() {
				srv.Process.Kill()
				<-srvDone
			}()
			for !strings.Contains(so.String(), listenLine) {
				select {
				case err := <-srvDone:
					t.Fatalf("cmtime server exited (%v) before it listened\n%s", err, so)
				case <-ctx.Done():
					t.Fatalf("cmtime server never listened\n%s", so)
				case <-time.After(20 * time.Millisecond):
				}
			}
			cli, co := start(cliAddr, []string{"SOFTRDMA_COUNTERS_DUMP=" + dump}, "-s", srvAddr, "-p", port, "-c", fmt.Sprint(n))
			if err := cli.Wait(); err != nil || !strings.Contains(co.String(), "destroy") {
				t.Fatalf("cmtime client: %v\n%s\nserver:\n%s", err, co, so)
			}
			if tr != "roce" {
				return
			}
			b, err := os.ReadFile(dump)
			if err != nil {
				t.Fatal(err)
			}
			var s counters.Snapshot
			if err := json.Unmarshal(b, &s); err != nil || len(s.Devices) != 1 {
				t.Fatalf("%s: %v\n%s", dump, err, b)
			}
			if c := s.Devices[0].Counters; c.PacketsOut != 3*n || c.PacketsIn != 2*n {
				t.Errorf("client: %d MADs out, %d in; want %d (a REQ, RTU and DREQ per connection), %d (REP, DREP)\n%s",
					c.PacketsOut, c.PacketsIn, 3*n, 2*n, co)
			}
		})
	}
}
