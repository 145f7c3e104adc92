package roce

import (
	"net/netip"
)

// The UDP backend never sends or reads the IPv4 and UDP headers the ICRC of a
// RoCEv2 datagram covers: the kernel writes and strips them. Building them to
// hash them cost, per 64-byte message (softrdma bench's rate rows, pprof), an
// IPv4 header with its checksum on each end and a copy of the 40 masked
// header bytes into ComputeICRC: with RecoverIPv4ID, about a quarter of the
// CPU. The CRC is affine in its input, so the ICRC of the 28 masked IPv4 and
// UDP bytes is the ICRC of the bytes a flow fixes (addresses, ports) XOR a
// term per byte that changes from packet to packet (the two lengths and the
// ID), read from a table per position. flowICRC keeps the first for the last
// flow it saw.

// ipUDPLen is the length of the masked IPv4 and UDP pseudo-header.
const ipUDPLen = IPv4Len + UDPLen

// The positions of the bytes of the pseudo-header that change per packet.
const (
	posTotalLen = 2  // IPv4 total length, 2 bytes
	posID       = 4  // IPv4 identification, 2 bytes
	posUDPLen   = 24 // UDP length, 2 bytes
)

// varPos are those positions, byte by byte, in the order of varTables.
var varPos = [6]int{posTotalLen, posTotalLen + 1, posID, posID + 1, posUDPLen, posUDPLen + 1}

// varTables[k][b] is the CRC register (no inversion, zero start) after the
// 28 bytes that are all zero but byte varPos[k], which is b: the term that
// byte adds to the ICRC of the pseudo-header.
var varTables = func() *[len(varPos)][256]uint32 {
	t := new([len(varPos)][256]uint32)
	var s [ipUDPLen]byte
	for k, p := range varPos {
		for b := range 256 {
			s[p] = byte(b)
			t[k][b] = ^updateStack(^uint32(0), s[:])
		}
		s[p] = 0
	}
	return t
}()

// flowICRC computes ICRCs of RoCEv2-over-IPv4 packets with the IPv4 and
// UDP headers an ordinary socket sends (no options, DF, UDP checksum 0:
// header.EncodeIPUDP and FrameHeaders.Encode alike) from their fields,
// remembering the part that the last flow's addresses and ports fix. The
// zero value is ready; it is not safe for concurrent use.
type flowICRC struct {
	src, dst     netip.Addr
	sport, dport uint16
	valid        bool
	base         uint32 // the ICRC state after the pseudo-header with lengths and ID 0
}

// sum returns the ICRC of a RoCEv2 packet from IPv4 src:sport to dst:dport
// with IPv4 ID id whose IB packet (BTH through pad, without the ICRC) is the
// concatenation of ib, ibLen bytes in all; ib[0] must hold the whole BTH
// (src and dst must be IPv4). It equals ComputeICRC over the headers
// EncodeIPUDP writes for it, whatever their TOS and TTL (masked).
func (c *flowICRC) sum(src, dst netip.Addr, sport, dport, id uint16, ibLen int, ib ...[]byte) uint32 {
	if !c.valid || c.src != src || c.dst != dst || c.sport != sport || c.dport != dport {
		c.setFlow(src, dst, sport, dport)
	}
	udpLen := UDPLen + ibLen + ICRCLen
	total := IPv4Len + udpLen
	t := varTables
	crc := c.base ^ t[0][byte(total>>8)] ^ t[1][byte(total)] ^ t[2][byte(id>>8)] ^ t[3][byte(id)] ^
		t[4][byte(udpLen>>8)] ^ t[5][byte(udpLen)]
	var bth [minIBLen]byte
	copy(bth[:], ib[0])
	bth[4] = 0xFF
	crc = updateStack(crc, bth[:])
	crc = updatePiece(crc, ib[0][minIBLen:])
	for _, p := range ib[1:] {
		crc = updatePiece(crc, p)
	}
	return crc
}

// setFlow computes and keeps the ICRC state after the masked pseudo-header
// of a flow, its lengths and ID 0.
func (c *flowICRC) setFlow(src, dst netip.Addr, sport, dport uint16) {
	var h [ipUDPLen]byte
	h[0] = 0x45               // version 4, IHL 5
	h[1] = 0xFF               // TOS, masked
	h[6] = 0x40               // DF
	h[8] = 0xFF               // TTL, masked
	h[9] = 17                 // UDP
	h[10], h[11] = 0xFF, 0xFF // header checksum, masked
	s, d := src.As4(), dst.As4()
	copy(h[12:16], s[:])
	copy(h[16:20], d[:])
	h[20], h[21] = byte(sport>>8), byte(sport)
	h[22], h[23] = byte(dport>>8), byte(dport)
	h[26], h[27] = 0xFF, 0xFF // UDP checksum, masked
	*c = flowICRC{src: src, dst: dst, sport: sport, dport: dport, valid: true, base: updateStack(icrcSeed, h[:])}
}
