package pcaptap

import (
	"bytes"
	"net"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"github.com/softrdma/softrdma/netio"
)

// TestTCPSegments: a connection's octets become a three-way handshake and
// segments of at most tcpMSS octets whose sequence numbers follow the
// stream, both ways, so that the stream reassembles byte for byte.
func TestTCPSegments(t *testing.T) {
	var file bytes.Buffer
	p, err := NewTCP(&file, netio.FormatPcap)
	if err != nil {
		t.Fatal(err)
	}
	local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
	remote := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 7174}
	o := p.Observe(local, remote)
	sent := bytes.Repeat([]byte("0123456789"), 400) // 4000 octets: 3 segments
	o.Sent(sent)
	o.Received([]byte("reply"))
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	r, err := pcapgo.NewReader(&file)
	if err != nil {
		t.Fatal(err)
	}
	var flags []string
	streams := map[layers.TCPPort]*bytes.Buffer{}
	next := map[layers.TCPPort]uint32{}
	for {
		data, _, err := r.ReadPacketData()
		if err != nil {
			break
		}
		pkt := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
		tcp, _ := pkt.Layer(layers.LayerTypeTCP).(*layers.TCP)
		if tcp == nil {
			t.Fatalf("not a TCP segment: %v", pkt)
		}
		switch {
		case tcp.SYN && tcp.ACK:
			flags = append(flags, "SA")
		case tcp.SYN:
			flags = append(flags, "S")
		case len(tcp.Payload) == 0:
			flags = append(flags, "A")
		default:
			flags = append(flags, "D")
			if len(tcp.Payload) > tcpMSS {
				t.Errorf("segment of %d octets, more than %d", len(tcp.Payload), tcpMSS)
			}
			if n, ok := next[tcp.SrcPort]; ok && n != tcp.Seq {
				t.Errorf("port %d: sequence %d, want %d", tcp.SrcPort, tcp.Seq, n)
			}
			if streams[tcp.SrcPort] == nil {
				streams[tcp.SrcPort] = &bytes.Buffer{}
			}
			streams[tcp.SrcPort].Write(tcp.Payload)
		}
		next[tcp.SrcPort] = tcp.Seq + uint32(len(tcp.Payload))
		if tcp.SYN {
			next[tcp.SrcPort]++
		}
	}
	if got, want := len(flags), 3+3+1; got != want || flags[0] != "S" || flags[1] != "SA" || flags[2] != "A" {
		t.Fatalf("segments %v, want S SA A and 4 data segments", flags)
	}
	if !bytes.Equal(streams[40000].Bytes(), sent) || streams[7174].String() != "reply" {
		t.Errorf("streams: %d octets from the local side (want %d), %q from the remote", streams[40000].Len(), len(sent), streams[7174].String())
	}
}
