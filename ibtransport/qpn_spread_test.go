package ibtransport

import "testing"

// TestQPNSpread: contexts with different seeds start their QPNs far apart.
// Each process on an address has a context of its own (the C libraries, a
// forking server's children one after another), where rxe gives all of a
// device's processes QPNs from one pool; a peer that still holds one
// process's connection in time-wait rejects a REP from the same QPN as a
// stale connection (qperf's next test). With starts in 0x11..0x110, 64
// seeds drew the same start more than once.
func TestQPNSpread(t *testing.T) {
	seen := map[uint32]uint64{}
	for seed := uint64(1); seed <= 64; seed++ {
		r := newQPNTestRig(t, ContextConfig{Seed: seed})
		n := r.create(t, QPTypeRC).QPN()
		if s, dup := seen[n]; dup {
			t.Errorf("seeds %d and %d both start at QPN %#x", s, seed, n)
		}
		seen[n] = seed
	}
}
