package verbsdev_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/devspec"
)

// freeTCPPort returns a TCP port free on addr a moment ago, for
// ibv_rc_pingpong's out-of-band exchange (its default, 18515, may be taken by
// another test on the host).
func freeTCPPort(t *testing.T, addr string) int {
	t.Helper()
	l, err := net.Listen("tcp", addr+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// listening reports whether a TCP socket listens on port (decimal), from
// /proc/net/tcp (state 0A is LISTEN).
func listening(t *testing.T, port string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	var p int
	fmt.Sscan(port, &p)
	want := fmt.Sprintf(":%04X", p)
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 3 && strings.HasSuffix(f[1], want) && f[3] == "0A" {
			return true
		}
	}
	return false
}

// TestRCPingpong runs Debian's unmodified ibv_rc_pingpong at both ends on
// softrdma's libibverbs.so.1, an RC QP over RoCEv2 on two loopback addresses
// of their own (127.X.Y.1 and .2, random, so that concurrent tests do not share
// the RoCE UDP port), with -c: each end checks every byte it received. Both
// must finish every iteration and print each other's QPN and GID.
func TestRCPingpong(t *testing.T) {
	lib := buildLib(t)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"default size", []string{"-n", "200", "-c"}},
		// 64 packets a message at the 1024-byte MTU of an address on no
		// interface (1500, less rxe's allowance).
		{"64 KiB messages", []string{"-n", "50", "-c", "-m", "1024", "-s", "65536"}},
		{"small messages, deep receive queue", []string{"-n", "300", "-c", "-s", "1", "-r", "1000"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			net3 := fmt.Sprintf("127.%d.%d.", 100+rand.IntN(100), 1+rand.IntN(250))
			srvAddr, cliAddr := net3+"1", net3+"2"
			port := fmt.Sprint(freeTCPPort(t, srvAddr))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			start := func(addr string, extra ...string) (*exec.Cmd, *bytes.Buffer) {
				args := append([]string{"-d", "sr_roce0", "-g", "1", "-p", port}, tc.args...)
				cmd := exec.CommandContext(ctx, "ibv_rc_pingpong", append(args, extra...)...)
				cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib, devspec.EnvVar+"=roce:"+addr, "SOFTRDMA_DEBUG=1")
				var out bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &out
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				return cmd, &out
			}
			// The client connects once: wait until the server listens, looking
			// (not connecting: that would be the server's one connection).
			srv, srvOut := start(srvAddr)
			for deadline := time.Now().Add(30 * time.Second); !listening(t, port); {
				if time.Now().After(deadline) {
					srv.Process.Kill()
					srv.Wait()
					t.Fatalf("server never listened\n%s", srvOut)
				}
				time.Sleep(20 * time.Millisecond)
			}
			cli, cliOut := start(cliAddr, srvAddr)
			cliErr := cli.Wait()
			srvErr := srv.Wait()
			if cliErr != nil || srvErr != nil {
				t.Fatalf("client: %v\n%s\nserver: %v\n%s", cliErr, cliOut, srvErr, srvOut)
			}
			for _, o := range []struct {
				out        string
				local, rem string
			}{{srvOut.String(), srvAddr, cliAddr}, {cliOut.String(), cliAddr, srvAddr}} {
				iters := tc.args[1]
				for _, w := range []string{
					"GID ::ffff:" + o.local + "\n", "remote address: LID 0x0000", "GID ::ffff:" + o.rem + "\n",
					iters + " iters in ",
				} {
					if !strings.Contains(o.out, w) {
						t.Errorf("no %q in\n%s", w, o.out)
					}
				}
				if strings.Contains(o.out, "invalid data") {
					t.Errorf("-c found bad data:\n%s", o.out)
				}
				if strings.Contains(o.out, "softrdma:") {
					t.Errorf("a verb was refused:\n%s", o.out)
				}
			}
		})
	}
}
