package perf

import (
	"bytes"
	"net"
	"strings"
	"testing"
	"time"
)

// TestPerfServerOpensDeviceFirst: a perf server whose device cannot be opened
// (an interface or address that does not exist, the RoCE UDP port taken on
// its address) fails at once with the cause, before it listens for a client
// (issue 19: it opened the device only once a client had connected, and the
// client saw an "EOF"). Without the fix the server listens: the test then
// connects and hangs up, as a client would, and fails.
func TestPerfServerOpensDeviceFirst(t *testing.T) {
	busy := "127.0.84.7" // not nextPerfIP's range, which other test processes may bind
	pc, err := net.ListenPacket("udp4", net.JoinHostPort(busy, "4791"))
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	for _, c := range []struct {
		name, dev, want string
	}{
		{"no such interface", "nosuchif0", "IB device nosuchif0 not found"},
		{"no such address", "192.0.2.77", "IB device 192.0.2.77 not found"},
		{"UDP port in use", busy, "address already in use"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			o, err := parseArgs([]string{"write_bw", "-d", c.dev, "-p", "0", "-n", "5"}, &stderr)
			if err != nil {
				t.Fatal(err)
			}
			code, listened, done := serverUntilListening(t, o, &stdout, &stderr)
			if listened != nil {
				code = <-done
				t.Errorf("the server listened (on %v) before its device failed", listened)
			}
			if code != 1 || !strings.Contains(stderr.String(), c.want) {
				t.Errorf("exit %d, stderr %q; want 1 and %q", code, stderr.String(), c.want)
			}
			if strings.Contains(stdout.String(), "Waiting for client") {
				t.Errorf("the server waited for a client:\n%s", stdout.String())
			}
		})
	}
}

// TestPerfServerInlineFirst: a perf server given an -I above its device's
// inline limit (512 bytes; perftest allows up to 912) fails at start with the
// limit, before it listens for a client, over the plain exchange and rdma_cm
// (-R), RoCE and iWARP: the device, open before the server listens, knows it.
// Without the check at start the server listens, and the test connects and
// hangs up as a client would, and fails.
func TestPerfServerInlineFirst(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
	}{
		{"roce", []string{"--transport", "roce"}},
		{"roce -R", []string{"--transport", "roce", "-R"}},
		{"iwarp -R", []string{"--transport", "iwarp", "-R"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			o, err := parseArgs(append([]string{"send_bw", "-d", nextPerfIP(), "-p", "0", "-n", "5", "-I", "600"}, c.args...), &stderr)
			if err != nil {
				t.Fatal(err)
			}
			code, listened, _ := serverUntilListening(t, o, &stdout, &stderr)
			if listened != nil {
				// Failed: the server waits for a client. One that connects and
				// hangs up may not end an rdma_cm server: the test does not
				// wait for it (Main's goroutine is left to the process's end).
				t.Fatalf("the server listened (on %v) before refusing -I 600", listened)
			}
			if want := "-I 600: the device's inline limit is 512 bytes"; code != 1 || !strings.Contains(stderr.String(), want) {
				t.Errorf("exit %d, stderr %q; want 1 and %q", code, stderr.String(), want)
			}
		})
	}
}

// serverUntilListening runs Main(o) as a server until it ends, giving its
// exit code, or listens for a client, giving the address (then a client
// connects there and hangs up, as one would, and done gives the exit code
// once Main ends); neither within 30 s fails the test.
func serverUntilListening(t *testing.T, o *Options, stdout, stderr *bytes.Buffer) (code int, listened net.Addr, done <-chan int) {
	t.Helper()
	listening := make(chan net.Addr, 1)
	o.Listening = func(a net.Addr) { listening <- a }
	ended := make(chan int, 1)
	go func() { ended <- Main(o, stdout, stderr) }()
	select {
	case code = <-ended:
	case listened = <-listening:
		if conn, err := net.Dial("tcp", listened.String()); err == nil {
			conn.Close()
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the server neither failed nor listened")
	}
	return code, listened, ended
}
