package iwarp_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/iwarp"
)

// TestWritePolledByReadAt: an application that polls the last octet of the
// region a peer's RDMA WRITEs land in (perftest's write_lat; ib_send_bw's
// credit word over iWARP) with MR.ReadAt sees, once that octet has its new
// value, the whole message, and races nothing: the reader places the last
// octets of each WRITE segment under the engine's lock (Wire.WriteRemote),
// the rest before. Under the race detector (make test runs this package with
// -race) the poll raced the socket read that placed the octets.
func TestWritePolledByReadAt(t *testing.T) {
	for _, size := range []int{1, 4, 8, 9, 100, 3000} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			a, b := pair(t, 4096, iwarp.ConnParams{}, iwarp.ConnParams{})
			got := make([]byte, size)
			for k := 1; k <= 50; k++ {
				for i := range size {
					a.buf[i] = byte(k + i*7)
				}
				want := byte(k + (size-1)*7)
				if err := a.qp.PostSend(ib.SendWR{WRID: uint64(k), Opcode: ib.WRRDMAWrite, Signaled: true,
					SGL: []ib.SGE{a.mr.SGE(0, size)}, RKey: b.mr.RKey(), RemoteAddr: b.mr.Addr()}); err != nil {
					t.Fatal(err)
				}
				pollByte(t, b.mr, size-1, want)
				if _, err := b.mr.ReadAt(got, 0); err != nil {
					t.Fatal(err)
				}
				for i := range size {
					if got[i] != byte(k+i*7) {
						t.Fatalf("WRITE %d of %d octets: the last octet is in, octet %d is %d, want %d", k, size, i, got[i], byte(k+i*7))
					}
				}
				wantOK(t, wait(t, a.scq, 1)[0], uint64(k), ib.WCRDMAWrite)
			}
		})
	}
}

// pollByte spins on octet off of mr (MR.ReadAt) until it is want.
func pollByte(t *testing.T, mr *ib.MR, off int, want byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var b [1]byte
	for {
		if _, err := mr.ReadAt(b[:], int64(off)); err != nil {
			t.Fatal(err)
		}
		if b[0] == want {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("octet %d is %d, want %d", off, b[0], want)
		}
		time.Sleep(10 * time.Microsecond)
	}
}
