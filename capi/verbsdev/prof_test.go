package verbsdev_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestCPUProfile runs ibv_devices with SOFTRDMA_CPUPROFILE set: the library
// profiles its Go side from load to exit and writes the profile (a gzipped
// protocol buffer, what go tool pprof reads) when the program exits.
func TestCPUProfile(t *testing.T) {
	lib := buildLib(t)
	file := filepath.Join(t.TempDir(), "cpu.prof")
	t.Setenv("SOFTRDMA_CPUPROFILE", file)
	if _, stderr, err := run(t, lib, "roce:127.0.0.1", "ibv_devices"); err != nil {
		t.Fatalf("ibv_devices: %v\n%s", err, stderr)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("no profile: %v", err)
	}
	if !bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		t.Errorf("%s: %d bytes, not a gzipped profile: % x", file, len(b), b[:min(len(b), 16)])
	}
}
