package iwarp_test

import (
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/iwarp"
)

// TestQPCounters: an iWARP QP counts its FPDUs and their octets both ways (what
// one side sent is exactly what the other received, markers and CRC included),
// and the counts outlive the connection.
func TestQPCounters(t *testing.T) {
	for _, c := range []struct {
		name string
		p    iwarp.ConnParams
	}{
		{"plain", iwarp.ConnParams{}},
		{"markers and CRC", iwarp.ConnParams{Markers: iwarp.MarkersRequest, CRC: iwarp.CRCRequire}},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := pair(t, 8192, c.p, c.p)
			for i := range 3 {
				b.qp.PostRecv(ib.RecvWR{WRID: uint64(i), SGL: []ib.SGE{b.mr.SGE(0, 200)}})
				a.qp.PostSend(ib.SendWR{WRID: uint64(i), Opcode: ib.WRSend, SGL: []ib.SGE{a.mr.SGE(0, 100)}, Signaled: true})
			}
			a.qp.PostSend(ib.SendWR{WRID: 3, Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{a.mr.SGE(0, 3000)},
				RKey: b.mr.RKey(), RemoteAddr: b.mr.Addr() + 1000, Signaled: true})
			a.qp.PostSend(ib.SendWR{WRID: 4, Opcode: ib.WRRDMARead, SGL: []ib.SGE{a.mr.SGE(4096, 2000)},
				RKey: b.mr.RKey(), RemoteAddr: b.mr.Addr(), Signaled: true})
			wait(t, a.scq, 5)
			wait(t, b.rcq, 3)
			a.conn.Close()
			waitDone(t, a.conn)
			waitDone(t, b.conn)
			ka, kb := a.qp.Counters(), b.qp.Counters()
			// a: three Sends, the Write, the Read Request (at least five FPDUs);
			// b: the Read Response.
			if ka.PacketsOut < 5 || ka.BytesOut < 3*100+3000 || kb.PacketsOut < 1 || kb.BytesOut < 2000 {
				t.Fatalf("counters: a %+v, b %+v", ka, kb)
			}
			if ka.PacketsOut != kb.PacketsIn || ka.BytesOut != kb.BytesIn || kb.PacketsOut != ka.PacketsIn || kb.BytesOut != ka.BytesIn {
				t.Fatalf("a sent %d FPDUs (%d octets), b received %d (%d); b sent %d (%d), a received %d (%d)",
					ka.PacketsOut, ka.BytesOut, kb.PacketsIn, kb.BytesIn, kb.PacketsOut, kb.BytesOut, ka.PacketsIn, ka.BytesIn)
			}
			if ka.TerminatesSent != 0 || kb.TerminatesReceived != 0 {
				t.Fatalf("Terminates counted in an orderly close: a %+v, b %+v", ka, kb)
			}
		})
	}
}

// TestQPCountersTerminate: a Terminate sent and one received are counted, and
// the received FPDU's octets are exactly the ones the peer sent.
func TestQPCountersTerminate(t *testing.T) {
	for _, c := range []struct {
		name       string
		send       func(r *raw, s *side) []byte // returns the octets sent
		sent, recv uint64
	}{
		{"sent", func(r *raw, s *side) []byte {
			b, _ := iwarp.AppendFPDU(nil, false, tagged(iwarp.OpWrite, 0xdeadbe00, 0x1000, true), []byte("payload"))
			r.write(b)
			return b
		}, 1, 0},
		{"received", func(r *raw, s *side) []byte {
			tf := iwarp.TerminateFields{Layer: iwarp.LayerRDMAP, EType: iwarp.ETypeRDMAPRemoteProtection, ErrorCode: iwarp.ECodeRDMAPInvalidSTag}
			tb := make([]byte, tf.Len())
			tf.Encode(tb)
			b, _ := iwarp.AppendFPDU(nil, false, untagged(iwarp.OpTerminate, 1, 0, true), tb)
			r.write(b)
			return b
		}, 0, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, ln, accepted := listening(t, iwarp.ConnParams{})
			r := dialRaw(t, ln.Addr().String(), request(false, false, 4, 4))
			conn := <-accepted
			b := c.send(r, s)
			r.waitEOF()
			r.nc.Close()
			waitDone(t, conn)
			k := s.qp.Counters()
			if k.TerminatesSent != c.sent || k.TerminatesReceived != c.recv || k.PacketsIn != 1 || k.BytesIn != uint64(len(b)) {
				t.Fatalf("counters %+v, want %d Terminates sent, %d received, 1 FPDU of %d octets in",
					k, c.sent, c.recv, len(b))
			}
			r.mu.Lock()
			out := len(r.in)
			r.mu.Unlock()
			if k.PacketsOut != c.sent || k.BytesOut != uint64(out) {
				t.Fatalf("counters %+v, want %d FPDUs of %d octets out", k, c.sent, out)
			}
		})
	}
}
