package header

import (
	"errors"
	"net/netip"
	"testing"
)

// The IPv4 header of Wikipedia's "IPv4 header checksum" example: checksum 0xb861.
var wikiIPv4 = []byte{0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7}

func TestIPv4Checksum(t *testing.T) {
	tests := []struct {
		name string
		hdr  []byte
		want uint16
	}{
		{"wikipedia, field set", wikiIPv4, 0xb861},
		{"wikipedia, field zero", append(append(append([]byte{}, wikiIPv4[:10]...), 0, 0), wikiIPv4[12:]...), 0xb861},
		{"wikipedia, field garbage", append(append(append([]byte{}, wikiIPv4[:10]...), 0x12, 0x34), wikiIPv4[12:]...), 0xb861},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := IPv4Checksum(tt.hdr); got != tt.want {
				t.Errorf("IPv4Checksum = %#04x, want %#04x", got, tt.want)
			}
			if got := IPv4(tt.hdr).CalculateChecksum(); got != tt.want {
				t.Errorf("CalculateChecksum = %#04x, want %#04x", got, tt.want)
			}
		})
	}
	if !IPv4(wikiIPv4).IsChecksumValid() {
		t.Error("IsChecksumValid = false on a right checksum")
	}
	// Over a header carrying its checksum, the complemented sum is zero.
	if s := ^Checksum(wikiIPv4, 0); s != 0 {
		t.Errorf("^Checksum over a valid header = %#04x, want 0", s)
	}
}

// TestChecksumRFC1071 is the worked example of RFC 1071 section 3.
func TestChecksumRFC1071(t *testing.T) {
	b := []byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}
	if got := Checksum(b, 0); got != 0xddf2 {
		t.Errorf("Checksum = %#04x, want 0xddf2", got)
	}
	// Odd length: the last byte is the high half of a word.
	if got, want := Checksum([]byte{0x01, 0x02, 0x03}, 0), uint16(0x0402); got != want {
		t.Errorf("Checksum odd = %#04x, want %#04x", got, want)
	}
}

func TestICMPv6Checksum(t *testing.T) {
	// A neighbour solicitation from fe80::1 to ff02::1:ff00:2 for fe80::2,
	// checksum worked out by hand from the pseudo-header (RFC 4443 2.3).
	src, dst := netip.MustParseAddr("fe80::1"), netip.MustParseAddr("ff02::1:ff00:2")
	msg := make([]byte, 24)
	msg[0] = 135
	copy(msg[8:], netip.MustParseAddr("fe80::2").AsSlice())
	c := ICMPv6Checksum(src, dst, msg)
	msg[2], msg[3] = byte(c>>8), byte(c)
	if got := ICMPv6Checksum(src, dst, msg); got != 0 {
		t.Errorf("checksum over a message carrying its checksum = %#04x, want 0", got)
	}
	msg[8] ^= 1
	if ICMPv6Checksum(src, dst, msg) == 0 {
		t.Error("a changed message still verifies")
	}
}

func TestEncodeDecode(t *testing.T) {
	src4, dst4 := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	src6, dst6 := netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")
	b := make([]byte, 128)

	eth := Ethernet(b)
	for _, f := range []EthernetFields{
		{Dst: [6]byte{1, 2, 3, 4, 5, 6}, Src: [6]byte{7, 8, 9, 10, 11, 12}, Type: EtherTypeIPv4},
		{Dst: [6]byte{1}, Src: [6]byte{2}, Type: EtherTypeIPv6, VLAN: true, VLANTCI: 0x2007},
	} {
		eth.Encode(&f)
		if eth.DstMAC() != f.Dst || eth.SrcMAC() != f.Src || eth.InnerType() != f.Type || eth.Tagged() != f.VLAN || eth.HeaderLen() != f.Len() {
			t.Errorf("ethernet %+v: read back dst %x src %x type %#x tagged %v len %d", f, eth.DstMAC(), eth.SrcMAC(), eth.InnerType(), eth.Tagged(), eth.HeaderLen())
		}
		if f.VLAN && eth.VLANTCI() != f.VLANTCI {
			t.Errorf("VLANTCI = %#x, want %#x", eth.VLANTCI(), f.VLANTCI)
		}
	}

	f4 := IPv4Fields{TOS: 0x2e, TotalLength: 60, ID: 0x1234, FlagsFragment: IPv4FlagDF, TTL: 64, Protocol: IPProtocolUDP, Src: src4, Dst: dst4}
	ip4 := IPv4(b[:60])
	ip4.Encode(&f4)
	if ip4.Version() != 4 || ip4.HeaderLen() != IPv4MinLen || ip4.TOS() != f4.TOS || ip4.TotalLength() != 60 || ip4.ID() != f4.ID ||
		ip4.FlagsFragment() != IPv4FlagDF || ip4.FragmentOffset() != 0 || ip4.TTL() != 64 || ip4.Protocol() != IPProtocolUDP ||
		ip4.Src() != src4 || ip4.Dst() != dst4 || !ip4.IsChecksumValid() {
		t.Errorf("ipv4 read back wrong: % x", ip4[:20])
	}
	if err := ip4.Check(); err != nil {
		t.Errorf("ipv4 Check: %v", err)
	}

	f6 := IPv6Fields{TrafficClass: 0xb8, FlowLabel: 0xABCDE, PayloadLength: 16, NextHeader: IPProtocolUDP, HopLimit: 255, Src: src6, Dst: dst6}
	ip6 := IPv6(b[:56])
	ip6.Encode(&f6)
	if ip6.Version() != 6 || ip6.TrafficClass() != f6.TrafficClass || ip6.FlowLabel() != f6.FlowLabel || ip6.PayloadLength() != 16 ||
		ip6.NextHeader() != IPProtocolUDP || ip6.HopLimit() != 255 || ip6.Src() != src6 || ip6.Dst() != dst6 {
		t.Errorf("ipv6 read back wrong: % x", ip6[:40])
	}
	if err := ip6.Check(); err != nil {
		t.Errorf("ipv6 Check: %v", err)
	}

	u := UDP(b[:16])
	u.Encode(&UDPFields{SrcPort: 49152, DstPort: 4791, Length: 16})
	if u.SrcPort() != 49152 || u.DstPort() != 4791 || u.Length() != 16 || u.Checksum() != 0 {
		t.Errorf("udp read back wrong: % x", u[:8])
	}
	if err := u.Check(16); err != nil {
		t.Errorf("udp Check: %v", err)
	}
}

func TestCheckErrors(t *testing.T) {
	ip4 := func(mut func(IPv4)) IPv4 {
		b := append(IPv4{}, wikiIPv4...)
		b.SetTotalLength(20)
		if mut != nil {
			mut(b)
		}
		return b
	}
	ip6 := func(mut func(IPv6)) IPv6 {
		b := make(IPv6, IPv6Len)
		b.Encode(&IPv6Fields{})
		if mut != nil {
			mut(b)
		}
		return b
	}
	tests := []struct {
		name string
		err  error
		kind error
		msg  string
	}{
		{"ethernet short", Ethernet(make([]byte, 13)).Check(), ErrTruncated, "ethernet: length 13 < 14"},
		{"vlan short", Ethernet(append(make([]byte, 12), 0x81, 0x00, 0, 0)).Check(), ErrTruncated, "vlan: length 16 < 18"},
		{"ipv4 short", IPv4(wikiIPv4[:19]).Check(), ErrTruncated, "ipv4: length 19 < 20"},
		{"ipv4 version", ip4(func(b IPv4) { b[0] = 0x65 }).Check(), ErrInvalid, "ipv4: version 6 != 4"},
		{"ipv4 ihl small", ip4(func(b IPv4) { b[0] = 0x44 }).Check(), ErrInvalid, "ipv4: header length 16 < 20"},
		{"ipv4 ihl long", ip4(func(b IPv4) { b[0] = 0x46 }).Check(), ErrTruncated, "ipv4: header length 24 > packet 20"},
		{"ipv4 total small", ip4(func(b IPv4) { b.SetTotalLength(19) }).Check(), ErrInvalid, "ipv4: total length 19 < header length 20"},
		{"ipv4 total long", ip4(func(b IPv4) { b.SetTotalLength(1500) }).Check(), ErrTruncated, "ipv4: total length 1500 > packet 20"},
		{"ipv6 short", IPv6(make([]byte, 39)).Check(), ErrTruncated, "ipv6: length 39 < 40"},
		{"ipv6 version", ip6(func(b IPv6) { b[0] = 0x40 }).Check(), ErrInvalid, "ipv6: version 4 != 6"},
		{"ipv6 payload long", ip6(func(b IPv6) { b.SetPayloadLength(8) }).Check(), ErrTruncated, "ipv6: payload length 8 > packet 0"},
		{"udp short", UDP(make([]byte, 7)).Check(8), ErrTruncated, "udp: length 7 < 8"},
		{"udp length small", UDP(make([]byte, 8)).Check(8), ErrInvalid, "udp: length field 0 < 8"},
		{"udp length long", UDP([]byte{0, 0, 0, 0, 0, 9, 0, 0}).Check(8), ErrInvalid, "udp: length field 9 > ip payload 8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var he *Error
			if !errors.As(tt.err, &he) || !errors.Is(tt.err, tt.kind) {
				t.Fatalf("err = %v, want an *Error of kind %v", tt.err, tt.kind)
			}
			if tt.err.Error() != tt.msg {
				t.Errorf("err = %q, want %q", tt.err, tt.msg)
			}
		})
	}
}

func TestNoAllocs(t *testing.T) {
	b := make([]byte, 64)
	f := IPv4Fields{TotalLength: 28, TTL: 64, Protocol: IPProtocolUDP, Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2")}
	if n := testing.AllocsPerRun(100, func() {
		IPv4(b).Encode(&f)
		_ = IPv4(b).Check()
		_ = IPv4(b).Src()
	}); n != 0 {
		t.Errorf("%v allocations, want 0", n)
	}
}

// TestEncodeIPUDP: the IP and UDP headers EncodeIPUDP writes read back
// through the views as the fields given, IPv4 addresses unmapped, and pass
// their Checks with the payload behind them.
func TestEncodeIPUDP(t *testing.T) {
	tests := []struct {
		name     string
		v4       bool
		src, dst netip.AddrPort
		wantSrc  netip.Addr
	}{
		{"ipv4", true, netip.MustParseAddrPort("10.0.0.2:49152"), netip.MustParseAddrPort("10.0.0.1:4791"), netip.MustParseAddr("10.0.0.2")},
		{"ipv4 mapped", true, netip.MustParseAddrPort("[::ffff:10.0.0.2]:49152"), netip.MustParseAddrPort("[::ffff:10.0.0.1]:4791"), netip.MustParseAddr("10.0.0.2")},
		{"ipv6", false, netip.MustParseAddrPort("[fd00::2]:49152"), netip.MustParseAddrPort("[fd00::1]:4791"), netip.MustParseAddr("fd00::2")},
		{"ipv6 unspecified source", false, netip.AddrPortFrom(netip.Addr{}, 49152), netip.MustParseAddrPort("[fd00::1]:4791"), netip.IPv6Unspecified()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const payload = 30
			b := make([]byte, IPv6Len+UDPLen+payload)
			n := EncodeIPUDP(b, tt.v4, &IPUDPFields{Src: tt.src, Dst: tt.dst, TOS: 0x2e, TTL: 63, IPv4ID: 7, PayloadLen: payload})
			var src, dst netip.Addr
			var tos, ttl uint8
			if tt.v4 {
				ip := IPv4(b[:n+payload])
				if err := ip.Check(); err != nil || n != IPv4MinLen+UDPLen || !ip.IsChecksumValid() {
					t.Fatalf("ipv4: %v, length %d, checksum valid %v", err, n, ip.IsChecksumValid())
				}
				if ip.ID() != 7 || ip.FlagsFragment() != IPv4FlagDF || ip.Protocol() != IPProtocolUDP {
					t.Errorf("ipv4: id %d flags %#x protocol %d", ip.ID(), ip.FlagsFragment(), ip.Protocol())
				}
				src, dst, tos, ttl = ip.Src(), ip.Dst(), ip.TOS(), ip.TTL()
			} else {
				ip := IPv6(b[:n+payload])
				if err := ip.Check(); err != nil || n != IPv6Len+UDPLen || ip.NextHeader() != IPProtocolUDP || ip.FlowLabel() != 0 {
					t.Fatalf("ipv6: %v, length %d, next header %d, flow label %d", err, n, ip.NextHeader(), ip.FlowLabel())
				}
				src, dst, tos, ttl = ip.Src(), ip.Dst(), ip.TrafficClass(), ip.HopLimit()
			}
			if src != tt.wantSrc || dst != tt.dst.Addr().Unmap() || tos != 0x2e || ttl != 63 {
				t.Errorf("ip: %v > %v tos %#x ttl %d", src, dst, tos, ttl)
			}
			u := UDP(b[n-UDPLen : n+payload])
			if err := u.Check(len(u)); err != nil || u.SrcPort() != 49152 || u.DstPort() != 4791 || u.Length() != UDPLen+payload || u.Checksum() != 0 {
				t.Errorf("udp: %v, %d > %d length %d checksum %#x", err, u.SrcPort(), u.DstPort(), u.Length(), u.Checksum())
			}
		})
	}
}
