package ibtransport

import (
	"bytes"
	"errors"
	"testing"

	"github.com/softrdma/softrdma/header"
)

func TestBTHAccessors(t *testing.T) {
	tests := []struct {
		name  string
		in    []byte
		want  BTHFields
		resv6 uint8
		resv7 uint8
	}{
		{"zero", make([]byte, 12), BTHFields{}, 0, 0},
		{"ones", bytes.Repeat([]byte{0xff}, 12), BTHFields{
			Opcode: 0xff, SE: true, MigReq: true, PadCount: 3, TVer: 15, PKey: 0xffff,
			FECN: true, BECN: true, DestQP: 0xffffff, AckReq: true, PSN: 0xffffff,
		}, 0x3f, 0x7f},
		// rxe-write-bw-rdma-cm.pcap frame 16: RC SEND Only of 2 bytes with pad 2.
		{"capture SEND Only pad 2", []byte{0x04, 0x20, 0xff, 0xff, 0x00, 0x00, 0x00, 0x1c, 0x80, 0x17, 0x2f, 0xcf},
			BTHFields{Opcode: OpcodeRCSendOnly, PadCount: 2, PKey: 0xffff, DestQP: 0x1c, AckReq: true, PSN: 1519567}, 0, 0},
		// rxe-ud-pingpong.pcap frame 10: UD SEND only.
		{"capture UD", []byte{0x64, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x13, 0x00, 0xcc, 0xaf, 0xfb},
			BTHFields{Opcode: OpcodeUDSendOnly, PKey: 0xffff, DestQP: 0x13, PSN: 0xccaffb}, 0, 0},
		// Every field distinct: SE=1 M=0 pad=1 TVer=0xa, FECN=0 BECN=1 resv=0x15,
		// AckReq=0 resv=0x2a.
		{"mixed", []byte{0x0a, 0x9a, 0x12, 0x34, 0x55, 0xab, 0xcd, 0xef, 0x2a, 0x12, 0x34, 0x56},
			BTHFields{Opcode: OpcodeRCRDMAWriteOnly, SE: true, PadCount: 1, TVer: 0xa, PKey: 0x1234,
				BECN: true, DestQP: 0xabcdef, PSN: 0x123456}, 0x15, 0x2a},
		{"migreq fecn", []byte{0x11, 0x40, 0x80, 0x00, 0x80, 0x00, 0x00, 0x01, 0x80, 0x00, 0x00, 0x00},
			BTHFields{Opcode: OpcodeRCAcknowledge, MigReq: true, PKey: 0x8000, FECN: true, DestQP: 1, AckReq: true}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := BTH(tt.in)
			if got := h.Fields(); got != tt.want {
				t.Errorf("Fields() = %+v\nwant        %+v", got, tt.want)
			}
			// The individual accessors agree with Fields.
			got := BTHFields{h.Opcode(), h.SE(), h.MigReq(), h.PadCount(), h.TVer(), h.PKey(),
				h.FECN(), h.BECN(), h.DestQP(), h.AckReq(), h.PSN()}
			if got != tt.want {
				t.Errorf("accessors = %+v", got)
			}
			if h.Reserved6() != tt.resv6 || h.Reserved7() != tt.resv7 {
				t.Errorf("reserved %#x %#x, want %#x %#x", h.Reserved6(), h.Reserved7(), tt.resv6, tt.resv7)
			}
			// Encode reproduces the bytes except the reserved bits.
			out := make(BTH, BTHLen)
			out.Encode(&tt.want)
			want := bytes.Clone(tt.in)
			want[4] &^= 0x3f
			want[8] &^= 0x7f
			if !bytes.Equal(out, want) {
				t.Errorf("Encode = %x, want %x", []byte(out), want)
			}
		})
	}
}

// TestBTHSetters applies each setter to an all-zero and an all-ones header and
// checks that exactly the field's bits change.
func TestBTHSetters(t *testing.T) {
	tests := []struct {
		name     string
		set      func(BTH)
		fromZero string // hex of the 12 bytes after set on zeros
		fromOnes string // hex after clearing the field on ones (set with zero value)
		clear    func(BTH)
	}{
		{"Opcode", func(b BTH) { b.SetOpcode(0x81) }, "810000000000000000000000",
			"00ffffffffffffffffffffff", func(b BTH) { b.SetOpcode(0) }},
		{"SE", func(b BTH) { b.SetSE(true) }, "008000000000000000000000",
			"ff7fffffffffffffffffffff", func(b BTH) { b.SetSE(false) }},
		{"MigReq", func(b BTH) { b.SetMigReq(true) }, "004000000000000000000000",
			"ffbfffffffffffffffffffff", func(b BTH) { b.SetMigReq(false) }},
		{"PadCount", func(b BTH) { b.SetPadCount(3) }, "003000000000000000000000",
			"ffcfffffffffffffffffffff", func(b BTH) { b.SetPadCount(0) }},
		{"PadCount masks", func(b BTH) { b.SetPadCount(5) }, "001000000000000000000000",
			"ffdfffffffffffffffffffff", func(b BTH) { b.SetPadCount(0xfd) }},
		{"TVer", func(b BTH) { b.SetTVer(0xf) }, "000f00000000000000000000",
			"fff0ffffffffffffffffffff", func(b BTH) { b.SetTVer(0) }},
		{"PKey", func(b BTH) { b.SetPKey(0xabcd) }, "0000abcd0000000000000000",
			"ffff0000ffffffffffffffff", func(b BTH) { b.SetPKey(0) }},
		{"FECN", func(b BTH) { b.SetFECN(true) }, "000000008000000000000000",
			"ffffffff7fffffffffffffff", func(b BTH) { b.SetFECN(false) }},
		{"BECN", func(b BTH) { b.SetBECN(true) }, "000000004000000000000000",
			"ffffffffbfffffffffffffff", func(b BTH) { b.SetBECN(false) }},
		{"Reserved6", func(b BTH) { b.SetReserved6(0xff) }, "000000003f00000000000000",
			"ffffffffc0ffffffffffffff", func(b BTH) { b.SetReserved6(0) }},
		{"DestQP", func(b BTH) { b.SetDestQP(0xff123456) }, "000000000012345600000000",
			"ffffffffff000000ffffffff", func(b BTH) { b.SetDestQP(0) }},
		{"AckReq", func(b BTH) { b.SetAckReq(true) }, "000000000000000080000000",
			"ffffffffffffffff7fffffff", func(b BTH) { b.SetAckReq(false) }},
		{"Reserved7", func(b BTH) { b.SetReserved7(0xff) }, "00000000000000007f000000",
			"ffffffffffffffff80ffffff", func(b BTH) { b.SetReserved7(0) }},
		{"PSN", func(b BTH) { b.SetPSN(0x01fedcba) }, "000000000000000000fedcba",
			"ffffffffffffffffff000000", func(b BTH) { b.SetPSN(0) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			z := make(BTH, BTHLen)
			tt.set(z)
			if got := hexOf(z); got != tt.fromZero {
				t.Errorf("set on zeros: %s, want %s", got, tt.fromZero)
			}
			o := BTH(bytes.Repeat([]byte{0xff}, BTHLen))
			tt.clear(o)
			if got := hexOf(o); got != tt.fromOnes {
				t.Errorf("clear on ones: %s, want %s", got, tt.fromOnes)
			}
		})
	}
}

func hexOf(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&0xf])
	}
	return string(out)
}

func TestBTHEncodeClearsReserved(t *testing.T) {
	b := BTH(bytes.Repeat([]byte{0xff}, BTHLen+1))
	b.Encode(&BTHFields{Opcode: OpcodeRCSendFirst})
	if got := hexOf(b); got != "000000000000000000000000ff" {
		t.Errorf("Encode of zero fields over ones: %s (byte 12 must be untouched)", got)
	}
}

func TestBTHEncodeTruncatesWideValues(t *testing.T) {
	b := make(BTH, BTHLen)
	b.Encode(&BTHFields{PadCount: 7, TVer: 0x1f, DestQP: 0x1234567, PSN: 0xfabcdef})
	if b.PadCount() != 3 || b.TVer() != 0xf || b.DestQP() != 0x234567 || b.PSN() != 0xabcdef || b.SE() || b.MigReq() {
		t.Errorf("fields %+v", b.Fields())
	}
}

func TestBTHFieldsValidate(t *testing.T) {
	tests := []struct {
		f    BTHFields
		text string
	}{
		{BTHFields{PadCount: 5}, "bth: pad count 5 > 3"},
		{BTHFields{TVer: 1}, "bth: transport header version 1 != 0"},
		{BTHFields{DestQP: 1 << 24}, "bth: destination QP 16777216 > 16777215"},
		{BTHFields{PSN: 1 << 24}, "bth: PSN 16777216 > 16777215"},
	}
	for _, tt := range tests {
		err := tt.f.Validate()
		if err == nil || err.Error() != tt.text || !errors.Is(err, ErrInvalidField) {
			t.Errorf("%+v: %v, want %q", tt.f, err, tt.text)
		}
	}
	ok := BTHFields{Opcode: OpcodeRCSendOnly, PadCount: 3, DestQP: QPNMask, PSN: PSNMask}
	if err := ok.Validate(); err != nil {
		t.Errorf("valid fields: %v", err)
	}
}

func TestHeaderErrorText(t *testing.T) {
	tests := []struct {
		e    header.Error
		want string
	}{
		{header.Error{Header: "bth", Field: "pad count", Value: 5, Rel: ">", Limit: 3}, "bth: pad count 5 > 3"},
		{header.Error{Header: "bth", Field: "opcode", Value: 0x5, Hex: 2, Reason: "reserved"}, "bth: opcode 0x05: reserved"},
		{header.Error{Header: "bth", Field: "opcode", Value: 0xfe, Hex: 2}, "bth: opcode 0xfe"},
		{header.Error{Header: "reth", Field: "packet length", Value: 20, Rel: "<", Limit: 28, Reason: "RC RDMA_WRITE_FIRST"},
			"reth: packet length 20 < 28: RC RDMA_WRITE_FIRST"},
	}
	for _, tt := range tests {
		if got := tt.e.Error(); got != tt.want {
			t.Errorf("%q, want %q", got, tt.want)
		}
	}
	e := &header.Error{Err: ErrTruncated}
	if !errors.Is(e, ErrTruncated) || errors.Is(e, ErrInvalidField) {
		t.Error("errors.Is does not follow Err")
	}
}
