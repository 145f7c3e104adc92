package iwarp_test

import (
	"bytes"
	"fmt"
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/iwarp"
)

// TestInlineBackToBack: inline WQEs taken into one batch each keep their own
// octets. The writer takes each WQE into the same SendWork, whose inline copy
// the next one overwrote while the batch still referred to it: rsockets over
// iWARP (an inline WRITE, then an inline 4-octet SEND) placed the SEND's
// octets where the WRITE's belonged.
func TestInlineBackToBack(t *testing.T) {
	for _, markers := range []bool{false, true} {
		t.Run(fmt.Sprintf("markers=%v", markers), func(t *testing.T) {
			dp, lp := iwarp.ConnParams{Revision: 2, CRC: iwarp.CRCRequest}, iwarp.ConnParams{Revision: 2}
			if markers {
				dp.Markers, lp.Markers = iwarp.MarkersRequest, iwarp.MarkersRequest
			}
			inlineBackToBack(t, dp, lp)
		})
	}
}

func inlineBackToBack(t *testing.T, dp, lp iwarp.ConnParams) {
	a, b := pair(t, 1<<16, dp, lp)
	write := bytes.Repeat([]byte("W"), 200)
	send := []byte("sendSEND")
	b.qp.PostRecv(ib.RecvWR{WRID: 1, SGL: []ib.SGE{b.mr.SGE(0, 64)}})
	b.qp.PostRecv(ib.RecvWR{WRID: 2, SGL: []ib.SGE{b.mr.SGE(64, 64)}})
	if err := a.qp.PostSend(
		ib.SendWR{WRID: 10, Opcode: ib.WRRDMAWrite, Inline: true, InlineData: write, RKey: b.mr.RKey(), RemoteAddr: b.mr.Addr() + 1024, Signaled: true},
		ib.SendWR{WRID: 11, Opcode: ib.WRSend, Inline: true, InlineData: send, Signaled: true},
		ib.SendWR{WRID: 12, Opcode: ib.WRRDMAWrite, Inline: true, InlineData: write[:7], RKey: b.mr.RKey(), RemoteAddr: b.mr.Addr() + 2048, Signaled: true},
		ib.SendWR{WRID: 13, Opcode: ib.WRSend, Inline: true, InlineData: send[:4], Signaled: true},
	); err != nil {
		t.Fatal(err)
	}
	wait(t, a.scq, 4)
	wcs := wait(t, b.rcq, 2)
	for i, w := range []struct {
		off  int
		want []byte
	}{{1024, write}, {2048, write[:7]}, {0, send}, {64, send[:4]}} {
		if got := b.buf[w.off : w.off+len(w.want)]; !bytes.Equal(got, w.want) {
			t.Errorf("message %d at %d: %q, want %q", i, w.off, got, w.want)
		}
	}
	if wcs[0].ByteLen != uint32(len(send)) || wcs[1].ByteLen != 4 {
		t.Errorf("receives %v", wcs)
	}
}
