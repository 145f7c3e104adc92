package device_test

import (
	"net/netip"
	"testing"

	"github.com/softrdma/softrdma/device"
	"github.com/softrdma/softrdma/devspec"
	ib "github.com/softrdma/softrdma/ibtransport"
)

// TestDevicesDiffer: two devices opened with no seed (conform serve's iWARP
// device, rping's and perf's) advertise different STags and region addresses
// (they were the same every run while the engine's seed was 0).
func TestDevicesDiffer(t *testing.T) {
	first := func(ctx *ib.Context) (uint32, uint64) {
		t.Helper()
		mr, err := ctx.AllocPD().RegMR(make([]byte, 64), ib.AccessLocalWrite|ib.AccessRemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		return mr.RKey(), mr.Addr()
	}
	for _, spec := range []devspec.Spec{
		{Transport: devspec.IWARP},
		{Transport: devspec.RoCE, Backend: devspec.BackendUDP, Addr: netip.MustParseAddr("127.0.78.61")},
	} {
		t.Run(string(spec.Transport), func(t *testing.T) {
			open := func() (uint32, uint64) {
				d, err := device.Open(spec, device.Config{})
				if err != nil {
					t.Skipf("open %v: %v", spec, err)
				}
				defer d.Close()
				return first(d.Context())
			}
			k1, a1 := open()
			k2, a2 := open()
			if k1 == k2 && a1 == a2 {
				t.Fatalf("two devices advertise STag 0x%08x address 0x%x and STag 0x%08x address 0x%x", k1, a1, k2, a2)
			}
		})
	}
}

// TestIBMTU: siw's active MTU from the netdev's (ib_mtu_int_to_enum).
func TestIBMTU(t *testing.T) {
	for netdev, want := range map[int]int{65536: 4096, 9000: 4096, 4096: 4096, 4095: 2048, 1500: 1024, 1024: 1024, 600: 512, 300: 256} {
		if got := device.IBMTU(netdev); got != want {
			t.Errorf("MTU %d: %d, want %d", netdev, got, want)
		}
	}
}
