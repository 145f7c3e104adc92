package verbsdev

import (
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/softrdma/softrdma/devspec"
	"github.com/softrdma/softrdma/roce"
)

func TestDescribe(t *testing.T) {
	lo4 := netip.MustParseAddr("127.0.0.2") // on lo's route, not an address of lo
	tests := []struct {
		spec     string
		gids     []string
		guid     uint64
		vendor   uint32
		tableLen int
	}{
		// An address on no interface: the default GID of a zero MAC, then the
		// address, IPv4-mapped at index 1 as rxe has it.
		{"roce:127.0.0.2", []string{"fe80::200:ff:fe00:0", "::ffff:127.0.0.2"}, 0x00007ffffe000002, VendorRoCE, 1024},
		// iWARP: siw's one GID, the MAC padded (zero here).
		{"iwarp:127.0.0.2", []string{"::"}, 0x00007ffffe000002, VendorIWARP, 1},
	}
	for _, tt := range tests {
		s, err := devspec.Parse(tt.spec)
		if err != nil {
			t.Fatal(err)
		}
		if s.Addr != lo4 {
			t.Fatalf("%s: addr %v", tt.spec, s.Addr)
		}
		d, err := Describe(s)
		if err != nil {
			t.Fatalf("%s: %v", tt.spec, err)
		}
		if len(d.GIDs) != len(tt.gids) {
			t.Fatalf("%s: GIDs %v, want %v", tt.spec, d.GIDs, tt.gids)
		}
		for i, g := range tt.gids {
			if d.GIDs[i] != netip.MustParseAddr(g) {
				t.Errorf("%s: GID %d %v, want %s", tt.spec, i, d.GIDs[i], g)
			}
			if raw, ok := d.GID(i); !ok || raw != netip.MustParseAddr(g).As16() {
				t.Errorf("%s: GID(%d) = %x, %v", tt.spec, i, raw, ok)
			}
		}
		if raw, ok := d.GID(tt.tableLen - 1); !ok || (tt.tableLen > len(tt.gids) && raw != [16]byte{}) {
			t.Errorf("%s: last entry GID(%d) = %x, %v; want zero, true", tt.spec, tt.tableLen-1, raw, ok)
		}
		if _, ok := d.GID(tt.tableLen); ok {
			t.Errorf("%s: GID(%d) past the table is ok", tt.spec, tt.tableLen)
		}
		if d.NodeGUID() != tt.guid || d.Vendor() != tt.vendor || d.GIDTableLen() != tt.tableLen {
			t.Errorf("%s: guid %016x vendor %x table %d, want %016x %x %d", tt.spec,
				d.NodeGUID(), d.Vendor(), d.GIDTableLen(), tt.guid, tt.vendor, tt.tableLen)
		}
		// No interface, but on lo's route: lo's MTU (65536 by default), which
		// rxe's derivation turns into 4096, as roce.Open's device has it. It
		// was 1500 and 1024, under the MTU of softrdma perf on the same
		// address: ib_write_bw ran at MTU 1024 beside perf's 4096.
		lo, err := net.InterfaceByName("lo")
		if err != nil {
			t.Skipf("no lo: %v", err)
		}
		want := roce.PathMTUFor(lo.MTU)
		if d.IfaceMTU != lo.MTU || d.ActiveMTU() != want || d.Port().ActiveMTU != MTUEnum(want) {
			t.Errorf("%s: iface MTU %d active %d (enum %d), want lo's %d: %d (%d)", tt.spec, d.IfaceMTU, d.ActiveMTU(), d.Port().ActiveMTU, lo.MTU, want, MTUEnum(want))
		}
	}
}

func TestNodeGUIDFromMAC(t *testing.T) {
	d := &Device{MAC: [6]byte{0x52, 0x54, 0x00, 0x12, 0x34, 0x56}}
	// addrconf_addr_eui48: flip the U/L bit, put ff:fe in the middle.
	if g := d.NodeGUID(); g != 0x505400fffe123456 {
		t.Fatalf("NodeGUID %016x, want 505400fffe123456", g)
	}
}

func TestMTUEnum(t *testing.T) {
	for n, want := range map[int]int{256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5, 100: 0, 1500: 0, 8192: 0} {
		if got := MTUEnum(n); got != want {
			t.Errorf("MTUEnum(%d) = %d, want %d", n, got, want)
		}
	}
}

// TestDescribeInterfaceGIDs: the GID table the libraries report for a
// device on an interface (lo, for 127.0.0.1) is the one roce.Open gives
// the device, from the same netlink lister (InterfaceGIDTable), in the
// kernel's order; iWARP keeps siw's one GID.
func TestDescribeInterfaceGIDs(t *testing.T) {
	want, err := roce.InterfaceGIDTable("lo")
	if err != nil {
		t.Skipf("no netlink view of lo: %v", err)
	}
	s, err := devspec.Parse("roce:127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	d, err := Describe(s)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(d.GIDs, want) {
		t.Errorf("GIDs %v, roce.Open's table %v", d.GIDs, want)
	}
	s.Transport = devspec.IWARP
	if d, err = Describe(s); err != nil || len(d.GIDs) != 1 {
		t.Errorf("iwarp: %v, GIDs %v", err, d.GIDs)
	}
}
