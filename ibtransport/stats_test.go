package ibtransport_test

import (
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/ibtransport/ibtest"
)

// TestQPStats sends N 64-byte SENDs from A to B over the test wire, losing
// the packets a filter picks, and checks both sides' QPStats: packets and
// bytes each way, ACKs, the NAK a gap draws, the go-back-N retransmissions
// and the drops of the packets after the gap; then that a destroyed QP's
// counts move to the retired sum, so that the totals stay.
func TestQPStats(t *testing.T) {
	const n, size = 4, 64
	const pkt = 12 + size // BTH, payload (a multiple of 4: no pad)
	tests := []struct {
		name string
		drop map[int]bool // A→B packet indexes lost
		// A's counters, then B's (only the fields below are compared).
		a, b ib.QPCounters
	}{
		{"clean", nil,
			ib.QPCounters{PacketsOut: n, BytesOut: n * pkt, PacketsIn: 1, BytesIn: 16, AcksReceived: 1},
			ib.QPCounters{PacketsIn: n, BytesIn: n * pkt, PacketsOut: 1, BytesOut: 16, AcksSent: 1}},
		{"second lost", map[int]bool{1: true},
			// A sends 4, the NAK sends 2..4 again (3 retransmissions).
			// B gets 3 + 3: the first is ACKed, the third (the gap)
			// NAKed and, like the fourth, dropped out of sequence;
			// the three sent again are ACKed.
			ib.QPCounters{PacketsOut: n + 3, BytesOut: (n + 3) * pkt, PacketsIn: 3, BytesIn: 3 * 16, AcksReceived: 2,
				Retransmissions: 3, NAKsReceived: [5]uint64{1}},
			ib.QPCounters{PacketsIn: n - 1 + 3, BytesIn: (n + 2) * pkt, PacketsOut: 3, BytesOut: 3 * 16, AcksSent: 2,
				NAKsSent: [5]uint64{1}, Drops: dropsOf(ib.DropOutOfSequence, 2)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newRC(t)
			p.Wire.Filter = func(f *ibtest.Frame) ibtest.Action {
				return ibtest.Action{Drop: f.Dir == ibtest.AToB && tt.drop[f.Index]}
			}
			src := regMR(t, p.A.PD, pattern(n*size, 1), allAccess)
			dst := regMR(t, p.B.PD, make([]byte, n*size), allAccess)
			for i := range n {
				postRecv(t, p.B.QP, ib.RecvWR{WRID: uint64(i), SGL: []ib.SGE{dst.SGE(i*size, size)}})
			}
			for i := range n {
				post(t, p.A.QP, ib.SendWR{WRID: uint64(i), Opcode: ib.WRSend, SGL: []ib.SGE{src.SGE(i*size, size)}, Signaled: i == n-1})
			}
			complete(t, p, p.B.CQ, n)
			complete(t, p, p.A.CQ, 1)
			for _, side := range []struct {
				name string
				e    *ibtest.Endpoint
				want ib.QPCounters
			}{{"A", p.A, tt.a}, {"B", p.B, tt.b}} {
				live, retired := side.e.Ctx.QPStats()
				if len(live) != 1 || live[0].QPN != side.e.QP.QPN() || live[0].Type != ib.QPTypeRC || live[0].State != ib.QPStateRTS {
					t.Fatalf("%s: QPStats = %+v, want QP 0x%x RC RTS", side.name, live, side.e.QP.QPN())
				}
				if retired != (ib.QPCounters{}) {
					t.Errorf("%s: retired %+v before any Destroy", side.name, retired)
				}
				if got := live[0].Counters; got != side.want {
					t.Errorf("%s: counters\n%+v\nwant\n%+v", side.name, got, side.want)
				}
				if got := side.e.QP.Counters(); got != live[0].Counters {
					t.Errorf("%s: QP.Counters %+v != QPStats' %+v", side.name, got, live[0].Counters)
				}
				if err := side.e.QP.Destroy(); err != nil {
					t.Fatal(err)
				}
				live, retired = side.e.Ctx.QPStats()
				if len(live) != 0 || retired != side.want {
					t.Errorf("%s: after Destroy QPStats = %+v, retired %+v; want none, retired %+v", side.name, live, retired, side.want)
				}
			}
		})
	}
}

func dropsOf(r ib.DropReason, n uint64) (d [ib.NumDropReasons]uint64) {
	d[r] = n
	return d
}
