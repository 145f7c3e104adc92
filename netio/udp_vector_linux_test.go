//go:build linux

package netio

import (
	"bytes"
	"net/netip"
	"testing"
	"time"
)

// splitFrame cuts a frame into the pieces a RoCE device hands WriteVectors:
// the headers through the 12-byte BTH, the payload, and the last four bytes.
func splitFrame(f []byte, hdrLen int) [][]byte {
	h := hdrLen + 12
	return [][]byte{f[:h], f[h : len(f)-4], f[len(f)-4:]}
}

// readDatagrams reads want datagrams from ep with ReadDatagrams, cloning
// each payload, within deadline.
func readDatagrams(t *testing.T, ep interface {
	DatagramReader
	BatchSize() int
	Close() error
}, want int) []Datagram {
	t.Helper()
	var got []Datagram
	done := make(chan error, 1)
	go func() {
		d := make([]Datagram, ep.BatchSize())
		for len(got) < want {
			n, err := ep.ReadDatagrams(d)
			for _, g := range d[:n] {
				g.Payload = bytes.Clone(g.Payload)
				got = append(got, g)
			}
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("after %d datagrams: %v", len(got), err)
		}
	case <-time.After(5 * time.Second):
		ep.Close()
		<-done
		t.Fatalf("timed out with %d of %d datagrams", len(got), want)
	}
	return got
}

// TestUDPWriteVectorsReadDatagrams sends frames in pieces and receives them
// in place: every payload arrives whole and in order, with the addresses,
// TOS and TTL of its frame, with and without GSO and GRO, over IPv4 and
// IPv6.
func TestUDPWriteVectorsReadDatagrams(t *testing.T) {
	for _, c := range []udpCase{
		{name: "ipv4"},
		{name: "ipv4-nogro", noGRO: true},
		{name: "ipv6-gso-gro", ipv6: true},
		{name: "ipv6-nogso-nogro", ipv6: true, noGSO: true, noGRO: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b, macA, macB := udpPair(t, c)
			const n = 40
			var frames [][][]byte
			var payloads [][]byte
			for i := 0; i < n; i++ {
				p := roceLikePayload(i, 500)
				payloads = append(payloads, p)
				f := ipFrame{dstMAC: macB, srcMAC: macA, src: netip.AddrPortFrom(a.LocalAddr().Addr(), 0xc0de),
					dst: b.LocalAddr(), tos: 0x68, ttl: 61, flags: ipv4FlagDF, payload: p}.build()
				frames = append(frames, splitFrame(f, a.hdrLen))
			}
			got := make(chan []Datagram, 1)
			go func() { got <- readDatagrams(t, b, n) }()
			if k, err := a.WriteVectors(frames); k != n || err != nil {
				t.Fatalf("WriteVectors = %d, %v", k, err)
			}
			for i, d := range <-got {
				if !bytes.Equal(d.Payload, payloads[i]) {
					t.Fatalf("datagram %d: %x, want %x", i, d.Payload[:16], payloads[i][:16])
				}
				if d.Src != netip.AddrPortFrom(a.LocalAddr().Addr(), 0xc0de) || d.Dst != b.LocalAddr() || d.TTL != 61 || d.TOS != 0x68 {
					t.Fatalf("datagram %d: %v → %v tos %#x ttl %d", i, d.Src, d.Dst, d.TOS, d.TTL)
				}
			}
			if s := a.Stats(); s.FramesSent != n || s.DroppedMalformed != 0 {
				t.Errorf("sender stats %+v", s)
			}
		})
	}
}

// TestUDPWriteVectorsRejects drops frames with too many pieces or headers
// split across pieces, counting them, and keeps the rest.
func TestUDPWriteVectorsRejects(t *testing.T) {
	a, b, macA, macB := udpPair(t, udpCase{name: "rejects"})
	f := ipFrame{dstMAC: macB, srcMAC: macA, src: netip.AddrPortFrom(a.LocalAddr().Addr(), 0xc0de),
		dst: b.LocalAddr(), ttl: 64, flags: ipv4FlagDF, payload: roceLikePayload(7, 100)}.build()
	var many [][]byte
	for i := 0; i < len(f); i += len(f)/MaxWritePieces + 1 {
		many = append(many, f[i:min(i+len(f)/MaxWritePieces+1, len(f))])
	}
	many = append(many[:len(many):len(many)], nil, nil) // more than MaxWritePieces
	frames := [][][]byte{many, {f[:10], f[10:]}, splitFrame(f, a.hdrLen)}
	got := make(chan []Datagram, 1)
	go func() { got <- readDatagrams(t, b, 1) }()
	if k, err := a.WriteVectors(frames); k != 3 || err != nil {
		t.Fatalf("WriteVectors = %d, %v", k, err)
	}
	if d := <-got; !bytes.Equal(d[0].Payload, f[a.hdrLen:]) {
		t.Fatalf("got %x", d[0].Payload)
	}
	if s := a.Stats(); s.DroppedMalformed != 2 || s.FramesSent != 1 {
		t.Errorf("stats %+v", s)
	}
}

// run returns n datagrams of RoCE-like payloads (seed from first) from
// port to dst, with IPv4 IDs ids(i).
func run(dst netip.AddrPort, port uint16, first, n, size int, ids func(int) uint16) []OutDatagram {
	var d []OutDatagram
	for i := 0; i < n; i++ {
		d = append(d, OutDatagram{Payload: [][]byte{roceLikePayload(first+i, size)}, SrcPort: port, Dst: dst,
			TTL: 64, IPv4ID: ids(i)})
	}
	return d
}

// TestUDPIPv4GSO sends IPv4 datagrams whose sender chose a run of IDs 0,
// 1, 2, ... as one GSO message (the kernel gives segment j ID j:
// TestUDPGSOToPacketEndpoint watches the wire), untouched; datagrams that
// all have ID 0 are not merged; an ID with no place in a run is dropped and
// counted; and when the kernel refuses GSO, the run's first datagram goes
// alone and the others, which would leave with ID 0, are dropped and
// counted, and IPv4Run reports 1 from then on.
func TestUDPIPv4GSO(t *testing.T) {
	const port, n = 0xc0ab, 10
	runIDs := func(i int) uint16 { return uint16(i) }
	for _, tc := range []struct {
		name      string
		refuse    bool
		ids       func(int) uint16
		wantRecv  []int // indices of the datagrams that arrive
		wantGSO   uint64
		wantDrops uint64
	}{
		{"run", false, runIDs, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 1, 0},
		{"ids zero", false, func(int) uint16 { return 0 }, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 0, 0},
		{"broken run", false, func(i int) uint16 { return []uint16{0, 1, 2, 4, 0, 1, 0, 2, 0, 0}[i] }, []int{0, 1, 2, 4, 5, 6, 8, 9}, 2, 2},
		{"refused", true, runIDs, []int{0}, 0, n - 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b, _, _ := udpPair(t, udpCase{name: "ipv4-gso"})
			if !a.GSO() {
				t.Skip("kernel without UDP_SEGMENT")
			}
			if d, bytes := a.IPv4Run(); d != udpMaxSegments || bytes != udpMaxGSOPayloadV4 {
				t.Fatalf("IPv4Run = %d, %d", d, bytes)
			}
			// Open the socket with one datagram.
			if _, err := a.WriteDatagrams(run(b.LocalAddr(), port, 100, 1, 300, runIDs)); err != nil {
				t.Fatal(err)
			}
			readDatagrams(t, b, 1)
			var ref *gsoRefuser
			if tc.refuse {
				a.sockMu.Lock()
				ref = &gsoRefuser{mmsgConn: a.socks[port].s.mm}
				a.socks[port].s.mm = ref
				a.sockMu.Unlock()
			}
			before := a.Stats()
			d := run(b.LocalAddr(), port, 0, n, 300, tc.ids)
			got := make(chan []Datagram, 1)
			go func() { got <- readDatagrams(t, b, len(tc.wantRecv)) }()
			if k, err := a.WriteDatagrams(d); k != n || err != nil {
				t.Fatalf("WriteDatagrams = %d, %v", k, err)
			}
			for k, g := range <-got {
				if want := roceLikePayload(tc.wantRecv[k], 300); !bytes.Equal(g.Payload, want) {
					t.Fatalf("datagram %d: %x, want datagram %d's %x", k, g.Payload[:16], tc.wantRecv[k], want[:16])
				}
			}
			s := a.Stats()
			if s.GSOSends-before.GSOSends != tc.wantGSO || s.DroppedIPv4ID-before.DroppedIPv4ID != tc.wantDrops ||
				s.FramesSent-before.FramesSent != uint64(len(tc.wantRecv)) {
				t.Errorf("stats %+v, want %d GSO sends, %d dropped", s, tc.wantGSO, tc.wantDrops)
			}
			if tc.refuse {
				if d, _ := a.IPv4Run(); ref.refused != 1 || a.GSO() || d != 1 {
					t.Errorf("refused %d, GSO %v, IPv4Run %d", ref.refused, a.GSO(), d)
				}
			}
		})
	}
}

// TestUDPWriteDatagrams sends datagrams given as payload pieces and
// addresses (no headers): every payload arrives whole and in order with
// the source port, TOS and TTL it was given, with and without GSO, over
// IPv4 and IPv6; a source address not the endpoint's, a destination of the
// other family and too many pieces are dropped and counted.
func TestUDPWriteDatagrams(t *testing.T) {
	for _, c := range []udpCase{
		{name: "ipv4"},
		{name: "ipv4-nogso", noGSO: true},
		{name: "ipv6-gso-gro", ipv6: true},
		{name: "ipv6-nogso-nogro", ipv6: true, noGSO: true, noGRO: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b, _, _ := udpPair(t, c)
			const n = 40
			var d []OutDatagram
			var payloads [][]byte
			for i := 0; i < n; i++ {
				p := roceLikePayload(i, 500)
				payloads = append(payloads, p)
				d = append(d, OutDatagram{Payload: [][]byte{p[:12], p[12 : len(p)-4], p[len(p)-4:]}, SrcPort: 0xc0de,
					Dst: b.LocalAddr(), TOS: 0x68, TTL: 61})
			}
			other := netip.AddrPortFrom(netip.IPv6Loopback(), 4791)
			if c.ipv6 {
				other = netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 4791)
			}
			bad := []OutDatagram{
				{Payload: [][]byte{payloads[0]}, Src: netip.MustParseAddr("127.9.9.9"), SrcPort: 0xc0de, Dst: b.LocalAddr()},
				{Payload: [][]byte{payloads[0]}, SrcPort: 0xc0de, Dst: other},
				{Payload: make([][]byte, MaxWritePieces+1), SrcPort: 0xc0de, Dst: b.LocalAddr()},
			}
			d = append(bad, d...)
			got := make(chan []Datagram, 1)
			go func() { got <- readDatagrams(t, b, n) }()
			if k, err := a.WriteDatagrams(d); k != len(d) || err != nil {
				t.Fatalf("WriteDatagrams = %d, %v", k, err)
			}
			for i, g := range <-got {
				if !bytes.Equal(g.Payload, payloads[i]) {
					t.Fatalf("datagram %d: %x, want %x", i, g.Payload[:16], payloads[i][:16])
				}
				if g.Src != netip.AddrPortFrom(a.LocalAddr().Addr(), 0xc0de) || g.Dst != b.LocalAddr() || g.TTL != 61 || g.TOS != 0x68 {
					t.Fatalf("datagram %d: %v → %v tos %#x ttl %d", i, g.Src, g.Dst, g.TOS, g.TTL)
				}
			}
			if s := a.Stats(); s.FramesSent != n || s.DroppedMalformed != 2 || s.DroppedSourceAddr != 1 {
				t.Errorf("sender stats %+v", s)
			}
		})
	}
}

// TestUDPReadWriteAllocs checks that a steady state of Write, WriteVectors,
// WriteDatagrams, Read and ReadDatagrams allocates nothing.
func TestUDPReadWriteAllocs(t *testing.T) {
	for _, c := range []udpCase{{name: "ipv4"}, {name: "ipv4-nogro", noGRO: true}, {name: "ipv6", ipv6: true}} {
		t.Run(c.name, func(t *testing.T) {
			a, b, macA, macB := udpPair(t, c)
			const n = 16
			frames := make([][]byte, n)
			vecs := make([][][]byte, n)
			dgs := make([]OutDatagram, n)
			for i := range frames {
				frames[i] = ipFrame{dstMAC: macB, srcMAC: macA, src: netip.AddrPortFrom(a.LocalAddr().Addr(), 0xc0ad),
					dst: b.LocalAddr(), ttl: 64, flags: ipv4FlagDF, payload: roceLikePayload(i, 200)}.build()
				vecs[i] = splitFrame(frames[i], a.hdrLen)
				dgs[i] = OutDatagram{Payload: splitFrame(frames[i], a.hdrLen)[1:], SrcPort: 0xc0ad, Dst: b.LocalAddr(), TTL: 64,
					IPv4ID: uint16(i)} // one run over IPv4
			}
			bufs := make([][]byte, n)
			for i := range bufs {
				bufs[i] = make([]byte, 2048)
			}
			sizes := make([]int, n)
			d := make([]Datagram, n)
			drain := func(read func() (int, error)) {
				for got := 0; got < n; {
					k, err := read()
					if err != nil {
						t.Fatal(err)
					}
					got += k
				}
			}
			cycle := func() {
				a.Write(frames, 0)
				drain(func() (int, error) { return b.Read(bufs, sizes, 0) })
				a.WriteVectors(vecs)
				drain(func() (int, error) { return b.ReadDatagrams(d) })
				a.WriteDatagrams(dgs)
				drain(func() (int, error) { return b.ReadDatagrams(d) })
			}
			cycle() // opens the source-port socket
			if allocs := testing.AllocsPerRun(20, cycle); allocs != 0 {
				t.Errorf("%v allocations per cycle", allocs)
			}
		})
	}
}

// TestUDPGSOSizeLimits sends 64 RoCE-sized datagrams (1040 bytes, more
// than one GSO send carries over IPv4) over IPv4, in runs as long as
// IPv4Run allows, and over IPv6: every datagram arrives and the kernel
// refuses none (the IPv4 limit is 20 bytes below IPv6's, which counts no IP
// header).
func TestUDPGSOSizeLimits(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		name := "ipv4"
		if v6 {
			name = "ipv6"
		}
		t.Run(name, func(t *testing.T) {
			var a, b *UDPEndpoint
			if v6 {
				a = newUDPOnFreePort(t, UDPConfig{}, netip.IPv6Loopback())
				b = newUDPOnFreePort(t, UDPConfig{}, netip.IPv6Loopback())
			} else {
				ipA, ipB := randomLoopbackPair()
				var err error
				if a, err = NewUDP(UDPConfig{LocalAddr: netip.AddrPortFrom(ipA, 0)}); err != nil {
					t.Fatal(err)
				}
				if b, err = NewUDP(UDPConfig{LocalAddr: netip.AddrPortFrom(ipB, 0)}); err != nil {
					t.Fatal(err)
				}
			}
			defer a.Close()
			defer b.Close()
			if !a.GSO() {
				t.Skip("kernel without UDP_SEGMENT")
			}
			const n = 64
			runLen, runBytes := a.IPv4Run()
			runLen = min(runLen, runBytes/1040)
			var frames [][]byte
			for i := 0; i < n; i++ {
				f := ipFrame{src: netip.AddrPortFrom(a.LocalAddr().Addr(), 0xc0af), dst: b.LocalAddr(),
					ttl: 64, flags: ipv4FlagDF, payload: roceLikePayload(i, 1024)}
				if !v6 {
					f.id = uint16(i % runLen)
				}
				frames = append(frames, f.build())
			}
			got := make(chan []Datagram, 1)
			go func() { got <- readDatagrams(t, b, n) }()
			if k, err := udpFrames(a).Write(frames, 0); k != n || err != nil {
				t.Fatalf("Write = %d, %v", k, err)
			}
			if d := <-got; len(d) != n {
				t.Fatalf("%d datagrams", len(d))
			}
			if s := a.Stats(); s.DroppedSendError != 0 || s.GSOSends < 1 || s.FramesSent != n {
				t.Errorf("stats %+v, last error %v", s, a.LastSendError())
			}
		})
	}
}
