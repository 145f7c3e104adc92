package header

import (
	"encoding/binary"
	"net/netip"
)

// IPv6Len is the length of the fixed IPv6 header.
const IPv6Len = 40

// IPv6 is the fixed IPv6 header (RFC 8200):
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|Version| Traffic Class |           Flow Label                  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         Payload Length        |  Next Header  |   Hop Limit   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 Source Address (16 bytes)                     |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|               Destination Address (16 bytes)                  |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type IPv6 []byte

// Version returns the version field (6 for a valid header).
func (b IPv6) Version() uint8 { return b[0] >> 4 }

// TrafficClass returns the traffic class byte (DSCP and ECN).
func (b IPv6) TrafficClass() uint8 { return uint8(binary.BigEndian.Uint16(b[0:]) >> 4) }

// FlowLabel returns the 20-bit flow label.
func (b IPv6) FlowLabel() uint32 { return binary.BigEndian.Uint32(b[0:]) & 0xFFFFF }

// PayloadLength returns the payload length field (0 for a jumbogram).
func (b IPv6) PayloadLength() uint16 { return binary.BigEndian.Uint16(b[4:]) }

// NextHeader returns the next header's protocol number.
func (b IPv6) NextHeader() uint8 { return b[6] }

// HopLimit returns the hop limit.
func (b IPv6) HopLimit() uint8 { return b[7] }

// Src returns the source address.
func (b IPv6) Src() netip.Addr { return netip.AddrFrom16([16]byte(b[8:24])) }

// Dst returns the destination address.
func (b IPv6) Dst() netip.Addr { return netip.AddrFrom16([16]byte(b[24:40])) }

// SetPayloadLength sets the payload length field.
func (b IPv6) SetPayloadLength(n uint16) { binary.BigEndian.PutUint16(b[4:], n) }

// SetSrc sets the source address (an IPv4 address as IPv4-mapped; zeros for the zero Addr).
func (b IPv6) SetSrc(a netip.Addr) { putAddr16(b[8:24], a) }

// SetDst sets the destination address (an IPv4 address as IPv4-mapped; zeros for the zero Addr).
func (b IPv6) SetDst(a netip.Addr) { putAddr16(b[24:40], a) }

// Check returns an *Error unless b holds a version 6 header whose payload
// length fits in b.
func (b IPv6) Check() error {
	if len(b) < IPv6Len {
		return Truncated("ipv6", "length", len(b), IPv6Len)
	}
	if v := b.Version(); v != 6 {
		return invalid("ipv6", "version", int(v), 6, "!=", "")
	}
	if n := int(b.PayloadLength()); IPv6Len+n > len(b) {
		return &Error{Header: "ipv6", Field: "payload length", Value: uint64(n), Limit: uint64(len(b) - IPv6Len), Rel: ">", LimitName: "packet", Err: ErrTruncated}
	}
	return nil
}

// IPv6Fields is a fixed IPv6 header's content, for Encode.
type IPv6Fields struct {
	TrafficClass  uint8
	FlowLabel     uint32 // 20 bits
	PayloadLength uint16
	NextHeader    uint8
	HopLimit      uint8
	Src, Dst      netip.Addr
}

// Encode writes the header into b[:IPv6Len].
func (b IPv6) Encode(f *IPv6Fields) {
	binary.BigEndian.PutUint32(b[0:], 6<<28|uint32(f.TrafficClass)<<20|f.FlowLabel&0xFFFFF)
	b.SetPayloadLength(f.PayloadLength)
	b[6] = f.NextHeader
	b[7] = f.HopLimit
	b.SetSrc(f.Src)
	b.SetDst(f.Dst)
}

// putAddr16 writes a as 16 bytes into dst[:16], zeros for the zero Addr.
func putAddr16(dst []byte, a netip.Addr) {
	if !a.IsValid() {
		clear(dst[:16])
		return
	}
	v := a.As16()
	copy(dst, v[:])
}

// ICMPv6Checksum returns the ICMPv6 checksum (RFC 4443 section 2.3) of msg
// from src to dst, over the IPv6 pseudo-header and msg as it is: with the
// checksum field zero it is the value to store; over a message carrying its
// checksum it is zero if the checksum is right.
func ICMPv6Checksum(src, dst netip.Addr, msg []byte) uint16 {
	return ^Checksum(msg, PseudoHeaderChecksum(IPProtocolICMPv6, src, dst, len(msg)))
}
