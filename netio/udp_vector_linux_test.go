//go:build linux

package netio

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"sync"
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
func readDatagrams(t *testing.T, ep *UDPEndpoint, want int) []Datagram {
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

// xorPatch is an IPv4GSO hook for tests: it XORs the segment ID into the
// last two bytes (applying it twice undoes it, as the contract asks) and
// records the calls.
type xorPatch struct {
	mu    sync.Mutex
	calls []uint16
}

func (x *xorPatch) patch(icrc []byte, payloadLen int, id uint16) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.calls = append(x.calls, id)
	binary.BigEndian.PutUint16(icrc[2:], binary.BigEndian.Uint16(icrc[2:])^id)
}

// TestUDPIPv4GSO sends equal IPv4 frames as one GSO message when an
// IPv4GSO hook is configured: segment j (from 1) is patched for ID j, the
// first is not; without the hook nothing is merged or patched; and when the
// kernel refuses GSO the patches are undone before the datagrams go alone.
func TestUDPIPv4GSO(t *testing.T) {
	for _, refuse := range []bool{false, true} {
		name := "gso"
		if refuse {
			name = "refused"
		}
		t.Run(name, func(t *testing.T) {
			x := &xorPatch{}
			macA, macB := [6]byte{2, 0, 0, 0, 0, 0xa}, [6]byte{2, 0, 0, 0, 0, 0xb}
			ipA, ipB := randomLoopbackPair()
			a, err := NewUDP(UDPConfig{LocalAddr: netip.AddrPortFrom(ipA, 0), IPv4GSO: x.patch})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			if !a.GSO() {
				t.Skip("kernel without UDP_SEGMENT")
			}
			b, err := NewUDP(UDPConfig{LocalAddr: netip.AddrPortFrom(ipB, 0)})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			const port, n = 0xc0ab, 10
			mk := func(i int) []byte {
				return ipFrame{dstMAC: macB, srcMAC: macA, src: netip.AddrPortFrom(ipA, port), dst: b.LocalAddr(),
					ttl: 64, flags: ipv4FlagDF, payload: roceLikePayload(i, 300)}.build()
			}
			if _, err := a.Write([][]byte{mk(0)}, 0); err != nil { // opens the socket
				t.Fatal(err)
			}
			var ref *gsoRefuser
			if refuse {
				a.sockMu.Lock()
				ref = &gsoRefuser{mmsgConn: a.socks[port].s.mm}
				a.socks[port].s.mm = ref
				a.sockMu.Unlock()
			}
			var frames, want [][]byte
			for i := 1; i <= n; i++ {
				frames = append(frames, mk(i))
				want = append(want, roceLikePayload(i, 300))
			}
			got := make(chan []Datagram, 1)
			go func() { got <- readDatagrams(t, b, n+1) }()
			if k, err := a.Write(frames, 0); k != n || err != nil {
				t.Fatalf("Write = %d, %v", k, err)
			}
			d := <-got
			for i, g := range d[1:] {
				p := bytes.Clone(want[i])
				if !refuse {
					binary.BigEndian.PutUint16(p[len(p)-2:], binary.BigEndian.Uint16(p[len(p)-2:])^uint16(i))
				}
				if !bytes.Equal(g.Payload, p) {
					t.Fatalf("datagram %d ends %x, want %x", i, g.Payload[len(g.Payload)-4:], p[len(p)-4:])
				}
			}
			wantCalls := []uint16{1, 2, 3, 4, 5, 6, 7, 8, 9}
			if refuse {
				wantCalls = append(wantCalls, wantCalls...) // patched, then undone
			}
			x.mu.Lock()
			calls := x.calls
			x.mu.Unlock()
			if len(calls) != len(wantCalls) {
				t.Fatalf("hook called for %v, want %v", calls, wantCalls)
			}
			for i := range wantCalls {
				if calls[i] != wantCalls[i] {
					t.Fatalf("hook called for %v, want %v", calls, wantCalls)
				}
			}
			s := a.Stats()
			if refuse && (ref.refused != 1 || s.GSOSends != 0 || a.GSO()) {
				t.Errorf("refused %d, stats %+v", ref.refused, s)
			}
			if !refuse && s.GSOSends != 1 {
				t.Errorf("stats %+v, want one GSO send", s)
			}
		})
	}
	t.Run("no hook", func(t *testing.T) {
		a, b, macA, macB := udpPair(t, udpCase{name: "nohook"})
		if a.GSO() {
			t.Fatal("IPv4 GSO on without a hook")
		}
		var frames [][]byte
		for i := 0; i < 8; i++ {
			frames = append(frames, ipFrame{dstMAC: macB, srcMAC: macA, src: netip.AddrPortFrom(a.LocalAddr().Addr(), 0xc0ac),
				dst: b.LocalAddr(), ttl: 64, flags: ipv4FlagDF, payload: roceLikePayload(i, 300)}.build())
		}
		got := make(chan []Datagram, 1)
		go func() { got <- readDatagrams(t, b, 8) }()
		a.Write(frames, 0)
		for i, d := range <-got {
			if !bytes.Equal(d.Payload, roceLikePayload(i, 300)) {
				t.Fatalf("datagram %d changed", i)
			}
		}
		if s := a.Stats(); s.GSOSends != 0 {
			t.Errorf("stats %+v", s)
		}
	})
}

// TestUDPReadWriteAllocs checks that a steady state of Write, WriteVectors,
// Read and ReadDatagrams allocates nothing.
func TestUDPReadWriteAllocs(t *testing.T) {
	for _, c := range []udpCase{{name: "ipv4"}, {name: "ipv4-nogro", noGRO: true}, {name: "ipv6", ipv6: true}} {
		t.Run(c.name, func(t *testing.T) {
			a, b, macA, macB := udpPair(t, c)
			const n = 16
			frames := make([][]byte, n)
			vecs := make([][][]byte, n)
			for i := range frames {
				frames[i] = ipFrame{dstMAC: macB, srcMAC: macA, src: netip.AddrPortFrom(a.LocalAddr().Addr(), 0xc0ad),
					dst: b.LocalAddr(), ttl: 64, flags: ipv4FlagDF, payload: roceLikePayload(i, 200)}.build()
				vecs[i] = splitFrame(frames[i], a.hdrLen)
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
			}
			cycle() // opens the source-port socket
			if allocs := testing.AllocsPerRun(20, cycle); allocs != 0 {
				t.Errorf("%v allocations per cycle", allocs)
			}
		})
	}
}

// TestUDPGSOSizeLimits sends 64 RoCE-sized datagrams (1040 bytes, more
// than one GSO send carries over IPv4) over IPv4 with a hook and over IPv6:
// every datagram arrives and the kernel refuses none (the IPv4 limit is 20
// bytes below IPv6's, which counts no IP header).
func TestUDPGSOSizeLimits(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		name := "ipv4"
		if v6 {
			name = "ipv6"
		}
		t.Run(name, func(t *testing.T) {
			x := &xorPatch{}
			var a, b *UDPEndpoint
			if v6 {
				a = newUDPOnFreePort(t, UDPConfig{}, netip.IPv6Loopback())
				b = newUDPOnFreePort(t, UDPConfig{}, netip.IPv6Loopback())
			} else {
				ipA, ipB := randomLoopbackPair()
				var err error
				if a, err = NewUDP(UDPConfig{LocalAddr: netip.AddrPortFrom(ipA, 0), IPv4GSO: x.patch}); err != nil {
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
			var frames [][]byte
			for i := 0; i < n; i++ {
				frames = append(frames, ipFrame{src: netip.AddrPortFrom(a.LocalAddr().Addr(), 0xc0af), dst: b.LocalAddr(),
					ttl: 64, flags: ipv4FlagDF, payload: roceLikePayload(i, 1024)}.build())
			}
			got := make(chan []Datagram, 1)
			go func() { got <- readDatagrams(t, b, n) }()
			if k, err := a.Write(frames, 0); k != n || err != nil {
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
