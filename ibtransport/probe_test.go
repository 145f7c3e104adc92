package ibtransport_test

import (
	"bytes"
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/ibtransport/ibtest"
)

// TestRCTailLossProbe: a loss at the end of what the requester sent leaves
// the responder nothing after the gap to NAK, so go-back-N would wait for the
// transport timer (67 ms at Timeout 14). After two round trips without an ACK
// (10 ms at least) the requester sends its last packet again with AckReq: a lost tail comes
// back as one sequence NAK and is resent at once; a lost ACK comes back as the
// ACK of the duplicate. A READ is never probed (its duplicate would move the
// data again): its lost tail still waits for the timer.
func TestRCTailLossProbe(t *testing.T) {
	const msg = 64 * 1024 // 64 packets at MTU 1024
	const timeout = 4096 << 14 * time.Nanosecond
	for _, tc := range []struct {
		name   string
		read   bool
		drop   func(fr *ibtest.Frame) bool // after the first message completed
		probes uint64
		naks   uint64
		resent uint64 // Retransmissions (the probe is not one)
		dups   uint64 // duplicates at the responder
		slow   bool   // recovered by the transport timer
	}{
		{name: "last three packets lost", probes: 1, naks: 1, resent: 3,
			drop: func(fr *ibtest.Frame) bool { return fr.Dir == ibtest.AToB && fr.Index >= 125 && fr.Index < 128 }},
		{name: "last packet lost", probes: 1, naks: 0, resent: 0,
			// The probe is that packet: it fills the gap itself.
			drop: func(fr *ibtest.Frame) bool { return fr.Dir == ibtest.AToB && fr.Index == 127 }},
		{name: "ACK lost", probes: 1, dups: 1,
			drop: func(fr *ibtest.Frame) bool { return fr.Dir == ibtest.BToA && fr.Index == 1 }},
		{name: "READ response tail lost", read: true, slow: true,
			drop: func(fr *ibtest.Frame) bool { return fr.Dir == ibtest.BToA && fr.Index >= 125 && fr.Index < 128 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, src, dst := windowSetup(t, 0, 2*msg)
			dropping := false
			p.Wire.Filter = func(fr *ibtest.Frame) ibtest.Action {
				return ibtest.Action{Drop: dropping && tc.drop(fr)}
			}
			wr := func(i int) ib.SendWR {
				if tc.read {
					return ib.SendWR{WRID: uint64(i), Opcode: ib.WRRDMARead, SGL: []ib.SGE{src.mr.SGE(i*msg, msg)},
						RemoteAddr: dst.mr.Addr() + uint64(i*msg), RKey: dst.mr.RKey(), Signaled: true}
				}
				return ib.SendWR{WRID: uint64(i), Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{src.mr.SGE(i*msg, msg)},
					RemoteAddr: dst.mr.Addr() + uint64(i*msg), RKey: dst.mr.RKey(), Signaled: true}
			}
			if tc.read {
				copy(dst.buf, pattern(2*msg, 5))
			}
			// The first message measures the round trip; the second loses.
			post(t, p.A.QP, wr(0))
			complete(t, p, p.A.CQ, 1)
			dropping = true
			start := p.Wire.Clock.Now()
			post(t, p.A.QP, wr(1))
			wantWC(t, complete(t, p, p.A.CQ, 1)[0], 1, map[bool]ib.WCOpcode{false: ib.WCRDMAWrite, true: ib.WCRDMARead}[tc.read], ib.WCSuccess)
			took := p.Wire.Clock.Now().Sub(start)
			if !bytes.Equal(dst.buf, src.buf) {
				t.Fatal("data differs")
			}
			c, cb := p.A.QP.Counters(), p.B.QP.Counters()
			t.Logf("%v; probes %d, timeouts %d, sequence NAKs %d, resent %d, duplicates at the responder %d",
				took, c.Probes, c.Timeouts, c.NAKsReceived[ib.NAKPSNSequenceError], c.Retransmissions, cb.DuplicateRequests)
			if tc.slow {
				if c.Probes != 0 || c.Timeouts != 1 || took < timeout {
					t.Errorf("probes %d, timeouts %d in %v: want no probe and the timer (%v)", c.Probes, c.Timeouts, took, timeout)
				}
				return
			}
			if c.Probes != tc.probes || c.Timeouts != 0 || c.NAKsReceived[ib.NAKPSNSequenceError] != tc.naks ||
				c.Retransmissions != tc.resent || cb.DuplicateRequests != tc.dups {
				t.Errorf("probes %d, timeouts %d, NAKs %d, resent %d, duplicates %d; want %d, 0, %d, %d, %d",
					c.Probes, c.Timeouts, c.NAKsReceived[ib.NAKPSNSequenceError], c.Retransmissions, cb.DuplicateRequests,
					tc.probes, tc.naks, tc.resent, tc.dups)
			}
			if took >= timeout/4 {
				t.Errorf("recovered in %v: want well within the transport timer %v", took, timeout)
			}
		})
	}
}

// TestRCNoProbeWithoutLoss: on a wire that loses nothing, however long the
// transfer, the requester never probes.
func TestRCNoProbeWithoutLoss(t *testing.T) {
	const msg = 64 * 1024
	p, src, dst := windowSetup(t, 0, 16*msg)
	for i := range 16 {
		post(t, p.A.QP, ib.SendWR{WRID: uint64(i), Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{src.mr.SGE(i*msg, msg)},
			RemoteAddr: dst.mr.Addr() + uint64(i*msg), RKey: dst.mr.RKey(), Signaled: true})
	}
	complete(t, p, p.A.CQ, 16)
	if c := p.A.QP.Counters(); c.Probes != 0 || c.Retransmissions != 0 {
		t.Errorf("probes %d, retransmissions %d on a lossless wire", c.Probes, c.Retransmissions)
	}
}
