package conform

import (
	"context"
	"testing"
)

func newSelfIWARP(t testing.TB, fault *IWARPFault) *SelfIWARP {
	t.Helper()
	s, err := NewSelfIWARP(context.Background(), 3, fault)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestSelfIWARP runs the whole iWARP catalogue against softrdma itself over
// loopback TCP: every case must pass.
func TestSelfIWARP(t *testing.T) {
	s := newSelfIWARP(t, nil)
	runAllPass(t, &Runner{Suite: "iwarp", Peer: "softrdma (in-process)", Cases: IWARPCases(s.Env)}, 25)
}
