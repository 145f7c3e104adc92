package header

import (
	"encoding/binary"
	"net/netip"
)

// UDPLen is the length of a UDP header.
const UDPLen = 8

// UDP is a UDP header (RFC 768):
//
//	 0      7 8     15 16    23 24    31
//	+--------+--------+--------+--------+
//	|   Source Port   |Destination Port |
//	+--------+--------+--------+--------+
//	|     Length      |    Checksum     |
//	+--------+--------+--------+--------+
type UDP []byte

// SrcPort returns the source port.
func (u UDP) SrcPort() uint16 { return binary.BigEndian.Uint16(u[0:]) }

// DstPort returns the destination port.
func (u UDP) DstPort() uint16 { return binary.BigEndian.Uint16(u[2:]) }

// Length returns the length field: header and payload.
func (u UDP) Length() uint16 { return binary.BigEndian.Uint16(u[4:]) }

// Checksum returns the checksum field (0: none).
func (u UDP) Checksum() uint16 { return binary.BigEndian.Uint16(u[6:]) }

// SetSrcPort sets the source port.
func (u UDP) SetSrcPort(p uint16) { binary.BigEndian.PutUint16(u[0:], p) }

// SetDstPort sets the destination port.
func (u UDP) SetDstPort(p uint16) { binary.BigEndian.PutUint16(u[2:], p) }

// SetLength sets the length field.
func (u UDP) SetLength(n uint16) { binary.BigEndian.PutUint16(u[4:], n) }

// SetChecksum sets the checksum field.
func (u UDP) SetChecksum(c uint16) { binary.BigEndian.PutUint16(u[6:], c) }

// Check returns an *Error unless u holds a header whose length field fits
// between UDPLen and room, the bytes the IP header gives it.
func (u UDP) Check(room int) error {
	if len(u) < UDPLen || room < UDPLen {
		return Truncated("udp", "length", min(len(u), room), UDPLen)
	}
	if n := int(u.Length()); n < UDPLen {
		return invalid("udp", "length field", n, UDPLen, "<", "")
	} else if n > room {
		return invalid("udp", "length field", n, room, ">", "ip payload")
	}
	return nil
}

// UDPFields is a UDP header's content, for Encode.
type UDPFields struct {
	SrcPort, DstPort uint16
	Length           uint16 // header and payload
	Checksum         uint16 // 0: none (what RoCEv2 sends; the ICRC covers the payload)
}

// Encode writes the header into u[:UDPLen].
func (u UDP) Encode(f *UDPFields) {
	u.SetSrcPort(f.SrcPort)
	u.SetDstPort(f.DstPort)
	u.SetLength(f.Length)
	u.SetChecksum(f.Checksum)
}

// IPUDPFields are what the IP and UDP headers in front of a datagram's
// payload say of it, for EncodeIPUDP: the frame a UDP socket's datagram is
// shown as (a capture, Read) and the headers a RoCEv2 ICRC covers.
type IPUDPFields struct {
	Src, Dst   netip.AddrPort
	TOS, TTL   uint8  // IPv4 TOS and TTL, or IPv6 traffic class and hop limit
	IPv4ID     uint16 // IPv4 Identification; ignored for IPv6
	PayloadLen int    // UDP payload bytes
}

// EncodeIPUDP writes an IPv4 header (v4: 20 bytes, DF, its checksum, the
// addresses unmapped) or an IPv6 header (flow label 0) and a UDP header
// (checksum 0) for f into b, and returns their length.
func EncodeIPUDP(b []byte, v4 bool, f *IPUDPFields) int {
	udpLen := uint16(UDPLen + f.PayloadLen)
	ipLen := IPv6Len
	if v4 {
		ipLen = IPv4MinLen
		IPv4(b).Encode(&IPv4Fields{
			TOS: f.TOS, TotalLength: uint16(IPv4MinLen) + udpLen, ID: f.IPv4ID, FlagsFragment: IPv4FlagDF,
			TTL: f.TTL, Protocol: IPProtocolUDP, Src: f.Src.Addr().Unmap(), Dst: f.Dst.Addr().Unmap(),
		})
	} else {
		IPv6(b).Encode(&IPv6Fields{
			TrafficClass: f.TOS, PayloadLength: udpLen, NextHeader: IPProtocolUDP,
			HopLimit: f.TTL, Src: f.Src.Addr(), Dst: f.Dst.Addr(),
		})
	}
	UDP(b[ipLen:]).Encode(&UDPFields{SrcPort: f.Src.Port(), DstPort: f.Dst.Port(), Length: udpLen})
	return ipLen + UDPLen
}
