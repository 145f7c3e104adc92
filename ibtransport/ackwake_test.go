package ibtransport_test

import (
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/ibtransport/ibtest"
)

// TestAckWakesOnlyForWork: an ACK that moves the requester's window signals
// Context.Wake only if the send queue holds work the window may now let out
// (a WQE not yet sent). An ACK for the last message sent woke the device loop
// to find nothing to send: a goroutine wake-up per message acknowledged
// (ib_send_lat on the C library: one per round trip on each side).
func TestAckWakesOnlyForWork(t *testing.T) {
	for _, c := range []struct {
		name   string
		window int // the requester's MaxUnackedPSNs
		sends  int
		wake   bool
	}{
		{"last message acknowledged", 1024, 1, false},
		{"window full, a message waits", 1, 2, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := ibtest.NewPair(ib.ContextConfig{Seed: 1, MaxUnackedPSNs: c.window}, ib.QPTypeRC, ibtest.DefaultConnOptions())
			if err != nil {
				t.Fatal(err)
			}
			src := regMR(t, p.A.PD, pattern(64, 1), 0)
			dst := regMR(t, p.B.PD, make([]byte, 64*c.sends), ib.AccessLocalWrite)
			_ = p.Wire.Run(nil, 100000)   // what connecting left to send
			p.A.QP.SetPosterFlushes(true) // the post itself does not wake
			for i := range c.sends {
				postRecv(t, p.B.QP, ib.RecvWR{WRID: uint64(i), SGL: []ib.SGE{dst.SGE(64*i, 64)}})
			}
			for i := range c.sends {
				post(t, p.A.QP, ib.SendWR{WRID: uint64(100 + i), Opcode: ib.WRSend, Signaled: true, SGL: []ib.SGE{src.SGE(0, 64)}})
			}
			woken(p.A.Ctx)
			got := false
			for step := 0; step < 100 && p.Wire.Pump(); step++ {
				got = woken(p.A.Ctx) || got
			}
			if got != c.wake {
				t.Errorf("A's Wake signalled: %v, want %v", got, c.wake)
			}
			for i, wc := range complete(t, p, p.A.CQ, c.sends) {
				wantWC(t, wc, uint64(100+i), ib.WCSend, ib.WCSuccess)
			}
		})
	}
}
