package header

// Checksum returns the 16-bit one's complement sum (RFC 1071) of b added to
// initial, not complemented: chain it over a pseudo-header and a message, then
// complement the result. An odd final byte counts as its high half.
func Checksum(b []byte, initial uint16) uint16 {
	sum := uint64(initial)
	for len(b) >= 8 {
		sum += uint64(b[0])<<8 | uint64(b[1])
		sum += uint64(b[2])<<8 | uint64(b[3])
		sum += uint64(b[4])<<8 | uint64(b[5])
		sum += uint64(b[6])<<8 | uint64(b[7])
		b = b[8:]
	}
	for len(b) >= 2 {
		sum += uint64(b[0])<<8 | uint64(b[1])
		b = b[2:]
	}
	if len(b) == 1 {
		sum += uint64(b[0]) << 8
	}
	for sum>>16 != 0 {
		sum = sum>>16 + sum&0xFFFF
	}
	return uint16(sum)
}

// IPv4Checksum returns the header checksum of the IPv4 header hdr (with any
// options) computed with its checksum field taken as zero, whatever it holds:
// the value to store.
func IPv4Checksum(hdr []byte) uint16 {
	if len(hdr) < 12 {
		return ^Checksum(hdr, 0)
	}
	return ^Checksum(hdr[12:], Checksum(hdr[:10], 0))
}
