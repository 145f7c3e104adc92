package ibtransport

import "testing"

func TestPSNAdd(t *testing.T) {
	tests := []struct {
		psn  uint32
		n    int
		want uint32
	}{
		{0, 1, 1},
		{PSNMask, 1, 0},
		{PSNMask - 2, 5, 2},
		{0, -1, PSNMask},
		{3, -5, PSNMask - 1},
		{0x123456, 1 << 24, 0x123456},
		{0x123456, -(1 << 24), 0x123456},
		{0x123456, 3 << 24, 0x123456},
		{0xff000001, 0, 1}, // bits above 24 are dropped
		{10, -10, 0},
	}
	for _, tt := range tests {
		if got := PSNAdd(tt.psn, tt.n); got != tt.want {
			t.Errorf("PSNAdd(%#x, %d) = %#x, want %#x", tt.psn, tt.n, got, tt.want)
		}
	}
}

func TestPSNDiff(t *testing.T) {
	tests := []struct {
		a, b uint32
		want int32
	}{
		{5, 5, 0},
		{6, 5, 1},
		{5, 6, -1},
		{0, PSNMask, 1},  // wrap forward
		{PSNMask, 0, -1}, // wrap backward
		{2, PSNMask - 1, 4},
		{1 << 23, 0, 1 << 23},        // exactly half: positive end of (-2^23, 2^23]
		{0, 1 << 23, 1 << 23},        // and the other way round too
		{1<<23 + 1, 0, -(1<<23 - 1)}, // just past half is behind
		{0, 1<<23 + 1, 1<<23 - 1},
		{1<<23 - 1, 0, 1<<23 - 1},
		{0x1000005, 5, 0}, // high bits ignored
	}
	for _, tt := range tests {
		if got := PSNDiff(tt.a, tt.b); got != tt.want {
			t.Errorf("PSNDiff(%#x, %#x) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestPSNOrder(t *testing.T) {
	tests := []struct {
		a, b       uint32
		less, leEq bool
	}{
		{1, 2, true, true},
		{2, 1, false, false},
		{2, 2, false, true},
		{PSNMask, 0, true, true},
		{0, PSNMask, false, false},
		{PSNMask - 10, 10, true, true},
		{0, 1 << 23, false, false},
		{1 << 23, 0, false, false}, // half way: PSNDiff is +2^23 both ways
	}
	for _, tt := range tests {
		if got := PSNLess(tt.a, tt.b); got != tt.less {
			t.Errorf("PSNLess(%#x, %#x) = %v", tt.a, tt.b, got)
		}
		if got := PSNLessEqual(tt.a, tt.b); got != tt.leEq {
			t.Errorf("PSNLessEqual(%#x, %#x) = %v", tt.a, tt.b, got)
		}
	}
}

func TestPSNInWindow(t *testing.T) {
	tests := []struct {
		psn, first uint32
		n          int
		want       bool
	}{
		{5, 5, 1, true},
		{5, 5, 0, false},
		{6, 5, 1, false},
		{1, PSNMask - 1, 4, true}, // window wraps: ffffe ffffff 0 1
		{2, PSNMask - 1, 4, false},
		{PSNMask - 2, PSNMask - 1, 4, false},
	}
	for _, tt := range tests {
		if got := PSNInWindow(tt.psn, tt.first, tt.n); got != tt.want {
			t.Errorf("PSNInWindow(%#x, %#x, %d) = %v", tt.psn, tt.first, tt.n, got)
		}
	}
}

// TestPSNProperties walks across the wrap point: adding n then taking the difference
// gives n back for every |n| < 2^23.
func TestPSNProperties(t *testing.T) {
	for _, base := range []uint32{0, 1, PSNMask, PSNMask - 100, 1 << 23, 0xabcdef} {
		for _, n := range []int{0, 1, -1, 100, -100, 1<<23 - 1, -(1<<23 - 1), 1 << 23} {
			p := PSNAdd(base, n)
			if p > PSNMask {
				t.Fatalf("PSNAdd(%#x, %d) = %#x out of range", base, n, p)
			}
			if d := PSNDiff(p, base); int(d) != n {
				t.Errorf("PSNDiff(PSNAdd(%#x, %d), %#x) = %d", base, n, base, d)
			}
			if n > 0 && n < 1<<23 && (!PSNLess(base, p) || PSNLess(p, base)) {
				t.Errorf("order of %#x and %#x", base, p)
			}
		}
	}
}
