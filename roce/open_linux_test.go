//go:build linux

package roce_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/neigh"
	"github.com/softrdma/softrdma/netio"
	"github.com/softrdma/softrdma/netio/netnstest"
	"github.com/softrdma/softrdma/roce"
)

// openIn opens a device inside ns and runs it until the test ends; cleanup
// closes it and checks that Run ended cleanly.
func openIn(t *testing.T, ns *netnstest.NS, cfg roce.OpenConfig) *roce.Device {
	t.Helper()
	var d *roce.Device
	ns.MustDo(t, func() (err error) {
		d, err = roce.Open(cfg)
		return err
	})
	runDevice(t, d)
	return d
}

// runDevice runs d until the test ends. The function it returns closes d and
// waits for Run to end (at once, or at cleanup).
func runDevice(t *testing.T, d *roce.Device) (stop func()) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- d.Run(context.Background(), netio.SystemClock{}) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			if err := d.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
				t.Errorf("Close: %v", err)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Error("Run did not end after Close")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// exchange connects a new RC QP on a to a new one on b with the given address
// handles and runs RDMA WRITEs (a to b), a READ (a from b) and a SEND (b to
// a), checking every byte.
func exchange(t *testing.T, a, b *roce.Device, ahAB, ahBA ibtransport.AddressHandle) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	qa, cqa, mra := setupQP(t, a)
	qb, cqb, mrb := setupQP(t, b)
	mtu := min(a.PathMTU(), b.PathMTU())
	connectAH(t, qa, qb, ahAB, mtu, 0xfffff0, 7, 17)
	connectAH(t, qb, qa, ahBA, mtu, 7, 0xfffff0, 17)
	wait := completionWaiter(t, ctx, func() string {
		return fmt.Sprintf("counters a %+v b %+v", a.Counters(), b.Counters())
	})
	writeReadSend(t, wait, qa, qb, cqa, cqb, mra, mrb, 4, 4*12000)
	// The reasons behind the devices' EngineDrops (checkClean), for the log.
	for _, q := range []struct {
		name string
		qp   *ibtransport.QP
	}{{"a", qa}, {"b", qb}} {
		for r, n := range q.qp.Counters().Drops {
			if n != 0 {
				t.Logf("QP %s (%#x) dropped %d packets: %v", q.name, q.qp.QPN(), n, ibtransport.DropReason(r))
			}
		}
	}
}

func ah(t *testing.T, d *roce.Device, dst netip.Addr, v roce.Version) ibtransport.AddressHandle {
	t.Helper()
	h, err := d.AddressHandleVersion(dst, v)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// wantGIDs is the table Linux gives rxe on a NewPair side: the link-local GID,
// the IPv4-mapped address, the IPv6 one.
func wantGIDs(s netnstest.Side) []netip.Addr {
	return []netip.Addr{roce.LinkLocalGID([6]byte(s.MAC)), netip.AddrFrom16(s.IPv4.Addr().As16()), s.IPv6.Addr()}
}

func checkGIDs(t *testing.T, name string, d *roce.Device, want []netip.Addr) {
	t.Helper()
	if got := d.GIDs(); !slices.Equal(got, want) {
		t.Errorf("device %s GIDs %v, want %v", name, got, want)
	}
}

// TestOpenUDPNetns opens udp devices bound to each namespace's addresses
// (IPv4 and IPv6, one device each) and runs RC traffic between them.
func TestOpenUDPNetns(t *testing.T) {
	p := netnstest.NewPair(t, netnstest.PairConfig{})
	for _, v6 := range []bool{false, true} {
		addr := func(s netnstest.Side) netip.Addr {
			if v6 {
				return s.IPv6.Addr()
			}
			return s.IPv4.Addr()
		}
		a := openIn(t, p.A.NS, roce.OpenConfig{Backend: roce.BackendUDP, Interface: p.A.Link, Addrs: []netip.Addr{addr(p.A)}, Engine: ibtransport.ContextConfig{Seed: 1}})
		b := openIn(t, p.B.NS, roce.OpenConfig{Interface: p.B.Link, Addrs: []netip.Addr{addr(p.B)}, Engine: ibtransport.ContextConfig{Seed: 2}})
		checkGIDs(t, "a", a, wantGIDs(p.A))
		checkGIDs(t, "b", b, wantGIDs(p.B))
		if a.PathMTU() != 1024 {
			t.Errorf("path MTU %d on a 1500-byte veth, want 1024", a.PathMTU())
		}
		exchange(t, a, b, ah(t, a, addr(p.B), roce.RoCEv2), ah(t, b, addr(p.A), roce.RoCEv2))
		checkClean(t, "a", a)
		checkClean(t, "b", b)
	}
	// With no address the interface's first IPv4 one is bound.
	var d *roce.Device
	p.A.NS.MustDo(t, func() (err error) {
		d, err = roce.Open(roce.OpenConfig{Interface: p.A.Link, UDPPort: 4792})
		return err
	})
	defer d.Close()
	if got := d.Endpoint().(*netio.UDPEndpoint).LocalAddr(); got != netip.AddrPortFrom(p.A.IPv4.Addr(), 4792) {
		t.Errorf("bound %v, want %v:4792", got, p.A.IPv4.Addr())
	}
}

func noNeighbor(t *testing.T, s netnstest.Side, ips ...netip.Addr) {
	t.Helper()
	s.NS.MustDo(t, func() error {
		rt, err := neigh.DialNetlink()
		if err != nil {
			return err
		}
		defer rt.Close()
		for _, ip := range ips {
			if state, _, err := rt.Neighbor(ip, s.Index); err != nil || state&neigh.NUDValid != 0 {
				t.Errorf("%s: neighbour %v already has state %#x (%v)", s.Link, ip, state, err)
			}
		}
		return nil
	})
}

func kernelNeighbor(t *testing.T, s netnstest.Side, ip netip.Addr) [6]byte {
	t.Helper()
	var mac [6]byte
	s.NS.MustDo(t, func() error {
		rt, err := neigh.DialNetlink()
		if err != nil {
			return err
		}
		defer rt.Close()
		state, m, err := rt.Neighbor(ip, s.Index)
		if err != nil || state&neigh.NUDValid == 0 {
			t.Errorf("%s: neighbour %v state %#x (%v), want a valid entry", s.Link, ip, state, err)
		}
		mac = m
		return nil
	})
	return mac
}

// TestOpenAFPacketNetns runs RC traffic between afpacket devices on the two
// ends of a veth pair, over IPv4 and IPv6, starting with empty neighbour
// tables: the devices have the kernel resolve the peers (NTF_USE).
func TestOpenAFPacketNetns(t *testing.T) {
	p := netnstest.NewPair(t, netnstest.PairConfig{})
	noNeighbor(t, p.A, p.B.IPv4.Addr(), p.B.IPv6.Addr())
	noNeighbor(t, p.B, p.A.IPv4.Addr(), p.A.IPv6.Addr())
	a := openIn(t, p.A.NS, roce.OpenConfig{Backend: roce.BackendAFPacket, Interface: p.A.Link, Engine: ibtransport.ContextConfig{Seed: 1}})
	b := openIn(t, p.B.NS, roce.OpenConfig{Backend: roce.BackendAFPacket, Interface: p.B.Link, Engine: ibtransport.ContextConfig{Seed: 2}})
	checkGIDs(t, "a", a, wantGIDs(p.A))
	checkGIDs(t, "b", b, wantGIDs(p.B))
	t.Run("IPv4", func(t *testing.T) {
		exchange(t, a, b, ah(t, a, p.B.IPv4.Addr(), roce.RoCEv2), ah(t, b, p.A.IPv4.Addr(), roce.RoCEv2))
	})
	t.Run("IPv6", func(t *testing.T) {
		exchange(t, a, b, ah(t, a, p.B.IPv6.Addr(), roce.RoCEv2), ah(t, b, p.A.IPv6.Addr(), roce.RoCEv2))
	})
	checkClean(t, "a", a)
	checkClean(t, "b", b)
	// The reserved port kept the kernels from answering RoCEv2 datagrams
	// with ICMP port unreachable.
	for _, s := range []netnstest.Side{p.A, p.B} {
		if n := snmp(t, s.NS, "Udp", "NoPorts"); n != 0 {
			t.Errorf("%s: %d UDP datagrams to no port", s.Link, n)
		}
		if n := snmp(t, s.NS, "Icmp", "OutDestUnreachs"); n != 0 {
			t.Errorf("%s: %d ICMP destination unreachable sent", s.Link, n)
		}
	}
	for _, tc := range []struct {
		name     string
		d        *roce.Device
		s        netnstest.Side
		peer     netnstest.Side
		peerMACs []netip.Addr
	}{
		{"a", a, p.A, p.B, []netip.Addr{p.B.IPv4.Addr(), p.B.IPv6.Addr()}},
		{"b", b, p.B, p.A, []netip.Addr{p.A.IPv4.Addr(), p.A.IPv6.Addr()}},
	} {
		st := tc.d.Neighbors().(*neigh.Kernel).Stats()
		if st.Uses == 0 || st.Resolved < 2 || st.Failed != 0 {
			t.Errorf("%s: neighbour stats %+v: want both peers resolved by the kernel", tc.name, st)
		}
		for _, ip := range tc.peerMACs {
			if mac := kernelNeighbor(t, tc.s, ip); mac != [6]byte(tc.peer.MAC) {
				t.Errorf("%s: kernel has %v at %v, want %v", tc.name, ip, net.HardwareAddr(mac[:]), tc.peer.MAC)
			}
		}
	}
}

// snmp returns a counter of the namespace's /proc/net/snmp, e.g. Udp NoPorts.
func snmp(t *testing.T, ns *netnstest.NS, group, name string) int64 {
	t.Helper()
	var data []byte
	ns.MustDo(t, func() (err error) {
		data, err = os.ReadFile("/proc/thread-self/net/snmp")
		return err
	})
	var header []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != group+":" {
			continue
		}
		if header == nil {
			header = f
			continue
		}
		for i, h := range header {
			if h == name && i < len(f) {
				n, _ := strconv.ParseInt(f[i], 10, 64)
				return n
			}
		}
	}
	t.Fatalf("no %s %s in /proc/net/snmp", group, name)
	return 0
}

// captureFrames receives a device's capture (pcap, through its
// CaptureWriter, which the device's Close flushes); the test reads it once
// the device's Run has ended.
type captureFrames struct{ bytes.Buffer }

// writer returns the CaptureWriter for OpenConfig.CaptureWriter.
func (c *captureFrames) writer(t *testing.T) *netio.CaptureWriter {
	t.Helper()
	w, err := netio.NewCaptureWriter(&c.Buffer, netio.FormatPcap)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// TestOpenAFPacketRoCEv1 runs RC traffic as RoCEv1 between afpacket devices,
// with IPv4-mapped GIDs (resolved through the kernel) and with the
// link-local GIDs (whose MACs they name), and checks in a capture of a's
// frames (OpenConfig.CaptureWriter) that every one is RoCEv1 with a GRH built from
// the GIDs, and that its ICRC verifies.
func TestOpenAFPacketRoCEv1(t *testing.T) {
	p := netnstest.NewPair(t, netnstest.PairConfig{MTU: 9000})
	var capA captureFrames
	var a *roce.Device
	p.A.NS.MustDo(t, func() (err error) {
		a, err = roce.Open(roce.OpenConfig{Backend: roce.BackendAFPacket, Interface: p.A.Link, Version: roce.RoCEv1,
			CaptureWriter: capA.writer(t), Engine: ibtransport.ContextConfig{Seed: 1}})
		return err
	})
	stopA := runDevice(t, a)
	b := openIn(t, p.B.NS, roce.OpenConfig{Backend: roce.BackendAFPacket, Interface: p.B.Link, Version: roce.RoCEv1, Engine: ibtransport.ContextConfig{Seed: 2}})
	if a.PathMTU() != 4096 {
		t.Errorf("path MTU %d on a 9000-byte veth, want 4096", a.PathMTU())
	}
	llA, llB := roce.LinkLocalGID([6]byte(p.A.MAC)), roce.LinkLocalGID([6]byte(p.B.MAC))
	abMapped, err := a.AddressHandle(p.B.IPv4.Addr()) // the device's Version: RoCEv1
	if err != nil {
		t.Fatal(err)
	}
	exchange(t, a, b, abMapped, ah(t, b, p.A.IPv4.Addr(), roce.RoCEv1))
	exchange(t, a, b, ah(t, a, llB, roce.RoCEv1), ah(t, b, llA, roce.RoCEv1))
	checkClean(t, "a", a)
	checkClean(t, "b", b)
	stopA()
	frames := readCapture(t, &capA.Buffer)
	if len(frames) < 40 {
		t.Fatalf("captured %d frames, want the whole exchange", len(frames))
	}
	gids := map[netip.Addr]bool{llA: true, llB: true, netip.AddrFrom16(p.A.IPv4.Addr().As16()): true, netip.AddrFrom16(p.B.IPv4.Addr().As16()): true}
	for i, fr := range frames {
		var f roce.Frame
		if err := f.DecodeEthernet(fr); err != nil || f.Version != roce.RoCEv1 {
			t.Fatalf("frame %d: %v, version %v: want RoCEv1", i, err, f.Version)
		}
		if !gids[f.Src] || !gids[f.Dst] || f.Src.Is4In6() != f.Dst.Is4In6() {
			t.Fatalf("frame %d: GRH %v -> %v", i, f.Src, f.Dst)
		}
		if err := roce.VerifyICRC(&f); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
	}
}

// TestOpenTAP makes two softrdma hosts behind two TAP devices in one Linux
// bridge (which has addresses of its own, so the kernel is a third host):
// RC traffic runs between them over IPv4 and IPv6 with softrdma answering ARP
// and NDP itself; then the kernel resolves both softrdma hosts (ARP and NDP,
// through NTF_USE) and softrdma resolves the kernel.
func TestOpenTAP(t *testing.T) {
	ns := netnstest.New(t)
	const bridge = "srbr0"
	br4, br6 := netip.MustParsePrefix("10.98.0.1/24"), netip.MustParsePrefix("fd98::1/64")
	var brIndex int
	ns.MustDo(t, func() error {
		rt, err := neigh.DialNetlink()
		if err != nil {
			return err
		}
		defer rt.Close()
		if err := rt.AddBridge(bridge); err != nil {
			return err
		}
		ifi, err := net.InterfaceByName(bridge)
		if err != nil {
			return err
		}
		brIndex = ifi.Index
		for _, p := range []netip.Prefix{br4, br6} {
			if err := rt.AddAddress(ifi.Index, p); err != nil {
				return err
			}
		}
		return rt.SetUp(ifi.Index)
	})
	type host struct {
		name   string
		mac    [6]byte
		v4, v6 netip.Addr
		dev    *roce.Device
	}
	hosts := []*host{
		{name: "srtapA", mac: [6]byte{0x02, 0x98, 0, 0, 0, 0x11}, v4: netip.MustParseAddr("10.98.0.11"), v6: netip.MustParseAddr("fd98::11")},
		{name: "srtapB", mac: [6]byte{0x02, 0x98, 0, 0, 0, 0x12}, v4: netip.MustParseAddr("10.98.0.12"), v6: netip.MustParseAddr("fd98::12")},
	}
	for i, h := range hosts {
		h.dev = openIn(t, ns, roce.OpenConfig{Backend: roce.BackendTAP, Interface: h.name, MAC: h.mac[:],
			Addrs: []netip.Addr{h.v6, h.v4}, Engine: ibtransport.ContextConfig{Seed: uint64(i + 1)}})
		checkGIDs(t, h.name, h.dev, []netip.Addr{roce.LinkLocalGID(h.mac), netip.AddrFrom16(h.v4.As16()), h.v6})
		ns.MustDo(t, func() error {
			rt, err := neigh.DialNetlink()
			if err != nil {
				return err
			}
			defer rt.Close()
			ifi, err := net.InterfaceByName(h.name)
			if err != nil {
				return err
			}
			return rt.SetMaster(ifi.Index, brIndex)
		})
	}
	if err := ns.WaitRunning(bridge, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	a, b := hosts[0], hosts[1]
	t.Run("IPv4", func(t *testing.T) {
		exchange(t, a.dev, b.dev, ah(t, a.dev, b.v4, roce.RoCEv2), ah(t, b.dev, a.v4, roce.RoCEv2))
	})
	t.Run("IPv6", func(t *testing.T) {
		exchange(t, a.dev, b.dev, ah(t, a.dev, b.v6, roce.RoCEv2), ah(t, b.dev, a.v6, roce.RoCEv2))
	})
	t.Run("RoCEv1", func(t *testing.T) {
		exchange(t, a.dev, b.dev, ah(t, a.dev, b.v4, roce.RoCEv1), ah(t, b.dev, a.v4, roce.RoCEv1))
	})
	// One of the two asked for the other (ARP and NDP) and learned from the
	// answer; the other learned from the request.
	var replies, advertisements uint64
	for _, h := range hosts {
		checkClean(t, h.name, h.dev)
		st := h.dev.Neighbors().(*neigh.Host).Stats()
		replies += st.ARPRepliesOut
		advertisements += st.NAOut
		if st.ARPRequestsIn+st.ARPRepliesIn == 0 || st.NSIn+st.NAIn == 0 || st.Learned < 2 || st.Invalid != 0 {
			t.Errorf("%s: neighbour stats %+v", h.name, st)
		}
	}
	if replies == 0 || advertisements == 0 {
		t.Errorf("%d ARP replies and %d neighbor advertisements sent, want some of each", replies, advertisements)
	}

	// The kernel resolves the softrdma hosts.
	ns.MustDo(t, func() error {
		rt, err := neigh.DialNetlink()
		if err != nil {
			return err
		}
		defer rt.Close()
		for _, h := range hosts {
			for _, ip := range []netip.Addr{h.v4, h.v6} {
				if err := rt.UseNeighbor(ip, brIndex); err != nil {
					return err
				}
				deadline := time.Now().Add(5 * time.Second)
				for {
					state, mac, err := rt.Neighbor(ip, brIndex)
					if err != nil {
						return err
					}
					if state&neigh.NUDValid != 0 && mac == h.mac {
						break
					}
					if time.Now().After(deadline) {
						t.Errorf("the kernel did not resolve %v: state %#x mac %v", ip, state, net.HardwareAddr(mac[:]))
						break
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
		}
		return nil
	})
	// And softrdma resolves the kernel.
	brIfi, err := ns.Interface(bridge)
	if err != nil {
		t.Fatal(err)
	}
	nb := a.dev.Neighbors().(*neigh.Host)
	for _, ip := range []netip.Addr{br4.Addr(), br6.Addr()} {
		deadline := time.Now().Add(5 * time.Second)
		for {
			mac, err := nb.Resolve(time.Now(), ip)
			if err == nil {
				if mac != [6]byte(brIfi.HardwareAddr) {
					t.Errorf("%v resolved to %v, want %v", ip, net.HardwareAddr(mac[:]), brIfi.HardwareAddr)
				}
				break
			}
			if !errors.Is(err, roce.ErrNeighborPending) || time.Now().After(deadline) {
				t.Errorf("resolving the kernel's %v: %v", ip, err)
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// TestInterfaceGIDTable checks the GID order against the kernel's address
// lists on a veth with several addresses: IPv4 primaries in the order added,
// then secondaries (__inet_insert_ifa); IPv6 newest first within a scope,
// global before link-local (ipv6_link_dev_addr); the link-local address only
// once, as the default GID at index 0.
func TestInterfaceGIDTable(t *testing.T) {
	p := netnstest.NewPair(t, netnstest.PairConfig{})
	x := p.A.IPv4.Addr().As4()[2]
	secondary := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 99, x, 7}), 24)
	primary := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 98, x, 1}), 16)
	v6b := netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, 0x99, 7: x, 15: 9}), 64)
	for _, pfx := range []netip.Prefix{secondary, primary, v6b} {
		if err := p.A.NS.AddAddress(p.A.Link, pfx); err != nil {
			t.Fatal(err)
		}
	}
	mapped := func(a netip.Addr) netip.Addr { return netip.AddrFrom16(a.As16()) }
	want := []netip.Addr{
		roce.LinkLocalGID([6]byte(p.A.MAC)),
		mapped(p.A.IPv4.Addr()), mapped(primary.Addr()), mapped(secondary.Addr()),
		v6b.Addr(), p.A.IPv6.Addr(),
	}
	var got []netip.Addr
	p.A.NS.MustDo(t, func() (err error) {
		got, err = roce.InterfaceGIDTable(p.A.Link)
		return err
	})
	if !slices.Equal(got, want) {
		t.Errorf("GID table\n got %v\nwant %v", got, want)
	}
	d := openIn(t, p.A.NS, roce.OpenConfig{Backend: roce.BackendAFPacket, Interface: p.A.Link})
	checkGIDs(t, "afpacket", d, want)
	// The source GID of a handle is the first address of the family.
	if h := ah(t, d, p.B.IPv4.Addr(), roce.RoCEv2); h.SGIDIndex != 1 {
		t.Errorf("IPv4 handle SGID index %d, want 1", h.SGIDIndex)
	}
	if h := ah(t, d, p.B.IPv6.Addr(), roce.RoCEv2); h.SGIDIndex != 4 {
		t.Errorf("IPv6 handle SGID index %d, want 4", h.SGIDIndex)
	}
	if h := ah(t, d, roce.LinkLocalGID([6]byte(p.B.MAC)), roce.RoCEv2); h.SGIDIndex != 0 {
		t.Errorf("link-local handle SGID index %d, want 0", h.SGIDIndex)
	}
}

// TestOpenUDPLoopbackCapture needs no root: a udp device on loopback with
// a capture still sends IPv4 ID 0 (the policy is found through the capture
// wrapper), so traffic flows, and the capture holds RoCEv2 frames. The
// capture keeps the socket's zero-copy paths: the device reads datagrams
// where the kernel put them and sends payloads gathered from the MR.
func TestOpenUDPLoopbackCapture(t *testing.T) {
	var capA captureFrames
	ipA, ipB := netip.MustParseAddr("127.0.78.1"), netip.MustParseAddr("127.0.78.2")
	a, err := roce.Open(roce.OpenConfig{Addrs: []netip.Addr{ipA}, CaptureWriter: capA.writer(t), UDPPort: 14791, Engine: ibtransport.ContextConfig{Seed: 1}})
	if err != nil {
		t.Skipf("cannot open a UDP device on %v: %v", ipA, err)
	}
	if _, ok := a.Endpoint().(netio.DatagramReader); !ok {
		t.Error("--pcap turned the zero-copy receive path off: the capture is no DatagramReader")
	}
	if _, ok := a.Endpoint().(netio.DatagramWriter); !ok {
		t.Error("--pcap turned the datagram send path off: the capture is no DatagramWriter")
	}
	stopA := runDevice(t, a)
	b, err := roce.Open(roce.OpenConfig{Addrs: []netip.Addr{ipB}, UDPPort: 14791, Engine: ibtransport.ContextConfig{Seed: 2}})
	if err != nil {
		t.Skipf("cannot open a UDP device on %v: %v", ipB, err)
	}
	runDevice(t, b)
	exchange(t, a, b, ah(t, a, ipB, roce.RoCEv2), ah(t, b, ipA, roce.RoCEv2))
	checkClean(t, "a", a)
	checkClean(t, "b", b)
	stopA()
	frames := readCapture(t, &capA.Buffer)
	if len(frames) < 20 {
		t.Fatalf("captured %d frames", len(frames))
	}
	runs := 0
	for i, fr := range frames {
		if len(fr) < 14+20+8 || binary.BigEndian.Uint16(fr[12:]) != roce.EtherTypeIPv4 || binary.BigEndian.Uint16(fr[14+20+2:]) != 14791 {
			t.Fatalf("frame %d is not IPv4 UDP to port 14791: % x", i, fr[:min(len(fr), 48)])
		}
		// What a sent: the IPv4 ID it chose (a run's, where GSO sends
		// segment j with ID j) is the one its ICRC was computed for.
		var f roce.Frame
		if err := f.DecodeEthernetPort(fr, 14791); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if f.Src != ipA {
			continue
		}
		if err := roce.VerifyICRC(&f); err != nil {
			t.Fatalf("frame %d sent with IPv4 ID %d: %v", i, binary.BigEndian.Uint16(fr[14+4:]), err)
		}
		if binary.BigEndian.Uint16(fr[14+4:]) != 0 {
			runs++
		}
	}
	if gso, ok := a.Endpoint().(netio.DatagramWriter); ok {
		if n, _ := gso.IPv4Run(); n > 1 && runs == 0 {
			t.Error("no datagram of a sent as a GSO run (IPv4 ID > 0)")
		}
	}
	if _, err := roce.Open(roce.OpenConfig{Addrs: []netip.Addr{ipA}, Version: roce.RoCEv1}); err == nil {
		t.Error("RoCEv1 over the udp backend was accepted")
	}
}

// TestOpenTAPKernelAddrs gives the kernel's side of the TAP an address
// (OpenConfig.TAPKernelAddrs): the kernel and the device are then two hosts
// on the TAP's link, and the kernel resolves the device's IPv4 and IPv6
// addresses (ARP and NDP answered by the device).
func TestOpenTAPKernelAddrs(t *testing.T) {
	ns := netnstest.New(t)
	mac := [6]byte{0x02, 0x97, 0, 0, 0, 2}
	dev4, dev6 := netip.MustParseAddr("10.97.0.2"), netip.MustParseAddr("fd97::2")
	kern := []netip.Prefix{netip.MustParsePrefix("10.97.0.1/24"), netip.MustParsePrefix("fd97::1/64")}
	d := openIn(t, ns, roce.OpenConfig{Backend: roce.BackendTAP, Interface: "srtap0", MAC: mac[:], MTU: 4000,
		Addrs: []netip.Addr{dev4, dev6}, TAPKernelAddrs: kern})
	if d.PathMTU() != 2048 {
		t.Errorf("path MTU %d on a 4000-byte TAP, want 2048", d.PathMTU())
	}
	ns.MustDo(t, func() error {
		ifi, err := net.InterfaceByName("srtap0")
		if err != nil {
			return err
		}
		addrs, err := ifi.Addrs()
		if err != nil {
			return err
		}
		for _, p := range kern {
			found := false
			for _, a := range addrs {
				found = found || a.String() == p.String()
			}
			if !found {
				t.Errorf("the TAP lacks %v: %v", p, addrs)
			}
		}
		rt, err := neigh.DialNetlink()
		if err != nil {
			return err
		}
		defer rt.Close()
		for _, ip := range []netip.Addr{dev4, dev6} {
			if err := rt.UseNeighbor(ip, ifi.Index); err != nil {
				return err
			}
			deadline := time.Now().Add(5 * time.Second)
			for {
				state, got, err := rt.Neighbor(ip, ifi.Index)
				if err != nil {
					return err
				}
				if state&neigh.NUDValid != 0 && got == mac {
					break
				}
				if time.Now().After(deadline) {
					t.Errorf("the kernel did not resolve %v: state %#x", ip, state)
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		return nil
	})
	if c := d.Counters(); c.Neighbor < 2 {
		t.Errorf("device handled %d neighbour frames, want the kernel's ARP request and NS at least", c.Neighbor)
	}
}
