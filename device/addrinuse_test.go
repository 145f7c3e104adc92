package device

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"

	"github.com/softrdma/softrdma/devspec"
)

// TestAddrInUseHint: a udp RoCE device on an address whose UDP port 4791 a
// socket already holds (what the second of two one-host perf or pingpong
// sides on the same default address meets) fails with an error that still
// is EADDRINUSE and says what to type instead: the flag with the next
// loopback address.
func TestAddrInUseHint(t *testing.T) {
	cases := []struct {
		addr, flag, want string
	}{
		{"127.45.67.89", "-d", "address 127.45.67.89:4791 in use"},
		{"127.45.67.89", "-d", "give each side its own loopback address: -d 127.45.67.90:"},
		{"127.45.67.91", "", "give each side its own loopback address: 127.45.67.92:"},
		{"127.45.67.91", "--device roce:", "give each side its own loopback address: --device roce:127.45.67.92:"},
	}
	for _, c := range cases {
		t.Run(c.addr+c.flag, func(t *testing.T) {
			a := netip.MustParseAddr(c.addr)
			held, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, 4791)))
			if err != nil {
				t.Skipf("binding %v:4791 first: %v", a, err)
			}
			defer held.Close()
			d, err := Open(devspec.Spec{Transport: devspec.RoCE, Backend: devspec.BackendUDP, Addr: a}, Config{Seed: 1, AddrFlag: c.flag})
			if err == nil {
				d.Close()
				t.Fatalf("Open on %v:4791, held by another socket, succeeded", a)
			}
			if !errors.Is(err, syscall.EADDRINUSE) {
				t.Errorf("error %v is not EADDRINUSE", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q\nlacks %q", err, c.want)
			}
		})
	}
}
