package ibcm

import "github.com/softrdma/softrdma/header"

// truncated reports that hdr's field is value and must be at least limit.
func truncated(hdr, field string, value, limit uint64) error {
	return header.Truncated(hdr, field, int(value), int(limit))
}

// malformed reports a field whose value the format forbids. rel is how value compares
// with limit ("<", ">", "!="), or else a phrase that says what is wrong ("not 4 or 6"),
// with value left out of the text if it is 0.
func malformed(hdr, field string, value, limit uint64, rel string) error {
	e := &header.Error{Err: header.ErrInvalid, Header: hdr, Field: field, Value: value, Limit: limit}
	switch rel {
	case "<", ">", "<=", ">=", "!=", "==":
		e.Rel = rel
	default:
		e.Reason = rel
		e.NoValue = value == 0
	}
	return e
}
