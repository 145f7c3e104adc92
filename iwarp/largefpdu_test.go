package iwarp_test

import (
	"fmt"
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/iwarp"
)

// maxULPDU returns the longest ULPDU among the FPDUs r saw sent, and the
// number of FPDUs (the received direction is decoded too, for its MPA frame).
func (r *recorder) maxULPDU(t testing.TB) (longest, n int) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.replayLocked(func(sent bool) func(*iwarp.Record) {
		return func(rec *iwarp.Record) {
			if rec.Err != nil {
				t.Errorf("record at %d (sent %v): %v", rec.Offset, sent, rec.Err)
			}
			if sent && rec.Kind == iwarp.RecordFPDU {
				longest, n = max(longest, int(rec.FPDU.ULPDULength())), n+1
			}
		}
	})
	return longest, n
}

// TestLargeFPDUs: two softrdma peers send FPDUs of up to 65534 octets, longer
// than a TCP segment (loopback's MSS is about 65483), and the data arrives
// intact; with SegmentFPDUs, markers, a listener whose MaxRecvULPDU is lowered
// (65000: above any MSS, below 65535), or without the extensions, every FPDU
// fits the MSS (RFC 5044 §8).
func TestLargeFPDUs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		dp, lp iwarp.ConnParams
		large  bool // the dialer sends large FPDUs
		lLarge bool // the listener does
	}{
		{"default", iwarp.ConnParams{}, iwarp.ConnParams{}, true, true},
		{"crc", iwarp.ConnParams{CRC: iwarp.CRCRequest}, iwarp.ConnParams{}, true, true},
		{"markers", iwarp.ConnParams{Markers: iwarp.MarkersRequest}, iwarp.ConnParams{Markers: iwarp.MarkersRequest}, false, false},
		{"dialer segments", iwarp.ConnParams{SegmentFPDUs: true}, iwarp.ConnParams{}, false, true},
		{"listener segments", iwarp.ConnParams{}, iwarp.ConnParams{SegmentFPDUs: true}, true, false},
		{"listener lowers MaxRecvULPDU", iwarp.ConnParams{}, iwarp.ConnParams{MaxRecvULPDU: 65000}, false, true},
		{"no extensions", iwarp.ConnParams{NoExtensions: true}, iwarp.ConnParams{}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rec recorder
			tc.dp.Observe = rec.observe
			a, b := pair(t, 2<<20+4096, tc.dp, tc.lp)
			neg := a.conn.Negotiated()
			if neg.LargeFPDU != tc.large {
				t.Fatalf("dialer LargeFPDU = %v, want %v (%+v)", neg.LargeFPDU, tc.large, neg)
			}
			if l := b.conn.Negotiated().LargeFPDU; l != tc.lLarge {
				t.Fatalf("listener LargeFPDU = %v, want %v", l, tc.lLarge)
			}
			if neg.EMSS == 0 {
				t.Fatal("no TCP MSS on a loopback TCP connection")
			}
			want := iwarp.MULPDU(neg.EMSS, neg.SendMarkers)
			if tc.large {
				want = iwarp.MaxULPDULen - 1
			}
			if neg.MULPDU != want {
				t.Fatalf("MULPDU %d, want %d (EMSS %d)", neg.MULPDU, want, neg.EMSS)
			}
			const n = 1 << 20
			seed := byte(7)
			for _, op := range sizedOps {
				if op.name != "WRITE" && op.name != "SEND" && op.name != "READ" {
					continue
				}
				seed++
				t.Run(fmt.Sprintf("%s/%d", op.name, n), func(t *testing.T) { op.run(t, a, b, n, seed) })
			}
			a.conn.Close()
			waitDone(t, b.conn)
			if a.qp.State() != ib.QPStateErr {
				t.Fatalf("state after close: %s", a.qp.State())
			}
			longest, fpdus := rec.maxULPDU(t)
			if longest != want {
				t.Errorf("longest ULPDU sent %d in %d FPDUs, want the MULPDU %d", longest, fpdus, want)
			}
			if tc.large && longest <= neg.EMSS {
				t.Errorf("longest FPDU %d fits the MSS %d: no large FPDUs", longest, neg.EMSS)
			}
			t.Logf("EMSS %d MULPDU %d: %d FPDUs sent, longest ULPDU %d", neg.EMSS, neg.MULPDU, fpdus, longest)
		})
	}
}
