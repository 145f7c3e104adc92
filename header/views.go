package header

// The link, network and transport headers that carry RoCEv2 and that the netio
// backends write and read — Ethernet II (with at most one 802.1Q tag), IPv4,
// IPv6 and UDP — are byte-slice views here, in the style of gVisor's
// pkg/tcpip/header: a header is a []byte type with accessor and setter pairs; a
// Fields struct with Encode writes a whole header; Check validates a view once
// at the edge and returns an *Error naming the header, the field and the value.
// Nothing allocates. This package is their one owner, and the one owner of the
// Internet checksum: roce frames and decodes packets with them, the UDP socket
// backend synthesises and parses frames with them, ARP/NDP and the capture
// decoder's GSO split use them.

// invalid returns the error for a field whose value breaks a bound: "hdr: field
// value rel [limitName] limit", wrapping ErrInvalid.
func invalid(hdr, field string, value, limit int, rel, limitName string) *Error {
	return &Error{Header: hdr, Field: field, Value: uint64(value), Rel: rel, Limit: uint64(limit), LimitName: limitName, Err: ErrInvalid}
}
