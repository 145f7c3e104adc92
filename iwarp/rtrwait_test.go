package iwarp_test

import (
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/iwarp"
)

// TestReadRTRToNoIRD: an initiator with the Read RTR (as rdma_cm's connect
// asks, rtrwait.go) connects to a softrdma responder whose IRD is none
// (rdma_cm's responder resources 0: perftest's ib_write_bw and ib_send_bw
// -R). The RTR is a Read Request and takes one IRD buffer: the responder
// grants 1 in its Reply rather than answer the RTR with a Terminate (which it
// did: every perftest -R over iWARP between softrdma's own ends failed). Dial
// returns once the RTR is answered, and a SEND then goes through.
func TestReadRTRToNoIRD(t *testing.T) {
	for _, c := range []struct {
		name     string
		dp, lp   iwarp.ConnParams
		peerIRD  int
		wantIRD  int
		wantORD  int
		wantRTR  iwarp.RTRFlags
		wantPeer bool
	}{
		{"IRD none", iwarp.ConnParams{PeerToPeer: true, RTR: iwarp.RTRRead, IRD: -1, ORD: 1},
			iwarp.ConnParams{IRD: -1, ORD: -1}, 1, 1, 1, iwarp.RTRRead, true},
		{"IRD 4", iwarp.ConnParams{PeerToPeer: true, RTR: iwarp.RTRRead, IRD: 2, ORD: 2},
			iwarp.ConnParams{IRD: 4, ORD: 4}, 4, 4, 2, iwarp.RTRRead, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := pair(t, 4096, c.dp, c.lp)
			na, nb := a.conn.Negotiated(), b.conn.Negotiated()
			if !na.PeerToPeer || na.RTR != c.wantRTR || na.PeerIRD != c.peerIRD || na.ORD != c.wantORD || nb.IRD != c.wantIRD {
				t.Errorf("negotiated: initiator %+v, responder %+v", na, nb)
			}
			copy(a.buf, "after the RTR")
			if err := b.qp.PostRecv(ib.RecvWR{WRID: 1, SGL: []ib.SGE{b.mr.SGE(0, 64)}}); err != nil {
				t.Fatal(err)
			}
			if err := a.qp.PostSend(ib.SendWR{WRID: 2, Opcode: ib.WRSend, SGL: []ib.SGE{a.mr.SGE(0, 13)}, Signaled: true}); err != nil {
				t.Fatal(err)
			}
			wantOK(t, wait(t, a.scq, 1)[0], 2, ib.WCSend)
			wantOK(t, wait(t, b.rcq, 1)[0], 1, ib.WCRecv)
			if string(b.buf[:13]) != "after the RTR" {
				t.Errorf("received %q", b.buf[:13])
			}
		})
	}
}
