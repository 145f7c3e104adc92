package verbsdev_test

import (
	"bytes"
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

// needTools skips the test with one line when one of the Debian programs it
// runs is missing (scripts/deps.sh lib installs rdmacm-utils and perftest).
func needTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (scripts/deps.sh installs rdmacm-utils, perftest, librdmacm-dev)", tool)
		}
	}
}

// boundUDP reports whether a UDP socket is bound to addr:port (from
// /proc/net/udp: the address in the kernel's hex, little-endian words).
func boundUDP(t *testing.T, addr string, port int) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/net/udp")
	if err != nil {
		t.Fatal(err)
	}
	var a [4]int
	fmt.Sscanf(addr, "%d.%d.%d.%d", &a[0], &a[1], &a[2], &a[3])
	want := fmt.Sprintf("%02X%02X%02X%02X:%04X", a[3], a[2], a[1], a[0], port)
	for _, line := range strings.Split(string(b), "\n")[1:] {
		if f := strings.Fields(line); len(f) > 1 && f[1] == want {
			return true
		}
	}
	return false
}

// notListening matches what the clients print when the server's rdma_cm is
// not listening yet: the IB CM's REJ (RoCE, reason 8), a SIDR_REP that
// refuses a UD request (RoCE, UNREACHABLE) or a refused TCP connection
// (iWARP); perftest prints the event's number, 8; rdma_client and
// rdma_xclient (synchronous IDs) rdma_connect's ECONNREFUSED.
var notListening = regexp.MustCompile(`REJECTED|UNREACHABLE|CM event bl blka 8|rdma_connect: Connection refused`)

// cmPair runs prog as a server on 127.X.Y.1 and as its client on 127.X.Y.2
// (X, Y random: tests do not share addresses), each on softrdma's
// librdmacm.so.1 and libibverbs.so.1 with one device of transport tr ("roce"
// or "iwarp") at its address. srv and cli give the arguments of each end from
// the server's address. The connection is made by rdma_cm, so there is no
// socket of the program's own to wait for: the client starts once the
// server's device is open (RoCE: its UDP socket; iWARP needs nothing), and
// is run again, up to 100 times, while it fails only because the server does
// not listen yet (notListening) and the server still runs. Both ends must
// succeed, and neither may print a refused verb.
func cmPair(t *testing.T, lib, tr, prog string, srv, cli func(srvAddr string) []string) (srvOut, cliOut string) {
	t.Helper()
	return cmPairOf(t, lib, tr, prog, prog, srv, cli)
}

// cmPairOf is cmPair with a server program and a client program of their own
// (rdma_server and rdma_client).
func cmPairOf(t *testing.T, lib, tr, srvProg, cliProg string, srv, cli func(srvAddr string) []string) (srvOut, cliOut string) {
	t.Helper()
	prog := srvProg
	net3 := fmt.Sprintf("127.%d.%d.", 100+rand.IntN(100), 1+rand.IntN(250))
	srvAddr, cliAddr := net3+"1", net3+"2"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := func(prog, addr string, args []string) (*exec.Cmd, *bytes.Buffer) {
		cmd := exec.CommandContext(ctx, prog, args...)
		cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib, devspec.EnvVar+"="+tr+":"+addr, "SOFTRDMA_DEBUG=1")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, &out
	}
	s, so := start(srvProg, srvAddr, srv(srvAddr))
	srvDone := make(chan error, 1)
	go func() { srvDone <- s.Wait() }()
	fail := func(format string, a ...any) {
		t.Helper()
		s.Process.Kill()
		<-srvDone
		t.Fatalf(format+"\nserver:\n%s", append(a, so)...)
	}
	// The client starts once the server's device is open (RoCE: its UDP
	// socket) or, on iWARP, once the server listens: perftest's client,
	// refused, goes on to call rdma_resolve_addr with an rdma_cm_id that is
	// not one (it crashed in our rdma_resolve_addr, as it would in rdma-core's).
	ready := func() bool { return boundUDP(t, srvAddr, 4791) }
	if tr == "iwarp" {
		ready = func() bool { return listeningOn(t, srvPort(srv(srvAddr))) }
	}
	{
		for !ready() {
			select {
			case err := <-srvDone:
				t.Fatalf("%s server exited (%v) before it was ready\n%s", prog, err, so)
			case <-ctx.Done():
				fail("%s server never got ready", prog)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	var co *bytes.Buffer
	for try := 0; ; try++ {
		var c *exec.Cmd
		c, co = start(cliProg, cliAddr, cli(srvAddr))
		err := c.Wait()
		if err == nil {
			break
		}
		select {
		case serr := <-srvDone:
			t.Fatalf("%s: client: %v\n%s\nserver exited: %v\n%s", prog, err, co, serr, so)
		default:
		}
		if !notListening.MatchString(co.String()) || try == 100 {
			fail("%s: client (try %d): %v\n%s", prog, try, err, co)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := <-srvDone; err != nil {
		t.Fatalf("%s: server: %v\n%s\nclient:\n%s", prog, err, so, co)
	}
	for _, o := range []string{so.String(), co.String()} {
		if strings.Contains(o, "softrdma:") && strings.Contains(o, "not implemented") {
			t.Errorf("%s: a call was refused:\n%s", prog, o)
		}
	}
	return so.String(), co.String()
}

var transports = []string{"roce", "iwarp"}

// TestRping runs Debian's unmodified rping at both ends on softrdma's
// librdmacm.so.1 and libibverbs.so.1, over RoCE (the IB CM on QP1) and over
// iWARP (MPA over TCP): five round trips of SEND, RDMA READ and RDMA WRITE,
// each validated (-V), to the buffers' own addresses.
func TestRping(t *testing.T) {
	lib := buildLib(t)
	needTools(t, "rping")
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			port := fmt.Sprint(20000 + rand.IntN(20000))
			so, co := cmPair(t, lib, tr, "rping",
				func(a string) []string { return []string{"-s", "-a", a, "-p", port, "-C", "5", "-v", "-V"} },
				func(a string) []string { return []string{"-c", "-a", a, "-p", port, "-C", "5", "-v", "-V"} })
			for i := range 5 {
				want := fmt.Sprintf("ping data: rdma-ping-%d: ", i)
				if !strings.Contains(co, want) || !strings.Contains(so, "server "+want) {
					t.Errorf("no %q at both ends\nserver:\n%s\nclient:\n%s", want, so, co)
				}
			}
		})
	}
}

// TestUcmatose runs rdma-core's ucmatose, two RC connections over rdma_cm
// with ten SENDs each way, over both transports.
func TestUcmatose(t *testing.T) {
	lib := buildLib(t)
	needTools(t, "ucmatose")
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			port := fmt.Sprint(20000 + rand.IntN(20000))
			so, co := cmPair(t, lib, tr, "ucmatose",
				func(a string) []string { return []string{"-b", a, "-p", port, "-c", "2", "-C", "10"} },
				func(a string) []string { return []string{"-s", a, "-p", port, "-c", "2", "-C", "10"} })
			for _, o := range []string{so, co} {
				if !strings.Contains(o, "data transfers complete") || !strings.Contains(o, "return status 0") {
					t.Errorf("ucmatose did not complete:\nserver:\n%s\nclient:\n%s", so, co)
				}
			}
		})
	}
}

// TestPerftestRDMACM runs perftest with -R (connections by rdma_cm) over
// both transports: ib_write_bw, ib_send_bw and ib_read_lat (RoCE only for
// now), 100 iterations. Over iWARP this is the only way perftest connects.
func TestPerftestRDMACM(t *testing.T) {
	lib := buildLib(t)
	needTools(t, "ib_write_bw", "ib_send_bw", "ib_read_lat")
	rows := map[string]*regexp.Regexp{
		"ib_write_bw": regexp.MustCompile(`(?m)^ 65536\s+100\s+[0-9.]+\s+[0-9.]+`),
		"ib_send_bw":  regexp.MustCompile(`(?m)^ 65536\s+100\s+[0-9.]+\s+[0-9.]+`),
		"ib_read_lat": regexp.MustCompile(`(?m)^ 2\s+100\s+[0-9.]+`),
	}
	for _, tr := range transports {
		for _, prog := range []string{"ib_write_bw", "ib_send_bw", "ib_read_lat"} {
			if tr == "iwarp" && prog == "ib_read_lat" {
				// Not yet: 1 run in 3 or so the client's first WR
				// completes with WR_FLUSH_ERR (see notes/rdmacm.md).
				continue
			}
			t.Run(tr+" "+prog, func(t *testing.T) {
				port := fmt.Sprint(20000 + rand.IntN(20000))
				args := []string{"-R", "-d", "sr_" + tr + "0", "-n", "100", "-p", port}
				_, co := cmPair(t, lib, tr, prog,
					func(string) []string { return args },
					func(a string) []string { return append(append([]string(nil), args...), a) })
				if !rows[prog].MatchString(co) {
					t.Errorf("no result row %q in\n%s", rows[prog], co)
				}
			})
		}
	}
}

// srvPort returns the value of -p in args: the server's rdma_cm port
// (rdma-core's tools' default, 7174, when there is none; 7471 for ucmatose
// and udaddy is given with -p by the tests).
func srvPort(args []string) string {
	for i, a := range args {
		if a == "-p" && i+1 < len(args) {
			return args[i+1]
		}
	}
	return "7174"
}

// listeningOn reports whether a TCP socket listens on port on any address,
// IPv4 or IPv6 (a wildcard listener of package iwarp is an IPv6 socket
// taking both), from /proc/net/tcp and tcp6 (state 0A is LISTEN).
func listeningOn(t *testing.T, port string) bool {
	t.Helper()
	var p int
	fmt.Sscan(port, &p)
	want := fmt.Sprintf(":%04X", p)
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			if f := strings.Fields(line); len(f) > 3 && strings.HasSuffix(f[1], want) && f[3] == "0A" {
				return true
			}
		}
	}
	return false
}
