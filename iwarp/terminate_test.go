package iwarp

import (
	"bytes"
	"errors"
	"testing"
)

func TestTerminateRoundTrip(t *testing.T) {
	rrFPDU := mustHex(t, goldenReadRequestFPDU)
	rrDDP := DDP(FPDU(rrFPDU).ULPDU())
	wrDDP := DDP(FPDU(mustHex(t, goldenWriteFPDU)).ULPDU())
	tests := []struct {
		name string
		f    TerminateFields
		len  int
	}{
		{"control only", TerminateFields{Layer: LayerLLP, EType: ETypeLLPMPA, ErrorCode: ECodeMPACRC}, 4},
		{"tagged header", TerminateFields{Layer: LayerDDP, EType: ETypeDDPTaggedBuffer,
			ErrorCode: ECodeDDPTaggedInvalidSTag, SegmentLengthValid: true,
			DDPSegmentLength: uint16(len(wrDDP)), DDPHeader: wrDDP.Header()}, 4 + 2 + 14},
		{"read request", TerminateFields{Layer: LayerRDMAP, EType: ETypeRDMAPRemoteProtection,
			ErrorCode: ECodeRDMAPBaseBounds, SegmentLengthValid: true,
			DDPSegmentLength: uint16(len(rrDDP)), DDPHeader: rrDDP.Header(),
			RDMAHeader: rrDDP.Payload()}, 4 + 2 + 18 + 28},
		{"rdma header only", TerminateFields{Layer: LayerRDMAP, EType: ETypeRDMAPRemoteOperation,
			ErrorCode: ECodeRDMAPUnexpectedOpcode, RDMAHeader: rrDDP.Payload()}, 4 + 28},
	}
	for _, tc := range tests {
		b := make([]byte, tc.f.Len()+3)
		n, err := tc.f.Encode(b)
		if err != nil || n != tc.len {
			t.Fatalf("%s: %d, %v", tc.name, n, err)
		}
		m, err := ParseTerminate(b)
		if err != nil || len(m) != tc.len {
			t.Fatalf("%s: %d, %v", tc.name, len(m), err)
		}
		g := m.Fields()
		if g.Layer != tc.f.Layer || g.EType != tc.f.EType || g.ErrorCode != tc.f.ErrorCode ||
			g.SegmentLengthValid != tc.f.SegmentLengthValid || g.DDPSegmentLength != tc.f.DDPSegmentLength ||
			!bytes.Equal(g.DDPHeader, tc.f.DDPHeader) || !bytes.Equal(g.RDMAHeader, tc.f.RDMAHeader) ||
			m.Reserved() != 0 {
			t.Errorf("%s: %+v, want %+v", tc.name, g, tc.f)
		}
		// A terminated Read Request header: the DDP segment length and the copied header
		// are the first 20 octets of the offending FPDU.
		if tc.name == "read request" && !bytes.Equal(b[4:4+2+18+28], rrFPDU[:48]) {
			t.Errorf("copied headers %x, want %x", b[4:52], rrFPDU[:48])
		}
		if _, err := ParseTerminate(b[:tc.len-1]); tc.len > 4 && !errors.Is(err, ErrTruncated) {
			t.Errorf("%s cut: %v", tc.name, err)
		}
	}
	// The control word's layout: layer, etype, code, M D R.
	b := make([]byte, 4)
	tm := Terminate(b)
	tm.SetLayer(LayerDDP)
	tm.SetEType(ETypeDDPUntaggedBuffer)
	tm.SetErrorCode(ECodeDDPUntaggedNoBuffer)
	tm.SetSegmentLengthValid(true)
	tm.SetRDMAHeaderIncluded(true)
	if !bytes.Equal(b, []byte{0x12, 0x02, 0xa0, 0}) {
		t.Errorf("%x", b)
	}
	tm.SetRDMAHeaderIncluded(false)
	tm.SetDDPHeaderIncluded(true)
	if b[2] != 0xc0 || !tm.DDPHeaderIncluded() || tm.RDMAHeaderIncluded() {
		t.Errorf("%x", b)
	}
	if _, err := ParseTerminate(b); !errors.Is(err, ErrTruncated) {
		t.Errorf("D without header: %v", err)
	}
	bad := TerminateFields{DDPHeader: make([]byte, 15)}
	if _, err := bad.Encode(make([]byte, 64)); !errors.Is(err, ErrBadValue) {
		t.Errorf("15-octet DDP header: %v", err)
	}
	bad = TerminateFields{RDMAHeader: make([]byte, 27)}
	if _, err := bad.Encode(make([]byte, 64)); !errors.Is(err, ErrBadValue) {
		t.Errorf("27-octet RDMA header: %v", err)
	}
}

func TestTerminateNames(t *testing.T) {
	// tshark 4.0's iwarp_rdma.term_* value strings.
	tests := []struct {
		l            TerminateLayer
		etype, code  uint8
		layer, ename string
		cname        string
	}{
		{LayerRDMAP, ETypeRDMAPLocalCatastrophic, ECodeRDMAPLocalCatastrophic, "RDMA", "Local Catastrophic Error", "Local Catastrophic Error"},
		{LayerRDMAP, ETypeRDMAPRemoteProtection, ECodeRDMAPInvalidSTag, "RDMA", "Remote Protection Error", "Invalid STag"},
		{LayerRDMAP, ETypeRDMAPRemoteProtection, ECodeRDMAPTOWrap, "RDMA", "Remote Protection Error", "TO wrap"},
		{LayerRDMAP, ETypeRDMAPRemoteOperation, ECodeRDMAPUnexpectedOpcode, "RDMA", "Remote Operation Error", "Unexpected OpCode"},
		{LayerRDMAP, ETypeRDMAPRemoteOperation, ECodeRDMAPUnspecified, "RDMA", "Remote Operation Error", "Unspecific Error"},
		{LayerDDP, ETypeDDPTaggedBuffer, ECodeDDPTaggedInvalidVersion, "DDP", "Tagged Buffer Error", "Invalid DDP version"},
		{LayerDDP, ETypeDDPUntaggedBuffer, ECodeDDPUntaggedMSNRange, "DDP", "Untagged Buffer Error", "Invalid MSN - MSN range is not valid"},
		{LayerDDP, ETypeDDPUntaggedBuffer, ECodeDDPUntaggedTooLong, "DDP", "Untagged Buffer Error", "DDP Message too long for available buffer"},
		{LayerDDP, ETypeDDPReservedForLLP, 0, "DDP", "Reserved for the use by the LLP", "Unknown 0"},
		{LayerLLP, ETypeLLPMPA, ECodeMPACRC, "LLP", "MPA Error", "MPA CRC Error"},
		{LayerLLP, ETypeLLPMPA, ECodeMPAMarkerMismatch, "LLP", "MPA Error", "MPA Marker and ULPDU Length field mismatch"},
		{LayerLLP, ETypeLLPMPA, ECodeMPANoMatchingRTROption, "LLP", "MPA Error", "No Matching RTR Option"},
		{TerminateLayer(5), 1, 1, "Unknown 5", "Unknown 1", "Unknown 1"},
	}
	for _, tc := range tests {
		if tc.l.String() != tc.layer || TerminateETypeName(tc.l, tc.etype) != tc.ename ||
			TerminateErrorName(tc.l, tc.etype, tc.code) != tc.cname {
			t.Errorf("%d/%d/%d: %q %q %q", tc.l, tc.etype, tc.code, tc.l,
				TerminateETypeName(tc.l, tc.etype), TerminateErrorName(tc.l, tc.etype, tc.code))
		}
	}
}
