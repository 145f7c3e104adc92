package roce_test

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/neigh"
	"github.com/softrdma/softrdma/roce"
	"github.com/softrdma/softrdma/sim"
)

var (
	bcastMAC = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	peerMAC  = [6]byte{0x02, 0x00, 0x5e, 0x10, 0x00, 0x02}
)

// arpFrame builds an ARP frame with gopacket: an independent reference for
// the frames neigh.Host builds by hand.
func arpFrame(t testing.TB, op uint16, ethDst net.HardwareAddr, sha [6]byte, spa netip.Addr, tha [6]byte, tpa netip.Addr) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true},
		&layers.Ethernet{DstMAC: ethDst, SrcMAC: sha[:], EthernetType: layers.EthernetTypeARP},
		&layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
			Operation: op, SourceHwAddress: sha[:], SourceProtAddress: spa.AsSlice(), DstHwAddress: tha[:], DstProtAddress: tpa.AsSlice()}); err != nil {
		t.Fatal(err)
	}
	return bytes.Clone(buf.Bytes())
}

// TestDeviceResolvesWithARP runs RC WRITEs between two devices on a simulated
// switch that know nothing of each other: each is a host (Host), the
// first frames wait in the device's queue while ARP resolves the peer, and
// nothing is lost.
func TestDeviceResolvesWithARP(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		name := "IPv4"
		ipA, ipB := netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.1.0.2")
		if v6 {
			name = "IPv6"
			ipA, ipB = netip.MustParseAddr("fd01::1"), netip.MustParseAddr("fd01::2")
		}
		t.Run(name, func(t *testing.T) {
			p := &pair{net: sim.New(7), ipA: ipA, ipB: ipB}
			macA, macB := [6]byte{2, 0, 0, 0, 0, 1}, [6]byte{2, 0, 0, 0, 0, 2}
			p.macB = macB
			sw := p.net.AddSwitch("sw")
			pa, pb := p.net.AddNode("a", macA), p.net.AddNode("b", macB)
			link := sim.LinkConfig{Latency: 5 * time.Microsecond}
			p.net.ConnectSwitch(pa, sw, link)
			p.net.ConnectSwitch(pb, sw, link)
			na := neigh.NewHost(neigh.HostConfig{MAC: macA, Addrs: []netip.Addr{ipA}})
			nb := neigh.NewHost(neigh.HostConfig{MAC: macB, Addrs: []netip.Addr{ipB}})
			var err error
			if p.a, err = roce.NewDevice(roce.DeviceConfig{Endpoint: pa, MAC: macA, Addrs: []netip.Addr{ipA}, Neighbors: na, Engine: ibtransport.ContextConfig{Seed: 1}}); err != nil {
				t.Fatal(err)
			}
			if p.b, err = roce.NewDevice(roce.DeviceConfig{Endpoint: pb, MAC: macB, Addrs: []netip.Addr{ipB}, Neighbors: nb, Engine: ibtransport.ContextConfig{Seed: 2}}); err != nil {
				t.Fatal(err)
			}
			p.qa, p.cqa, p.mra = setupQP(t, p.a)
			p.qb, p.cqb, p.mrb = setupQP(t, p.b)
			connect(t, p.a, p.qa, p.qb, ipB, 100, 200)
			connect(t, p.b, p.qb, p.qa, ipA, 200, 100)
			p.write(t, 50, 3000)
			ca, cb := p.a.Counters(), p.b.Counters()
			if ca.Queued == 0 || ca.Unresolved != 0 || cb.Unresolved != 0 {
				t.Errorf("a queued %d and dropped %d unresolved frames, b dropped %d; want some queued, none dropped", ca.Queued, ca.Unresolved, cb.Unresolved)
			}
			if ca.Neighbor == 0 || cb.Neighbor == 0 {
				t.Errorf("neighbour frames handled: a %d, b %d", ca.Neighbor, cb.Neighbor)
			}
			if p.qa.Counters().Retransmissions != 0 {
				t.Errorf("%d retransmissions: the queued frames were lost", p.qa.Counters().Retransmissions)
			}
			if _, err := na.Resolve(p.net.Now(), ipB); err != nil {
				t.Errorf("a does not know b: %v", err)
			}
		})
	}
}

// TestDeviceDropsUnresolved aims a QP at an address nobody has: the queued
// frames are dropped and counted once resolution gives up, and the device
// stays idle (no busy deadline) afterwards.
func TestDeviceDropsUnresolved(t *testing.T) {
	n := sim.New(3)
	sw := n.AddSwitch("sw")
	mac := [6]byte{2, 0, 0, 0, 0, 1}
	port := n.AddNode("a", mac)
	n.ConnectSwitch(port, sw, sim.LinkConfig{Latency: time.Microsecond})
	ip := netip.MustParseAddr("10.1.0.1")
	d, err := roce.NewDevice(roce.DeviceConfig{Endpoint: port, MAC: mac, Addrs: []netip.Addr{ip},
		Neighbors: neigh.NewHost(neigh.HostConfig{MAC: mac, Addrs: []netip.Addr{ip}}), Engine: ibtransport.ContextConfig{Seed: 1}})
	if err != nil {
		t.Fatal(err)
	}
	qa, cq, mr := setupQP(t, d)
	peer, _, _ := setupQP(t, d) // only for a QPN
	// A short timeout: the QP must give up long before ARP does.
	connectTimeout(t, d, qa, peer, netip.MustParseAddr("10.1.0.99"), 1, 1, 10)
	if err := qa.PostSend(ibtransport.SendWR{WRID: 1, Opcode: ibtransport.WRRDMAWrite, Signaled: true,
		SGL: []ibtransport.SGE{mr.SGE(0, 100)}, RemoteAddr: 0x1000, RKey: 1}); err != nil {
		t.Fatal(err)
	}
	wc := make([]ibtransport.WC, 1)
	got := false
	err = n.Drive(10*time.Minute, func() bool { return got }, func(time.Time) bool {
		got = cq.Poll(wc) == 1
		return got
	}, d)
	if err != nil {
		t.Fatal(err)
	}
	if wc[0].Status == ibtransport.WCSuccess {
		t.Fatalf("completion %v, want an error (retries exhausted)", wc[0])
	}
	// The QP gave up long before ARP does (three requests a second apart):
	// the frames still queued are dropped when it does.
	err = n.Drive(10*time.Second, func() bool {
		c := d.Counters()
		return c.Queued > 0 && c.Unresolved == c.Queued
	}, nil, d)
	if err != nil && !errors.Is(err, sim.ErrStalled) { // stalled: all dropped, nothing left to do
		t.Fatal(err)
	}
	if c := d.Counters(); c.Queued == 0 || c.Unresolved != c.Queued {
		t.Fatalf("counters %+v: want every queued frame dropped as unresolved", c)
	}
	if at, ok := d.NextDeadline(); ok {
		t.Errorf("a deadline (%v) after everything was dropped", at)
	}
}
