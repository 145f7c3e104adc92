package ibtransport_test

import (
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
)

// TestMaxSRQSGEDefault: MaxSRQSGE defaults to MaxSGE and never exceeds it
// (an SRQ WR is a receive WR); set lower, it is the SRQ's own limit (rxe's
// max_srq_sge, 27, is below its max_sge, 32).
func TestMaxSRQSGEDefault(t *testing.T) {
	for _, tt := range []struct{ sge, srqSGE, want int }{
		{0, 0, 32}, {32, 27, 27}, {8, 0, 8}, {8, 9, 8}, {8, 8, 8},
	} {
		got := ib.NewContext(ib.ContextConfig{MaxSGE: tt.sge, MaxSRQSGE: tt.srqSGE}).Config().MaxSRQSGE
		if got != tt.want {
			t.Errorf("MaxSGE %d MaxSRQSGE %d: %d, want %d", tt.sge, tt.srqSGE, got, tt.want)
		}
	}
}
