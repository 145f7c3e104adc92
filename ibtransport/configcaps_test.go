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

// TestMaxMsgSizeCap: an IB transport Context caps MaxMsgSize at IBTA's 2^31;
// an iWARP one (ExternalQPs) takes up to 2^32-1, siw's max_msg_sz, which
// softrdma's iWARP devices report as siw does (capi/verbsdev).
func TestMaxMsgSizeCap(t *testing.T) {
	for _, tt := range []struct {
		external bool
		set      uint32
		want     uint32
	}{
		{false, 0, 1 << 31},
		{false, 4096, 4096},
		{false, 0xffffffff, 1 << 31},
		{true, 0, 1 << 31},
		{true, 4096, 4096},
		{true, 0xffffffff, 0xffffffff},
	} {
		got := ib.NewContext(ib.ContextConfig{ExternalQPs: tt.external, MaxMsgSize: tt.set}).Config().MaxMsgSize
		if got != tt.want {
			t.Errorf("ExternalQPs %v MaxMsgSize %#x: %#x, want %#x", tt.external, tt.set, got, tt.want)
		}
	}
}
