package roce

import (
	"encoding/binary"
	"net/netip"

	"github.com/softrdma/softrdma/header"
)

// GRH is the InfiniBand Global Route Header (IBTA Vol. 1 §8.3), the 40-byte network
// header of RoCEv1 (Annex A16), where it follows the Ethernet header (Ethertype
// 0x8915) in place of the LRH. Its layout is the IPv6 header's, with GIDs for
// addresses:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	| IPVer |    TClass     |              FlowLabel                |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|            PayLen             |    NxtHdr     |    HopLmt     |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        SGID (16 bytes)                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                        DGID (16 bytes)                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// PayLen counts the bytes after the GRH up to and including the ICRC (§8.3.1).
// Methods do not check the length: validate it once with [GRH.Check] (or let
// [Frame.DecodeEthernet] do it).
type GRH []byte

const (
	// GRHLen is the length of a GRH.
	GRHLen = 40
	// GRHVersion is the IPVer value of a GRH (it is an IPv6 header).
	GRHVersion = 6
	// NxtHdrBTH is the GRH NxtHdr value saying that an IBA transport header (BTH)
	// follows (IBTA Vol. 1 §8.3.1).
	NxtHdrBTH = 0x1B
	// DefaultHopLimit is the hop limit (IPv4 TTL) rxe puts on its packets (the
	// captures show 64 throughout).
	DefaultHopLimit = 64
)

const (
	grhVerTCFlow = 0
	grhPayLen    = 4
	grhNxtHdr    = 6
	grhHopLmt    = 7
	grhSGID      = 8
	grhDGID      = 24
)

// IPVer returns the IP version field (6 in a valid GRH).
func (g GRH) IPVer() uint8 { return g[0] >> 4 }

// TClass returns the traffic class.
func (g GRH) TClass() uint8 { return uint8(binary.BigEndian.Uint16(g[0:]) >> 4) }

// FlowLabel returns the 20-bit flow label.
func (g GRH) FlowLabel() uint32 { return binary.BigEndian.Uint32(g[0:]) & 0xFFFFF }

// PayLen returns the payload length: the bytes after the GRH through the ICRC.
func (g GRH) PayLen() uint16 { return binary.BigEndian.Uint16(g[grhPayLen:]) }

// NxtHdr returns the next-header field (NxtHdrBTH for IBA transport).
func (g GRH) NxtHdr() uint8 { return g[grhNxtHdr] }

// HopLmt returns the hop limit.
func (g GRH) HopLmt() uint8 { return g[grhHopLmt] }

// SGID returns the source GID.
func (g GRH) SGID() (gid [16]byte) { copy(gid[:], g[grhSGID:grhSGID+16]); return gid }

// DGID returns the destination GID.
func (g GRH) DGID() (gid [16]byte) { copy(gid[:], g[grhDGID:grhDGID+16]); return gid }

// SourceAddr returns the source GID as a 16-byte address (IPv4-mapped GIDs stay mapped).
func (g GRH) SourceAddr() netip.Addr { return netip.AddrFrom16(g.SGID()) }

// DestinationAddr returns the destination GID as a 16-byte address.
func (g GRH) DestinationAddr() netip.Addr { return netip.AddrFrom16(g.DGID()) }

// SetIPVer sets the IP version field.
func (g GRH) SetIPVer(v uint8) { g[0] = g[0]&0x0F | v<<4 }

// SetTClass sets the traffic class.
func (g GRH) SetTClass(tc uint8) {
	w := binary.BigEndian.Uint32(g[0:])
	binary.BigEndian.PutUint32(g[0:], w&^0x0FF00000|uint32(tc)<<20)
}

// SetFlowLabel sets the 20-bit flow label (higher bits are dropped).
func (g GRH) SetFlowLabel(fl uint32) {
	w := binary.BigEndian.Uint32(g[0:])
	binary.BigEndian.PutUint32(g[0:], w&^0xFFFFF|fl&0xFFFFF)
}

// SetPayLen sets the payload length.
func (g GRH) SetPayLen(n uint16) { binary.BigEndian.PutUint16(g[grhPayLen:], n) }

// SetNxtHdr sets the next-header field.
func (g GRH) SetNxtHdr(h uint8) { g[grhNxtHdr] = h }

// SetHopLmt sets the hop limit.
func (g GRH) SetHopLmt(h uint8) { g[grhHopLmt] = h }

// SetSGID sets the source GID.
func (g GRH) SetSGID(gid [16]byte) { copy(g[grhSGID:], gid[:]) }

// SetDGID sets the destination GID.
func (g GRH) SetDGID(gid [16]byte) { copy(g[grhDGID:], gid[:]) }

// Check reports whether g is a usable GRH: at least GRHLen bytes, IPVer 6,
// NxtHdr NxtHdrBTH and a PayLen that holds a BTH and an ICRC. It does not compare
// PayLen with what follows; [Frame.DecodeEthernet] does.
func (g GRH) Check() error {
	if len(g) < GRHLen {
		return header.Truncated("grh", "length", len(g), GRHLen)
	}
	if v := g.IPVer(); v != GRHVersion {
		return header.Invalid("grh", "ipver", uint64(v), "!=", GRHVersion)
	}
	if h := g.NxtHdr(); h != NxtHdrBTH {
		return &header.Error{Err: ErrUnsupported, Header: "grh", Field: "nxthdr", Value: uint64(h), Limit: NxtHdrBTH, Rel: "!="}
	}
	if n := g.PayLen(); n < minIBLen+ICRCLen {
		return header.Invalid("grh", "paylen", uint64(n), "<", minIBLen+ICRCLen)
	}
	return nil
}

// GRHFields holds the values of a GRH, for [GRH.Encode]. IPVer is always 6.
type GRHFields struct {
	TClass    uint8    // traffic class
	FlowLabel uint32   // 20-bit flow label
	PayLen    uint16   // bytes after the GRH through the ICRC
	NxtHdr    uint8    // next header (NxtHdrBTH)
	HopLmt    uint8    // hop limit
	SGID      [16]byte // source GID
	DGID      [16]byte // destination GID
}

// Encode writes f into g (which must hold GRHLen bytes).
func (g GRH) Encode(f *GRHFields) {
	_ = g[GRHLen-1]
	binary.BigEndian.PutUint32(g[0:], GRHVersion<<28|uint32(f.TClass)<<20|f.FlowLabel&0xFFFFF)
	g.SetPayLen(f.PayLen)
	g.SetNxtHdr(f.NxtHdr)
	g.SetHopLmt(f.HopLmt)
	g.SetSGID(f.SGID)
	g.SetDGID(f.DGID)
}

// Fields returns the values of g.
func (g GRH) Fields() GRHFields {
	return GRHFields{
		TClass:    g.TClass(),
		FlowLabel: g.FlowLabel(),
		PayLen:    g.PayLen(),
		NxtHdr:    g.NxtHdr(),
		HopLmt:    g.HopLmt(),
		SGID:      g.SGID(),
		DGID:      g.DGID(),
	}
}
