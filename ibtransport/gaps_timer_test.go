package ibtransport_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/ibtransport/ibtest"
)

// TestRCTimeoutZeroIsInfinite: Timeout 0 means no local ACK timeout (IBTA
// 9.7.6.1.1; rxe arms no retransmission timer then). With every request lost and
// the peer silent, a day of virtual time passes without a timeout, a
// retransmission, a completion or even an armed deadline, and the QP stays in
// RTS. Timeout 1 on the same wire does time out (the control). The QP is alive:
// a later message reaches the responder, whose sequence NAK makes the requester
// resend the lost one, and both complete.
func TestRCTimeoutZeroIsInfinite(t *testing.T) {
	for _, timeout := range []uint8{0, 1} {
		t.Run(fmt.Sprintf("timeout %d", timeout), func(t *testing.T) {
			o := ibtest.DefaultConnOptions()
			o.Timeout = timeout
			p := newPair(t, ib.QPTypeRC, o)
			src := regMR(t, p.A.PD, pattern(3000, 5), 0)
			dst := regMR(t, p.B.PD, make([]byte, 6000), allAccess)
			lose := true
			p.Wire.Filter = func(f *ibtest.Frame) ibtest.Action { return ibtest.Action{Drop: lose && f.Dir == ibtest.AToB} }
			post(t, p.A.QP, ib.SendWR{WRID: 1, Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{src.SGE(0, 3000)},
				RemoteAddr: dst.Addr(), RKey: dst.RKey(), Signaled: true})
			start := p.Wire.Clock.Now()
			p.Wire.RunFor(24*time.Hour, 1_000_000)
			c := p.A.QP.Counters()
			if timeout != 0 {
				wantWC(t, complete(t, p, p.A.CQ, 1)[0], 1, ib.WCRDMAWrite, ib.WCRetryExcErr)
				if c.Timeouts != 8 {
					t.Fatalf("%d timeouts with timeout 1 and 7 retries, want 8", c.Timeouts)
				}
				return
			}
			if elapsed := p.Wire.Clock.Now().Sub(start); elapsed < 24*time.Hour {
				t.Fatalf("only %v of virtual time passed", elapsed)
			}
			if c.Timeouts != 0 || c.Retransmissions != 0 || p.Wire.Sent(ibtest.AToB) != 3 {
				t.Fatalf("timeouts %d, retransmissions %d, packets sent %d; want 0, 0, 3", c.Timeouts, c.Retransmissions, p.Wire.Sent(ibtest.AToB))
			}
			if d, ok := p.A.Ctx.NextDeadline(); ok {
				t.Fatalf("a deadline is armed at %v with an infinite timeout", d)
			}
			if s := p.A.QP.State(); s != ib.QPStateRTS {
				t.Fatalf("state %s", s)
			}
			var wc [1]ib.WC
			if n := p.A.CQ.Poll(wc[:]); n != 0 {
				t.Fatalf("completion %v", wc[0])
			}
			lose = false
			post(t, p.A.QP, ib.SendWR{WRID: 2, Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{src.SGE(0, 3000)},
				RemoteAddr: dst.Addr() + 3000, RKey: dst.RKey(), Signaled: true})
			wcs := complete(t, p, p.A.CQ, 2)
			wantWC(t, wcs[0], 1, ib.WCRDMAWrite, ib.WCSuccess)
			wantWC(t, wcs[1], 2, ib.WCRDMAWrite, ib.WCSuccess)
			if c := p.A.QP.Counters(); c.Timeouts != 0 || c.NAKsReceived[ib.NAKPSNSequenceError] != 1 {
				t.Fatalf("timeouts %d, sequence NAKs %d; want 0 and 1", c.Timeouts, c.NAKsReceived[ib.NAKPSNSequenceError])
			}
			if !bytes.Equal(dst.Buf()[:3000], pattern(3000, 5)) || !bytes.Equal(dst.Buf()[3000:], pattern(3000, 5)) {
				t.Fatal("data differs")
			}
		})
	}
}

// nakFilter drops the A→B packets whose index drop selects and delivers each
// B→A sequence NAK 1+dups times.
func nakFilter(drop func(i int) bool, dups int) func(*ibtest.Frame) ibtest.Action {
	return func(f *ibtest.Frame) ibtest.Action {
		if f.Dir == ibtest.AToB {
			return ibtest.Action{Drop: drop(f.Index)}
		}
		var pk ib.Packet
		if pk.Decode(f.Data) == nil && pk.AETH != nil && pk.Opcode() == ib.OpcodeRCAcknowledge &&
			pk.AETH.Syndrome().Kind() == ib.AETHKindNAK && pk.AETH.Syndrome().NAKCode() == ib.NAKPSNSequenceError {
			return ibtest.Action{Duplicates: dups}
		}
		return ibtest.Action{}
	}
}

// TestRCSequenceNAKRetries: a PSN sequence NAK costs one retry (IBTA 9.7.5.2.2).
// With Timeout 0 (no timer) the NAK is the only way to recover, so the outcome
// shows the NAK path alone:
//   - RetryCnt 0: the first sequence NAK ends the WR with IBV_WC_RETRY_EXC_ERR,
//     nothing is resent, the WR after it is flushed and the QP is in ERR;
//   - RetryCnt 1: the NAK's retry resends and both messages complete; the second
//     NAK acknowledges the PSN the first resend delivered, that progress resets
//     the counter, so the second loss (in the resend) is recovered too;
//   - RetryCnt 1 with each NAK delivered four times: copies of a NAK for the PSN
//     already being resent are not new retries, so they do not exhaust it.
func TestRCSequenceNAKRetries(t *testing.T) {
	cases := []struct {
		name    string
		retries uint8
		drop    func(i int) bool
		dups    int
		fail    bool
		naks    uint64 // sequence NAKs the requester receives
	}{
		{"no retries", 0, func(i int) bool { return i == 1 }, 0, true, 1},
		// Packet 1 (PSN 1) is lost; the resend from PSN 1 loses packet 7 (PSN 2).
		{"one retry per loss", 1, func(i int) bool { return i == 1 || i == 7 }, 0, false, 2},
		{"duplicated NAKs", 1, func(i int) bool { return i == 1 }, 3, false, 4},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := ibtest.DefaultConnOptions()
			o.Timeout, o.RetryCnt = 0, c.retries
			p := newPair(t, ib.QPTypeRC, o)
			src := regMR(t, p.A.PD, pattern(3072, 3), 0)
			dst := regMR(t, p.B.PD, make([]byte, 6144), allAccess)
			p.Wire.Filter = nakFilter(c.drop, c.dups)
			post(t, p.A.QP,
				ib.SendWR{WRID: 1, Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{src.SGE(0, 3072)}, RemoteAddr: dst.Addr(), RKey: dst.RKey(), Signaled: true},
				ib.SendWR{WRID: 2, Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{src.SGE(0, 3072)}, RemoteAddr: dst.Addr() + 3072, RKey: dst.RKey(), Signaled: true})
			wcs := complete(t, p, p.A.CQ, 2)
			cnt := p.A.QP.Counters()
			if cnt.Timeouts != 0 {
				t.Fatalf("%d timeouts with an infinite timeout", cnt.Timeouts)
			}
			if c.fail {
				wantWC(t, wcs[0], 1, ib.WCRDMAWrite, ib.WCRetryExcErr)
				wantWC(t, wcs[1], 2, ib.WCRDMAWrite, ib.WCWRFlushErr)
				if s := p.A.QP.State(); s != ib.QPStateErr {
					t.Fatalf("state %s", s)
				}
				if cnt.Retransmissions != 0 || cnt.NAKsReceived[ib.NAKPSNSequenceError] != c.naks {
					t.Fatalf("retransmissions %d, sequence NAKs %d; want 0 and 1", cnt.Retransmissions, cnt.NAKsReceived[ib.NAKPSNSequenceError])
				}
				return
			}
			wantWC(t, wcs[0], 1, ib.WCRDMAWrite, ib.WCSuccess)
			wantWC(t, wcs[1], 2, ib.WCRDMAWrite, ib.WCSuccess)
			if n := cnt.NAKsReceived[ib.NAKPSNSequenceError]; n != c.naks {
				t.Fatalf("%d sequence NAKs received, want %d", n, c.naks)
			}
			if !bytes.Equal(dst.Buf()[:3072], pattern(3072, 3)) || !bytes.Equal(dst.Buf()[3072:], pattern(3072, 3)) {
				t.Fatal("data differs")
			}
			noMore(t, p, p.A.CQ)
		})
	}
}
