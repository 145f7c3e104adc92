//go:build linux

package netns

import (
	"net"
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPairWithoutTB creates and closes a pair the way a program does (no
// testing.TB): the names carry the prefix, both ends are up and addressed,
// nothing shows in the root namespace, and Close is idempotent.
func TestPairWithoutTB(t *testing.T) {
	if err := Check(); err != nil {
		t.Skipf("netns: %v", err)
	}
	p, err := NewPair(PairConfig{MTU: 9000, Prefix: "softrdma-netns-test-"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, s := range []Side{p.A, p.B} {
		if !strings.HasPrefix(s.NS.Name(), "softrdma-netns-test-") {
			t.Errorf("name %q lacks the prefix", s.NS.Name())
		}
		if s.MTU != 9000 || s.Index == 0 || len(s.MAC) != 6 {
			t.Errorf("%s: MTU %d index %d MAC %v", s.Link, s.MTU, s.Index, s.MAC)
		}
		ifi, err := s.NS.Interface(s.Link)
		if err != nil || ifi.Flags&net.FlagUp == 0 {
			t.Errorf("%s: %v, flags %v", s.Link, err, ifi)
		}
	}
	// The pair is returned once both ends are operationally up (the
	// kernel's queue attached, WaitRunning); a loopback device has no
	// operational state of its own (IF_OPER_UNKNOWN).
	for _, c := range []struct {
		s    Side
		link string
		want byte
	}{{p.A, p.A.Link, ifOperUp}, {p.B, p.B.Link, ifOperUp}, {p.A, "lo", 0}} {
		var got byte
		err := c.s.NS.Do(func() error {
			idx, err := interfaceIndex(c.link)
			if err != nil {
				return err
			}
			r, err := dialRTNL()
			if err != nil {
				return err
			}
			defer r.close()
			got, err = r.operState(idx)
			return err
		})
		if err != nil || got != c.want {
			t.Errorf("%s %s: operational state %d, %v; want %d", c.s.NS.Name(), c.link, got, err, c.want)
		}
	}
	if _, err := net.InterfaceByName(LinkA); err == nil {
		t.Errorf("%s visible in the root namespace", LinkA)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestCurrent: Current's Do runs in this namespace without privilege (a
// socket bound to loopback there), it refuses every change to the host's
// interfaces, and its Close does nothing.
func TestCurrent(t *testing.T) {
	ns := Current()
	var ln net.Listener
	if err := ns.Do(func() (err error) {
		ln, err = net.Listen("tcp4", "127.0.0.1:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp4", ln.Addr().String()) // from outside Do: the same namespace
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	ln.Close()
	for name, change := range map[string]func() error{
		"LinkUp":     func() error { return ns.LinkUp("lo") },
		"SetMTU":     func() error { return ns.SetMTU("lo", 65536) },
		"AddAddress": func() error { return ns.AddAddress("lo", netip.MustParsePrefix("127.0.0.9/8")) },
		"AddNeighbor": func() error {
			return ns.AddNeighbor("lo", netip.MustParseAddr("127.0.0.9"), net.HardwareAddr{2, 0, 0, 0, 0, 1})
		},
	} {
		if err := change(); err == nil || !strings.Contains(err.Error(), "will not change") {
			t.Errorf("%s on Current: %v, want a refusal", name, err)
		}
	}
	if _, err := ns.Interface("lo"); err != nil {
		t.Errorf("Interface(lo): %v", err)
	}
	if err := ns.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ns.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestRTNLReplies: the one netlink exchange behind request and linkState
// hands back the kernel's errors (ENODEV for a link that does not exist,
// named by the request) and its replies (lo's operational state).
func TestRTNLReplies(t *testing.T) {
	if err := Check(); err != nil {
		t.Skipf("netns: %v", err)
	}
	ns, err := New("softrdma-netns-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	const missing = 0x7ffffff0
	for _, c := range []struct {
		name string
		call func(r *rtnl) error
		want string // substring of the error; empty: none
	}{
		{"linkState of a missing link", func(r *rtnl) error { _, _, err := r.linkState(missing); return err },
			"RTM_GETLINK 2147483632: no such device"},
		{"request on a missing link", func(r *rtnl) error { return r.setLink(missing, unix.IFF_UP, 0) }, "no such device"},
		{"operState of lo", func(r *rtnl) error {
			idx, err := interfaceIndex("lo")
			if err != nil {
				return err
			}
			_, err = r.operState(idx)
			return err
		}, ""},
	} {
		err := ns.withRTNL(c.call)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
