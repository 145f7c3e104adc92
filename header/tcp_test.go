package header

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// TestTCPRoundTrip encodes segments with TCP.Encode and CalculateChecksum and
// checks them both ways against gopacket: its decoder reads back every field,
// and its serializer, given the same fields, writes the same bytes (checksum
// included).
func TestTCPRoundTrip(t *testing.T) {
	v4s, v4d := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("198.51.100.7")
	v6s, v6d := netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("fe80::2")
	tests := []struct {
		name     string
		src, dst netip.Addr
		f        TCPFields
		payload  []byte
	}{
		{"v4 syn", v4s, v4d, TCPFields{SrcPort: 49152, DstPort: 20049, Seq: 0x1000_0000, Flags: TCPFlagSYN, Window: 65535}, nil},
		{"v4 syn-ack", v4d, v4s, TCPFields{SrcPort: 20049, DstPort: 49152, Seq: 0x2000_0000, Ack: 0x1000_0001, Flags: TCPFlagSYN | TCPFlagACK, Window: 65535}, nil},
		{"v4 psh odd payload", v4s, v4d, TCPFields{SrcPort: 1, DstPort: 65535, Seq: 0xFFFF_FFFF, Ack: 7, Flags: TCPFlagACK | TCPFlagPSH, Window: 1}, []byte("MPA ID Req Frame")[:15]},
		{"v4 all flags urgent", v4s, v4d, TCPFields{SrcPort: 80, DstPort: 81, Seq: 1, Ack: 2, Flags: 0xFF, Window: 0x1234, Urgent: 0x8001}, bytes.Repeat([]byte{0xA5}, 1448)},
		{"v6 ack payload", v6s, v6d, TCPFields{SrcPort: 4791, DstPort: 33333, Seq: 42, Ack: 0x8000_0000, Flags: TCPFlagACK, Window: 512}, []byte{0, 1, 2, 3, 4}},
		{"v6 fin rst", v6d, v6s, TCPFields{SrcPort: 9, DstPort: 10, Flags: TCPFlagFIN | TCPFlagRST | TCPFlagECE | TCPFlagCWR}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seg := TCP(make([]byte, TCPMinLen+len(tt.payload)))
			seg.Encode(&tt.f)
			copy(seg[TCPMinLen:], tt.payload)
			seg.SetChecksum(seg.CalculateChecksum(tt.src, tt.dst))
			if err := seg.Check(); err != nil {
				t.Fatalf("Check: %v", err)
			}
			if !seg.IsChecksumValid(tt.src, tt.dst) {
				t.Errorf("IsChecksumValid = false")
			}
			// With the checksum stored, the sum over pseudo-header and segment is 0xFFFF.
			if s := Checksum(seg, PseudoHeaderChecksum(IPProtocolTCP, tt.src, tt.dst, len(seg))); s != 0xFFFF {
				t.Errorf("sum over the checksummed segment = %#04x, want 0xffff", s)
			}
			if seg.SrcPort() != tt.f.SrcPort || seg.DstPort() != tt.f.DstPort || seg.Seq() != tt.f.Seq || seg.Ack() != tt.f.Ack ||
				seg.DataOffset() != 5 || seg.HeaderLen() != TCPMinLen || seg.Flags() != tt.f.Flags || seg.Window() != tt.f.Window ||
				seg.Urgent() != tt.f.Urgent || !bytes.Equal(seg.Payload(), tt.payload) {
				t.Errorf("read back wrong: % x", seg[:TCPMinLen])
			}

			// gopacket decodes what Encode wrote.
			var g layers.TCP
			if err := g.DecodeFromBytes(seg, gopacket.NilDecodeFeedback); err != nil {
				t.Fatalf("gopacket decode: %v", err)
			}
			fl := func(bit uint8) bool { return tt.f.Flags&bit != 0 }
			if uint16(g.SrcPort) != tt.f.SrcPort || uint16(g.DstPort) != tt.f.DstPort || g.Seq != tt.f.Seq || g.Ack != tt.f.Ack ||
				g.DataOffset != 5 || g.Window != tt.f.Window || g.Checksum != seg.Checksum() || g.Urgent != tt.f.Urgent ||
				g.FIN != fl(TCPFlagFIN) || g.SYN != fl(TCPFlagSYN) || g.RST != fl(TCPFlagRST) || g.PSH != fl(TCPFlagPSH) ||
				g.ACK != fl(TCPFlagACK) || g.URG != fl(TCPFlagURG) || g.ECE != fl(TCPFlagECE) || g.CWR != fl(TCPFlagCWR) ||
				!bytes.Equal(g.Payload, tt.payload) {
				t.Errorf("gopacket read %+v", g)
			}

			// gopacket, given the same fields, serializes the same bytes.
			want := layers.TCP{SrcPort: layers.TCPPort(tt.f.SrcPort), DstPort: layers.TCPPort(tt.f.DstPort), Seq: tt.f.Seq, Ack: tt.f.Ack,
				FIN: g.FIN, SYN: g.SYN, RST: g.RST, PSH: g.PSH, ACK: g.ACK, URG: g.URG, ECE: g.ECE, CWR: g.CWR,
				Window: tt.f.Window, Urgent: tt.f.Urgent}
			if tt.src.Is4() {
				_ = want.SetNetworkLayerForChecksum(&layers.IPv4{Version: 4, Protocol: layers.IPProtocolTCP, SrcIP: net.IP(tt.src.AsSlice()), DstIP: net.IP(tt.dst.AsSlice())})
			} else {
				_ = want.SetNetworkLayerForChecksum(&layers.IPv6{Version: 6, NextHeader: layers.IPProtocolTCP, SrcIP: net.IP(tt.src.AsSlice()), DstIP: net.IP(tt.dst.AsSlice())})
			}
			buf := gopacket.NewSerializeBuffer()
			if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, &want, gopacket.Payload(tt.payload)); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes(), seg) {
				t.Errorf("gopacket wrote\n% x\nEncode wrote\n% x", buf.Bytes(), []byte(seg))
			}
		})
	}
}

// TestTCPCheckErrors: short slices and data offsets below 5 or beyond the
// slice fail Check with an *Error naming the field and value; a header with
// options that fit passes.
func TestTCPCheckErrors(t *testing.T) {
	seg := func(n int, dataOffset uint8) TCP {
		b := TCP(make([]byte, n))
		if n >= TCPMinLen {
			b.Encode(&TCPFields{SrcPort: 1, DstPort: 2})
			b.SetDataOffset(dataOffset)
		}
		return b
	}
	tests := []struct {
		name string
		b    TCP
		kind error // nil: Check passes
		msg  string
	}{
		{"empty", nil, ErrTruncated, "tcp: length 0 < 20"},
		{"short", make(TCP, 19), ErrTruncated, "tcp: length 19 < 20"},
		{"data offset 0", seg(20, 0), ErrInvalid, "tcp: data offset 0 < 5"},
		{"data offset 4", seg(40, 4), ErrInvalid, "tcp: data offset 4 < 5"},
		{"options beyond slice", seg(20, 6), ErrTruncated, "tcp: header length 24 > segment 20"},
		{"data offset 15 beyond slice", seg(59, 15), ErrTruncated, "tcp: header length 60 > segment 59"},
		{"data offset 5", seg(20, 5), nil, ""},
		{"options fit", seg(60, 15), nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.b.Check()
			if tt.kind == nil {
				if err != nil {
					t.Fatalf("Check = %v, want nil", err)
				}
				if got := len(tt.b.Payload()); got != len(tt.b)-tt.b.HeaderLen() {
					t.Errorf("payload %d bytes", got)
				}
				return
			}
			var he *Error
			if !errors.As(err, &he) || !errors.Is(err, tt.kind) {
				t.Fatalf("err = %v, want an *Error of kind %v", err, tt.kind)
			}
			if err.Error() != tt.msg {
				t.Errorf("err = %q, want %q", err, tt.msg)
			}
		})
	}
}

// TestPseudoHeaderChecksum: the IPv6 pseudo-header is what ICMPv6Checksum
// used before it shared PseudoHeaderChecksum (a 40-byte block, next header
// last), and the IPv4 one is the 12-byte block of RFC 9293.
func TestPseudoHeaderChecksum(t *testing.T) {
	v4 := PseudoHeaderChecksum(IPProtocolTCP, netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), 20)
	if want := Checksum([]byte{10, 0, 0, 1, 10, 0, 0, 2, 0, 6, 0, 20}, 0); v4 != want {
		t.Errorf("ipv4 pseudo-header sum %#04x, want %#04x", v4, want)
	}
	p6 := make([]byte, 40)
	p6[15], p6[31], p6[35], p6[39] = 1, 2, 20, IPProtocolTCP
	v6 := PseudoHeaderChecksum(IPProtocolTCP, netip.MustParseAddr("::1"), netip.MustParseAddr("::2"), 20)
	if want := Checksum(p6, 0); v6 != want {
		t.Errorf("ipv6 pseudo-header sum %#04x, want %#04x", v6, want)
	}
}
