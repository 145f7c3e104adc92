package iwarp

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error returned by the decoders of this package is a *HeaderError
// that wraps one of these, so errors.Is(err, ErrTruncated) and friends work, and errors.As
// gives the header, field and values.
var (
	// ErrTruncated: the input ends before the header or frame it must hold.
	ErrTruncated = errors.New("truncated")
	// ErrTooLong: a length field exceeds the protocol's limit.
	ErrTooLong = errors.New("too long")
	// ErrBadKey: an MPA start frame does not begin with either of the two MPA keys.
	ErrBadKey = errors.New("bad MPA key")
	// ErrBadVersion: a DDP (DV) or RDMAP (RV) version field is not 1.
	ErrBadVersion = errors.New("bad version")
	// ErrBadOpcode: an RDMAP opcode is reserved, or disagrees with the DDP buffer model or queue.
	ErrBadOpcode = errors.New("bad opcode")
	// ErrBadCRC: an FPDU's CRC32c does not match its contents.
	ErrBadCRC = errors.New("bad CRC")
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
	ErrBadValue = errors.New("bad value")
)

// HeaderError describes a malformed or inconsistent field. Its text names the header, the
// field and the values, e.g. "mpa: private data length 600 > 512".
type HeaderError struct {
	// Header is the protocol element: "mpa", "fpdu", "marker", "ddp", "rdmap",
	// "terminate", "atomic", "stream".
	Header string
	// Field is the field at fault, e.g. "private data length".
	Field string
	// Value is the value found, Limit the bound or expected value it was compared with.
	Value, Limit uint64
	// Rel is the relation that Value has to Limit and should not: ">", "<", "!=".
	// Empty means the text shows only Value (and Reason).
	Rel string
	// Hex prints Value and Limit in hexadecimal (CRCs, STags).
	Hex bool
	// NoValue leaves Value out of the text (the field is not a number).
	NoValue bool
	// Reason is an optional explanation appended to the text.
	Reason string
	// Err is the sentinel this error wraps (ErrTruncated, ErrBadCRC, ...).
	Err error
}

// Error returns "header: field value rel limit[: reason]".
func (e *HeaderError) Error() string {
	f := "%d"
	if e.Hex {
		f = "0x%08x"
	}
	var s string
	switch {
	case e.Field == "":
		s = e.Header + ": " + e.Err.Error()
	case e.NoValue:
		s = e.Header + ": " + e.Field
	case e.Rel == "":
		s = fmt.Sprintf("%s: %s "+f, e.Header, e.Field, e.Value)
	default:
		s = fmt.Sprintf("%s: %s "+f+" %s "+f, e.Header, e.Field, e.Value, e.Rel, e.Limit)
	}
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// Unwrap returns the sentinel error.
func (e *HeaderError) Unwrap() error { return e.Err }

// truncated reports that header needs want octets and got have.
func truncated(header, field string, have, want int) error {
	return &HeaderError{Header: header, Field: field, Value: uint64(have), Limit: uint64(want),
		Rel: "<", Err: ErrTruncated}
}
