//go:build linux

package conform

import (
	"context"
	"os"
	"testing"
)

// TestLoopbackRoCE runs the catalogue against softrdma over real UDP sockets on
// the loopback interface (wall clock, the device's own goroutines), on a port
// of its own so that it does not meet other tests' devices.
func TestLoopbackRoCE(t *testing.T) {
	if testing.Short() {
		t.Skip("real sockets and wall-clock waits")
	}
	port := uint16(47000 + os.Getpid()%2000)
	l, err := NewLoopbackRoCE(context.Background(), LoopbackConfig{UDPPort: port})
	if err != nil {
		t.Skipf("no loopback UDP: %v", err)
	}
	defer l.Close()
	r := &Runner{Suite: "roce", Peer: "softrdma (loopback UDP)", Cases: RoCECases(l.Env)}
	rep, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rep.Cases {
		if c.Result != Pass {
			t.Errorf("%s: %s: %s %v", c.ID, c.Result, c.Reason, c.Seen)
		}
	}
	t.Logf("%d passed in %v", rep.Passed, rep.Duration)
}
