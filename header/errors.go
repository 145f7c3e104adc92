// Package header holds what the wire headers of every softrdma protocol package share:
// the error a decoder or encoder returns for a bad field, and the sentinels that classify
// it. ibtransport (BTH and its extension headers), roce (GRH, ICRC), ibcm (MAD, CM,
// rdma_cm's CMA header), iwarp (MPA, DDP, RDMAP) and this package's own views (Ethernet,
// IPv4, IPv6, UDP, TCP) all return a *header.Error, built with Truncated, Invalid or
// Unsupported, so one errors.As and one vocabulary cover every layer:
//
//	bth: pad count 5 > 3
//	ipv4: total length 1500 > packet 1200
//	mpa: private data length 600 > 512: revision 1
//
// The package imports nothing of ours, so any protocol package can use it without
// depending on another one's wire code.
package header

import (
	"errors"
	"strconv"
	"strings"
)

// Sentinels shared by every protocol package. A package whose decoders need a finer
// class (ibtransport.ErrInvalidOpcode, roce.ErrNotRoCE, iwarp.ErrBadKey) defines its own
// sentinel next to these; the package-level names ibtransport.ErrTruncated,
// roce.ErrTruncated and iwarp.ErrTruncated are these same values, so a caller that holds
// errors of several layers classifies them with one errors.Is.
var (
	// ErrTruncated: the input ends before the header, field or payload it must hold.
	ErrTruncated = errors.New("truncated")
	// ErrInvalid: a field holds a value the format forbids (a reserved code, a version
	// other than the one defined, a value too wide for its field), or two length fields
	// disagree.
	ErrInvalid = errors.New("invalid value")
	// ErrUnsupported: the input is well formed but uses a feature the package does not
	// handle (IP fragments, a GRH next header other than BTH, an unknown MAD class version).
	ErrUnsupported = errors.New("unsupported")
	// ErrBadChecksum: a CRC or checksum (RoCE ICRC, MPA CRC32c) does not match the data.
	ErrBadChecksum = errors.New("bad checksum")
)

// Error describes one bad field of a wire header. Its text names the header (which names
// its package: "bth", "reth" are ibtransport's; "grh", "icrc" are roce's; "mad", "cm",
// "cma" are ibcm's; "ethernet", "ipv4", "ipv6", "udp", "tcp" are this package's; "mpa",
// "fpdu", "ddp", "rdmap" are iwarp's), the field and the value, and, when the value broke
// a bound, the relation and the bound:
//
//	header: field value [rel [limit-name] limit][: reason]
//
// errors.Is(err, ErrTruncated) (or the owning package's own sentinel) works through Unwrap.
type Error struct {
	// Header is the lower-case name of the protocol element at fault: "bth", "reth",
	// "ipv4", "udp", "grh", "icrc", "mpa", "fpdu", "ddp", "rdmap", "terminate", ...
	Header string
	// Field is the field (or quantity, such as "packet length") that is wrong. Empty
	// means the error is about the header as a whole; the text then shows Err.
	Field string
	// Value is the value found on the wire or given to an encoder.
	Value uint64
	// Rel is the relation Value has to Limit and should not have: "<", ">", "!=", ...
	// Empty means Limit does not apply.
	Rel string
	// Limit is the bound or expected value that Value broke; shown only with Rel.
	Limit uint64
	// LimitName says what Limit is when it is not a plain bound, e.g. "packet" in
	// "ipv4: total length 1500 > packet 1200".
	LimitName string
	// Hex, if > 0, prints Value and Limit in hexadecimal with at least Hex digits
	// (2 for opcodes, 8 for CRCs and STags, 1 for no padding).
	Hex int
	// NoValue leaves Value out of the text: the field is not a number, or the Field
	// text already says what is wrong ("ethernet: ethertype not IPv4, IPv6 or RoCEv1").
	NoValue bool
	// Reason is optional context appended after ": ", such as the opcode whose layout
	// was expected or why the value is wrong.
	Reason string
	// Err is the sentinel this error wraps: one of this package's, or one of the owning
	// package's (ibtransport.ErrInvalidOpcode, iwarp.ErrBadKey, roce.ErrNotRoCE, ...).
	Err error
}

// Error returns "header: field value [rel [limit-name] limit][: reason]".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Header)
	b.WriteString(": ")
	switch {
	case e.Field == "":
		if e.Err != nil {
			b.WriteString(e.Err.Error())
		}
	default:
		b.WriteString(e.Field)
		if !e.NoValue {
			b.WriteByte(' ')
			e.number(&b, e.Value)
		}
		if e.Rel != "" {
			b.WriteByte(' ')
			b.WriteString(e.Rel)
			b.WriteByte(' ')
			if e.LimitName != "" {
				b.WriteString(e.LimitName)
				b.WriteByte(' ')
			}
			e.number(&b, e.Limit)
		}
	}
	if e.Reason != "" {
		b.WriteString(": ")
		b.WriteString(e.Reason)
	}
	return b.String()
}

// number writes v in decimal, or in hexadecimal with at least e.Hex digits.
func (e *Error) number(b *strings.Builder, v uint64) {
	if e.Hex <= 0 {
		b.WriteString(strconv.FormatUint(v, 10))
		return
	}
	s := strconv.FormatUint(v, 16)
	b.WriteString("0x")
	for i := len(s); i < e.Hex; i++ {
		b.WriteByte('0')
	}
	b.WriteString(s)
}

// Unwrap returns the sentinel error that classifies this error.
func (e *Error) Unwrap() error { return e.Err }

// Truncated returns the error for a header that needs want octets and got have:
// "hdr: field have < want", wrapping ErrTruncated.
func Truncated(hdr, field string, have, want int) *Error {
	return &Error{Header: hdr, Field: field, Value: uint64(have), Rel: "<", Limit: uint64(want), Err: ErrTruncated}
}

// Invalid returns the error for a field whose value the format forbids: "hdr: field value
// [rel limit]", wrapping ErrInvalid. An empty rel leaves limit out of the text.
func Invalid(hdr, field string, value uint64, rel string, limit uint64) *Error {
	return &Error{Header: hdr, Field: field, Value: value, Rel: rel, Limit: limit, Err: ErrInvalid}
}

// Unsupported returns the error for a well-formed field whose value the package does not
// handle (a version other than the one it knows, an unknown code): "hdr: field value [rel
// limit]", wrapping ErrUnsupported. An empty rel leaves limit out of the text.
func Unsupported(hdr, field string, value uint64, rel string, limit uint64) *Error {
	return &Error{Header: hdr, Field: field, Value: value, Rel: rel, Limit: limit, Err: ErrUnsupported}
}

// InHex makes e print its value and limit in hexadecimal with at least digits digits
// (codes, keys and CRCs read better so), and returns e.
func (e *Error) InHex(digits int) *Error {
	e.Hex = digits
	return e
}

// Because appends reason to e's text ("...: reason") and returns e.
func (e *Error) Because(reason string) *Error {
	e.Reason = reason
	return e
}
