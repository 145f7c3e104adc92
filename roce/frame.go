package roce

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"strconv"

	"github.com/softrdma/softrdma/header"
	"github.com/softrdma/softrdma/ibtransport"
)

// Sentinel errors. Every error returned by this package's decoders matches exactly one
// of them with errors.Is; most are a *header.Error that says which field was wrong.
// Sentinel errors. Every error returned by this package's decoders matches exactly one
// of them with errors.Is; most are a *header.Error that says which field was wrong.
// ErrTruncated, ErrMalformed, ErrUnsupported and ErrBadICRC are the shared
// header.ErrTruncated, header.ErrInvalid, header.ErrUnsupported and header.ErrBadChecksum,
// so they also match the same classes of error from ibtransport and iwarp.
var (
	// ErrNotRoCE says a frame is not RoCE (another Ethertype, IP protocol or UDP
	// port): callers that see all traffic skip such frames silently.
	ErrNotRoCE = errors.New("roce: not a RoCE frame")
	// ErrTruncated says the input ends before a header or a length field says it does.
	ErrTruncated = header.ErrTruncated
	// ErrMalformed says a field holds a value that the format forbids, or two
	// length fields disagree.
	ErrMalformed = header.ErrInvalid
	// ErrUnsupported says the input is well formed but uses a feature this
	// package does not handle (IP fragments, a GRH NxtHdr other than BTH, ...).
	ErrUnsupported = header.ErrUnsupported
	// ErrBadICRC says the ICRC does not match the packet.
	ErrBadICRC = header.ErrBadChecksum
)

// Frames that are not RoCE are normal traffic on a shared link: these errors are
// preallocated (and shared: do not modify them) so that skipping costs no allocation.
var (
	errNotRoCEEtherType = &header.Error{Err: ErrNotRoCE, Header: "ethernet", Field: "ethertype not IPv4, IPv6 or RoCEv1 (0x8915)", NoValue: true}
	errNotRoCEProtocol  = &header.Error{Err: ErrNotRoCE, Header: "ip", Field: "protocol not UDP", NoValue: true}
	errNotRoCEPort      = &header.Error{Err: ErrNotRoCE, Header: "udp", Field: "destination port not 4791", NoValue: true}
	errNotRoCEFragment  = &header.Error{Err: ErrNotRoCE, Header: "ipv4", Field: "non-first fragment", NoValue: true}
)

// Version is the RoCE encapsulation of a frame.
type Version uint8

const (
	// RoCEv1 is IB over Ethernet: Ethertype 0x8915, then a GRH (IBTA Vol. 1 Annex A16).
	RoCEv1 Version = 1
	// RoCEv2 is IB over UDP/IP: UDP destination port 4791 (IBTA Vol. 1 Annex A17).
	RoCEv2 Version = 2
)

// String returns "RoCEv1" or "RoCEv2".
func (v Version) String() string {
	switch v {
	case RoCEv1:
		return "RoCEv1"
	case RoCEv2:
		return "RoCEv2"
	}
	return "Version(" + strconv.Itoa(int(v)) + ")"
}

// Wire constants.
const (
	EtherTypeIPv4   = header.EtherTypeIPv4   // Ethertype of IPv4
	EtherTypeIPv6   = header.EtherTypeIPv6   // Ethertype of IPv6
	EtherTypeVLAN   = header.EtherTypeVLAN   // Ethertype of an IEEE 802.1Q tag
	EtherTypeRoCEv1 = header.EtherTypeRoCEv1 // Ethertype of RoCEv1 (IBTA Annex A16)
	UDPPort         = 4791                   // UDP destination port of RoCEv2 (IANA "roce")
	IPProtocolUDP   = header.IPProtocolUDP   // IP protocol number of UDP

	EthernetLen = header.EthernetLen // Ethernet II header without a VLAN tag
	VLANTagLen  = header.VLANTagLen  // one 802.1Q tag
	IPv4Len     = header.IPv4MinLen  // IPv4 header without options (what this package writes)
	IPv6Len     = header.IPv6Len     // IPv6 header
	UDPLen      = header.UDPLen      // UDP header
	ICRCLen     = 4                  // the invariant CRC at the end of every RoCE packet

	// minIBLen is the shortest IB transport packet: a BTH (ibtransport.BTHLen).
	minIBLen = ibtransport.BTHLen
)

// Frame is a decoded RoCE frame: sub-slices of the input (nothing is copied) and the
// few values that are cheap to keep. Decode methods reset every field first, so one
// Frame can be reused for every packet without allocating.
type Frame struct {
	Version Version // RoCEv1 or RoCEv2

	// Ethernet (zero after DecodeIP).
	Ethernet  []byte  // the Ethernet header including any VLAN tag
	DstMAC    [6]byte // destination MAC address
	SrcMAC    [6]byte // source MAC address
	HasVLAN   bool    // one 802.1Q tag was present
	VLANTCI   uint16  // the tag's PCP, DEI and VLAN ID, if HasVLAN
	EtherType uint16  // the Ethertype after any VLAN tag

	// RoCEv2.
	IPv6    bool   // the IP header is IPv6 (else IPv4)
	IP      []byte // the IPv4 header (with any options) or IPv6 header
	UDP     []byte // the UDP header
	SrcPort uint16 // UDP source port
	DstPort uint16 // UDP destination port (UDPPort)

	// RoCEv1.
	GRH GRH // the GRH

	// Both.
	Src netip.Addr // IP source address (RoCEv2) or SGID as a 16-byte address (RoCEv1)
	Dst netip.Addr // IP destination address (RoCEv2) or DGID (RoCEv1)

	// IB is the IB transport packet: BTH, extension headers, payload and pad,
	// without the ICRC (decode it with ibtransport.Packet).
	IB []byte
	// ICRC is the invariant CRC carried by the frame, as a number: rxe stores it
	// little-endian (cpu_to_le32), so it is the byte-reverse of the 32-bit
	// big-endian value tshark shows as infiniband.invariant.crc.
	ICRC uint32
	// Padding is whatever follows the ICRC in the input (Ethernet minimum-size
	// padding), usually empty.
	Padding []byte

	icrc []byte // the four ICRC bytes inside the input, for SetICRC
}

// DecodeEthernet decodes an Ethernet frame (with at most one 802.1Q tag) carrying
// RoCEv1 or RoCEv2. A frame that is not RoCE returns an error matching ErrNotRoCE
// (and costs no allocation); a RoCE frame with bad lengths returns a *header.Error
// matching ErrTruncated, ErrMalformed or ErrUnsupported. The ICRC is not checked: see
// VerifyICRC. f refers to b afterwards.
func (f *Frame) DecodeEthernet(b []byte) error {
	return f.DecodeEthernetPort(b, UDPPort)
}

// DecodeEthernetPort is DecodeEthernet for RoCEv2 on UDP destination port
// port instead of UDPPort (a device configured for another port): a datagram
// to any other port, 4791 included, is not RoCE.
func (f *Frame) DecodeEthernetPort(b []byte, port uint16) error {
	*f = Frame{}
	if len(b) < EthernetLen {
		return header.Truncated("ethernet", "length", len(b), EthernetLen)
	}
	eth := header.Ethernet(b)
	f.DstMAC, f.SrcMAC = eth.DstMAC(), eth.SrcMAC()
	et := eth.Type()
	off := EthernetLen
	if eth.Tagged() {
		if len(b) < EthernetLen+VLANTagLen {
			return header.Truncated("vlan", "length", len(b), EthernetLen+VLANTagLen)
		}
		f.HasVLAN = true
		f.VLANTCI = eth.VLANTCI()
		et = eth.InnerType()
		off += VLANTagLen
	}
	f.EtherType = et
	f.Ethernet = b[:off:off]
	switch et {
	case EtherTypeIPv4:
		return f.decodeIPv4(b[off:], port)
	case EtherTypeIPv6:
		return f.decodeIPv6(b[off:], port)
	case EtherTypeRoCEv1:
		return f.decodeGRH(b[off:])
	}
	return errNotRoCEEtherType
}

// DecodeIP decodes a RoCEv2 packet starting at its IPv4 or IPv6 header (as a raw IP
// socket or a TUN device delivers it); the Ethernet fields stay zero. Errors are as
// for DecodeEthernet.
func (f *Frame) DecodeIP(b []byte) error {
	*f = Frame{}
	if len(b) == 0 {
		return header.Truncated("ip", "length", 0, 1)
	}
	switch b[0] >> 4 {
	case 4:
		return f.decodeIPv4(b, UDPPort)
	case 6:
		return f.decodeIPv6(b, UDPPort)
	}
	v := b[0] >> 4
	return &header.Error{Header: "ip", Field: "version", Value: uint64(v), Reason: "not 4 or 6", NoValue: v == 0, Err: ErrMalformed}
}

// DecodeGRH decodes a RoCEv1 packet starting at its GRH; the Ethernet fields stay
// zero. Errors are as for DecodeEthernet.
func (f *Frame) DecodeGRH(b []byte) error {
	*f = Frame{}
	return f.decodeGRH(b)
}

func (f *Frame) decodeIPv4(b []byte, port uint16) error {
	if len(b) < IPv4Len {
		return header.Truncated("ipv4", "length", len(b), IPv4Len)
	}
	ip := header.IPv4(b)
	if v := ip.Version(); v != 4 {
		return header.Invalid("ipv4", "version", uint64(v), "!=", 4)
	}
	if ip.Protocol() != IPProtocolUDP {
		return errNotRoCEProtocol
	}
	ihl := ip.HeaderLen()
	if ihl < IPv4Len {
		return header.Invalid("ipv4", "header length", uint64(ihl), "<", IPv4Len)
	}
	if ihl > len(b) {
		return &header.Error{Err: ErrTruncated, Header: "ipv4", Field: "header length", Value: uint64(ihl), Limit: uint64(len(b)), Rel: ">", LimitName: "packet"}
	}
	frag := ip.FlagsFragment()
	if frag&0x1FFF != 0 {
		// A later fragment has no UDP header: nothing says it is RoCE.
		return errNotRoCEFragment
	}
	total := int(ip.TotalLength())
	if total < ihl+UDPLen {
		return header.Invalid("ipv4", "total length", uint64(total), "<", uint64(ihl+UDPLen))
	}
	// The port decides whether the frame is RoCE at all, so look at it before
	// judging the length: a non-RoCE datagram cut by the snaplen is not RoCE.
	if len(b) >= ihl+4 && header.UDP(b[ihl:]).DstPort() != port {
		return errNotRoCEPort
	}
	if total > len(b) {
		return &header.Error{Err: ErrTruncated, Header: "ipv4", Field: "total length", Value: uint64(total), Limit: uint64(len(b)), Rel: ">", LimitName: "packet"}
	}
	if frag&header.IPv4FlagMF != 0 {
		return &header.Error{Err: ErrUnsupported, Header: "ipv4", Field: "flags", Value: uint64(frag >> 13), Reason: "has more fragments set", Hex: 1}
	}
	f.Version = RoCEv2
	f.IP = b[:ihl:ihl]
	f.Src, f.Dst = ip.Src(), ip.Dst()
	f.Padding = b[total:]
	return f.decodeUDP(b[ihl:total])
}

func (f *Frame) decodeIPv6(b []byte, port uint16) error {
	if len(b) < IPv6Len {
		return header.Truncated("ipv6", "length", len(b), IPv6Len)
	}
	ip := header.IPv6(b)
	if v := ip.Version(); v != 6 {
		return header.Invalid("ipv6", "version", uint64(v), "!=", 6)
	}
	// Extension headers are not followed: rxe never sends them, and a RoCE packet
	// behind one is reported as not RoCE.
	if ip.NextHeader() != IPProtocolUDP {
		return errNotRoCEProtocol
	}
	plen := int(ip.PayloadLength())
	if plen < UDPLen {
		// This includes 0, a jumbogram, which RoCE does not use.
		return header.Invalid("ipv6", "payload length", uint64(plen), "<", UDPLen)
	}
	if len(b) >= IPv6Len+4 && header.UDP(b[IPv6Len:]).DstPort() != port {
		return errNotRoCEPort
	}
	if IPv6Len+plen > len(b) {
		return &header.Error{Err: ErrTruncated, Header: "ipv6", Field: "payload length", Value: uint64(plen), Limit: uint64(len(b) - IPv6Len), Rel: ">", LimitName: "packet"}
	}
	f.Version = RoCEv2
	f.IPv6 = true
	f.IP = b[:IPv6Len:IPv6Len]
	f.Src, f.Dst = ip.Src(), ip.Dst()
	f.Padding = b[IPv6Len+plen:]
	return f.decodeUDP(b[IPv6Len : IPv6Len+plen])
}

// decodeUDP decodes b, exactly the IP payload, whose destination port was checked.
func (f *Frame) decodeUDP(b []byte) error {
	udp := header.UDP(b)
	ulen := int(udp.Length())
	if ulen != len(b) {
		return &header.Error{Err: ErrMalformed, Header: "udp", Field: "length", Value: uint64(ulen), Limit: uint64(len(b)), Rel: "!=", LimitName: "ip payload"}
	}
	if ulen < UDPLen+minIBLen+ICRCLen {
		return header.Invalid("udp", "length", uint64(ulen), "<", UDPLen+minIBLen+ICRCLen)
	}
	f.UDP = b[:UDPLen:UDPLen]
	f.SrcPort, f.DstPort = udp.SrcPort(), udp.DstPort()
	f.setIB(b[UDPLen:])
	return nil
}

func (f *Frame) decodeGRH(b []byte) error {
	g := GRH(b)
	if err := g.Check(); err != nil {
		return err
	}
	n := int(g.PayLen())
	if GRHLen+n > len(b) {
		return &header.Error{Err: ErrTruncated, Header: "grh", Field: "paylen", Value: uint64(n), Limit: uint64(len(b) - GRHLen), Rel: ">", LimitName: "packet"}
	}
	f.Version = RoCEv1
	f.GRH = g[:GRHLen:GRHLen]
	f.Src = netip.AddrFrom16([16]byte(b[grhSGID : grhSGID+16]))
	f.Dst = netip.AddrFrom16([16]byte(b[grhDGID : grhDGID+16]))
	f.Padding = b[GRHLen+n:]
	f.setIB(b[GRHLen : GRHLen+n])
	return nil
}

// setIB splits p, BTH through ICRC, already known to hold minIBLen+ICRCLen bytes.
func (f *Frame) setIB(p []byte) {
	n := len(p) - ICRCLen
	f.IB = p[:n:n]
	f.icrc = p[n:]
	f.ICRC = binary.LittleEndian.Uint32(f.icrc)
}

// HeaderLen returns the number of bytes in front of f.IB: Ethernet (if decoded with
// DecodeEthernet), IP and UDP, or GRH.
func (f *Frame) HeaderLen() int {
	return len(f.Ethernet) + len(f.IP) + len(f.UDP) + len(f.GRH)
}

// Headers returns the values that rebuild f's headers with FrameHeaders.Encode:
// encoding them for len(f.IB) gives back the same header bytes whenever the frame
// was built the way this package builds frames (IPv4 without options, UDP checksum 0).
func (f *Frame) Headers() FrameHeaders {
	h := FrameHeaders{
		Version: f.Version,
		DstMAC:  f.DstMAC,
		SrcMAC:  f.SrcMAC,
		VLAN:    f.HasVLAN,
		VLANTCI: f.VLANTCI,
		Src:     f.Src,
		Dst:     f.Dst,
		SrcPort: f.SrcPort,
		DstPort: f.DstPort,
	}
	switch {
	case f.Version == RoCEv1:
		h.TrafficClass = f.GRH.TClass()
		h.FlowLabel = f.GRH.FlowLabel()
		h.HopLimit = f.GRH.HopLmt()
	case f.IPv6:
		ip := header.IPv6(f.IP)
		h.TrafficClass = ip.TrafficClass()
		h.FlowLabel = ip.FlowLabel()
		h.HopLimit = ip.HopLimit()
	case len(f.IP) >= IPv4Len:
		ip := header.IPv4(f.IP)
		h.TrafficClass = ip.TOS()
		h.IPID = ip.ID()
		h.AllowFragmentation = ip.FlagsFragment()&header.IPv4FlagDF == 0
		h.HopLimit = ip.TTL()
	}
	return h
}

// FrameHeaders holds what goes in front of an IB packet, for Encode: Ethernet, then
// IPv4 or IPv6 and UDP (RoCEv2), or a GRH (RoCEv1). For RoCEv2 the IP version is
// Src's: an IPv4 address gives IPv4, anything else IPv6, literally. A RoCEv2 GID of
// the IPv4-mapped form (::ffff:10.77.0.21) stands for IPv4 (IBTA Annex A17), as
// rxe sends it: Unmap it first.
type FrameHeaders struct {
	Version Version // RoCEv1 or RoCEv2; zero means RoCEv2

	DstMAC  [6]byte // destination MAC address
	SrcMAC  [6]byte // source MAC address
	VLAN    bool    // insert one 802.1Q tag
	VLANTCI uint16  // the tag's PCP, DEI and VLAN ID

	Src netip.Addr // source IP address (RoCEv2) or SGID (RoCEv1, in 16-byte form)
	Dst netip.Addr // destination IP address (RoCEv2) or DGID (RoCEv1)

	TrafficClass uint8  // IPv4 TOS (DSCP and ECN), IPv6 traffic class or GRH TClass
	FlowLabel    uint32 // IPv6 or GRH flow label (rxe sends 0 over IPv6)
	HopLimit     uint8  // IPv4 TTL, IPv6 hop limit or GRH HopLmt, as is (rxe: DefaultHopLimit)

	IPID               uint16 // IPv4 identification
	AllowFragmentation bool   // leave the IPv4 DF bit clear (rxe sets DF)

	SrcPort uint16 // UDP source port (see UDPSourcePort)
	DstPort uint16 // UDP destination port; zero means UDPPort
}

func (h *FrameHeaders) version() Version {
	if h.Version == 0 {
		return RoCEv2
	}
	return h.Version
}

// ipv4 reports whether the RoCEv2 headers are IPv4.
func (h *FrameHeaders) ipv4() bool { return h.Src.Is4() }

// Len returns the number of header bytes Encode writes.
func (h *FrameHeaders) Len() int {
	n := EthernetLen
	if h.VLAN {
		n += VLANTagLen
	}
	switch {
	case h.version() == RoCEv1:
		n += GRHLen
	case h.ipv4():
		n += IPv4Len + UDPLen
	default:
		n += IPv6Len + UDPLen
	}
	return n
}

// Encode writes the headers for an IB packet of ibLen bytes (BTH through pad, without
// the ICRC) into b[:h.Len()] and returns h.Len(). The lengths in the headers count
// the ICRC that follows the packet. IPv4 gets no options and a correct header
// checksum; UDP gets checksum 0, as rxe sends it over IPv4 and IPv6 alike (RFC 6936
// allows a zero UDP checksum over IPv6 only for tunnels; IBTA Annex A17 relies on
// the ICRC instead). Encode fails if b is short, ibLen does not fit the length
// fields, or the addresses do not suit the version.
func (h *FrameHeaders) Encode(b []byte, ibLen int) (int, error) {
	n := h.Len()
	if len(b) < n {
		return 0, header.Truncated("frame headers", "buffer length", len(b), n)
	}
	if ibLen < minIBLen {
		return 0, header.Invalid("frame headers", "ib length", uint64(ibLen), "<", minIBLen)
	}
	eth := header.EthernetFields{Dst: h.DstMAC, Src: h.SrcMAC, VLAN: h.VLAN, VLANTCI: h.VLANTCI}
	off := eth.Len()
	hop := h.HopLimit
	payload := ibLen + ICRCLen
	switch {
	case h.version() == RoCEv1:
		if !h.Src.IsValid() || !h.Dst.IsValid() {
			return 0, &header.Error{Header: "grh", Field: "gid", Reason: "missing", NoValue: true, Err: ErrMalformed}
		}
		if payload > 0xFFFF {
			return 0, header.Invalid("grh", "paylen", uint64(payload), ">", 0xFFFF)
		}
		eth.Type = EtherTypeRoCEv1
		header.Ethernet(b).Encode(&eth)
		GRH(b[off:]).Encode(&GRHFields{
			TClass:    h.TrafficClass,
			FlowLabel: h.FlowLabel,
			PayLen:    uint16(payload),
			NxtHdr:    NxtHdrBTH,
			HopLmt:    hop,
			SGID:      h.Src.As16(),
			DGID:      h.Dst.As16(),
		})
		return n, nil
	case h.version() != RoCEv2:
		return 0, &header.Error{Header: "frame headers", Field: "version", Value: uint64(h.Version), Reason: "unknown", NoValue: h.Version == 0, Err: ErrMalformed}
	case h.ipv4():
		if !h.Dst.Is4() {
			return 0, &header.Error{Header: "ipv4", Field: "destination address", Reason: "not IPv4", NoValue: true, Err: ErrMalformed}
		}
		total := IPv4Len + UDPLen + payload
		if total > 0xFFFF {
			return 0, header.Invalid("ipv4", "total length", uint64(total), ">", 0xFFFF)
		}
		eth.Type = EtherTypeIPv4
		header.Ethernet(b).Encode(&eth)
		var flags uint16 = header.IPv4FlagDF
		if h.AllowFragmentation {
			flags = 0
		}
		header.IPv4(b[off:]).Encode(&header.IPv4Fields{
			TOS:           h.TrafficClass,
			TotalLength:   uint16(total),
			ID:            h.IPID,
			FlagsFragment: flags,
			TTL:           hop,
			Protocol:      IPProtocolUDP,
			Src:           h.Src,
			Dst:           h.Dst,
		})
		off += IPv4Len
	default:
		if !h.Src.Is6() || !h.Dst.Is6() {
			return 0, &header.Error{Header: "ipv6", Field: "address", Reason: "not IPv6 on both ends", NoValue: true, Err: ErrMalformed}
		}
		if UDPLen+payload > 0xFFFF {
			return 0, header.Invalid("ipv6", "payload length", uint64(UDPLen+payload), ">", 0xFFFF)
		}
		eth.Type = EtherTypeIPv6
		header.Ethernet(b).Encode(&eth)
		header.IPv6(b[off:]).Encode(&header.IPv6Fields{
			TrafficClass:  h.TrafficClass,
			FlowLabel:     h.FlowLabel,
			PayloadLength: uint16(UDPLen + payload),
			NextHeader:    IPProtocolUDP,
			HopLimit:      hop,
			Src:           h.Src,
			Dst:           h.Dst,
		})
		off += IPv6Len
	}
	dport := h.DstPort
	if dport == 0 {
		dport = UDPPort
	}
	header.UDP(b[off:]).Encode(&header.UDPFields{SrcPort: h.SrcPort, DstPort: dport, Length: uint16(UDPLen + payload)})
	return n, nil
}

// EncodeFrame completes a frame built in place: b[:h.Len()] is headroom for the
// headers, b[h.Len():h.Len()+ibLen] already holds the IB packet (BTH through pad),
// and the ICRC goes in the four bytes after it. It writes the headers and the ICRC
// and returns the frame length, h.Len()+ibLen+ICRCLen.
func (h *FrameHeaders) EncodeFrame(b []byte, ibLen int) (int, error) {
	total := h.Len() + ibLen + ICRCLen
	if len(b) < total {
		return 0, header.Truncated("frame", "buffer length", len(b), total)
	}
	n, err := h.Encode(b, ibLen)
	if err != nil {
		return 0, err
	}
	PutICRC(b[n+ibLen:], h.ICRC(b[:n], b[n:n+ibLen]))
	return total, nil
}

// ICRC returns the ICRC of a packet whose headers Encode wrote into hdr and whose IB
// packet is the concatenation of ib (for a scatter-gather send: headers, payload
// straight from the memory region, pad; nothing is copied).
func (h *FrameHeaders) ICRC(hdr []byte, ib ...[]byte) uint32 {
	off := EthernetLen
	if h.VLAN {
		off += VLANTagLen
	}
	switch {
	case h.version() == RoCEv1:
		return ComputeICRCv1(hdr[off:off+GRHLen], ib...)
	case h.ipv4():
		return ComputeICRC(hdr[off:off+IPv4Len], hdr[off+IPv4Len:off+IPv4Len+UDPLen], ib...)
	default:
		return ComputeICRC(hdr[off:off+IPv6Len], hdr[off+IPv6Len:off+IPv6Len+UDPLen], ib...)
	}
}

// UDP source ports. rxe (Linux 6.1, checked against every capture) picks the
// RoCEv2 source port of a QP in two steps:
//
//  1. At create time (rxe_qp.c, rxe_qp_init_req) from the QP's OWN number, the
//     only one known then: 0xC000 + (hash_32(qpn, 14) & 0x3fff), hash_32 being the
//     kernel's multiplicative hash (x * 0x61C88647) >> (32 - bits). UD QPs and the
//     GSI QP1 keep this port for good: the captures show 53368 for UD QP 0x13 and
//     55410 for QP1 in both directions. That is UDPSourcePort.
//  2. When the QP is modified with an address vector carrying a GRH (RC and UC on
//     the way to RTR, rxe_verbs.c, rxe_modify_qp), from the flow label of that
//     path: rdma_get_udp_sport (include/rdma/ib_verbs.h). If the flow label is 0
//     it is first derived from both QP numbers (rdma_calc_flow_label, symmetric in
//     the two, so both ends of a connection use one port). ibv_rc_pingpong and
//     perftest without -R give flow label 0: QPN 0x11 on both ends gives 0xC121
//     (49441), as captured. rdma_cm sets the path's flow label itself (cma.c,
//     cma_get_roce_udp_flow_label) from its own source and destination ports, and
//     the CM REQ carries it as the primary flow label: see CMFlowLabel. That is
//     ConnectedUDPSourcePort.
//
// In every case the UDP source port of a packet is that of the SENDER's QP.

// UDPSourcePort returns the UDP source port rxe gives a new QP numbered qpn (its own
// number): 0xC000 + (hash_32(qpn, 14) & 0x3fff). UD and GSI QPs keep it.
func UDPSourcePort(qpn uint32) uint16 {
	const goldenRatio32 = 0x61C88647 // the kernel's GOLDEN_RATIO_32
	return 0xC000 + uint16((qpn*goldenRatio32)>>(32-14))&0x3FFF
}

// QPFlowLabel returns the flow label derived from the local and remote QP numbers
// when a path has none (the kernel's rdma_calc_flow_label): a 20-bit mix of their
// product.
func QPFlowLabel(localQPN, remoteQPN uint32) uint32 {
	fl := uint64(localQPN) * uint64(remoteQPN)
	fl ^= fl >> 20
	fl ^= fl >> 40
	return uint32(fl & 0xFFFFF)
}

// FlowLabelUDPSourcePort returns the UDP source port for a flow label (the kernel's
// rdma_flow_label_to_udp_sport): its low 14 bits XOR its high 6 bits, in 0xC000-0xFFFF.
func FlowLabelUDPSourcePort(flowLabel uint32) uint16 {
	low := flowLabel & 0x3FFF
	high := flowLabel & 0xFC000
	low ^= high >> 14
	return uint16(low) | 0xC000
}

// ConnectedUDPSourcePort returns the UDP source port rxe uses for a QP connected
// over a path with flowLabel (0 if none) to remoteQPN: FlowLabelUDPSourcePort of the
// flow label, or of QPFlowLabel(localQPN, remoteQPN) when it is 0.
func ConnectedUDPSourcePort(flowLabel, localQPN, remoteQPN uint32) uint16 {
	if flowLabel&0xFFFFF == 0 {
		flowLabel = QPFlowLabel(localQPN, remoteQPN)
	}
	return FlowLabelUDPSourcePort(flowLabel)
}

// CMFlowLabel returns the flow label rdma_cm puts in the paths it resolves over
// RoCEv2 when the application gave none (Linux cma.c, since 5.9): (srcPort*31 +
// dstPort) & 0xFFFFF, from the active side's rdma_cm (TCP-like) port numbers, as
// carried in the REQ's CMA header and service ID. Both QPs then send from
// FlowLabelUDPSourcePort of it.
func CMFlowLabel(srcPort, dstPort uint16) uint32 {
	return (uint32(srcPort)*31 + uint32(dstPort)) & 0xFFFFF
}
