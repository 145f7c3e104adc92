// Package capture extracts the out-of-band exchanges of the real tools from the reference
// captures, for the tests of the oob packages: the reassembled TCP byte streams of a
// port (package cmsends adds the SENDs of rdma_cm exchanges), and plays one side of an
// exchange back. It is a test helper: it fails loudly rather than recovering from odd
// captures.
package capture

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// Event is one message or segment of an exchange, in capture order.
type Event struct {
	// Frame is the capture's frame number (1-based, as tshark counts).
	Frame int
	// FromClient says which side sent it: the side that connected (TCP), or the side
	// that sent the capture's first frame (RoCE).
	FromClient bool
	// Data is the segment's new payload bytes, or the SEND's payload.
	Data []byte
}

// Conn is one TCP connection to the port: its segments in capture order, retransmitted
// bytes removed.
type Conn struct {
	Client, Server netip.AddrPort
	Events         []Event
}

// Stream returns the concatenated bytes one side sent.
func (c *Conn) Stream(fromClient bool) []byte {
	var b []byte
	for _, e := range c.Events {
		if e.FromClient == fromClient {
			b = append(b, e.Data...)
		}
	}
	return b
}

// Packet is one captured frame.
type Packet struct {
	Frame int
	Data  []byte
}

func ReadAll(path string) ([]Packet, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		return nil, err
	}
	var out []Packet
	for n := 1; ; n++ {
		data, _, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: frame %d: %w", path, n, err)
		}
		out = append(out, Packet{n, data})
	}
}

// Decode decodes an Ethernet frame and returns its IP source and destination.
func Decode(data []byte) (p gopacket.Packet, src, dst netip.Addr) {
	p = gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.DecodeOptions{NoCopy: true, Lazy: true})
	switch ip := p.NetworkLayer().(type) {
	case *layers.IPv4:
		src, _ = netip.AddrFromSlice(ip.SrcIP.To4())
		dst, _ = netip.AddrFromSlice(ip.DstIP.To4())
	case *layers.IPv6:
		src, _ = netip.AddrFromSlice(ip.SrcIP)
		dst, _ = netip.AddrFromSlice(ip.DstIP)
	}
	return p, src, dst
}

// TCP returns the TCP connections to port in the capture, in the order their first
// segment appears.
func TCP(path string, port uint16) ([]*Conn, error) {
	pkts, err := ReadAll(path)
	if err != nil {
		return nil, err
	}
	type dir struct {
		started bool
		next    uint32
	}
	type state struct {
		conn     *Conn
		fromC, s dir
	}
	conns := map[[2]netip.AddrPort]*state{}
	var order []*Conn
	for _, pk := range pkts {
		p, srcIP, dstIP := Decode(pk.Data)
		tcp, ok := p.TransportLayer().(*layers.TCP)
		if !ok || (uint16(tcp.DstPort) != port && uint16(tcp.SrcPort) != port) {
			continue
		}
		src := netip.AddrPortFrom(srcIP, uint16(tcp.SrcPort))
		dst := netip.AddrPortFrom(dstIP, uint16(tcp.DstPort))
		fromClient := uint16(tcp.DstPort) == port
		key := [2]netip.AddrPort{src, dst}
		if !fromClient {
			key = [2]netip.AddrPort{dst, src}
		}
		st := conns[key]
		if st == nil {
			st = &state{conn: &Conn{Client: key[0], Server: key[1]}}
			conns[key] = st
			order = append(order, st.conn)
		}
		d := &st.s
		if fromClient {
			d = &st.fromC
		}
		seq := tcp.Seq
		if tcp.SYN {
			d.started, d.next = true, seq+1
			continue
		}
		payload := tcp.Payload
		if !d.started {
			d.started, d.next = true, seq
		}
		if len(payload) == 0 {
			continue
		}
		// Trim bytes already seen (retransmissions); refuse holes.
		if off := int32(d.next - seq); off > 0 {
			if int(off) >= len(payload) {
				continue
			}
			payload = payload[off:]
			seq = d.next
		}
		if seq != d.next {
			return nil, fmt.Errorf("%s: frame %d: hole in TCP stream %v->%v", path, pk.Frame, src, dst)
		}
		d.next += uint32(len(payload))
		st.conn.Events = append(st.conn.Events, Event{Frame: pk.Frame, FromClient: fromClient, Data: bytes.Clone(payload)})
	}
	return order, nil
}

// Peer is one end of a transport the replayed side's counterpart is played on.
type Peer interface {
	// Write sends p (one segment or message).
	Write(p []byte) error
	// Read receives the next n bytes (stream) or the next message, which must have n
	// bytes.
	Read(n int) ([]byte, error)
}

// Play plays one side of a captured exchange over peer: it sends the events that side
// sent, in capture order, and receives the others' events, comparing what it receives
// with what the capture holds (with equal, nil meaning bytes.Equal). It returns at the
// first difference, naming the frame.
func Play(peer Peer, events []Event, peerIsClient bool, equal func(frame int, got, want []byte) bool) error {
	if equal == nil {
		equal = func(_ int, got, want []byte) bool { return bytes.Equal(got, want) }
	}
	for _, e := range events {
		if e.FromClient == peerIsClient {
			if err := peer.Write(e.Data); err != nil {
				return fmt.Errorf("frame %d: sending: %w", e.Frame, err)
			}
			continue
		}
		got, err := peer.Read(len(e.Data))
		if err != nil {
			return fmt.Errorf("frame %d: receiving %d bytes: %w", e.Frame, len(e.Data), err)
		}
		if !equal(e.Frame, got, e.Data) {
			return fmt.Errorf("frame %d: got\n%q\nwant\n%q", e.Frame, got, e.Data)
		}
	}
	return nil
}

// StreamPeer adapts a byte stream (a net.Conn) to Peer.
type StreamPeer struct{ RW io.ReadWriter }

// Write writes p.
func (s StreamPeer) Write(p []byte) error { _, err := s.RW.Write(p); return err }

// Read reads exactly n bytes.
func (s StreamPeer) Read(n int) ([]byte, error) {
	b := make([]byte, n)
	_, err := io.ReadFull(s.RW, b)
	return b, err
}
