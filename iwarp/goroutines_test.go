package iwarp_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/softrdma/softrdma/iwarp"
)

// TestGoroutinesPerConn: a connection runs two goroutines, its reader and
// its writer (the last to end closes it), so that n connections cost 2n
// parked goroutines (the scale rows run 4096 QP pairs). 16 pairs are
// connected after a first one; the count is polled (bounded) until the
// listeners' goroutines of the setup have ended.
func TestGoroutinesPerConn(t *testing.T) {
	const pairs = 16
	pair(t, 4096, iwarp.ConnParams{}, iwarp.ConnParams{})
	before := settledGoroutines(0)
	for range pairs {
		pair(t, 4096, iwarp.ConnParams{}, iwarp.ConnParams{})
	}
	if got := settledGoroutines(before + 2*2*pairs); got > before+2*2*pairs {
		t.Errorf("%d goroutines for %d connections, want %d (2 each)", got-before, 2*pairs, 2*2*pairs)
	}
}

// settledGoroutines polls runtime.NumGoroutine until it is at most want
// (bounded: 1000 polls) and returns the last count; with want 0, it returns
// the count once it has not changed for 10 polls.
func settledGoroutines(want int) int {
	n, same := runtime.NumGoroutine(), 0
	for range 1000 {
		time.Sleep(time.Millisecond)
		m := runtime.NumGoroutine()
		if want > 0 && m <= want {
			return m
		}
		if m == n {
			same++
			if want == 0 && same == 10 {
				return m
			}
		} else {
			n, same = m, 0
		}
	}
	return runtime.NumGoroutine()
}
