// Package launch prepares `softrdma run`: it runs an unmodified verbs program
// (ibv_devices, ibv_rc_pingpong, ib_write_bw, rping...) on softrdma's drop-in
// libibverbs.so.1 and librdmacm.so.1 (`make lib` builds them into lib/) by
// putting their directory first on LD_LIBRARY_PATH and the devices the user
// named into SOFTRDMA_DEVICES (devspec). The command itself then replaces
// softrdma with the program (execve), so the program's exit status and the
// signals sent to it are the program's own, with nothing in between.
package launch

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/softrdma/softrdma/counters"
	"github.com/softrdma/softrdma/devspec"
)

// LibEnvVar names the library directory when --lib is not given.
const LibEnvVar = "SOFTRDMA_LIB"

// Library is the file a library directory must hold: the drop-in
// libibverbs. `make lib` builds it beside the vendor stubs perftest links
// (libmlx5.so.1, libefa.so.1) and librdmacm.so.1.
const Library = "libibverbs.so.1"

// Options is what the user gave `softrdma run`.
type Options struct {
	// Devices are the --device SPECs, in order; none leaves the choice to
	// the library (SOFTRDMA_DEVICES as inherited, the config file, the
	// defaults: devspec.Resolve).
	Devices []string
	// Lib is --lib: the directory holding the libraries, or empty.
	Lib string
	// Program and Args are what to run; Program is looked up in PATH
	// unless it contains a '/'.
	Program string
	Args    []string
	// Metrics and DumpCounters are --metrics and --dump-counters: the
	// program's counters served on http://ADDR/metrics while it runs, and
	// written to a file when it exits (the libraries'
	// counters.MetricsEnvVar and counters.DumpEnvVar); empty: as inherited.
	Metrics, DumpCounters string
	// Pcap is --pcap: the file the program's traffic is captured into (the
	// libraries' devspec.PcapEnvVar; %p: its PID); empty: as inherited.
	Pcap string
}

// Command is the program to execute: Path, its argv (argv[0] is the program
// as the user wrote it) and its environment.
type Command struct {
	Path string
	Argv []string
	Env  []string
	// Devices are the devices the program will see, and Source where the
	// list came from.
	Devices []devspec.Spec
	Source  devspec.Source
}

// ExitError is an error with the exit status `softrdma run` should end
// with: 2 for bad usage, 126 for a program that cannot be executed, 127 for
// one not found (a shell's codes).
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// Prepare checks o and returns the command to execute. environ is the
// environment to start from (os.Environ()) and exe the path of the softrdma
// binary (os.Executable()), whose ../lib is the library directory when
// neither --lib nor $SOFTRDMA_LIB names one. Every error says in one line
// what is wrong and what to do.
func Prepare(o Options, environ []string, exe string) (*Command, error) {
	env := envMap(environ)
	if o.Program == "" {
		return nil, &ExitError{2, errors.New("no PROGRAM to run: softrdma run [--device SPEC]... [--lib DIR] -- PROGRAM [ARGS]")}
	}
	lib, err := FindLib(o.Lib, env[LibEnvVar], exe)
	if err != nil {
		return nil, &ExitError{2, err}
	}
	c := &Command{Argv: append([]string{o.Program}, o.Args...)}
	setenv := map[string]string{"LD_LIBRARY_PATH": prependPath(lib, env["LD_LIBRARY_PATH"])}
	if len(o.Devices) > 0 {
		for _, d := range o.Devices {
			if _, err := devspec.Parse(d); err != nil {
				return nil, &ExitError{2, fmt.Errorf("--device: %w", err)}
			}
		}
		list := strings.Join(o.Devices, ";")
		if _, err := devspec.ParseList(list); err != nil {
			return nil, &ExitError{2, fmt.Errorf("--device: %w", err)}
		}
		setenv[devspec.EnvVar] = list
	}
	if o.Metrics != "" {
		if _, err := counters.ListenAddr(o.Metrics); err != nil {
			return nil, &ExitError{2, fmt.Errorf("--metrics: %w", err)}
		}
		setenv[counters.MetricsEnvVar] = o.Metrics
	}
	if o.DumpCounters != "" {
		setenv[counters.DumpEnvVar] = o.DumpCounters
	}
	if o.Pcap != "" {
		// Absolute, so that a program that changes directory writes it
		// where the user meant.
		p, err := filepath.Abs(o.Pcap)
		if err != nil {
			return nil, &ExitError{2, fmt.Errorf("--pcap: %w", err)}
		}
		setenv[devspec.PcapEnvVar] = p
	}
	c.Env = mergeEnv(environ, setenv)
	// The devices the library will see, resolved the library's way, so that
	// a bad config file is reported here, before the program starts.
	child := envMap(c.Env)
	c.Devices, c.Source, err = devspec.Resolve(func(k string) string { return child[k] })
	if err != nil {
		return nil, &ExitError{2, err}
	}
	c.Path, err = lookPath(o.Program, child["PATH"])
	if err != nil {
		code := 127
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, exec.ErrNotFound) {
			code = 126
		}
		return nil, &ExitError{code, err}
	}
	return c, nil
}

// FindLib returns the absolute library directory: flag (--lib) if given,
// else env ($SOFTRDMA_LIB) if set, else the lib directory beside the
// directory of the softrdma binary exe (bin/softrdma → lib/), symbolic links
// resolved. The directory must hold Library; if it does not, the error says
// where it looked and to run make lib.
func FindLib(flag, env, exe string) (string, error) {
	dir, from := flag, "--lib"
	switch {
	case flag != "":
	case env != "":
		dir, from = env, "$"+LibEnvVar
	default:
		from = "beside " + exe
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		dir = filepath.Join(filepath.Dir(exe), "..", "lib")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("library directory %s (%s): %w", dir, from, err)
	}
	if st, err := os.Stat(filepath.Join(abs, Library)); err != nil || st.IsDir() {
		return "", fmt.Errorf("no %s in %s (%s): run make lib (or give --lib DIR)", Library, abs, from)
	}
	return abs, nil
}

// lookPath finds prog as a shell would with PATH path: a name with a '/' is
// taken as it is.
func lookPath(prog, path string) (string, error) {
	if strings.Contains(prog, "/") {
		st, err := os.Stat(prog)
		switch {
		case err != nil:
			return "", fmt.Errorf("%s: %w", prog, err)
		case st.IsDir() || st.Mode()&0o111 == 0:
			return "", fmt.Errorf("%s: not an executable file", prog)
		}
		return prog, nil
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, prog)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: %w", prog, exec.ErrNotFound)
}

// prependPath puts dir first in the colon-separated list old, dropping
// another copy of it.
func prependPath(dir, old string) string {
	parts := []string{dir}
	for _, p := range strings.Split(old, ":") {
		if p != "" && p != dir {
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, ":")
}

// envMap returns environ as a map (the last of repeated names wins, as
// getenv does in Go).
func envMap(environ []string) map[string]string {
	m := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

// mergeEnv returns environ with the variables of set (those Prepare sets,
// in a fixed order) replaced or added.
func mergeEnv(environ []string, set map[string]string) []string {
	out := make([]string, 0, len(environ)+len(set))
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; !ok {
			out = append(out, kv)
		}
	}
	for _, k := range []string{"LD_LIBRARY_PATH", devspec.EnvVar, counters.MetricsEnvVar, counters.DumpEnvVar, devspec.PcapEnvVar} {
		if v, ok := set[k]; ok {
			out = append(out, k+"="+v)
		}
	}
	return out
}
