//go:build linux

package verbsdev_test

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/devspec"
	"github.com/softrdma/softrdma/netio/netnstest"
)

// TestBackendsBetweenNamespaces runs Debian's ibv_rc_pingpong on the library
// with roce devices on the afpacket backend (raw frames on the interface, as
// `roce:ADDR,backend=afpacket` asks), between two network namespaces joined by
// a veth pair: both ends on afpacket, and afpacket against the udp backend
// both ways. Every other library test uses the udp backend on loopback.
// The programs are started from threads that netns.NS.Do moved into a
// namespace; the main thread must be back home afterwards (TestMainThread-
// StaysHome in netio/netns), and the readiness check reads the server's own
// /proc/PID/net/tcp.
func TestBackendsBetweenNamespaces(t *testing.T) {
	netnstest.Require(t)
	lib := buildLib(t)
	p := netnstest.NewPair(t, netnstest.PairConfig{})
	spec := func(s netnstest.Side, backend string) string {
		sp := "roce:" + s.IPv4.Addr().String()
		if backend != "udp" {
			sp += ",backend=" + backend + ",iface=" + s.Link
		}
		return sp
	}
	for _, c := range []struct{ server, client string }{
		{"afpacket", "afpacket"},
		{"afpacket", "udp"},
		{"udp", "afpacket"},
	} {
		t.Run(c.server+"-"+c.client, func(t *testing.T) {
			const port = "18515" // the namespaces are the test's own: nothing else listens
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			start := func(s netnstest.Side, backend string, args ...string) (*exec.Cmd, *bytes.Buffer) {
				a := append([]string{"-d", "sr_roce0", "-g", "1", "-p", port, "-n", "20", "-s", "4096", "-c"}, args...)
				cmd := exec.CommandContext(ctx, "ibv_rc_pingpong", a...)
				cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib, devspec.EnvVar+"="+spec(s, backend), "SOFTRDMA_DEBUG=")
				var out bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &out
				// The child is forked from a thread inside the namespace,
				// whose network it keeps.
				if err := s.NS.Do(cmd.Start); err != nil {
					t.Fatal(err)
				}
				return cmd, &out
			}
			srv, so := start(p.A, c.server)
			for deadline := time.Now().Add(30 * time.Second); !listensIn(srv.Process.Pid, port); {
				if time.Now().After(deadline) {
					srv.Process.Kill()
					srv.Wait()
					t.Fatalf("the server does not listen after 30 s:\n%s", so)
				}
				time.Sleep(20 * time.Millisecond)
			}
			cli, co := start(p.B, c.client, p.A.IPv4.Addr().String())
			cerr, serr := cli.Wait(), srv.Wait()
			if cerr != nil || serr != nil {
				t.Fatalf("client: %v\n%s\nserver: %v\n%s", cerr, co, serr, so)
			}
			for who, out := range map[string]string{"client": co.String(), "server": so.String()} {
				if !strings.Contains(out, "20 iters in") || !strings.Contains(out, "::ffff:"+p.A.IPv4.Addr().String()) {
					t.Errorf("%s's output has no 20 iterations or no GID of the server's address:\n%s", who, out)
				}
			}
		})
	}
	// Do ran on threads moved into the namespaces; were one of them the
	// main thread, which the runtime parks instead of ending, it must be
	// back in this namespace, or the process's /proc/net shows another.
	pid := os.Getpid()
	main, err1 := os.Readlink(fmt.Sprintf("/proc/%d/task/%d/ns/net", pid, pid))
	here, err2 := os.Readlink("/proc/thread-self/ns/net")
	if err1 != nil || err2 != nil || main != here {
		t.Errorf("main thread in namespace %s (%v), this thread in %s (%v)", main, err1, here, err2)
	}
}

// listensIn reports whether a TCP socket listens on port in the network
// namespace of process pid (its /proc/PID/net/tcp).
func listensIn(pid int, port string) bool {
	ok, _ := tableListens(fmt.Sprintf("/proc/%d/net/tcp", pid), port)
	return ok
}

// TestTAPBackend runs Debian's ibv_rc_pingpong on the library with one end a
// roce device on the tap backend (roce:ADDR,backend=tap,kernel-addr=PREFIX:
// the device is a host behind a TAP device it creates, whose kernel side
// gets PREFIX) and the other a udp-backend device on an address the test
// adds to lo (GID index 2, after 127.0.0.1), in a namespace the test
// creates, both ways round. The kernel
// routes between the two: without kernel-addr it has no route to the TAP
// host's address.
func TestTAPBackend(t *testing.T) {
	ns := netnstest.New(t)
	lib := buildLib(t)
	const (
		peer   = "10.77.0.1"
		tapDev = "10.77.0.2"
		tap    = "roce:" + tapDev + ",backend=tap,iface=srtap0,kernel-addr=10.77.0.3/24"
		udp    = "roce:" + peer
	)
	if err := ns.AddAddress("lo", netip.MustParsePrefix(peer+"/32")); err != nil {
		t.Fatal(err)
	}
	gidx := map[string]string{tap: "1", udp: "2"}
	for _, c := range []struct {
		name                 string
		server, client, dest string
	}{
		// ibv_rc_pingpong's own TCP goes to the kernel, not the TAP host.
		{"tap-server", tap, udp, "127.0.0.1"},
		{"tap-client", udp, tap, peer},
	} {
		t.Run(c.name, func(t *testing.T) {
			const port = "18516" // the namespace is the test's own: nothing else listens
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			start := func(spec string, args ...string) (*exec.Cmd, *bytes.Buffer) {
				a := append([]string{"-d", "sr_roce0", "-g", gidx[spec], "-p", port, "-n", "20", "-s", "4096", "-c"}, args...)
				cmd := exec.CommandContext(ctx, "ibv_rc_pingpong", a...)
				cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib, devspec.EnvVar+"="+spec, "SOFTRDMA_DEBUG=")
				var out bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &out
				if err := ns.Do(cmd.Start); err != nil {
					t.Fatal(err)
				}
				return cmd, &out
			}
			srv, so := start(c.server)
			for deadline := time.Now().Add(30 * time.Second); !listensIn(srv.Process.Pid, port); {
				if time.Now().After(deadline) {
					srv.Process.Kill()
					srv.Wait()
					t.Fatalf("the server does not listen after 30 s:\n%s", so)
				}
				time.Sleep(20 * time.Millisecond)
			}
			cli, co := start(c.client, c.dest)
			cerr := cli.Wait()
			if cerr != nil {
				srv.Process.Kill() // it would wait for the client until ctx ends
			}
			if serr := srv.Wait(); cerr != nil || serr != nil {
				t.Fatalf("client: %v\n%s\nserver: %v\n%s", cerr, co, serr, so)
			}
			for who, out := range map[string]string{"client": co.String(), "server": so.String()} {
				if !strings.Contains(out, "20 iters in") || !strings.Contains(out, "::ffff:"+tapDev) || !strings.Contains(out, "::ffff:"+peer) {
					t.Errorf("%s's output has no 20 iterations or not both GIDs:\n%s", who, out)
				}
			}
		})
	}
}
