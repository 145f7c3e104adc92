package roce

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/softrdma/softrdma/header"
)

// The invariant CRC (IBTA Vol. 1 §7.8.1; for RoCE Annexes A16 and A17)
// is the standard CRC-32 (the Ethernet polynomial, reflected: crc32.IEEE) over
//
//  1. eight 0xFF bytes standing for the LRH that RoCE does not send;
//  2. RoCEv2: the IP header with its variant fields set to all ones (IPv4: TOS,
//     TTL and header checksum; IPv6: traffic class, flow label and hop limit), then
//     the UDP header with its checksum set to 0xFFFF;
//     RoCEv1: the GRH with TClass, FlowLabel and HopLmt set to all ones;
//  3. the BTH with its byte 4 (FECN, BECN and the reserved bits) set to 0xFF;
//  4. the rest of the packet up to the ICRC: extension headers, payload, pad.
//
// rxe (rxe_icrc.c) seeds crc32_le with the state after step 1, 0xdebb20e3, inverts
// the result and stores it little-endian (cpu_to_le32), which is exactly the
// standard CRC-32 of the byte string above written least significant byte first.
// That matches every RoCEv2 frame of the captures (IPv4 and IPv6). The RoCEv1
// variant follows the spec and is checked only for self-consistency: no capture
// holds RoCEv1 (upstream rxe does not speak it).
//
// The masked headers are copied to a small array on the stack; the payload is
// never copied: the CRC is chained over the caller's slices with crc32.Update.
// (The stack copy is folded in with updateStack, not crc32.Update: crc32 calls its
// implementation through a function variable, so any slice handed to it escapes,
// and the array would be moved to the heap: one allocation per packet.)

// icrcSeed is crc32.Update's state after the eight 0xFF bytes: rxe's 0xdebb20e3
// with the pre/post inversion that crc32.Update applies.
const icrcSeed = ^uint32(0xdebb20e3)

// maxIPv4HeaderLen is the longest IPv4 header (IHL 15).
const maxIPv4HeaderLen = 60

// ComputeICRC returns the ICRC of a RoCEv2 packet: ip is its IPv4 (with any options)
// or IPv6 header, udp its UDP header, and the IB packet (BTH onward, without the
// ICRC) is the concatenation of ib. The IP version is read from ip[0]. An IPv4
// header with options is covered whole; rxe never sends options (and would cover a
// fixed 20 + 8 + BTH bytes from the IP header on), so no capture pins that case.
func ComputeICRC(ip, udp []byte, ib ...[]byte) uint32 {
	var buf [maxIPv4HeaderLen + UDPLen + minIBLen]byte
	if len(ip) >= 8 && len(ip) <= maxIPv4HeaderLen && len(udp) == UDPLen && len(ib) > 0 && len(ib[0]) >= minIBLen {
		// Fast path: every masked byte in one stack copy, one crc32 call.
		n := copy(buf[:], ip)
		maskIP(buf[:n], 0)
		n += copy(buf[n:], udp)
		buf[n-2], buf[n-1] = 0xFF, 0xFF
		n += copy(buf[n:], ib[0][:minIBLen])
		buf[n-minIBLen+4] = 0xFF
		crc := updateStack(icrcSeed, buf[:n])
		crc = updatePiece(crc, ib[0][minIBLen:])
		for _, p := range ib[1:] {
			crc = updatePiece(crc, p)
		}
		return crc
	}
	// General path: odd-sized pieces (a BTH split across slices, an oversized header).
	crc := updateMasked(icrcSeed, ip, 0, maskKindIP, &buf)
	crc = updateMasked(crc, udp, 0, maskKindUDP, &buf)
	return updateIB(crc, ib, &buf)
}

// ComputeICRCv1 returns the ICRC of a RoCEv1 packet: grh is its GRH and the IB packet
// (BTH onward, without the ICRC) is the concatenation of ib.
func ComputeICRCv1(grh []byte, ib ...[]byte) uint32 {
	var buf [maxIPv4HeaderLen + UDPLen + minIBLen]byte
	if len(grh) == GRHLen && len(ib) > 0 && len(ib[0]) >= minIBLen {
		n := copy(buf[:], grh)
		maskIPv6(buf[:n], 0)
		n += copy(buf[n:], ib[0][:minIBLen])
		buf[n-minIBLen+4] = 0xFF
		crc := updateStack(icrcSeed, buf[:n])
		crc = updatePiece(crc, ib[0][minIBLen:])
		for _, p := range ib[1:] {
			crc = updatePiece(crc, p)
		}
		return crc
	}
	crc := updateMasked(icrcSeed, grh, 0, maskKindIPv6, &buf)
	return updateIB(crc, ib, &buf)
}

// updateIB chains the IB packet pieces, masking byte 4 of the BTH wherever it falls.
func updateIB(crc uint32, ib [][]byte, buf *[maxIPv4HeaderLen + UDPLen + minIBLen]byte) uint32 {
	off := 0
	for _, p := range ib {
		crc = updateMasked(crc, p, off, maskKindBTH, buf)
		off += len(p)
	}
	return crc
}

// maskKind says which header updateMasked masks (a switch, not a func value, so
// that the stack buffer does not escape to the heap).
type maskKind uint8

const (
	maskKindIP maskKind = iota
	maskKindIPv6
	maskKindUDP
	maskKindBTH
)

// updateMasked adds p, which starts at offset off of its header, to crc, with mask
// applied: the part of p that lies in the header's first len(buf) bytes is copied to
// buf and masked there, the rest is used in place.
func updateMasked(crc uint32, p []byte, off int, kind maskKind, buf *[maxIPv4HeaderLen + UDPLen + minIBLen]byte) uint32 {
	if off < len(buf) && len(p) > 0 {
		n := copy(buf[:len(buf)-off], p)
		switch kind {
		case maskKindIP:
			maskIP(buf[:n], off)
		case maskKindIPv6:
			maskIPv6(buf[:n], off)
		case maskKindUDP:
			maskUDP(buf[:n], off)
		case maskKindBTH:
			maskBTH(buf[:n], off)
		}
		crc = updateStack(crc, buf[:n])
		p = p[n:]
	}
	return updatePiece(crc, p)
}

// setFF sets b[i-off] to 0xFF if that index is inside b.
func setFF(b []byte, off, i int) {
	if j := i - off; j >= 0 && j < len(b) {
		b[j] = 0xFF
	}
}

// maskIP masks an IPv4 or IPv6 header, choosing by its version nibble (b[0] when
// off is 0, as it always is for an IP header handed over whole).
func maskIP(b []byte, off int) {
	if off == 0 && len(b) > 0 && b[0]>>4 == 6 {
		maskIPv6(b, off)
		return
	}
	maskIPv4(b, off)
}

// The maskers take the bytes b that sit at offset off of their header.

func maskIPv4(b []byte, off int) {
	setFF(b, off, 1)  // TOS
	setFF(b, off, 8)  // TTL
	setFF(b, off, 10) // header checksum
	setFF(b, off, 11)
}

func maskIPv6(b []byte, off int) {
	// Traffic class and flow label: the low 28 bits of the first word.
	if j := 0 - off; j >= 0 && j < len(b) {
		b[j] |= 0x0F
	}
	setFF(b, off, 1)
	setFF(b, off, 2)
	setFF(b, off, 3)
	setFF(b, off, 7) // hop limit
}

func maskUDP(b []byte, off int) {
	setFF(b, off, 6) // checksum
	setFF(b, off, 7)
}

func maskBTH(b []byte, off int) {
	setFF(b, off, 4) // FECN, BECN, reserved
}

// PutICRC stores icrc in b[:4] the way it travels: little-endian.
func PutICRC(b []byte, icrc uint32) { binary.LittleEndian.PutUint32(b, icrc) }

// ComputeICRC returns the ICRC that f's headers and IB packet call for (not the
// one f carries: that is f.ICRC).
func (f *Frame) ComputeICRC() uint32 {
	if f.Version == RoCEv1 {
		return ComputeICRCv1(f.GRH, f.IB)
	}
	return ComputeICRC(f.IP, f.UDP, f.IB)
}

// VerifyICRC checks the ICRC that f carries. It returns nil if it is right and a
// *header.Error matching ErrBadICRC if not (or ErrTruncated for a Frame that was not
// decoded). It allocates only on failure.
func VerifyICRC(f *Frame) error {
	if len(f.IB) < minIBLen || len(f.icrc) != ICRCLen {
		return header.Truncated("icrc", "ib length", len(f.IB), minIBLen)
	}
	if want := f.ComputeICRC(); want != f.ICRC {
		return &header.Error{Err: ErrBadICRC, Header: "icrc", Field: "value", Value: uint64(f.ICRC), Limit: uint64(want), Rel: "!=", LimitName: "computed", Hex: 1}
	}
	return nil
}

// SetICRC computes f's ICRC and writes it into the frame bytes f was decoded from
// (and into f.ICRC): after changing a header or the payload in place, re-decode or
// keep f, then SetICRC. It does nothing to a Frame that was not decoded.
func SetICRC(f *Frame) {
	if len(f.IB) < minIBLen || len(f.icrc) != ICRCLen {
		return
	}
	f.ICRC = f.ComputeICRC()
	PutICRC(f.icrc, f.ICRC)
}

// stackTables are the slicing-by-8 tables of the reflected IEEE polynomial, derived
// from crc32.IEEETable, for updateStack.
var stackTables = func() *[8][256]uint32 {
	t := new([8][256]uint32)
	t[0] = *crc32.IEEETable
	for i := range 256 {
		c := t[0][i]
		for k := 1; k < 8; k++ {
			c = t[0][c&0xFF] ^ c>>8
			t[k][i] = c
		}
	}
	return t
}()

// clmulMin is the shortest input that hash/crc32 hashes with its carry-less
// multiplication kernel (PCLMULQDQ) on amd64; shorter input it hashes with
// slicing-by-8 tables like updateStack's, but only after a sync.OnceFunc check
// and a call through a function variable, which cost more than hashing the few
// bytes of a packet's extension headers or of its pad. The 64-byte message-rate
// rows hand it three short pieces per packet (RETH, payload, an empty pad).
const clmulMin = 64

// updatePiece is crc32.Update(crc, crc32.IEEETable, p): pieces shorter than
// clmulMin go to updateStack, empty ones nowhere.
func updatePiece(crc uint32, p []byte) uint32 {
	if len(p) < clmulMin {
		return updateStack(crc, p)
	}
	return crc32.Update(crc, crc32.IEEETable, p)
}

// updateStack is crc32.Update(crc, crc32.IEEETable, p) for the short masked header
// copies and short pieces, written so that p does not escape: a stack array stays
// on the stack.
func updateStack(crc uint32, p []byte) uint32 {
	t := stackTables
	crc = ^crc
	for len(p) >= 8 {
		crc ^= binary.LittleEndian.Uint32(p)
		crc = t[0][p[7]] ^ t[1][p[6]] ^ t[2][p[5]] ^ t[3][p[4]] ^
			t[4][crc>>24] ^ t[5][crc>>16&0xFF] ^ t[6][crc>>8&0xFF] ^ t[7][crc&0xFF]
		p = p[8:]
	}
	for _, v := range p {
		crc = t[0][byte(crc)^v] ^ crc>>8
	}
	return ^crc
}
