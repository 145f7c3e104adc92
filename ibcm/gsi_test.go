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

// receive runs n's device until it has taken every frame the network holds
// for it.
func (r *cmRig) receive(n *cmNode) {
	r.t.Helper()
	for {
		more, err := n.dev.Poll(r.net.Now())
		if err != nil {
			r.t.Fatal(err)
		}
		if !more {
			return
		}
	}
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
	r.receive(b)
	got := b.agent.GSI().Poll(func([]byte, MADAddress) {})
	if got != n {
		t.Errorf("received %d of %d MADs (GSI %+v, device drops %+v)", got, n, b.agent.GSI().Counters(), b.dev.Counters())
	}
}

// TestGSISendOverflow: a burst of sends beyond the send queue (1,000 MADs,
// as cmtime -c 1000's REQs, against 128 slots) is sent whole and in order,
// as the kernel's MAD layer does with its overflow list. Before, every send
// after the 128th was refused and the connection waited for its REQ's retry,
// 4.3 s later.
func TestGSISendOverflow(t *testing.T) {
	const n = 1000
	r := newCMRig(t, 22)
	a := r.node("a", mac22, ip22, sim.LinkConfig{}, 1)
	b := r.node("b", mac21, ip21, sim.LinkConfig{}, 2)
	mad := make([]byte, MADLen)
	for i := range n {
		mad[0], mad[1] = byte(i>>8), byte(i)
		if err := a.agent.GSI().Send(mad, MADAddress{Remote: ip21}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if c := a.agent.GSI().Counters(); c.Queued == 0 {
		t.Fatalf("no MAD waited for the send queue: %+v", c)
	}
	var got []int
	for round := 0; round < 100 && len(got) < n; round++ {
		r.flush(a)
		a.agent.GSI().Poll(func([]byte, MADAddress) {})
		r.receive(b)
		b.agent.GSI().Poll(func(m []byte, _ MADAddress) { got = append(got, int(m[0])<<8|int(m[1])) })
	}
	if len(got) != n {
		t.Fatalf("received %d of %d MADs (sender %+v)", len(got), n, a.agent.GSI().Counters())
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("MAD %d arrived as number %d: out of order", v, i)
		}
	}
	if c := a.agent.GSI().Counters(); c.SendErrors != 0 || c.Sent != n {
		t.Errorf("sender counters %+v, want %d sent and no errors", c, n)
	}
}

// TestGSISendsOutpacePolls: sends are signaled (their completions drive the
// overflow list), so the sends whose completions the agent has not polled yet
// are capped at the send queue's depth: ten bursts of 100, each sent by the
// device before the next and none polled in between, must not overrun QP1's
// CQ (640 entries). Without the cap the CQ overran and QP1 stopped: rdma-core's
// cmtime -c 3000 hung with its REQs never sent.
func TestGSISendsOutpacePolls(t *testing.T) {
	const bursts, per = 10, 100
	r := newCMRig(t, 23)
	a := r.node("a", mac22, ip22, sim.LinkConfig{}, 1)
	b := r.node("b", mac21, ip21, sim.LinkConfig{}, 2)
	mad := make([]byte, MADLen)
	for i := range bursts * per {
		mad[0], mad[1] = byte(i>>8), byte(i)
		if err := a.agent.GSI().Send(mad, MADAddress{Remote: ip21}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		if i%per == per-1 {
			r.flush(a)
		}
	}
	got := 0
	for round := 0; round < 100 && got < bursts*per; round++ {
		a.agent.GSI().Poll(func([]byte, MADAddress) {})
		r.flush(a)
		r.receive(b)
		got += b.agent.GSI().Poll(func([]byte, MADAddress) {})
	}
	if c := a.agent.GSI().Counters(); got != bursts*per || c.SendErrors != 0 {
		t.Fatalf("received %d of %d MADs; sender %+v, QP1 %v", got, bursts*per, c, a.agent.GSI().QP().State())
	}
}
