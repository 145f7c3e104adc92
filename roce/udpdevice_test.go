package roce_test

import (
	"context"
	"net/netip"
	"testing"

	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/netio"
	"github.com/softrdma/softrdma/roce"
)

// runUDPDevice opens a device on a UDP socket bound to ip and the RoCEv2 port
// (skipping the test when the socket cannot be opened), with engine seed seed,
// and runs it in its own goroutine until ctx ends or the test's cleanup closes
// the socket; the cleanup reports an error Run returned before ctx ended.
func runUDPDevice(t *testing.T, ctx context.Context, ip netip.Addr, seed uint64) *roce.Device {
	t.Helper()
	ep, err := netio.NewUDP(netio.UDPConfig{LocalAddr: netip.AddrPortFrom(ip, netio.RoCEv2Port)})
	if err != nil {
		t.Skipf("cannot open a UDP socket on %v: %v", ip, err)
	}
	d, err := roce.NewDevice(roce.DeviceConfig{Endpoint: ep, Addrs: []netip.Addr{ip}, Engine: ibtransport.ContextConfig{Seed: seed}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx, netio.SystemClock{}) }()
	t.Cleanup(func() {
		ep.Close()
		if err := <-done; err != nil && ctx.Err() == nil {
			t.Errorf("Run: %v", err)
		}
	})
	return d
}
