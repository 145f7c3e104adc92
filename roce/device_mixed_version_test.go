package roce_test

import (
	"bytes"
	"encoding/binary"
	"io"
	"net/netip"
	"testing"
	"time"

	"github.com/google/gopacket/pcapgo"
	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/netio"
	"github.com/softrdma/softrdma/roce"
	"github.com/softrdma/softrdma/sim"
)

// TestDeviceMixedVersionsPerAH connects three QP pairs between the same two
// RoCEv2 devices, one with RoCEv1 address handles (AddressHandleVersion), one
// with RoCEv2 handles over IPv4 and one over IPv6, and runs a WRITE, a READ and a
// SEND on each at once. A capture tap (netio.Capture) on a's endpoint shows that
// every frame of the RoCEv1 pair, in both directions, is Ethertype 0x8915 with a
// GRH of the IPv4-mapped GIDs, every frame of the others IPv4 or IPv6 with UDP to
// 4791, every ICRC verifies, and all the exchanges complete with the right bytes.
func TestDeviceMixedVersionsPerAH(t *testing.T) {
	n := sim.New(17)
	macA, macB := [6]byte{2, 0, 0, 0, 0, 1}, [6]byte{2, 0, 0, 0, 0, 2}
	ip4A, ip4B := netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.1.0.2")
	ip6A, ip6B := netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")
	sw := n.AddSwitch("sw")
	pa, pb := n.AddNode("a", macA), n.AddNode("b", macB)
	link := sim.LinkConfig{Latency: 2 * time.Microsecond}
	n.ConnectSwitch(pa, sw, link)
	n.ConnectSwitch(pb, sw, link)
	var capBuf bytes.Buffer
	tap, err := netio.NewCapture(pa, &capBuf, netio.FormatPcap, n.Clock())
	if err != nil {
		t.Fatal(err)
	}
	nb := roce.StaticNeighbors{ip4A: macA, ip4B: macB, ip6A: macA, ip6B: macB}
	a, err := roce.NewDevice(roce.DeviceConfig{Endpoint: tap, MAC: macA, Addrs: []netip.Addr{ip4A, ip6A}, Neighbors: nb, Engine: ibtransport.ContextConfig{Seed: 1}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := roce.NewDevice(roce.DeviceConfig{Endpoint: pb, MAC: macB, Addrs: []netip.Addr{ip4B, ip6B}, Neighbors: nb, Engine: ibtransport.ContextConfig{Seed: 2}})
	if err != nil {
		t.Fatal(err)
	}

	type qpPair struct {
		name     string
		version  roce.Version
		ipv6     bool
		qa, qb   *ibtransport.QP
		cqa, cqb *ibtransport.CQ
		mra, mrb *ibtransport.MR
	}
	pairs := []*qpPair{
		{name: "RoCEv1", version: roce.RoCEv1},
		{name: "RoCEv2 IPv4", version: roce.RoCEv2},
		{name: "RoCEv2 IPv6", version: roce.RoCEv2, ipv6: true},
	}
	for i, p := range pairs {
		p.qa, p.cqa, p.mra = setupQP(t, a)
		p.qb, p.cqb, p.mrb = setupQP(t, b)
		dstB, dstA := ip4B, ip4A
		if p.ipv6 {
			dstB, dstA = ip6B, ip6A
		}
		ahA, errA := a.AddressHandleVersion(dstB, p.version)
		ahB, errB := b.AddressHandleVersion(dstA, p.version)
		if errA != nil || errB != nil {
			t.Fatal(errA, errB)
		}
		if p.version == roce.RoCEv1 && ahA.Opaque != roce.RoCEv1 || p.version == roce.RoCEv2 && ahA.Opaque == roce.RoCEv1 {
			t.Fatalf("%s: address handle Opaque %v", p.name, ahA.Opaque)
		}
		sq := uint32(100 + 1000*i)
		connectAH(t, p.qa, p.qb, ahA, a.PathMTU(), sq, sq+500, 14)
		connectAH(t, p.qb, p.qa, ahB, b.PathMTU(), sq+500, sq, 14)
	}

	// On each pair at once: a WRITEs 5000 bytes (5 packets) to b, READs them
	// back elsewhere, and b SENDs 3000 bytes to a.
	const size = 5000
	for i, p := range pairs {
		src := p.mra.Buf()[:size]
		for j := range src {
			src[j] = byte(j*13 + i*71 + 1)
		}
		copy(p.mrb.Buf()[20000:], bytes.Repeat([]byte{byte(0xa0 + i)}, 3000))
		if err := p.qa.PostRecv(ibtransport.RecvWR{WRID: 3, SGL: []ibtransport.SGE{p.mra.SGE(40000, 4096)}}); err != nil {
			t.Fatal(err)
		}
		if err := p.qa.PostSend(ibtransport.SendWR{WRID: 1, Opcode: ibtransport.WRRDMAWrite, Signaled: true,
			SGL: []ibtransport.SGE{p.mra.SGE(0, size)}, RemoteAddr: p.mrb.Addr(), RKey: p.mrb.RKey()}); err != nil {
			t.Fatal(err)
		}
		if err := p.qa.PostSend(ibtransport.SendWR{WRID: 2, Opcode: ibtransport.WRRDMARead, Signaled: true, Fence: true,
			SGL: []ibtransport.SGE{p.mra.SGE(10000, size)}, RemoteAddr: p.mrb.Addr(), RKey: p.mrb.RKey()}); err != nil {
			t.Fatal(err)
		}
		if err := p.qb.PostSend(ibtransport.SendWR{WRID: 4, Opcode: ibtransport.WRSend, Signaled: true,
			SGL: []ibtransport.SGE{p.mrb.SGE(20000, 3000)}}); err != nil {
			t.Fatal(err)
		}
	}
	want := 4 * len(pairs) // WRITE, READ, RECV on a; SEND on b
	got := map[string][]ibtransport.WC{}
	wcs := make([]ibtransport.WC, 8)
	total := 0
	err = n.Drive(time.Minute, func() bool { return total == want }, func(time.Time) bool {
		moved := false
		for _, p := range pairs {
			for _, cq := range []*ibtransport.CQ{p.cqa, p.cqb} {
				k := cq.Poll(wcs)
				got[p.name] = append(got[p.name], wcs[:k]...)
				total += k
				moved = moved || k > 0
			}
		}
		return moved
	}, a, b)
	if err != nil {
		t.Fatalf("%v; completions %v", err, got)
	}
	for i, p := range pairs {
		if len(got[p.name]) != 4 {
			t.Errorf("%s: completions %v, want 4", p.name, got[p.name])
		}
		for _, wc := range got[p.name] {
			if wc.Status != ibtransport.WCSuccess {
				t.Errorf("%s: completion %v", p.name, wc)
			}
		}
		src := p.mra.Buf()[:size]
		if !bytes.Equal(p.mrb.Buf()[:size], src) {
			t.Errorf("%s: WRITE landed wrong bytes", p.name)
		}
		if !bytes.Equal(p.mra.Buf()[10000:10000+size], src) {
			t.Errorf("%s: READ returned wrong bytes", p.name)
		}
		if !bytes.Equal(p.mra.Buf()[40000:43000], bytes.Repeat([]byte{byte(0xa0 + i)}, 3000)) {
			t.Errorf("%s: SEND delivered wrong bytes", p.name)
		}
	}
	checkClean(t, "a", a)
	checkClean(t, "b", b)

	if err := tap.Flush(); err != nil {
		t.Fatal(err)
	}
	frames := readCapture(t, &capBuf)
	// Which pair a frame belongs to: its direction (source MAC) and BTH DestQP.
	type key struct {
		fromA bool
		qpn   uint32
	}
	owner := map[key]*qpPair{}
	for _, p := range pairs {
		owner[key{true, p.qb.QPN()}] = p
		owner[key{false, p.qa.QPN()}] = p
	}
	seen := map[*qpPair][2]int{} // frames sent, received by a
	for i, fr := range frames {
		var f roce.Frame
		if err := f.DecodeEthernet(fr); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		fromA := [6]byte(fr[6:12]) == macA
		p := owner[key{fromA, ibtransport.BTH(f.IB).DestQP()}]
		if p == nil {
			t.Fatalf("frame %d (from a: %v) for QPN %#x of no pair", i, fromA, ibtransport.BTH(f.IB).DestQP())
		}
		et := binary.BigEndian.Uint16(fr[12:])
		switch {
		case p.version == roce.RoCEv1:
			src, dst := netip.AddrFrom16(ip4A.As16()), netip.AddrFrom16(ip4B.As16())
			if !fromA {
				src, dst = dst, src
			}
			if et != roce.EtherTypeRoCEv1 || f.Version != roce.RoCEv1 || f.Src != src || f.Dst != dst {
				t.Fatalf("frame %d of %s: Ethertype %#04x, version %v, GRH %v -> %v; want 0x8915, GRH %v -> %v",
					i, p.name, et, f.Version, f.Src, f.Dst, src, dst)
			}
		case p.ipv6:
			if et != 0x86dd || f.Version != roce.RoCEv2 || !f.IPv6 || f.DstPort != roce.UDPPort || fr[14+6] != 17 {
				t.Fatalf("frame %d of %s: Ethertype %#04x, version %v, IPv6 %v, UDP port %d", i, p.name, et, f.Version, f.IPv6, f.DstPort)
			}
		default:
			if et != 0x0800 || f.Version != roce.RoCEv2 || f.IPv6 || f.DstPort != roce.UDPPort || fr[14+9] != 17 {
				t.Fatalf("frame %d of %s: Ethertype %#04x, version %v, IPv6 %v, UDP port %d", i, p.name, et, f.Version, f.IPv6, f.DstPort)
			}
		}
		if err := roce.VerifyICRC(&f); err != nil {
			t.Fatalf("frame %d of %s: %v", i, p.name, err)
		}
		c := seen[p]
		if fromA {
			c[0]++
		} else {
			c[1]++
		}
		seen[p] = c
	}
	for _, p := range pairs {
		// a sends 5 WRITE packets, a READ request, an ACK for the SEND;
		// b sends an ACK, 5 READ responses, 3 SEND packets.
		if c := seen[p]; c[0] < 7 || c[1] < 9 {
			t.Errorf("%s: captured %d frames from a and %d to a, want at least 7 and 9", p.name, c[0], c[1])
		}
	}
}

// readCapture returns the frames of a classic pcap stream.
func readCapture(t *testing.T, r io.Reader) [][]byte {
	t.Helper()
	pr, err := pcapgo.NewReader(r)
	if err != nil {
		t.Fatal(err)
	}
	var frames [][]byte
	for {
		data, _, err := pr.ReadPacketData()
		if err == io.EOF {
			return frames
		}
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, data)
	}
}
