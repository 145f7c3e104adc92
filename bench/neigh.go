package bench

import (
	"fmt"
	"net/netip"

	"github.com/softrdma/softrdma/netio/netns"
)

// staticNeighbors gives each side of the pair a permanent neighbour entry
// for the other's addresses, so that nothing on the path waits for ARP or
// NDP. A fresh pair's first packets otherwise wait for the kernel to
// resolve the peer, and when its first ARP exchange is lost (seen under
// load: the first frame reached A 1.0 s after B's first send, the kernel's
// ARP retransmit interval) a row's RC QPs give up after 7 timeouts of 67 ms
// with IBV_WC_RETRY_EXC_ERR (the 64 B WRITE rate row with --no-baseline, 1
// run in 10 at load 14; the baseline that runs first in a row is just as
// blind for that second).
func staticNeighbors(p *netns.Pair) error {
	for _, s := range [][2]*netns.Side{{&p.A, &p.B}, {&p.B, &p.A}} {
		self, peer := s[0], s[1]
		for _, a := range []netip.Prefix{peer.IPv4, peer.IPv6} {
			if !a.IsValid() {
				continue
			}
			if err := self.NS.AddNeighbor(self.Link, a.Addr(), peer.MAC); err != nil {
				return fmt.Errorf("neighbour %v on %s in %s: %w", a.Addr(), self.Link, self.NS.Name(), err)
			}
		}
	}
	return nil
}
