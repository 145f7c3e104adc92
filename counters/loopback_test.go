//go:build linux

package counters_test

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/softrdma/softrdma/counters"
	"github.com/softrdma/softrdma/device"
	"github.com/softrdma/softrdma/devspec"
	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/netio"
)

// TestLoopbackDevices opens two RoCE devices on loopback addresses (UDP,
// device.Open, which registers them in counters.Default), moves N SENDs of
// S bytes between RC QPs and checks what counters.Default and a metrics
// endpoint (Serve, read back by Fetch) say: A sent N SENDs and whatever it
// retransmitted, each BTH plus S bytes; B received all of them (loopback
// loses nothing); B's ACKs are A's; a datagram with a bad ICRC aimed at B
// is one drops.bad_icrc on B's device; after Close both devices are kept,
// State "closed", with their last counts. Nothing is compared with a time.
func TestLoopbackDevices(t *testing.T) {
	const n, size = 8, 200
	ipA, ipB := netip.MustParseAddr("127.0.93.1"), netip.MustParseAddr("127.0.93.2")
	mark := counters.Default.Mark()
	open := func(ip netip.Addr, name string, seed uint64) *device.RoCE {
		d, err := device.Open(devspec.Spec{Transport: devspec.RoCE, Addr: ip, Backend: devspec.BackendUDP, Name: name}, device.Config{Seed: seed})
		if err != nil {
			t.Skipf("cannot open a RoCE device on %v: %v", ip, err)
		}
		return d.(*device.RoCE)
	}
	a := open(ipA, "left", 7)
	defer a.Close()
	b := open(ipB, "right", 8)
	defer b.Close()

	qp := func(d *device.RoCE) (*ib.QP, *ib.CQ, *ib.MR) {
		ctx := d.Context()
		pd := ctx.AllocPD()
		cq, err := ctx.CreateCQ(64)
		if err != nil {
			t.Fatal(err)
		}
		q, err := ctx.CreateQP(pd, ib.QPInitAttr{Type: ib.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: ib.QPCap{MaxSendWR: 32, MaxRecvWR: 32, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		mr, err := pd.RegMR(make([]byte, n*size), ib.AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		return q, cq, mr
	}
	qa, cqa, mra := qp(a)
	qb, cqb, mrb := qp(b)
	connect := func(d *device.RoCE, q, peer *ib.QP, peerIP netip.Addr) {
		ah, err := d.RoCE().AddressHandle(peerIP)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []struct {
			a ib.QPAttr
			m ib.QPAttrMask
		}{
			{ib.QPAttr{QPState: ib.QPStateInit, Port: 1}, ib.QPAttrState | ib.QPAttrPKeyIndex | ib.QPAttrPort | ib.QPAttrAccessFlags},
			{ib.QPAttr{QPState: ib.QPStateRTR, AH: ah, PathMTU: d.PathMTU(), DestQPN: peer.QPN(), MaxDestRdAtomic: 1, MinRNRTimer: 1},
				ib.QPAttrState | ib.QPAttrAH | ib.QPAttrPathMTU | ib.QPAttrDestQPN | ib.QPAttrRQPSN | ib.QPAttrMaxDestRdAtomic | ib.QPAttrMinRNRTimer},
			{ib.QPAttr{QPState: ib.QPStateRTS, Timeout: 17, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
				ib.QPAttrState | ib.QPAttrSQPSN | ib.QPAttrTimeout | ib.QPAttrRetryCnt | ib.QPAttrRNRRetry | ib.QPAttrMaxRdAtomic},
		} {
			if err := q.Modify(&s.a, s.m); err != nil {
				t.Fatal(err)
			}
		}
	}
	connect(a, qa, qb, ipB)
	connect(b, qb, qa, ipA)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wait := func(cq *ib.CQ, k int) {
		t.Helper()
		wc := make([]ib.WC, k)
		for got := 0; got < k; {
			m := cq.Poll(wc[got:])
			for _, c := range wc[got : got+m] {
				if c.Status != ib.WCSuccess {
					t.Fatalf("completion %v", c)
				}
			}
			if got += m; got < k {
				if err := cq.Wait(ctx); err != nil {
					t.Fatalf("%d of %d completions: %v", got, k, err)
				}
			}
		}
	}
	for i := range n {
		if err := qb.PostRecv(ib.RecvWR{WRID: uint64(i), SGL: []ib.SGE{mrb.SGE(i*size, size)}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		if err := qa.PostSend(ib.SendWR{WRID: uint64(i), Opcode: ib.WRSend, Signaled: true, SGL: []ib.SGE{mra.SGE(i*size, size)}}); err != nil {
			t.Fatal(err)
		}
	}
	wait(cqb, n)
	wait(cqa, n)

	// A datagram for qb with a bad ICRC, from a plain socket.
	before := b.RoCE().Counters()
	junk, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(ipB, netio.RoCEv2Port)))
	if err != nil {
		t.Fatal(err)
	}
	defer junk.Close()
	pkt := make([]byte, ib.BTHLen+4)
	ib.BTH(pkt).Encode(&ib.BTHFields{Opcode: ib.OpcodeRCSendOnly, PKey: 0xffff, DestQP: qb.QPN()})
	if _, err := junk.Write(pkt); err != nil {
		t.Fatal(err)
	}
	for b.RoCE().Counters().FramesIn == before.FramesIn {
		select {
		case <-ctx.Done():
			t.Fatal("the bad datagram never arrived")
		case <-time.After(time.Millisecond):
		}
	}

	s := counters.Default.Since(mark)
	if len(s.Devices) != 2 || s.Devices[0].Name != "left" || s.Devices[1].Name != "right" {
		t.Fatalf("Default.Since: %+v, want left and right", s.Devices)
	}
	da, db := s.Devices[0], s.Devices[1]
	ca, cb := da.Counters, db.Counters
	if da.Transport != "roce" || da.Address != ipA.String() || da.State != "active" || len(da.QPs) != 1 || da.QPs[0].QPN != qa.QPN() ||
		da.QPs[0].DestQPN != qb.QPN() || da.QPs[0].Type != "RC" || da.QPs[0].State != "RTS" {
		t.Errorf("device left: %+v", da)
	}
	if sent := ca.PacketsOut - ca.Retransmissions - ca.Probes; sent != n {
		t.Errorf("left: packets_out %d less retransmissions %d and probes %d = %d, want %d SENDs", ca.PacketsOut, ca.Retransmissions, ca.Probes, sent, n)
	}
	if ca.BytesOut != ca.PacketsOut*(ib.BTHLen+size) {
		t.Errorf("left: bytes_out %d, want %d packets of %d", ca.BytesOut, ca.PacketsOut, ib.BTHLen+size)
	}
	// The bad datagram never reaches the engine: not in packets_in.
	if cb.PacketsIn != ca.PacketsOut || cb.BytesIn != ca.BytesOut {
		t.Errorf("right: packets_in %d bytes_in %d, want left's out, %d %d", cb.PacketsIn, cb.BytesIn, ca.PacketsOut, ca.BytesOut)
	}
	if ca.PacketsIn != cb.PacketsOut || ca.AcksReceived != cb.AcksSent || cb.AcksSent == 0 {
		t.Errorf("left received %d packets, %d ACKs; right sent %d, %d ACKs", ca.PacketsIn, ca.AcksReceived, cb.PacketsOut, cb.AcksSent)
	}
	if cb.Drops["bad_icrc"] != 1 || ca.Drops["bad_icrc"] != 0 {
		t.Errorf("drops.bad_icrc: left %d, right %d; want 0, 1", ca.Drops["bad_icrc"], cb.Drops["bad_icrc"])
	}
	if db.Link == nil || db.Link.FramesIn != before.FramesIn+1 {
		t.Errorf("right link %+v, want frames_in %d", db.Link, before.FramesIn+1)
	}

	srv, err := counters.Serve("", counters.Default)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if ap := srv.Addr.(*net.TCPAddr).AddrPort().Addr(); !ap.IsLoopback() {
		t.Errorf("Serve(\"\") listens on %v, want loopback", srv.Addr)
	}
	got, err := counters.Fetch(ctx, srv.Addr.String())
	if err != nil {
		t.Fatal(err)
	}
	// Fetch reads every device of Default (other tests' too): ours, by name.
	var fetched []counters.Device
	for _, d := range got.Devices {
		if d.Name == "left" || d.Name == "right" {
			fetched = append(fetched, d)
		}
	}
	if want := counters.Default.Since(mark).Devices; !reflect.DeepEqual(fetched, want) {
		t.Errorf("Fetch:\n%+v\nwant\n%+v", fetched, want)
	}

	a.Close()
	b.Close()
	s = counters.Default.Since(mark)
	if len(s.Devices) != 2 || s.Devices[0].State != "closed" || s.Devices[1].State != "closed" ||
		s.Devices[0].Counters.PacketsOut != ca.PacketsOut {
		t.Errorf("after Close: %+v", s.Devices)
	}
	var text bytes.Buffer
	counters.WriteText(&text, s)
	t.Logf("softrdma stat:\n%s", text.String())
}
