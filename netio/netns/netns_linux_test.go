//go:build linux

package netns

import (
	"net"
	"strings"
	"testing"
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
