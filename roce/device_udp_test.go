package roce_test

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/netio"
	"github.com/softrdma/softrdma/roce"
)

// TestDeviceOverUDP runs RC WRITEs, READs and SENDs between two devices on UDP
// sockets on loopback (no root needed), each driven by Run in its own
// goroutine: the path an unprivileged user takes. Frames leave with IPv4 ID 0
// and arrive with the ID unknown, so the receiving device recovers it from the
// ICRC; none may fail that check.
func TestDeviceOverUDP(t *testing.T) {
	ipA, ipB := netip.MustParseAddr("127.0.77.1"), netip.MustParseAddr("127.0.77.2")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, b := runUDPDevice(t, ctx, ipA, 1), runUDPDevice(t, ctx, ipB, 2)
	qa, cqa, mra := setupQP(t, a)
	qb, cqb, mrb := setupQP(t, b)
	connect(t, a, qa, qb, ipB, 0xfffff0, 7) // the requester's PSNs wrap
	connect(t, b, qb, qa, ipA, 7, 0xfffff0)

	wait := completionWaiter(t, ctx, nil)
	const size = 12000 // 12 packets at IB MTU 1024
	src := writeReadSend(t, wait, qa, qb, cqa, cqb, mra, mrb, 5, 3*size)
	for name, d := range map[string]*roce.Device{"a": a, "b": b} {
		c := d.Counters()
		if c.BadICRC != 0 || c.Malformed != 0 || c.EngineDrops != 0 || c.FramesIn == 0 {
			t.Errorf("device %s counters %+v", name, c)
		}
	}

	// Junk datagrams aimed at b's port: a short one, random bytes, and a real
	// packet for an unknown QP whose ICRC is wrong. Each is counted under its
	// reason and dropped; the connection carries on.
	junk, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(ipB, netio.RoCEv2Port)))
	if err != nil {
		t.Fatal(err)
	}
	defer junk.Close()
	bth := make([]byte, ibtransport.BTHLen+8)
	ibtransport.BTH(bth).Encode(&ibtransport.BTHFields{Opcode: ibtransport.OpcodeRCSendOnly, PKey: 0xffff, DestQP: 0x123456})
	before := b.Counters()
	for _, d := range [][]byte{{1, 2, 3}, bytes.Repeat([]byte{0xa5}, 200), bth} {
		if _, err := junk.Write(d); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); b.Counters().FramesIn < before.FramesIn+3 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	c := b.Counters()
	if got := (c.Malformed + c.BadICRC) - (before.Malformed + before.BadICRC); got != 3 {
		t.Errorf("junk datagrams: malformed+bad ICRC grew by %d, want 3 (%+v)", got, c)
	}
	checkBadDatagrams(t, b, qb, ipA, ipB)
	if err := qa.PostSend(ibtransport.SendWR{WRID: 30, Opcode: ibtransport.WRRDMAWrite, Signaled: true,
		SGL: []ibtransport.SGE{mra.SGE(0, size)}, RemoteAddr: mrb.Addr(), RKey: mrb.RKey()}); err != nil {
		t.Fatal(err)
	}
	wait(cqa, ibtransport.WCRDMAWrite)
	if !bytes.Equal(mrb.Buf()[:size], src[:size]) {
		t.Fatal("WRITE after the bad datagrams landed wrong bytes")
	}
	// And a SEND the other way, through qb's responder and requester.
	if err := qa.PostRecv(ibtransport.RecvWR{WRID: 31, SGL: []ibtransport.SGE{mra.SGE(0, 4096)}}); err != nil {
		t.Fatal(err)
	}
	copy(mrb.Buf()[:100], bytes.Repeat([]byte("after bad"), 12))
	if err := qb.PostSend(ibtransport.SendWR{WRID: 32, Opcode: ibtransport.WRSend, Signaled: true, SGL: []ibtransport.SGE{mrb.SGE(0, 100)}}); err != nil {
		t.Fatal(err)
	}
	wait(cqb, ibtransport.WCSend)
	if wc := wait(cqa, ibtransport.WCRecv); wc.ByteLen != 100 || !bytes.Equal(mra.Buf()[:100], mrb.Buf()[:100]) {
		t.Fatalf("SEND after the bad datagrams: %v", wc)
	}
	if qc := qb.Counters(); qc.Drops[ibtransport.DropPKey] != 1 || qc.Drops[ibtransport.DropOutOfSequence] != 0 {
		t.Errorf("qb drops %v, want exactly the one P_Key drop", qc.Drops)
	}
}

// udpCounts is what checkBadDatagrams compares before and after each datagram.
type udpCounts struct {
	dev    roce.DeviceCounters
	engine ibtransport.ContextCounters
	qp     ibtransport.QPCounters
}

// checkBadDatagrams sends d (b's device, qb its connected RC QP on ipB), from a
// plain UDP socket on the address of qb's peer, ipA (another port), one at a time: a packet with a valid ICRC for a QPN that
// does not exist, one for qb with a P_Key of another partition, a datagram too
// short to hold a BTH and ICRC, an RDMA WRITE whose RETH is cut off (valid
// ICRC), and a SEND for qb whose ICRC is wrong. Each must raise exactly its own
// counters (device, engine and QP) and reach nothing else.
func checkBadDatagrams(t *testing.T, d *roce.Device, qb *ibtransport.QP, ipA, ipB netip.Addr) {
	t.Helper()
	conn, err := net.DialUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(ipA, 0)), net.UDPAddrFromAddrPort(netip.AddrPortFrom(ipB, netio.RoCEv2Port)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	local := conn.LocalAddr().(*net.UDPAddr).AddrPort()
	hdrs := roce.FrameHeaders{Src: local.Addr().Unmap(), Dst: ipB, SrcPort: local.Port(), HopLimit: 64}

	// packet returns the UDP payload of an IB packet (BTH and payload, padded)
	// with the ICRC the device computes for it, XOR flip.
	packet := func(bth ibtransport.BTHFields, payload []byte, flip uint32) []byte {
		t.Helper()
		pad := (4 - len(payload)%4) % 4
		bth.PadCount = uint8(pad)
		ib := make([]byte, ibtransport.BTHLen, ibtransport.BTHLen+len(payload)+pad+roce.ICRCLen)
		ibtransport.BTH(ib).Encode(&bth)
		ib = append(ib, payload...)
		ib = append(ib, make([]byte, pad)...)
		hdr := make([]byte, hdrs.Len())
		if _, err := hdrs.Encode(hdr, len(ib)); err != nil {
			t.Fatal(err)
		}
		icrc := make([]byte, roce.ICRCLen)
		roce.PutICRC(icrc, hdrs.ICRC(hdr, ib)^flip)
		if flip != 0 {
			// The device reads the IPv4 ID of a socket datagram as unknown and
			// looks for one that makes the ICRC verify; one corrupted ICRC in
			// 2^16 has one. Make sure this one does not.
			var f roce.Frame
			if err := f.DecodeEthernet(append(append(hdr, ib...), icrc...)); err != nil {
				t.Fatal(err)
			}
			if id, ok := roce.RecoverIPv4ID(&f); ok {
				t.Fatalf("corrupted ICRC %#x verifies with IPv4 ID %#x: pick another flip", flip, id)
			}
		}
		return append(ib, icrc...)
	}
	snapshot := func() udpCounts {
		return udpCounts{d.Counters(), d.Context().Counters(), qb.Counters()}
	}
	// The device's few QPNs sit near its allocator's start (below 0x200); this
	// one is far from them.
	noQP := qb.QPN() ^ 0x5a5a00
	send := ibtransport.BTHFields{Opcode: ibtransport.OpcodeRCSendOnly, PKey: 0xffff, DestQP: qb.QPN(), PSN: 0x1234}
	unknownQP, badPKey, shortRETH := send, send, send
	unknownQP.DestQP = noQP
	badPKey.PKey = 0x8001 // full member of partition 1, not the default partition
	shortRETH.Opcode = ibtransport.OpcodeRCRDMAWriteOnly

	for _, tt := range []struct {
		name  string
		dgram []byte
		check func(before, after udpCounts) bool
	}{
		{"valid ICRC, unknown QPN", packet(unknownQP, []byte("nobody home"), 0), func(b, a udpCounts) bool {
			return a.dev.EngineDrops == b.dev.EngineDrops+1 && a.engine.UnknownQP == b.engine.UnknownQP+1 &&
				a.engine.PacketsIn == b.engine.PacketsIn+1 && a.qp.PacketsIn == b.qp.PacketsIn
		}},
		{"wrong P_Key", packet(badPKey, []byte("other partition"), 0), func(b, a udpCounts) bool {
			return a.dev.EngineDrops == b.dev.EngineDrops+1 && a.engine.UnknownQP == b.engine.UnknownQP &&
				a.qp.Drops[ibtransport.DropPKey] == b.qp.Drops[ibtransport.DropPKey]+1 && a.qp.PacketsIn == b.qp.PacketsIn+1
		}},
		{"truncated below BTH+ICRC", packet(send, nil, 0)[:ibtransport.BTHLen+roce.ICRCLen-1], func(b, a udpCounts) bool {
			return a.dev.Malformed == b.dev.Malformed+1 && a.engine.PacketsIn == b.engine.PacketsIn
		}},
		{"RETH cut off, valid ICRC", packet(shortRETH, []byte{1, 2, 3, 4}, 0), func(b, a udpCounts) bool {
			return a.dev.EngineDrops == b.dev.EngineDrops+1 && a.engine.Malformed == b.engine.Malformed+1 &&
				a.qp.PacketsIn == b.qp.PacketsIn
		}},
		{"bad ICRC", packet(send, []byte("corrupted"), 0x00010000), func(b, a udpCounts) bool {
			return a.dev.BadICRC == b.dev.BadICRC+1 && a.engine.PacketsIn == b.engine.PacketsIn
		}},
	} {
		before := snapshot()
		if _, err := conn.Write(tt.dgram); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(5 * time.Second); d.Counters().FramesIn == before.dev.FramesIn && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(10 * time.Millisecond) // nothing else may follow
		after := snapshot()
		// Only the datagram's own counters move.
		b, a := before, after
		others := func(c roce.DeviceCounters) [6]uint64 {
			return [6]uint64{c.NotRoCE, c.Malformed, c.NotForUs, c.BadICRC, c.BadIPChecksum, c.EngineDrops}
		}
		ob, oa := others(b.dev), others(a.dev)
		moved := 0
		for i := range ob {
			if oa[i] != ob[i] {
				moved++
			}
		}
		if a.dev.FramesIn != b.dev.FramesIn+1 || moved != 1 || !tt.check(b, a) ||
			a.engine.Malformed+a.engine.UnknownQP-b.engine.Malformed-b.engine.UnknownQP > 1 {
			t.Errorf("%s: counters\nbefore %+v\n       %+v\n       qp drops %v\nafter  %+v\n       %+v\n       qp drops %v",
				tt.name, b.dev, b.engine, b.qp.Drops, a.dev, a.engine, a.qp.Drops)
		}
		if qs := qb.State(); qs != ibtransport.QPStateRTS {
			t.Fatalf("%s: qb in %v", tt.name, qs)
		}
	}
}

// TestDeviceOverUDPAllocs: in steady state a 16 KiB RDMA WRITE between two
// devices on UDP sockets (16 packets at MTU 1024 leaving as datagrams, as a
// GSO run over IPv4; the ACK read where the kernel put it) allocates
// nothing, driven by Poll: the datagram path reuses its buffers.
func TestDeviceOverUDPAllocs(t *testing.T) {
	p := newUDPPollPair(t, netip.MustParseAddr("127.0.76.1"), netip.MustParseAddr("127.0.76.2"), 24791)
	qa, cqa, mra, mrb := p.qa, p.cqa, p.mra, p.mrb
	a, b := p.a, p.b
	const size = 16 << 10
	wr := ibtransport.SendWR{Opcode: ibtransport.WRRDMAWrite, Signaled: true,
		SGL: []ibtransport.SGE{mra.SGE(0, size)}, RemoteAddr: mrb.Addr(), RKey: mrb.RKey()}
	wc := make([]ibtransport.WC, 1)
	step := func() {
		if err := qa.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		for cqa.Poll(wc) == 0 {
			now := time.Now()
			if _, err := a.Poll(now); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Poll(now); err != nil {
				t.Fatal(err)
			}
		}
		if wc[0].Status != ibtransport.WCSuccess {
			t.Fatalf("completion %v", wc[0])
		}
	}
	for range 8 { // warm up: source-port sockets, caches
		step()
	}
	if n := testing.AllocsPerRun(50, step); n != 0 {
		t.Errorf("%v allocations per 16 KiB WRITE", n)
	}
}

// udpPollPair is two devices on UDP sockets on loopback with an RC QP each,
// connected, for tests and benchmarks that drive them with Poll.
type udpPollPair struct {
	a, b     *roce.Device
	qa, qb   *ibtransport.QP
	cqa      *ibtransport.CQ
	mra, mrb *ibtransport.MR
}

// newUDPPollPair opens the devices on ipA and ipB, UDP port port (skipping
// when a socket cannot be opened), and connects their QPs.
func newUDPPollPair(tb testing.TB, ipA, ipB netip.Addr, port uint16) *udpPollPair {
	tb.Helper()
	open := func(ip netip.Addr, seed uint64) *roce.Device {
		ep, err := netio.NewUDP(netio.UDPConfig{LocalAddr: netip.AddrPortFrom(ip, port)})
		if err != nil {
			tb.Skipf("cannot open a UDP socket on %v: %v", ip, err)
		}
		tb.Cleanup(func() { ep.Close() })
		d, err := roce.NewDevice(roce.DeviceConfig{Endpoint: ep, Addrs: []netip.Addr{ip}, UDPPort: port,
			Engine: ibtransport.ContextConfig{Seed: seed}})
		if err != nil {
			tb.Fatal(err)
		}
		return d
	}
	p := &udpPollPair{a: open(ipA, 1), b: open(ipB, 2)}
	p.qa, p.cqa, p.mra = setupQP(tb, p.a)
	p.qb, _, p.mrb = setupQP(tb, p.b)
	connect(tb, p.a, p.qa, p.qb, ipB, 100, 200)
	connect(tb, p.b, p.qb, p.qa, ipA, 200, 100)
	return p
}
