//go:build linux

package netio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/google/gopacket/pcapgo"
	"golang.org/x/sys/unix"

	"github.com/softrdma/softrdma/header"
)

// ---- frame building helpers shared by the backend tests ----

// ipFrame describes an Ethernet + IPv4/IPv6 + UDP frame for tests.
type ipFrame struct {
	dstMAC, srcMAC [6]byte
	src, dst       netip.AddrPort
	tos, ttl       uint8
	id             uint16
	flags          uint16 // IPv4 flags+fragment offset word; set DF explicitly
	payload        []byte
	udpChecksum    bool // compute the UDP checksum (else 0)
}

// build returns the frame's bytes: valid IPv4 header checksum, UDP checksum
// 0, IPv6 flow label 0.
func (tf ipFrame) build() []byte {
	be := binary.BigEndian
	var f []byte
	f = append(f, tf.dstMAC[:]...)
	f = append(f, tf.srcMAC[:]...)
	if tf.src.Addr().Is4() {
		f = be.AppendUint16(f, etherTypeIPv4)
		ip := make([]byte, ipv4HeaderLen)
		ip[0] = 0x45
		ip[1] = tf.tos
		be.PutUint16(ip[2:], uint16(ipv4HeaderLen+udpHeaderLen+len(tf.payload)))
		be.PutUint16(ip[4:], tf.id)
		be.PutUint16(ip[6:], tf.flags)
		ip[8] = tf.ttl
		ip[9] = ipProtoUDP
		s, d := tf.src.Addr().As4(), tf.dst.Addr().As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
		be.PutUint16(ip[10:], header.IPv4Checksum(ip))
		f = append(f, ip...)
	} else {
		f = be.AppendUint16(f, etherTypeIPv6)
		ip := make([]byte, ipv6HeaderLen)
		be.PutUint32(ip[0:], 6<<28|uint32(tf.tos)<<20)
		be.PutUint16(ip[4:], uint16(udpHeaderLen+len(tf.payload)))
		ip[6] = ipProtoUDP
		ip[7] = tf.ttl
		s, d := tf.src.Addr().As16(), tf.dst.Addr().As16()
		copy(ip[8:], s[:])
		copy(ip[24:], d[:])
		f = append(f, ip...)
	}
	f = be.AppendUint16(f, tf.src.Port())
	f = be.AppendUint16(f, tf.dst.Port())
	f = be.AppendUint16(f, uint16(udpHeaderLen+len(tf.payload)))
	f = be.AppendUint16(f, 0)
	f = append(f, tf.payload...)
	if tf.udpChecksum {
		udp := f[len(f)-len(tf.payload)-udpHeaderLen:]
		var sum uint32
		add := func(b []byte) {
			for i := 0; i+1 < len(b); i += 2 {
				sum += uint32(b[i])<<8 | uint32(b[i+1])
			}
			if len(b)%2 == 1 {
				sum += uint32(b[len(b)-1]) << 8
			}
		}
		add(tf.src.Addr().AsSlice())
		add(tf.dst.Addr().AsSlice())
		sum += ipProtoUDP + uint32(len(udp))
		add(udp)
		for sum > 0xffff {
			sum = sum>>16 + sum&0xffff
		}
		c := ^uint16(sum)
		if c == 0 {
			c = 0xffff
		}
		be.PutUint16(udp[6:], c)
	}
	return f
}

// roceLikePayload returns a BTH-shaped UDP payload: a 12-byte "BTH" whose
// PSN field holds seq, n bytes of pattern, a 4-byte "ICRC".
func roceLikePayload(seq, n int) []byte {
	p := make([]byte, 12+n+4)
	p[0] = 0x04 // RC SEND Only
	binary.BigEndian.PutUint16(p[2:], 0xffff)
	binary.BigEndian.PutUint32(p[4:], 0x000011)
	binary.BigEndian.PutUint32(p[8:], uint32(seq)&0xffffff)
	for i := 12; i < 12+n; i++ {
		p[i] = byte(seq + i)
	}
	binary.LittleEndian.PutUint32(p[12+n:], uint32(seq)*2654435761)
	return p
}

// rocePSN returns the sequence number roceLikePayload stored in frame's
// UDP payload starting at off.
func rocePSN(frame []byte, off int) int {
	return int(binary.BigEndian.Uint32(frame[off+8:]) & 0xffffff)
}

// random127 returns a random loopback address 127.a.b.host, so that tests
// of different processes on the same machine do not collide on ports.
func random127(a, b byte, host byte) netip.Addr {
	return netip.AddrFrom4([4]byte{127, a, b, host})
}

func randomLoopbackPair() (netip.Addr, netip.Addr) {
	a, b := byte(1+rand.IntN(250)), byte(rand.IntN(256))
	return random127(a, b, 1), random127(a, b, 2)
}

// newUDPOnFreePort retries NewUDP on random ports of ::1 (which, unlike
// 127/8, is a single address shared by every process).
func newUDPOnFreePort(t testing.TB, cfg UDPConfig, addr netip.Addr) *UDPEndpoint {
	t.Helper()
	for try := 0; try < 50; try++ {
		cfg.LocalAddr = netip.AddrPortFrom(addr, uint16(20000+rand.IntN(10000)))
		e, err := NewUDP(cfg)
		if err == nil {
			return e
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatal(err)
		}
	}
	t.Fatal("no free port")
	return nil
}

// readFrames reads from ep until want frames arrived or the deadline
// passed (then it closes ep). It may run on any goroutine.
func readFrames(ep Endpoint, want int, bufLen, offset int, deadline time.Duration) ([][]byte, error) {
	type res struct {
		frames [][]byte
		err    error
	}
	done := make(chan res, 1)
	go func() {
		var got [][]byte
		bufs := make([][]byte, ep.BatchSize())
		sizes := make([]int, len(bufs))
		for i := range bufs {
			bufs[i] = make([]byte, bufLen)
		}
		for len(got) < want {
			n, err := ep.Read(bufs, sizes, offset)
			for i := 0; i < n; i++ {
				got = append(got, bytes.Clone(bufs[i][offset:offset+sizes[i]]))
			}
			if err != nil {
				done <- res{got, fmt.Errorf("Read after %d frames: %w", len(got), err)}
				return
			}
		}
		done <- res{got, nil}
	}()
	select {
	case r := <-done:
		return r.frames, r.err
	case <-time.After(deadline):
		ep.Close()
		r := <-done
		return r.frames, fmt.Errorf("timed out with %d of %d frames", len(r.frames), want)
	}
}

// frameReader runs readFrames in the background; wait returns its frames,
// failing the test (on the test goroutine) on error.
type frameReader chan struct {
	frames [][]byte
	err    error
}

func startReader(ep Endpoint, want int, bufLen, offset int, deadline time.Duration) frameReader {
	r := make(frameReader, 1)
	go func() {
		f, err := readFrames(ep, want, bufLen, offset, deadline)
		r <- struct {
			frames [][]byte
			err    error
		}{f, err}
	}()
	return r
}

func (r frameReader) wait(t testing.TB) [][]byte {
	t.Helper()
	res := <-r
	if res.err != nil {
		t.Fatal(res.err)
	}
	return res.frames
}

// ---- UDP endpoint tests ----

type udpCase struct {
	name       string
	ipv6       bool
	noGSO      bool
	noGRO      bool
	wantGSO    bool
	wildcardTx bool // sender bound to the unspecified address
}

// udpFrames returns e as a frame endpoint with MAC addresses 0.
func udpFrames(e *UDPEndpoint) *UDPFrames { return NewUDPFrames(e, [6]byte{}, [6]byte{}) }

func udpPair(t *testing.T, c udpCase) (fa, fb *UDPFrames, macA, macB [6]byte) {
	t.Helper()
	macA = [6]byte{0x02, 0, 0, 0, 0, 0xa}
	macB = [6]byte{0x02, 0, 0, 0, 0, 0xb}
	cfgA := UDPConfig{DisableGSO: c.noGSO, DisableGRO: c.noGRO}
	cfgB := UDPConfig{DisableGSO: c.noGSO, DisableGRO: c.noGRO}
	var a, b *UDPEndpoint
	var err error
	if c.ipv6 {
		a = newUDPOnFreePort(t, cfgA, netip.IPv6Loopback())
		b = newUDPOnFreePort(t, cfgB, netip.IPv6Loopback())
	} else {
		ipA, ipB := randomLoopbackPair()
		cfgA.LocalAddr = netip.AddrPortFrom(ipA, 0)
		if c.wildcardTx {
			cfgA.LocalAddr = netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(20000+rand.IntN(10000)))
		}
		cfgB.LocalAddr = netip.AddrPortFrom(ipB, 0)
		if a, err = NewUDP(cfgA); err != nil {
			t.Fatal(err)
		}
		if b, err = NewUDP(cfgB); err != nil {
			a.Close()
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return NewUDPFrames(a, macA, macB), NewUDPFrames(b, macB, macA), macA, macB
}

func TestUDPLoopbackFramesRoundTrip(t *testing.T) {
	cases := []udpCase{
		{name: "ipv4"},
		{name: "ipv4-fallback", noGSO: true, noGRO: true},
		{name: "ipv4-wildcard-sender", wildcardTx: true},
		{name: "ipv6-gso-gro", ipv6: true, wantGSO: true},
		{name: "ipv6-fallback", ipv6: true, noGSO: true, noGRO: true},
		{name: "ipv6-gso-nogro", ipv6: true, noGRO: true, wantGSO: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b, macA, macB := udpPair(t, c)
			if c.wantGSO && !a.GSO() {
				t.Skip("kernel without UDP_SEGMENT")
			}
			if c.noGRO == b.GRO() && !c.noGRO {
				t.Logf("kernel without UDP_GRO")
			}
			srcAddr := a.LocalAddr().Addr()
			if c.wildcardTx {
				srcAddr, _ = randomLoopbackPair() // any local address will do
			}
			// Three source ports (three "QPs"); two send runs of equal
			// sizes (GSO candidates) and odd sizes in between.
			ports := []uint16{0xc000 | uint16(rand.IntN(0x3fff)), 0xc000 | uint16(rand.IntN(0x3fff)), a.LocalAddr().Port()}
			const total = 3 * 64
			var frames [][]byte
			for i := 0; i < total; i++ {
				n := 256
				if i%64 >= 40 {
					n = 1 + (i*37)%900
				}
				tf := ipFrame{
					dstMAC: macB, srcMAC: macA,
					src:     netip.AddrPortFrom(srcAddr, ports[(i/16)%len(ports)]),
					dst:     b.LocalAddr(),
					tos:     0x68, // DSCP 26 (RoCE), not ECT
					ttl:     uint8(64 + (i/32)%3),
					flags:   ipv4FlagDF,
					payload: roceLikePayload(i, n),
				}
				frames = append(frames, tf.build())
			}
			// Headroom before offset, as the RoCE layer would leave.
			const offset = 16
			bufs := make([][]byte, len(frames))
			for i, f := range frames {
				bufs[i] = append(bytes.Repeat([]byte{0xee}, offset), f...)
			}
			before := make([][]byte, len(bufs))
			for i := range bufs {
				before[i] = bytes.Clone(bufs[i])
			}
			rd := startReader(b, total, 2048, offset, 10*time.Second)
			for i := 0; i < len(bufs); i += 64 {
				n, err := a.Write(bufs[i:i+64], offset)
				if err != nil || n != 64 {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			for i := range bufs {
				if !bytes.Equal(bufs[i], before[i]) {
					t.Fatalf("Write modified frame %d", i)
				}
			}
			got := rd.wait(t)
			hdr := b.hdrLen
			// Order is kept per source port.
			last := map[uint16]int{}
			byPSN := map[int][]byte{}
			for _, g := range got {
				psn := rocePSN(g, hdr)
				sp := binary.BigEndian.Uint16(g[hdr-8:])
				if p, ok := last[sp]; ok && psn < p {
					t.Errorf("source port %#x: frame %d after %d", sp, psn, p)
				}
				last[sp] = psn
				byPSN[psn] = g
			}
			for i, f := range frames {
				g, ok := byPSN[i]
				if !ok {
					t.Errorf("frame %d missing", i)
					continue
				}
				if !bytes.Equal(g, f) {
					t.Errorf("frame %d differs:\n got %x\nwant %x", i, g[:hdr], f[:hdr])
				}
			}
			sa, sb := a.Stats(), b.Stats()
			t.Logf("sender %+v", sa)
			t.Logf("receiver %+v", sb)
			if sa.FramesSent != total || sb.FramesReceived != total {
				t.Errorf("sent %d received %d, want %d", sa.FramesSent, sb.FramesReceived, total)
			}
			if sa.SourcePortSockets != 2 {
				t.Errorf("%d source-port sockets, want 2", sa.SourcePortSockets)
			}
			if c.wantGSO && sa.GSOSends == 0 {
				t.Errorf("no GSO sends")
			}
			if (c.noGSO || !c.ipv6) && sa.GSOSends != 0 {
				t.Errorf("%d GSO sends with GSO off", sa.GSOSends)
			}
			if c.wantGSO && !c.noGRO && b.GRO() && sb.GROReceives == 0 {
				t.Errorf("no coalesced receives with GSO sender and GRO receiver")
			}
			if sa.SendCalls >= total/4 {
				t.Errorf("%d sendmmsg calls for %d frames: not batched", sa.SendCalls, total)
			}
			// The reader raced the sender: how many frames each recvmmsg
			// found depends on scheduling alone (on a loaded machine every
			// call can find one frame, the reader woken for each as the
			// sender's softirq queues it), so this round checks delivery;
			// the next, with the frames queued first, checks batching.
			if sb.RecvCalls == 0 {
				t.Errorf("no recvmmsg call for %d frames", sb.FramesReceived)
			}

			// Again with every frame queued on the receiving socket
			// before the first Read: then each recvmmsg must take a full
			// batch (or the segments of a batch of coalesced messages).
			for i := 0; i < len(bufs); i += 64 {
				if n, err := a.Write(bufs[i:i+64], offset); err != nil || n != 64 {
					t.Fatalf("second Write = %d, %v", n, err)
				}
			}
			time.Sleep(50 * time.Millisecond) // let loopback delivery finish
			again, err := readFrames(b, total, 2048, offset, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if len(again) != total {
				t.Fatalf("second round: %d frames, want %d", len(again), total)
			}
			sb2 := b.Stats()
			calls, nframes := sb2.RecvCalls-sb.RecvCalls, sb2.FramesReceived-sb.FramesReceived
			maxCalls := uint64((total + b.BatchSize() - 1) / b.BatchSize())
			if nframes != total || calls == 0 || calls > maxCalls {
				t.Errorf("second round: %d recvmmsg calls for %d queued frames, want 1..%d (batch %d)",
					calls, nframes, maxCalls, b.BatchSize())
			}
		})
	}
}

// groPair returns a plain UDP socket on ipA and an IPv4 endpoint with GRO on
// ipB (a random loopback pair), both closed when the test ends; a kernel
// without UDP_GRO skips the test.
func groPair(t *testing.T) (ipA, ipB netip.Addr, fb *UDPFrames, c *net.UDPConn) {
	t.Helper()
	ipA, ipB = randomLoopbackPair()
	b, err := NewUDP(UDPConfig{LocalAddr: netip.AddrPortFrom(ipB, 0)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if !b.GRO() {
		t.Skip("kernel without UDP_GRO")
	}
	c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ipA, 0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return ipA, ipB, udpFrames(b), c
}

// sendSegmented sends data from c to dst as one UDP_SEGMENT super-datagram
// of seg-octet segments; a kernel that refuses it skips the test.
func sendSegmented(t *testing.T, c *net.UDPConn, data []byte, seg int, dst netip.AddrPort) {
	t.Helper()
	oob := appendCmsg(make([]byte, 0, 64), unix.IPPROTO_UDP, unix.UDP_SEGMENT, binary.NativeEndian.AppendUint16(nil, uint16(seg)))
	if _, _, err := c.WriteMsgUDPAddrPort(data, oob, dst); err != nil {
		t.Skipf("UDP_SEGMENT send refused: %v", err)
	}
}

// TestUDPGROSplitsIPv4 sends one UDP_SEGMENT super-datagram from a plain
// socket to an IPv4 endpoint with GRO and checks it comes out as separate
// frames.
func TestUDPGROSplitsIPv4(t *testing.T) {
	ipA, ipB, b, c := groPair(t)
	const seg, n = 300, 7
	var data []byte
	for i := 0; i < n; i++ {
		data = append(data, roceLikePayload(i, seg-16)...)
	}
	data = append(data, roceLikePayload(n, 50)...) // a short last segment
	sendSegmented(t, c, data, seg, b.LocalAddr())
	got := startReader(b, n+1, 2048, 0, 5*time.Second).wait(t)
	for i, g := range got {
		want := seg
		if i == n {
			want = 50 + 16
		}
		if len(g)-b.hdrLen != want || rocePSN(g, b.hdrLen) != i {
			t.Errorf("frame %d: payload %d bytes psn %d", i, len(g)-b.hdrLen, rocePSN(g, b.hdrLen))
		}
		if ip := g[EthernetHeaderLen:]; netip.AddrFrom4([4]byte(ip[12:16])) != ipA || netip.AddrFrom4([4]byte(ip[16:20])) != ipB {
			t.Errorf("frame %d addresses %x", i, ip[12:20])
		}
	}
	if s := b.Stats(); s.GROReceives != 1 {
		t.Errorf("GROReceives = %d, want 1", s.GROReceives)
	}
}

// TestUDPGROPendingAcrossReads checks that coalesced segments that do not
// fit one Read's batch are returned by the next.
func TestUDPGROPendingAcrossReads(t *testing.T) {
	_, _, b, c := groPair(t)
	const seg, n = 100, 10
	var data []byte
	for i := 0; i < n; i++ {
		data = append(data, roceLikePayload(i, seg-16)...)
	}
	sendSegmented(t, c, data, seg, b.LocalAddr())
	bufs := [][]byte{make([]byte, 500), make([]byte, 500), make([]byte, 500)}
	sizes := make([]int, 3)
	next := 0
	deadline := time.Now().Add(5 * time.Second)
	defer time.AfterFunc(10*time.Second, func() { b.Close() }).Stop() // bounds the blocking Reads
	for next < n && time.Now().Before(deadline) {
		k, err := b.Read(bufs, sizes, 0)
		if err != nil {
			t.Fatal(err)
		}
		if k > 3 {
			t.Fatalf("Read returned %d > len(bufs)", k)
		}
		for i := 0; i < k; i++ {
			if psn := rocePSN(bufs[i][:sizes[i]], b.hdrLen); psn != next {
				t.Fatalf("got psn %d, want %d", psn, next)
			}
			next++
		}
	}
	if next != n {
		t.Fatalf("got %d of %d", next, n)
	}
	if k, err := b.TryRead(bufs, sizes, 0); k != 0 || err != nil {
		t.Fatalf("TryRead on empty = %d, %v", k, err)
	}
}

func TestUDPWriteDrops(t *testing.T) {
	a, b, macA, macB := udpPair(t, udpCase{name: "drops"})
	good := ipFrame{dstMAC: macB, srcMAC: macA, src: netip.AddrPortFrom(a.LocalAddr().Addr(), 0xc123),
		dst: b.LocalAddr(), ttl: 64, flags: ipv4FlagDF, payload: roceLikePayload(1, 20)}
	badID := good
	badID.id = 7
	noDF := good
	noDF.flags = 0
	wrongSrc := good
	wrongSrc.src = netip.AddrPortFrom(random127(9, 9, 9), 0xc123)
	v6 := good
	v6.src = netip.AddrPortFrom(netip.IPv6Loopback(), 0xc123)
	v6.dst = netip.AddrPortFrom(netip.IPv6Loopback(), 4791)
	arp := append(good.build()[:12], 0x08, 0x06)
	arp = append(arp, make([]byte, 28)...)
	truncated := good.build()
	truncated = truncated[:len(truncated)-5] // IP total length now exceeds the frame
	oversize := good
	oversize.payload = make([]byte, 1500)
	port0 := good // the kernel refuses destination port 0 (EINVAL)
	port0.dst = netip.AddrPortFrom(b.LocalAddr().Addr(), 0)
	frames := [][]byte{good.build(), port0.build(), badID.build(), noDF.build(), wrongSrc.build(), v6.build(), arp, truncated, oversize.build(), good.build()}
	n, err := a.Write(frames, 0)
	if n != len(frames) || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	got := startReader(b, 2, 2048, 0, 5*time.Second).wait(t)
	for _, g := range got {
		if !bytes.Equal(g, frames[0]) {
			t.Errorf("unexpected frame %x", g)
		}
	}
	s := a.Stats()
	want := UDPStats{FramesSent: 2, DroppedIPv4ID: 2, DroppedSourceAddr: 1, DroppedMalformed: 3, DroppedOversize: 1,
		DroppedSendError: 1, SourcePortSockets: 1}
	s.SendCalls = 0
	if s != want {
		t.Errorf("stats %+v\nwant  %+v", s, want)
	}
	if err := a.LastSendError(); !errors.Is(err, unix.EINVAL) {
		t.Errorf("LastSendError = %v, want EINVAL", err)
	}
	if !a.IPv4IDZero() || !b.UnknownIPv4ID() {
		t.Error("IPv4 ID policy not reported")
	}
	// A bad offset stops Write at that buffer.
	n, err = a.Write([][]byte{good.build(), good.build()[:3]}, 10)
	if n != 1 || err == nil {
		t.Errorf("Write with offset past the second buffer = %d, %v", n, err)
	}
}

func TestUDPShortBuffer(t *testing.T) {
	a, b, macA, macB := udpPair(t, udpCase{name: "short", noGRO: true})
	mk := func(seq, n int) []byte {
		return ipFrame{dstMAC: macB, srcMAC: macA, src: a.LocalAddr(), dst: b.LocalAddr(), ttl: 64,
			flags: ipv4FlagDF, payload: roceLikePayload(seq, n)}.build()
	}
	frames := [][]byte{mk(0, 10), mk(1, 1000), mk(2, 10)}
	for _, f := range frames { // one per datagram, in order
		if _, err := a.Write([][]byte{f}, 0); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond) // let all three queue up
	bufs := [][]byte{make([]byte, 200), make([]byte, 200), make([]byte, 200)}
	sizes := make([]int, 3)
	defer time.AfterFunc(10*time.Second, func() { b.Close() }).Stop() // bounds the blocking Read
	n, err := b.Read(bufs, sizes, 0)
	if !errors.Is(err, ErrShortBuffer) {
		t.Fatalf("err = %v, want ErrShortBuffer", err)
	}
	if n != 2 || !bytes.Equal(bufs[0][:sizes[0]], frames[0]) || !bytes.Equal(bufs[1][:sizes[1]], frames[2]) {
		t.Fatalf("n = %d; frames %x %x", n, bufs[0][:sizes[0]], bufs[1][:sizes[1]])
	}
	if s := b.Stats(); s.DroppedShortBuffer != 1 {
		t.Errorf("DroppedShortBuffer = %d", s.DroppedShortBuffer)
	}
}

func TestUDPCloseUnblocksRead(t *testing.T) {
	for _, gro := range []bool{false, true} {
		t.Run(fmt.Sprintf("gro=%v", gro), func(t *testing.T) {
			_, ip := randomLoopbackPair()
			u, err := NewUDP(UDPConfig{LocalAddr: netip.AddrPortFrom(ip, 0), DisableGRO: !gro})
			if err != nil {
				t.Fatal(err)
			}
			e := udpFrames(u)
			if n, err := e.TryRead([][]byte{make([]byte, 100)}, []int{0}, 0); n != 0 || err != nil {
				t.Fatalf("TryRead = %d, %v", n, err)
			}
			errc := make(chan error, 1)
			go func() {
				_, err := e.Read([][]byte{make([]byte, 100)}, []int{0}, 0)
				errc <- err
			}()
			time.Sleep(20 * time.Millisecond)
			e.Close()
			select {
			case err := <-errc:
				if !errors.Is(err, net.ErrClosed) {
					t.Fatalf("Read after Close: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Read still blocked after Close")
			}
			if _, err := e.Write([][]byte{make([]byte, 60)}, 0); !errors.Is(err, net.ErrClosed) {
				t.Errorf("Write after Close: %v", err)
			}
			if _, err := e.Read([][]byte{make([]byte, 100)}, []int{0}, 0); !errors.Is(err, net.ErrClosed) {
				t.Errorf("Read after Close: %v", err)
			}
			if err := e.Close(); err != nil {
				t.Errorf("second Close: %v", err)
			}
		})
	}
}

func TestUDPSourcePortLimit(t *testing.T) {
	ipA, ipB := randomLoopbackPair()
	u, err := NewUDP(UDPConfig{LocalAddr: netip.AddrPortFrom(ipA, 0), MaxSourcePorts: 2})
	if err != nil {
		t.Fatal(err)
	}
	a := udpFrames(u)
	defer a.Close()
	var frames [][]byte
	for i := 0; i < 4; i++ {
		frames = append(frames, ipFrame{src: netip.AddrPortFrom(ipA, uint16(0xc000+i)),
			dst: netip.AddrPortFrom(ipB, 4791), ttl: 64, flags: ipv4FlagDF, payload: roceLikePayload(i, 8)}.build())
	}
	if _, err := a.Write(frames, 0); err != nil {
		t.Fatal(err)
	}
	if s := a.Stats(); s.SourcePortSockets != 2 || s.DroppedSourcePort != 2 || s.FramesSent != 2 {
		t.Errorf("stats %+v", s)
	}
}

func TestUDPSocketBuffers(t *testing.T) {
	_, ip := randomLoopbackPair()
	const want = 1 << 20
	e, err := NewUDP(UDPConfig{LocalAddr: netip.AddrPortFrom(ip, 0), SocketBuffer: want})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	rcv, snd, err := e.SocketBuffers()
	if err != nil {
		t.Fatal(err)
	}
	// Linux reports twice the requested size; without CAP_NET_ADMIN the
	// request is capped by net.core.rmem_max/wmem_max.
	limit := want
	if unix.Geteuid() != 0 {
		limit = min(want, 208*1024)
	}
	if rcv < limit || snd < limit {
		t.Errorf("buffers %d/%d, want at least %d", rcv, snd, limit)
	}
}

func TestParseRxControlMalformed(t *testing.T) {
	var m rxMeta
	for _, b := range [][]byte{nil, {1, 2, 3}, bytes.Repeat([]byte{0xff}, 40), make([]byte, 16)} {
		parseRxControl(b, &m) // must not panic
	}
}

func TestUDPWriteAllocs(t *testing.T) {
	a, b, macA, macB := udpPair(t, udpCase{name: "allocs", ipv6: false})
	_ = b
	frames := make([][]byte, 64)
	for i := range frames {
		frames[i] = ipFrame{dstMAC: macB, srcMAC: macA, src: netip.AddrPortFrom(a.LocalAddr().Addr(), 0xc001),
			dst: b.LocalAddr(), ttl: 64, flags: ipv4FlagDF, payload: roceLikePayload(i, 64)}.build()
	}
	a.Write(frames, 0) // creates the source-port socket
	allocs := testing.AllocsPerRun(20, func() { a.Write(frames, 0) })
	if allocs > 4 {
		t.Errorf("%v allocations per 64-frame Write", allocs)
	}
}

// ---- benchmarks ----

// BenchmarkUDPThroughput moves b.N RoCE-sized frames (1040-byte UDP
// payloads) between two UDP endpoints on loopback, then as many payloads
// through a plain net.UDPConn WriteTo/ReadFrom loop in the same run, and
// reports the endpoint's rate relative to the plain loop (x-plain > 1:
// faster). Both paths keep at most benchWindow frames in flight, so neither
// loses frames to a full socket buffer.
func BenchmarkUDPThroughput(b *testing.B) {
	for _, c := range []udpCase{
		{name: "ipv4"},
		{name: "ipv4-nogro", noGRO: true},
		{name: "ipv6-gso-gro", ipv6: true},
		{name: "ipv6-nogso-nogro", ipv6: true, noGSO: true, noGRO: true},
	} {
		b.Run(c.name, func(b *testing.B) {
			const payload = 1024 + 16
			ipA, ipB := randomLoopbackPair()
			mk := func(addr netip.Addr) *UDPFrames {
				cfg := UDPConfig{DisableGSO: c.noGSO, DisableGRO: c.noGRO}
				if c.ipv6 {
					return udpFrames(newUDPOnFreePort(b, cfg, addr))
				}
				cfg.LocalAddr = netip.AddrPortFrom(addr, 0)
				e, err := NewUDP(cfg)
				if err != nil {
					b.Fatal(err)
				}
				return udpFrames(e)
			}
			if c.ipv6 {
				ipA, ipB = netip.IPv6Loopback(), netip.IPv6Loopback()
			}
			a, r := mk(ipA), mk(ipB)
			defer a.Close()
			defer r.Close()
			batch := a.BatchSize()
			frames := make([][]byte, batch)
			for i := range frames {
				frames[i] = ipFrame{src: netip.AddrPortFrom(ipA, 0xc001), dst: r.LocalAddr(), ttl: 64,
					flags: ipv4FlagDF, payload: roceLikePayload(i, payload-16)}.build()
			}
			rbufs := make([][]byte, batch)
			for i := range rbufs {
				rbufs[i] = make([]byte, 2048)
			}
			sizes := make([]int, batch)

			pa, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ipA, 0)))
			if err != nil {
				b.Fatal(err)
			}
			defer pa.Close()
			pr, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ipB, 0)))
			if err != nil {
				b.Fatal(err)
			}
			defer pr.Close()
			pr.SetReadBuffer(DefaultUDPSocketBuffer)
			pa.SetWriteBuffer(DefaultUDPSocketBuffer)
			to := pr.LocalAddr()
			pl := frames[0][a.hdrLen:]
			pbuf := make([]byte, 2048)

			b.SetBytes(payload)
			b.ResetTimer()
			got, epTime := benchPath(b.N, batch,
				func(k int) { a.Write(frames[:k], 0) },
				func() (int, error) { return r.Read(rbufs, sizes, 0) },
				func() { r.Close() })
			b.StopTimer()
			gotPlain, plainTime := benchPath(b.N, batch,
				func(k int) {
					for i := 0; i < k; i++ {
						pa.WriteTo(pl, to)
					}
				},
				func() (int, error) {
					_, _, err := pr.ReadFrom(pbuf)
					if err != nil {
						return 0, err
					}
					return 1, nil
				},
				func() { pr.SetReadDeadline(time.Now()) })
			epRate := float64(got) / epTime.Seconds()
			plainRate := float64(gotPlain) / plainTime.Seconds()
			b.ReportMetric(epRate, "frames/s")
			b.ReportMetric(plainRate, "plain-frames/s")
			if plainRate > 0 {
				b.ReportMetric(epRate/plainRate, "x-plain")
			}
			b.ReportMetric(float64(b.N-got)/float64(b.N), "loss")
		})
	}
}

// benchWindow bounds the frames in flight in benchPath: well within the
// socket buffers.
const benchWindow = 1024

// benchPath sends n frames in batches while recv (blocking) counts them on
// another goroutine, keeping at most benchWindow in flight. When the
// receiver stalls for 100 ms (a lost frame), stop unblocks it. It returns
// the frames received and the time until the last one arrived.
func benchPath(n, batch int, send func(k int), recv func() (int, error), stop func()) (int, time.Duration) {
	var got atomic.Int64
	var last atomic.Int64
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for got.Load() < int64(n) {
			k, err := recv()
			if k > 0 {
				got.Add(int64(k))
				last.Store(int64(time.Since(start)))
			}
			if err != nil {
				return
			}
		}
	}()
	forgiven := int64(0) // frames given up as lost, for the window only
	for sent := 0; sent < n; {
		if int64(sent)-got.Load()-forgiven > benchWindow {
			runtime.Gosched()
			if since := time.Since(start); since > 100*time.Millisecond && time.Duration(last.Load()) < since-100*time.Millisecond {
				forgiven = int64(sent) - got.Load() // stalled: frames were lost
			}
			continue
		}
		k := min(batch, n-sent)
		send(k)
		sent += k
	}
	for {
		select {
		case <-done:
			return int(min(got.Load(), int64(n))), time.Duration(last.Load())
		case <-time.After(100 * time.Millisecond):
			if time.Since(start)-time.Duration(last.Load()) >= 100*time.Millisecond {
				stop()
				<-done
				return int(min(got.Load(), int64(n))), time.Duration(last.Load())
			}
		}
	}
}

// gsoRefuser stands for a kernel or device that cannot segment: it fails
// every message with a UDP_SEGMENT control message with EIO, as
// udp_send_skb does.
type gsoRefuser struct {
	mmsgConn
	refused int
}

// segmented reports whether a message asks for UDP_SEGMENT.
func segmented(h *unix.Msghdr) bool {
	if h.Control == nil {
		return false
	}
	b := unsafe.Slice(h.Control, h.Controllen)
	for len(b) >= unix.SizeofCmsghdr {
		c, _, rest, err := unix.ParseOneSocketControlMessage(b)
		if err != nil {
			return false
		}
		if c.Level == unix.IPPROTO_UDP && c.Type == unix.UDP_SEGMENT {
			return true
		}
		b = rest
	}
	return false
}

func (g *gsoRefuser) sendmmsg(ms []unix.Mmsghdr) (int, error) {
	for i := range ms {
		if segmented(&ms[i].Hdr) {
			if i > 0 {
				return g.mmsgConn.sendmmsg(ms[:i])
			}
			g.refused++
			return 0, unix.EIO
		}
	}
	return g.mmsgConn.sendmmsg(ms)
}

func TestUDPGSOFallbackOnEIO(t *testing.T) {
	a, b, macA, macB := udpPair(t, udpCase{name: "eio", ipv6: true})
	if !a.GSO() {
		t.Skip("kernel without UDP_SEGMENT")
	}
	const port = 0xc0aa
	mk := func(seq int) []byte {
		return ipFrame{dstMAC: macB, srcMAC: macA, src: netip.AddrPortFrom(a.LocalAddr().Addr(), port),
			dst: b.LocalAddr(), ttl: 64, payload: roceLikePayload(seq, 200)}.build()
	}
	rd := startReader(b, 1+32, 2048, 0, 5*time.Second)
	if _, err := a.Write([][]byte{mk(0)}, 0); err != nil { // opens the socket
		t.Fatal(err)
	}
	a.sockMu.Lock()
	ref := &gsoRefuser{mmsgConn: a.socks[port].s.mm}
	a.socks[port].s.mm = ref
	a.sockMu.Unlock()
	var frames [][]byte
	for i := 1; i <= 32; i++ {
		frames = append(frames, mk(i))
	}
	if n, err := a.Write(frames, 0); n != 32 || err != nil {
		t.Fatalf("Write = %d, %v", n, err)
	}
	got := rd.wait(t)
	for i, g := range got {
		if rocePSN(g, b.hdrLen) != i {
			t.Fatalf("frame %d has psn %d", i, rocePSN(g, b.hdrLen))
		}
	}
	if ref.refused != 1 || a.GSO() {
		t.Errorf("refused %d GSO sends; GSO still on: %v", ref.refused, a.GSO())
	}
	if s := a.Stats(); s.FramesSent != 33 || s.DroppedSendError != 0 || s.GSOSends != 0 {
		t.Errorf("stats %+v", s)
	}
}

// ---- fuzzing ----

// captureFrames returns the frames of a reference capture in
// testdata/captures.
func captureFrames(tb testing.TB, name string) [][]byte {
	tb.Helper()
	f, err := os.Open("../testdata/captures/" + name)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		tb.Fatal(err)
	}
	var frames [][]byte
	for {
		data, _, err := r.ReadPacketData()
		if err != nil {
			return frames
		}
		frames = append(frames, data)
	}
}

// FuzzParseRxControl checks that arbitrary control-message bytes never
// upset the parser, and that well-formed ones read back.
func FuzzParseRxControl(f *testing.F) {
	f.Add([]byte{}, byte(64), byte(0x68), uint16(1200), []byte{10, 0, 0, 2})
	f.Add(bytes.Repeat([]byte{0xff}, 64), byte(1), byte(0), uint16(0), []byte{127, 0, 0, 1})
	f.Fuzz(func(t *testing.T, raw []byte, ttl, tos byte, gso uint16, dst []byte) {
		var m rxMeta
		parseRxControl(raw, &m)
		if len(dst) != 4 {
			return
		}
		b := make([]byte, 0, udpOOBLen)
		pi := make([]byte, 12)
		copy(pi[8:], dst)
		b = appendCmsg(b, unix.IPPROTO_IP, unix.IP_PKTINFO, pi)
		b = appendCmsgInt(b, unix.IPPROTO_IP, unix.IP_TTL, int32(ttl))
		b = appendCmsg(b, unix.IPPROTO_IP, unix.IP_TOS, []byte{tos})
		b = appendCmsgInt(b, unix.IPPROTO_UDP, unix.UDP_GRO, int32(gso))
		m = rxMeta{}
		parseRxControl(b, &m)
		if !m.haveDst || !bytes.Equal(m.dst[:4], dst) || m.ttl != ttl || m.tos != tos || m.gsoSize != int(gso) {
			t.Fatalf("parsed %+v from ttl %d tos %d gso %d dst %v", m, ttl, tos, gso, dst)
		}
	})
}
