//go:build linux

package netio

import (
	"encoding/binary"
	"fmt"
)

// The virtio_net_hdr that a packet socket with PACKET_VNET_HDR puts before
// each frame it reads and expects before each frame it sends
// (include/uapi/linux/virtio_net.h; little-endian, as the kernel's
// vio_le() is on little-endian hosts).
const (
	vnetHdrLen = 10

	vnetFlagsOff    = 0
	vnetGSOTypeOff  = 1
	vnetGSOSizeOff  = 4
	vnetGSOTypeNone = 0
	// vnetGSOUDPL4 is VIRTIO_NET_HDR_GSO_UDP_L4 (SKB_GSO_UDP_L4: a UDP GSO
	// send, or datagrams merged by UDP GRO): what a veth hands over
	// unsegmented when a UDP socket on its far end sends with UDP_SEGMENT.
	// The kernel reports it to packet sockets from Linux 6.2 on; before,
	// it drops such frames instead.
	vnetGSOUDPL4 = 5
	vnetGSOECN   = 0x80
)

// udpGSOFrame is the layout of an Ethernet frame that carries a UDP GSO
// super-datagram: headers once, then the payloads of count datagrams of size
// bytes each (the last one may be shorter).
type udpGSOFrame struct {
	ipOff, udpOff, hdrLen int // offsets of the IP and UDP headers, length of all headers
	v4                    bool
	size, count           int
}

// parseUDPGSOFrame checks frame (Ethernet, IPv4 or IPv6, UDP) against its
// own length fields and returns how it splits into datagrams of gsoSize
// payload bytes.
func parseUDPGSOFrame(frame []byte, gsoSize int) (udpGSOFrame, error) {
	g := udpGSOFrame{ipOff: EthernetHeaderLen, size: gsoSize}
	be := binary.BigEndian
	if gsoSize <= 0 {
		return g, fmt.Errorf("netio: gso: segment size %d", gsoSize)
	}
	if len(frame) < EthernetHeaderLen+ipv4HeaderLen {
		return g, fmt.Errorf("netio: gso: frame of %d bytes has no IP header", len(frame))
	}
	ip := frame[EthernetHeaderLen:]
	var ipLen int // the IP datagram's length as its header gives it
	switch et := be.Uint16(frame[12:]); et {
	case etherTypeIPv4:
		g.v4 = true
		ihl := int(ip[0]&0x0f) * 4
		if ip[0]>>4 != 4 || ihl < ipv4HeaderLen {
			return g, fmt.Errorf("netio: gso: IPv4 version/IHL %#02x", ip[0])
		}
		if ip[9] != ipProtoUDP {
			return g, fmt.Errorf("netio: gso: IPv4 protocol %d is not UDP", ip[9])
		}
		g.udpOff = g.ipOff + ihl
		ipLen = int(be.Uint16(ip[2:]))
	case etherTypeIPv6:
		if len(ip) < ipv6HeaderLen || ip[6] != ipProtoUDP {
			return g, fmt.Errorf("netio: gso: IPv6 frame without a UDP header first")
		}
		g.udpOff = g.ipOff + ipv6HeaderLen
		ipLen = ipv6HeaderLen + int(be.Uint16(ip[4:]))
	default:
		return g, fmt.Errorf("netio: gso: Ethertype %#04x is not IP", et)
	}
	g.hdrLen = g.udpOff + udpHeaderLen
	if len(frame) < g.hdrLen {
		return g, fmt.Errorf("netio: gso: frame of %d bytes shorter than its headers (%d)", len(frame), g.hdrLen)
	}
	// GSO frames may carry lengths of 0 (IPv6 jumbograms past 64 KiB) or the
	// whole super-datagram; the frame's own length is the truth, and the
	// header fields must not claim more than it holds.
	if ipLen > 0 && g.ipOff+ipLen > len(frame) {
		return g, fmt.Errorf("netio: gso: IP length %d > %d bytes in the frame", ipLen, len(frame)-g.ipOff)
	}
	payload := len(frame) - g.hdrLen
	if ipLen > 0 {
		payload = g.ipOff + ipLen - g.hdrLen
	}
	if payload <= 0 {
		return g, fmt.Errorf("netio: gso: no payload")
	}
	g.count = (payload + gsoSize - 1) / gsoSize
	if g.count > udpMaxSegments {
		return g, fmt.Errorf("netio: gso: %d segments > %d", g.count, udpMaxSegments)
	}
	return g, nil
}

// segLen returns the length of datagram j of frame, headers included.
func (g udpGSOFrame) segLen(frame []byte, j int) int {
	end := g.payloadEnd(frame)
	start := g.hdrLen + j*g.size
	return g.hdrLen + min(g.size, end-start)
}

// payloadEnd returns the offset in frame where the super-datagram ends.
func (g udpGSOFrame) payloadEnd(frame []byte) int {
	be := binary.BigEndian
	var ipLen int
	if g.v4 {
		ipLen = int(be.Uint16(frame[g.ipOff+2:]))
	} else if l := int(be.Uint16(frame[g.ipOff+4:])); l > 0 {
		ipLen = ipv6HeaderLen + l
	}
	if ipLen == 0 {
		return len(frame)
	}
	return g.ipOff + ipLen
}

// segment writes datagram j of frame into dst, which must hold segLen(frame,
// j) bytes, as the kernel's UDP GSO would have sent it on its own: the
// headers copied with the lengths of this datagram, IPv4 Identification
// counting up from the super-datagram's by j (inet_gso_segment) and the
// header checksum recomputed. The UDP checksum is set to 0: a GSO frame's
// holds only the pseudo-header sum the NIC would complete, and RoCE's ICRC
// does not cover it (rxe sends 0 as well). It returns the length written.
func (g udpGSOFrame) segment(dst, frame []byte, j int) int {
	be := binary.BigEndian
	start := g.hdrLen + j*g.size
	n := min(g.size, g.payloadEnd(frame)-start)
	copy(dst, frame[:g.hdrLen])
	copy(dst[g.hdrLen:], frame[start:start+n])
	ip := dst[g.ipOff:]
	udpLen := udpHeaderLen + n
	if g.v4 {
		be.PutUint16(ip[2:], uint16(g.udpOff-g.ipOff+udpLen))
		be.PutUint16(ip[4:], be.Uint16(frame[g.ipOff+4:])+uint16(j))
		ip[10], ip[11] = 0, 0
		be.PutUint16(ip[10:], ipv4Checksum(ip[:g.udpOff-g.ipOff]))
	} else {
		be.PutUint16(ip[4:], uint16(udpLen))
	}
	udp := dst[g.udpOff:]
	be.PutUint16(udp[4:], uint16(udpLen))
	udp[6], udp[7] = 0, 0
	return g.hdrLen + n
}
