package verbsdev_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/softrdma/softrdma/devspec"
)

// softrdmaTree builds the softrdma binary (CGO_ENABLED=0, as make build does)
// into DIR/bin and links DIR/lib to the library lib, the layout of a checkout
// after make build and make lib, so that softrdma run finds the library
// beside its binary. It returns DIR/bin/softrdma.
func softrdmaTree(t *testing.T, lib string) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("needs the go tool to build softrdma")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin", "softrdma")
	cmd := exec.Command(goTool, "build", "-o", bin, "../../cmd/softrdma")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build softrdma: %v\n%s", err, out)
	}
	if err := os.Symlink(lib, filepath.Join(dir, "lib")); err != nil {
		t.Fatal(err)
	}
	return bin
}

// cleanEnv is the test's environment without the variables that choose
// softrdma's devices and libraries, and with a HOME of its own (no user
// config file), plus extra.
func cleanEnv(t *testing.T, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case devspec.EnvVar, devspec.ConfigEnvVar, "SOFTRDMA_LIB", "SOFTRDMA_DEBUG", "LD_LIBRARY_PATH", "XDG_CONFIG_HOME", "HOME":
			continue
		}
		env = append(env, kv)
	}
	return append(append(env, "HOME="+t.TempDir()), extra...)
}

// TestRunWrapper runs Debian's unmodified tools through `softrdma run`, which
// finds the library beside its binary (bin/../lib): ibv_devices lists the
// devices of a config file and, with none, the defaults; an ibv_rc_pingpong
// pair runs end to end with --device; the program's exit status and the
// signal that killed it come back as the program's own (softrdma execs it);
// without the library one line says to run make lib.
func TestRunWrapper(t *testing.T) {
	lib := buildLib(t)
	softrdma := softrdmaTree(t, lib)
	run := func(env []string, args ...string) (string, string, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, softrdma, append([]string{"run"}, args...)...)
		cmd.Env = env
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		return o.String(), e.String(), err
	}
	// deviceLines checks that ibv_devices printed exactly the devices specs.
	deviceLines := func(t *testing.T, out string, specs []devspec.Spec) {
		t.Helper()
		lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
		if len(lines) != 2+len(specs) {
			t.Errorf("ibv_devices: %d lines, want %d (%v):\n%s", len(lines), 2+len(specs), specs, out)
		}
		for _, s := range specs {
			if !strings.Contains(out, fmt.Sprintf("    %-16s\t", s.Name)) {
				t.Errorf("ibv_devices: no %s (%s) in\n%s", s.Name, s, out)
			}
		}
	}

	t.Run("ibv_devices, config file", func(t *testing.T) {
		conf := filepath.Join(t.TempDir(), "devices")
		if err := os.WriteFile(conf, []byte("# two devices\nroce:127.0.0.1\niwarp:127.0.0.1,name=w  # named\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		out, errOut, err := run(cleanEnv(t, devspec.ConfigEnvVar+"="+conf), "--", "ibv_devices")
		if err != nil || errOut != "" {
			t.Fatalf("softrdma run -- ibv_devices: %v\n%s%s", err, out, errOut)
		}
		deviceLines(t, out, []devspec.Spec{{Name: "sr_roce0"}, {Name: "w"}})
	})

	t.Run("ibv_devices, defaults", func(t *testing.T) {
		env := cleanEnv(t)
		specs, src, err := devspec.Resolve(func(k string) string {
			for _, kv := range env {
				if v, ok := strings.CutPrefix(kv, k+"="); ok {
					return v
				}
			}
			return ""
		})
		if err != nil {
			t.Fatal(err)
		}
		out, errOut, err := run(env, "ibv_devices")
		if err != nil || errOut != "" {
			t.Fatalf("softrdma run ibv_devices: %v\n%s%s", err, out, errOut)
		}
		t.Logf("devices from %v:\n%s", src, out)
		deviceLines(t, out, specs)
	})

	t.Run("ibv_rc_pingpong", func(t *testing.T) {
		net3 := randomNet()
		srvAddr, cliAddr := net3+"1", net3+"2"
		port := fmt.Sprint(freeTCPPort(t))
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		start := func(addr string, extra ...string) (*exec.Cmd, *bytes.Buffer) {
			args := append([]string{"run", "--device", "roce:" + addr, "--", "ibv_rc_pingpong", "-d", "sr_roce0", "-g", "1", "-n", "100", "-c", "-p", port}, extra...)
			cmd := exec.CommandContext(ctx, softrdma, args...)
			cmd.Env = cleanEnv(t)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			return cmd, &out
		}
		srv, so := start(srvAddr)
		for deadline := time.Now().Add(30 * time.Second); !listening(t, port); {
			if time.Now().After(deadline) {
				srv.Process.Kill()
				srv.Wait()
				t.Fatalf("server never listened\n%s", so)
			}
			time.Sleep(20 * time.Millisecond)
		}
		cli, co := start(cliAddr, srvAddr)
		cliErr, srvErr := cli.Wait(), srv.Wait()
		if cliErr != nil || srvErr != nil {
			t.Fatalf("client: %v\n%s\nserver: %v\n%s", cliErr, co, srvErr, so)
		}
		for _, o := range []struct{ out, local, remote string }{{so.String(), srvAddr, cliAddr}, {co.String(), cliAddr, srvAddr}} {
			for _, w := range []string{"GID ::ffff:" + o.local + "\n", "GID ::ffff:" + o.remote + "\n", "100 iters in "} {
				if !strings.Contains(o.out, w) {
					t.Errorf("no %q in\n%s", w, o.out)
				}
			}
		}
	})

	t.Run("exit status and signals", func(t *testing.T) {
		env := cleanEnv(t, devspec.EnvVar+"=roce:127.0.0.1")
		var ee *exec.ExitError
		if _, errOut, err := run(env, "--", "sh", "-c", "exit 3"); !errors.As(err, &ee) || ee.ExitCode() != 3 {
			t.Errorf("sh -c 'exit 3': %v %s; want exit status 3", err, errOut)
		}
		_, errOut, err := run(env, "--", "sh", "-c", "kill -USR1 $$")
		if !errors.As(err, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGUSR1 {
			t.Errorf("sh -c 'kill -USR1 $$': %v %s; want killed by SIGUSR1", err, errOut)
		}
		// The child sees the library first on its path.
		out, errOut, err := run(env, "--", "sh", "-c", `echo "$LD_LIBRARY_PATH"`)
		if first, _, _ := strings.Cut(strings.TrimSpace(out), ":"); err != nil || first != filepath.Join(filepath.Dir(filepath.Dir(softrdma)), "lib") {
			t.Errorf("LD_LIBRARY_PATH %q (%v %s), want the lib beside bin first", out, err, errOut)
		}
	})

	t.Run("no library", func(t *testing.T) {
		_, errOut, err := run(cleanEnv(t), "--lib", t.TempDir(), "--", "true")
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "run make lib") {
			t.Errorf("softrdma run --lib EMPTY: %v, stderr %q; want exit 2 and one line saying run make lib", err, errOut)
		}
	})
}
