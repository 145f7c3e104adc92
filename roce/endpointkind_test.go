package roce_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/netio"
	"github.com/softrdma/softrdma/roce"
)

// linkOnly has a netio.Link's methods and nothing to carry packets with.
type linkOnly struct{}

func (linkOnly) BatchSize() int { return 1 }
func (linkOnly) MTU() int       { return 1500 }
func (linkOnly) Close() error   { return nil }

// readsDatagrams is a DatagramReader that cannot write.
type readsDatagrams struct{ linkOnly }

func (readsDatagrams) ReadDatagrams([]netio.Datagram) (int, error)    { return 0, nil }
func (readsDatagrams) TryReadDatagrams([]netio.Datagram) (int, error) { return 0, nil }

// datagrams reads and writes datagrams: the shape of the UDP backend
// (netio.UDPEndpoint), with no frame method.
type datagrams struct{ readsDatagrams }

func (datagrams) WriteDatagrams(d []netio.OutDatagram) (int, error) { return len(d), nil }
func (datagrams) IPv4Run() (int, int)                               { return 1, 0 }

// TestDeviceEndpointKinds: a device takes an endpoint of frames
// (netio.Endpoint) or of datagrams (DatagramReader and DatagramWriter, as
// the UDP backend is given to it without UDPFrames); one that carries
// neither is refused, naming its type.
func TestDeviceEndpointKinds(t *testing.T) {
	pipe, _ := netio.NewPipe(1, 1500)
	for _, tt := range []struct {
		name string
		ep   netio.Link
		err  string // the start of the error, "" if the device opens
	}{
		{name: "frames", ep: pipe},
		{name: "datagrams", ep: datagrams{}},
		{name: "link only", ep: linkOnly{}, err: "roce: device endpoint roce_test.linkOnly: neither"},
		{name: "reads datagrams only", ep: readsDatagrams{}, err: "roce: device endpoint roce_test.readsDatagrams: neither"},
	} {
		d, err := roce.NewDevice(roce.DeviceConfig{Endpoint: tt.ep, Addrs: []netip.Addr{netip.MustParseAddr("10.9.0.1")},
			Engine: ibtransport.ContextConfig{Seed: 1}})
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.err != "" && err == nil:
			t.Errorf("%s: opened, want error %q", tt.name, tt.err)
		case tt.err != "" && !strings.HasPrefix(err.Error(), tt.err):
			t.Errorf("%s: error %q, want %q...", tt.name, err, tt.err)
		}
		if d != nil {
			d.Close()
		}
	}
}
