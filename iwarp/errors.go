package iwarp

import (
	"errors"

	"github.com/softrdma/softrdma/header"
)

// Sentinel errors. Every error returned by the decoders of this package is a *header.Error
// that wraps one of these, so errors.Is(err, ErrTruncated) and friends work, and errors.As
// gives the header, field and values. ErrTruncated, ErrBadCRC and ErrBadValue are the
// shared header.ErrTruncated, header.ErrBadChecksum and header.ErrInvalid, so they also
// match the same classes of error from roce and ibtransport.
var (
	// ErrTruncated: the input ends before the header or frame it must hold.
	ErrTruncated = header.ErrTruncated
	// ErrTooLong: a length field exceeds the protocol's limit.
	ErrTooLong = errors.New("too long")
	// ErrBadKey: an MPA start frame does not begin with either of the two MPA keys.
	ErrBadKey = errors.New("bad MPA key")
	// ErrBadVersion: a DDP (DV) or RDMAP (RV) version field is not 1.
	ErrBadVersion = errors.New("bad version")
	// ErrBadOpcode: an RDMAP opcode is reserved, or disagrees with the DDP buffer model or queue.
	ErrBadOpcode = errors.New("bad opcode")
	// ErrBadCRC: an FPDU's CRC32c does not match its contents.
	ErrBadCRC = header.ErrBadChecksum
	// ErrMarkerMismatch: an MPA marker's FPDU pointer does not point at the FPDU header
	// (RFC 5044 §8, LLP error code 3 "MPA Marker and ULPDU Length field mismatch").
	ErrMarkerMismatch = errors.New("marker mismatch")
	// ErrNoNegotiation: a stream did not start with an MPA start frame, so CRC and marker
	// use are unknown (typically a capture started after connection setup).
	ErrNoNegotiation = errors.New("no MPA negotiation seen")
	// ErrNegotiationIncomplete: FPDUs arrived while the peer's MPA start frame was still
	// unknown, and the decoder stopped waiting for it.
	ErrNegotiationIncomplete = errors.New("MPA negotiation incomplete")
	// ErrFramingLost: the stream decoder could not find an FPDU boundary and skipped octets.
	ErrFramingLost = errors.New("FPDU framing lost")
	// ErrBadValue: some other field holds a value the protocol does not allow.
	ErrBadValue = header.ErrInvalid
)

// truncated reports that header needs want octets and got have.
func truncated(hdr, field string, have, want int) error {
	return header.Truncated(hdr, field, have, want)
}
