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
	open := func(ip netip.Addr, seed uint64) *roce.Device {
		ep, err := netio.NewUDP(netio.UDPConfig{LocalAddr: netip.AddrPortFrom(ip, netio.RoCEv2Port)})
		if err != nil {
			t.Skipf("cannot open a UDP socket on %v: %v", ip, err)
		}
		d, err := roce.NewDevice(roce.DeviceConfig{Endpoint: ep, Addrs: []netip.Addr{ip}, Engine: ibtransport.ContextConfig{Seed: seed}})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- d.Run(ctx, netio.SystemClock{}) }()
		t.Cleanup(func() {
			ep.Close()
			if err := <-done; err != nil && ctx.Err() == nil {
				t.Errorf("Run: %v", err)
			}
		})
		return d
	}
	a, b := open(ipA, 1), open(ipB, 2)
	qa, cqa, mra := setupQP(t, a)
	qb, cqb, mrb := setupQP(t, b)
	connect(t, a, qa, qb, ipB, 0xfffff0, 7) // the requester's PSNs wrap
	connect(t, b, qb, qa, ipA, 7, 0xfffff0)

	wait := func(cq *ibtransport.CQ, want ibtransport.WCOpcode) ibtransport.WC {
		t.Helper()
		wc := make([]ibtransport.WC, 1)
		for {
			if cq.Poll(wc) == 1 {
				if wc[0].Status != ibtransport.WCSuccess || wc[0].Opcode != want {
					t.Fatalf("completion %v, want %v success", wc[0], want)
				}
				return wc[0]
			}
			if err := cq.Wait(ctx); err != nil {
				t.Fatalf("waiting for %v: %v", want, err)
			}
		}
	}
	src := mra.Buf()
	for i := range src {
		src[i] = byte(i*31 + 5)
	}
	const size = 12000 // 12 packets at IB MTU 1024
	for round := 0; round < 5; round++ {
		off := round * size
		if err := qa.PostSend(ibtransport.SendWR{WRID: uint64(round), Opcode: ibtransport.WRRDMAWrite, Signaled: true,
			SGL: []ibtransport.SGE{mra.SGE(off, size)}, RemoteAddr: mrb.Addr() + uint64(off), RKey: mrb.RKey()}); err != nil {
			t.Fatal(err)
		}
		wait(cqa, ibtransport.WCRDMAWrite)
		if !bytes.Equal(mrb.Buf()[off:off+size], src[off:off+size]) {
			t.Fatalf("round %d: WRITE landed wrong bytes", round)
		}
	}
	// READ back into a fresh part of a's region.
	if err := qa.PostSend(ibtransport.SendWR{WRID: 10, Opcode: ibtransport.WRRDMARead, Signaled: true,
		SGL: []ibtransport.SGE{mra.SGE(3*size, size)}, RemoteAddr: mrb.Addr(), RKey: mrb.RKey()}); err != nil {
		t.Fatal(err)
	}
	wait(cqa, ibtransport.WCRDMARead)
	if !bytes.Equal(mra.Buf()[3*size:4*size], src[:size]) {
		t.Fatal("READ returned wrong bytes")
	}
	// SEND b → a.
	if err := qa.PostRecv(ibtransport.RecvWR{WRID: 20, SGL: []ibtransport.SGE{mra.SGE(0, 4096)}}); err != nil {
		t.Fatal(err)
	}
	copy(mrb.Buf()[:3000], bytes.Repeat([]byte("softrdma"), 375))
	if err := qb.PostSend(ibtransport.SendWR{WRID: 21, Opcode: ibtransport.WRSend, Signaled: true, SGL: []ibtransport.SGE{mrb.SGE(0, 3000)}}); err != nil {
		t.Fatal(err)
	}
	wait(cqb, ibtransport.WCSend)
	if wc := wait(cqa, ibtransport.WCRecv); wc.ByteLen != 3000 || !bytes.Equal(mra.Buf()[:3000], mrb.Buf()[:3000]) {
		t.Fatalf("SEND: %v", wc)
	}
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
	if err := qa.PostSend(ibtransport.SendWR{WRID: 30, Opcode: ibtransport.WRRDMAWrite, Signaled: true,
		SGL: []ibtransport.SGE{mra.SGE(0, size)}, RemoteAddr: mrb.Addr(), RKey: mrb.RKey()}); err != nil {
		t.Fatal(err)
	}
	wait(cqa, ibtransport.WCRDMAWrite)
}
