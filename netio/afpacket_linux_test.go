//go:build linux

package netio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/softrdma/softrdma/netio/netnstest"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/softrdma/softrdma/header"
)

// roceV1Frame returns an Ethernet + GRH + BTH-shaped frame (Ethertype
// 0x8915).
func roceV1Frame(dst, src net.HardwareAddr, seq, n int) []byte {
	f := append(append([]byte{}, dst...), src...)
	f = binary.BigEndian.AppendUint16(f, etherTypeRoCEv1)
	grh := make([]byte, 40)
	grh[0] = 0x60
	payload := roceLikePayload(seq, n)
	binary.BigEndian.PutUint16(grh[4:], uint16(len(payload)))
	grh[6] = 0x1b // next header: IBA transport
	grh[7] = 64
	grh[8], grh[9] = 0xfe, 0x80
	grh[24], grh[25] = 0xfe, 0x80
	return append(append(f, grh...), payload...)
}

func macOf(b net.HardwareAddr) [6]byte { return [6]byte(b) }

func TestRoCEFilter(t *testing.T) {
	dst, src := net.HardwareAddr{2, 0, 0, 0, 0, 2}, net.HardwareAddr{2, 0, 0, 0, 0, 1}
	v4 := func(port uint16, mod func([]byte)) []byte {
		f := ipFrame{dstMAC: macOf(dst), srcMAC: macOf(src),
			src: netip.MustParseAddrPort("10.0.0.1:49153"), dst: netip.AddrPortFrom(netip.MustParseAddr("10.0.0.2"), port),
			ttl: 64, flags: ipv4FlagDF, payload: roceLikePayload(1, 8)}.build()
		if mod != nil {
			mod(f)
		}
		return f
	}
	v6 := func(port uint16, mod func([]byte)) []byte {
		f := ipFrame{dstMAC: macOf(dst), srcMAC: macOf(src),
			src: netip.MustParseAddrPort("[fd00::1]:49153"), dst: netip.AddrPortFrom(netip.MustParseAddr("fd00::2"), port),
			ttl: 64, payload: roceLikePayload(1, 8)}.build()
		if mod != nil {
			mod(f)
		}
		return f
	}
	// IPv4 with 4 bytes of options: the UDP header moves.
	withOptions := func() []byte {
		f := v4(RoCEv2Port, nil)
		ip := append([]byte{}, f[14:34]...)
		ip[0] = 0x46
		out := append(append(append([]byte{}, f[:14]...), ip...), 1, 1, 1, 0)
		return append(out, f[34:]...)
	}
	arp := append(append(append([]byte{}, dst...), src...), 0x08, 0x06)
	arp = append(arp, make([]byte, 28)...)
	tests := []struct {
		name   string
		frame  []byte
		port   uint16
		accept bool
	}{
		{"rocev1", roceV1Frame(dst, src, 1, 8), RoCEv2Port, true},
		{"rocev2 ipv4", v4(RoCEv2Port, nil), RoCEv2Port, true},
		{"rocev2 ipv4 options", withOptions(), RoCEv2Port, true},
		{"rocev2 ipv4 first fragment", v4(RoCEv2Port, func(f []byte) { f[20] |= 0x20 }), RoCEv2Port, true},
		{"ipv4 later fragment", v4(RoCEv2Port, func(f []byte) { f[21] = 1 }), RoCEv2Port, false},
		{"ipv4 udp other port", v4(4792, nil), RoCEv2Port, false},
		{"ipv4 udp source port 4791", v4(4792, func(f []byte) { binary.BigEndian.PutUint16(f[34:], RoCEv2Port) }), RoCEv2Port, false},
		{"ipv4 tcp to 4791", v4(RoCEv2Port, func(f []byte) { f[23] = 6 }), RoCEv2Port, false},
		{"rocev2 ipv6", v6(RoCEv2Port, nil), RoCEv2Port, true},
		{"ipv6 udp other port", v6(9, nil), RoCEv2Port, false},
		{"ipv6 hop-by-hop first", v6(RoCEv2Port, func(f []byte) { f[20] = 0 }), RoCEv2Port, false},
		{"custom port", v4(5000, nil), 5000, true},
		{"custom port rejects 4791", v4(RoCEv2Port, nil), 5000, false},
		{"arp", arp, RoCEv2Port, false},
		{"vlan", append(append(append([]byte{}, dst...), src...), 0x81, 0, 0, 1, 0x89, 0x15), RoCEv2Port, false},
		{"truncated ipv4", v4(RoCEv2Port, nil)[:30], RoCEv2Port, false},
		{"truncated ipv6", v6(RoCEv2Port, nil)[:50], RoCEv2Port, false},
		{"empty", nil, RoCEv2Port, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vm, err := bpf.NewVM(RoCEFilter(tt.port))
			if err != nil {
				t.Fatal(err)
			}
			n, err := vm.Run(tt.frame)
			if err != nil {
				t.Fatal(err)
			}
			if got := n > 0; got != tt.accept {
				t.Errorf("accept = %v (keep %d), want %v", got, n, tt.accept)
			}
			if tt.accept && n < len(tt.frame) {
				t.Errorf("keeps %d of %d bytes", n, len(tt.frame))
			}
		})
	}
	if _, err := bpf.Assemble(RoCEFilter(RoCEv2Port)); err != nil {
		t.Fatal(err)
	}
}

// packetPair opens PacketEndpoints on both ends of a fresh veth pair.
func packetPair(t *testing.T, cfg PacketConfig) (*netnstest.Pair, *PacketEndpoint, *PacketEndpoint) {
	t.Helper()
	p := netnstest.NewPair(t, netnstest.PairConfig{})
	open := func(s netnstest.Side) *PacketEndpoint {
		var e *PacketEndpoint
		s.NS.MustDo(t, func() (err error) {
			c := cfg
			c.Interface = s.Link
			e, err = NewPacket(c)
			return err
		})
		t.Cleanup(func() { e.Close() })
		return e
	}
	return p, open(p.A), open(p.B)
}

// noise returns frames the filter must reject: ARP, UDP to other ports,
// TCP to 4791, a non-IP Ethertype.
func noise(p *netnstest.Pair, from, to netnstest.Side) [][]byte {
	d, s := macOf(to.MAC), macOf(from.MAC)
	arp := append(append(append([]byte{}, to.MAC...), from.MAC...), 0x08, 0x06)
	arp = append(arp, 0, 1, 8, 0, 6, 4, 0, 1) // request
	arp = append(arp, from.MAC...)
	arp = append(arp, 10, 250, 250, 1)
	arp = append(arp, 0, 0, 0, 0, 0, 0)
	arp = append(arp, 10, 250, 250, 2) // nobody's address: no reply
	other := ipFrame{dstMAC: d, srcMAC: s, src: netip.AddrPortFrom(from.IPv4.Addr(), 5555),
		dst: netip.AddrPortFrom(to.IPv4.Addr(), 4792), ttl: 64, flags: ipv4FlagDF, payload: []byte("not roce")}.build()
	other6 := ipFrame{dstMAC: d, srcMAC: s, src: netip.AddrPortFrom(from.IPv6.Addr(), 5555),
		dst: netip.AddrPortFrom(to.IPv6.Addr(), 4790), ttl: 64, payload: []byte("not roce")}.build()
	tcp := append([]byte{}, other...)
	tcp[23] = 6
	binary.BigEndian.PutUint16(tcp[36:], RoCEv2Port)
	lldp := append(append(append([]byte{}, to.MAC...), from.MAC...), 0x88, 0xcc, 0, 0)
	return [][]byte{arp, other, other6, tcp, lldp}
}

// roceFrames returns n RoCE frames from one side to the other, cycling
// through RoCEv2/IPv4, RoCEv1 and RoCEv2/IPv6; seq numbers start at base.
func roceFrames(from, to netnstest.Side, base, n int) [][]byte {
	var out [][]byte
	for i := 0; i < n; i++ {
		seq := base + i
		size := 16 + (seq*53)%1200
		switch i % 3 {
		case 0:
			out = append(out, ipFrame{dstMAC: macOf(to.MAC), srcMAC: macOf(from.MAC),
				src: netip.AddrPortFrom(from.IPv4.Addr(), 0xc000|uint16(seq&0x3fff)), dst: netip.AddrPortFrom(to.IPv4.Addr(), RoCEv2Port),
				tos: 0x68, ttl: 64, flags: ipv4FlagDF, payload: roceLikePayload(seq, size)}.build())
		case 1:
			out = append(out, roceV1Frame(to.MAC, from.MAC, seq, size))
		case 2:
			out = append(out, ipFrame{dstMAC: macOf(to.MAC), srcMAC: macOf(from.MAC),
				src: netip.AddrPortFrom(from.IPv6.Addr(), 0xc000|uint16(seq&0x3fff)), dst: netip.AddrPortFrom(to.IPv6.Addr(), RoCEv2Port),
				ttl: 64, payload: roceLikePayload(seq, size)}.build())
		}
	}
	return out
}

func TestPacketExchange(t *testing.T) {
	p, a, b := packetPair(t, PacketConfig{BlockSize: 1 << 16, BlockCount: 8})
	if a.HardwareAddr().String() != p.A.MAC.String() || a.MTU() != p.A.MTU {
		t.Fatalf("endpoint reports %v/%d, link is %v/%d", a.HardwareAddr(), a.MTU(), p.A.MAC, p.A.MTU)
	}
	const n = 192 // 64 of each kind, per direction
	type dir struct {
		name     string
		tx, rx   *PacketEndpoint
		from, to netnstest.Side
		base     int
	}
	dirs := []dir{{"a->b", a, b, p.A, p.B, 0}, {"b->a", b, a, p.B, p.A, 1000}}
	// A witness socket without filter in B shows that the noise does
	// arrive, so that it is the filter that keeps it out.
	var witness int
	p.B.NS.MustDo(t, func() (err error) {
		witness, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		setSocketBuffer(witness, unix.SO_RCVBUF, unix.SO_RCVBUFFORCE, 8<<20)
		return unix.Bind(witness, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: p.B.Index})
	})
	defer unix.Close(witness)
	results := make([]frameReader, len(dirs))
	for i, d := range dirs {
		results[i] = startReader(d.rx, n, 2048, 8, 10*time.Second)
	}
	want := make([][][]byte, len(dirs))
	for i, d := range dirs {
		frames := roceFrames(d.from, d.to, d.base, n)
		want[i] = frames
		junk := noise(p, d.from, d.to)
		// Interleave the noise with the RoCE frames, in batches of 64.
		var all [][]byte
		for j, f := range frames {
			all = append(all, f)
			if j%8 == 0 {
				all = append(all, junk[j/8%len(junk)])
			}
		}
		// Headroom before offset must survive.
		const offset = 8
		bufs := make([][]byte, len(all))
		for j, f := range all {
			bufs[j] = append(make([]byte, offset), f...)
		}
		for j := 0; j < len(bufs); j += 64 {
			k, err := d.tx.Write(bufs[j:min(j+64, len(bufs))], offset)
			if err != nil || k != min(64, len(bufs)-j) {
				t.Fatalf("%s: Write = %d, %v", d.name, k, err)
			}
		}
	}
	for i, d := range dirs {
		got := results[i].wait(t)
		for j := range want[i] {
			if !bytes.Equal(got[j], want[i][j]) {
				t.Fatalf("%s: frame %d:\n got %x\nwant %x", d.name, j, got[j][:min(60, len(got[j]))], want[i][j][:60])
			}
		}
	}
	// Nothing else gets through: the noise, the kernels' answers (ICMP,
	// ARP) and our own outgoing frames are all filtered.
	time.Sleep(20 * time.Millisecond)
	buf := [][]byte{make([]byte, 2048)}
	for _, d := range dirs {
		if k, err := d.rx.TryRead(buf, []int{0}, 0); k != 0 || err != nil {
			t.Errorf("%s: extra frame %x (%v)", d.name, buf[0][:60], err)
		}
		s := d.rx.Stats()
		t.Logf("%s receiver: %+v", d.name, s)
		if s.KernelPackets != n || s.FramesReceived != n || s.KernelDrops != 0 {
			t.Errorf("%s: kernel passed %d frames (dropped %d), endpoint read %d, want %d", d.name, s.KernelPackets, s.KernelDrops, s.FramesReceived, n)
		}
		if s.DroppedOutgoing != 0 {
			t.Errorf("%s: %d outgoing frames reached the ring", d.name, s.DroppedOutgoing)
		}
		if ts := d.tx.Stats(); ts.FramesSent != uint64(n+n/8) || ts.SendCalls > 8 {
			t.Errorf("%s: sent %d frames in %d calls", d.name, ts.FramesSent, ts.SendCalls)
		}
	}
	lldp, arp := 0, 0
	wbuf := make([]byte, 4096)
	for {
		k, _, err := unix.Recvfrom(witness, wbuf, 0)
		if err != nil {
			break
		}
		if k >= 14 {
			switch binary.BigEndian.Uint16(wbuf[12:]) {
			case 0x88cc:
				lldp++
			case etherTypeARP:
				arp++
			}
		}
	}
	if lldp < 4 || arp < 5 {
		t.Errorf("witness saw %d LLDP and %d ARP frames, want at least 4 and 5", lldp, arp)
	}
}

func TestPacketCloseUnblocksRead(t *testing.T) {
	_, a, _ := packetPair(t, PacketConfig{})
	errc := make(chan error, 1)
	go func() {
		_, err := a.Read([][]byte{make([]byte, 2048)}, []int{0}, 0)
		errc <- err
	}()
	time.Sleep(30 * time.Millisecond)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Read after Close = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Read still blocked after Close")
	}
	if _, err := a.Write([][]byte{make([]byte, 60)}, 0); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Write after Close = %v", err)
	}
	if _, err := a.TryRead([][]byte{make([]byte, 60)}, []int{0}, 0); !errors.Is(err, net.ErrClosed) {
		t.Errorf("TryRead after Close = %v", err)
	}
}

func TestPacketShortBufferAndOversize(t *testing.T) {
	p, a, b := packetPair(t, PacketConfig{})
	frames := roceFrames(p.A, p.B, 0, 3) // sizes 16, 69, 122 bytes of payload
	big := make([]byte, MaxFrameLen(a.MTU())+1)
	if k, err := a.Write([][]byte{frames[0], big, {}, frames[1], frames[2]}, 0); k != 5 || err != nil {
		t.Fatalf("Write = %d, %v", k, err)
	}
	if s := a.Stats(); s.DroppedOversize != 2 || s.FramesSent != 3 {
		t.Errorf("sender stats %+v", s)
	}
	// A buffer that fits the first frame only.
	small := len(frames[0])
	bufs := [][]byte{make([]byte, small), make([]byte, small), make([]byte, small)}
	sizes := make([]int, 3)
	deadline := time.Now().Add(5 * time.Second)
	var got int
	var sawShort bool
	for got+int(b.Stats().DroppedShortBuffer) < 3 && time.Now().Before(deadline) {
		k, err := b.TryRead(bufs, sizes, 0)
		got += k
		if errors.Is(err, ErrShortBuffer) {
			sawShort = true
		} else if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	if got != 1 || !sawShort || b.Stats().DroppedShortBuffer != 2 {
		t.Errorf("read %d, short-buffer error %v, stats %+v", got, sawShort, b.Stats())
	}
}

// TestUDPEndpointOnTheWire puts a UDPEndpoint in one namespace and a
// PacketEndpoint on the far end of the veth, and checks in both directions
// that what the UDP endpoint's user sees as frames is what is on the wire:
// in particular that the kernel sends IPv4 Identification 0 with DF, so the
// RoCE ICRC computed over the frame holds on the wire.
func TestUDPEndpointOnTheWire(t *testing.T) {
	p := netnstest.NewPair(t, netnstest.PairConfig{})
	var raw *PacketEndpoint
	p.B.NS.MustDo(t, func() (err error) {
		raw, err = NewPacket(PacketConfig{Interface: p.B.Link})
		return err
	})
	defer raw.Close()
	for _, fam := range []struct {
		name   string
		a, b   netip.Addr
		hdrLen int
	}{
		{"ipv4", p.A.IPv4.Addr(), p.B.IPv4.Addr(), 42},
		{"ipv6", p.A.IPv6.Addr(), p.B.IPv6.Addr(), 62},
	} {
		t.Run(fam.name, func(t *testing.T) {
			var u *UDPFrames
			p.A.NS.MustDo(t, func() error {
				// GSO off: the veth would carry unsegmented super-frames
				// to the packet socket.
				e, err := NewUDP(UDPConfig{LocalAddr: netip.AddrPortFrom(fam.a, 0), DisableGSO: true})
				if err == nil {
					u = NewUDPFrames(e, [6]byte(p.A.MAC), [6]byte(p.B.MAC))
				}
				return err
			})
			defer u.Close()
			const n = 64
			var sent [][]byte
			for i := 0; i < n; i++ {
				sent = append(sent, ipFrame{dstMAC: macOf(p.B.MAC), srcMAC: macOf(p.A.MAC),
					src: netip.AddrPortFrom(fam.a, 0xc000|uint16(i%3)), dst: netip.AddrPortFrom(fam.b, RoCEv2Port),
					tos: 0x6a, ttl: 64, flags: ipv4FlagDF, payload: roceLikePayload(i, 100+i)}.build())
			}
			rc := startReader(raw, n, 2048, 0, 10*time.Second)
			// The kernel resolves the peer's MAC first; ARP takes a moment
			// and may drop frames queued meanwhile, so prime it.
			if _, err := u.Write(sent[:1], 0); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
			if _, err := u.Write(sent[1:], 0); err != nil {
				t.Fatal(err)
			}
			for _, g := range rc.wait(t) {
				i := rocePSN(g, fam.hdrLen)
				w := sent[i]
				// All but the UDP checksum (the kernel's) must match.
				ck := fam.hdrLen - 2
				gg, ww := bytes.Clone(g), bytes.Clone(w)
				gg[ck], gg[ck+1], ww[ck], ww[ck+1] = 0, 0, 0, 0
				if fam.hdrLen == 62 { // and the IPv6 flow label (the kernel's automatic one)
					gg[15] &^= 0x0f
					gg[16], gg[17] = 0, 0
				}
				if !bytes.Equal(gg, ww) {
					t.Fatalf("frame %d on the wire differs:\n got %x\nwant %x", i, g[:fam.hdrLen], w[:fam.hdrLen])
				}
			}

			// And back: raw frames into the UDP endpoint, with UDP
			// checksum 0 as rxe sends (for IPv6 too).
			var back [][]byte
			for i := 0; i < n; i++ {
				back = append(back, ipFrame{dstMAC: macOf(p.A.MAC), srcMAC: macOf(p.B.MAC),
					src: netip.AddrPortFrom(fam.b, 0xc000|uint16(i)), dst: u.LocalAddr(),
					tos: 0x68, ttl: 64, flags: ipv4FlagDF, payload: roceLikePayload(i, 50+i)}.build())
			}
			uc := startReader(u, n, 2048, 0, 10*time.Second)
			if _, err := raw.Write(back, 0); err != nil {
				t.Fatal(err)
			}
			for i, g := range uc.wait(t) {
				if !bytes.Equal(g, back[i]) {
					t.Fatalf("frame %d from the wire:\n got %x\nwant %x", i, g[:fam.hdrLen], back[i][:fam.hdrLen])
				}
			}
		})
	}
}

func TestPacketNoSuchInterface(t *testing.T) {
	if _, err := NewPacket(PacketConfig{Interface: "softrdma-none0"}); err == nil {
		t.Fatal("NewPacket on a missing interface succeeded")
	}
	if os.Geteuid() == 0 {
		if _, err := NewPacket(PacketConfig{Interface: "lo", BlockSize: 1000}); err == nil {
			t.Fatal("odd block size accepted")
		}
	}
}

// TestPacketWriteVectors sends RoCE frames cut into pieces (and frames the
// endpoint must refuse) with WriteVectors: the frames arrive whole, the
// refused ones are counted, and a steady state allocates nothing.
func TestPacketWriteVectors(t *testing.T) {
	p, a, b := packetPair(t, PacketConfig{})
	frames := roceFrames(p.A, p.B, 0, 48)
	var vecs [][][]byte
	for _, f := range frames {
		cut := min(len(f), 54)
		vecs = append(vecs, [][]byte{f[:cut], f[cut : cut+(len(f)-cut)/2], nil, f[cut+(len(f)-cut)/2:]})
	}
	bad := [][][]byte{make([][]byte, MaxWritePieces+1), {nil}, {make([]byte, MaxFrameLen(a.MTU())+1)}}
	for i := range bad[0] {
		bad[0][i] = frames[0][:1]
	}
	rd := startReader(b, len(frames), 2048, 0, 10*time.Second)
	if k, err := a.WriteVectors(append(vecs, bad...)); k != len(vecs)+len(bad) || err != nil {
		t.Fatalf("WriteVectors = %d, %v", k, err)
	}
	got := rd.wait(t)
	for i := range frames {
		if !bytes.Equal(got[i], frames[i]) {
			t.Fatalf("frame %d:\n got %x\nwant %x", i, got[i][:min(60, len(got[i]))], frames[i][:60])
		}
	}
	if s := a.Stats(); s.DroppedOversize != uint64(len(bad)) || s.FramesSent != uint64(len(frames)) {
		t.Errorf("stats %+v", s)
	}
	if n := testing.AllocsPerRun(10, func() { a.WriteVectors(vecs[:8]) }); n != 0 {
		t.Errorf("%v allocations per WriteVectors", n)
	}
}

// TestPacketRingHandsOverEachFrame: the receive ring is TPACKET_V2, whose
// slots the kernel hands over one frame at a time, not TPACKET_V3, whose
// blocks wait to fill or for a retire timeout of 1 ms at least (the latency
// of every light exchange before: 500 us one way in softrdma bench's
// afpacket rows); and its slots hold a frame of the link's MTU.
func TestPacketRingHandsOverEachFrame(t *testing.T) {
	_, a, _ := packetPair(t, PacketConfig{})
	var v int
	var err error
	a.rc.Control(func(fd uintptr) { v, err = unix.GetsockoptInt(int(fd), unix.SOL_PACKET, unix.PACKET_VERSION) })
	if err != nil || v != unix.TPACKET_V2 {
		t.Fatalf("PACKET_VERSION %d (%v), want TPACKET_V2 (%d)", v, err, unix.TPACKET_V2)
	}
	for _, c := range []struct{ mtu, slot int }{{1500, 2048}, {9000, 16384}, {65535, 131072}} {
		if got := packetSlotSize(c.mtu); got != c.slot || got < MaxFrameLen(c.mtu)+tpacketAlign(unix.SizeofTpacket2Hdr) {
			t.Errorf("MTU %d: slot %d, want %d", c.mtu, got, c.slot)
		}
	}
}

// TestPacketReadFrames reads frames in place from the ring, in small
// batches mixed with copying Reads: every frame arrives once and in order,
// the in-place frames stay intact until the next read, and the ring's
// slots all go back to the kernel (a long run does not stall).
func TestPacketReadFrames(t *testing.T) {
	p, a, b := packetPair(t, PacketConfig{BlockSize: 1 << 16, BlockCount: 4})
	const n = 600 // many more frames than the ring's 128 slots hold
	want := roceFrames(p.A, p.B, 0, n)
	go func() {
		for i := 0; i < n; i += 32 {
			a.Write(want[i:min(i+32, n)], 0)
			time.Sleep(time.Millisecond) // the ring is small: let the reader keep up
		}
	}()
	frames := make([][]byte, 7)
	bufs := [][]byte{make([]byte, 2048), make([]byte, 2048)}
	sizes := []int{0, 0}
	var got [][]byte
	deadline := time.Now().Add(10 * time.Second)
	for len(got)+int(b.Stats().KernelDrops) < n && time.Now().Before(deadline) {
		if len(got)%3 == 0 {
			k, err := b.TryRead(bufs, sizes, 0)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < k; i++ {
				got = append(got, bytes.Clone(bufs[i][:sizes[i]]))
			}
			continue
		}
		k, err := b.TryReadFrames(frames)
		if err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			time.Sleep(200 * time.Microsecond)
			continue
		}
		for _, f := range frames[:k] {
			got = append(got, bytes.Clone(f)) // the ring slot is reused after the next read
		}
	}
	// In order; with gaps only where the kernel found the ring full.
	drops := int(b.Stats().KernelDrops)
	if len(got)+drops != n {
		t.Fatalf("got %d of %d frames (%d dropped by the kernel)", len(got), n, drops)
	}
	j := 0
	for i, g := range got {
		for j < n && !bytes.Equal(g, want[j]) {
			j++
		}
		if j == n {
			t.Fatalf("frame %d (%x) out of order or changed", i, g[:min(40, len(g))])
		}
		j++
	}
	if drops > 0 {
		t.Logf("kernel dropped %d frames (ring full)", drops)
	}
}

// TestUDPGSOToPacketEndpoint sends UDP GSO super-datagrams from a UDPEndpoint
// in one namespace to a PacketEndpoint on the far end of the veth, which the
// veth hands over unsegmented: Read and ReadFrames must return each datagram
// as it would have been on a wire, in order, with its own lengths, a valid
// IPv4 header checksum, and the IPv4 Identification UDP GSO gives segment j
// (which the sender chose as a run of IDs, see DatagramWriter, and here
// writes into the payload).
func TestUDPGSOToPacketEndpoint(t *testing.T) {
	p := netnstest.NewPair(t, netnstest.PairConfig{})
	var raw *PacketEndpoint
	p.B.NS.MustDo(t, func() (err error) {
		raw, err = NewPacket(PacketConfig{Interface: p.B.Link})
		return err
	})
	defer raw.Close()
	if !raw.vnet {
		t.Skip("the kernel refuses PACKET_VNET_HDR")
	}
	be := binary.BigEndian
	for _, tc := range []struct {
		name    string
		a, b    netip.Addr
		hdrLen  int
		inPlace bool
	}{
		{"ipv4/Read", p.A.IPv4.Addr(), p.B.IPv4.Addr(), 42, false},
		{"ipv4/ReadFrames", p.A.IPv4.Addr(), p.B.IPv4.Addr(), 42, true},
		{"ipv6/Read", p.A.IPv6.Addr(), p.B.IPv6.Addr(), 62, false},
		{"ipv6/ReadFrames", p.A.IPv6.Addr(), p.B.IPv6.Addr(), 62, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var u *UDPFrames
			p.A.NS.MustDo(t, func() error {
				e, err := NewUDP(UDPConfig{LocalAddr: netip.AddrPortFrom(tc.a, 0)})
				if err == nil {
					u = NewUDPFrames(e, [6]byte(p.A.MAC), [6]byte(p.B.MAC))
				}
				return err
			})
			defer u.Close()
			const n, size = 200, 1000
			var sent [][]byte
			for i := 0; i < n; i++ {
				// sent[0] primes alone (ID 0); the rest go in Write's
				// chunks of udpWriteChunk, each one run of IDs 0, 1, ...
				var id uint16
				if i > 0 && tc.hdrLen == 42 {
					id = uint16((i - 1) % udpWriteChunk)
				}
				pl := roceLikePayload(i, size)
				clear(pl[len(pl)-4:])
				be.PutUint16(pl[len(pl)-2:], id) // the ID the sender chose
				sent = append(sent, ipFrame{dstMAC: macOf(p.B.MAC), srcMAC: macOf(p.A.MAC),
					src: netip.AddrPortFrom(tc.a, 0xc001), dst: netip.AddrPortFrom(tc.b, RoCEv2Port),
					tos: 0x6a, ttl: 64, id: id, flags: ipv4FlagDF, payload: pl}.build())
			}
			// Prime the neighbour entry with one datagram and drop what
			// arrives of it, then send the rest in one Write, which the
			// endpoint sends in GSO batches.
			if _, err := u.Write(sent[:1], 0); err != nil {
				t.Fatal(err)
			}
			// Read until the primer itself has come (it waits for the
			// neighbour entry, which can take long on a loaded host), so
			// that it cannot be taken for the batch's first frame.
			deadline := time.Now().Add(10 * time.Second)
			for primed := false; !primed; {
				buf, sizes := make([]byte, 2048), []int{0}
				k, err := raw.TryRead([][]byte{buf}, sizes, 0)
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case k == 1:
					primed = sizes[0] == len(sent[0]) && bytes.Equal(buf[tc.hdrLen:sizes[0]-4], sent[0][tc.hdrLen:len(sent[0])-4])
				case time.Now().After(deadline):
					t.Fatal("the priming datagram did not arrive in 10 s")
				default:
					time.Sleep(time.Millisecond)
				}
			}
			before := raw.Stats()
			var rc frameReader
			if tc.inPlace {
				rc = startFrameReader(raw, n-1, 10*time.Second)
			} else {
				rc = startReader(raw, n-1, 2048, 0, 10*time.Second)
			}
			if _, err := u.Write(sent[1:], 0); err != nil {
				t.Fatal(err)
			}
			got := rc.wait(t)
			if u.Stats().GSOSends == 0 {
				t.Fatalf("the UDP endpoint sent no GSO message: %+v", u.Stats())
			}
			st := raw.Stats()
			if st.GSOFrames == before.GSOFrames || st.DroppedGSO != before.DroppedGSO {
				t.Fatalf("GSO frames split %d, dropped %d: the veth delivered no GSO frame, or it did not parse", st.GSOFrames-before.GSOFrames, st.DroppedGSO-before.DroppedGSO)
			}
			// Longer than a ring slot, each came whole from the socket.
			if st.CopiedFrames-before.CopiedFrames != st.GSOFrames-before.GSOFrames || st.DroppedTruncated != before.DroppedTruncated {
				t.Fatalf("%d GSO frames, %d read from the socket, %d truncated", st.GSOFrames-before.GSOFrames, st.CopiedFrames-before.CopiedFrames, st.DroppedTruncated-before.DroppedTruncated)
			}
			for k, g := range got {
				i := rocePSN(g, tc.hdrLen)
				w := sent[i]
				if i != k+1 || len(g) != len(w) {
					t.Fatalf("frame %d: datagram %d of %d bytes, want %d of %d", k, i, len(g), k+1, len(w))
				}
				if !bytes.Equal(g[tc.hdrLen:len(g)-4], w[tc.hdrLen:len(w)-4]) {
					t.Fatalf("datagram %d: payload differs", i)
				}
				udp := g[tc.hdrLen-8:]
				if got := int(be.Uint16(udp[4:])); got != len(w)-tc.hdrLen+8 {
					t.Fatalf("datagram %d: UDP length %d, want %d", i, got, len(w)-tc.hdrLen+8)
				}
				ip := g[EthernetHeaderLen:]
				if tc.hdrLen == 42 {
					if got := int(be.Uint16(ip[2:])); got != len(w)-EthernetHeaderLen {
						t.Fatalf("datagram %d: IPv4 total length %d, want %d", i, got, len(w)-EthernetHeaderLen)
					}
					if !header.IPv4(ip[:20]).IsChecksumValid() {
						t.Fatalf("datagram %d: IPv4 header checksum %#04x does not verify", i, be.Uint16(ip[10:]))
					}
					if id, want := be.Uint16(ip[4:]), be.Uint16(g[len(g)-2:]); id != want {
						t.Fatalf("datagram %d: IPv4 ID %d, the sender was told %d", i, id, want)
					}
				} else if got := int(be.Uint16(ip[4:])); got != len(w)-tc.hdrLen+8 {
					t.Fatalf("datagram %d: IPv6 payload length %d, want %d", i, got, len(w)-tc.hdrLen+8)
				}
			}
			t.Logf("%d datagrams from %d GSO frames", st.GSOSegments-before.GSOSegments, st.GSOFrames-before.GSOFrames)
		})
	}
}

// startFrameReader collects want frames with ReadFrames (copying each out
// before the next read) in the background.
func startFrameReader(e *PacketEndpoint, want int, deadline time.Duration) frameReader {
	r := make(frameReader, 1)
	go func() {
		var got [][]byte
		frames := make([][]byte, 16)
		end := time.Now().Add(deadline)
		for len(got) < want && time.Now().Before(end) {
			k, err := e.TryReadFrames(frames)
			if err != nil {
				r <- struct {
					frames [][]byte
					err    error
				}{got, err}
				return
			}
			if k == 0 {
				time.Sleep(100 * time.Microsecond)
			}
			for _, f := range frames[:k] {
				got = append(got, bytes.Clone(f))
			}
		}
		var err error
		if len(got) < want {
			err = fmt.Errorf("timed out with %d of %d frames", len(got), want)
		}
		r <- struct {
			frames [][]byte
			err    error
		}{got, err}
	}()
	return r
}

// TestPacketReadFramesAfterClose: a ReadFrames after Close, while frames
// the last one returned still hold their ring slots, returns net.ErrClosed.
// It handed the slots back first, into the ring Close had unmapped: a panic
// (slice bounds out of range with capacity 0) in roce.Run's reader, whose
// next read raced the device's Close (seen in roce's -race tests).
func TestPacketReadFramesAfterClose(t *testing.T) {
	p, a, b := packetPair(t, PacketConfig{BlockSize: 1 << 16, BlockCount: 4})
	if _, err := a.Write(roceFrames(p.A, p.B, 0, 4), 0); err != nil {
		t.Fatal(err)
	}
	frames := make([][]byte, 4)
	if n, err := b.ReadFrames(frames); n == 0 || err != nil {
		t.Fatalf("ReadFrames: %d frames, %v", n, err)
	}
	b.Close()
	for _, read := range []func() (int, error){
		func() (int, error) { return b.ReadFrames(frames) },
		func() (int, error) { return b.TryReadFrames(frames) },
		func() (int, error) { return b.TryRead([][]byte{make([]byte, 2048)}, []int{0}, 0) },
	} {
		if n, err := read(); n != 0 || !errors.Is(err, net.ErrClosed) {
			t.Fatalf("a read after Close: %d frames, %v; want net.ErrClosed", n, err)
		}
	}
}
