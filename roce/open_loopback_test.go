//go:build linux

package roce_test

import (
	"net"
	"net/netip"
	"testing"

	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/roce"
)

// TestOpenUDPLoopbackAddrMTU opens the udp backend on loopback addresses that
// no interface holds (Linux routes all of 127.0.0.0/8 to lo): the port MTU is
// derived from lo's MTU, as for 127.0.0.1, and the GID table is the bound
// address alone. Without lo's MTU such a device took netio.DefaultMTU and a
// port MTU of 1024 where 127.0.0.1's is 4096.
func TestOpenUDPLoopbackAddrMTU(t *testing.T) {
	var lo *net.Interface
	ifs, _ := net.Interfaces()
	for i := range ifs {
		if ifs[i].Flags&net.FlagLoopback != 0 {
			lo = &ifs[i]
		}
	}
	if lo == nil {
		t.Skip("no loopback interface")
	}
	for _, tc := range []struct {
		addr string
		gids int
	}{
		{"127.0.78.91", 2}, // on no interface: the link-local GID and itself
		{"127.0.0.1", 0},   // on lo: lo's whole table
	} {
		ip := netip.MustParseAddr(tc.addr)
		d, err := roce.Open(roce.OpenConfig{Addrs: []netip.Addr{ip}, UDPPort: 14793, Engine: ibtransport.ContextConfig{Seed: 1}})
		if err != nil {
			t.Skipf("cannot open a UDP device on %v: %v", ip, err)
		}
		if got, want := d.PathMTU(), roce.PathMTUFor(lo.MTU); got != want {
			t.Errorf("%v: port MTU %d, want %d (lo's MTU %d)", ip, got, want, lo.MTU)
		}
		if gids := d.GIDs(); tc.gids > 0 && (len(gids) != tc.gids || gids[1].Unmap() != ip) {
			t.Errorf("%v: GID table %v, want the link-local GID and %v", ip, gids, ip)
		}
		d.Close()
	}
}
