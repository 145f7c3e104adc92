package conform

import (
	"context"
	"strings"
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
	rep, err := (&Runner{Suite: "iwarp", Peer: "softrdma (in-process)", Cases: IWARPCases(s.Env)}).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	rep.WriteTable(&b)
	t.Log("\n" + b.String())
	for _, c := range rep.Cases {
		if c.Result != Pass {
			t.Errorf("%s: %s: %s %v", c.ID, c.Result, c.Reason, c.Seen)
		}
	}
	if len(rep.Cases) < 25 {
		t.Errorf("%d cases, want at least 25", len(rep.Cases))
	}
}
