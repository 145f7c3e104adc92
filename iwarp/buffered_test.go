package iwarp_test

import (
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/iwarp"
)

// TestBufferedFPDUs: small WRITEs, SENDs and Read Responses that the reader
// finds whole in its read-ahead buffer are executed there, each by one engine
// call (readBuffered: key check, copy and completion under one acquisition of
// the Context's lock, where the general path takes it three or four times),
// and land byte-exact. Each case posts its WRs in one list (one writev), so
// that most of their FPDUs reach the peer's buffer together.
func TestBufferedFPDUs(t *testing.T) {
	const count, size = 32, 64
	for _, op := range []ib.WROpcode{ib.WRRDMAWrite, ib.WRSend, ib.WRRDMARead} {
		t.Run(op.String(), func(t *testing.T) {
			a, b := pair(t, count*size, iwarp.ConnParams{}, iwarp.ConnParams{})
			src, dst := a, b // READ: b's memory is read into a's
			if op == ib.WRRDMARead {
				src, dst = b, a
			}
			fill(src.buf, 5)
			barrier(t, a, b)
			if op == ib.WRSend {
				for i := 0; i < count; i++ {
					if err := b.qp.PostRecv(ib.RecvWR{WRID: uint64(i), SGL: []ib.SGE{b.mr.SGE(i*size, size)}}); err != nil {
						t.Fatal(err)
					}
				}
			}
			before := dst.conn.ReaderBuffered()
			wrs := make([]ib.SendWR, count)
			for i := range wrs {
				wrs[i] = ib.SendWR{WRID: uint64(i), Opcode: op, SGL: []ib.SGE{a.mr.SGE(i*size, size)},
					RKey: b.mr.RKey(), RemoteAddr: b.mr.Addr() + uint64(i*size), Signaled: true}
				if op == ib.WRSend {
					wrs[i].RKey, wrs[i].RemoteAddr = 0, 0
				}
			}
			if err := a.qp.PostSend(wrs...); err != nil {
				t.Fatal(err)
			}
			for i, wc := range wait(t, a.scq, count) {
				wantOK(t, wc, uint64(i), opWC(op))
			}
			if op == ib.WRSend {
				for i, wc := range wait(t, b.rcq, count) {
					wantOK(t, wc, uint64(i), ib.WCRecv)
					if wc.ByteLen != size {
						t.Fatalf("receive %d: %d octets", i, wc.ByteLen)
					}
				}
			}
			barrier(t, a, b) // the WRITEs are placed
			for i := range src.buf {
				if src.buf[i] != dst.buf[i] {
					t.Fatalf("octet %d: %#x, want %#x", i, dst.buf[i], src.buf[i])
				}
			}
			if n := dst.conn.ReaderBuffered() - before; n < count/2 {
				t.Errorf("%d of %d FPDUs executed from the read-ahead buffer, want at least half", n, count)
			}
		})
	}
}

func opWC(op ib.WROpcode) ib.WCOpcode {
	switch op {
	case ib.WRSend:
		return ib.WCSend
	case ib.WRRDMARead:
		return ib.WCRDMARead
	}
	return ib.WCRDMAWrite
}
