package roce_test

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/google/gopacket/layers"
	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/neigh"
	"github.com/softrdma/softrdma/roce"
	"github.com/softrdma/softrdma/sim"
)

// simPair is two devices on a simulated switch, made from one config each
// (Endpoint, MAC and Addrs filled in), and a hook that sees every frame a sends.
func simPair(t *testing.T, cfgA, cfgB roce.DeviceConfig, seen func(frame []byte)) *pair {
	t.Helper()
	p := &pair{net: sim.New(11), ipA: netip.MustParseAddr("10.1.0.1"), ipB: netip.MustParseAddr("10.1.0.2")}
	macA, macB := [6]byte{2, 0, 0, 0, 0, 1}, [6]byte{2, 0, 0, 0, 0, 2}
	p.macB = macB
	sw := p.net.AddSwitch("sw")
	pa, pb := p.net.AddNode("a", macA), p.net.AddNode("b", macB)
	link := sim.LinkConfig{Latency: 2 * time.Microsecond}
	p.net.ConnectSwitch(pa, sw, link)
	p.net.ConnectSwitch(pb, sw, link)
	if seen != nil {
		p.net.Links()[0].SetConfig(sim.AtoB, sim.LinkConfig{Latency: 2 * time.Microsecond, DropFunc: func(_ sim.Direction, f []byte) bool {
			seen(f)
			return false
		}})
	}
	nb := roce.StaticNeighbors{p.ipA: macA, p.ipB: macB}
	cfgA.Endpoint, cfgA.MAC, cfgA.Addrs, cfgA.Neighbors, cfgA.Engine.Seed = pa, macA, []netip.Addr{p.ipA}, nb, 1
	cfgB.Endpoint, cfgB.MAC, cfgB.Addrs, cfgB.Neighbors, cfgB.Engine.Seed = pb, macB, []netip.Addr{p.ipB}, nb, 2
	var err error
	if p.a, err = roce.NewDevice(cfgA); err != nil {
		t.Fatal(err)
	}
	if p.b, err = roce.NewDevice(cfgB); err != nil {
		t.Fatal(err)
	}
	p.qa, p.cqa, p.mra = setupQP(t, p.a)
	p.qb, p.cqb, p.mrb = setupQP(t, p.b)
	return p
}

// TestDeviceRoCEv1 connects QPs with RoCEv1 handles (DeviceConfig.Version):
// the frames carry Ethertype 0x8915 and a GRH with the GIDs, their ICRC
// verifies, and the WRITEs land. The link-local GIDs need no neighbour
// table: the MAC is in the GID.
func TestDeviceRoCEv1(t *testing.T) {
	for _, linkLocal := range []bool{false, true} {
		name := "IPv4-mapped"
		if linkLocal {
			name = "link-local"
		}
		t.Run(name, func(t *testing.T) {
			var frames, v1 int
			var bad error
			p := simPair(t, roce.DeviceConfig{Version: roce.RoCEv1}, roce.DeviceConfig{Version: roce.RoCEv1}, func(b []byte) {
				var f roce.Frame
				frames++
				if err := f.DecodeEthernet(b); err == nil && f.Version == roce.RoCEv1 {
					v1++
					if err := roce.VerifyICRC(&f); err != nil && bad == nil {
						bad = err
					}
				}
			})
			dstB, dstA := p.ipB, p.ipA
			if linkLocal {
				dstB, dstA = roce.LinkLocalGID(p.macB), roce.LinkLocalGID([6]byte{2, 0, 0, 0, 0, 1})
			}
			connect(t, p.a, p.qa, p.qb, dstB, 100, 200)
			connect(t, p.b, p.qb, p.qa, dstA, 200, 100)
			p.write(t, 20, 3000)
			if frames == 0 || v1 != frames || bad != nil {
				t.Fatalf("%d of %d frames RoCEv1, ICRC %v", v1, frames, bad)
			}
			checkClean(t, "b", p.b)
		})
	}
}

// TestDeviceUDPPort runs RoCEv2 on port 4792 between two devices so
// configured, and checks that a device on 4791 takes none of those frames,
// nor a 4792 device a 4791 frame.
func TestDeviceUDPPort(t *testing.T) {
	var ports []uint16
	p := simPair(t, roce.DeviceConfig{UDPPort: 4792}, roce.DeviceConfig{UDPPort: 4792}, func(b []byte) {
		var f roce.Frame
		// Decoding as 4791 RoCE fails; read the port from the headers.
		if f.DecodeEthernet(b) == nil {
			t.Errorf("a frame to port %d decoded as standard RoCEv2", f.DstPort)
		}
		if len(b) > 14+20+4 {
			ports = append(ports, uint16(b[14+20+2])<<8|uint16(b[14+20+3]))
		}
	})
	connect(t, p.a, p.qa, p.qb, p.ipB, 100, 200)
	connect(t, p.b, p.qb, p.qa, p.ipA, 200, 100)
	p.write(t, 10, 2000)
	if len(ports) == 0 {
		t.Fatal("no frame seen")
	}
	for _, port := range ports {
		if port != 4792 {
			t.Fatalf("frame to UDP port %d, want 4792", port)
		}
	}
	checkClean(t, "b", p.b)

	// Frames to the other port are not RoCE to a device.
	n := sim.New(1)
	sw := n.AddSwitch("sw")
	pa, pb := n.AddNode("a", [6]byte{2, 0, 0, 0, 0, 1}), n.AddNode("b", [6]byte{2, 0, 0, 0, 0, 2})
	n.ConnectSwitch(pa, sw, sim.LinkConfig{})
	n.ConnectSwitch(pb, sw, sim.LinkConfig{})
	for _, tc := range []struct{ send, listen uint16 }{{4792, 4791}, {4791, 4792}} {
		d, err := roce.NewDevice(roce.DeviceConfig{Endpoint: pb, MAC: [6]byte{2, 0, 0, 0, 0, 2}, Addrs: []netip.Addr{p.ipB}, UDPPort: tc.listen})
		if err != nil {
			t.Fatal(err)
		}
		ib := make([]byte, ibtransport.BTHLen+ibtransport.RETHLen+16)
		ibtransport.BTH(ib).Encode(&ibtransport.BTHFields{Opcode: ibtransport.OpcodeRCRDMAWriteOnly, PKey: 0xffff, DestQP: 0x11, PSN: 1})
		h := roce.FrameHeaders{DstMAC: [6]byte{2, 0, 0, 0, 0, 2}, Src: p.ipA, Dst: p.ipB, HopLimit: 64, SrcPort: 0xc000, DstPort: tc.send}
		fr := make([]byte, h.Len()+len(ib)+roce.ICRCLen)
		copy(fr[h.Len():], ib)
		if _, err := h.EncodeFrame(fr, len(ib)); err != nil {
			t.Fatal(err)
		}
		if _, err := pa.Write([][]byte{fr}, 0); err != nil {
			t.Fatal(err)
		}
		n.RunUntil(n.Now().Add(time.Millisecond))
		if _, err := d.Poll(n.Now()); err != nil {
			t.Fatal(err)
		}
		if c := d.Counters(); c.NotRoCE != 1 || c.FramesIn != 1 {
			t.Errorf("port %d frame to a port-%d device: counters %+v, want it counted not RoCE", tc.send, tc.listen, c)
		}
	}
}

func checkClean(t *testing.T, name string, d *roce.Device) {
	t.Helper()
	c := d.Counters()
	if c.BadICRC != 0 || c.Malformed != 0 || c.EngineDrops != 0 || c.Unresolved != 0 || c.FramesIn == 0 {
		t.Errorf("device %s counters %+v", name, c)
	}
}

// TestDeviceInputAllocs checks that the input path allocates nothing for a
// RoCEv2 frame on a configured port (decoded in place) and for an ARP
// request answered by the neighbour protocol (its buffers are reused).
func TestDeviceInputAllocs(t *testing.T) {
	n := sim.New(1)
	mac := [6]byte{2, 0, 0, 0, 0, 2}
	port := n.AddNode("b", mac)
	ip := netip.MustParseAddr("10.1.0.2")
	hn := neigh.NewHost(neigh.HostConfig{MAC: mac, Addrs: []netip.Addr{ip}})
	d, err := roce.NewDevice(roce.DeviceConfig{Endpoint: port, MAC: mac, Addrs: []netip.Addr{ip}, UDPPort: 4792, Neighbors: hn})
	if err != nil {
		t.Fatal(err)
	}
	ib := make([]byte, ibtransport.BTHLen+ibtransport.RETHLen+16)
	ibtransport.BTH(ib).Encode(&ibtransport.BTHFields{Opcode: ibtransport.OpcodeRCRDMAWriteOnly, PKey: 0xffff, DestQP: 0x11, PSN: 1})
	h := roce.FrameHeaders{DstMAC: mac, Src: netip.MustParseAddr("10.1.0.1"), Dst: ip, HopLimit: 64, SrcPort: 0xc000, DstPort: 4792}
	fr := make([]byte, h.Len()+len(ib)+roce.ICRCLen)
	copy(fr[h.Len():], ib)
	if _, err := h.EncodeFrame(fr, len(ib)); err != nil {
		t.Fatal(err)
	}
	orig := bytes.Clone(fr)
	arp := arpFrame(t, layers.ARPRequest, bcastMAC, peerMAC, netip.MustParseAddr("10.1.0.1"), [6]byte{}, ip)
	frames, sizes := [][]byte{fr, arp}, []int{len(fr), len(arp)}
	now := time.Unix(0, 0)
	sent := make([][]byte, 0, 4)
	step := func() {
		d.Input(now, frames, sizes)
		if n := len(hn.AppendFrames(now, sent[:0])); n != 1 {
			t.Fatalf("%d frames sent for one ARP request", n)
		}
	}
	step()
	if allocs := testing.AllocsPerRun(100, step); allocs != 0 {
		t.Errorf("%v allocations per input", allocs)
	}
	if !bytes.Equal(fr, orig) {
		t.Error("the input frame was changed")
	}
	if c := d.Counters(); c.EngineDrops == 0 || c.Neighbor == 0 || c.NotRoCE != 0 || c.Malformed != 0 {
		t.Errorf("counters %+v: want the RoCE frame at the engine (unknown QP) and the ARP frame handled", c)
	}
}
