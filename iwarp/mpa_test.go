package iwarp

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/softrdma/softrdma/header"
)

func mustHex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The MPA Request of siw-rping.pcap (frame 4) and the Reply of siw-crc-rping.pcap.
const (
	goldenRequest  = "4d504120494420526571204672616d65" + "10" + "02" + "0004" + "00010001"
	goldenReplyCRC = "4d504120494420526570204672616d65" + "50" + "02" + "0004" + "00010001"
)

func TestMPAFrameGolden(t *testing.T) {
	tests := []struct {
		name             string
		hex              string
		request, crc     bool
		ird, ord         uint16
		enhanced, marker bool
	}{
		{"siw request", goldenRequest, true, false, 1, 1, true, false},
		{"siw crc reply", goldenReplyCRC, false, true, 1, 1, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := mustHex(t, tc.hex)
			m, err := ParseMPAFrame(append(b, 0xde, 0xad)) // followed by other octets
			if err != nil {
				t.Fatal(err)
			}
			if len(m) != len(b) || m.Len() != len(b) {
				t.Errorf("len %d/%d, want %d", len(m), m.Len(), len(b))
			}
			if m.IsRequest() != tc.request || m.IsReply() == tc.request {
				t.Errorf("IsRequest %v IsReply %v", m.IsRequest(), m.IsReply())
			}
			if m.CRC() != tc.crc || m.Markers() != tc.marker || m.Reject() ||
				m.Enhanced() != tc.enhanced || m.Reserved() != 0 || m.Revision() != MPARevision2 {
				t.Errorf("flags %#x revision %d", m.Flags(), m.Revision())
			}
			w, ok := m.IRDORD()
			if !ok || w.IRD() != tc.ird || w.ORD() != tc.ord || w.PeerToPeer() ||
				w.ZeroLengthRTR() || w.WriteRTR() || w.ReadRTR() {
				t.Errorf("IRD/ORD %v %x", ok, []byte(w))
			}
			f := m.Fields()
			out, err := f.Append([]byte{1, 2})
			if err != nil || !bytes.Equal(out[2:], b) || out[0] != 1 {
				t.Errorf("re-encoded %x, %v; want %x", out, err, b)
			}
		})
	}
}

func TestMPAFrameErrors(t *testing.T) {
	req := mustHex(t, goldenRequest)
	long := append([]byte(nil), req...)
	MPAFrame(long).SetPrivateDataLen(600)
	badKey := append([]byte(nil), req...)
	badKey[10] = 'x'
	tests := []struct {
		name string
		b    []byte
		want error
		text string
	}{
		{"empty", nil, ErrTruncated, "mpa: frame length 0 < 20"},
		{"header only", req[:19], ErrTruncated, "mpa: frame length 19 < 20"},
		{"private data cut", req[:22], ErrTruncated, "mpa: frame length 22 < 24"},
		{"bad key", badKey, ErrBadKey, `mpa: key: "MPA ID ReqxFrame"`},
		{"private data too long", long, ErrTooLong, "mpa: private data length 600 > 512"},
	}
	for _, tc := range tests {
		_, err := ParseMPAFrame(tc.b)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
			continue
		}
		var he *header.Error
		if !errors.As(err, &he) || he.Header != "mpa" {
			t.Errorf("%s: %T not a *header.Error", tc.name, err)
		}
		if err.Error() != tc.text {
			t.Errorf("%s: %q, want %q", tc.name, err, tc.text)
		}
	}
	f := MPAFrameFields{Request: true, PrivateData: make([]byte, 513)}
	if _, err := f.Append(nil); !errors.Is(err, ErrTooLong) {
		t.Errorf("encoding 513 octets of private data: %v", err)
	}
	f.PrivateData = f.PrivateData[:512]
	if _, err := f.Encode(make([]byte, 531)); !errors.Is(err, ErrTruncated) {
		t.Errorf("encoding into a short buffer: %v", err)
	}
	if b, err := f.Append(nil); err != nil || len(b) != 532 {
		t.Errorf("512 octets of private data: %d, %v", len(b), err)
	}
}

func TestMPAFrameSetters(t *testing.T) {
	b := make([]byte, MPAFrameHeaderLen+4)
	m := MPAFrame(b)
	m.SetReply()
	m.SetFlags(0)
	for _, step := range []struct {
		set  func()
		want uint8
	}{
		{func() { m.SetMarkers(true) }, 0x80},
		{func() { m.SetCRC(true) }, 0xc0},
		{func() { m.SetReject(true) }, 0xe0},
		{func() { m.SetEnhanced(true) }, 0xf0},
		{func() { m.SetReserved(MPAFlagSiwGSO) }, 0xf8},
		{func() { m.SetMarkers(false) }, 0x78},
		{func() { m.SetReserved(0) }, 0x70},
		{func() { m.SetCRC(false); m.SetReject(false) }, 0x10},
	} {
		step.set()
		if m.Flags() != step.want {
			t.Fatalf("flags %#x, want %#x", m.Flags(), step.want)
		}
	}
	m.SetRevision(2)
	m.SetPrivateDataLen(4)
	if !m.IsReply() || m.Revision() != 2 || len(m.PrivateData()) != 4 {
		t.Errorf("frame %x", b)
	}
	w, ok := m.IRDORD()
	if !ok {
		t.Fatal("no IRD/ORD")
	}
	w.SetIRD(0x3fff)
	w.SetORD(0x1234)
	w.SetPeerToPeer(true)
	w.SetReadRTR(true)
	if w.IRDWord() != 0xbfff || w.ORDWord() != 0x5234 || !w.PeerToPeer() || w.ZeroLengthRTR() ||
		!w.ReadRTR() || w.WriteRTR() || w.IRD() != 0x3fff || w.ORD() != 0x1234 {
		t.Errorf("IRD/ORD %x", []byte(w))
	}
	w.SetZeroLengthRTR(true)
	w.SetWriteRTR(true)
	w.SetPeerToPeer(false)
	w.SetReadRTR(false)
	w.SetIRD(0xffff) // only 14 bits kept
	if w.IRDWord() != 0x7fff || w.ORDWord() != 0x9234 {
		t.Errorf("IRD/ORD %x", []byte(w))
	}
	m.SetEnhanced(false)
	if _, ok := m.IRDORD(); ok {
		t.Error("IRD/ORD without H")
	}
}
