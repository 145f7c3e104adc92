package verbsdev_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/devspec"
)

// freeTCPPort returns a TCP port no socket used a moment ago, for
// ibv_rc_pingpong's out-of-band exchange (its default, 18515, may be taken by
// another test on the host). The programs listen on the wildcard address, so
// the port is taken from a wildcard listener: one free on the server's own
// address alone can be held on another (CI: "Couldn't listen to port").
func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// listening reports whether a TCP socket listens on port (decimal) in the
// calling thread's network namespace, where the tests start their programs
// (/proc/thread-self/net/tcp; state 0A is LISTEN). Not /proc/net, which is
// the main thread's namespace: a test that ran code in a namespace of its
// own on the main thread could have left it there.
func listening(t *testing.T, port string) bool {
	t.Helper()
	ok, err := tableListens("/proc/thread-self/net/tcp", port)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// tableListens reports whether the TCP table at path (a /proc/.../net/tcp
// or tcp6) holds a socket listening on port (decimal).
func tableListens(path, port string) (bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	var p int
	fmt.Sscan(port, &p)
	want := fmt.Sprintf(":%04X", p)
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 3 && strings.HasSuffix(f[1], want) && f[3] == "0A" {
			return true, nil
		}
	}
	return false, nil
}

// pair runs prog as a server on 127.X.Y.1 and as a client of it on 127.X.Y.2
// (X, Y random, so that concurrent tests do not share RoCE's UDP port), each
// on softrdma's library with one RoCE device there, sr_roce0, and the
// out-of-band TCP port given with -p. args go to both ends. It returns both
// outputs and the two addresses, failing the test if either end fails. A
// pair whose client could not sample the CPU clock for perftest's report
// (clockSampling: preempted on a loaded machine) is run again, on new
// addresses, up to cmAttempts times.
func pair(t *testing.T, lib, prog string, args ...string) (srvOut, cliOut, srvAddr, cliAddr string) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		so, co, sa, ca, err := pairOnce(t, lib, prog, args...)
		if err == nil {
			return so, co, sa, ca
		}
		if attempt < cmAttempts && clockSampling.MatchString(co) {
			t.Logf("%s %s: pair %d: the client could not sample the CPU clock for its report (r² < 0.9: preempted); a new pair starts\n%s", prog, args, attempt, co)
			continue
		}
		t.Fatalf("%s %s: %v", prog, args, err)
	}
}

// pairOnce is one pair of pair; err says how it failed, with both outputs.
func pairOnce(t *testing.T, lib, prog string, args ...string) (srvOut, cliOut, srvAddr, cliAddr string, err error) {
	t.Helper()
	net3 := randomNet()
	srvAddr, cliAddr = net3+"1", net3+"2"
	port := fmt.Sprint(freeTCPPort(t))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := func(addr string, extra ...string) (*exec.Cmd, *bytes.Buffer) {
		a := append([]string{"-d", "sr_roce0", "-p", port}, args...)
		cmd := exec.CommandContext(ctx, prog, append(a, extra...)...)
		cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib, devspec.EnvVar+"=roce:"+addr, "SOFTRDMA_DEBUG=1")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, &out
	}
	// The client connects once: wait until the server listens, looking (not
	// connecting: that would be the server's one connection).
	srv, so := start(srvAddr)
	for deadline := time.Now().Add(30 * time.Second); !listening(t, port); {
		if time.Now().After(deadline) {
			srv.Process.Kill()
			srv.Wait()
			t.Fatalf("%s server never listened\n%s", prog, so)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cli, co := start(cliAddr, srvAddr)
	cliErr := cli.Wait()
	if cliErr != nil && clockSampling.MatchString(co.String()) {
		srv.Process.Kill() // it may wait for a client that has gone
	}
	srvErr := srv.Wait()
	if cliErr != nil || srvErr != nil {
		return so.String(), co.String(), srvAddr, cliAddr, fmt.Errorf("client: %v\n%s\nserver: %v\n%s", cliErr, co, srvErr, so)
	}
	for _, o := range []string{so.String(), co.String()} {
		if r := debugLines(o); len(r) > 0 {
			t.Errorf("%s %s: a verb was refused:\n%s", prog, args, o)
		}
	}
	return so.String(), co.String(), srvAddr, cliAddr, nil
}

// TestRCPingpong runs Debian's unmodified ibv_rc_pingpong at both ends on
// softrdma's libibverbs.so.1 (pair), an RC QP over RoCEv2, with -c: each end
// checks the data it received. Both must finish every iteration and print
// each other's QPN and GID.
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
		// Completion events (a completion channel, ibv_req_notify_cq,
		// ibv_get_cq_event): the client, woken at once by its last
		// receive, exits quickest, and must have acknowledged it.
		{"events", []string{"-n", "200", "-c", "-e"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srvOut, cliOut, srvAddr, cliAddr := pair(t, lib, "ibv_rc_pingpong", append([]string{"-g", "1"}, tc.args...)...)
			for _, o := range []struct {
				out        string
				local, rem string
			}{{srvOut, srvAddr, cliAddr}, {cliOut, cliAddr, srvAddr}} {
				for _, w := range []string{
					"GID ::ffff:" + o.local + "\n", "remote address: LID 0x0000", "GID ::ffff:" + o.rem + "\n",
					tc.args[1] + " iters in ",
				} {
					if !strings.Contains(o.out, w) {
						t.Errorf("no %q in\n%s", w, o.out)
					}
				}
				if strings.Contains(o.out, "invalid data") {
					t.Errorf("-c found bad data:\n%s", o.out)
				}
			}
		})
	}
}

// TestPingpongs runs Debian's unmodified ibv_uc_pingpong (a UC QP),
// ibv_ud_pingpong (UD: an address handle per send, the GRH in the first 40
// bytes of each receive) and ibv_srq_pingpong (16 RC QPs sharing one SRQ,
// ibv_post_srq_recv) at both ends (pair). ud_pingpong's messages fit the
// smaller of the two ports' MTUs (1024: 127.X.Y.2 is on no interface).
func TestPingpongs(t *testing.T) {
	lib := buildLib(t)
	for _, tc := range []struct {
		prog string
		args []string
	}{
		{"ibv_uc_pingpong", []string{"-n", "200", "-c"}},
		{"ibv_ud_pingpong", []string{"-n", "200", "-s", "1000"}},
		{"ibv_srq_pingpong", []string{"-n", "200", "-c"}},
	} {
		t.Run(tc.prog, func(t *testing.T) {
			if _, err := exec.LookPath(tc.prog); err != nil {
				t.Skipf("needs %s (ibverbs-utils)", tc.prog)
			}
			srvOut, cliOut, srvAddr, cliAddr := pair(t, lib, tc.prog, append([]string{"-g", "1"}, tc.args...)...)
			for _, o := range []struct{ out, rem string }{{srvOut, cliAddr}, {cliOut, srvAddr}} {
				for _, w := range []string{"GID ::ffff:" + o.rem + "\n", tc.args[1] + " iters in "} {
					if !strings.Contains(o.out, w) {
						t.Errorf("no %q in\n%s", w, o.out)
					}
				}
				if strings.Contains(o.out, "invalid data") {
					t.Errorf("-c found bad data:\n%s", o.out)
				}
			}
		})
	}
}

// TestPerftest runs Debian's unmodified perftest tools at both ends on
// softrdma's libraries (pair): every ib_{write,read,send,atomic}_{bw,lat} over
// an RC QP, ib_write_bw with -a, -q 4 and --report_gbits, and ib_send_bw -D 1
// (a duration: SIGALRM, whose handler has no SA_ONSTACK; see TestSignals). The WRITEs and READs target the buffer address the peer sent.
// perftest links libmlx5.so.1 and libefa.so.1: the stubs in lib/
// stand in. Each must print its result row with the iterations asked for.
func TestPerftest(t *testing.T) {
	lib := buildLib(t)
	if _, err := exec.LookPath("ib_write_bw"); err != nil {
		t.Skip("needs perftest (apt-get install perftest)")
	}
	type tc struct {
		prog string
		args []string
		row  *regexp.Regexp // a result row the client must print
	}
	var cases []tc
	for _, op := range []string{"write", "read", "send", "atomic"} {
		size := `65536`
		if op == "atomic" {
			size = `8`
		}
		cases = append(cases,
			tc{"ib_" + op + "_bw", []string{"-n", "100"}, regexp.MustCompile(`(?m)^ ` + size + `\s+100\s+[0-9.]+\s+[0-9.]+`)},
			tc{"ib_" + op + "_lat", []string{"-n", "100"}, regexp.MustCompile(`(?m)^ (2|8)\s+100\s+[0-9.]+`)})
	}
	cases = append(cases,
		tc{"ib_write_bw", []string{"-a", "-n", "5"}, regexp.MustCompile(`(?m)^ 8388608\s+5\s+[0-9.]+`)},
		tc{"ib_write_bw", []string{"-q", "4", "-n", "50"}, regexp.MustCompile(`(?m)^ 65536\s+200\s+[0-9.]+`)},
		tc{"ib_write_bw", []string{"--report_gbits", "-n", "50"}, regexp.MustCompile(`(?m)BW average\[Gb/sec\][^\n]*\n 65536\s+50\s+`)},
		tc{"ib_send_bw", []string{"-D", "1"}, regexp.MustCompile(`(?m)^ 65536\s+[1-9][0-9]*\s+[0-9.]+`)},
	)
	for _, c := range cases {
		t.Run(c.prog+" "+strings.Join(c.args, " "), func(t *testing.T) {
			_, cliOut, _, cliAddr := pair(t, lib, c.prog, c.args...)
			if !c.row.MatchString(cliOut) {
				t.Errorf("no result row %q in\n%s", c.row, cliOut)
			}
			// The WRITEs and READs reach the peer at the VAddr it printed, its
			// buffer's own pointer: they complete only because a region's
			// iova is the program's address (ibv_reg_mr at PD.RegMRAt).
			if !strings.Contains(cliOut, "GID: 00:00:00:00:00:00:00:00:00:00:255:255:"+strings.ReplaceAll(dotted(cliAddr), ".", ":")) {
				t.Errorf("client's GID is not its IPv4-mapped address %s:\n%s", cliAddr, cliOut)
			}
		})
	}
}

// dotted writes an IPv4 address as perftest prints a GID's bytes: decimal,
// two digits at least.
func dotted(a string) string {
	var b [4]int
	fmt.Sscanf(a, "%d.%d.%d.%d", &b[0], &b[1], &b[2], &b[3])
	return fmt.Sprintf("%02d.%02d.%02d.%02d", b[0], b[1], b[2], b[3])
}
