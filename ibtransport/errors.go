package ibtransport

import (
	"errors"
	"strconv"
	"strings"
)

// Sentinel errors of the IB transport wire format. Every *HeaderError wraps exactly
// one of them, so callers can classify a bad packet with errors.Is.
var (
	// ErrTruncated means the input ends before a header that the opcode requires.
	ErrTruncated = errors.New("truncated")
	// ErrInvalidOpcode means the BTH opcode is reserved or unknown to the opcode table.
	ErrInvalidOpcode = errors.New("invalid opcode")
	// ErrInvalidField means a header field has a value the wire format does not allow
	// (a transport header version other than 0, a pad count larger than the payload,
	// a value too wide for its field).
	ErrInvalidField = errors.New("invalid field value")
	// ErrUnexpectedPayload means payload bytes follow the headers of an opcode that
	// carries none, or an opcode with a fixed payload size carries another size.
	ErrUnexpectedPayload = errors.New("unexpected payload")
)

// HeaderError describes one defect of a packet's IB transport headers: which header,
// which field, the value found and the limit it broke. Its text reads like
// "bth: pad count 5 > 3" or "reth: packet length 20 < 28 (RC RDMA_WRITE_FIRST)".
// errors.Is(err, ErrTruncated) etc. work through Unwrap.
type HeaderError struct {
	// Header is the lower-case header name: "bth", "reth", "aeth", "atomic write", ...
	Header string
	// Field is the field (or quantity, such as "packet length") that is wrong.
	Field string
	// Value is the value found on the wire or given to an encoder.
	Value uint64
	// Relation is how Value compares with Limit ("<", ">", "!="), or "" if Limit
	// does not apply.
	Relation string
	// Limit is the bound that Value broke; meaningful only if Relation is set.
	Limit uint64
	// Detail is optional context, such as the opcode whose layout was expected.
	Detail string
	// Err is the sentinel this error wraps: ErrTruncated, ErrInvalidOpcode,
	// ErrInvalidField or ErrUnexpectedPayload.
	Err error
}

// Error formats the error as "header: field value relation limit (detail)".
func (e *HeaderError) Error() string {
	var b strings.Builder
	b.WriteString(e.Header)
	b.WriteString(": ")
	b.WriteString(e.Field)
	b.WriteByte(' ')
	if e.Field == "opcode" {
		b.WriteString("0x")
		if e.Value < 0x10 {
			b.WriteByte('0')
		}
		b.WriteString(strconv.FormatUint(e.Value, 16))
	} else {
		b.WriteString(strconv.FormatUint(e.Value, 10))
	}
	if e.Relation != "" {
		b.WriteByte(' ')
		b.WriteString(e.Relation)
		b.WriteByte(' ')
		b.WriteString(strconv.FormatUint(e.Limit, 10))
	}
	if e.Detail != "" {
		b.WriteString(" (")
		b.WriteString(e.Detail)
		b.WriteByte(')')
	}
	return b.String()
}

// Unwrap returns the sentinel error that classifies this error.
func (e *HeaderError) Unwrap() error { return e.Err }
