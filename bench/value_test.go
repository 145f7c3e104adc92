package bench

import "testing"

// TestValue: a progress row names the baseline and the ratio only when the
// row has a baseline; without one (--no-baseline) it says no "vs 0: 0.00".
func TestValue(t *testing.T) {
	for _, tc := range []struct {
		name string
		row  Row
		want string
	}{
		{"baseline", Row{Value: 1234, Unit: "MiB/s", Base: 2000, Ratio: 0.617, Allocs: 0.5}, "1234 MiB/s vs 2000: 0.62 (0.50 allocs/msg)"},
		{"no baseline", Row{Value: 1234, Unit: "MiB/s", Allocs: 0.5}, "1234 MiB/s (0.50 allocs/msg)"},
		{"not measured", Row{Note: "not measured: no device"}, "not measured: no device"},
	} {
		if got := value(tc.row); got != tc.want {
			t.Errorf("%s: value = %q, want %q", tc.name, got, tc.want)
		}
	}
}
