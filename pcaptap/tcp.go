package pcaptap

import (
	"io"
	"net"
	"sync"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/softrdma/softrdma/iwarp"
	"github.com/softrdma/softrdma/netio"
)

// TCP writes the octets of iWARP connections, as an iwarp.StreamObserver sees
// them, as a pcap or pcapng (netio.CaptureWriter) of Ethernet/IP/TCP segments: a three-way handshake when
// the observer is made, then one segment (at most tcpMSS octets) per chunk
// with sequence and acknowledgement numbers that follow the stream, so that
// softrdma decode and tshark reassemble it. The segments are synthesised (the
// kernel's real segmentation is not visible to a socket), which is enough for a
// byte-exact view of the stream.
type TCP struct {
	mu    sync.Mutex
	w     *netio.CaptureWriter
	flush bool // its own file: each segment written out at once
	err   error
	buf   gopacket.SerializeBuffer
}

// tcpMSS is the largest payload of a synthesised segment.
const tcpMSS = 1448

// NewTCP writes the file header of format to w and returns the writer of
// its segments. Each segment is written out at once (a file, or a reader of
// the stream, sees it without a Flush).
func NewTCP(w io.Writer, format netio.CaptureFormat) (*TCP, error) {
	cw, err := netio.NewCaptureWriter(w, format)
	if err == nil {
		err = cw.Flush()
	}
	if err != nil {
		return nil, err
	}
	return newTCP(cw, true), nil
}

// newTCP returns a TCP writing into w, flushing each segment if it owns w.
func newTCP(w *netio.CaptureWriter, own bool) *TCP {
	return &TCP{w: w, flush: own, buf: gopacket.NewSerializeBuffer()}
}

// Err returns the first write error.
func (p *TCP) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Observe is an iwarp.ConnParams.Observe hook: local is this side of the
// connection, whose Sent octets flow local→remote.
func (p *TCP) Observe(local, remote net.Addr) iwarp.StreamObserver {
	o := &tcpConn{p: p, local: newTCPEndpoint(local, 0x11), remote: newTCPEndpoint(remote, 0x22)}
	o.local.seq, o.remote.seq = 0x1000_0000, 0x2000_0000
	p.mu.Lock()
	defer p.mu.Unlock()
	o.segment(&o.local, &o.remote, layers.TCP{SYN: true}, nil)
	o.local.seq++
	o.segment(&o.remote, &o.local, layers.TCP{SYN: true, ACK: true}, nil)
	o.remote.seq++
	o.segment(&o.local, &o.remote, layers.TCP{ACK: true}, nil)
	return o
}

type tcpEndpoint struct {
	ip   net.IP
	port uint16
	mac  net.HardwareAddr
	seq  uint32 // next sequence number this end sends
}

func newTCPEndpoint(a net.Addr, macByte byte) tcpEndpoint {
	e := tcpEndpoint{ip: net.IPv4(127, 0, 0, 1), mac: net.HardwareAddr{0x02, 0, 0, 0, 0, macByte}}
	if t, ok := a.(*net.TCPAddr); ok {
		e.ip, e.port = t.IP, uint16(t.Port)
	}
	return e
}

type tcpConn struct {
	p             *TCP
	local, remote tcpEndpoint
}

// Sent records octets this side wrote.
func (o *tcpConn) Sent(b []byte) { o.data(&o.local, &o.remote, b) }

// Received records octets this side read.
func (o *tcpConn) Received(b []byte) { o.data(&o.remote, &o.local, b) }

func (o *tcpConn) data(from, to *tcpEndpoint, b []byte) {
	o.p.mu.Lock()
	defer o.p.mu.Unlock()
	for len(b) > 0 {
		n := min(len(b), tcpMSS)
		o.segment(from, to, layers.TCP{ACK: true, PSH: n == len(b)}, b[:n])
		from.seq += uint32(n)
		b = b[n:]
	}
}

// segment writes one segment from → to; the caller holds p.mu.
func (o *tcpConn) segment(from, to *tcpEndpoint, tcp layers.TCP, payload []byte) {
	p := o.p
	if p.err != nil {
		return
	}
	tcp.SrcPort, tcp.DstPort = layers.TCPPort(from.port), layers.TCPPort(to.port)
	tcp.Seq, tcp.Window = from.seq, 65535
	if tcp.ACK {
		tcp.Ack = to.seq
	}
	eth := &layers.Ethernet{SrcMAC: from.mac, DstMAC: to.mac}
	var ipLayer gopacket.SerializableLayer
	if v4 := from.ip.To4(); v4 != nil {
		eth.EthernetType = layers.EthernetTypeIPv4
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: v4, DstIP: to.ip.To4(), Flags: layers.IPv4DontFragment}
		tcp.SetNetworkLayerForChecksum(ip)
		ipLayer = ip
	} else {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolTCP, SrcIP: from.ip, DstIP: to.ip}
		tcp.SetNetworkLayerForChecksum(ip)
		ipLayer = ip
	}
	if err := gopacket.SerializeLayers(p.buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		eth, ipLayer, &tcp, gopacket.Payload(payload)); err != nil {
		p.err = err
		return
	}
	data := p.buf.Bytes()
	if p.err = p.w.WriteFrame(time.Now(), data); p.err == nil && p.flush {
		p.err = p.w.Flush()
	}
}
