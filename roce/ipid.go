package roce

import (
	"hash/crc32"
	"math"
	"sync/atomic"

	"github.com/softrdma/softrdma/header"
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

// unshifts remembers x^-8n for recent lengths: packets of one flow mostly
// have the same few lengths.
var unshifts = powCache{pow: &xInvPow}

// unshift returns d multiplied by x^-8n: the CRC register difference that,
// followed by n zero-difference bytes, gives difference d.
func unshift(d uint32, n int) uint32 { return unshifts.mul(d, n) }

// powCache multiplies by x^(±8n) modulo the polynomial, remembering the
// powers of recent lengths n, and for lengths seen often a byte-wise table
// that multiplies without a loop over the bits (RecoverIPv4ID runs for
// every IPv4 packet a UDP device receives). It is shared
// by every device's receive and send goroutines, so a hit only loads: a
// mutex here cost 3.5% of the CPU of the bench's 64-byte message-rate rows
// (pprof), its cache line bouncing between the cores.
type powCache struct {
	pow   *[32]uint32 // x^(±8·2^k)
	slots [8]powSlot
	next  atomic.Uint32 // the slot the next new length takes
}

// powSlot is one remembered length. key holds n<<32 | x^(±8n) in one word,
// so that a reader never sees the length of one entry with the power of
// another; the table says which length it is for, for the same reason.
type powSlot struct {
	key  atomic.Uint64
	uses atomic.Int32 // uses of key's length, until it has a table
	tab  atomic.Pointer[mulTable]
}

// mulTable multiplies by a constant a byte at a time: t[k][b] is the
// constant times b placed in byte k of the register. n is the length whose
// power the constant is.
type mulTable struct {
	n int
	t [4][256]uint32
}

// mulTableAfter is how many uses of a length earn it a table.
const mulTableAfter = 64

func newMulTable(n int, v uint32) *mulTable {
	t := &mulTable{n: n}
	for k := range t.t {
		for b := range 256 {
			t.t[k][b] = multModP(v, uint32(b)<<(8*k))
		}
	}
	return t
}

func (t *mulTable) mul(d uint32) uint32 {
	return t.t[0][d&0xFF] ^ t.t[1][d>>8&0xFF] ^ t.t[2][d>>16&0xFF] ^ t.t[3][d>>24]
}

// mul returns d times x^(±8n), for 0 <= n < 2^32 (d itself for other n:
// lengths of packets are never near either end).
func (c *powCache) mul(d uint32, n int) uint32 {
	if n <= 0 || n > math.MaxUint32 {
		return d
	}
	for i := range c.slots {
		s := &c.slots[i]
		if t := s.tab.Load(); t != nil && t.n == n {
			return t.mul(d)
		}
		k := s.key.Load()
		if k>>32 != uint64(n) {
			continue
		}
		v := uint32(k)
		if s.uses.Add(1) == mulTableAfter {
			// One caller builds it; a slot taken by another length
			// meanwhile keeps a table that names its length.
			s.tab.Store(newMulTable(n, v))
		}
		return multModP(v, d)
	}
	v := c.power(n)
	s := &c.slots[c.next.Add(1)%uint32(len(c.slots))]
	s.uses.Store(0)
	s.key.Store(uint64(n)<<32 | uint64(v))
	return multModP(v, d)
}

// power returns x^(±8n) from the powers of two lengths.
func (c *powCache) power(n int) uint32 {
	v := uint32(1) << 31 // x^0
	for k := 0; n>>k != 0; k++ {
		if n>>k&1 != 0 {
			v = multModP(v, c.pow[k])
		}
	}
	return v
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
	ip := header.IPv4(f.IP)
	id := ip.ID()
	ip.SetID(0)
	d := ComputeICRC(f.IP, f.UDP, f.IB) ^ f.ICRC
	ip.SetID(id)
	return idFromDiff(d, len(f.IP)-6+len(f.UDP)+len(f.IB))
}

// idFromDiff returns the IPv4 ID whose two bytes, followed by trailing more
// bytes up to the ICRC, change the ICRC by d (the ICRC computed with ID 0
// XOR the one carried), and whether one exists.
func idFromDiff(d uint32, trailing int) (uint16, bool) {
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
