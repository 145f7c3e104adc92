package ibtransport

import (
	"encoding/binary"

	"github.com/softrdma/softrdma/header"
)

// BTHLen is the length of the Base Transport Header in bytes.
const BTHLen = 12

// Limits of the narrow BTH fields.
const (
	// MaxPadCount is the largest BTH pad count (2 bits).
	MaxPadCount = 3
	// MaxTVer is the largest value the 4-bit transport header version field holds;
	// IBTA Vol1 9.2 defines only version 0.
	MaxTVer = 15
	// QPNMask masks a 24-bit queue pair number (BTH DestQP, DETH SrcQP).
	QPNMask = 1<<24 - 1
)

// Byte offsets of the BTH fields.
const (
	bthOpcode = 0
	bthFlags  = 1 // SE, M, PadCnt, TVer
	bthPKey   = 2
	bthFECN   = 4 // FECN, BECN, 6 reserved bits
	bthDestQP = 5
	bthAckReq = 8 // AckReq, 7 reserved bits
	bthPSN    = 9
)

// Bits of the BTH flag bytes.
const (
	bthSEBit     = 0x80
	bthMigReqBit = 0x40
	bthPadShift  = 4
	bthPadMask   = 0x30
	bthTVerMask  = 0x0f
	bthFECNBit   = 0x80
	bthBECNBit   = 0x40
	bthAckReqBit = 0x80
	bthResv6Mask = 0x3f
	bthResv7Mask = 0x7f
)

// BTH is the Base Transport Header (IBTA Vol1 9.2), a view over the first BTHLen
// bytes of an IB transport packet. Accessors read and setters write the bytes in
// place; the slice must be at least BTHLen long.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|    OpCode     |S|M|Pad|  TVer |           P_Key               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|F|B| Reserved  |              Destination QP                   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|A|  Reserved   |          Packet Sequence Number               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// F and B are FECN and BECN (RoCEv2, IBTA Annex A17; reserved in native IB).
// The ICRC is computed with byte 4 (F, B, reserved) set to all ones; that is the
// RoCE layer's job.
type BTH []byte

// BTHFields holds the BTH fields for Encode. Reserved bits are always encoded as 0.
type BTHFields struct {
	// Opcode is the transport opcode.
	Opcode Opcode
	// SE is the solicited event bit.
	SE bool
	// MigReq is the migration request bit.
	MigReq bool
	// PadCount is the number of pad bytes after the payload (0..3).
	PadCount uint8
	// TVer is the transport header version (0).
	TVer uint8
	// PKey is the partition key.
	PKey uint16
	// FECN is the forward explicit congestion notification bit.
	FECN bool
	// BECN is the backward explicit congestion notification bit.
	BECN bool
	// DestQP is the 24-bit destination queue pair number.
	DestQP uint32
	// AckReq is the acknowledge request bit.
	AckReq bool
	// PSN is the 24-bit packet sequence number.
	PSN uint32
}

// Opcode returns the opcode field.
func (b BTH) Opcode() Opcode { return Opcode(b[bthOpcode]) }

// SE returns the solicited event bit.
func (b BTH) SE() bool { return b[bthFlags]&bthSEBit != 0 }

// MigReq returns the migration request bit.
func (b BTH) MigReq() bool { return b[bthFlags]&bthMigReqBit != 0 }

// PadCount returns the number of pad bytes after the payload (0..3).
func (b BTH) PadCount() uint8 { return (b[bthFlags] & bthPadMask) >> bthPadShift }

// TVer returns the transport header version.
func (b BTH) TVer() uint8 { return b[bthFlags] & bthTVerMask }

// PKey returns the partition key.
func (b BTH) PKey() uint16 { return binary.BigEndian.Uint16(b[bthPKey:]) }

// FECN returns the forward explicit congestion notification bit.
func (b BTH) FECN() bool { return b[bthFECN]&bthFECNBit != 0 }

// BECN returns the backward explicit congestion notification bit.
func (b BTH) BECN() bool { return b[bthFECN]&bthBECNBit != 0 }

// Reserved6 returns the 6 reserved bits after BECN (transmitted as 0).
func (b BTH) Reserved6() uint8 { return b[bthFECN] & bthResv6Mask }

// DestQP returns the 24-bit destination queue pair number.
func (b BTH) DestQP() uint32 { return get24(b[bthDestQP:]) }

// AckReq returns the acknowledge request bit.
func (b BTH) AckReq() bool { return b[bthAckReq]&bthAckReqBit != 0 }

// Reserved7 returns the 7 reserved bits after AckReq (transmitted as 0).
func (b BTH) Reserved7() uint8 { return b[bthAckReq] & bthResv7Mask }

// PSN returns the 24-bit packet sequence number.
func (b BTH) PSN() uint32 { return get24(b[bthPSN:]) }

// SetOpcode sets the opcode field.
func (b BTH) SetOpcode(o Opcode) { b[bthOpcode] = uint8(o) }

// SetSE sets the solicited event bit.
func (b BTH) SetSE(v bool) { setBit(&b[bthFlags], bthSEBit, v) }

// SetMigReq sets the migration request bit.
func (b BTH) SetMigReq(v bool) { setBit(&b[bthFlags], bthMigReqBit, v) }

// SetPadCount sets the pad count; only the low 2 bits of n are used.
func (b BTH) SetPadCount(n uint8) {
	b[bthFlags] = b[bthFlags]&^bthPadMask | (n<<bthPadShift)&bthPadMask
}

// SetTVer sets the transport header version; only the low 4 bits of v are used.
func (b BTH) SetTVer(v uint8) { b[bthFlags] = b[bthFlags]&^bthTVerMask | v&bthTVerMask }

// SetPKey sets the partition key.
func (b BTH) SetPKey(k uint16) { binary.BigEndian.PutUint16(b[bthPKey:], k) }

// SetFECN sets the forward explicit congestion notification bit.
func (b BTH) SetFECN(v bool) { setBit(&b[bthFECN], bthFECNBit, v) }

// SetBECN sets the backward explicit congestion notification bit.
func (b BTH) SetBECN(v bool) { setBit(&b[bthFECN], bthBECNBit, v) }

// SetReserved6 sets the 6 reserved bits after BECN (for conformance tests only).
func (b BTH) SetReserved6(v uint8) {
	b[bthFECN] = b[bthFECN]&^bthResv6Mask | v&bthResv6Mask
}

// SetDestQP sets the destination queue pair number; only the low 24 bits are used.
func (b BTH) SetDestQP(qpn uint32) { put24(b[bthDestQP:], qpn) }

// SetAckReq sets the acknowledge request bit.
func (b BTH) SetAckReq(v bool) { setBit(&b[bthAckReq], bthAckReqBit, v) }

// SetReserved7 sets the 7 reserved bits after AckReq (for conformance tests only).
func (b BTH) SetReserved7(v uint8) {
	b[bthAckReq] = b[bthAckReq]&^bthResv7Mask | v&bthResv7Mask
}

// SetPSN sets the packet sequence number; only the low 24 bits are used.
func (b BTH) SetPSN(psn uint32) { put24(b[bthPSN:], psn) }

// Encode writes all BTH fields from f, with the reserved bits cleared. Values wider
// than their fields are truncated; use BTHFields.Validate to reject them instead.
func (b BTH) Encode(f *BTHFields) {
	_ = b[BTHLen-1]
	b[bthOpcode] = uint8(f.Opcode)
	flags := (f.PadCount<<bthPadShift)&bthPadMask | f.TVer&bthTVerMask
	if f.SE {
		flags |= bthSEBit
	}
	if f.MigReq {
		flags |= bthMigReqBit
	}
	b[bthFlags] = flags
	binary.BigEndian.PutUint16(b[bthPKey:], f.PKey)
	var fb uint8
	if f.FECN {
		fb |= bthFECNBit
	}
	if f.BECN {
		fb |= bthBECNBit
	}
	b[bthFECN] = fb
	put24(b[bthDestQP:], f.DestQP)
	var a uint8
	if f.AckReq {
		a = bthAckReqBit
	}
	b[bthAckReq] = a
	put24(b[bthPSN:], f.PSN)
}

// Fields returns the BTH fields (reserved bits are not part of BTHFields).
func (b BTH) Fields() BTHFields {
	return BTHFields{
		Opcode:   b.Opcode(),
		SE:       b.SE(),
		MigReq:   b.MigReq(),
		PadCount: b.PadCount(),
		TVer:     b.TVer(),
		PKey:     b.PKey(),
		FECN:     b.FECN(),
		BECN:     b.BECN(),
		DestQP:   b.DestQP(),
		AckReq:   b.AckReq(),
		PSN:      b.PSN(),
	}
}

// Validate reports the first field of f that does not fit the wire format: a pad
// count above 3, a transport header version other than 0, a DestQP or PSN wider
// than 24 bits. It does not judge the opcode; see Opcode.Valid.
func (f *BTHFields) Validate() error {
	switch {
	case f.PadCount > MaxPadCount:
		return &header.Error{Header: "bth", Field: "pad count", Value: uint64(f.PadCount),
			Rel: ">", Limit: MaxPadCount, Err: ErrInvalidField}
	case f.TVer != 0:
		return &header.Error{Header: "bth", Field: "transport header version", Value: uint64(f.TVer),
			Rel: "!=", Limit: 0, Err: ErrInvalidField}
	case f.DestQP > QPNMask:
		return &header.Error{Header: "bth", Field: "destination QP", Value: uint64(f.DestQP),
			Rel: ">", Limit: QPNMask, Err: ErrInvalidField}
	case f.PSN > PSNMask:
		return &header.Error{Header: "bth", Field: "PSN", Value: uint64(f.PSN),
			Rel: ">", Limit: PSNMask, Err: ErrInvalidField}
	}
	return nil
}

// get24 reads a 24-bit big-endian value.
func get24(b []byte) uint32 {
	_ = b[2]
	return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2])
}

// put24 writes the low 24 bits of v big-endian.
func put24(b []byte, v uint32) {
	_ = b[2]
	b[0] = uint8(v >> 16)
	b[1] = uint8(v >> 8)
	b[2] = uint8(v)
}

// setBit sets or clears mask in *p.
func setBit(p *uint8, mask uint8, v bool) {
	if v {
		*p |= mask
	} else {
		*p &^= mask
	}
}
