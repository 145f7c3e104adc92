package roce

import (
	"hash/crc32"
	"sync"
)

// The ICRC of RoCEv2 over IPv4 covers the IPv4 Identification field, which an
// ordinary UDP socket never reports. rxe numbers its packets, so a receiver on a
// UDP socket cannot recompute the ICRC directly. But a CRC is linear: with the
// ID taken as 0 the computed ICRC differs from the carried one by a value that
// depends only on the real ID and on how many bytes follow it. Undoing the
// effect of those trailing bytes (multiplying by x^-8n modulo the CRC
// polynomial) leaves the CRC register difference that the two ID bytes made,
// and the CRC table's top bytes are a bijection, so both bytes fall out; 16 of
// the 32 ICRC bits remain as a check. RecoverIPv4ID does that in constant time.

// crcPoly is the reflected CRC-32 (IEEE) polynomial.
const crcPoly = 0xEDB88320

// multModP multiplies a and b modulo the CRC polynomial, in the reflected
// representation where x^0 is the top bit (zlib's multmodp).
func multModP(a, b uint32) uint32 {
	m := uint32(1) << 31
	var p uint32
	for {
		if a&m != 0 {
			p ^= b
			if a&(m-1) == 0 {
				return p
			}
		}
		m >>= 1
		if b&1 != 0 {
			b = b>>1 ^ crcPoly
		} else {
			b >>= 1
		}
	}
}

// xInvPow[k] is x^-(8·2^k) modulo the polynomial: undoing 2^k bytes.
var xInvPow = func() (t [32]uint32) {
	// x^-1: the state that one zero bit takes to x^0. A zero bit maps s to
	// s>>1 ^ (poly if s&1); x^0 = 1<<31 has its top bit set, so it came
	// from a state with the low bit set: ((x^0 ^ poly) << 1) | 1.
	xinv := (uint32(1)<<31^crcPoly)<<1 | 1
	p := xinv
	for range 3 { // x^-8
		p = multModP(p, p)
	}
	t[0] = p
	for k := 1; k < len(t); k++ {
		t[k] = multModP(t[k-1], t[k-1])
	}
	return t
}()

// unshiftCache remembers x^-8n for recent lengths: packets of one flow mostly
// have the same few lengths.
var unshiftCache struct {
	sync.Mutex
	n [8]int
	v [8]uint32
	i int
}

// unshift returns d multiplied by x^-8n: the CRC register difference that,
// followed by n zero-difference bytes, gives difference d.
func unshift(d uint32, n int) uint32 {
	unshiftCache.Lock()
	for i, m := range unshiftCache.n {
		if m == n && n != 0 {
			v := unshiftCache.v[i]
			unshiftCache.Unlock()
			return multModP(v, d)
		}
	}
	unshiftCache.Unlock()
	v := uint32(1) << 31 // x^0
	for k := 0; n>>k != 0; k++ {
		if n>>k&1 != 0 {
			v = multModP(v, xInvPow[k])
		}
	}
	unshiftCache.Lock()
	unshiftCache.n[unshiftCache.i] = n
	unshiftCache.v[unshiftCache.i] = v
	unshiftCache.i = (unshiftCache.i + 1) % len(unshiftCache.n)
	unshiftCache.Unlock()
	return multModP(v, d)
}

// topByteIndex[b] is the table index whose entry has top byte b.
var topByteIndex = func() (t [256]uint8) {
	for i := range 256 {
		t[crc32.IEEETable[i]>>24] = uint8(i)
	}
	return t
}()

// RecoverIPv4ID returns the IPv4 Identification that makes the ICRC of f (a
// decoded RoCEv2-over-IPv4 frame whose ID field is unknown, e.g. zero as a UDP
// socket backend writes it) verify, and whether one exists. It reads the frame's
// ID bytes as zero and leaves them as they were. A frame corrupted
// anywhere the ICRC covers still yields an ID with probability 2^-16: callers
// that know the sender's previous ID can check that the result follows it.
func RecoverIPv4ID(f *Frame) (uint16, bool) {
	if f.Version != RoCEv2 || f.IPv6 || len(f.IP) < IPv4Len || len(f.IB) < minIBLen || len(f.icrc) != ICRCLen {
		return 0, false
	}
	// Compute with the ID as 0 in place (restored after): a copy of the header
	// would escape to the heap through crc32.Update.
	id0, id1 := f.IP[4], f.IP[5]
	f.IP[4], f.IP[5] = 0, 0
	d := ComputeICRC(f.IP, f.UDP, f.IB) ^ f.ICRC
	f.IP[4], f.IP[5] = id0, id1
	trailing := len(f.IP) - 6 + len(f.UDP) + len(f.IB)
	s := unshift(d, trailing)
	// s = T[(T[b0] ^ b1) & 0xff] ^ T[b0]>>8 for the ID bytes b0, b1.
	i2 := topByteIndex[s>>24]
	t0 := (s ^ crc32.IEEETable[i2]) << 8 // T[b0] without its low byte
	b0 := topByteIndex[t0>>24]
	b1 := i2 ^ uint8(crc32.IEEETable[b0])
	if crc32.IEEETable[uint8(crc32.IEEETable[b0])^b1]^crc32.IEEETable[b0]>>8 != s {
		return 0, false
	}
	return uint16(b0)<<8 | uint16(b1), true
}
