package counters

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// AnnounceDir is the directory where a process serving its counters (Serve)
// leaves a file named by its PID holding the endpoint's address, so that
// softrdma stat finds every such process of the user without being told:
// $XDG_RUNTIME_DIR/softrdma/metrics, else TMPDIR/softrdma-metrics-UID.
func AnnounceDir() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(d) {
		return filepath.Join(d, "softrdma", "metrics")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("softrdma-metrics-%d", os.Getuid()))
}

// announce writes this process's file in dir; the returned function removes it.
func announce(dir, addr string) (func(), error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := filepath.Join(dir, strconv.Itoa(os.Getpid()))
	if err := os.WriteFile(p, []byte(addr+"\n"), 0o600); err != nil {
		return nil, err
	}
	return func() { os.Remove(p) }, nil
}

// Endpoint is a process that announced its metrics endpoint.
type Endpoint struct {
	PID  int
	Addr string
}

// Announced returns the endpoints announced in dir, in PID order; the files
// of processes that no longer run are removed.
func Announced(dir string) ([]Endpoint, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var eps []Endpoint
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			os.Remove(p)
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if a := strings.TrimSpace(string(b)); a != "" {
			eps = append(eps, Endpoint{pid, a})
		}
	}
	slices.SortFunc(eps, func(a, b Endpoint) int { return a.PID - b.PID })
	return eps, nil
}
