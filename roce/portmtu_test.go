package roce_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/netio"
	"github.com/softrdma/softrdma/roce"
)

// TestDevicePortMTUAboveEndpoint: a device whose Engine.PortMTU is above
// the IB MTU its endpoint's MTU carries (PathMTUFor) is refused, naming both.
// softrdma bench --addrs 127.0.0.1,127.0.0.2 --mtu 9000 gave such a device
// PortMTU 4096 on an endpoint of MTU 1500 (127.0.0.2 took the default MTU
// then): the endpoint dropped every 4 KiB packet as oversize, silently, and
// the WRITE row ended in IBV_WC_RETRY_EXC_ERR after seven timeouts. Without
// the check the device opens, and the QP on it gets path MTU 4096.
func TestDevicePortMTUAboveEndpoint(t *testing.T) {
	for _, tt := range []struct {
		epMTU, portMTU int
		want           int    // the device's PathMTU when it opens
		err            string // else the start of its error
	}{
		{epMTU: 1500, portMTU: 0, want: 1024},
		{epMTU: 1500, portMTU: 1024, want: 1024},
		{epMTU: 1500, portMTU: 512, want: 512},
		{epMTU: 1500, portMTU: 4096, err: "roce: Engine.PortMTU 4096: above 1024, the largest IB MTU that the endpoint's MTU 1500 carries"},
		{epMTU: 1500, portMTU: 2048, err: "roce: Engine.PortMTU 2048: above 1024"},
		{epMTU: 4175, portMTU: 4096, err: "roce: Engine.PortMTU 4096: above 2048, the largest IB MTU that the endpoint's MTU 4175 carries"},
		{epMTU: 4176, portMTU: 4096, want: 4096},
		{epMTU: 9000, portMTU: 4096, want: 4096},
	} {
		ep, _ := netio.NewPipe(1, tt.epMTU)
		d, err := roce.NewDevice(roce.DeviceConfig{Endpoint: ep, MAC: [6]byte{2, 0, 0, 0, 9, 1},
			Addrs: []netip.Addr{netip.MustParseAddr("10.9.0.1")}, Engine: ibtransport.ContextConfig{Seed: 1, PortMTU: tt.portMTU}})
		switch {
		case tt.err != "" && err == nil:
			t.Errorf("endpoint MTU %d, PortMTU %d: opened with path MTU %d, want error %q", tt.epMTU, tt.portMTU, d.PathMTU(), tt.err)
		case tt.err != "" && !strings.HasPrefix(err.Error(), tt.err):
			t.Errorf("endpoint MTU %d, PortMTU %d: error %q, want %q...", tt.epMTU, tt.portMTU, err, tt.err)
		case tt.err == "" && err != nil:
			t.Errorf("endpoint MTU %d, PortMTU %d: %v", tt.epMTU, tt.portMTU, err)
		case tt.err == "" && d.PathMTU() != tt.want:
			t.Errorf("endpoint MTU %d, PortMTU %d: path MTU %d, want %d", tt.epMTU, tt.portMTU, d.PathMTU(), tt.want)
		}
		if d != nil {
			d.Close()
		}
	}
}
