package verbsdev_test

import (
	"bytes"
	"context"
	"fmt"
	"github.com/softrdma/softrdma/internal/syncbuf"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/softrdma/softrdma/devspec"
)

// compile builds testdata/NAME.c against the library in lib (with -pthread:
// some of the programs start threads).
func compile(t *testing.T, lib, name string) string {
	t.Helper()
	return gcc(t, name, filepath.Join(lib, "libibverbs.so.1"))
}

// compileCM builds testdata/NAME.c against the rdma_cm library and the verbs
// library in lib.
func compileCM(t testing.TB, lib, name string) string {
	t.Helper()
	return gcc(t, name, filepath.Join(lib, "librdmacm.so.1"), filepath.Join(lib, "libibverbs.so.1"))
}

// gcc builds testdata/NAME.c, linked with libs, into a temporary directory
// and returns the program's path.
func gcc(t testing.TB, name string, libs ...string) string {
	t.Helper()
	prog := filepath.Join(t.TempDir(), name)
	args := append([]string{"-Wall", "-pthread", "-o", prog, filepath.Join("testdata", name+".c")}, libs...)
	if o, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", name, err, o)
	}
	return prog
}

// randomNet returns "127.X.Y." with X and Y random, so that concurrent tests
// do not share an address (and RoCE's UDP port on it).
func randomNet() string {
	return fmt.Sprintf("127.%d.%d.", 100+rand.IntN(100), 1+rand.IntN(250))
}

// runBounded runs prog with the library, the devices of list and
// SOFTRDMA_DEBUG=1, ending it after limit: a check that hangs fails the test
// instead of stalling it. It ends it with SIGQUIT, on which the library
// under SOFTRDMA_DEBUG writes its goroutines and every QP's state to stderr
// (TestDebugQuit), so that the failure says what the program waited for;
// SIGKILL follows if it is still there 5 s later.
func runBounded(t testing.TB, lib, list string, limit time.Duration, prog string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
	cmd.WaitDelay = 5 * time.Second
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib, devspec.EnvVar+"="+list, "SOFTRDMA_DEBUG=1")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("killed after %v: %w", limit, err)
	}
	return o.String(), e.String(), err
}

// silentRefusals returns the checks of a badcalls-style stderr ("== NAME" before
// each call, " (allowed)" when it should succeed) that were refused without a
// "softrdma: " line saying why.
func silentRefusals(stderr string) []string {
	var silent []string
	name, refused, said := "", false, false
	flush := func() {
		if name != "" && refused && !said {
			silent = append(silent, name)
		}
	}
	for _, line := range strings.Split(stderr, "\n") {
		switch {
		case strings.HasPrefix(line, "== "):
			flush()
			name = strings.TrimPrefix(line, "== ")
			refused = !strings.HasSuffix(name, " (allowed)")
			said = false
		case strings.HasPrefix(line, "softrdma: "):
			said = true
		}
	}
	flush()
	return silent
}

// TestBadCalls (testdata/badcalls.c) makes wrong and hostile calls through the
// C API: NULL pointers, values outside enums and device limits, transitions
// and attribute masks ib_modify_qp_is_ok refuses, posting in RESET, INIT and
// ERR, overrunning a queue, destroying what is in use, bad keys and bounds on
// the wire. Each answer (errno, or completion status) must be the one
// libibverbs gives over the kernel's rxe (the program cites the source of
// each), the process must neither crash nor hang, and every refused call must
// say why under SOFTRDMA_DEBUG=1.
func TestBadCalls(t *testing.T) {
	lib := buildLib(t)
	prog := compile(t, lib, "badcalls")
	out, errOut, err := runBounded(t, lib, "roce:"+randomNet()+"1", 2*time.Minute, prog)
	if err != nil {
		t.Errorf("badcalls: %v", err)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "BAD ") {
			t.Error(line)
		}
	}
	m := regexp.MustCompile(`checks: (\d+), bad: 0\n`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("badcalls did not finish:\n%s\nstderr:\n%s", out, errOut)
	}
	if s := silentRefusals(errOut); len(s) > 0 {
		t.Errorf("refused without a word under SOFTRDMA_DEBUG=1: %q", s)
	}
	t.Logf("%s checks", m[1])
}

// TestAsyncEvents (testdata/async.c): context->async_fd is a real file
// descriptor that fcntl, poll, epoll and O_NONBLOCK (EAGAIN) work on, and
// ibv_get_async_event returns the engine's events naming the program's own
// objects: SRQ limit reached (through epoll), last WQE reached on an SRQ's QP
// moved to ERR (through poll and a blocking read), a local access violation
// on the responder of a write with a bad R_Key. A send whose peer QP is gone
// ends in IBV_WC_RETRY_EXC_ERR with no event, as on rxe; a QP destroyed with
// its event unread takes the event with it (the fd is no longer readable); the
// destroy verbs return once the events read were acknowledged.
func TestAsyncEvents(t *testing.T) {
	lib := buildLib(t)
	prog := compile(t, lib, "async")
	out, errOut, err := runBounded(t, lib, "roce:"+randomNet()+"1", 2*time.Minute, prog)
	if err != nil {
		t.Fatalf("async: %v\n%s%s", err, out, errOut)
	}
	want := `async_fd: a file descriptor
readable at first: 0
non-blocking, no event: rc=-1 EAGAIN
connect: rc=0
arm limit: rc=0
epoll: 1
event: rc=0 SRQ limit reached srq=ours
readable after: 0
b to ERR: rc=0
poll: 1
event: rc=0 last WQE reached qp=ours
destroy b after ack: rc=0
write with a bad rkey: remote access error
poll: 1
event: rc=0 local access violation work queue error qp=ours
send to a QP that is gone: transport retry counter exceeded
readable after: 0
poll: 1
destroy with its event unread: rc=0
readable after: 0
destroy: 0
close: 0
`
	if out != want {
		t.Errorf("async printed\n%s%s\nwant\n%s", out, errOut, want)
	}
}

// TestFork (testdata/fork.c): a program forks before its first verb, and the
// child and then the parent each use the library (a SEND through an RC QP
// connected to itself); ibv_fork_init and ibv_is_fork_initialized answer 0
// and IBV_FORK_UNNEEDED without starting it. Before the library was loaded at
// the first verb (capi/shim), the Go runtime started when the program did and
// the child's first verb never returned. A child forked after the parent
// started the library gets ENOSYS at once rather than a hang.
func TestFork(t *testing.T) {
	lib := buildLib(t)
	prog := compile(t, lib, "fork")
	out, errOut, err := runBounded(t, lib, "roce:"+randomNet()+"1", time.Minute, prog)
	if err != nil {
		t.Fatalf("fork: %v\n%s%s", err, out, errOut)
	}
	want := `ibv_fork_init: 0
ibv_is_fork_initialized: unneeded
child forked before the first verb: 0
parent after it: 0
child forked after: ENOSYS at once: yes
`
	if out != want {
		t.Errorf("fork printed\n%s%s\nwant\n%s", out, errOut, want)
	}
	if !strings.Contains(errOut, "forked after its parent started the library") {
		t.Errorf("the late child did not say why under SOFTRDMA_DEBUG=1:\n%s", errOut)
	}
}

// started is a program started in the background with its combined output.
type started struct {
	cmd *exec.Cmd
	out *lockedBuffer
}

// lockedBuffer is a buffer the test reads while the command writes it.
type lockedBuffer = syncbuf.Buffer

// startOn starts prog with the library and one RoCE device on addr, under ctx.
func startOn(t *testing.T, ctx context.Context, lib, addr, prog string, args ...string) *started {
	t.Helper()
	return startWith(t, ctx, lib, "roce:"+addr, prog, args...)
}

// startWith starts prog with the library and the devices of list, under ctx.
func startWith(t *testing.T, ctx context.Context, lib, list, prog string, args ...string) *started {
	t.Helper()
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib, devspec.EnvVar+"="+list, "SOFTRDMA_DEBUG=1")
	s := &started{cmd: cmd, out: &lockedBuffer{}}
	cmd.Stdout, cmd.Stderr = s.out, s.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return s
}

// waitFor waits until cond holds or ctx ends, failing the test then.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: never", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestKilledPeer: Debian's ib_write_bw at both ends on the library, a 30 s
// run (-D); once the client's transfer has started (its results header is
// out, line-buffered by stdbuf), the server is killed with SIGKILL. The
// client must end as it ends against a kernel peer that died, well before
// its 30 s (no hang; the test's bound is a minute), with perftest's
// "Failed status N" and a non-zero exit:
//   - RoCE (as against rxe): its writes are retried until the retry count
//     runs out, a completion with IBV_WC_RETRY_EXC_ERR (12).
//   - iWARP (-R, as against siw): the peer's kernel closes its TCP
//     connection; siw's llp close moves the QP to ERROR and flushes the SQ
//     and ORQ (siw_qp_llp_close, siw_sq_flush), so the first failed
//     completion is IBV_WC_WR_FLUSH_ERR (5).
func TestKilledPeer(t *testing.T) {
	lib := buildLib(t)
	stdbuf, err := exec.LookPath("stdbuf")
	if err != nil {
		t.Skip("needs stdbuf (coreutils) to see perftest's output as it goes")
	}
	for _, c := range []struct {
		transport, dev string
		flags          []string
		want           string
	}{
		{"roce", "sr_roce0", []string{"-x", "1"}, "Failed status 12"},
		{"iwarp", "sr_iwarp0", []string{"-R"}, "Failed status 5:"},
	} {
		t.Run(c.transport, func(t *testing.T) {
			net3 := randomNet()
			srvAddr, cliAddr := net3+"1", net3+"2"
			port := fmt.Sprint(freeTCPPort(t))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			args := append([]string{"-oL", "ib_write_bw", "-d", c.dev, "-D", "30", "-p", port}, c.flags...)
			srv := startWith(t, ctx, lib, c.transport+":"+srvAddr, stdbuf, args...)
			// rdma_cm's iWARP listener is a wildcard socket, on tcp6.
			waitFor(t, ctx, "the server listens", func() bool { return listening46(t, port) })
			cli := startWith(t, ctx, lib, c.transport+":"+cliAddr, stdbuf, append(args, srvAddr)...)
			waitFor(t, ctx, "the client's transfer starts", func() bool { return strings.Contains(cli.out.String(), "#bytes") })
			srv.cmd.Process.Kill()
			srv.cmd.Wait()
			err := cli.cmd.Wait()
			if ctx.Err() != nil {
				t.Fatalf("the client hung after its peer was killed:\n%s", cli.out)
			}
			if err == nil || !strings.Contains(cli.out.String(), c.want) {
				t.Errorf("client: %v, want a non-zero exit and %q:\n%s", err, c.want, cli.out)
			}
		})
	}
}

// TestManyProcesses: six pairs of Debian's ibv_rc_pingpong at once, twelve
// processes on one host, each with its own loopback address (its own RoCE
// UDP socket) and its own Go runtime, every pair checking its data (-c).
func TestManyProcesses(t *testing.T) {
	lib := buildLib(t)
	const pairs = 6
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	net3 := randomNet()
	type pp struct {
		srv, cli         *started
		srvAddr, cliAddr string
	}
	var ps [pairs]pp
	// ibv_rc_pingpong's server listens on the wildcard address, so the
	// pairs need distinct ports: each is picked on the wildcard with the
	// earlier picks still held (a port picked and released by one call
	// could be handed out again by the next).
	var ports [pairs]string
	var held [pairs]net.Listener
	for i := range ports {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			t.Fatal(err)
		}
		held[i] = l
		ports[i] = fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range held {
		l.Close()
	}
	args := func(i int) []string {
		return []string{"-d", "sr_roce0", "-g", "1", "-n", "1000", "-c", "-p", ports[i]}
	}
	// Every server first, then every client once all listen: the twelve
	// run at once.
	for i := range ps {
		p := &ps[i]
		p.srvAddr, p.cliAddr = fmt.Sprintf("%s%d", net3, 2*i+1), fmt.Sprintf("%s%d", net3, 2*i+2)
		p.srv = startOn(t, ctx, lib, p.srvAddr, "ibv_rc_pingpong", args(i)...)
	}
	for i := range ps {
		waitFor(t, ctx, "server "+ps[i].srvAddr+" listens", func() bool { return listening(t, ports[i]) })
	}
	for i := range ps {
		ps[i].cli = startOn(t, ctx, lib, ps[i].cliAddr, "ibv_rc_pingpong", append(args(i), ps[i].srvAddr)...)
	}
	for _, p := range ps {
		for _, end := range []struct {
			name       string
			s          *started
			local, rem string
		}{{"server", p.srv, p.srvAddr, p.cliAddr}, {"client", p.cli, p.cliAddr, p.srvAddr}} {
			err := end.s.cmd.Wait()
			out := end.s.out.String()
			if err != nil || !strings.Contains(out, "1000 iters in ") || strings.Contains(out, "invalid data") ||
				!strings.Contains(out, "GID ::ffff:"+end.rem+"\n") {
				t.Errorf("%s on %s: %v\n%s", end.name, end.local, err, out)
			}
		}
	}
}

// TestPyverbs runs testdata/pyverbs_loop.py with Debian's python3-pyverbs (a
// Cython module linked against libibverbs.so.1) on the library: it imports,
// opens the device, queries it, makes a PD, an MR, a CQ and two RC QPs
// connected to each other, and a SEND arrives.
func TestPyverbs(t *testing.T) {
	lib := buildLib(t)
	if err := exec.Command("/usr/bin/python3", "-c", "import pyverbs.device").Run(); err != nil {
		t.Skip("needs Debian's python3-pyverbs (scripts/deps.sh lib installs it)")
	}
	out, errOut, err := runBounded(t, lib, "roce:"+randomNet()+"1", time.Minute, "/usr/bin/python3", "testdata/pyverbs_loop.py")
	if err != nil {
		t.Fatalf("pyverbs: %v\n%s%s", err, out, errOut)
	}
	want := `device sr_roce0 port state 4 max_qp_wr True
plain completions [(1, 0, 0), (2, 0, 128)]
plain received b'plain send'
`
	if out != want {
		t.Errorf("pyverbs printed\n%s%s\nwant\n%s", out, errOut, want)
	}
}
