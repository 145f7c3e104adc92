package pcaptap

import (
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/softrdma/softrdma/header"
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
	buf   []byte // the frame being built: Ethernet, IP, TCP, payload
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
	return &TCP{w: w, flush: own}
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
	o.segment(&o.local, &o.remote, header.TCPFlagSYN, nil)
	o.local.seq++
	o.segment(&o.remote, &o.local, header.TCPFlagSYN|header.TCPFlagACK, nil)
	o.remote.seq++
	o.segment(&o.local, &o.remote, header.TCPFlagACK, nil)
	return o
}

type tcpEndpoint struct {
	ip   netip.Addr // IPv4 (an IPv4-mapped IPv6 address unmapped) or IPv6
	port uint16
	mac  [6]byte
	seq  uint32 // next sequence number this end sends
}

// newTCPEndpoint returns the end at a (127.0.0.1 if a is not a *net.TCPAddr
// with an IP), with a made-up locally administered MAC ending in macByte.
func newTCPEndpoint(a net.Addr, macByte byte) tcpEndpoint {
	e := tcpEndpoint{ip: netip.AddrFrom4([4]byte{127, 0, 0, 1}), mac: [6]byte{0x02, 0, 0, 0, 0, macByte}}
	if t, ok := a.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(t.IP); ok {
			e.ip = ip.Unmap()
		}
		e.port = uint16(t.Port)
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
		flags := uint8(header.TCPFlagACK)
		if n == len(b) {
			flags |= header.TCPFlagPSH
		}
		o.segment(from, to, flags, b[:n])
		from.seq += uint32(n)
		b = b[n:]
	}
}

// segment writes one segment from → to with the given TCP flags (the
// acknowledgement number set when they hold TCPFlagACK); the caller holds p.mu.
// The IP version is the sender's: if the two ends differ (which a real
// connection cannot), the receiver's address is written in the sender's
// family, as zeros when it has no form there.
func (o *tcpConn) segment(from, to *tcpEndpoint, flags uint8, payload []byte) {
	p := o.p
	if p.err != nil {
		return
	}
	src, dst := from.ip, to.ip
	v4 := src.Is4()
	ipLen, etherType := header.IPv4MinLen, uint16(header.EtherTypeIPv4)
	if !v4 {
		ipLen, etherType = header.IPv6Len, header.EtherTypeIPv6
		if dst.Is4() {
			dst = netip.AddrFrom16(dst.As16())
		}
	}
	tcpLen := header.TCPMinLen + len(payload)
	n := header.EthernetLen + ipLen + tcpLen
	if cap(p.buf) < n {
		p.buf = make([]byte, n)
	}
	frame := p.buf[:n]
	header.Ethernet(frame).Encode(&header.EthernetFields{Dst: to.mac, Src: from.mac, Type: etherType})
	ip := frame[header.EthernetLen:]
	if v4 {
		header.IPv4(ip).Encode(&header.IPv4Fields{TotalLength: uint16(ipLen + tcpLen), FlagsFragment: header.IPv4FlagDF,
			TTL: 64, Protocol: header.IPProtocolTCP, Src: src, Dst: dst})
	} else {
		header.IPv6(ip).Encode(&header.IPv6Fields{PayloadLength: uint16(tcpLen), NextHeader: header.IPProtocolTCP,
			HopLimit: 64, Src: src, Dst: dst})
	}
	seg := header.TCP(ip[ipLen:])
	f := header.TCPFields{SrcPort: from.port, DstPort: to.port, Seq: from.seq, Flags: flags, Window: 65535}
	if flags&header.TCPFlagACK != 0 {
		f.Ack = to.seq
	}
	seg.Encode(&f)
	copy(seg[header.TCPMinLen:], payload)
	seg.SetChecksum(seg.CalculateChecksum(src, dst))
	if p.err = p.w.WriteFrame(time.Now(), frame); p.err == nil && p.flush {
		p.err = p.w.Flush()
	}
}
