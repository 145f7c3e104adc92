package verbsdev_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
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

// notListening matches what the clients print when a connection is refused
// because no rdma_cm ID listens on the server's port: the IB CM's REJ (RoCE,
// reason 8, invalid service ID), a SIDR_REP that refuses a UD request (RoCE,
// UNREACHABLE) or a refused TCP connection (iWARP); perftest prints the
// event's number, 8; rdma_client and rdma_xclient (synchronous IDs)
// rdma_connect's ECONNREFUSED; the library names the event under
// SOFTRDMA_DEBUG.
var notListening = regexp.MustCompile(`REJECTED|UNREACHABLE|CM event bl blka 8|rdma_connect: Connection refused`)

// clockSampling matches perftest's failure to measure the CPU clock, which
// it needs for its report after the test ran: sample_get_cpu_mhz times 200
// busy waits of gettimeofday against the cycle counter and gives up when
// their linear fit's r² is below 0.9, which a process preempted during them
// (a loaded machine, CI) gets now and then; the client then exits 1 with
// "Can't produce a report" and its server's QP is flushed. Nothing of
// softrdma's is measured there.
var clockSampling = regexp.MustCompile(`Correlation coefficient r\^2: \S+ < 0\.9`)

// listening is the library's SOFTRDMA_DEBUG line once rdma_listen listens.
const listenLine = "softrdma: rdma_listen: listening on"

// cmAttempts bounds how often cmPair starts a new pair after a refused client
// (or one that could not sample the clock).
const cmAttempts = 10

// syncBuffer is a bytes.Buffer a process writes to while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// cmPair runs prog as a server on 127.X.Y.1 and as its client on 127.X.Y.2
// (X, Y random: tests do not share addresses), each on softrdma's
// librdmacm.so.1 and libibverbs.so.1 with one device of transport tr ("roce"
// or "iwarp") at its address. srv and cli give the arguments of each end from
// the server's address. Both ends must succeed, and neither may print a
// refused verb. See cmPairEnv.
func cmPair(t *testing.T, lib, tr, prog string, srv, cli func(srvAddr string) []string) (srvOut, cliOut string) {
	t.Helper()
	return cmPairOf(t, lib, tr, prog, prog, srv, cli)
}

// cmPairOf is cmPair with a server program and a client program of their own
// (rdma_server and rdma_client).
func cmPairOf(t *testing.T, lib, tr, srvProg, cliProg string, srv, cli func(srvAddr string) []string) (srvOut, cliOut string) {
	t.Helper()
	srvOut, cliOut, _ = cmPairEnv(t, lib, tr, srvProg, cliProg, nil, srv, cli)
	return srvOut, cliOut
}

// cmPairEnv is cmPairOf with srvEnv added to the server's environment; it
// also returns how many pairs it started.
//
// The connection is made by rdma_cm, so there is no socket of the program's
// own to wait for: the client starts once the server's library says its ID
// listens (SOFTRDMA_DEBUG). A client can still be refused later: perftest -R
// connects twice on the same port, and between the two the server destroys
// its listener and makes a new one while the client, done with the handshake
// first, already connects (perftest's own retry of that connection uses the
// IDs it has just destroyed and crashes). The server, which has taken the
// first connection, would then take a new client's first connection for its
// second and both would wait for each other forever (the CI hang of
// ib_read_lat: "client (try 1): signal: killed"). So a refused client ends
// its server too, and a new pair starts, on new addresses, up to cmAttempts
// times. So does a perftest client that could not sample the CPU clock for
// its report (clockSampling). Nothing else is retried.
//
// A pair that is still running at the deadline (2 minutes) gets SIGQUIT
// first: the library, under SOFTRDMA_DEBUG, writes every goroutine's stack
// and the state of every QP to stderr, which the failure shows, then the
// processes are killed 5 s later.
func cmPairEnv(t *testing.T, lib, tr, srvProg, cliProg string, srvEnv []string, srv, cli func(srvAddr string) []string) (srvOut, cliOut string, attempts int) {
	t.Helper()
	prog := srvProg
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for attempt := 1; ; attempt++ {
		so, co, again := cmAttempt(t, ctx, lib, tr, srvProg, cliProg, srvEnv, srv, cli)
		if again == "" {
			return so, co, attempt
		}
		if attempt == cmAttempts {
			t.Fatalf("%s: no pair of %d passed, the last: %s\nclient:\n%s\nserver:\n%s", prog, attempt, again, co, so)
		}
		t.Logf("%s: pair %d: %s; a new pair starts\nclient:\n%s", prog, attempt, again, co)
	}
}

// cmAttempt runs one server and one client (see cmPairEnv). again says why
// a new pair must start (a client that failed with notListening or
// clockSampling; its server has been killed then), or is empty.
func cmAttempt(t *testing.T, ctx context.Context, lib, tr, srvProg, cliProg string, srvEnv []string, srv, cli func(srvAddr string) []string) (srvOut, cliOut string, again string) {
	t.Helper()
	prog := srvProg
	net3 := randomNet()
	srvAddr, cliAddr := net3+"1", net3+"2"
	start := func(prog, addr string, env, args []string) (*exec.Cmd, *syncBuffer) {
		cmd := exec.CommandContext(ctx, prog, args...)
		cmd.Env = append(append(os.Environ(), "LD_LIBRARY_PATH="+lib, devspec.EnvVar+"="+tr+":"+addr, "SOFTRDMA_DEBUG=1"), env...)
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
		cmd.WaitDelay = 5 * time.Second
		out := new(syncBuffer)
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, out
	}
	hung := func() string {
		if ctx.Err() != nil {
			return " (still running at the deadline: SIGQUIT sent to both)"
		}
		return ""
	}
	s, so := start(srvProg, srvAddr, srvEnv, srv(srvAddr))
	srvDone := make(chan error, 1)
	go func() { srvDone <- s.Wait() }()
	for !strings.Contains(so.String(), listenLine) {
		select {
		case err := <-srvDone:
			t.Fatalf("%s server exited (%v) before it listened\n%s", prog, err, so)
		case <-ctx.Done():
			<-srvDone
			t.Fatalf("%s server never listened%s\n%s", prog, hung(), so)
		case <-time.After(20 * time.Millisecond):
		}
	}
	c, co := start(cliProg, cliAddr, nil, cli(srvAddr))
	if err := c.Wait(); err != nil {
		// Its server fails too once the client has gone (a flushed QP):
		// look at the client first.
		if clockSampling.MatchString(co.String()) && ctx.Err() == nil {
			s.Process.Kill()
			<-srvDone
			return so.String(), co.String(), "the perftest client could not sample the CPU clock for its report (r² < 0.9: preempted)"
		}
		select {
		case serr := <-srvDone:
			t.Fatalf("%s: client: %v%s\n%s\nserver exited: %v\n%s", prog, err, hung(), co, serr, so)
		default:
		}
		if notListening.MatchString(co.String()) && ctx.Err() == nil {
			s.Process.Kill()
			<-srvDone
			return so.String(), co.String(), "the client was refused after the server listened (perftest -R's second connection?)"
		}
		serr := <-srvDone // ends at the deadline, with its stacks
		t.Fatalf("%s: client: %v%s\n%s\nserver (%v):\n%s", prog, err, hung(), co, serr, so)
	}
	if err := <-srvDone; err != nil {
		t.Fatalf("%s: server: %v%s\n%s\nclient:\n%s", prog, err, hung(), so, co)
	}
	for _, o := range []string{so.String(), co.String()} {
		if strings.Contains(o, "softrdma:") && strings.Contains(o, "not implemented") {
			t.Errorf("%s: a call was refused:\n%s", prog, o)
		}
	}
	return so.String(), co.String(), ""
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
// with ten SENDs each way, over both transports, in RDMA_PS_TCP and in
// RDMA_PS_IB (-P ib; rdma_create_id refused it with EOPNOTSUPP before).
func TestUcmatose(t *testing.T) {
	lib := buildLib(t)
	needTools(t, "ucmatose")
	for _, tr := range transports {
		for _, ps := range []string{"tcp", "ib"} {
			t.Run(tr+" "+ps, func(t *testing.T) {
				port := fmt.Sprint(20000 + rand.IntN(20000))
				so, co := cmPair(t, lib, tr, "ucmatose",
					func(a string) []string { return []string{"-P", ps, "-b", a, "-p", port, "-c", "2", "-C", "10"} },
					func(a string) []string { return []string{"-P", ps, "-s", a, "-p", port, "-c", "2", "-C", "10"} })
				for _, o := range []string{so, co} {
					if !strings.Contains(o, "data transfers complete") || !strings.Contains(o, "return status 0") {
						t.Errorf("ucmatose did not complete:\nserver:\n%s\nclient:\n%s", so, co)
					}
				}
			})
		}
	}
}

// TestPerftestRDMACM runs perftest with -R (connections by rdma_cm) over
// both transports: ib_write_bw, ib_send_bw and ib_read_lat, 100 iterations;
// over RoCE also ib_atomic_bw and ib_atomic_lat (iWARP carries no atomics:
// TestKernelAnswers checks that the library refuses them as libsiw does).
// Over iWARP this is the only way perftest connects. ib_atomic_lat's server
// exits without destroying its IDs once the client's last message is in,
// as the client disconnects: the library's exit must still answer the
// client's DREQ (cm_exit.go), or the client waits out its retries.
func TestPerftestRDMACM(t *testing.T) {
	lib := buildLib(t)
	needTools(t, "ib_write_bw", "ib_send_bw", "ib_read_lat", "ib_atomic_bw", "ib_atomic_lat")
	bw := regexp.MustCompile(`(?m)^ 65536\s+100\s+[0-9.]+\s+[0-9.]+`)
	rows := map[string]*regexp.Regexp{
		"ib_write_bw":   bw,
		"ib_send_bw":    bw,
		"ib_read_lat":   regexp.MustCompile(`(?m)^ 2\s+100\s+[0-9.]+`),
		"ib_atomic_bw":  regexp.MustCompile(`(?m)^ 8\s+100\s+[0-9.]+\s+[0-9.]+`),
		"ib_atomic_lat": regexp.MustCompile(`(?m)^ 8\s+100\s+[0-9.]+`),
	}
	progs := map[string][]string{
		"roce":  {"ib_write_bw", "ib_send_bw", "ib_read_lat", "ib_atomic_bw", "ib_atomic_lat"},
		"iwarp": {"ib_write_bw", "ib_send_bw", "ib_read_lat"},
	}
	for _, tr := range transports {
		for _, prog := range progs[tr] {
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

// TestCMPairRejectedLate makes perftest -R's second connection meet a server
// that does not listen yet, every time: testdata/holdlisten.c, preloaded into
// the servers, holds the first server's second rdma_listen for good. Its
// client is refused (REJ over RoCE, a refused TCP connection over iWARP) after
// the server has taken its first connection; cmPairEnv must then start a new
// pair, whose server listens, and that pair must pass. Retrying only the
// client, as cmPair did, made the next client's first connection the held
// server's second: both waited for each other until the deadline (the CI
// failure of roce ib_read_lat, try 1 killed at 120 s).
func TestCMPairRejectedLate(t *testing.T) {
	lib := buildLib(t)
	needTools(t, "ib_read_lat", "ib_write_bw")
	dir := t.TempDir()
	hold := filepath.Join(dir, "holdlisten.so")
	if o, err := exec.Command("gcc", "-Wall", "-shared", "-fPIC", "-o", hold, "testdata/holdlisten.c", "-ldl").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, o)
	}
	for _, tc := range []struct {
		tr, prog string
		row      *regexp.Regexp
	}{
		{"roce", "ib_read_lat", regexp.MustCompile(`(?m)^ 2\s+100\s+[0-9.]+`)},
		{"iwarp", "ib_read_lat", regexp.MustCompile(`(?m)^ 2\s+100\s+[0-9.]+`)},
		{"iwarp", "ib_write_bw", regexp.MustCompile(`(?m)^ 65536\s+100\s+[0-9.]+\s+[0-9.]+`)},
	} {
		t.Run(tc.tr+" "+tc.prog, func(t *testing.T) {
			port := fmt.Sprint(20000 + rand.IntN(20000))
			args := []string{"-R", "-d", "sr_" + tc.tr + "0", "-n", "100", "-p", port}
			env := []string{"LD_PRELOAD=" + hold, "HOLDLISTEN_ONCE=" + filepath.Join(dir, tc.tr+"-"+tc.prog+"-held")}
			_, co, attempts := cmPairEnv(t, lib, tc.tr, tc.prog, tc.prog, env,
				func(string) []string { return args },
				func(a string) []string { return append(append([]string(nil), args...), a) })
			// The held pair is always refused; under load a later pair can be
			// refused by perftest's own race too, and is restarted the same way.
			if attempts < 2 {
				t.Errorf("%d pairs started, want 2 or more (the held one, then one that passes)", attempts)
			}
			if !tc.row.MatchString(co) {
				t.Errorf("no result row %q in\n%s", tc.row, co)
			}
		})
	}
}
