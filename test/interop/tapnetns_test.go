package interop_test

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/netio/netnstest"
	"github.com/softrdma/softrdma/test/interop"
)

// tapNetns is two network namespaces joined by a veth pair, each end of which
// is a port of a Linux bridge (br0) in its namespace together with a TAP
// device: softrdma on the tap backend in A ↔ tap ↔ br0 ↔ veth ↔ br0 ↔ tap ↔
// softrdma in B. Each namespace's kernel holds the pair's addresses on its
// bridge (the out-of-band TCP exchange goes between those); each softrdma is a
// host of its own on the same segment, with its own MAC and its own addresses,
// answering ARP and NDP itself.
type tapNetns struct {
	sides [2]tapSide
}

// tapSide is one namespace of a tapNetns.
type tapSide struct {
	ns     *netnstest.NS
	kernel netip.Prefix // br0's IPv4 address: the TCP exchange's
	host   netip.Prefix // softrdma's IPv4 address behind the TAP device
	host6  netip.Prefix // softrdma's IPv6 address
}

// tapNetnsName is the TAP device each run creates in both namespaces.
const tapNetnsName = "srtap0"

// newTAPNetns builds the two namespaces, the veth pair and the bridges. All of
// it lives in the namespaces (gone at the test's cleanup); the root namespace
// is not touched.
func newTAPNetns(t *testing.T) *tapNetns {
	t.Helper()
	p := netnstest.NewPair(t, netnstest.PairConfig{})
	n := &tapNetns{}
	for i, s := range []netnstest.Side{p.A, p.B} {
		v4, v6 := s.IPv4.Addr().As4(), s.IPv6.Addr().As16()
		v4[3] += 10 // .11 and .12
		v6[15] += 0x10
		n.sides[i] = tapSide{ns: s.NS, kernel: s.IPv4,
			host:  netip.PrefixFrom(netip.AddrFrom4(v4), s.IPv4.Bits()),
			host6: netip.PrefixFrom(netip.AddrFrom16(v6), s.IPv6.Bits())}
		// The veth end's addresses move to the bridge: a bridge port's own
		// addresses would never see a frame.
		tapIP(t, s.NS, "addr", "flush", "dev", s.Link)
		// The bridge's MAC is set: by default a bridge takes the lowest of
		// its ports' MACs, so each run's TAP device (random MAC) could change
		// it, and the other kernel's ARP entry for it would be stale.
		mac := fmt.Sprintf("02:53:52:42:52:%02x", i+1)
		tapIP(t, s.NS, "link", "add", "br0", "address", mac, "type", "bridge", "stp_state", "0", "forward_delay", "0", "mcast_snooping", "0")
		tapIP(t, s.NS, "link", "set", s.Link, "master", "br0")
		tapIP(t, s.NS, "addr", "add", s.IPv4.String(), "dev", "br0")
		tapIP(t, s.NS, "addr", "add", s.IPv6.String(), "dev", "br0", "nodad")
		tapIP(t, s.NS, "link", "set", "br0", "up")
		if err := s.NS.WaitRunning("br0", 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// addTAPs creates a persistent TAP device tapNetnsName on each side's bridge,
// for softrdma to attach to (--tap-name / -d). The tap backend clears the
// device's persistence, so the device goes when softrdma closes it; cleanup
// removes it if softrdma never attached.
func (n *tapNetns) addTAPs(t *testing.T) {
	t.Helper()
	for _, s := range n.sides {
		tapIP(t, s.ns, "tuntap", "add", "dev", tapNetnsName, "mode", "tap")
		t.Cleanup(func() {
			interop.Start(t, s.ns.Do, "ip", "link", "del", tapNetnsName).Wait(30 * time.Second)
		})
		tapIP(t, s.ns, "link", "set", tapNetnsName, "master", "br0", "up")
	}
}

// stats returns `ip -s link` of the tap devices and the veth ends, for logs.
func (n *tapNetns) stats(t *testing.T) string {
	var sb strings.Builder
	for i, s := range n.sides {
		r := interop.Start(t, s.ns.Do, "ip", "-s", "link", "show").Wait(30 * time.Second)
		fmt.Fprintf(&sb, "namespace %c:\n%s", 'A'+i, r.Stdout)
	}
	return sb.String()
}

// tapIP runs ip with args inside ns, failing the test unless it succeeds.
func tapIP(t *testing.T, ns *netnstest.NS, args ...string) {
	t.Helper()
	if r := interop.Start(t, ns.Do, "ip", args...).Wait(30 * time.Second); !r.OK() {
		t.Fatalf("configuring namespace %s:\n%s", ns.Name(), r)
	}
}

// TestPingpongTAPNetns runs softrdma pingpong against itself, both on the tap
// backend, in two namespaces whose TAP devices are bridged to the two ends of
// a veth pair (tapNetns): RC over IPv4 and IPv6 at one and ten packets, and
// UD. Both sides must print rdma-core's format with agreeing addresses (the
// GIDs are the TAP hosts' own), the server's -c check must find every page,
// and both captures decode with no error and no malformed frame in tshark.
func TestPingpongTAPNetns(t *testing.T) {
	netnstest.Require(t)
	bin := interop.Softrdma(t)
	n := newTAPNetns(t)
	a, b := n.sides[0], n.sides[1]
	for _, c := range []pingpongCase{
		{mode: "rc", size: 4096},
		{mode: "rc", size: 10000, ipv6: true, events: true},
		{mode: "rc", size: 1000},
		{mode: "ud", size: 1024},
	} {
		t.Run(c.name("/tap-tap"), func(t *testing.T) {
			n.addTAPs(t)
			dir := t.TempDir()
			gid, wantA, wantB := "1", "::ffff:"+a.host.Addr().String(), "::ffff:"+b.host.Addr().String()
			if c.ipv6 {
				gid, wantA, wantB = "2", a.host6.Addr().String(), b.host6.Addr().String()
			}
			args := []string{"pingpong", c.mode, "-g", gid, "-n", strconv.Itoa(pingpongIters), "-s", strconv.Itoa(c.size), "-c", "--timeout", "60s",
				"--backend", "tap", "-d", tapNetnsName}
			if c.events {
				args = append(args, "-e")
			}
			srv := interop.Start(t, a.ns.Do, bin, append(args, "--tap-addr", a.host.String(), "--tap-addr", a.host6.String(),
				"--pcap", filepath.Join(dir, "server.pcap"))...)
			if !srv.WaitOutput("local address:", 30*time.Second) {
				t.Fatalf("server did not start:\n%s", srv.Wait(time.Second))
			}
			cli := interop.Start(t, b.ns.Do, bin, append(args, "--tap-addr", b.host.String(), "--tap-addr", b.host6.String(),
				"--pcap", filepath.Join(dir, "client.pcap"), a.kernel.Addr().String())...)
			cr, sr := cli.Wait(90*time.Second), srv.Wait(90*time.Second)
			if !cr.OK() || !sr.OK() {
				t.Fatalf("exchange failed\nclient:\n%s\nserver:\n%s\n%s", cr, sr, n.stats(t))
			}
			cl, crem := checkPingpongOutput(t, "client", cr.Stdout, c)
			sl, srem := checkPingpongOutput(t, "server", sr.Stdout, c)
			if cl != srem || sl != crem || sl.gid != wantA || cl.gid != wantB {
				t.Errorf("addresses: client %+v/%+v server %+v/%+v, want GIDs %s (server) and %s (client)", cl, crem, sl, srem, wantA, wantB)
			}
			for _, f := range []string{"server.pcap", "client.pcap"} {
				checkCapture(t, filepath.Join(dir, f), c)
			}
		})
	}
}

// TestPerfTAPNetns runs every perf test TestPerfNetns runs, at its sizes and
// iteration counts, between two softrdma processes on the tap backend in two
// namespaces whose TAP devices are bridged to the two ends of a veth pair
// (tapNetns), softrdma in A the server. The checks are TestPerfNetns's: both
// sides succeed with perftest's layout, agreeing keys and reports, the TAP
// hosts' own GIDs, and both captures decode with no error and no malformed
// frame in tshark.
func TestPerfTAPNetns(t *testing.T) {
	netnstest.Require(t)
	bin := interop.Softrdma(t)
	n := newTAPNetns(t)
	a, b := n.sides[0], n.sides[1]
	// TestPerfNetns's cases and a READ burst larger than a TAP queue of 500.
	cases := append(slices.Clone(netnsPerfCases), perfCase{tool: "ib_read_bw", size: 65536, iters: 100})
	for _, c := range cases {
		c.server, c.mtu = true, 1024
		t.Run("tap-tap/"+c.String(), func(t *testing.T) {
			n.addTAPs(t)
			dir := t.TempDir()
			common := append([]string{"perf", strings.TrimPrefix(c.tool, "ib_"), "--backend", "tap", "--tap-name", tapNetnsName, "-x", "1"}, c.args()...)
			srv := interop.Start(t, a.ns.Do, bin, append(common, "-d", a.host.String(), "--pcap", filepath.Join(dir, "server.pcap"))...)
			if !srv.WaitOutput("Waiting for client to connect", 30*time.Second) {
				t.Fatalf("server did not start:\n%s", srv.Wait(time.Second))
			}
			cli := interop.Start(t, b.ns.Do, bin, append(common, "-d", b.host.String(), "--pcap", filepath.Join(dir, "client.pcap"),
				a.kernel.Addr().String())...)
			cr, sr := cli.Wait(2*time.Minute), srv.Wait(2*time.Minute)
			if !cr.OK() || !sr.OK() {
				t.Fatalf("exchange failed\nclient:\n%s\nserver:\n%s\n%s", cr, sr, n.stats(t))
			}
			t.Logf("client: %s (client %v, server %v)", perfResultRow(cr.Stdout), cr.Duration.Round(time.Millisecond), sr.Duration.Round(time.Millisecond))
			cs, ss := checkPerfNetnsRun(t, c, cr, sr, dir)
			if len(cs.gid) > 0 && cs.gid[0] != "" && cs.gid[0] != "::ffff:"+b.host.Addr().String() {
				t.Errorf("client GID %v, want ::ffff:%v", cs.gid, b.host.Addr())
			}
			if len(ss.gid) > 0 && ss.gid[0] != "" && ss.gid[0] != "::ffff:"+a.host.Addr().String() {
				t.Errorf("server GID %v, want ::ffff:%v", ss.gid, a.host.Addr())
			}
		})
	}
}
