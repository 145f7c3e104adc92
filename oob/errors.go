package oob

import (
	"errors"
	"strings"
)

// Sentinel errors. Every decoding error of the oob packages is an *Error wrapping one of
// these, so errors.Is(err, oob.ErrTruncated) and errors.As(err, &e) both work.
var (
	// ErrTruncated: a message is shorter than its fixed size.
	ErrTruncated = errors.New("truncated")
	// ErrSyntax: a text message does not have the layout the tool prints (a missing
	// separator, a non-hex digit, a missing NUL).
	ErrSyntax = errors.New("syntax error")
	// ErrRange: a value does not fit the field that must carry it (a 25-bit PSN, a
	// negative size).
	ErrRange = errors.New("out of range")
	// ErrUnexpected: a well-formed message that is not the one the exchange expects
	// here (anything but "done" where "done" must come).
	ErrUnexpected = errors.New("unexpected message")
	// ErrIncompatible: the peer announced something the real tool refuses to work
	// with (a perftest version older than 5.70, GIDs of different kinds).
	ErrIncompatible = errors.New("incompatible peer")
)

// Error describes a malformed, truncated or unexpected out-of-band message. Its text
// names the message, the field and the value, e.g.
// `perftest keys: qpn "1000000" has 7 hex digits, want 6`.
type Error struct {
	// Message is the message at fault: "pingpong dest", "perftest keys", "perftest
	// version", "perftest mtu", ...
	Message string
	// Field is the field at fault ("qpn", "gid[3]", "length"); empty for the message
	// as a whole.
	Field string
	// Value is the offending value as text (a quoted string or a number); may be empty.
	Value string
	// Reason says what is wrong with it, e.g. "> 0xffffff" or "want 52".
	Reason string
	// Err is the sentinel this error wraps.
	Err error
}

// Error returns "message: field value reason".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Message)
	b.WriteString(":")
	for _, s := range []string{e.Field, e.Value, e.Reason} {
		if s != "" {
			b.WriteByte(' ')
			b.WriteString(s)
		}
	}
	if e.Field == "" && e.Value == "" && e.Reason == "" && e.Err != nil {
		b.WriteByte(' ')
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the sentinel.
func (e *Error) Unwrap() error { return e.Err }
