package header

import "encoding/binary"

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
