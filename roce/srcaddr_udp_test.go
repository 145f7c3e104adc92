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

// TestForgedSourceDropped: two devices on UDP sockets on 127.0.78.12 and
// .13 with RC QPs connected to each other, and a third host, 127.0.78.14,
// that knows the responder's QPN, its next PSN and an R_Key. The third host's
// RDMA WRITE (valid ICRC, P_Key, PSN, R_Key) is dropped by the responder as
// "source address mismatch" and changes no byte; the real peer's WRITE that
// follows, at the same PSN, lands. The forged packet built again with the
// peer's address as source, at the next PSN, is executed: the source is the
// only thing wrong with it.
func TestForgedSourceDropped(t *testing.T) {
	ipA, ipB := netip.MustParseAddr("127.0.78.12"), netip.MustParseAddr("127.0.78.13")
	forger := netip.MustParseAddr("127.0.78.14")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, b := runUDPDevice(t, ctx, ipA, 1), runUDPDevice(t, ctx, ipB, 2)
	qa, cqa, mra := setupQP(t, a)
	qb, _, mrb := setupQP(t, b)
	const psn = 0x300
	connect(t, a, qa, qb, ipB, psn, 0x700)
	connect(t, b, qb, qa, ipA, 0x700, psn)

	// write sends an RDMA WRITE Only of data to mrb's start at PSN p, from
	// src (another port than the devices'), and waits until b has read it.
	write := func(src netip.Addr, p uint32, data []byte) {
		t.Helper()
		conn, err := net.DialUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0)),
			net.UDPAddrFromAddrPort(netip.AddrPortFrom(ipB, netio.RoCEv2Port)))
		if err != nil {
			t.Skipf("cannot send from %v: %v", src, err)
		}
		defer conn.Close()
		local := conn.LocalAddr().(*net.UDPAddr).AddrPort()
		ib := make([]byte, ibtransport.BTHLen+ibtransport.RETHLen, 64)
		ibtransport.BTH(ib).Encode(&ibtransport.BTHFields{Opcode: ibtransport.OpcodeRCRDMAWriteOnly,
			PKey: 0xffff, DestQP: qb.QPN(), PSN: p, AckReq: true})
		reth := ibtransport.RETH(ib[ibtransport.BTHLen:])
		reth.SetVA(mrb.Addr())
		reth.SetRKey(mrb.RKey())
		reth.SetDMALen(uint32(len(data)))
		ib = append(ib, data...) // a multiple of 4: no pad
		hdrs := roce.FrameHeaders{Src: local.Addr().Unmap(), Dst: ipB, SrcPort: local.Port(), HopLimit: 64}
		hdr := make([]byte, hdrs.Len())
		if _, err := hdrs.Encode(hdr, len(ib)); err != nil {
			t.Fatal(err)
		}
		icrc := make([]byte, roce.ICRCLen)
		roce.PutICRC(icrc, hdrs.ICRC(hdr, ib))
		before := b.Counters().FramesIn
		if _, err := conn.Write(append(ib, icrc...)); err != nil {
			t.Fatal(err)
		}
		for b.Counters().FramesIn == before {
			if ctx.Err() != nil {
				t.Fatal("the WRITE never reached b")
			}
			time.Sleep(time.Millisecond)
		}
	}
	forged := []byte("forged!!")
	before := qb.Counters()
	devBefore := b.Counters()
	write(forger, psn, forged)
	if c := qb.Counters(); c.Drops[ibtransport.DropSourceAddress] != before.Drops[ibtransport.DropSourceAddress]+1 ||
		c.PacketsIn != before.PacketsIn+1 || c.AcksSent != before.AcksSent {
		t.Fatalf("after a WRITE from %v: qb drops %v, packets in %d (was %d), ACKs sent %d (was %d); want one %q drop, no ACK",
			forger, c.Drops, c.PacketsIn, before.PacketsIn, c.AcksSent, before.AcksSent, ibtransport.DropSourceAddress)
	}
	if c := b.Counters(); c.EngineDrops != devBefore.EngineDrops+1 || c.BadICRC != devBefore.BadICRC {
		t.Fatalf("device counters %+v, want one more engine drop and no bad ICRC (before %+v)", c, devBefore)
	}
	if bytes.Contains(mrb.Buf(), forged) {
		t.Fatal("the forged WRITE was executed")
	}

	// The real peer at the same PSN: its WRITE lands and completes.
	peer := []byte("from the peer")
	copy(mra.Buf(), peer)
	if err := qa.PostSend(ibtransport.SendWR{WRID: 1, Opcode: ibtransport.WRRDMAWrite, Signaled: true,
		SGL: []ibtransport.SGE{mra.SGE(0, len(peer))}, RemoteAddr: mrb.Addr(), RKey: mrb.RKey()}); err != nil {
		t.Fatal(err)
	}
	wc := make([]ibtransport.WC, 1)
	for cqa.Poll(wc) == 0 {
		if err := cqa.Wait(ctx); err != nil {
			t.Fatalf("waiting for the peer's WRITE: %v", err)
		}
	}
	if wc[0].Status != ibtransport.WCSuccess || !bytes.Equal(mrb.Buf()[:len(peer)], peer) {
		t.Fatalf("the peer's WRITE: %v, memory %q", wc[0], mrb.Buf()[:len(peer)])
	}

	// The same forged WRITE from the peer's address, at the PSN after the
	// peer's: executed.
	write(ipA, psn+1, forged)
	if !bytes.Equal(mrb.Buf()[:len(forged)], forged) {
		t.Fatalf("the WRITE from the peer's address was not executed: memory %q, qb drops %v", mrb.Buf()[:len(forged)], qb.Counters().Drops)
	}
	if c := qb.Counters(); c.Drops[ibtransport.DropSourceAddress] != before.Drops[ibtransport.DropSourceAddress]+1 {
		t.Fatalf("qb drops %v", c.Drops)
	}
}
