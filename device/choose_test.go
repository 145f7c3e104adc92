package device_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/device"
	"github.com/softrdma/softrdma/devspec"
)

// TestChoiceSpec: the tools' -d, -g and peer as a device spec. A loopback
// address no interface holds is a device on that address alone (GID 1 is
// it); errors name what is wrong as the tools do.
func TestChoiceSpec(t *testing.T) {
	lone := netip.MustParseAddr("127.0.78.201")
	for _, tc := range []struct {
		name    string
		c       device.Choice
		addr    netip.Addr // want, if valid
		wantErr string
	}{
		{"lone loopback address", device.Choice{Backend: devspec.BackendUDP, Name: lone.String(), GIDIndex: -1}, lone, ""},
		{"lone loopback address, -g 1", device.Choice{Backend: devspec.BackendUDP, Name: lone.String(), GIDIndex: 1, GIDFlag: "-g"}, lone, ""},
		{"-g 0", device.Choice{Backend: devspec.BackendUDP, Name: lone.String(), GIDIndex: 0, GIDFlag: "-g"}, netip.Addr{}, "link-local address fe80::"},
		{"-x 0", device.Choice{Backend: devspec.BackendUDP, Name: lone.String(), GIDIndex: 0, GIDFlag: "-x"}, netip.Addr{}, "(-x 1 and up)"},
		{"-g 7", device.Choice{Backend: devspec.BackendUDP, Name: lone.String(), GIDIndex: 7, GIDFlag: "-g"}, netip.Addr{}, "can't read sgid of index 7 (the device has 2 GIDs)"},
		{"no such interface", device.Choice{Backend: devspec.BackendUDP, Name: "no-such-if0", GIDIndex: -1}, netip.Addr{}, "IB device no-such-if0 not found (no such interface)"},
		{"address on no interface", device.Choice{Backend: devspec.BackendUDP, Name: "192.0.2.77", GIDIndex: -1}, netip.Addr{}, "no interface has that address"},
		{"bad backend", device.Choice{Backend: "carrier-pigeon", Name: lone.String(), GIDIndex: -1}, netip.Addr{}, `--backend "carrier-pigeon": want udp, afpacket or tap`},
		{"tap without addresses", device.Choice{Backend: devspec.BackendTAP, GIDIndex: -1}, netip.Addr{}, "--tap-addr"},
		{"tap, -g 2", device.Choice{Backend: devspec.BackendTAP, Name: "tapx", GIDIndex: 2, GIDFlag: "-g",
			TAPAddrs: []netip.Addr{netip.MustParseAddr("10.99.0.2"), netip.MustParseAddr("fd99::2")}}, netip.MustParseAddr("fd99::2"), ""},
		{"tap, IPv6 peer", device.Choice{Backend: devspec.BackendTAP, Name: "tapx", GIDIndex: -1, Peer: netip.MustParseAddr("fd99::1"),
			TAPAddrs: []netip.Addr{netip.MustParseAddr("10.99.0.2"), netip.MustParseAddr("fd99::2")}}, netip.MustParseAddr("fd99::2"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := tc.c.Spec()
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("spec %v, error %v; want an error with %q", s, err, tc.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			case s.Transport != devspec.RoCE || s.Addr != tc.addr || s.Backend != tc.c.Backend:
				t.Fatalf("spec %+v, want roce:%v on backend %s", s, tc.addr, tc.c.Backend)
			}
		})
	}
}

// TestPickGID: without a GID index the first routable GID of the peer's
// family (IPv4 without a peer), else the first routable one.
func TestPickGID(t *testing.T) {
	ll := netip.MustParseAddr("fe80::1")
	v4 := netip.AddrFrom16(netip.MustParseAddr("10.0.0.1").As16())
	v6 := netip.MustParseAddr("2001:db8::1")
	for _, tc := range []struct {
		gids []netip.Addr
		peer string
		want netip.Addr
	}{
		{[]netip.Addr{ll, v4, v6}, "", v4.Unmap()},
		{[]netip.Addr{ll, v4, v6}, "2001:db8::2", v6},
		{[]netip.Addr{ll, v6}, "", v6}, // no IPv4: the first routable
		{[]netip.Addr{ll, ll, v4}, "10.0.0.2", v4.Unmap()},
	} {
		var peer netip.Addr
		if tc.peer != "" {
			peer = netip.MustParseAddr(tc.peer)
		}
		got, err := device.PickGID(tc.gids, -1, "-g", peer)
		if err != nil || got != tc.want {
			t.Errorf("%v, peer %v: %v, %v; want %v", tc.gids, peer, got, err, tc.want)
		}
	}
	if _, err := device.PickGID([]netip.Addr{ll}, -1, "-g", netip.Addr{}); err == nil || !strings.Contains(err.Error(), "no IP address") {
		t.Errorf("only the link-local GID: %v, want no IP address", err)
	}
}
