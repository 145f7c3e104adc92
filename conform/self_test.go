package conform

import (
	"context"
	"strings"
	"testing"
)

// newSelf returns an in-process peer, closed when the test ends.
func newSelf(t testing.TB, fault *Fault) *SelfRoCE {
	t.Helper()
	s, err := NewSelfRoCE(context.Background(), SelfConfig{Seed: 7, Fault: fault})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestSelfRoCE runs the whole RoCE catalogue against softrdma itself: every case
// must pass.
func TestSelfRoCE(t *testing.T) {
	s := newSelf(t, nil)
	runAllPass(t, &Runner{Suite: "roce", Peer: "softrdma (in-process)", Cases: RoCECases(s.Env)}, 25)
}

// runAllPass runs r, logs its table, and fails the test for every case that
// did not pass and if fewer than minCases ran: a whole catalogue against
// softrdma itself.
func runAllPass(t *testing.T, r *Runner, minCases int) {
	t.Helper()
	rep, err := r.Run(context.Background())
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
	if len(rep.Cases) < minCases {
		t.Errorf("%d cases, want at least %d", len(rep.Cases), minCases)
	}
}
