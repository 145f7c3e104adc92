// Package progress shows how far a long run has got (softrdma bench, conform
// against a peer, decode of a large capture) on a terminal, and nothing
// otherwise: a user watching sees that the run moves; a pipe, a file or a
// test's buffer gets only the run's own output, byte for byte as before.
//
// A Meter keeps one status line on standard error, rewritten in place
// ("\r" and erase to the end of the line), at most every Interval, and
// erased by Done so that what follows starts on a clean line.
package progress

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// IsTerminal reports whether w is a terminal: an *os.File whose descriptor
// answers the TCGETS ioctl (what isatty(3) asks).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || f == nil {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// Interval is how often a Meter rewrites its line at most: often enough to
// look alive, rarely enough to cost nothing.
const Interval = 200 * time.Millisecond

// Meter is a status line on a terminal. The zero value and a Meter on a
// writer that is not a terminal print nothing. Its methods may be called
// from several goroutines.
type Meter struct {
	w        io.Writer
	interval time.Duration
	now      func() time.Time

	mu    sync.Mutex
	last  time.Time
	shown bool // a line is on the terminal
}

// New returns a Meter on w, which shows only if w is a terminal.
func New(w io.Writer) *Meter {
	if !IsTerminal(w) {
		return &Meter{}
	}
	return NewOn(w, Interval, time.Now)
}

// NewOn returns a Meter that writes to w whatever w is, at most every
// interval by the clock now (tests: a pseudo-terminal or a buffer, interval
// 0).
func NewOn(w io.Writer, interval time.Duration, now func() time.Time) *Meter {
	return &Meter{w: w, interval: interval, now: now}
}

// Active reports whether the Meter writes anything.
func (m *Meter) Active() bool { return m != nil && m.w != nil }

// Update replaces the line with the formatted status, unless the last one is
// younger than the interval.
func (m *Meter) Update(format string, args ...any) {
	if !m.Active() {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if m.shown && now.Sub(m.last) < m.interval {
		return
	}
	m.last = now
	m.shown = true
	fmt.Fprintf(m.w, "\r"+format+"\x1b[K", args...)
}

// Done erases the line.
func (m *Meter) Done() {
	if !m.Active() {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.shown {
		io.WriteString(m.w, "\r\x1b[K")
		m.shown = false
	}
}

// Reader counts the bytes read through it into a Meter's line: "LABEL: 45%
// (12.0 of 26.4 MB)" for a known total, "LABEL: 12.0 MB" otherwise. It can
// Seek if the reader it wraps can (a second pass starts the count again).
type Reader struct {
	r     io.Reader
	m     *Meter
	label string
	total int64
	n     int64
}

// NewReader returns r counted on m; total is r's size, or 0 if unknown.
func NewReader(r io.Reader, m *Meter, label string, total int64) *Reader {
	return &Reader{r: r, m: m, label: label, total: total}
}

func (p *Reader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	if p.total > 0 {
		p.m.Update("%s: %d%% (%.1f of %.1f MB)", p.label, p.n*100/p.total, float64(p.n)/1e6, float64(p.total)/1e6)
	} else {
		p.m.Update("%s: %.1f MB", p.label, float64(p.n)/1e6)
	}
	return n, err
}

// Seek moves the wrapped reader, if it is an io.Seeker.
func (p *Reader) Seek(off int64, whence int) (int64, error) {
	s, ok := p.r.(io.Seeker)
	if !ok {
		return 0, fmt.Errorf("progress: %T cannot seek", p.r)
	}
	pos, err := s.Seek(off, whence)
	if err == nil {
		p.n = pos
	}
	return pos, err
}
