package iwarp

import "testing"

// TestExtensionsNotFromAnEcho: siw echoes the Request's reserved flag bits in
// its Reply, so the offer bit coming back must not switch the RFC 7306
// extensions on; only a softrdma responder's acknowledgement bit does.
func TestExtensionsNotFromAnEcho(t *testing.T) {
	p := &ConnParams{}
	reqF, err := requestFrame(p, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := uint8(MPAFlagSoftRDMAExtensions | MPAFlagSoftRDMALargeFPDU); reqF.Reserved != want {
		t.Fatalf("request reserved bits %#x, want the offer %#x", reqF.Reserved, want)
	}
	req, err := reqF.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		reserved uint8
		want     bool
	}{
		{"siw echo of the offer", MPAFlagSoftRDMAExtensions | MPAFlagSoftRDMALargeFPDU, false},
		{"no bits", 0, false},
		{"softrdma acknowledgement", MPAFlagSoftRDMAExtensionsAck, true},
	} {
		repF := &MPAFrameFields{Revision: reqF.Revision, Enhanced: reqF.Enhanced, Reserved: tc.reserved,
			PrivateData: buildIRDORD(1, 1, false, 0)}
		rep, err := repF.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		neg, _, _, err := negotiateAsInitiator(p, MPAFrame(req), MPAFrame(rep), 1, 1)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if neg.Extensions != tc.want {
			t.Errorf("%s: Extensions = %v, want %v", tc.name, neg.Extensions, tc.want)
		}
		// The large-FPDU bit counts only beside an acknowledgement.
		if neg.LargeFPDU {
			t.Errorf("%s: LargeFPDU without the large-FPDU bit in the reply", tc.name)
		}
		repF.Reserved |= MPAFlagSoftRDMALargeFPDU
		rep, _ = repF.Append(nil)
		neg, _, _, _ = negotiateAsInitiator(p, MPAFrame(req), MPAFrame(rep), 1, 1)
		if neg.LargeFPDU != tc.want {
			t.Errorf("%s with the large-FPDU bit: LargeFPDU = %v, want %v", tc.name, neg.LargeFPDU, tc.want)
		}
	}
	// A softrdma responder acknowledges an offer, and stays silent without one.
	for _, offered := range []bool{true, false} {
		f := *reqF
		if !offered {
			f.Reserved = 0
		}
		b, _ := f.Append(nil)
		v := requestVerdict{rev: f.Revision, enhanced: f.Enhanced}
		rep, err := replyFrame(p, MPAFrame(b), v, 1, 1, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := rep.Reserved == MPAFlagSoftRDMAExtensionsAck|MPAFlagSoftRDMALargeFPDU; got != offered {
			t.Errorf("offered %v: reply reserved bits %#x", offered, rep.Reserved)
		}
	}
}
