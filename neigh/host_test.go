package neigh_test

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

	"github.com/softrdma/softrdma/header"
	"github.com/softrdma/softrdma/neigh"
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

func newHost(t *testing.T) *neigh.Host {
	t.Helper()
	return neigh.NewHost(neigh.HostConfig{MAC: hostMAC, Addrs: []netip.Addr{host4, host6}})
}

// serialize builds a frame with gopacket, checksums and lengths computed: the
// independent reference for the frames Host builds by hand.
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

func out(h *neigh.Host, now time.Time) [][]byte {
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

func wantResolved(t *testing.T, h *neigh.Host, now time.Time, ip netip.Addr, mac [6]byte) {
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
	if _, err := h.Resolve(t0, third4); !errors.Is(err, neigh.ErrPending) {
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
	if _, err := h.Resolve(t0.Add(2*time.Second), third4); !errors.Is(err, neigh.ErrPending) {
		t.Fatalf("Resolve during retries: %v", err)
	}
	wantFrames(t, "give up", out(h, t0.Add(3*time.Second)))
	if _, err := h.Resolve(t0.Add(3*time.Second), third4); !errors.Is(err, neigh.ErrUnreachable) {
		t.Fatalf("Resolve after 3 unanswered requests: %v, want unreachable", err)
	}
	if _, ok := h.NextDeadline(); ok {
		t.Error("a deadline after giving up")
	}
	// A second round after RetransTime, answered this time.
	now := t0.Add(4 * time.Second)
	if _, err := h.Resolve(now, third4); !errors.Is(err, neigh.ErrPending) {
		t.Fatalf("Resolve in a new round: %v", err)
	}
	wantFrames(t, "new round", out(h, now), req)
	h.HandleFrame(now, arpFrame(t, layers.ARPReply, hostMAC[:], thirdMAC, third4, hostMAC, host4))
	wantResolved(t, h, now, third4, thirdMAC)
	if _, ok := h.NextDeadline(); ok {
		t.Error("a deadline after the answer")
	}
	// Past ReachableTime the entry is still used, and confirmed by unicast.
	later := now.Add(neigh.DefaultReachableTime)
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
		{"link-local GID", solicited(neigh.LinkLocalAddr(hostMAC)), neigh.LinkLocalAddr(hostMAC), solicitedMAC(neigh.LinkLocalAddr(hostMAC))},
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
	binary.BigEndian.PutUint16(zeroOpt[header.EthernetLen+header.IPv6Len+2:], 0)
	src, dst := peer6, solicited(host6)
	binary.BigEndian.PutUint16(zeroOpt[header.EthernetLen+header.IPv6Len+2:], header.ICMPv6Checksum(src, dst, zeroOpt[header.EthernetLen+header.IPv6Len:]))
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
	if _, err := h.Resolve(t0, third6); !errors.Is(err, neigh.ErrPending) {
		t.Fatalf("Resolve: %v", err)
	}
	wantFrames(t, "solicitation", out(h, t0),
		ndFrame(t, layers.ICMPv6TypeNeighborSolicitation, hostMAC, solicitedMAC(third6), host6, solicited(third6), third6, 0, hostMAC[:], 255))
	// An unsolicited advertisement of another address teaches nothing (no entry).
	h.HandleFrame(t0, ndFrame(t, layers.ICMPv6TypeNeighborAdvertisement, peerMAC, net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1}, peer6, netip.MustParseAddr("ff02::1"), peer6, naOverride, peerMAC[:], 255))
	if _, err := h.Resolve(t0, peer6); !errors.Is(err, neigh.ErrPending) {
		t.Fatalf("learned from an unsolicited advertisement: %v", err)
	}
	h.HandleFrame(t0, ndFrame(t, layers.ICMPv6TypeNeighborAdvertisement, thirdMAC, hostMAC[:], third6, host6, third6, naSolicited|naOverride, thirdMAC[:], 255))
	wantResolved(t, h, t0, third6, thirdMAC)
	// A link-local target is asked from our link-local address.
	ll := netip.MustParseAddr("fe80::99")
	h.Resolve(t0, ll)
	frames := out(h, t0)
	wantFrames(t, "link-local solicitation", frames[len(frames)-1:],
		ndFrame(t, layers.ICMPv6TypeNeighborSolicitation, hostMAC, solicitedMAC(ll), neigh.LinkLocalAddr(hostMAC), solicited(ll), ll, 0, hostMAC[:], 255))
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
	msg := f[header.EthernetLen+header.IPv6Len:]
	if got := header.ICMPv6Checksum(peer6, solicited(host6), msg); got != 0 {
		t.Errorf("checksum over a good message = %#x, want 0", got)
	}
	want := binary.BigEndian.Uint16(msg[2:])
	m := bytes.Clone(msg)
	m[2], m[3] = 0, 0
	if got := header.ICMPv6Checksum(peer6, solicited(host6), m); got != want {
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
			if len(o) < header.EthernetLen || [6]byte(o[6:12]) != hostMAC {
				t.Fatalf("sent % x", o)
			}
			switch binary.BigEndian.Uint16(o[12:]) {
			case neigh.EtherTypeARP:
				if len(o) != 60 {
					t.Fatalf("ARP frame of %d bytes", len(o))
				}
			case header.EtherTypeIPv6:
				ip := o[header.EthernetLen:]
				src, dst := netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
				if header.ICMPv6Checksum(src, dst, ip[header.IPv6Len:]) != 0 || ip[7] != 255 {
					t.Fatalf("bad NDP frame % x", o)
				}
			default:
				t.Fatalf("sent ethertype %#x", binary.BigEndian.Uint16(o[12:]))
			}
		}
		if _, err := h.Resolve(t0, peer4); err != nil && !errors.Is(err, neigh.ErrPending) {
			t.Fatalf("Resolve after input: %v", err)
		}
	})
}
