package bench

import (
	"net/netip"
	"testing"

	"github.com/softrdma/softrdma/neigh"
	"github.com/softrdma/softrdma/netio/netns"
)

// TestPairStaticNeighbors: the namespaces the bench runs between know each
// other's addresses before the first packet (permanent neighbour entries
// with the peer's MAC, IPv4 and IPv6), so no row waits for ARP or NDP: a lost
// first ARP exchange held a fresh pair's packets for the kernel's 1 s ARP
// retransmit, and the first row's RC QPs ended in IBV_WC_RETRY_EXC_ERR.
// Without staticNeighbors there is no entry (state 0).
func TestPairStaticNeighbors(t *testing.T) {
	if err := netns.Check(); err != nil {
		t.Skip(err)
	}
	o := &Options{MTUs: []int{1500}, mtu: 1500}
	p, err := pair(o)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const nudPermanent = 0x80
	for _, s := range [][2]*netns.Side{{&p.A, &p.B}, {&p.B, &p.A}} {
		self, peer := s[0], s[1]
		for _, a := range []netip.Prefix{peer.IPv4, peer.IPv6} {
			if !a.IsValid() {
				continue
			}
			err := self.NS.Do(func() error {
				nl, err := neigh.DialNetlink()
				if err != nil {
					return err
				}
				defer nl.Close()
				state, mac, err := nl.Neighbor(a.Addr(), self.Index)
				if err != nil {
					return err
				}
				if state&nudPermanent == 0 || string(mac[:]) != string(peer.MAC) {
					t.Errorf("%s: neighbour %v: state %#x, MAC %x; want permanent with %v", self.NS.Name(), a.Addr(), state, mac, peer.MAC)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
}
