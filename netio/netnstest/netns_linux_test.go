//go:build linux

package netnstest

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"
)

// rootInterfaces describes the calling process's (root) namespace interfaces.
func rootInterfaces(t *testing.T) string {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	for _, ifi := range ifs {
		addrs, _ := ifi.Addrs()
		fmt.Fprintf(&sb, "%d %s %d %v %v\n", ifi.Index, ifi.Name, ifi.MTU, ifi.Flags, addrs)
	}
	return sb.String()
}

func TestNewIsEmptyAndSeparate(t *testing.T) {
	Require(t)
	before := rootInterfaces(t)
	const sysctl = "/proc/sys/net/ipv6/conf/default/accept_dad"
	dadBefore, _ := os.ReadFile(sysctl)
	ns := New(t)
	if !strings.HasPrefix(ns.Name(), NamePrefix) {
		t.Errorf("name %q lacks prefix %q", ns.Name(), NamePrefix)
	}
	var names []string
	ns.MustDo(t, func() error {
		ifs, err := net.Interfaces()
		for _, ifi := range ifs {
			names = append(names, ifi.Name)
			if ifi.Name == "lo" && ifi.Flags&net.FlagUp == 0 {
				return fmt.Errorf("lo is down")
			}
		}
		return err
	})
	if len(names) != 1 || names[0] != "lo" {
		t.Errorf("new namespace has interfaces %v, want only lo", names)
	}
	var dadInside []byte
	ns.MustDo(t, func() (err error) {
		dadInside, err = os.ReadFile(sysctl)
		return err
	})
	if strings.TrimSpace(string(dadInside)) != "0" {
		t.Errorf("accept_dad inside = %q, want 0", dadInside)
	}
	if dadAfter, _ := os.ReadFile(sysctl); string(dadAfter) != string(dadBefore) {
		t.Errorf("root accept_dad changed from %q to %q", dadBefore, dadAfter)
	}
	if after := rootInterfaces(t); after != before {
		t.Errorf("root namespace changed:\nbefore:\n%safter:\n%s", before, after)
	}
}

func TestPairUDP(t *testing.T) {
	Require(t)
	before := rootInterfaces(t)
	p := NewPair(t, PairConfig{MTU: 4000})
	if p.A.Index == p.B.Index {
		t.Errorf("both ends have index %d", p.A.Index)
	}
	if p.A.MTU != 4000 || p.B.MTU != 4000 {
		t.Errorf("MTUs %d/%d, want 4000", p.A.MTU, p.B.MTU)
	}
	if len(p.A.MAC) != 6 || len(p.B.MAC) != 6 || p.A.MAC.String() == p.B.MAC.String() {
		t.Errorf("MACs %v %v", p.A.MAC, p.B.MAC)
	}
	for _, fam := range []struct {
		name string
		a, b netip.Addr
	}{
		{"ipv4", p.A.IPv4.Addr(), p.B.IPv4.Addr()},
		{"ipv6", p.A.IPv6.Addr(), p.B.IPv6.Addr()},
	} {
		t.Run(fam.name, func(t *testing.T) {
			var ca, cb *net.UDPConn
			p.A.NS.MustDo(t, func() (err error) {
				ca, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(fam.a, 0)))
				return err
			})
			defer ca.Close()
			p.B.NS.MustDo(t, func() (err error) {
				cb, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(fam.b, 0)))
				return err
			})
			defer cb.Close()
			msg := []byte("hello across the veth")
			if _, err := ca.WriteTo(msg, cb.LocalAddr()); err != nil {
				t.Fatal(err)
			}
			cb.SetReadDeadline(time.Now().Add(5 * time.Second))
			buf := make([]byte, 100)
			n, from, err := cb.ReadFromUDPAddrPort(buf)
			if err != nil {
				t.Fatal(err)
			}
			if string(buf[:n]) != string(msg) || from.Addr() != fam.a {
				t.Fatalf("got %q from %v", buf[:n], from)
			}
		})
	}
	// The pair's addresses exist only inside the namespaces.
	if after := rootInterfaces(t); after != before {
		t.Errorf("root namespace changed:\nbefore:\n%safter:\n%s", before, after)
	}
	if _, err := net.InterfaceByName(LinkA); err == nil {
		t.Errorf("%s visible in the root namespace", LinkA)
	}
}

func TestAddNeighbor(t *testing.T) {
	Require(t)
	p := NewPair(t, PairConfig{})
	mac := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x42}
	ip := netip.AddrFrom4([4]byte{10, 99, p.A.IPv4.Addr().As4()[2], 77})
	if err := p.A.NS.AddNeighbor(p.A.Link, ip, mac); err != nil {
		t.Fatal(err)
	}
}

func TestMount(t *testing.T) {
	Require(t)
	t.Setenv(MountEnv, "1")
	ns := New(t)
	path := "/run/netns/" + ns.Name()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("bind mount missing: %v", err)
	}
	ns.Close()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("bind mount %s left after Close: %v", path, err)
	}
}
