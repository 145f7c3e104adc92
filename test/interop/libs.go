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

// softrdma's drop-in libraries (lib/libibverbs.so.1, built by `make lib` from
// capi/libibverbs) let unmodified C verbs programs, Debian's own
// ibv_rc_pingpong or ib_write_bw, run on softrdma. The helpers here run such
// programs on the host, in the harness's namespace, against the kernel's rxe
// and siw in a guest.

var (
	libOnce sync.Once
	libDir  string
	libErr  error
	libSkip string // reason to skip: the build's tools are missing
	libOwn  string // LibEnv's directory
)

// LibDevicesEnv is the environment variable the libraries read their devices
// from (devspec.EnvVar; not imported so that this package stays free of cgo
// and of the libraries' packages).
const LibDevicesEnv = "SOFTRDMA_DEVICES"

// LibEnv names an environment variable that, when set, is a directory of
// libraries `make lib` built, to test instead of building them.
const LibEnv = "SOFTRDMA_INTEROP_LIB"

// Libs returns the directory holding softrdma's libraries, built once per test
// process with `make lib LIBDIR=DIR` into a temporary directory that Main
// removes, or the directory LibEnv names. It skips the test with one line when
// gcc or rdma-core's headers are missing (scripts/deps.sh installs them).
func Libs(t testing.TB) string {
	t.Helper()
	libOnce.Do(func() {
		if dir := os.Getenv(LibEnv); dir != "" {
			libOwn, libErr = filepath.Abs(dir)
			return
		}
		for _, tool := range []string{"make", "gcc"} {
			if _, err := exec.LookPath(tool); err != nil {
				libSkip = fmt.Sprintf("needs %s to build softrdma's libraries (scripts/deps.sh installs it)", tool)
				return
			}
		}
		if _, err := os.Stat("/usr/include/infiniband/verbs.h"); err != nil {
			libSkip = "needs rdma-core's headers (libibverbs-dev) to build softrdma's libraries (scripts/deps.sh installs them)"
			return
		}
		root, err := ModuleRoot()
		if err != nil {
			libErr = err
			return
		}
		if libDir, err = os.MkdirTemp("", "softrdma-interop-lib-"); err != nil {
			libErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		if r := run(ctx, "make", "-s", "-C", root, "lib", "LIBDIR="+libDir); !r.OK() {
			libErr = fmt.Errorf("make lib:\n%s", r)
		}
	})
	if libSkip != "" {
		t.Skip("interop: " + libSkip)
	}
	if libErr != nil {
		t.Fatalf("interop: %v", libErr)
	}
	if libOwn != "" {
		return libOwn
	}
	return libDir
}

// HasLib reports whether the libraries Libs built include name (e.g.
// "librdmacm.so.1"), for tests of libraries that came later than others.
func HasLib(t testing.TB, name string) bool {
	_, err := os.Stat(filepath.Join(Libs(t), name))
	return err == nil
}

// libCommand is the command line that runs prog with args in the harness's
// namespace on softrdma's libraries, with the devices of spec
// (SOFTRDMA_DEVICES syntax, e.g. "roce:10.77.0.1").
func libCommand(t testing.TB, spec, prog string, args []string) []string {
	return append([]string{"netns", "exec", Netns, "env", "LD_LIBRARY_PATH=" + Libs(t), LibDevicesEnv + "=" + spec, prog}, args...)
}

// LibRun runs prog with args to its end in the harness's namespace on
// softrdma's libraries with the devices of spec.
func (h *Harness) LibRun(ctx context.Context, t testing.TB, spec, prog string, args ...string) Result {
	t.Helper()
	r := run(ctx, "ip", libCommand(t, spec, prog, args)...)
	r.Cmd = "[host, " + LibDevicesEnv + "=" + spec + "] " + shellQuote(append([]string{prog}, args...))
	return r
}

// LibStart starts prog with args in the background in the harness's namespace
// on softrdma's libraries with the devices of spec; it is killed at the test's
// end if it still runs.
func (h *Harness) LibStart(t testing.TB, spec, prog string, args ...string) *Proc {
	t.Helper()
	p := Start(t, nil, "ip", libCommand(t, spec, prog, args)...)
	p.res.Cmd = "[host, " + LibDevicesEnv + "=" + spec + "] " + shellQuote(append([]string{prog}, args...))
	return p
}

// ListensTCP reports whether a TCP socket listens on port in the process's
// network namespace (from /proc/PID/net/tcp and tcp6; state 0A is LISTEN).
// `ip netns exec` and `env` exec the program, so the process is the program.
func (p *Proc) ListensTCP(port int) bool {
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", p.cmd.Process.Pid, f))
		if err != nil {
			continue
		}
		if tcpListens(string(b), port) {
			return true
		}
	}
	return false
}

// WaitListenTCP waits until the process listens on TCP port and reports
// whether it did before the timeout or its end. A C program's "waiting for a
// client" line sits in its stdout's buffer (a pipe) until it exits; its socket
// is what tells a client it may connect.
func (p *Proc) WaitListenTCP(port int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for !p.ListensTCP(port) {
		select {
		case <-p.done:
			return false
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// tcpListens reports whether the /proc/net/tcp table holds a listening socket
// on port.
func tcpListens(table string, port int) bool {
	want := fmt.Sprintf(":%04X", port)
	for _, line := range strings.Split(table, "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 3 && strings.HasSuffix(f[1], want) && f[3] == "0A" {
			return true
		}
	}
	return false
}

// WaitListenTCP waits until a socket in the guest listens on TCP port (a
// server job started with ExecBackground), failing the test after timeout.
func (g *Guest) WaitListenTCP(t testing.TB, port int, timeout time.Duration) {
	t.Helper()
	script := fmt.Sprintf(`p=:%04X; end=$((SECONDS+%d))
while [ $SECONDS -lt $end ]; do
  cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk -v p=$p '$4 == "0A" && substr($2, length($2)-4) == p {f=1} END {exit !f}' && exit 0
  sleep 0.1
done
exit 1`, port, int(timeout.Seconds()+0.999))
	if r := g.ExecShell(t, timeout+10*time.Second, script); !r.OK() {
		t.Fatalf("interop: nothing listens on TCP port %d in %s after %v:\n%s", port, g.Name, timeout, r)
	}
}

// captureEndMarker is the payload of the datagram PcapAll's stop sends.
const captureEndMarker = "softrdma-capture-end"

// PcapAll is Pcap for captures that must hold every frame tcpdump saw: it
// captures filter or UDP port 9, and its stop first sends a datagram to the
// guest's UDP port 9 from the namespace and waits (up to a minute) until the
// file holds it. Stopping tcpdump at once, as Pcap does, loses the frames
// still in its buffer when a loaded machine has not let it run: a 325-frame
// ib_read_bw was captured as 0 frames so.
func (g *Guest) PcapAll(t testing.TB, file, filter string) (stop func()) {
	t.Helper()
	stopPcap := g.Pcap(t, file, "("+filter+") or udp port 9")
	var once sync.Once
	return func() {
		once.Do(func() {
			send := exec.Command("ip", "netns", "exec", Netns, "bash", "-c", "echo "+captureEndMarker+" >/dev/udp/"+g.IP+"/9")
			if out, err := send.CombinedOutput(); err != nil {
				t.Logf("interop: sending the capture's end marker: %v\n%s", err, out)
			}
			for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				if b, _ := os.ReadFile(file); strings.Contains(string(b), captureEndMarker) {
					break
				}
			}
			stopPcap()
		})
	}
}
