package ibcm

import (
	"net/netip"
	"testing"

	"github.com/softrdma/softrdma/roce"
	"github.com/softrdma/softrdma/sim"
)

// grhArea builds the roce.GRH area the device gives a UD receive for a RoCEv2
// frame: rxe's IPv4 header in the last 20 bytes, or the IPv6 header.
func grhArea(src, dst netip.Addr) []byte {
	g := make([]byte, roce.GRHLen)
	if src.Is4() {
		ip := g[20:]
		ip[0] = 0x45
		s, d := src.As4(), dst.As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
		return g
	}
	g[0] = 0x60
	s, d := src.As16(), dst.As16()
	copy(g[8:], s[:])
	copy(g[24:], d[:])
	return g
}

func TestGRHAreaAddrs(t *testing.T) {
	v6a, v6b := netip.MustParseAddr("fd77::22"), netip.MustParseAddr("fe80::1")
	for _, tc := range []struct {
		name     string
		g        []byte
		src, dst netip.Addr
		ok       bool
	}{
		{"ipv4", grhArea(ip22, ip21), ip22, ip21, true},
		{"ipv6", grhArea(v6a, v6b), v6a, v6b, true},
		// A roce.RoCEv1 roce.GRH or IPv6 header with IPv4-mapped GIDs gives the IPv4 addresses.
		{"mapped", grhArea(netip.AddrFrom16(ip22.As16()), netip.AddrFrom16(ip21.As16())), ip22, ip21, true},
		{"short", grhArea(ip22, ip21)[:39], netip.Addr{}, netip.Addr{}, false},
		{"zero", make([]byte, roce.GRHLen), netip.Addr{}, netip.Addr{}, false},
		{"ipv4 header with junk first", func() []byte { g := grhArea(ip22, ip21); g[3] = 1; return g }(), netip.Addr{}, netip.Addr{}, false},
	} {
		src, dst, ok := GRHAreaAddrs(tc.g)
		if src != tc.src || dst != tc.dst || ok != tc.ok {
			t.Errorf("%s: %v %v %v, want %v %v %v", tc.name, src, dst, ok, tc.src, tc.dst, tc.ok)
		}
	}
	g := grhArea(ip22, ip21)
	if n := testing.AllocsPerRun(100, func() { GRHAreaAddrs(g) }); n != 0 {
		t.Errorf("GRHAreaAddrs allocates %v times", n)
	}
}

func FuzzGRHAreaAddrs(f *testing.F) {
	f.Add(grhArea(ip22, ip21))
	f.Add(grhArea(netip.MustParseAddr("fd77::22"), netip.MustParseAddr("fd77::21")))
	f.Fuzz(func(t *testing.T, g []byte) {
		src, dst, ok := GRHAreaAddrs(g)
		if ok != (src.IsValid() && dst.IsValid()) || ok && len(g) < roce.GRHLen {
			t.Fatalf("%v %v %v from %d bytes", src, dst, ok, len(g))
		}
		if ok && src.Is4() {
			// An IPv4 source comes from the header in the last 20 bytes.
			if g[20]>>4 != 4 && !netip.AddrFrom16([16]byte(g[8:24])).Is4In6() {
				t.Fatalf("IPv4 source %v from %x", src, g)
			}
		}
	})
}

// TestGSIBurst: a burst of MADs that arrives before the CM agent polls (100
// connection requests at once: rdma-core's cmtime -c 100; a DREQ for each of
// 500 connections) is received whole, as the kernel's MAD layer does with its
// 512 receive buffers (mad_recvq_size). With 64 buffers the rest were lost on
// the wire's side of QP1 and came back only with the peers' retries, seconds
// later.
func TestGSIBurst(t *testing.T) {
	const n = 120 // within the sender's send queue (128)
	r := newCMRig(t, 21)
	a := r.node("a", mac22, ip22, sim.LinkConfig{}, 1)
	b := r.node("b", mac21, ip21, sim.LinkConfig{}, 2)
	mad := make([]byte, MADLen)
	for i := range n {
		mad[0] = byte(i)
		if err := a.agent.GSI().Send(mad, MADAddress{Remote: ip21}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	r.flush(a)
	for {
		more, err := b.dev.Poll(r.net.Now())
		if err != nil {
			t.Fatal(err)
		}
		if !more {
			break
		}
	}
	got := b.agent.GSI().Poll(func([]byte, MADAddress) {})
	if got != n {
		t.Errorf("received %d of %d MADs (GSI %+v, device drops %+v)", got, n, b.agent.GSI().Counters(), b.dev.Counters())
	}
}
