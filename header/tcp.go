package header

import (
	"encoding/binary"
	"net/netip"
)

// TCP constants.
const (
	TCPMinLen = 20 // a TCP header without options (data offset 5)
	TCPMaxLen = 60 // a TCP header with data offset 15

	IPProtocolTCP = 6 // IP protocol number of TCP

	// TCP flag bits, in the low byte of TCP.Flags (RFC 9293 section 3.1).
	TCPFlagFIN = 0x01
	TCPFlagSYN = 0x02
	TCPFlagRST = 0x04
	TCPFlagPSH = 0x08
	TCPFlagACK = 0x10
	TCPFlagURG = 0x20
	TCPFlagECE = 0x40
	TCPFlagCWR = 0x80
)

// TCP is a TCP header (RFC 9293), options included:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          Source Port          |       Destination Port        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        Sequence Number                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Acknowledgment Number                      |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  Data |       |C|E|U|A|P|R|S|F|                               |
//	| Offset| Rsrvd |W|C|R|C|S|S|Y|I|            Window             |
//	|       |       |R|E|G|K|H|T|N|N|                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|           Checksum            |         Urgent Pointer        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The accessors read the fixed 20 bytes; use Check first on input not known
// to hold them.
type TCP []byte

// SrcPort returns the source port.
func (t TCP) SrcPort() uint16 { return binary.BigEndian.Uint16(t[0:]) }

// DstPort returns the destination port.
func (t TCP) DstPort() uint16 { return binary.BigEndian.Uint16(t[2:]) }

// Seq returns the sequence number.
func (t TCP) Seq() uint32 { return binary.BigEndian.Uint32(t[4:]) }

// Ack returns the acknowledgement number (meaningful with TCPFlagACK).
func (t TCP) Ack() uint32 { return binary.BigEndian.Uint32(t[8:]) }

// DataOffset returns the data offset field: the header length in 32-bit words.
func (t TCP) DataOffset() uint8 { return t[12] >> 4 }

// HeaderLen returns the header length in bytes, options included.
func (t TCP) HeaderLen() int { return int(t.DataOffset()) * 4 }

// Flags returns the flag bits (TCPFlagFIN ... TCPFlagCWR).
func (t TCP) Flags() uint8 { return t[13] }

// Window returns the window field.
func (t TCP) Window() uint16 { return binary.BigEndian.Uint16(t[14:]) }

// Checksum returns the checksum field.
func (t TCP) Checksum() uint16 { return binary.BigEndian.Uint16(t[16:]) }

// Urgent returns the urgent pointer (meaningful with TCPFlagURG).
func (t TCP) Urgent() uint16 { return binary.BigEndian.Uint16(t[18:]) }

// Payload returns the bytes after the header; t must pass Check.
func (t TCP) Payload() []byte { return t[t.HeaderLen():] }

// SetSrcPort sets the source port.
func (t TCP) SetSrcPort(p uint16) { binary.BigEndian.PutUint16(t[0:], p) }

// SetDstPort sets the destination port.
func (t TCP) SetDstPort(p uint16) { binary.BigEndian.PutUint16(t[2:], p) }

// SetSeq sets the sequence number.
func (t TCP) SetSeq(n uint32) { binary.BigEndian.PutUint32(t[4:], n) }

// SetAck sets the acknowledgement number.
func (t TCP) SetAck(n uint32) { binary.BigEndian.PutUint32(t[8:], n) }

// SetDataOffset sets the data offset (header length in 32-bit words, 4 bits),
// clearing the reserved bits beside it.
func (t TCP) SetDataOffset(words uint8) { t[12] = words << 4 }

// SetFlags sets the flag bits.
func (t TCP) SetFlags(f uint8) { t[13] = f }

// SetWindow sets the window field.
func (t TCP) SetWindow(w uint16) { binary.BigEndian.PutUint16(t[14:], w) }

// SetChecksum sets the checksum field.
func (t TCP) SetChecksum(c uint16) { binary.BigEndian.PutUint16(t[16:], c) }

// SetUrgent sets the urgent pointer.
func (t TCP) SetUrgent(p uint16) { binary.BigEndian.PutUint16(t[18:], p) }

// CalculateChecksum returns the checksum of the segment t (header, options
// and payload: all of t) from src to dst, over the IPv4 or IPv6 pseudo-header
// (RFC 9293 section 3.1, RFC 8200 section 8.1) with t's checksum field taken
// as zero, whatever it holds: the value to store.
func (t TCP) CalculateChecksum(src, dst netip.Addr) uint16 {
	sum := Checksum(t[:16], PseudoHeaderChecksum(IPProtocolTCP, src, dst, len(t)))
	return ^Checksum(t[18:], sum)
}

// IsChecksumValid reports whether the checksum field of the segment t (all of
// t) from src to dst is right.
func (t TCP) IsChecksumValid(src, dst netip.Addr) bool {
	return t.Checksum() == t.CalculateChecksum(src, dst)
}

// Check returns an *Error unless t holds a fixed header whose data offset is
// at least 5 words and whose header, options included, fits in t.
func (t TCP) Check() error {
	if len(t) < TCPMinLen {
		return Truncated("tcp", "length", len(t), TCPMinLen)
	}
	if off := int(t.DataOffset()); off < TCPMinLen/4 {
		return invalid("tcp", "data offset", off, TCPMinLen/4, "<", "")
	}
	if n := t.HeaderLen(); n > len(t) {
		return &Error{Header: "tcp", Field: "header length", Value: uint64(n), Rel: ">", Limit: uint64(len(t)), LimitName: "segment", Err: ErrTruncated}
	}
	return nil
}

// TCPFields is a TCP header's content (without options), for Encode.
type TCPFields struct {
	SrcPort, DstPort uint16
	Seq, Ack         uint32
	Flags            uint8 // TCPFlagSYN | TCPFlagACK ...
	Window           uint16
	Checksum         uint16 // usually 0, then SetChecksum(CalculateChecksum(...)) over the whole segment
	Urgent           uint16
}

// Encode writes a 20-byte header without options (data offset 5) into t[:TCPMinLen].
func (t TCP) Encode(f *TCPFields) {
	t.SetSrcPort(f.SrcPort)
	t.SetDstPort(f.DstPort)
	t.SetSeq(f.Seq)
	t.SetAck(f.Ack)
	t.SetDataOffset(TCPMinLen / 4)
	t.SetFlags(f.Flags)
	t.SetWindow(f.Window)
	t.SetChecksum(f.Checksum)
	t.SetUrgent(f.Urgent)
}
