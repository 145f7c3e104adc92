package ibtransport

import (
	"errors"

	"github.com/softrdma/softrdma/header"
)

// Sentinel errors of the IB transport wire format. Every *header.Error wraps exactly
// one of them, so callers can classify a bad packet with errors.Is. ErrTruncated and
// ErrInvalidField are the shared header.ErrTruncated and header.ErrInvalid, so they
// also match the truncation and bad-value errors of roce and iwarp.
var (
	// ErrTruncated means the input ends before a header that the opcode requires.
	ErrTruncated = header.ErrTruncated
	// ErrInvalidOpcode means the BTH opcode is reserved or unknown to the opcode table.
	ErrInvalidOpcode = errors.New("ibtransport: invalid opcode")
	// ErrInvalidField means a header field has a value the wire format does not allow
	// (a transport header version other than 0, a pad count larger than the payload,
	// a value too wide for its field).
	ErrInvalidField = header.ErrInvalid
	// ErrUnexpectedPayload means payload bytes follow the headers of an opcode that
	// carries none, or an opcode with a fixed payload size carries another size.
	ErrUnexpectedPayload = errors.New("ibtransport: unexpected payload")
)
