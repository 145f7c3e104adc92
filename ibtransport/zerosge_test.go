package ibtransport_test

import (
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
)

// TestExternalZeroLengthSGE: an SGE of zero bytes names no memory, so its
// L_Key is not checked (siw_check_sgl_tx: "do not check stag for a zero
// length sge"; rxe's copy_data likewise): an iWARP QP's SEND and READ with
// such an SGE beside a good one go out, where a bad L_Key on an SGE with
// bytes fails with a local protection error.
func TestExternalZeroLengthSGE(t *testing.T) {
	for _, c := range []struct {
		name string
		op   ib.WROpcode
		len  uint32 // of the SGE with the bad L_Key
		ok   bool
	}{
		{"SEND, zero-length SGE", ib.WRSend, 0, true},
		{"READ, zero-length SGE", ib.WRRDMARead, 0, true},
		{"SEND, SGE with bytes", ib.WRSend, 4, false},
		{"READ, SGE with bytes", ib.WRRDMARead, 4, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newExtQP(t, 1, nil)
			buf := make([]byte, 64)
			mr := regMR(t, e.pd, buf, allAccess)
			bad := ib.SGE{Addr: 1, Length: c.len, LKey: 0x4242}
			post(t, e.qp, ib.SendWR{WRID: 5, Opcode: c.op, SGL: []ib.SGE{bad, mr.SGE(0, 16)}, Signaled: true,
				RemoteAddr: 0x1000, RKey: 0x77})
			if !c.ok {
				e.none(t)
				wantWC(t, pollN(t, e.scq, 1)[0], 5, 0, ib.WCLocProtErr)
				return
			}
			if sw := e.next(t); sw.WRID != 5 || sw.Length != 16 {
				t.Fatalf("NextSend handed out wr %d of %d bytes, want wr 5 of 16", sw.WRID, sw.Length)
			}
			pollN(t, e.scq, 0)
		})
	}
}
