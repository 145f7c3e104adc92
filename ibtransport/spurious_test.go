package ibtransport_test

import (
	"bytes"
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/ibtransport/ibtest"
)

// TestRCSpuriousTimeout: every packet arrives, but some ACKs come later than
// the requester's transport timer (67 ms at timeout 14), as on an emulated
// machine whose receiver falls behind: the timer fires, the requester resends
// PSNs the responder already has, and every WRITE still completes. One late
// ACK is answered sooner by the tail-loss probe (probe.go): the responder ACKs
// the duplicate, and the timer never fires.
func TestRCSpuriousTimeout(t *testing.T) {
	const msg, wrs = 64 * 1024, 24 // 64 packets each, 1536 in all
	for _, tc := range []struct {
		name     string
		from, to int // ACK indexes delayed
		delay    time.Duration
		probed   bool // the probe's ACK comes first
	}{
		{"one ACK late", 3, 4, 100 * time.Millisecond, true},
		{"a run of ACKs late", 3, 12, 100 * time.Millisecond, false},
		{"ACKs later than two timeouts", 2, 8, 200 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, src, dst := windowSetup(t, 0, msg*wrs)
			p.Wire.Filter = func(fr *ibtest.Frame) ibtest.Action {
				if fr.Dir == ibtest.BToA && fr.Index >= tc.from && fr.Index < tc.to {
					return ibtest.Action{Delay: tc.delay}
				}
				return ibtest.Action{}
			}
			for i := range wrs {
				post(t, p.A.QP, ib.SendWR{WRID: uint64(i), Opcode: ib.WRRDMAWrite,
					SGL:        []ib.SGE{src.mr.SGE(i*msg, msg)},
					RemoteAddr: dst.mr.Addr() + uint64(i*msg), RKey: dst.mr.RKey(), Signaled: true})
			}
			wcs := complete(t, p, p.A.CQ, wrs)
			for i, wc := range wcs {
				wantWC(t, wc, uint64(i), ib.WCRDMAWrite, ib.WCSuccess)
			}
			if !bytes.Equal(dst.buf, src.buf) {
				t.Fatal("data differs")
			}
			c := p.A.QP.Counters()
			t.Logf("%d timeouts, %d probes, %d resends, %d duplicates at the responder", c.Timeouts, c.Probes, c.Retransmissions, p.B.QP.Counters().DuplicateRequests)
			switch {
			case tc.probed && (c.Timeouts != 0 || c.Probes != 1 || c.Retransmissions != 0):
				t.Errorf("%d timeouts, %d probes, %d resends: want the probe's ACK alone", c.Timeouts, c.Probes, c.Retransmissions)
			case !tc.probed && c.Timeouts == 0:
				t.Error("no timeout: the delay did not exceed the timer")
			}
		})
	}
}
