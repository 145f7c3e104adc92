// Package pcaptest reads the reference captures in testdata/captures (real
// traffic between Linux rxe/siw peers) for the tests of the protocol
// packages: the frames of one capture, and the names of the captures. It is a
// test helper: it fails the test rather than return errors, and it imports
// nothing of ours, so any package's internal tests can use it.
package pcaptest

import (
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/google/gopacket/pcapgo"
)

// Dir returns the directory of the reference captures, found from this
// file's place in the module (whatever the test's working directory).
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata", "captures")
}

// Frames returns every frame of the classic pcap name in Dir. A frame the
// capture cut short fails the test: the reference captures hold whole frames.
func Frames(tb testing.TB, name string) [][]byte {
	tb.Helper()
	fh, err := os.Open(filepath.Join(Dir(), name))
	if err != nil {
		tb.Fatal(err)
	}
	defer fh.Close()
	r, err := pcapgo.NewReader(fh)
	if err != nil {
		tb.Fatalf("%s: %v", name, err)
	}
	var frames [][]byte
	for {
		data, ci, err := r.ReadPacketData()
		if err == io.EOF {
			return frames
		}
		if err != nil {
			tb.Fatalf("%s: %v", name, err)
		}
		if ci.CaptureLength != ci.Length {
			tb.Fatalf("%s: frame %d cut to %d of %d bytes", name, len(frames)+1, ci.CaptureLength, ci.Length)
		}
		frames = append(frames, data)
	}
}

// Names returns the names of the captures in Dir whose names start with
// prefix (all of them for ""); none fails the test.
func Names(tb testing.TB, prefix string) []string {
	tb.Helper()
	paths, err := filepath.Glob(filepath.Join(Dir(), prefix+"*.pcap"))
	if err != nil || len(paths) == 0 {
		tb.Fatalf("no captures %q in %s (%v)", prefix, Dir(), err)
	}
	names := make([]string, len(paths))
	for i, p := range paths {
		names[i] = filepath.Base(p)
	}
	return names
}
