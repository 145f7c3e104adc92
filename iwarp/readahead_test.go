//go:build linux

package iwarp_test

import (
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/iwarp"
)

// TestReadAhead: the reader of a Linux TCP connection reads the FPDUs the
// socket holds with one system call, through its pooled buffer, not two
// system calls per 4 KiB FPDU as through the 2 KiB buffer it had; and it
// gives the buffer back once it has read everything, so that an idle
// connection holds none. Each case posts its WRITEs in one list, and checks
// the data, the reads (fewer than one per WRITE) and the buffer.
func TestReadAhead(t *testing.T) {
	const count = 32
	for _, tc := range []struct {
		name string
		size int
	}{
		{"64B", 64},
		{"4KiB", 4096},
		{"40KiB", 40 << 10}, // beyond rxCopyMax: payloads read in place
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := pair(t, count*tc.size, iwarp.ConnParams{}, iwarp.ConnParams{})
			fill(a.buf, 3)
			barrier(t, a, b)
			before := b.conn.ReaderReads()
			wrs := make([]ib.SendWR, count)
			for i := range wrs {
				wrs[i] = ib.SendWR{WRID: uint64(i), Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{a.mr.SGE(i*tc.size, tc.size)},
					RKey: b.mr.RKey(), RemoteAddr: b.mr.Addr() + uint64(i*tc.size), Signaled: i == count-1}
			}
			if err := a.qp.PostSend(wrs...); err != nil {
				t.Fatal(err)
			}
			wantOK(t, wait(t, a.scq, 1)[0], count-1, ib.WCRDMAWrite)
			barrier(t, a, b) // the WRITEs are placed
			for i := range a.buf {
				if a.buf[i] != b.buf[i] {
					t.Fatalf("octet %d: %#x, want %#x", i, b.buf[i], a.buf[i])
				}
			}
			// The barrier's SENDs took a read each.
			if reads := b.conn.ReaderReads() - before; tc.size <= 4096 && reads >= count {
				t.Errorf("%d read system calls for %d WRITEs of %d octets, want fewer than one per WRITE", reads, count, tc.size)
			}
			// The readers give their buffers back before they wait on the
			// poller: poll (bounded) until both do.
			for i := 0; ; i++ {
				if !a.conn.ReaderHoldsBuffer() && !b.conn.ReaderHoldsBuffer() {
					break
				}
				if i == 1000 {
					t.Fatal("an idle reader holds its read-ahead buffer")
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
}
