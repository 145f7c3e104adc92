package decode

import (
	"net/netip"
	"testing"

	"github.com/softrdma/softrdma/header"
)

// TestParse: parse takes a frame's Ethernet, IPv4 and TCP headers through
// package header's views as far as they are whole: a TCP option it does not
// understand leaves the segment readable (gopacket's layers rejected the
// whole header, and the decoder took such a segment for one cut inside its
// header); an IP-in-IP packet keeps the outer header (gopacket's parse
// overwrote it with the inner one); a cut payload is the part captured.
func TestParse(t *testing.T) {
	src, dst := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	// frame returns Ethernet, IPv4 (protocol proto, total length ipLen; 0: the
	// frame's) and l4.
	frame := func(proto uint8, ipLen int, l4 []byte) []byte {
		b := make([]byte, header.EthernetLen+header.IPv4MinLen+len(l4))
		header.Ethernet(b).Encode(&header.EthernetFields{Type: header.EtherTypeIPv4})
		if ipLen == 0 {
			ipLen = header.IPv4MinLen + len(l4)
		}
		header.IPv4(b[header.EthernetLen:]).Encode(&header.IPv4Fields{TotalLength: uint16(ipLen), TTL: 64, Protocol: proto, Src: src, Dst: dst})
		copy(b[header.EthernetLen+header.IPv4MinLen:], l4)
		return b
	}
	// tcpWithOption is a SYN with one 4-byte option (kind 8, length 1: not
	// a valid length) and 3 payload octets.
	tcpWithOption := make([]byte, 24+3)
	header.TCP(tcpWithOption).Encode(&header.TCPFields{SrcPort: 1000, DstPort: 2000, Seq: 7, Flags: header.TCPFlagSYN})
	header.TCP(tcpWithOption).SetDataOffset(6)
	copy(tcpWithOption[20:], []byte{8, 1, 0, 0, 'a', 'b', 'c'})
	inner := frame(ipProtoTCP, 0, tcpWithOption)[header.EthernetLen:]
	for _, c := range []struct {
		name     string
		frame    []byte
		found    netLayer
		proto    uint8
		declared int
		payload  int // IP payload octets held
		tcpData  int // TCP payload octets, if TCP
	}{
		{"tcp option", frame(ipProtoTCP, 0, tcpWithOption), layerEthernet | layerIPv4 | layerTCP, ipProtoTCP, 27, 27, 3},
		{"ip in ip", frame(4, 0, inner), layerEthernet | layerIPv4, 4, len(inner), len(inner), 0},
		{"cut in tcp header", frame(ipProtoTCP, 20+40, tcpWithOption[:12]), layerEthernet | layerIPv4, ipProtoTCP, 40, 12, 0},
		{"cut payload", frame(ipProtoTCP, 20+100, tcpWithOption), layerEthernet | layerIPv4 | layerTCP, ipProtoTCP, 100, 27, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := newDecoder(nil, Options{})
			d.parse(c.frame, layerEthernet)
			if d.hdr.found != c.found {
				t.Fatalf("found %06b, want %06b", d.hdr.found, c.found)
			}
			ip, ok := d.ipView()
			if !ok || ip.src != src || ip.dst != dst || ip.proto != c.proto || ip.declared != c.declared || len(ip.payload) != c.payload {
				t.Errorf("ipView %v %v proto %d declared %d payload %d (ok %v), want %v %v %d %d %d",
					ip.src, ip.dst, ip.proto, ip.declared, len(ip.payload), ok, src, dst, c.proto, c.declared, c.payload)
			}
			if d.has(layerTCP) {
				if tc := d.hdr.tcp; tc.SrcPort() != 1000 || tc.DstPort() != 2000 || tc.Seq() != 7 || len(tc.Payload()) != c.tcpData {
					t.Errorf("tcp %d > %d seq %d, %d payload octets; want 1000 > 2000 seq 7, %d", tc.SrcPort(), tc.DstPort(), tc.Seq(), len(tc.Payload()), c.tcpData)
				}
			}
		})
	}
}
