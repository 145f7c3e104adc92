// Package interop runs softrdma against the Linux kernel's own RDMA stack: Debian 12
// guests under qemu with rdma_rxe (soft-RoCE) and siw (soft-iWARP) and the real
// rdma-core / perftest tools, booted by the project's kernel harness (interop/ at
// the module root; ../shared/interop is the fallback when the project's cannot
// run), talking to the softrdma binary on the host inside the harness's network
// namespace. It also runs softrdma against itself in network namespaces
// (netio/netnstest) so the tools are tested without a VM.
//
// The exported helpers are for every interop test of the project:
//
//	h := interop.Require(t)                  // skips unless root, harness, qemu, netns
//	g := h.Boot(t, "pp31", interop.BootOptions{IP: "10.77.0.31"})
//	job := g.ExecBackground(t, "ibv_rc_pingpong", "-d", "rxe0", "-g", "1")
//	res := h.HostRun(ctx, t, "pingpong", "-g", "1", "10.77.0.31")
//	out := job.Wait(t, 2*time.Minute)
//
// All VM use of all test processes is serialised by an flock on LockPath: a test
// that boots a guest holds it from its first Boot until its end. Guests are always
// stopped at the end of the test that booted them, failed or not.
package interop

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// LockPath is the lock file that serialises VM use across test processes (of
// both harnesses: they share the machine's cores).
const LockPath = "/tmp/softrdma-interop.lock"

// HarnessEnv names an environment variable that, when set, is the harness
// directory to use (the project's interop/ or ../shared/interop) instead of the
// first of them that runs.
const HarnessEnv = "SOFTRDMA_INTEROP_HARNESS"

// Netns is the network namespace of the harness Require chose, where its bridge
// and guests live: "srkvm" for the project's harness, "softrdma" for
// ../shared/interop. Require sets it; read it after Require.
var Netns = "srkvm"

// Bridge is the host side's interface in Netns: "srkbr0" (project harness) or
// "srbr0" (../shared/interop). Require sets it; read it after Require.
var Bridge = "srkbr0"

// HostIPv4 and HostIPv6 are the host side's addresses on the bridge. Both
// harnesses put their guests on 10.77.0.0/24 and fd77::/64 (each in a namespace
// of its own, so they never meet), which is what the tests' guest addresses are.
const (
	HostIPv4 = "10.77.0.1"
	HostIPv6 = "fd77::1"
)

// Harness is the VM harness Require chose, with the softrdma binary built for
// the host.
type Harness struct {
	// Dir is the harness directory (<module>/interop or …/shared/interop).
	Dir string
	// VM is the path of its vm script.
	VM string
	// Own reports whether Dir is the project's own harness (<module>/interop).
	Own bool
	// RunDir is the vm script's run-state directory (a guest's is RunDir/vm/NAME).
	RunDir string
	// ModuleRoot is the directory of the project's go.mod.
	ModuleRoot string
}

var (
	chooseOnce sync.Once
	chosen     *Harness
	chooseErr  error // reason to skip

	buildOnce sync.Once
	buildDir  string
	buildBin  string
	buildErr  error
)

// ModuleRoot returns the directory holding the module's go.mod, found upwards from
// the working directory (a test's working directory is its package directory).
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Require returns the harness, or skips the test with a one-line reason: not
// root, no harness whose setup succeeds (the project's interop/ is tried first,
// then ../shared/interop; HarnessEnv forces one), no qemu, no network
// namespaces. The first call in a process runs the harness's `setup --quiet`
// under the lock (it installs missing packages and builds the guest image: about
// a minute from cold, a few seconds after).
func Require(t testing.TB) *Harness {
	t.Helper()
	chooseOnce.Do(func() { chosen, chooseErr = choose(t) })
	if chooseErr != nil {
		t.Skipf("interop: %v", chooseErr)
	}
	return chosen
}

// candidates are the harness directories to try, in order.
func candidates(root string) []string {
	if dir := os.Getenv(HarnessEnv); dir != "" {
		if abs, err := filepath.Abs(dir); err == nil {
			dir = abs
		}
		return []string{dir}
	}
	return []string{filepath.Join(root, "interop"), filepath.Clean(filepath.Join(root, "..", "shared", "interop"))}
}

// choose takes the first candidate harness that is there and whose setup
// succeeds, and checks that it can run a guest's network (qemu, a namespace).
func choose(t testing.TB) (*Harness, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("not running as root (the VM harness needs network namespaces, taps and qemu)")
	}
	root, err := ModuleRoot()
	if err != nil {
		return nil, err
	}
	release, err := lockFor(t, 20*time.Minute)
	if err != nil {
		return nil, err
	}
	defer release()
	var why []string
	for _, dir := range candidates(root) {
		h, err := prepare(t, root, dir)
		if err == nil {
			if len(why) > 0 {
				t.Logf("interop: using %s (%s)", dir, strings.Join(why, "; "))
			}
			return h, nil
		}
		why = append(why, err.Error())
	}
	return nil, errors.New(strings.Join(why, "; "))
}

// prepare runs dir's setup and checks it can boot a guest; the error is one line.
func prepare(t testing.TB, root, dir string) (*Harness, error) {
	h := &Harness{Dir: dir, VM: filepath.Join(dir, "vm"), ModuleRoot: root, Own: dir == filepath.Join(root, "interop")}
	for _, f := range []string{h.VM, filepath.Join(dir, "setup")} {
		if st, err := os.Stat(f); err != nil || st.Mode()&0o111 == 0 {
			return nil, fmt.Errorf("no VM harness at %s", dir)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if r := run(ctx, filepath.Join(dir, "setup"), "--quiet"); !r.OK() {
		t.Logf("interop: %s", r)
		return nil, fmt.Errorf("%s/setup failed: %s", dir, lastLine(r.Stdout+"\n"+r.Stderr))
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		return nil, errors.New("qemu-system-x86_64 is not installed")
	}
	// The project's vm says where it keeps things; ../shared/interop's has no
	// `env` and uses these.
	netns, bridge := "softrdma", "srbr0"
	h.RunDir = os.Getenv("SOFTRDMA_INTEROP_RUN")
	if h.RunDir == "" {
		h.RunDir = filepath.Join(os.TempDir(), "softrdma-interop")
	}
	if r := run(ctx, h.VM, "env"); r.OK() {
		env := parseEnv(r.Stdout)
		if env["HOST_IPV4"] != HostIPv4 || env["HOST_IPV6"] != HostIPv6 {
			return nil, fmt.Errorf("%s: host addresses %s, %s; the tests expect %s, %s", dir, env["HOST_IPV4"], env["HOST_IPV6"], HostIPv4, HostIPv6)
		}
		netns, bridge, h.RunDir = env["NETNS"], env["BRIDGE"], env["RUN"]
	}
	// Can this machine make the network (a namespace, a bridge)? Under the lock no
	// guest of ours runs, so the namespace can go again at once.
	if r := run(ctx, h.VM, "net", "up"); !r.OK() {
		return nil, fmt.Errorf("%s: cannot create the network namespace %s: %s", dir, netns, lastLine(r.Stderr))
	}
	run(ctx, h.VM, "net", "down")
	Netns, Bridge = netns, bridge
	return h, nil
}

// BinEnv names an environment variable that, when set, is the softrdma binary to
// test instead of one built from the module.
const BinEnv = "SOFTRDMA_INTEROP_BIN"

// Softrdma returns the path of the softrdma binary, built once per test process
// with `go build` (CGO_ENABLED=0, so it also runs inside a guest) into a temporary
// directory that Main removes; or the binary BinEnv names.
func Softrdma(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		if bin := os.Getenv(BinEnv); bin != "" {
			buildBin, buildErr = filepath.Abs(bin)
			return
		}
		root, err := ModuleRoot()
		if err != nil {
			buildErr = err
			return
		}
		if buildDir, err = os.MkdirTemp("", "softrdma-interop-bin-"); err != nil {
			buildErr = err
			return
		}
		buildBin = filepath.Join(buildDir, "softrdma")
		cmd := exec.Command("go", "build", "-o", buildBin, "./cmd/softrdma")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/softrdma: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatalf("interop: %v", buildErr)
	}
	return buildBin
}

// BinDir returns the directory of the softrdma binary (for a guest's --project).
func BinDir(t testing.TB) string { return filepath.Dir(Softrdma(t)) }

// Main runs the tests and removes the binary Softrdma built, the libraries
// Libs built and cmgate.so. Call it from the package's TestMain: func TestMain(m *testing.M)
// { interop.Main(m) }.
func Main(m *testing.M) {
	code := m.Run()
	if cmGateSO != "" {
		os.RemoveAll(filepath.Dir(cmGateSO))
	}
	for _, dir := range []string{buildDir, libDir} {
		if dir != "" {
			os.RemoveAll(dir)
		}
	}
	os.Exit(code)
}

// --- the lock ------------------------------------------------------------------

var (
	lockMu    sync.Mutex
	lockFile  *os.File
	lockCount int
)

// Lock takes the interop lock for the rest of the test (released at its cleanup):
// no other test process uses the VM harness meanwhile. Tests of one process share
// it. Boot takes it; call Lock directly to hold it across several guests' lives.
// It waits for the lock until the test's deadline (at most an hour).
func Lock(t testing.TB) {
	t.Helper()
	wait := time.Hour
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if dl, ok := d.Deadline(); ok {
			wait = time.Until(dl) - 30*time.Second
		}
	}
	release, err := lockFor(t, wait)
	if err != nil {
		t.Fatalf("interop: %v", err)
	}
	t.Cleanup(release)
}

func lockFor(t testing.TB, wait time.Duration) (func(), error) {
	lockMu.Lock()
	defer lockMu.Unlock()
	if lockCount == 0 {
		f, err := os.OpenFile(LockPath, os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			return nil, err
		}
		deadline := time.Now().Add(wait)
		logged := false
		for {
			err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
			if err == nil {
				break
			}
			if !errors.Is(err, syscall.EWOULDBLOCK) {
				f.Close()
				return nil, fmt.Errorf("flock %s: %w", LockPath, err)
			}
			if time.Now().After(deadline) {
				f.Close()
				return nil, fmt.Errorf("%s: still held by another test process after %v", LockPath, wait.Round(time.Second))
			}
			if !logged {
				t.Logf("interop: waiting for %s (another test process uses the VM harness)", LockPath)
				logged = true
			}
			time.Sleep(200 * time.Millisecond)
		}
		lockFile = f
	}
	lockCount++
	var once sync.Once
	return func() {
		once.Do(func() {
			lockMu.Lock()
			defer lockMu.Unlock()
			lockCount--
			if lockCount == 0 {
				syscall.Flock(int(lockFile.Fd()), syscall.LOCK_UN)
				lockFile.Close()
				lockFile = nil
			}
		})
	}, nil
}

// --- commands ------------------------------------------------------------------

// Result is what a finished command printed and how it ended.
type Result struct {
	Cmd      string
	Stdout   string
	Stderr   string
	ExitCode int // -1: it could not run or was killed by a signal
	Err      error
	Duration time.Duration
}

// OK reports whether the command ran and exited 0.
func (r Result) OK() bool { return r.Err == nil && r.ExitCode == 0 }

// String describes the command and all its output, for failure messages.
func (r Result) String() string {
	s := fmt.Sprintf("$ %s\n(exit %d after %v", r.Cmd, r.ExitCode, r.Duration.Round(time.Millisecond))
	if r.Err != nil {
		s += fmt.Sprintf(", %v", r.Err)
	}
	s += ")\n"
	if r.Stdout != "" {
		s += "--- stdout\n" + r.Stdout
		if !strings.HasSuffix(r.Stdout, "\n") {
			s += "\n"
		}
	}
	if r.Stderr != "" {
		s += "--- stderr\n" + r.Stderr
		if !strings.HasSuffix(r.Stderr, "\n") {
			s += "\n"
		}
	}
	return s
}

// run runs a command to its end.
func run(ctx context.Context, name string, args ...string) Result {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	err := cmd.Run()
	r := Result{Cmd: shellQuote(append([]string{name}, args...)), Stdout: stdout.String(), Stderr: stderr.String(), Duration: time.Since(start)}
	r.ExitCode, r.Err = exitStatus(cmd, err)
	return r
}

func exitStatus(cmd *exec.Cmd, err error) (int, error) {
	if cmd.ProcessState != nil && cmd.ProcessState.Exited() {
		var ee *exec.ExitError
		if err == nil || errors.As(err, &ee) {
			return cmd.ProcessState.ExitCode(), nil
		}
		return cmd.ProcessState.ExitCode(), err
	}
	if err == nil {
		err = errors.New("did not exit")
	}
	return -1, err
}

// shellQuote joins args as a shell would need them, for messages.
func shellQuote(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`*?[]{}()<>|&;#~") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}

// VMCommand runs the vm script with args (e.g. "info", "g1") and returns its result.
func (h *Harness) VMCommand(ctx context.Context, args ...string) Result {
	return run(ctx, h.VM, args...)
}

// HostRun runs the softrdma binary with args inside the harness's namespace (as
// `ip netns exec softrdma softrdma ARGS`), so it talks to the guests from
// HostIPv4 / HostIPv6. The namespace exists while a guest runs.
func (h *Harness) HostRun(ctx context.Context, t testing.TB, args ...string) Result {
	t.Helper()
	return run(ctx, "ip", append([]string{"netns", "exec", Netns, Softrdma(t)}, args...)...)
}

// HostStart starts the softrdma binary with args in the harness's namespace in the
// background; the process is killed at the test's end if still running.
func (h *Harness) HostStart(t testing.TB, args ...string) *Proc {
	t.Helper()
	return Start(t, nil, "ip", append([]string{"netns", "exec", Netns, Softrdma(t)}, args...)...)
}

// Proc is a background host process with its output collected.
type Proc struct {
	cmd    *exec.Cmd
	start  time.Time
	stdout lineBuffer
	stderr lineBuffer
	done   chan struct{}
	res    Result
}

// Start starts name with args in the background. If inside is not nil the process
// is started from inside it (e.g. a netnstest namespace's Do, so that it runs in
// that network namespace). The process is killed at the test's end if it still
// runs.
func Start(t testing.TB, inside func(func() error) error, name string, args ...string) *Proc {
	t.Helper()
	p := &Proc{done: make(chan struct{})}
	p.cmd = exec.Command(name, args...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p.res.Cmd = shellQuote(append([]string{name}, args...))
	startFn := func() error { return p.cmd.Start() }
	var err error
	p.start = time.Now()
	if inside != nil {
		err = inside(startFn)
	} else {
		err = startFn()
	}
	if err != nil {
		t.Fatalf("interop: starting %s: %v", p.res.Cmd, err)
	}
	go func() {
		err := p.cmd.Wait()
		p.res.Duration = time.Since(p.start)
		p.res.ExitCode, p.res.Err = exitStatus(p.cmd, err)
		p.res.Stdout, p.res.Stderr = p.stdout.String(), p.stderr.String()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.Kill()
			<-p.done
		}
	})
	return p
}

// Kill kills the process (its whole process group: `ip netns exec` forks nothing,
// but a wrapper might).
func (p *Proc) Kill() {
	if p.cmd.Process != nil {
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// WaitOutput waits until the process's stdout contains s, and reports whether it
// did before the timeout or the process's end.
func (p *Proc) WaitOutput(s string, timeout time.Duration) bool {
	deadline := time.After(timeout)
	for {
		if strings.Contains(p.stdout.String(), s) {
			return true
		}
		select {
		case <-p.stdout.changed():
		case <-p.done:
			return strings.Contains(p.stdout.String(), s)
		case <-deadline:
			return false
		}
	}
}

// Done reports whether the process has ended.
func (p *Proc) Done() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stdout returns what the process has printed so far.
func (p *Proc) Stdout() string { return p.stdout.String() }

// Wait waits for the process to end (killing it after timeout) and returns its result.
func (p *Proc) Wait(timeout time.Duration) Result {
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.Kill()
		<-p.done
		p.res.Err = fmt.Errorf("killed after %v", timeout)
	}
	return p.res
}

// lineBuffer is a goroutine-safe output buffer that signals writes.
type lineBuffer struct {
	mu  sync.Mutex
	b   bytes.Buffer
	sig chan struct{}
}

func (l *lineBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Write(p)
	if l.sig != nil {
		close(l.sig)
		l.sig = nil
	}
	return len(p), nil
}

func (l *lineBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *lineBuffer) changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sig == nil {
		l.sig = make(chan struct{})
	}
	return l.sig
}

// --- guests --------------------------------------------------------------------

// BootOptions are the vm script's boot options; zero values take its defaults
// (links rxe,siw, MTU 1500, 1 CPU, 1 GiB).
type BootOptions struct {
	IP, IP6     string // guest addresses (default 10.77.0.(10+N), fd77::(10+N))
	NoIPv6      bool
	Links       string // "rxe", "siw", "rxe,siw", "siw,rxe", "none"
	Siw         string // "default" or "crc"
	Project     string // host directory shared at /project
	CPUs, MemMB int
	MTU         int // guest eth0 and tap MTU; raises the bridge, so the host side too
	BootTimeout time.Duration
}

// Guest is a running guest; it is stopped at the end of the test that booted it.
type Guest struct {
	Name string
	IP   string // IPv4 address
	IP6  string // IPv6 address, or ""
	// Env is the guest's environment as `vm info` prints it (SOFTRDMA_RXE_GID_INDEX,
	// SOFTRDMA_RXE_GID_INDEX_V6, ...) together with its meta data (ip, mac, tap...).
	Env map[string]string
	h   *Harness
}

// Boot takes the interop lock (see Lock) and boots a guest called name, registering
// its stop with t.Cleanup; it fails the test if the guest does not come up. Under
// TCG emulation a boot takes 10-15 s.
func (h *Harness) Boot(t testing.TB, name string, o BootOptions) *Guest {
	t.Helper()
	Lock(t)
	args := []string{"start", name}
	add := func(flag, v string) {
		if v != "" {
			args = append(args, flag, v)
		}
	}
	add("--ip", o.IP)
	add("--ip6", o.IP6)
	if o.NoIPv6 {
		args = append(args, "--no-ip6")
	}
	add("--links", o.Links)
	add("--siw", o.Siw)
	add("--project", o.Project)
	if o.CPUs > 0 {
		add("--cpus", strconv.Itoa(o.CPUs))
	}
	if o.MemMB > 0 {
		add("--mem", strconv.Itoa(o.MemMB))
	}
	if o.MTU > 0 {
		add("--mtu", strconv.Itoa(o.MTU))
	}
	if o.BootTimeout > 0 {
		add("--boot-timeout", strconv.Itoa(int(o.BootTimeout.Seconds())))
	}
	// A guest of this name left over from a killed test run would make start fail.
	if r := h.VMCommand(context.Background(), "list"); r.OK() && listHas(r.Stdout, name) {
		t.Logf("interop: stopping leftover guest %s", name)
		h.VMCommand(context.Background(), "stop", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	r := h.VMCommand(ctx, args...)
	g := &Guest{Name: name, h: h}
	t.Cleanup(func() {
		sr := h.VMCommand(context.Background(), "stop", name)
		if !sr.OK() && r.OK() {
			t.Logf("interop: stopping %s:\n%s", name, sr)
		}
	})
	if !r.OK() {
		t.Fatalf("interop: booting %s failed:\n%s", name, r)
	}
	t.Logf("interop: %s", lastLine(r.Stderr))
	info := h.VMCommand(context.Background(), "info", name)
	if !info.OK() {
		t.Fatalf("interop: vm info %s:\n%s", name, info)
	}
	g.Env = parseEnv(info.Stdout)
	g.IP, g.IP6 = g.Env["ip"], g.Env["ip6"]
	return g
}

func listHas(list, name string) bool {
	for _, l := range strings.Split(list, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == name {
			return true
		}
	}
	return false
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// parseEnv reads KEY=VALUE lines (quotes stripped), ignoring the rest.
func parseEnv(s string) map[string]string {
	env := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		line = strings.TrimPrefix(line, "export ")
		k, v, ok := strings.Cut(line, "=")
		if !ok || k == "" || strings.ContainsAny(k, " #\t") {
			continue
		}
		env[k] = strings.Trim(v, `"'`)
	}
	return env
}

// GIDIndex returns the guest's rxe0 GID index of its IPv4 address (ipv6 false) or
// IPv6 address, as the guest computed it at boot.
func (g *Guest) GIDIndex(t testing.TB, ipv6 bool) string {
	t.Helper()
	k := "SOFTRDMA_RXE_GID_INDEX"
	if ipv6 {
		k += "_V6"
	}
	v := g.Env[k]
	if v == "" {
		t.Fatalf("interop: guest %s has no %s (links %q)", g.Name, k, g.Env["links"])
	}
	return v
}

// Exec runs a command in the guest to its end (killed after timeout: exit 124).
func (g *Guest) Exec(t testing.TB, timeout time.Duration, args ...string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Minute)
	defer cancel()
	r := g.h.VMCommand(ctx, append([]string{"exec", g.Name, "-t", secs(timeout), "--"}, args...)...)
	r.Cmd = "[" + g.Name + "] " + shellQuote(args)
	return r
}

// ExecShell runs a shell string in the guest to its end.
func (g *Guest) ExecShell(t testing.TB, timeout time.Duration, script string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Minute)
	defer cancel()
	r := g.h.VMCommand(ctx, "exec", g.Name, "-t", secs(timeout), "-c", script)
	r.Cmd = "[" + g.Name + "] sh -c " + shellQuote([]string{script})
	return r
}

// Job is a background command in a guest.
type Job struct {
	g    *Guest
	ID   string
	cmd  string
	once sync.Once
	res  Result
}

// ExecBackground starts a command in the guest and returns at once. The job is
// killed at the test's end if it has not been waited for.
func (g *Guest) ExecBackground(t testing.TB, args ...string) *Job {
	t.Helper()
	return g.startJob(t, "["+g.Name+"] "+shellQuote(args), append([]string{"--"}, args...))
}

// ExecShellBackground starts a shell string in the guest and returns at once.
func (g *Guest) ExecShellBackground(t testing.TB, script string) *Job {
	t.Helper()
	return g.startJob(t, "["+g.Name+"] sh -c "+shellQuote([]string{script}), []string{"-c", script})
}

func (g *Guest) startJob(t testing.TB, desc string, cmd []string) *Job {
	t.Helper()
	r := g.h.VMCommand(context.Background(), append([]string{"exec", g.Name, "-b"}, cmd...)...)
	if !r.OK() {
		t.Fatalf("interop: starting job in %s:\n%s", g.Name, r)
	}
	j := &Job{g: g, ID: strings.TrimSpace(r.Stdout), cmd: desc}
	t.Cleanup(func() {
		// A job still running at the end (its test failed early) is killed.
		if _, err := os.Stat(filepath.Join(g.runDir(), "ctl", "jobs", j.ID+".rc")); err != nil {
			j.Kill("KILL")
		}
	})
	return j
}

// runDir is the guest's run-state directory of the vm script.
func (g *Guest) runDir() string { return filepath.Join(g.h.RunDir, "vm", g.Name) }

// Wait waits for the job to end (killed after timeout: exit 124) and returns its
// output. Later calls return the same result.
func (j *Job) Wait(t testing.TB, timeout time.Duration) Result {
	t.Helper()
	j.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Minute)
		defer cancel()
		j.res = j.g.h.VMCommand(ctx, "wait", j.g.Name, j.ID, "-t", secs(timeout))
		j.res.Cmd = j.cmd
	})
	return j.res
}

// Kill signals the job's process group in the guest (e.g. "TERM", "KILL").
func (j *Job) Kill(signal string) {
	j.g.h.VMCommand(context.Background(), "kill", j.g.Name, j.ID, signal)
}

// Pcap starts tcpdump on the guest's tap in the namespace (full frames) writing
// file, and returns a function that stops it.
func (g *Guest) Pcap(t testing.TB, file string, filter ...string) (stop func()) {
	t.Helper()
	r := g.h.VMCommand(context.Background(), append([]string{"pcap", "start", "-g", g.Name, "-s", "0", file}, filter...)...)
	if !r.OK() {
		t.Fatalf("interop: vm pcap start:\n%s", r)
	}
	pid := strings.TrimSpace(r.Stdout)
	var once sync.Once
	stop = func() { once.Do(func() { g.h.VMCommand(context.Background(), "pcap", "stop", pid) }) }
	t.Cleanup(stop)
	return stop
}

func secs(d time.Duration) string {
	s := int(d.Seconds() + 0.999)
	if s < 1 {
		s = 1
	}
	return strconv.Itoa(s)
}

// --- checks on captures ------------------------------------------------------------

// Decode runs `softrdma decode FILE` and fails the test unless it exits 0 with
// "0 errors"; it returns decode's output.
func Decode(t testing.TB, file string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := run(ctx, Softrdma(t), "decode", file)
	if !r.OK() || !strings.Contains(r.Stdout, " 0 errors") {
		t.Errorf("interop: softrdma decode %s reports errors:\n%s", filepath.Base(file), r)
	}
	return r.Stdout
}

// ethertypeGuess marks, in a frame's frame.protocols, a frame where tshark's
// InfiniBand dissector took an RDMA payload for an Ethertype header: it does
// so (as for IPoIB's 4-byte encapsulation header) when the payload's first two
// bytes are a known Ethertype and the next two are zero, which a 2-byte WRITE
// of perftest's random buffer followed by two pad bytes is, once in a few
// hundred frames (seen in CI: payload 88 e7, pad 00 00, "Malformed Packet:
// IEEE 802.1AH"). The frame itself is valid; the exception is the guessed
// protocol's.
const ethertypeGuess = "infiniband:ethertype"

// TsharkMalformed returns the number of frames tshark (with the RPC-over-RDMA
// heuristic off, see testdata/captures/README.md) calls malformed in file, and the
// number of frames it decodes as InfiniBand. Frames it calls malformed only
// because it read an RDMA payload as an Ethertype frame (ethertypeGuess) are
// logged and not counted. It skips the check, with a log line,
// returning -1, -1 when tshark is not installed.
func TsharkMalformed(t testing.TB, file string) (malformed, infiniband int) {
	t.Helper()
	s := TsharkFrames(t, file)
	if s.Protocols == nil {
		return -1, -1
	}
	return s.Malformed, s.Protocols["infiniband"]
}

// TsharkSummary is what one tshark pass over a capture says: how many frames
// it calls malformed (TsharkMalformed's count) and how many hold each
// protocol, by its display-filter name ("infiniband", "iwarp_mpa",
// "iwarp_ddp_rdmap"). Protocols is nil when tshark is not installed.
type TsharkSummary struct {
	Malformed int
	Protocols map[string]int
}

// TsharkFrames reads file with tshark once, printing every frame's protocol
// list and its _ws.malformed items (empty for a frame that is not malformed):
// tshark's start-up, not the reading, is most of its time on a capture of a
// few hundred frames, and the interop tests check a capture per exchange.
func TsharkFrames(t testing.TB, file string) TsharkSummary {
	t.Helper()
	if _, err := exec.LookPath("tshark"); err != nil {
		t.Logf("interop: tshark not installed: malformed-frame check skipped")
		return TsharkSummary{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := run(ctx, "tshark", "-r", file, "--disable-protocol", "rpcordma", "-T", "fields", "-e", "frame.protocols", "-e", "_ws.malformed")
	if !r.OK() {
		t.Fatalf("interop: tshark:\n%s", r)
	}
	s := TsharkSummary{Protocols: map[string]int{}}
	guessed := 0
	for _, line := range strings.Split(strings.TrimRight(r.Stdout, "\n"), "\n") {
		protos, bad, _ := strings.Cut(line, "\t")
		seen := map[string]bool{}
		for _, p := range strings.Split(protos, ":") {
			if p != "" && !seen[p] {
				seen[p] = true
				s.Protocols[p]++
			}
		}
		switch {
		case strings.TrimSpace(bad) == "":
		case strings.Contains(protos, ethertypeGuess):
			guessed++
		default:
			s.Malformed++
		}
	}
	if s.Malformed > 0 {
		logMalformed(t, file)
	}
	if guessed > 0 {
		t.Logf("interop: tshark read %d RDMA payloads as Ethertype frames and calls them malformed (its IPoIB guess on random data; not counted)", guessed)
	}
	return s
}

// logMalformed logs what tshark and softrdma decode say of the frames tshark
// calls malformed, with the first one's bytes, so that a failure in CI says
// which frame it was after the capture's temporary directory is gone.
func logMalformed(t testing.TB, file string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tshark := func(args ...string) string {
		return run(ctx, "tshark", append([]string{"-r", file, "--disable-protocol", "rpcordma"}, args...)...).Stdout
	}
	t.Logf("interop: tshark's malformed frames in %s:\n%s", filepath.Base(file), tshark("-Y", "_ws.malformed"))
	first := strings.Fields(tshark("-Y", "_ws.malformed", "-T", "fields", "-e", "frame.number"))
	if len(first) == 0 {
		return
	}
	t.Logf("interop: frame %s in detail:\n%s", first[0], tshark("-Y", "frame.number == "+first[0], "-V", "-x"))
	t.Logf("interop: softrdma decode:\n%s", run(ctx, Softrdma(t), "decode", file).Stdout)
}
