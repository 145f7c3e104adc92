package roce_test

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/roce"
	"github.com/softrdma/softrdma/sim"
)

func TestPathMTUFor(t *testing.T) {
	for _, tc := range []struct{ iface, want int }{
		{1500, 1024}, // rxe on a 1500-byte link (the captures: active MTU 1024)
		{9000, 4096},
		{4200, 4096},
		{4175, 2048},
		{2128, 2048},
		{2127, 1024},
		{1280, 1024},
		{600, 512},
		{300, 256},
		{100, 256},
	} {
		if got := roce.PathMTUFor(tc.iface); got != tc.want {
			t.Errorf("PathMTUFor(%d) = %d, want %d", tc.iface, got, tc.want)
		}
	}
}

// TestGIDTable checks the order and the link-local GID against the interop
// guests' rxe0 table: index 0 fe80::5054:ff:fe77:NN for MAC 52:54:00:77:00:NN,
// then the IPv4-mapped address, then IPv6.
func TestGIDTable(t *testing.T) {
	mac := [6]byte{0x52, 0x54, 0x00, 0x77, 0x00, 0x01}
	got := roce.GIDTable(mac, []netip.Addr{netip.MustParseAddr("10.77.0.21"), netip.MustParseAddr("fd77::21")})
	want := []string{"fe80::5054:ff:fe77:1", "::ffff:10.77.0.21", "fd77::21"}
	if len(got) != len(want) {
		t.Fatalf("got %d GIDs, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].String() != want[i] {
			t.Errorf("GID %d = %v, want %s", i, got[i], want[i])
		}
	}
}

// pair is two RoCE devices and a third port on one simulated switch.
type pair struct {
	net      *sim.Network
	a, b     *roce.Device
	bad      *sim.Port // a port that sends junk at b
	qa, qb   *ibtransport.QP
	cqa, cqb *ibtransport.CQ
	mra, mrb *ibtransport.MR
	macB     [6]byte
	round    int
	ipA, ipB netip.Addr
}

func newPair(t *testing.T, cfg sim.LinkConfig) *pair {
	t.Helper()
	p := &pair{net: sim.New(5), ipA: netip.MustParseAddr("10.1.0.1"), ipB: netip.MustParseAddr("10.1.0.2")}
	macA, macB, macC := [6]byte{2, 0, 0, 0, 0, 1}, [6]byte{2, 0, 0, 0, 0, 2}, [6]byte{2, 0, 0, 0, 0, 3}
	p.macB = macB
	sw := p.net.AddSwitch("sw")
	pa, pb := p.net.AddNode("a", macA), p.net.AddNode("b", macB)
	p.bad = p.net.AddNode("c", macC)
	for _, port := range []*sim.Port{pa, pb, p.bad} {
		p.net.ConnectSwitch(port, sw, cfg)
	}
	nb := roce.StaticNeighbors{p.ipA: macA, p.ipB: macB}
	var err error
	if p.a, err = roce.NewDevice(roce.DeviceConfig{Endpoint: pa, MAC: macA, Addrs: []netip.Addr{p.ipA}, Neighbors: nb, Engine: ibtransport.ContextConfig{Seed: 1}}); err != nil {
		t.Fatal(err)
	}
	if p.b, err = roce.NewDevice(roce.DeviceConfig{Endpoint: pb, MAC: macB, Addrs: []netip.Addr{p.ipB}, Neighbors: nb, Engine: ibtransport.ContextConfig{Seed: 2}}); err != nil {
		t.Fatal(err)
	}
	p.qa, p.cqa, p.mra = setupQP(t, p.a)
	p.qb, p.cqb, p.mrb = setupQP(t, p.b)
	connect(t, p.a, p.qa, p.qb, p.ipB, 100, 200)
	connect(t, p.b, p.qb, p.qa, p.ipA, 200, 100)
	return p
}

func setupQP(t testing.TB, d *roce.Device) (*ibtransport.QP, *ibtransport.CQ, *ibtransport.MR) {
	t.Helper()
	ctx := d.Context()
	pd := ctx.AllocPD()
	cq, err := ctx.CreateCQ(256)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := ctx.CreateQP(pd, ibtransport.QPInitAttr{Type: ibtransport.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: ibtransport.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	mr, err := pd.RegMR(make([]byte, 1<<16), ibtransport.AccessLocalWrite|ibtransport.AccessRemoteWrite|ibtransport.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	return qp, cq, mr
}

func connect(t testing.TB, d *roce.Device, qp, peer *ibtransport.QP, peerIP netip.Addr, sq, rq uint32) {
	t.Helper()
	// Timeout 17 (0.54 s, 4.3 s with the retries): a veth or socket path right after
	// setup can lose the first frames for a good part of a second under load (seen in CI).
	connectTimeout(t, d, qp, peer, peerIP, sq, rq, 17)
}

// connectTimeout is connect with the QP's local ACK timeout given.
func connectTimeout(t testing.TB, d *roce.Device, qp, peer *ibtransport.QP, peerIP netip.Addr, sq, rq uint32, timeout uint8) {
	t.Helper()
	ah, err := d.AddressHandle(peerIP)
	if err != nil {
		t.Fatal(err)
	}
	connectAH(t, qp, peer, ah, d.PathMTU(), sq, rq, timeout)
}

// connectAH brings qp to RTS towards peer through ah, at path MTU mtu, with
// local ACK timeout timeout.
func connectAH(t testing.TB, qp, peer *ibtransport.QP, ah ibtransport.AddressHandle, mtu int, sq, rq uint32, timeout uint8) {
	t.Helper()
	for _, s := range []struct {
		a ibtransport.QPAttr
		m ibtransport.QPAttrMask
	}{
		{ibtransport.QPAttr{QPState: ibtransport.QPStateInit, Port: 1, AccessFlags: ibtransport.AccessRemoteWrite | ibtransport.AccessRemoteRead},
			ibtransport.QPAttrState | ibtransport.QPAttrPKeyIndex | ibtransport.QPAttrPort | ibtransport.QPAttrAccessFlags},
		{ibtransport.QPAttr{QPState: ibtransport.QPStateRTR, AH: ah, PathMTU: mtu, DestQPN: peer.QPN(), RQPSN: rq, MaxDestRdAtomic: 4, MinRNRTimer: 1},
			ibtransport.QPAttrState | ibtransport.QPAttrAH | ibtransport.QPAttrPathMTU | ibtransport.QPAttrDestQPN | ibtransport.QPAttrRQPSN | ibtransport.QPAttrMaxDestRdAtomic | ibtransport.QPAttrMinRNRTimer},
		{ibtransport.QPAttr{QPState: ibtransport.QPStateRTS, SQPSN: sq, Timeout: timeout, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4},
			ibtransport.QPAttrState | ibtransport.QPAttrSQPSN | ibtransport.QPAttrTimeout | ibtransport.QPAttrRetryCnt | ibtransport.QPAttrRNRRetry | ibtransport.QPAttrMaxRdAtomic},
	} {
		if err := qp.Modify(&s.a, s.m); err != nil {
			t.Fatal(err)
		}
	}
}

// write runs n RDMA WRITEs of size bytes from a to b and checks the bytes.
func (p *pair) write(t *testing.T, n, size int) {
	t.Helper()
	p.round++
	src := p.mra.Buf()
	for i := range src {
		src[i] = byte(i*7 + p.round*13)
	}
	posted, done := 0, 0
	wcs := make([]ibtransport.WC, 16)
	err := p.net.Drive(time.Minute, func() bool { return done == n }, func(time.Time) bool {
		moved := false
		for ; posted < n && posted-done < 32; posted++ {
			off := (posted * size) % (len(src) - size)
			if err := p.qa.PostSend(ibtransport.SendWR{WRID: uint64(posted), Opcode: ibtransport.WRRDMAWrite, Signaled: true,
				SGL: []ibtransport.SGE{p.mra.SGE(off, size)}, RemoteAddr: p.mrb.Addr() + uint64(off), RKey: p.mrb.RKey()}); err != nil {
				t.Fatal(err)
			}
			moved = true
		}
		k := p.cqa.Poll(wcs)
		for _, wc := range wcs[:k] {
			if wc.Status != ibtransport.WCSuccess || wc.WRID != uint64(done) {
				t.Fatalf("completion %v, want wr %d success", wc, done)
			}
			done++
		}
		return moved || k > 0
	}, p.a, p.b)
	if err != nil {
		t.Fatal(err)
	}
	covered := min(n*size, len(src)-size)
	if !bytes.Equal(p.mrb.Buf()[:covered], src[:covered]) {
		t.Fatal("written bytes differ")
	}
}

// TestDeviceDropsBadInput aims junk at a device while its QP carries RDMA
// WRITEs: each kind of bad frame is counted under its reason and dropped, and
// the connection carries on.
func TestDeviceDropsBadInput(t *testing.T) {
	p := newPair(t, sim.LinkConfig{Latency: 5 * time.Microsecond})
	p.write(t, 20, 3000)

	// A genuine frame from a to b to mutate: capture one by building it the way
	// the device does, through FrameHeaders.
	ib := make([]byte, ibtransport.BTHLen+ibtransport.RETHLen+64)
	ibtransport.BTH(ib).Encode(&ibtransport.BTHFields{Opcode: ibtransport.OpcodeRCRDMAWriteOnly, PKey: 0xffff, DestQP: p.qb.QPN(), PSN: 100})
	h := roce.FrameHeaders{DstMAC: p.macB, SrcMAC: [6]byte{2, 0, 0, 0, 0, 3}, Src: p.ipA, Dst: p.ipB, HopLimit: 64, SrcPort: 0xc000}
	good := make([]byte, h.Len()+len(ib)+roce.ICRCLen)
	copy(good[h.Len():], ib)
	if _, err := h.EncodeFrame(good, len(ib)); err != nil {
		t.Fatal(err)
	}
	badICRC := bytes.Clone(good)
	badICRC[len(badICRC)-1] ^= 1
	truncated := bytes.Clone(good[:h.Len()+6])
	// A flipped TTL keeps the ICRC (it masks TTL and the checksum) but not
	// the IPv4 header checksum.
	badTTL := bytes.Clone(good)
	badTTL[roce.EthernetLen+8] ^= 0x10
	unknownQP := bytes.Clone(good)
	ibtransport.BTH(unknownQP[h.Len():]).SetDestQP(0xabcde)
	var f roce.Frame
	if err := f.DecodeEthernet(unknownQP); err != nil {
		t.Fatal(err)
	}
	roce.SetICRC(&f)
	wrongPKey := bytes.Clone(good)
	ibtransport.BTH(wrongPKey[h.Len():]).SetDestQP(p.qb.QPN())
	ibtransport.BTH(wrongPKey[h.Len():]).SetPKey(0x8001)
	if err := f.DecodeEthernet(wrongPKey); err != nil {
		t.Fatal(err)
	}
	roce.SetICRC(&f)
	notForUs := roce.FrameHeaders{DstMAC: p.macB, Src: p.ipA, Dst: netip.MustParseAddr("10.1.0.99"), HopLimit: 64, SrcPort: 0xc000}
	other := make([]byte, notForUs.Len()+len(ib)+roce.ICRCLen)
	copy(other[notForUs.Len():], ib)
	if _, err := notForUs.EncodeFrame(other, len(ib)); err != nil {
		t.Fatal(err)
	}
	arp := make([]byte, 60)
	copy(arp, p.macB[:])
	arp[12], arp[13] = 0x08, 0x06

	before := p.b.Counters()
	pkeyDropsBefore := p.qb.Counters().Drops[ibtransport.DropPKey]
	junk := [][]byte{badICRC, truncated, unknownQP, other, arp, badICRC, wrongPKey, badTTL}
	if _, err := p.bad.Write(junk, 0); err != nil {
		t.Fatal(err)
	}
	p.write(t, 20, 3000) // delivers the junk and proves the QP still works
	c := p.b.Counters()
	for _, tc := range []struct {
		name      string
		got, want uint64
	}{
		{"BadICRC", c.BadICRC - before.BadICRC, 2},
		{"BadIPChecksum", c.BadIPChecksum - before.BadIPChecksum, 1},
		{"Malformed", c.Malformed - before.Malformed, 1},
		{"EngineDrops (unknown QP, wrong P_Key)", c.EngineDrops - before.EngineDrops, 2},
		{"QP drops for P_Key", p.qb.Counters().Drops[ibtransport.DropPKey] - pkeyDropsBefore, 1},
		{"NotForUs", c.NotForUs - before.NotForUs, 1},
		{"NotRoCE", c.NotRoCE - before.NotRoCE, 1},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, tc.got, tc.want)
		}
	}
	if got := p.b.Context().Counters().UnknownQP; got == 0 {
		t.Errorf("engine UnknownQP counter = 0, want it to count the frame for QP 0xabcde")
	}
}

// TestDeviceCorruptionCaughtByICRC runs WRITEs over a link that flips a bit in
// 5% of frames: the ICRC rejects them, retransmission repairs the loss, and
// every byte arrives intact.
func TestDeviceCorruptionCaughtByICRC(t *testing.T) {
	p := newPair(t, sim.LinkConfig{Latency: 5 * time.Microsecond, Corrupt: 0.05})
	p.write(t, 200, 4000)
	if p.a.Counters().BadICRC+p.b.Counters().BadICRC == 0 {
		t.Fatal("no frame was rejected for its ICRC on a corrupting link")
	}
	if p.qa.Counters().Retransmissions == 0 {
		t.Fatal("no retransmission repaired the corrupted frames")
	}
}

// TestDeviceFrameSourcePort checks that RC frames leave from the UDP source
// port rxe would use for the QP pair (the flow-label-less mix of both QPNs).
func TestDeviceFrameSourcePort(t *testing.T) {
	p := newPair(t, sim.LinkConfig{Latency: time.Microsecond})
	var ports []uint16
	p.net.Links()[0].SetConfig(sim.AtoB, sim.LinkConfig{Latency: time.Microsecond, DropFunc: func(_ sim.Direction, frame []byte) bool {
		var f roce.Frame
		if f.DecodeEthernet(frame) == nil {
			ports = append(ports, f.SrcPort)
		}
		return false
	}})
	p.write(t, 3, 100)
	want := roce.ConnectedUDPSourcePort(0, p.qa.QPN(), p.qb.QPN())
	if len(ports) == 0 {
		t.Fatal("saw no frame from a")
	}
	for _, got := range ports {
		if got != want {
			t.Fatalf("UDP source port %d, want %d", got, want)
		}
	}
}
