package roce

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/softrdma/softrdma/header"
	"github.com/softrdma/softrdma/netio"
)

// TestFlowICRCCaptures computes the ICRC of every captured RoCEv2-over-IPv4
// frame of rxe from its addresses, ports, ID and IB packet (flowICRC, one for
// all frames: its flow changes between captures and directions), the IB
// packet cut at random points after the BTH, and compares it with the one
// rxe sent.
func TestFlowICRCCaptures(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var c flowICRC
	forEachZeroIDFrame(t, func(name string, i int, _ []byte, f, _ *Frame) {
		id := binary.BigEndian.Uint16(f.IP[4:])
		pieces := [][]byte{f.IB}
		if n := len(f.IB) - minIBLen; n > 0 {
			a := minIBLen + rng.IntN(n+1)
			b := a + rng.IntN(len(f.IB)-a+1)
			pieces = [][]byte{f.IB[:a], f.IB[a:b], f.IB[b:]}
		}
		if got := c.sum(f.Src, f.Dst, f.SrcPort, f.DstPort, id, len(f.IB), pieces...); got != f.ICRC {
			t.Fatalf("%s frame %d: flowICRC %#08x, rxe sent %#08x", name, i+1, got, f.ICRC)
		}
	})
}

// TestFlowICRCFields checks flowICRC against ComputeICRC over the headers
// EncodeIPUDP writes, for random addresses, ports, IDs, TOS, TTL and lengths,
// flows repeating (the kept part) and changing.
func TestFlowICRCFields(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	addr := func() netip.Addr {
		var a [4]byte
		binary.BigEndian.PutUint32(a[:], rng.Uint32())
		return netip.AddrFrom4(a)
	}
	var c flowICRC
	src, dst := addr(), addr()
	sport, dport := uint16(rng.Uint32()), uint16(UDPPort)
	var hdr [IPv4Len + UDPLen]byte
	for i := range 2000 {
		if rng.IntN(4) == 0 {
			src, dst, sport = addr(), addr(), uint16(rng.Uint32())
		}
		ib := make([]byte, minIBLen+rng.IntN(5000))
		for j := range ib {
			ib[j] = byte(rng.Uint32())
		}
		id := uint16(rng.Uint32())
		header.EncodeIPUDP(hdr[:], true, &header.IPUDPFields{Src: netip.AddrPortFrom(src, sport), Dst: netip.AddrPortFrom(dst, dport),
			TOS: uint8(rng.Uint32()), TTL: uint8(rng.Uint32()), IPv4ID: id, PayloadLen: len(ib) + ICRCLen})
		want := ComputeICRC(hdr[:IPv4Len], hdr[IPv4Len:], ib)
		if got := c.sum(src, dst, sport, dport, id, len(ib), ib); got != want {
			t.Fatalf("case %d (%v:%d -> %v:%d id %#x, %d bytes): flowICRC %#08x, ComputeICRC %#08x", i, src, sport, dst, dport, id, len(ib), got, want)
		}
	}
}

// TestDatagramFrameHeaders hands datagramFrame datagrams whose addresses,
// TOS, TTL and length change now and then: the headers it keeps must be
// those EncodeIPUDP writes for each (it rewrites them when one changes).
func TestDatagramFrameHeaders(t *testing.T) {
	d := &Device{port: UDPPort}
	rng := rand.New(rand.NewPCG(7, 8))
	var hdr datagramHeaders
	srcs := []netip.AddrPort{netip.MustParseAddrPort("10.0.0.1:49152"), netip.MustParseAddrPort("10.0.0.2:49153"),
		netip.MustParseAddrPort("[fd00::1]:49152")}
	payload := make([]byte, 3000)
	for i := range 500 {
		k := rng.IntN(len(srcs))
		dst := netip.AddrPortFrom(netip.MustParseAddr("10.0.0.9"), UDPPort)
		if srcs[k].Addr().Is6() {
			dst = netip.AddrPortFrom(netip.MustParseAddr("fd00::2"), UDPPort)
		}
		dg := netio.Datagram{Src: srcs[k], Dst: dst, TOS: uint8(rng.IntN(2)), TTL: 64 + uint8(rng.IntN(2)),
			Payload: payload[:minIBLen+ICRCLen+rng.IntN(3)]}
		var f Frame
		if v := d.datagramFrame(&f, &dg, &hdr); v != verdictDelivered {
			t.Fatalf("datagram %d: verdict %v", i, v)
		}
		var want [IPv6Len + UDPLen]byte
		n := header.EncodeIPUDP(want[:], dg.Src.Addr().Is4(), &header.IPUDPFields{Src: dg.Src, Dst: dg.Dst, TOS: dg.TOS, TTL: dg.TTL, PayloadLen: len(dg.Payload)})
		if got := append(bytes.Clone(f.IP), f.UDP...); !bytes.Equal(got, want[:n]) {
			t.Fatalf("datagram %d (%+v): headers\n% x, want\n% x", i, dg, got, want[:n])
		}
	}
}
