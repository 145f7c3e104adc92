package header

import "encoding/binary"

// Ethernet II and 802.1Q constants.
const (
	EthernetLen = 14 // Ethernet II header: destination MAC, source MAC, Ethertype
	VLANTagLen  = 4  // one IEEE 802.1Q tag: TPID 0x8100 in the Ethertype's place, then TCI

	EtherTypeIPv4   = 0x0800 // IPv4
	EtherTypeARP    = 0x0806 // ARP
	EtherTypeVLAN   = 0x8100 // an IEEE 802.1Q tag follows
	EtherTypeIPv6   = 0x86DD // IPv6
	EtherTypeRoCEv1 = 0x8915 // RoCEv1 (IBTA Vol. 1 Annex A16): a GRH follows
)

// Ethernet is an Ethernet II header, optionally followed by one 802.1Q tag:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                 Destination MAC (6 bytes) ...                 |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  ... Destination MAC          |      Source MAC (6 bytes) ... |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                       ... Source MAC                          |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  Ethertype or TPID 0x8100     | (tagged) TCI: PCP, DEI, VID   |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	| (tagged) Ethertype            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The accessors read an untagged header; the VLAN ones the tag after it. Use
// Check first on input not known to be that long.
type Ethernet []byte

// DstMAC returns the destination MAC address.
func (e Ethernet) DstMAC() [6]byte { return [6]byte(e[0:6]) }

// SrcMAC returns the source MAC address.
func (e Ethernet) SrcMAC() [6]byte { return [6]byte(e[6:12]) }

// Type returns the Ethertype field (EtherTypeVLAN for a tagged frame).
func (e Ethernet) Type() uint16 { return binary.BigEndian.Uint16(e[12:]) }

// Tagged reports whether an 802.1Q tag follows.
func (e Ethernet) Tagged() bool { return e.Type() == EtherTypeVLAN }

// VLANTCI returns the tag's control information (PCP, DEI, VLAN ID) of a tagged header.
func (e Ethernet) VLANTCI() uint16 { return binary.BigEndian.Uint16(e[14:]) }

// InnerType returns the Ethertype after any tag.
func (e Ethernet) InnerType() uint16 {
	if e.Tagged() {
		return binary.BigEndian.Uint16(e[16:])
	}
	return e.Type()
}

// HeaderLen returns the header's length: EthernetLen, plus VLANTagLen if tagged.
func (e Ethernet) HeaderLen() int {
	if e.Tagged() {
		return EthernetLen + VLANTagLen
	}
	return EthernetLen
}

// SetDstMAC sets the destination MAC address.
func (e Ethernet) SetDstMAC(m [6]byte) { copy(e[0:6], m[:]) }

// SetSrcMAC sets the source MAC address.
func (e Ethernet) SetSrcMAC(m [6]byte) { copy(e[6:12], m[:]) }

// SetType sets the Ethertype field.
func (e Ethernet) SetType(t uint16) { binary.BigEndian.PutUint16(e[12:], t) }

// Check returns an *Error if e is shorter than its header (tag included).
func (e Ethernet) Check() error {
	if len(e) < EthernetLen {
		return Truncated("ethernet", "length", len(e), EthernetLen)
	}
	if e.Tagged() && len(e) < EthernetLen+VLANTagLen {
		return Truncated("vlan", "length", len(e), EthernetLen+VLANTagLen)
	}
	return nil
}

// EthernetFields is an Ethernet header's content, for Encode.
type EthernetFields struct {
	Dst, Src [6]byte
	Type     uint16 // the Ethertype of the payload (after the tag, if VLAN)
	VLAN     bool   // insert one 802.1Q tag
	VLANTCI  uint16 // the tag's PCP, DEI and VLAN ID
}

// Len returns the number of bytes Encode writes.
func (f *EthernetFields) Len() int {
	if f.VLAN {
		return EthernetLen + VLANTagLen
	}
	return EthernetLen
}

// Encode writes the header into e[:f.Len()].
func (e Ethernet) Encode(f *EthernetFields) {
	e.SetDstMAC(f.Dst)
	e.SetSrcMAC(f.Src)
	if f.VLAN {
		e.SetType(EtherTypeVLAN)
		binary.BigEndian.PutUint16(e[14:], f.VLANTCI)
		binary.BigEndian.PutUint16(e[16:], f.Type)
		return
	}
	e.SetType(f.Type)
}
