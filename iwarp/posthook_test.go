package iwarp_test

import (
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/iwarp"
)

// TestSendFromPoster: in a ping-pong (each side posts when its send queue is
// empty) the posts are framed and written by the posting goroutine, not
// handed to the writer goroutine, and the messages arrive intact; a side
// whose writer is busy leaves the post to it, so the count is only required
// to be positive.
func TestSendFromPoster(t *testing.T) {
	const rounds = 32
	a, b := pair(t, 4096, iwarp.ConnParams{}, iwarp.ConnParams{})
	fill(a.buf, 9)
	fill(b.buf, 11)
	for i := 0; i < rounds; i++ {
		for _, d := range [][2]*side{{a, b}, {b, a}} {
			from, to := d[0], d[1]
			if err := to.qp.PostRecv(ib.RecvWR{WRID: uint64(i), SGL: []ib.SGE{to.mr.SGE(2048, 64)}}); err != nil {
				t.Fatal(err)
			}
			if err := from.qp.PostSend(ib.SendWR{WRID: uint64(i), Opcode: ib.WRSend, SGL: []ib.SGE{from.mr.SGE(i, 64)},
				Signaled: true}); err != nil {
				t.Fatal(err)
			}
			wantOK(t, wait(t, to.rcq, 1)[0], uint64(i), ib.WCRecv)
			wantOK(t, wait(t, from.scq, 1)[0], uint64(i), ib.WCSend)
			if got, want := to.buf[2048:2048+64], from.buf[i:i+64]; string(got) != string(want) {
				t.Fatalf("round %d: received %x, want %x", i, got, want)
			}
		}
	}
	if a.conn.PosterPasses() == 0 || b.conn.PosterPasses() == 0 {
		t.Errorf("posts sent from the posting goroutine: %d and %d, want some on each side",
			a.conn.PosterPasses(), b.conn.PosterPasses())
	}
}
