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
			listening := make(chan net.Addr, 1)
			o.Listening = func(a net.Addr) { listening <- a }
			done := make(chan int, 1)
			go func() { done <- Main(o, &stdout, &stderr) }()
			var code int
			select {
			case code = <-done:
			case a := <-listening:
				if conn, err := net.Dial("tcp", a.String()); err == nil {
					conn.Close()
				}
				code = <-done
				t.Errorf("the server listened (on %v) before its device failed", a)
			case <-time.After(30 * time.Second):
				t.Fatal("the server neither failed nor listened")
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
