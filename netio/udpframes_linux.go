//go:build linux

package netio

import (
	"fmt"
	"net"
	"net/netip"
	"sync"

	"github.com/softrdma/softrdma/header"
)

// UDPFrames offers a UDPEndpoint, which carries datagrams, as the
// Ethernet-frame Endpoint (with Poller and VectorWriter) for the users that
// need frames: tests, the raw baselines, tools, the capture's records. Its
// Write reads each frame's addresses, ports, TOS, TTL and IPv4 ID with the
// header package's views into an OutDatagram for WriteDatagrams; its Read
// takes datagrams from ReadDatagrams and writes Ethernet (LocalMAC,
// PeerMAC) + IPv4/IPv6 + UDP headers in front of each payload. Every method
// of the endpoint (ReadDatagrams, WriteDatagrams, Stats, ...) stays
// available, so a RoCE device under a capture of a UDPFrames still uses the
// datagrams; without a capture the device takes the UDPEndpoint itself.
//
// Received frames: the IPv4 Identification is not reported by the kernel,
// so synthesised IPv4 headers carry 0 and DF (UnknownIPv4ID); the IPv4
// header checksum is valid; the UDP checksum is 0 and the IPv6 flow label 0.
// Each payload is copied once, from the endpoint's buffer into the caller's
// after room for the headers (the headroom before offset is not touched);
// a datagram that does not fit is dropped and counted (DroppedShortBuffer).
//
// Sent frames are dropped and counted (see UDPStats), not returned as
// errors, when they are not IP/UDP of the endpoint's family, when an IPv4
// frame's flags are not DF alone, or for the reasons WriteDatagrams drops
// a datagram (its IPv4 ID with no place in a run, see DatagramWriter).
type UDPFrames struct {
	*UDPEndpoint
	localMAC, peerMAC [6]byte
	hdrLen            int // Ethernet + IP + UDP

	readMu sync.Mutex
	rd     []Datagram

	writeMu sync.Mutex
	wd      []OutDatagram
	idx     []int    // wd[j] is frame idx[j] of the chunk
	pieces  [][]byte // wd[j]'s payload pieces: pieces[j*MaxWritePieces:]
}

// NewUDPFrames returns e as a frame endpoint whose received frames go from
// peerMAC to localMAC (the MACs of the frames it is given are ignored).
// Closing it closes e.
func NewUDPFrames(e *UDPEndpoint, localMAC, peerMAC [6]byte) *UDPFrames {
	a := &UDPFrames{UDPEndpoint: e, localMAC: localMAC, peerMAC: peerMAC}
	a.hdrLen = EthernetHeaderLen + ipv4HeaderLen + udpHeaderLen
	if e.is6 {
		a.hdrLen = EthernetHeaderLen + ipv6HeaderLen + udpHeaderLen
	}
	a.rd = make([]Datagram, e.batch)
	a.wd = make([]OutDatagram, 0, udpWriteChunk)
	a.idx = make([]int, 0, udpWriteChunk)
	a.pieces = make([][]byte, udpWriteChunk*MaxWritePieces)
	return a
}

// FramesOf returns l as a frame Endpoint for a user that needs frames
// (conform's tester link, a capture): l itself if it carries frames (an
// AF_PACKET or TAP endpoint, a capture), a UDPFrames whose received frames
// go from peerMAC to localMAC if it is a UDPEndpoint, else nil.
func FramesOf(l Link, localMAC, peerMAC [6]byte) Endpoint {
	switch e := l.(type) {
	case Endpoint:
		return e
	case *UDPEndpoint:
		return NewUDPFrames(e, localMAC, peerMAC)
	}
	return nil
}

var (
	_ Endpoint       = (*UDPFrames)(nil)
	_ Poller         = (*UDPFrames)(nil)
	_ IPv4IDPolicy   = (*UDPFrames)(nil)
	_ DatagramReader = (*UDPFrames)(nil)
	_ VectorWriter   = (*UDPFrames)(nil)
	_ DatagramWriter = (*UDPFrames)(nil)
	_ ReadLender     = (*UDPFrames)(nil)
)

// ---- receive ----

// Read receives up to len(bufs) frames (at most BatchSize), blocking until
// at least one arrives. See Endpoint.
func (a *UDPFrames) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	return a.read(bufs, sizes, offset, false)
}

// TryRead is Read without blocking. See Poller.
func (a *UDPFrames) TryRead(bufs [][]byte, sizes []int, offset int) (int, error) {
	return a.read(bufs, sizes, offset, true)
}

func (a *UDPFrames) read(bufs [][]byte, sizes []int, offset int, try bool) (int, error) {
	e := a.UDPEndpoint
	if e.closed.Load() {
		return 0, net.ErrClosed
	}
	want := min(len(bufs), len(sizes), e.batch)
	if want == 0 {
		return 0, nil
	}
	if offset < 0 {
		return 0, fmt.Errorf("netio: udp: negative read offset %d", offset)
	}
	a.readMu.Lock()
	defer a.readMu.Unlock()
	d := a.rd[:want]
	var n int
	var err error
	if try {
		n, err = e.TryReadDatagrams(d)
	} else {
		n, err = e.ReadDatagrams(d)
	}
	defer clear(d[:n]) // keep no reference to the endpoint's buffers
	if err != nil || n == 0 {
		return 0, err
	}
	out := 0
	var rerr error
	for i := range d[:n] {
		l := len(d[i].Payload)
		if offset+a.hdrLen+l > len(bufs[out]) {
			e.stats.droppedShortBuffer.Add(1)
			if rerr == nil {
				rerr = shortBufferError(a.hdrLen+l, max(len(bufs[out])-offset, 0))
			}
			continue
		}
		copy(bufs[out][offset+a.hdrLen:], d[i].Payload)
		sizes[out] = a.synthesise(bufs[out][offset:], &d[i])
		out++
	}
	if dropped := n - out; dropped > 0 {
		e.stats.framesReceived.Add(-uint64(dropped)) // counted as returned by ReadDatagrams
	}
	return out, rerr
}

// synthesise writes Ethernet + IP + UDP headers into f[:a.hdrLen] for d,
// whose payload is already at f[a.hdrLen:], and returns the frame length.
func (a *UDPFrames) synthesise(f []byte, d *Datagram) int {
	eth := header.EthernetFields{Dst: a.localMAC, Src: a.peerMAC, Type: etherTypeIPv4}
	if a.is6 {
		eth.Type = etherTypeIPv6
	}
	header.Ethernet(f).Encode(&eth)
	// Identification 0: unknown, see UnknownIPv4ID.
	header.EncodeIPUDP(f[EthernetHeaderLen:], !a.is6, &header.IPUDPFields{
		Src: d.Src, Dst: d.Dst, TOS: d.TOS, TTL: d.TTL, PayloadLen: len(d.Payload),
	})
	return a.hdrLen + len(d.Payload)
}

// appendDatagramFrame appends to b the frame Read would have delivered for
// d (a datagram ReadDatagrams returned): what a capture of the endpoint
// records for it.
func (a *UDPFrames) appendDatagramFrame(b []byte, d *Datagram) []byte {
	start := len(b)
	b = append(b, make([]byte, a.hdrLen)...)
	b = append(b, d.Payload...)
	a.synthesise(b[start:], d)
	return b
}

// appendOutDatagramFrame appends to b the frame that leaves for d (a
// datagram given to WriteDatagrams), with the adapter's MACs and the
// endpoint's address: what a capture of the endpoint records for it.
func (a *UDPFrames) appendOutDatagramFrame(b []byte, d *OutDatagram) []byte {
	src := d.Src
	if !src.IsValid() {
		src = a.local.Addr()
	}
	return appendOutDatagramFrame(b, a.peerMAC, a.localMAC, src, d)
}

// ---- send ----

// Write sends each bufs[i][offset:] as one UDP datagram. See Endpoint and
// UDPFrames for the frames dropped.
func (a *UDPFrames) Write(bufs [][]byte, offset int) (int, error) {
	if a.closed.Load() {
		return 0, net.ErrClosed
	}
	a.writeMu.Lock()
	defer a.writeMu.Unlock()
	valid := len(bufs)
	for i, b := range bufs {
		if offset < 0 || offset > len(b) {
			valid = i
			break
		}
	}
	for start := 0; start < valid; start += udpWriteChunk {
		end := min(start+udpWriteChunk, valid)
		if n, err := a.writeChunk(bufs[start:end], nil, offset); err != nil {
			return start + n, err
		}
	}
	if valid < len(bufs) {
		return valid, fmt.Errorf("netio: udp: write offset %d outside buffer %d of length %d", offset, valid, len(bufs[valid]))
	}
	return valid, nil
}

// WriteVectors sends each frames[i], the concatenation of its pieces, as
// one UDP datagram, its payload gathered by the kernel where it lies. The
// first piece must hold the Ethernet, IP and UDP headers. Frames are
// dropped as Write drops them, and also when they have more than
// MaxWritePieces pieces. See VectorWriter.
func (a *UDPFrames) WriteVectors(frames [][][]byte) (int, error) {
	if a.closed.Load() {
		return 0, net.ErrClosed
	}
	a.writeMu.Lock()
	defer a.writeMu.Unlock()
	for start := 0; start < len(frames); start += udpWriteChunk {
		end := min(start+udpWriteChunk, len(frames))
		if n, err := a.writeChunk(nil, frames[start:end], 0); err != nil {
			return start + n, err
		}
	}
	return len(frames), nil
}

// writeChunk sends up to udpWriteChunk frames, bufs[i][offset:] or the
// frames in pieces vecs[i], as one WriteDatagrams call (which, given no
// more than a chunk, sends them as one). On a fatal error it returns how
// many leading frames were consumed.
func (a *UDPFrames) writeChunk(bufs [][]byte, vecs [][][]byte, offset int) (int, error) {
	count := len(bufs)
	if vecs != nil {
		count = len(vecs)
	}
	a.wd, a.idx = a.wd[:0], a.idx[:0]
	for i := 0; i < count; i++ {
		var first []byte
		var rest [][]byte
		if vecs != nil {
			if len(vecs[i]) == 0 || len(vecs[i]) > MaxWritePieces {
				a.stats.droppedMalformed.Add(1)
				continue
			}
			first, rest = vecs[i][0], vecs[i][1:]
		} else {
			first = bufs[i][offset:]
		}
		j := len(a.wd)
		a.wd = append(a.wd, OutDatagram{})
		if !a.parseFrame(first, rest, &a.wd[j], a.pieces[j*MaxWritePieces:j*MaxWritePieces:(j+1)*MaxWritePieces]) {
			a.wd = a.wd[:j]
			continue
		}
		a.idx = append(a.idx, i)
	}
	n, err := a.WriteDatagrams(a.wd)
	// Keep no reference to the caller's buffers.
	clear(a.wd)
	clear(a.pieces[:len(a.wd)*MaxWritePieces])
	if err != nil && n < len(a.idx) {
		return a.idx[n], err
	}
	return count, err
}

// parseFrame reads the headers of a frame whose first piece is first (the
// rest its further pieces) into d, with d's payload pieces appended to
// pieces: exactly the UDP payload, trailing bytes cut. It counts a frame it
// rejects as dropped and returns false.
func (a *UDPFrames) parseFrame(first []byte, rest [][]byte, d *OutDatagram, pieces [][]byte) bool {
	c := &a.stats
	total := len(first)
	for _, p := range rest {
		total += len(p)
	}
	if total > MaxFrameLen(a.mtu) {
		c.droppedOversize.Add(1)
		return false
	}
	if len(first) < a.hdrLen {
		c.droppedMalformed.Add(1)
		return false
	}
	var udpOff, udpLen int // the UDP header's offset in the frame; the IP payload length
	eth := header.Ethernet(first)
	if a.is6 {
		ip := header.IPv6(first[EthernetHeaderLen:])
		if eth.Type() != etherTypeIPv6 || ip.Version() != 6 || ip.NextHeader() != ipProtoUDP {
			c.droppedMalformed.Add(1)
			return false
		}
		plen := int(ip.PayloadLength())
		if EthernetHeaderLen+ipv6HeaderLen+plen > total {
			c.droppedMalformed.Add(1)
			return false
		}
		d.TOS, d.TTL, d.Src = ip.TrafficClass(), ip.HopLimit(), ip.Src()
		d.Dst = netip.AddrPortFrom(ip.Dst(), 0)
		udpOff, udpLen = EthernetHeaderLen+ipv6HeaderLen, plen
	} else {
		ip := header.IPv4(first[EthernetHeaderLen:])
		if eth.Type() != etherTypeIPv4 || ip.Version() != 4 || ip.HeaderLen() != ipv4HeaderLen || ip.Protocol() != ipProtoUDP {
			c.droppedMalformed.Add(1)
			return false
		}
		tot := int(ip.TotalLength())
		if tot < ipv4HeaderLen+udpHeaderLen || EthernetHeaderLen+tot > total {
			c.droppedMalformed.Add(1)
			return false
		}
		if ip.FlagsFragment() != ipv4FlagDF {
			c.droppedIPv4ID.Add(1)
			return false
		}
		d.TOS, d.TTL, d.IPv4ID, d.Src = ip.TOS(), ip.TTL(), ip.ID(), ip.Src()
		d.Dst = netip.AddrPortFrom(ip.Dst(), 0)
		udpOff, udpLen = EthernetHeaderLen+ipv4HeaderLen, tot-ipv4HeaderLen
	}
	if udpLen < udpHeaderLen {
		c.droppedMalformed.Add(1)
		return false
	}
	udp := header.UDP(first[udpOff:])
	ulen := int(udp.Length())
	if ulen < udpHeaderLen || ulen > udpLen {
		c.droppedMalformed.Add(1)
		return false
	}
	d.SrcPort = udp.SrcPort()
	d.Dst = netip.AddrPortFrom(d.Dst.Addr(), udp.DstPort())
	// The payload: ulen-8 bytes from the end of the headers, across the
	// pieces; bytes after it (an Ethernet pad) are not sent.
	left := ulen - udpHeaderLen
	add := func(p []byte) {
		if left == 0 || len(p) == 0 {
			return
		}
		p = p[:min(len(p), left)]
		pieces = append(pieces, p)
		left -= len(p)
	}
	add(first[a.hdrLen:])
	for _, p := range rest {
		add(p)
	}
	d.Payload = pieces
	return true
}
