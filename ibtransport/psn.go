package ibtransport

// PSNMask masks a 24-bit packet sequence number. PSNs (and AETH MSNs) count modulo
// 2^24 (IBTA Vol1 9.7.1); the functions below do that arithmetic.
const PSNMask = 1<<24 - 1

// psnHalf is half the PSN space, 2^23.
const psnHalf = 1 << 23

// PSNAdd returns psn + n modulo 2^24; n may be negative.
func PSNAdd(psn uint32, n int) uint32 {
	return uint32(int64(psn)+int64(n)) & PSNMask
}

// PSNDiff returns the signed distance a - b modulo 2^24, in (-2^23, 2^23]: positive
// if a is after b. The input bits above 24 are ignored.
func PSNDiff(a, b uint32) int32 {
	d := int32((a - b) & PSNMask)
	if d > psnHalf {
		d -= 1 << 24
	}
	return d
}

// PSNLess reports whether a comes before b in the modulo-2^24 order
// (PSNDiff(a, b) < 0).
func PSNLess(a, b uint32) bool { return PSNDiff(a, b) < 0 }

// PSNLessEqual reports whether a comes before b or equals it (PSNDiff(a, b) <= 0).
func PSNLessEqual(a, b uint32) bool { return PSNDiff(a, b) <= 0 }

// PSNInWindow reports whether psn lies in the n PSNs starting at first, that is
// 0 <= PSNDiff(psn, first) < n.
func PSNInWindow(psn, first uint32, n int) bool {
	d := PSNDiff(psn, first)
	return d >= 0 && int(d) < n
}
