package rping

import (
	"net/netip"
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/iwarp"
)

// TestIWARPDevicesDiffer: two runs of rping over iWARP advertise different
// STags and region addresses (they were the same every run: the engine's seed
// was 0). device.TestDevicesDiffer checks the devices conform serve opens.
func TestIWARPDevicesDiffer(t *testing.T) {
	first := func(ctx *ib.Context) (uint32, uint64) {
		t.Helper()
		mr, err := ctx.AllocPD().RegMR(make([]byte, 64), ib.AccessLocalWrite|ib.AccessRemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		return mr.RKey(), mr.Addr()
	}
	for _, c := range []struct {
		name string
		open func() *ib.Context
	}{
		{"rping", func() *ib.Context {
			cm, err := openDevice(Options{Transport: "iwarp"}, iwarp.CRCAccept, netip.MustParseAddr("127.0.0.1"), netip.Addr{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cm.close() })
			return cm.verbs
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			k1, a1 := first(c.open())
			k2, a2 := first(c.open())
			if k1 == k2 && a1 == a2 {
				t.Fatalf("two runs advertise STag 0x%08x address 0x%x and STag 0x%08x address 0x%x", k1, a1, k2, a2)
			}
		})
	}
}
