package header

import (
	"errors"
	"testing"
)

func TestErrorText(t *testing.T) {
	errOther := errors.New("other")
	for _, tc := range []struct {
		e    *Error
		want string
	}{
		{&Error{Header: "bth", Field: "pad count", Value: 5, Rel: ">", Limit: 3, Err: ErrInvalid}, "bth: pad count 5 > 3"},
		{&Error{Header: "ipv4", Field: "total length", Value: 1500, Rel: ">", LimitName: "packet", Limit: 1200, Err: ErrTruncated}, "ipv4: total length 1500 > packet 1200"},
		{&Error{Header: "mpa", Field: "private data length", Value: 600, Rel: ">", Limit: 512, Reason: "revision 1", Err: ErrInvalid}, "mpa: private data length 600 > 512: revision 1"},
		{&Error{Header: "bth", Field: "opcode", Value: 5, Hex: 2, Err: errOther}, "bth: opcode 0x05"},
		{&Error{Header: "mpa", Field: "CRC", Value: 0x6f87526f, Rel: "!=", Limit: 0x87526f, Hex: 8, Err: ErrBadChecksum}, "mpa: CRC 0x6f87526f != 0x0087526f"},
		{&Error{Header: "cm", Field: "attribute id", Value: 0x20, Hex: 1, Reason: "unknown", Err: ErrUnsupported}, "cm: attribute id 0x20: unknown"},
		{&Error{Header: "ethernet", Field: "ethertype not IPv4", NoValue: true, Err: errOther}, "ethernet: ethertype not IPv4"},
		{&Error{Header: "stream", Err: ErrTruncated}, "stream: truncated"},
		{Truncated("reth", "packet length", 20, 28), "reth: packet length 20 < 28"},
		{Invalid("mad", "length", 257, ">", 256), "mad: length 257 > 256"},
		{Invalid("mad", "deth q_key", 0x10000, "!=", 0x80010000).InHex(1), "mad: deth q_key 0x10000 != 0x80010000"},
		{Invalid("cma", "ip version", 5, "", 0).Because("not 4 or 6"), "cma: ip version 5: not 4 or 6"},
		{Unsupported("cm", "class version", 1, "!=", 2), "cm: class version 1 != 2"},
		{Unsupported("cm", "attribute id", 0x20, "", 0).InHex(1).Because("unknown"), "cm: attribute id 0x20: unknown"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
}

func TestErrorIsAs(t *testing.T) {
	own := errors.New("own sentinel")
	var err error = &Error{Header: "x", Field: "f", Value: 1, Err: own}
	var he *Error
	if !errors.Is(err, own) || errors.Is(err, ErrTruncated) || !errors.As(err, &he) || he.Field != "f" {
		t.Errorf("errors.Is/As on %v: wrong answer", err)
	}
	if !errors.Is(Truncated("a", "b", 1, 2), ErrTruncated) {
		t.Error("Truncated does not wrap ErrTruncated")
	}
	if !errors.Is(Invalid("a", "b", 1, "", 0), ErrInvalid) || !errors.Is(Unsupported("a", "b", 1, "", 0), ErrUnsupported) {
		t.Error("Invalid or Unsupported does not wrap its sentinel")
	}
}
