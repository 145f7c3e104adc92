package header

import (
	"encoding/binary"
	"net/netip"
)

// IPv4 constants.
const (
	IPv4MinLen = 20 // an IPv4 header without options
	IPv4MaxLen = 60 // an IPv4 header with IHL 15

	IPv4FlagDF = 0x4000 // Don't Fragment, in the flags/fragment-offset word
	IPv4FlagMF = 0x2000 // More Fragments, in the flags/fragment-offset word

	IPProtocolUDP    = 17 // IP protocol number of UDP
	IPProtocolICMPv6 = 58 // IP protocol number of ICMPv6
)

// IPv4 is an IPv4 header (RFC 791), options included:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|Version|  IHL  |      TOS      |          Total Length         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|         Identification        |Flags|      Fragment Offset    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|      TTL      |    Protocol   |         Header Checksum       |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                       Source Address                          |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                    Destination Address                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
type IPv4 []byte

// Version returns the version field (4 for a valid header).
func (b IPv4) Version() uint8 { return b[0] >> 4 }

// HeaderLen returns the header length in bytes (IHL * 4).
func (b IPv4) HeaderLen() int { return int(b[0]&0x0F) * 4 }

// TOS returns the type-of-service byte (DSCP and ECN).
func (b IPv4) TOS() uint8 { return b[1] }

// TotalLength returns the total length field: header and payload.
func (b IPv4) TotalLength() uint16 { return binary.BigEndian.Uint16(b[2:]) }

// ID returns the Identification field.
func (b IPv4) ID() uint16 { return binary.BigEndian.Uint16(b[4:]) }

// FlagsFragment returns the flags and fragment-offset word (IPv4FlagDF, IPv4FlagMF, offset in 8-byte units).
func (b IPv4) FlagsFragment() uint16 { return binary.BigEndian.Uint16(b[6:]) }

// FragmentOffset returns the fragment offset in 8-byte units.
func (b IPv4) FragmentOffset() uint16 { return b.FlagsFragment() & 0x1FFF }

// TTL returns the time to live.
func (b IPv4) TTL() uint8 { return b[8] }

// Protocol returns the protocol of the payload.
func (b IPv4) Protocol() uint8 { return b[9] }

// Checksum returns the header checksum field.
func (b IPv4) Checksum() uint16 { return binary.BigEndian.Uint16(b[10:]) }

// Src returns the source address.
func (b IPv4) Src() netip.Addr { return netip.AddrFrom4([4]byte(b[12:16])) }

// Dst returns the destination address.
func (b IPv4) Dst() netip.Addr { return netip.AddrFrom4([4]byte(b[16:20])) }

// SetTOS sets the type-of-service byte.
func (b IPv4) SetTOS(v uint8) { b[1] = v }

// SetTotalLength sets the total length field.
func (b IPv4) SetTotalLength(n uint16) { binary.BigEndian.PutUint16(b[2:], n) }

// SetID sets the Identification field.
func (b IPv4) SetID(id uint16) { binary.BigEndian.PutUint16(b[4:], id) }

// SetFlagsFragment sets the flags and fragment-offset word.
func (b IPv4) SetFlagsFragment(v uint16) { binary.BigEndian.PutUint16(b[6:], v) }

// SetTTL sets the time to live.
func (b IPv4) SetTTL(v uint8) { b[8] = v }

// SetChecksum sets the header checksum field.
func (b IPv4) SetChecksum(c uint16) { binary.BigEndian.PutUint16(b[10:], c) }

// SetSrc sets the source address; anything but an IPv4 address writes zeros.
func (b IPv4) SetSrc(a netip.Addr) { putAddr4(b[12:16], a) }

// SetDst sets the destination address; anything but an IPv4 address writes zeros.
func (b IPv4) SetDst(a netip.Addr) { putAddr4(b[16:20], a) }

// CalculateChecksum returns the header checksum of b[:b.HeaderLen()], its
// checksum field taken as zero: the value to store.
func (b IPv4) CalculateChecksum() uint16 { return IPv4Checksum(b[:b.HeaderLen()]) }

// IsChecksumValid reports whether the checksum field is right.
func (b IPv4) IsChecksumValid() bool { return b.Checksum() == b.CalculateChecksum() }

// Check returns an *Error unless b holds a version 4 header of at least
// IPv4MinLen bytes whose header and total lengths fit in b.
func (b IPv4) Check() error {
	if len(b) < IPv4MinLen {
		return Truncated("ipv4", "length", len(b), IPv4MinLen)
	}
	if v := b.Version(); v != 4 {
		return invalid("ipv4", "version", int(v), 4, "!=", "")
	}
	ihl := b.HeaderLen()
	if ihl < IPv4MinLen {
		return invalid("ipv4", "header length", ihl, IPv4MinLen, "<", "")
	}
	if ihl > len(b) {
		return &Error{Header: "ipv4", Field: "header length", Value: uint64(ihl), Limit: uint64(len(b)), Rel: ">", LimitName: "packet", Err: ErrTruncated}
	}
	total := int(b.TotalLength())
	if total < ihl {
		return invalid("ipv4", "total length", total, ihl, "<", "header length")
	}
	if total > len(b) {
		return &Error{Header: "ipv4", Field: "total length", Value: uint64(total), Limit: uint64(len(b)), Rel: ">", LimitName: "packet", Err: ErrTruncated}
	}
	return nil
}

// IPv4Fields is an IPv4 header's content (without options), for Encode.
type IPv4Fields struct {
	TOS           uint8
	TotalLength   uint16
	ID            uint16
	FlagsFragment uint16 // IPv4FlagDF, or 0 to allow fragmentation
	TTL           uint8
	Protocol      uint8
	Src, Dst      netip.Addr // IPv4 addresses; anything else writes zeros
}

// Encode writes a 20-byte header without options into b[:IPv4MinLen], its checksum included.
func (b IPv4) Encode(f *IPv4Fields) {
	b[0] = 0x45
	b[1] = f.TOS
	b.SetTotalLength(f.TotalLength)
	b.SetID(f.ID)
	b.SetFlagsFragment(f.FlagsFragment)
	b[8] = f.TTL
	b[9] = f.Protocol
	b.SetSrc(f.Src)
	b.SetDst(f.Dst)
	b.SetChecksum(IPv4Checksum(b[:IPv4MinLen]))
}

// putAddr4 writes an IPv4 address into dst[:4], zeros if a is not one.
func putAddr4(dst []byte, a netip.Addr) {
	if !a.Is4() {
		clear(dst[:4])
		return
	}
	v := a.As4()
	copy(dst, v[:])
}
