package iwarp

import (
	"encoding/binary"

	"github.com/softrdma/softrdma/header"
)

// DDP segment headers (RFC 5041 §5). The first two octets are common:
//
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|T|L| Resrv | DV|   RsvdULP[0]  |   (RDMAP puts its control octet in RsvdULP[0])
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// Tagged buffer model (T=1, 14 octets, RFC 5041 §5.2):
//
//	| control | RsvdULP | STag (32) | TO (64) |
//
// Untagged buffer model (T=0, 18 octets, RFC 5041 §5.3):
//
//	| control | RsvdULP (40) | QN (32) | MSN (32) | MO (32) |
//
// RDMAP uses RsvdULP[0] as its control octet and, in untagged segments, the other 32
// bits of RsvdULP for the Invalidate STag of Send with Invalidate (RFC 5040 §4.3).
const (
	// DDPTaggedHeaderLen is the length of a tagged DDP header.
	DDPTaggedHeaderLen = 14
	// DDPUntaggedHeaderLen is the length of an untagged DDP header.
	DDPUntaggedHeaderLen = 18
	// DDPVersion is the only DDP version (DV) RFC 5041 defines.
	DDPVersion = 1

	// DDPFlagTagged is the T bit.
	DDPFlagTagged = 0x80
	// DDPFlagLast is the L bit.
	DDPFlagLast = 0x40
	// DDPReservedMask masks the four reserved bits of the control octet.
	DDPReservedMask = 0x3c
	// DDPVersionMask masks DV.
	DDPVersionMask = 0x03
)

// DDP is a view of a DDP segment (header and payload): the ULPDU of an FPDU.
type DDP []byte

// ParseDDP checks the DDP header of a segment: long enough for its buffer model, DV = 1.
// It returns the view even with a version error, so the caller can still report the
// fields (a Terminate needs the header that caused it).
func ParseDDP(b []byte) (DDP, error) {
	if len(b) < 2 {
		return nil, truncated("ddp", "segment length", len(b), 2)
	}
	d := DDP(b)
	if n := d.HeaderLen(); len(b) < n {
		return nil, truncated("ddp", "segment length", len(b), n)
	}
	if v := d.Version(); v != DDPVersion {
		return d, &header.Error{Header: "ddp", Field: "version", Value: uint64(v),
			Limit: DDPVersion, Rel: "!=", Err: ErrBadVersion}
	}
	return d, nil
}

// Control returns the DDP control octet.
func (d DDP) Control() uint8 { return d[0] }

// SetControl sets the DDP control octet.
func (d DDP) SetControl(v uint8) { d[0] = v }

func (d DDP) setFlag(f uint8, v bool) {
	if v {
		d[0] |= f
	} else {
		d[0] &^= f
	}
}

// Tagged returns the T bit (tagged buffer model).
func (d DDP) Tagged() bool { return d[0]&DDPFlagTagged != 0 }

// SetTagged sets the T bit.
func (d DDP) SetTagged(v bool) { d.setFlag(DDPFlagTagged, v) }

// Last returns the L bit (last segment of the DDP message).
func (d DDP) Last() bool { return d[0]&DDPFlagLast != 0 }

// SetLast sets the L bit.
func (d DDP) SetLast(v bool) { d.setFlag(DDPFlagLast, v) }

// Reserved returns the four reserved bits of the control octet, shifted down.
func (d DDP) Reserved() uint8 { return d[0] & DDPReservedMask >> 2 }

// SetReserved sets the four reserved bits.
func (d DDP) SetReserved(v uint8) { d[0] = d[0]&^DDPReservedMask | v<<2&DDPReservedMask }

// Version returns DV.
func (d DDP) Version() uint8 { return d[0] & DDPVersionMask }

// SetVersion sets DV.
func (d DDP) SetVersion(v uint8) { d[0] = d[0]&^DDPVersionMask | v&DDPVersionMask }

// HeaderLen returns 14 for a tagged and 18 for an untagged segment.
func (d DDP) HeaderLen() int {
	if d.Tagged() {
		return DDPTaggedHeaderLen
	}
	return DDPUntaggedHeaderLen
}

// Header returns the DDP header (including RsvdULP).
func (d DDP) Header() []byte { return d[:d.HeaderLen()] }

// Payload returns the octets after the DDP header.
func (d DDP) Payload() []byte { return d[d.HeaderLen():] }

// RsvdULP returns the ULP's reserved field: 1 octet when tagged, 5 when untagged.
func (d DDP) RsvdULP() []byte {
	if d.Tagged() {
		return d[1:2]
	}
	return d[1:6]
}

// STag returns the data sink STag (tagged).
func (d DDP) STag() uint32 { return binary.BigEndian.Uint32(d[2:]) }

// SetSTag sets the data sink STag (tagged).
func (d DDP) SetSTag(v uint32) { binary.BigEndian.PutUint32(d[2:], v) }

// TO returns the data sink tagged offset (tagged).
func (d DDP) TO() uint64 { return binary.BigEndian.Uint64(d[6:]) }

// SetTO sets the data sink tagged offset (tagged).
func (d DDP) SetTO(v uint64) { binary.BigEndian.PutUint64(d[6:], v) }

// QN returns the queue number (untagged).
func (d DDP) QN() uint32 { return binary.BigEndian.Uint32(d[6:]) }

// SetQN sets the queue number (untagged).
func (d DDP) SetQN(v uint32) { binary.BigEndian.PutUint32(d[6:], v) }

// MSN returns the message sequence number (untagged).
func (d DDP) MSN() uint32 { return binary.BigEndian.Uint32(d[10:]) }

// SetMSN sets the message sequence number (untagged).
func (d DDP) SetMSN(v uint32) { binary.BigEndian.PutUint32(d[10:], v) }

// MO returns the message offset (untagged).
func (d DDP) MO() uint32 { return binary.BigEndian.Uint32(d[14:]) }

// SetMO sets the message offset (untagged).
func (d DDP) SetMO(v uint32) { binary.BigEndian.PutUint32(d[14:], v) }

// Fields returns the header's fields.
func (d DDP) Fields() DDPFields {
	f := DDPFields{
		Tagged:   d.Tagged(),
		Last:     d.Last(),
		Reserved: d.Reserved(),
		Version:  d.Version(),
		RsvdULP0: d[1],
	}
	if f.Tagged {
		f.STag, f.TO = d.STag(), d.TO()
	} else {
		f.RsvdULP1 = binary.BigEndian.Uint32(d[2:])
		f.QN, f.MSN, f.MO = d.QN(), d.MSN(), d.MO()
	}
	return f
}

// DDPFields holds the fields of a DDP header for encoding.
type DDPFields struct {
	// Tagged and Last are the T and L bits.
	Tagged, Last bool
	// Reserved holds the four reserved control bits (normally 0).
	Reserved uint8
	// Version is DV; use DDPVersion.
	Version uint8
	// RsvdULP0 is the first octet of RsvdULP (the RDMAP control octet).
	RsvdULP0 uint8
	// RsvdULP1 is the other 32 bits of RsvdULP in an untagged header (the RDMAP
	// Invalidate STag, or 0).
	RsvdULP1 uint32
	// STag and TO are the tagged buffer model fields.
	STag uint32
	TO   uint64
	// QN, MSN and MO are the untagged buffer model fields.
	QN, MSN, MO uint32
}

// Len returns the header length.
func (f *DDPFields) Len() int {
	if f.Tagged {
		return DDPTaggedHeaderLen
	}
	return DDPUntaggedHeaderLen
}

// Encode writes the header into b (at least f.Len() octets) and returns its length.
func (f *DDPFields) Encode(b []byte) (int, error) {
	n := f.Len()
	if len(b) < n {
		return 0, truncated("ddp", "buffer length", len(b), n)
	}
	d := DDP(b)
	var c uint8
	if f.Tagged {
		c |= DDPFlagTagged
	}
	if f.Last {
		c |= DDPFlagLast
	}
	d[0] = c | f.Reserved<<2&DDPReservedMask | f.Version&DDPVersionMask
	d[1] = f.RsvdULP0
	if f.Tagged {
		d.SetSTag(f.STag)
		d.SetTO(f.TO)
	} else {
		binary.BigEndian.PutUint32(d[2:], f.RsvdULP1)
		d.SetQN(f.QN)
		d.SetMSN(f.MSN)
		d.SetMO(f.MO)
	}
	return n, nil
}
