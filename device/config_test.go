package device_test

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/softrdma/softrdma/device"
	"github.com/softrdma/softrdma/devspec"
	"github.com/softrdma/softrdma/netio"
	"github.com/softrdma/softrdma/pcaptap"
)

// TestConfigTapIdlePort: two RoCE devices on one UDP port of their own
// (Config.UDPPort) record into one shared capture (Config.Tap): a datagram
// to the running device is recorded by its loop; the Idle device leaves its
// endpoint to the caller, whose Read gets the datagram (recorded as well).
// Closing the devices leaves the Tap to its owner.
func TestConfigTapIdlePort(t *testing.T) {
	const port = 4795
	var file bytes.Buffer
	tap, err := pcaptap.New(&file, netio.FormatPcap, 0)
	if err != nil {
		t.Fatal(err)
	}
	open := func(addr string, idle bool) device.Device {
		t.Helper()
		spec := devspec.Spec{Transport: devspec.RoCE, Backend: devspec.BackendUDP, Addr: netip.MustParseAddr(addr)}
		d, err := device.Open(spec, device.Config{Tap: tap, UDPPort: port, Idle: idle})
		if err != nil {
			t.Skipf("open %v: %v", spec, err)
		}
		return d
	}
	running, idle := open("127.0.78.64", false), open("127.0.78.65", true)
	defer running.Close()
	defer idle.Close()
	send := func(to device.Device) {
		t.Helper()
		c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(to.Local(), port)))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write(make([]byte, 40)); err != nil {
			t.Fatal(err)
		}
	}

	send(running)
	for deadline := time.Now().Add(10 * time.Second); tap.Frames() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the running device's datagram was not recorded")
		}
	}

	send(idle)
	read := make(chan error, 1)
	go func() {
		bufs, sizes := [][]byte{make([]byte, 2048)}, []int{0}
		dev := idle.(*device.RoCE).RoCE()
		_, err := netio.FramesOf(dev.Endpoint(), dev.MAC(), [6]byte{}).Read(bufs, sizes, 0)
		read <- err
	}()
	select {
	case err := <-read:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the idle device's endpoint gave the caller nothing (its loop took the datagram?)")
	}
	if n := tap.Frames(); n != 2 {
		t.Errorf("%d frames recorded, want 2 (one to each device)", n)
	}
	if err := running.Close(); err != nil {
		t.Error(err)
	}
	if err := idle.Close(); err != nil {
		t.Error(err)
	}
	if err := tap.WriteFrame(time.Now(), make([]byte, 60)); err != nil {
		t.Errorf("the tap after its devices closed: %v", err)
	}
	if err := tap.Flush(); err != nil || tap.Frames() != 3 {
		t.Errorf("tap: %d frames, flush %v; want 3, nil", tap.Frames(), err)
	}
}
