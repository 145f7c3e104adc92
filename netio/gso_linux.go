//go:build linux

package netio

import (
	"github.com/softrdma/softrdma/header"
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
// payload bytes. Its errors are *header.Error ("gso" for the split itself).
func parseUDPGSOFrame(frame []byte, gsoSize int) (udpGSOFrame, error) {
	g := udpGSOFrame{ipOff: EthernetHeaderLen, size: gsoSize}
	if gsoSize <= 0 {
		return g, &header.Error{Header: "gso", Field: "segment size", Value: uint64(max(gsoSize, 0)), Rel: "<", Limit: 1, Err: header.ErrInvalid}
	}
	if len(frame) < EthernetHeaderLen+ipv4HeaderLen {
		return g, header.Truncated("gso", "frame length", len(frame), EthernetHeaderLen+ipv4HeaderLen)
	}
	var ipLen int // the IP datagram's length as its header gives it
	switch et := header.Ethernet(frame).Type(); et {
	case etherTypeIPv4:
		g.v4 = true
		ip := header.IPv4(frame[EthernetHeaderLen:])
		ihl := ip.HeaderLen()
		if ip.Version() != 4 || ihl < ipv4HeaderLen {
			return g, &header.Error{Header: "ipv4", Field: "version/IHL", Value: uint64(ip[0]), Hex: 2, Reason: "not version 4 with IHL >= 5", Err: header.ErrInvalid}
		}
		if ip.Protocol() != ipProtoUDP {
			return g, &header.Error{Header: "ipv4", Field: "protocol", Value: uint64(ip.Protocol()), Rel: "!=", LimitName: "UDP", Limit: ipProtoUDP, Err: header.ErrUnsupported}
		}
		g.udpOff = g.ipOff + ihl
		ipLen = int(ip.TotalLength())
	case etherTypeIPv6:
		ip := header.IPv6(frame[EthernetHeaderLen:])
		if len(ip) < ipv6HeaderLen || ip.NextHeader() != ipProtoUDP {
			return g, &header.Error{Header: "ipv6", Field: "next header", Value: uint64(nextHeader(ip)), Rel: "!=", LimitName: "UDP", Limit: ipProtoUDP, Err: header.ErrUnsupported}
		}
		g.udpOff = g.ipOff + ipv6HeaderLen
		ipLen = ipv6HeaderLen + int(ip.PayloadLength())
	default:
		return g, &header.Error{Header: "ethernet", Field: "ethertype", Value: uint64(et), Hex: 4, Reason: "not IPv4 or IPv6", Err: header.ErrUnsupported}
	}
	g.hdrLen = g.udpOff + udpHeaderLen
	if len(frame) < g.hdrLen {
		return g, header.Truncated("gso", "frame length", len(frame), g.hdrLen)
	}
	// GSO frames may carry lengths of 0 (IPv6 jumbograms past 64 KiB) or the
	// whole super-datagram; the frame's own length is the truth, and the
	// header fields must not claim more than it holds.
	if ipLen > 0 && g.ipOff+ipLen > len(frame) {
		return g, &header.Error{Header: "gso", Field: "IP length", Value: uint64(ipLen), Rel: ">", LimitName: "frame", Limit: uint64(len(frame) - g.ipOff), Err: header.ErrTruncated}
	}
	payload := len(frame) - g.hdrLen
	if ipLen > 0 {
		payload = g.ipOff + ipLen - g.hdrLen
	}
	if payload <= 0 {
		return g, &header.Error{Header: "gso", Field: "payload length", Value: 0, Reason: "no datagram to split", Err: header.ErrInvalid}
	}
	g.count = (payload + gsoSize - 1) / gsoSize
	if g.count > udpMaxSegments {
		return g, &header.Error{Header: "gso", Field: "segments", Value: uint64(g.count), Rel: ">", Limit: udpMaxSegments, Err: header.ErrInvalid}
	}
	return g, nil
}

// nextHeader returns the IPv6 next header, or 0 if ip is shorter than its
// fixed header.
func nextHeader(ip header.IPv6) uint8 {
	if len(ip) < ipv6HeaderLen {
		return 0
	}
	return ip.NextHeader()
}

// segLen returns the length of datagram j of frame, headers included.
func (g udpGSOFrame) segLen(frame []byte, j int) int {
	end := g.payloadEnd(frame)
	start := g.hdrLen + j*g.size
	return g.hdrLen + min(g.size, end-start)
}

// payloadEnd returns the offset in frame where the super-datagram ends.
func (g udpGSOFrame) payloadEnd(frame []byte) int {
	var ipLen int
	if g.v4 {
		ipLen = int(header.IPv4(frame[g.ipOff:]).TotalLength())
	} else if l := int(header.IPv6(frame[g.ipOff:]).PayloadLength()); l > 0 {
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
	start := g.hdrLen + j*g.size
	n := min(g.size, g.payloadEnd(frame)-start)
	copy(dst, frame[:g.hdrLen])
	copy(dst[g.hdrLen:], frame[start:start+n])
	udpLen := udpHeaderLen + n
	if g.v4 {
		ip := header.IPv4(dst[g.ipOff:g.udpOff])
		ip.SetTotalLength(uint16(g.udpOff - g.ipOff + udpLen))
		ip.SetID(header.IPv4(frame[g.ipOff:]).ID() + uint16(j))
		ip.SetChecksum(header.IPv4Checksum(ip))
	} else {
		header.IPv6(dst[g.ipOff:]).SetPayloadLength(uint16(udpLen))
	}
	udp := header.UDP(dst[g.udpOff:])
	udp.SetLength(uint16(udpLen))
	udp.SetChecksum(0)
	return g.hdrLen + n
}
