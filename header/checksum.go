package header

import (
	"encoding/binary"
	"net/netip"
)

// Checksum returns the 16-bit one's complement sum (RFC 1071) of b added to
// initial, not complemented: chain it over a pseudo-header and a message, then
// complement the result. An odd final byte counts as its high half.
func Checksum(b []byte, initial uint16) uint16 {
	sum := uint64(initial)
	for len(b) >= 8 {
		sum += uint64(b[0])<<8 | uint64(b[1])
		sum += uint64(b[2])<<8 | uint64(b[3])
		sum += uint64(b[4])<<8 | uint64(b[5])
		sum += uint64(b[6])<<8 | uint64(b[7])
		b = b[8:]
	}
	for len(b) >= 2 {
		sum += uint64(b[0])<<8 | uint64(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		sum += uint64(b[0]) << 8
	}
	for sum>>16 != 0 {
		sum = sum>>16 + sum&0xFFFF
	}
	return uint16(sum)
}

// IPv4Checksum returns the header checksum of the IPv4 header hdr (with any
// options) computed with its checksum field taken as zero, whatever it holds:
// the value to store.
func IPv4Checksum(hdr []byte) uint16 {
	if len(hdr) < 12 {
		return ^Checksum(hdr, 0)
	}
	return ^Checksum(hdr[12:], Checksum(hdr[:10], 0))
}

// PseudoHeaderChecksum returns the sum (not complemented) of the pseudo-header
// an upper-layer checksum covers for a message of length octets of protocol
// proto from src to dst: the IPv4 one (RFC 9293 section 3.1: addresses, zero,
// protocol, 16-bit length) when both addresses are IPv4, else the IPv6 one
// (RFC 8200 section 8.1: addresses, 32-bit length, zeros, next header). Pass
// it as Checksum's initial value over the message.
func PseudoHeaderChecksum(proto uint8, src, dst netip.Addr, length int) uint16 {
	if src.Is4() && dst.Is4() {
		var p [12]byte
		s, d := src.As4(), dst.As4()
		copy(p[0:4], s[:])
		copy(p[4:8], d[:])
		p[9] = proto
		binary.BigEndian.PutUint16(p[10:], uint16(length))
		return Checksum(p[:], 0)
	}
	var p [40]byte
	s, d := src.As16(), dst.As16()
	copy(p[0:16], s[:])
	copy(p[16:32], d[:])
	binary.BigEndian.PutUint32(p[32:], uint32(length))
	p[39] = proto
	return Checksum(p[:], 0)
}
