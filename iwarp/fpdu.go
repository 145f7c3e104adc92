package iwarp

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/softrdma/softrdma/header"
)

// An FPDU (RFC 5044 §4.1), shown here without markers:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          ULPDU_Length         |                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+                               +
//	~                 ULPDU (the DDP segment)                       ~
//	|                               +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                               |          PAD (0-3 octets)     |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                             CRC                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// ULPDU_Length counts the ULPDU only (not itself, the pad, the CRC or markers). PAD makes
// length+ULPDU+PAD a multiple of 4. The CRC is CRC32c over ULPDU_Length, ULPDU, PAD and
// any markers in between (RFC 5044 §4.4); it is 0 when CRC was not negotiated.
//
// Byte order of the CRC: the field holds the CRC32c value (as hash/crc32 computes it)
// least significant octet first, as iSCSI does (RFC 3385, which RFC 5044 §4.4 refers
// to), not in network byte order like every other field: Linux siw puts it on the wire
// that way, and every FPDU of siw-crc-*.pcap verifies only so (TestCapturesDecode). The
// accessors below take and return the CRC32c value, so FPDU.CRC() == FPDU.ComputeCRC()
// for a good FPDU; tshark shows the field read big-endian (e.g. "0x6f528790" for the
// value 0x9087526f).
const (
	// FPDUHeaderLen is the length of the ULPDU_Length field.
	FPDUHeaderLen = 2
	// CRCLen is the length of the CRC field.
	CRCLen = 4
	// MaxULPDULen is the largest ULPDU an FPDU can carry.
	MaxULPDULen = 0xffff
	// MinFPDULen is the length of an FPDU with an empty ULPDU.
	MinFPDULen = FPDUHeaderLen + 2 + CRCLen
)

// crcTable is the CRC32c table; crc32.Update uses the CPU's CRC32 instruction with it.
var crcTable = crc32.MakeTable(crc32.Castagnoli)

var zeroPad [3]byte

// PadLen returns the number of pad octets after a ULPDU of ulpduLen octets.
func PadLen(ulpduLen int) int { return -(ulpduLen + FPDUHeaderLen) & 3 }

// FPDULen returns the length of an FPDU (markers not counted) carrying ulpduLen octets.
func FPDULen(ulpduLen int) int { return FPDUHeaderLen + ulpduLen + PadLen(ulpduLen) + CRCLen }

// UpdateCRC32c returns crc updated with p; start with 0. Chaining calls over the pieces of
// an FPDU gives the same result as one call over their concatenation.
func UpdateCRC32c(crc uint32, p []byte) uint32 { return crc32.Update(crc, crcTable, p) }

// FPDUCRC returns the CRC32c of an FPDU whose ULPDU_Length field and ULPDU are the
// concatenation of pieces; the pad is implied by their total length.
func FPDUCRC(pieces ...[]byte) uint32 {
	var crc uint32
	n := 0
	for _, p := range pieces {
		crc = UpdateCRC32c(crc, p)
		n += len(p)
	}
	return UpdateCRC32c(crc, zeroPad[:-n&3])
}

// AppendFPDUTrailer appends the pad and the CRC of an FPDU whose ULPDU_Length field and
// ULPDU are the concatenation of pieces (which are not copied). The CRC is 0 unless crc is
// set. With AppendFPDUTrailer an FPDU can be sent as net.Buffers{header, payload, trailer}
// with the payload straight from its buffer.
func AppendFPDUTrailer(dst []byte, crc bool, pieces ...[]byte) []byte {
	n := 0
	for _, p := range pieces {
		n += len(p)
	}
	dst = append(dst, zeroPad[:-n&3]...)
	var c uint32
	if crc {
		c = FPDUCRC(pieces...)
	}
	return binary.LittleEndian.AppendUint32(dst, c)
}

// AppendFPDU appends a whole FPDU (length, ULPDU made of the pieces, pad, CRC) to dst.
func AppendFPDU(dst []byte, crc bool, ulpdu ...[]byte) ([]byte, error) {
	n := 0
	for _, p := range ulpdu {
		n += len(p)
	}
	if n > MaxULPDULen {
		return dst, &header.Error{Header: "fpdu", Field: "ULPDU length", Value: uint64(n),
			Limit: MaxULPDULen, Rel: ">", Err: ErrTooLong}
	}
	start := len(dst)
	dst = binary.BigEndian.AppendUint16(dst, uint16(n))
	for _, p := range ulpdu {
		dst = append(dst, p...)
	}
	dst = append(dst, zeroPad[:PadLen(n)]...)
	var c uint32
	if crc {
		c = UpdateCRC32c(0, dst[start:])
	}
	return binary.LittleEndian.AppendUint32(dst, c), nil
}

// FPDU is a view of one FPDU with markers removed: ULPDU_Length, ULPDU, PAD, CRC.
type FPDU []byte

// ParseFPDU checks that b starts with a complete FPDU and returns it (b cut to the FPDU's
// length).
func ParseFPDU(b []byte) (FPDU, error) {
	if len(b) < FPDUHeaderLen {
		return nil, truncated("fpdu", "length", len(b), FPDUHeaderLen)
	}
	n := FPDULen(int(binary.BigEndian.Uint16(b)))
	if len(b) < n {
		return nil, truncated("fpdu", "length", len(b), n)
	}
	return FPDU(b[:n]), nil
}

// ULPDULength returns the ULPDU_Length field.
func (f FPDU) ULPDULength() uint16 { return binary.BigEndian.Uint16(f) }

// SetULPDULength sets the ULPDU_Length field.
func (f FPDU) SetULPDULength(n uint16) { binary.BigEndian.PutUint16(f, n) }

// Len returns the FPDU's length according to ULPDU_Length.
func (f FPDU) Len() int { return FPDULen(int(f.ULPDULength())) }

// ULPDU returns the ULPDU (the DDP segment).
func (f FPDU) ULPDU() []byte { return f[FPDUHeaderLen : FPDUHeaderLen+int(f.ULPDULength())] }

// Pad returns the pad octets.
func (f FPDU) Pad() []byte {
	n := int(f.ULPDULength())
	return f[FPDUHeaderLen+n : FPDUHeaderLen+n+PadLen(n)]
}

// CRC returns the CRC field (the CRC32c value; the field is little-endian on the wire).
func (f FPDU) CRC() uint32 { return binary.LittleEndian.Uint32(f[f.Len()-CRCLen:]) }

// SetCRC sets the CRC field (stored little-endian).
func (f FPDU) SetCRC(c uint32) { binary.LittleEndian.PutUint32(f[f.Len()-CRCLen:], c) }

// ComputeCRC returns the CRC32c of the FPDU's length, ULPDU and pad. It is the right value
// for the CRC field only when no marker fell inside the FPDU on the wire (markers are
// covered by the CRC; see AppendMarkedFPDU).
func (f FPDU) ComputeCRC() uint32 { return UpdateCRC32c(0, f[:f.Len()-CRCLen]) }

// VerifyCRC returns nil if the CRC field matches ComputeCRC, else an ErrBadCRC error.
func (f FPDU) VerifyCRC() error {
	return checkCRC(f.CRC(), f.ComputeCRC())
}

func checkCRC(got, want uint32) error {
	if got == want {
		return nil
	}
	return &header.Error{Header: "mpa", Field: "CRC", Value: uint64(got), Limit: uint64(want),
		Rel: "!=", Hex: 8, Err: ErrBadCRC}
}
