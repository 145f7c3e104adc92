package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/netio/netns"
	"github.com/softrdma/softrdma/progress"
)

// onTerminal runs cmd with a pseudo-terminal as its standard error and
// returns its standard output and what the terminal showed.
func onTerminal(t *testing.T, cmd func(stdout, stderr io.Writer) int) (code int, stdout, term string) {
	t.Helper()
	m, s, err := progress.OpenPTY()
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	defer m.Close()
	var shown bytes.Buffer
	done := make(chan struct{})
	go func() { io.Copy(&shown, m); close(done) }() // ends with EIO once the slave closes
	var out bytes.Buffer
	code = cmd(&out, s)
	s.Close()
	<-done
	return code, out.String(), shown.String()
}

// piped runs cmd with a pipe as its standard error and returns its
// standard output and what went down the pipe.
func piped(t *testing.T, cmd func(stdout, stderr io.Writer) int) (code int, stdout, errs string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got bytes.Buffer
	done := make(chan struct{})
	go func() { io.Copy(&got, r); close(done) }()
	var out bytes.Buffer
	code = cmd(&out, w)
	w.Close()
	<-done
	return code, out.String(), got.String()
}

// TestProgressOnTerminalOnly: decode of a capture, conform and bench show a
// status on a terminal (stderr a pseudo-terminal): a line rewritten in place
// and erased at the end, or bench's rows as they complete; with stderr a pipe
// they write no status at all; standard output is the same either way.
func TestProgressOnTerminalOnly(t *testing.T) {
	capture := filepath.Join("..", "..", "testdata", "captures", "rxe-write-bw-rdma-cm.pcap")
	cmds := []struct {
		name   string
		run    func(stdout, stderr io.Writer) int
		status string // on the terminal
		erased bool   // the status line is erased at the end
	}{
		{"decode", func(o, e io.Writer) int { return runDecode([]string{capture}, o, e) },
			"\rsoftrdma decode: " + capture + ": ", true},
		{"conform", func(o, e io.Writer) int { return conformCmd([]string{"--self", "--case", "*psn*"}, o, e) },
			"\rsoftrdma conform: 1/", true},
	}
	if netns.Check() == nil {
		cmds = append(cmds, struct {
			name   string
			run    func(stdout, stderr io.Writer) int
			status string
			erased bool
		}{"bench", func(o, e io.Writer) int {
			return benchCmd([]string{"--time", "40ms", "--warm", "10ms", "--sizes", "4K", "--tests", "write", "--backend", "udp",
				"--transport", "roce", "--qps", "1"}, o, e)
		}, "softrdma bench: ", false})
	}
	for _, c := range cmds {
		t.Run(c.name, func(t *testing.T) {
			tcode, tout, term := onTerminal(t, c.run)
			pcode, pout, errs := piped(t, c.run)
			if tcode != pcode {
				t.Errorf("exit %d on a terminal, %d piped", tcode, pcode)
			}
			if !strings.Contains(term, c.status) {
				t.Errorf("the terminal showed %q, want %q in it", term, c.status)
			}
			if c.erased && !strings.HasSuffix(term, "\r\x1b[K") {
				t.Errorf("the status line is not erased at the end: %q", term)
			}
			if strings.Contains(errs, "\r") || strings.Contains(errs, c.status) || strings.Contains(errs, "\x1b[K") {
				t.Errorf("piped stderr has the status: %q", errs)
			}
			// conform's summary line ends with the run's time, which differs.
			runTime := regexp.MustCompile(`cases, [0-9.]+[µnm]?s\)`)
			tout, pout = runTime.ReplaceAllString(tout, "cases, T)"), runTime.ReplaceAllString(pout, "cases, T)")
			if c.name != "bench" && tout != pout { // bench's numbers differ run to run
				t.Errorf("stdout differs on a terminal:\n%s\npiped:\n%s", tout, pout)
			}
		})
	}
}
