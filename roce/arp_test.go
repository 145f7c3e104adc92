package roce_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/roce"
	"github.com/softrdma/softrdma/sim"
)

var (
	hostMAC  = [6]byte{0x02, 0x00, 0x5e, 0x10, 0x00, 0x01}
	peerMAC  = [6]byte{0x02, 0x00, 0x5e, 0x10, 0x00, 0x02}
	thirdMAC = [6]byte{0x02, 0x00, 0x5e, 0x10, 0x00, 0x03}
	bcastMAC = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	host4    = netip.MustParseAddr("10.0.0.1")
	peer4    = netip.MustParseAddr("10.0.0.2")
	third4   = netip.MustParseAddr("10.0.0.3")
	host6    = netip.MustParseAddr("fd00::1")
	peer6    = netip.MustParseAddr("fd00::2")
	third6   = netip.MustParseAddr("fd00::3")
	t0       = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
)

func newHost(t *testing.T) *roce.HostNeighbors {
	t.Helper()
	return roce.NewHostNeighbors(roce.HostNeighborsConfig{MAC: hostMAC, Addrs: []netip.Addr{host4, host6}})
}

// serialize builds a frame with gopacket, checksums and lengths computed: the
// independent reference for the frames HostNeighbors builds by hand.
func serialize(t testing.TB, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	for _, l := range ls {
		if ic, ok := l.(*layers.ICMPv6); ok {
			for _, n := range ls {
				if ip, ok := n.(*layers.IPv6); ok {
					ic.SetNetworkLayerForChecksum(ip)
				}
			}
		}
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatal(err)
	}
	return bytes.Clone(buf.Bytes())
}

func arpFrame(t testing.TB, op uint16, ethDst net.HardwareAddr, sha [6]byte, spa netip.Addr, tha [6]byte, tpa netip.Addr) []byte {
	return serialize(t,
		&layers.Ethernet{DstMAC: ethDst, SrcMAC: sha[:], EthernetType: layers.EthernetTypeARP},
		&layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
			Operation: op, SourceHwAddress: sha[:], SourceProtAddress: spa.AsSlice(), DstHwAddress: tha[:], DstProtAddress: tpa.AsSlice()})
}

// ndFrame builds a neighbor solicitation (typ 135) or advertisement (136) with
// one link-layer address option (none if ll is nil).
func ndFrame(t testing.TB, typ uint8, ethSrc [6]byte, ethDst net.HardwareAddr, src, dst, target netip.Addr, flags uint8, ll []byte, hop uint8) []byte {
	ip := &layers.IPv6{Version: 6, NextHeader: layers.IPProtocolICMPv6, HopLimit: hop, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
	ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, 0)}
	var body gopacket.SerializableLayer
	if typ == layers.ICMPv6TypeNeighborSolicitation {
		ns := &layers.ICMPv6NeighborSolicitation{TargetAddress: target.AsSlice()}
		if ll != nil {
			ns.Options = layers.ICMPv6Options{{Type: layers.ICMPv6OptSourceAddress, Data: ll}}
		}
		body = ns
	} else {
		na := &layers.ICMPv6NeighborAdvertisement{Flags: flags, TargetAddress: target.AsSlice()}
		if ll != nil {
			na.Options = layers.ICMPv6Options{{Type: layers.ICMPv6OptTargetAddress, Data: ll}}
		}
		body = na
	}
	return serialize(t, &layers.Ethernet{DstMAC: ethDst, SrcMAC: ethSrc[:], EthernetType: layers.EthernetTypeIPv6}, ip, ic, body)
}

func solicitedMAC(a netip.Addr) net.HardwareAddr {
	b := a.As16()
	return net.HardwareAddr{0x33, 0x33, 0xff, b[13], b[14], b[15]}
}

func solicited(a netip.Addr) netip.Addr {
	b := a.As16()
	return netip.AddrFrom16([16]byte{0: 0xff, 1: 0x02, 11: 1, 12: 0xff, 13: b[13], 14: b[14], 15: b[15]})
}

const (
	naRouter    = 0x80
	naSolicited = 0x40
	naOverride  = 0x20
)

func out(h *roce.HostNeighbors, now time.Time) [][]byte {
	var frames [][]byte
	for _, f := range h.AppendFrames(now, nil) {
		frames = append(frames, bytes.Clone(f))
	}
	return frames
}

func wantFrames(t *testing.T, what string, got [][]byte, want ...[]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d frames sent, want %d", what, len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("%s: frame %d\n got % x\nwant % x", what, i, got[i], want[i])
		}
	}
}

func wantResolved(t *testing.T, h *roce.HostNeighbors, now time.Time, ip netip.Addr, mac [6]byte) {
	t.Helper()
	got, err := h.Resolve(now, ip)
	if err != nil || got != mac {
		t.Fatalf("Resolve(%v) = %v, %v; want %v", ip, net.HardwareAddr(got[:]), err, net.HardwareAddr(mac[:]))
	}
}

func TestHostNeighborsAnswersARP(t *testing.T) {
	h := newHost(t)
	req := arpFrame(t, layers.ARPRequest, bcastMAC, peerMAC, peer4, [6]byte{}, host4)
	if !h.HandleFrame(t0, req) {
		t.Fatal("ARP request not taken")
	}
	wantFrames(t, "reply", out(h, t0), arpFrame(t, layers.ARPReply, peerMAC[:], hostMAC, host4, peerMAC, peer4))
	// The requester is learned from a request for us (RFC 826).
	wantResolved(t, h, t0, peer4, peerMAC)
	wantResolved(t, h, t0, netip.AddrFrom16(peer4.As16()), peerMAC) // IPv4-mapped

	// A request for someone else is not answered and teaches nothing new.
	other := arpFrame(t, layers.ARPRequest, bcastMAC, thirdMAC, third4, [6]byte{}, peer4)
	h.HandleFrame(t0, other)
	if f := out(h, t0); len(f) != 0 {
		t.Fatalf("answered a request for another host: % x", f)
	}
	if st := h.Stats(); st.ARPRequestsIn != 2 || st.ARPRepliesOut != 1 || st.Learned != 1 {
		t.Errorf("stats %+v", st)
	}
	// An address probe (sender 0.0.0.0, RFC 5227) is answered, not learned.
	probe := arpFrame(t, layers.ARPRequest, bcastMAC, thirdMAC, netip.IPv4Unspecified(), [6]byte{}, host4)
	h.HandleFrame(t0, probe)
	wantFrames(t, "probe reply", out(h, t0), arpFrame(t, layers.ARPReply, thirdMAC[:], hostMAC, host4, thirdMAC, netip.IPv4Unspecified()))
	// Not ARP at all.
	if h.HandleFrame(t0, serialize(t, &layers.Ethernet{DstMAC: hostMAC[:], SrcMAC: peerMAC[:], EthernetType: layers.EthernetTypeIPv4}, gopacket.Payload(make([]byte, 40)))) {
		t.Error("an IPv4 frame was taken as ARP")
	}
}

// TestHostNeighborsResolvesARP follows one resolution through its retries,
// failure, second round and success.
func TestHostNeighborsResolvesARP(t *testing.T) {
	h := newHost(t)
	if _, err := h.Resolve(t0, third4); !errors.Is(err, roce.ErrNeighborPending) {
		t.Fatalf("first Resolve: %v, want pending", err)
	}
	req := arpFrame(t, layers.ARPRequest, bcastMAC, hostMAC, host4, [6]byte{}, third4)
	wantFrames(t, "request", out(h, t0), req)
	if d, ok := h.NextDeadline(); !ok || !d.Equal(t0.Add(time.Second)) {
		t.Fatalf("deadline %v %v, want t0+1s", d, ok)
	}
	wantFrames(t, "before the retry", out(h, t0.Add(500*time.Millisecond)))
	wantFrames(t, "retry 1", out(h, t0.Add(time.Second)), req)
	wantFrames(t, "retry 2", out(h, t0.Add(2*time.Second)), req)
	if _, err := h.Resolve(t0.Add(2*time.Second), third4); !errors.Is(err, roce.ErrNeighborPending) {
		t.Fatalf("Resolve during retries: %v", err)
	}
	wantFrames(t, "give up", out(h, t0.Add(3*time.Second)))
	if _, err := h.Resolve(t0.Add(3*time.Second), third4); !errors.Is(err, roce.ErrNeighborUnreachable) {
		t.Fatalf("Resolve after 3 unanswered requests: %v, want unreachable", err)
	}
	if _, ok := h.NextDeadline(); ok {
		t.Error("a deadline after giving up")
	}
	// A second round after RetransTime, answered this time.
	now := t0.Add(4 * time.Second)
	if _, err := h.Resolve(now, third4); !errors.Is(err, roce.ErrNeighborPending) {
		t.Fatalf("Resolve in a new round: %v", err)
	}
	wantFrames(t, "new round", out(h, now), req)
	h.HandleFrame(now, arpFrame(t, layers.ARPReply, hostMAC[:], thirdMAC, third4, hostMAC, host4))
	wantResolved(t, h, now, third4, thirdMAC)
	if _, ok := h.NextDeadline(); ok {
		t.Error("a deadline after the answer")
	}
	// Past ReachableTime the entry is still used, and confirmed by unicast.
	later := now.Add(roce.DefaultReachableTime)
	wantResolved(t, h, later, third4, thirdMAC)
	wantFrames(t, "confirmation", out(h, later), arpFrame(t, layers.ARPRequest, thirdMAC[:], hostMAC, host4, [6]byte{}, third4))
	if st := h.Stats(); st.ARPRequestsOut != 5 || st.Failed != 1 || st.ARPRepliesIn != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestHostNeighborsAnswersNDP(t *testing.T) {
	h := newHost(t)
	for _, tc := range []struct {
		name     string
		dst, tgt netip.Addr
		ethDst   net.HardwareAddr
	}{
		{"solicited-node multicast", solicited(host6), host6, solicitedMAC(host6)},
		{"unicast", host6, host6, hostMAC[:]},
		{"link-local GID", solicited(roce.LinkLocalGID(hostMAC)), roce.LinkLocalGID(hostMAC), solicitedMAC(roce.LinkLocalGID(hostMAC))},
	} {
		ns := ndFrame(t, layers.ICMPv6TypeNeighborSolicitation, peerMAC, tc.ethDst, peer6, tc.dst, tc.tgt, 0, peerMAC[:], 255)
		if !h.HandleFrame(t0, ns) {
			t.Fatalf("%s: NS not taken", tc.name)
		}
		wantFrames(t, tc.name, out(h, t0),
			ndFrame(t, layers.ICMPv6TypeNeighborAdvertisement, hostMAC, peerMAC[:], tc.tgt, peer6, tc.tgt, naSolicited|naOverride, hostMAC[:], 255))
	}
	wantResolved(t, h, t0, peer6, peerMAC)

	// Duplicate address detection: answered to all nodes, not solicited.
	dad := ndFrame(t, layers.ICMPv6TypeNeighborSolicitation, thirdMAC, solicitedMAC(host6), netip.IPv6Unspecified(), solicited(host6), host6, 0, nil, 255)
	h.HandleFrame(t0, dad)
	allNodes := netip.MustParseAddr("ff02::1")
	wantFrames(t, "DAD", out(h, t0),
		ndFrame(t, layers.ICMPv6TypeNeighborAdvertisement, hostMAC, net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1}, host6, allNodes, host6, naOverride, hostMAC[:], 255))

	// Invalid messages are counted and not answered (RFC 4861 7.1.1).
	good := ndFrame(t, layers.ICMPv6TypeNeighborSolicitation, peerMAC, solicitedMAC(host6), peer6, solicited(host6), host6, 0, peerMAC[:], 255)
	badSum := bytes.Clone(good)
	badSum[len(badSum)-1] ^= 0x10
	hop64 := ndFrame(t, layers.ICMPv6TypeNeighborSolicitation, peerMAC, solicitedMAC(host6), peer6, solicited(host6), host6, 0, peerMAC[:], 64)
	zeroOpt := bytes.Clone(good)
	zeroOpt[len(zeroOpt)-7] = 0 // option length 0
	binary.BigEndian.PutUint16(zeroOpt[roce.EthernetLen+roce.IPv6Len+2:], 0)
	src, dst := peer6, solicited(host6)
	binary.BigEndian.PutUint16(zeroOpt[roce.EthernetLen+roce.IPv6Len+2:], roce.ICMPv6Checksum(src, dst, zeroOpt[roce.EthernetLen+roce.IPv6Len:]))
	dadWithLL := ndFrame(t, layers.ICMPv6TypeNeighborSolicitation, thirdMAC, solicitedMAC(host6), netip.IPv6Unspecified(), solicited(host6), host6, 0, thirdMAC[:], 255)
	before := h.Stats().Invalid
	for _, f := range [][]byte{badSum, hop64, zeroOpt, dadWithLL} {
		if !h.HandleFrame(t0, f) {
			t.Fatal("an invalid NS was not taken")
		}
	}
	wantFrames(t, "invalid", out(h, t0))
	if got := h.Stats().Invalid - before; got != 4 {
		t.Errorf("Invalid counted %d, want 4", got)
	}
	// Every truncation of a valid frame is handled without a panic or answer.
	for n := range len(good) {
		h.HandleFrame(t0, good[:n])
	}
	wantFrames(t, "truncated", out(h, t0))
}

func TestHostNeighborsResolvesNDP(t *testing.T) {
	h := newHost(t)
	if _, err := h.Resolve(t0, third6); !errors.Is(err, roce.ErrNeighborPending) {
		t.Fatalf("Resolve: %v", err)
	}
	wantFrames(t, "solicitation", out(h, t0),
		ndFrame(t, layers.ICMPv6TypeNeighborSolicitation, hostMAC, solicitedMAC(third6), host6, solicited(third6), third6, 0, hostMAC[:], 255))
	// An unsolicited advertisement of another address teaches nothing (no entry).
	h.HandleFrame(t0, ndFrame(t, layers.ICMPv6TypeNeighborAdvertisement, peerMAC, net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1}, peer6, netip.MustParseAddr("ff02::1"), peer6, naOverride, peerMAC[:], 255))
	if _, err := h.Resolve(t0, peer6); !errors.Is(err, roce.ErrNeighborPending) {
		t.Fatalf("learned from an unsolicited advertisement: %v", err)
	}
	h.HandleFrame(t0, ndFrame(t, layers.ICMPv6TypeNeighborAdvertisement, thirdMAC, hostMAC[:], third6, host6, third6, naSolicited|naOverride, thirdMAC[:], 255))
	wantResolved(t, h, t0, third6, thirdMAC)
	// A link-local target is asked from our link-local address.
	ll := netip.MustParseAddr("fe80::99")
	h.Resolve(t0, ll)
	frames := out(h, t0)
	wantFrames(t, "link-local solicitation", frames[len(frames)-1:],
		ndFrame(t, layers.ICMPv6TypeNeighborSolicitation, hostMAC, solicitedMAC(ll), roce.LinkLocalGID(hostMAC), solicited(ll), ll, 0, hostMAC[:], 255))
	// Multicast needs no resolution.
	wantResolved(t, h, t0, netip.MustParseAddr("ff02::1:ff00:3"), [6]byte{0x33, 0x33, 0xff, 0, 0, 3})
	wantResolved(t, h, t0, netip.MustParseAddr("239.1.2.3"), [6]byte{0x01, 0x00, 0x5e, 0x01, 0x02, 0x03})
}

func TestHostNeighborsQueueBounded(t *testing.T) {
	h := newHost(t)
	for i := range 200 {
		h.Resolve(t0, netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}))
	}
	if n := len(out(h, t0)); n != 64 {
		t.Errorf("%d frames queued, want the bound 64", n)
	}
	if st := h.Stats(); st.QueueFull != 200-64 {
		t.Errorf("QueueFull %d, want %d", st.QueueFull, 200-64)
	}
}

func TestICMPv6Checksum(t *testing.T) {
	// A frame gopacket checksummed verifies to 0.
	f := ndFrame(t, layers.ICMPv6TypeNeighborSolicitation, peerMAC, solicitedMAC(host6), peer6, solicited(host6), host6, 0, peerMAC[:], 255)
	msg := f[roce.EthernetLen+roce.IPv6Len:]
	if got := roce.ICMPv6Checksum(peer6, solicited(host6), msg); got != 0 {
		t.Errorf("checksum over a good message = %#x, want 0", got)
	}
	want := binary.BigEndian.Uint16(msg[2:])
	m := bytes.Clone(msg)
	m[2], m[3] = 0, 0
	if got := roce.ICMPv6Checksum(peer6, solicited(host6), m); got != want {
		t.Errorf("checksum %#x, want gopacket's %#x", got, want)
	}
}

func FuzzHostNeighborsHandleFrame(f *testing.F) {
	f.Add(arpFrame(f, layers.ARPRequest, bcastMAC, peerMAC, peer4, [6]byte{}, host4))
	f.Add(arpFrame(f, layers.ARPReply, hostMAC[:], peerMAC, peer4, hostMAC, host4))
	f.Add(ndFrame(f, layers.ICMPv6TypeNeighborSolicitation, peerMAC, solicitedMAC(host6), peer6, solicited(host6), host6, 0, peerMAC[:], 255))
	f.Add(ndFrame(f, layers.ICMPv6TypeNeighborAdvertisement, peerMAC, hostMAC[:], peer6, host6, peer6, naSolicited|naOverride, peerMAC[:], 255))
	f.Fuzz(func(t *testing.T, frame []byte) {
		h := newHost(t)
		h.Resolve(t0, peer4)
		h.Resolve(t0, peer6)
		h.HandleFrame(t0, frame)
		for _, o := range h.AppendFrames(t0, nil) {
			// Whatever is sent is from us and well formed.
			if len(o) < roce.EthernetLen || [6]byte(o[6:12]) != hostMAC {
				t.Fatalf("sent % x", o)
			}
			switch binary.BigEndian.Uint16(o[12:]) {
			case roce.EtherTypeARP:
				if len(o) != 60 {
					t.Fatalf("ARP frame of %d bytes", len(o))
				}
			case roce.EtherTypeIPv6:
				ip := o[roce.EthernetLen:]
				src, dst := netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
				if roce.ICMPv6Checksum(src, dst, ip[roce.IPv6Len:]) != 0 || ip[7] != 255 {
					t.Fatalf("bad NDP frame % x", o)
				}
			default:
				t.Fatalf("sent ethertype %#x", binary.BigEndian.Uint16(o[12:]))
			}
		}
		if _, err := h.Resolve(t0, peer4); err != nil && !errors.Is(err, roce.ErrNeighborPending) {
			t.Fatalf("Resolve after input: %v", err)
		}
	})
}

// TestDeviceResolvesWithARP runs RC WRITEs between two devices on a simulated
// switch that know nothing of each other: each is a host (HostNeighbors), the
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
			na := roce.NewHostNeighbors(roce.HostNeighborsConfig{MAC: macA, Addrs: []netip.Addr{ipA}})
			nb := roce.NewHostNeighbors(roce.HostNeighborsConfig{MAC: macB, Addrs: []netip.Addr{ipB}})
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
		Neighbors: roce.NewHostNeighbors(roce.HostNeighborsConfig{MAC: mac, Addrs: []netip.Addr{ip}}), Engine: ibtransport.ContextConfig{Seed: 1}})
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
