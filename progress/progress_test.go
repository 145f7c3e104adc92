package progress

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, s, err := OpenPTY()
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { s.Close(); m.Close() })
	return m, s
}

// TestIsTerminal: a pseudo-terminal is one; a pipe, a regular file and a
// buffer are not.
func TestIsTerminal(t *testing.T) {
	_, pts := openPTY(t)
	if !IsTerminal(pts) {
		t.Error("a pseudo-terminal is not a terminal")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	f, err := os.Create(t.TempDir() + "/f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for name, x := range map[string]io.Writer{"pipe": w, "file": f, "buffer": &bytes.Buffer{}, "nil file": (*os.File)(nil)} {
		if IsTerminal(x) {
			t.Errorf("a %s is a terminal", name)
		}
	}
	if m := New(w); m.Active() {
		t.Error("a Meter on a pipe is active")
	}
	if m := New(pts); !m.Active() {
		t.Error("a Meter on a terminal is not active")
	}
}

// TestMeter: the line is rewritten in place at most every interval (the
// clock is the test's) and erased by Done; an inactive Meter writes nothing.
func TestMeter(t *testing.T) {
	var b bytes.Buffer
	now := time.Unix(0, 0)
	m := NewOn(&b, time.Second, func() time.Time { return now })
	m.Update("a %d", 1)
	m.Update("a %d", 2) // within the interval: not shown
	now = now.Add(time.Second)
	m.Update("a %d", 3)
	m.Done()
	m.Done()
	if got, want := b.String(), "\ra 1\x1b[K\ra 3\x1b[K\r\x1b[K"; got != want {
		t.Errorf("wrote %q, want %q", got, want)
	}
	var quiet Meter
	quiet.Update("x")
	quiet.Done()
	var nilMeter *Meter
	nilMeter.Update("x")
	nilMeter.Done()
}

// TestReader: bytes read are shown against the total, or alone; Seek goes
// through to a seeker and restarts the count there.
func TestReader(t *testing.T) {
	var b bytes.Buffer
	m := NewOn(&b, 0, time.Now)
	r := NewReader(strings.NewReader(strings.Repeat("x", 2_000_000)), m, "cap", 2_000_000)
	buf := make([]byte, 500_000)
	r.Read(buf)
	if !strings.Contains(b.String(), "\rcap: 25% (0.5 of 2.0 MB)\x1b[K") {
		t.Errorf("%q", b.String())
	}
	if pos, err := r.Seek(0, io.SeekStart); pos != 0 || err != nil {
		t.Fatal(pos, err)
	}
	b.Reset()
	r.Read(buf[:1000])
	if !strings.Contains(b.String(), "cap: 0% (0.0 of 2.0 MB)") {
		t.Errorf("after Seek: %q", b.String())
	}
	b.Reset()
	u := NewReader(bytes.NewBufferString("abc"), m, "stdin", 0)
	u.Read(buf)
	if b.String() != "\rstdin: 0.0 MB\x1b[K" {
		t.Errorf("%q", b.String())
	}
	if _, err := u.Seek(0, io.SeekStart); err == nil {
		t.Error("a reader that cannot seek did")
	}
}
