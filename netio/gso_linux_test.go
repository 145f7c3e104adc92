//go:build linux

package netio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"

	"github.com/softrdma/softrdma/header"
)

// superFrame builds the frame a veth hands over for a UDP GSO send of
// payloads: headers once, with the lengths of the whole, then each payload.
func superFrame(src, dst netip.Addr, id uint16, payloads ...[]byte) []byte {
	return ipFrame{dstMAC: [6]byte{2, 0, 0, 0, 0, 2}, srcMAC: [6]byte{2, 0, 0, 0, 0, 1},
		src: netip.AddrPortFrom(src, 0xc001), dst: netip.AddrPortFrom(dst, RoCEv2Port),
		ttl: 64, id: id, flags: ipv4FlagDF, payload: bytes.Join(payloads, nil)}.build()
}

func TestUDPGSOSegment(t *testing.T) {
	be := binary.BigEndian
	p := func(n int, b byte) []byte { return bytes.Repeat([]byte{b}, n) }
	for _, tc := range []struct {
		name     string
		src, dst netip.Addr
		payloads [][]byte
	}{
		{"ipv4/even", netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), [][]byte{p(300, 1), p(300, 2), p(300, 3)}},
		{"ipv4/short-last", netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), [][]byte{p(300, 1), p(300, 2), p(7, 3)}},
		{"ipv6/short-last", netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2"), [][]byte{p(500, 9), p(1, 8)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const id = 0xfffe // counts up across the wrap
			frame := superFrame(tc.src, tc.dst, id, tc.payloads...)
			g, err := parseUDPGSOFrame(frame, len(tc.payloads[0]))
			if err != nil {
				t.Fatal(err)
			}
			if g.count != len(tc.payloads) {
				t.Fatalf("count %d, want %d", g.count, len(tc.payloads))
			}
			for j, pl := range tc.payloads {
				// What a sender of this datagram alone would have built.
				want := superFrame(tc.src, tc.dst, id+uint16(j), pl)
				dst := make([]byte, g.segLen(frame, j))
				if n := g.segment(dst, frame, j); n != len(want) || !bytes.Equal(dst, want) {
					t.Fatalf("segment %d (%d bytes):\n got %x\nwant %x", j, n, dst[:min(70, len(dst))], want[:min(70, len(want))])
				}
				if tc.src.Is4() && be.Uint16(dst[EthernetHeaderLen+4:]) != id+uint16(j) {
					t.Fatalf("segment %d: ID %#x", j, be.Uint16(dst[EthernetHeaderLen+4:]))
				}
			}
		})
	}
}

func TestUDPGSOParseErrors(t *testing.T) {
	v4 := superFrame(netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), 0, make([]byte, 100))
	v6 := superFrame(netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2"), 0, make([]byte, 100))
	mod := func(f []byte, fn func([]byte)) []byte { f = bytes.Clone(f); fn(f); return f }
	for _, tc := range []struct {
		name  string
		frame []byte
		size  int
	}{
		{"size 0", v4, 0},
		{"no IP header", v4[:20], 10},
		{"headers cut", v4[:40], 10},
		{"not IP", mod(v4, func(f []byte) { f[12], f[13] = 0x89, 0x15 }), 10},
		{"IPv4 version", mod(v4, func(f []byte) { f[14] = 0x65 }), 10},
		{"IPv4 IHL 4", mod(v4, func(f []byte) { f[14] = 0x44 }), 10},
		{"IPv4 TCP", mod(v4, func(f []byte) { f[23] = 6 }), 10},
		{"IPv4 length past the frame", mod(v4, func(f []byte) { f[16], f[17] = 0x10, 0 }), 10},
		{"IPv4 no payload", mod(v4, func(f []byte) { f[16], f[17] = 0, 28 }), 10},
		{"IPv6 not UDP", mod(v6, func(f []byte) { f[20] = 6 }), 10},
		{"IPv6 length past the frame", mod(v6, func(f []byte) { f[18], f[19] = 0x10, 0 }), 10},
		{"too many segments", v4, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := parseUDPGSOFrame(tc.frame, tc.size)
			var he *header.Error
			if err == nil {
				t.Fatalf("parsed: %+v", g)
			} else if !errors.As(err, &he) || he.Header == "" || he.Field == "" {
				t.Errorf("error %v is not a *header.Error naming header and field", err)
			}
			t.Log(err)
		})
	}
}
