package roce_test

import (
	"bytes"
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/ibtransport/ibtest"
	"github.com/softrdma/softrdma/netio"
	"github.com/softrdma/softrdma/roce"
)

// mcastQP is a UD QP in RTS with its own CQ and a receive buffer.
type mcastQP struct {
	qp *ibtransport.QP
	cq *ibtransport.CQ
	mr *ibtransport.MR
}

func newMcastQP(t *testing.T, d *roce.Device, qkey uint32) *mcastQP {
	t.Helper()
	ctx := d.Context()
	pd := ctx.AllocPD()
	cq, err := ctx.CreateCQ(64)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := ctx.CreateQP(pd, ibtransport.QPInitAttr{Type: ibtransport.QPTypeUD, SendCQ: cq, RecvCQ: cq,
		Cap: ibtransport.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ibtest.UDToRTS(qp, qkey, 7); err != nil {
		t.Fatal(err)
	}
	mr, err := pd.RegMR(make([]byte, 16*1024), ibtransport.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 16 {
		if err := qp.PostRecv(ibtransport.RecvWR{WRID: uint64(i), SGL: []ibtransport.SGE{mr.SGE(i*1024, 1024)}}); err != nil {
			t.Fatal(err)
		}
	}
	return &mcastQP{qp: qp, cq: cq, mr: mr}
}

// TestMulticastOverUDP: three devices on UDP sockets on 127.0.79.1-3 (lo
// carries IPv4 multicast, in the host's namespace and in a new one). A
// sends UD messages to QPN 0xFFFFFF and the IPv4-mapped group 239.77.1.1;
// every QP attached to the group on B and C receives each one, with its
// payload; B's QP that attached and detached again, and B's QP never
// attached, receive nothing. When B's last QP detaches B leaves the group:
// the next message reaches C alone. C's endpoint is wrapped in a capture
// (--pcap), which records the 4 messages its member socket received.
func TestMulticastOverUDP(t *testing.T) {
	ips := []netip.Addr{netip.MustParseAddr("127.0.79.1"), netip.MustParseAddr("127.0.79.2"), netip.MustParseAddr("127.0.79.3")}
	group := netip.MustParseAddr("::ffff:239.77.1.1").As16()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	devs := make([]*roce.Device, len(ips))
	var capC bytes.Buffer // C's capture (--pcap)
	var cw *netio.CaptureWriter
	for i, ip := range ips {
		udp, err := netio.NewUDP(netio.UDPConfig{LocalAddr: netip.AddrPortFrom(ip, netio.RoCEv2Port)})
		if err != nil {
			t.Skipf("cannot open a UDP socket on %v: %v", ip, err)
		}
		var ep netio.Link = udp
		if i == 2 {
			if cw, err = netio.NewCaptureWriter(&capC, netio.FormatPcap); err != nil {
				t.Fatal(err)
			}
			ep = netio.NewCaptureInto(netio.NewUDPFrames(udp, [6]byte{}, [6]byte{}), cw, nil, nil)
		}
		d, err := roce.NewDevice(roce.DeviceConfig{Endpoint: ep, Addrs: []netip.Addr{ip}, Engine: ibtransport.ContextConfig{Seed: uint64(i + 1)}})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- d.Run(ctx, netio.SystemClock{}) }()
		t.Cleanup(func() {
			d.Close()
			if err := <-done; err != nil && ctx.Err() == nil {
				t.Errorf("Run: %v", err)
			}
		})
		devs[i] = d
	}
	a, b, c := devs[0], devs[1], devs[2]
	const qkey = 0x01234567
	sender := newMcastQP(t, a, qkey)
	qps := map[string]*mcastQP{
		"b1": newMcastQP(t, b, qkey), "b2": newMcastQP(t, b, qkey), "bdetached": newMcastQP(t, b, qkey),
		"bnever": newMcastQP(t, b, qkey), "c": newMcastQP(t, c, qkey),
	}
	for _, name := range []string{"b1", "b2", "bdetached"} {
		if err := b.AttachMulticast(qps[name].qp, group); err != nil {
			t.Fatalf("attach %s: %v", name, err)
		}
	}
	if err := c.AttachMulticast(qps["c"].qp, group); err != nil {
		t.Fatal(err)
	}
	if err := b.DetachMulticast(qps["bdetached"].qp, group); err != nil {
		t.Fatal(err)
	}

	ah, err := a.AddressHandle(netip.AddrFrom16(group))
	if err != nil {
		t.Fatalf("address handle of the group: %v", err)
	}
	if ah.DGID != group {
		t.Fatalf("AH DGID %v", netip.AddrFrom16(ah.DGID))
	}
	src := sender.mr.Buf()
	// send sends messages first..first+n-1, each from its own part of the
	// buffer (the engine reads it after PostSend returns).
	send := func(n, first int) {
		t.Helper()
		for i := first; i < first+n; i++ {
			copy(src[i*100:], []byte{byte(0xA0 + i), 1, 2, 3})
			if err := sender.qp.PostSend(ibtransport.SendWR{WRID: uint64(i), Opcode: ibtransport.WRSend,
				SGL: []ibtransport.SGE{sender.mr.SGE(i*100, 100)}, AH: &ah, RemoteQPN: ibtransport.MulticastQPN, RemoteQKey: qkey}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// recv waits for n receives on q and checks each one's payload.
	recv := func(name string, n, first int) {
		t.Helper()
		q := qps[name]
		wcs := make([]ibtransport.WC, 8)
		for got := 0; got < n; {
			k := q.cq.Poll(wcs)
			for _, wc := range wcs[:k] {
				if wc.Status != ibtransport.WCSuccess || wc.ByteLen != 40+100 || wc.SrcQP != sender.qp.QPN() {
					t.Fatalf("%s: completion %+v", name, wc)
				}
				if p := q.mr.Buf()[int(wc.WRID)*1024+40]; p != byte(0xA0+first+got) {
					t.Fatalf("%s: message %d starts %#x", name, got, p)
				}
				got++
			}
			if k == 0 {
				select {
				case <-ctx.Done():
					t.Fatalf("%s: %d of %d messages received", name, got, n)
				case <-time.After(time.Millisecond):
				}
			}
		}
	}
	empty := func(name string) {
		t.Helper()
		if k := qps[name].cq.Poll(make([]ibtransport.WC, 8)); k != 0 {
			t.Errorf("QP %s received %d messages", name, k)
		}
	}
	send(3, 0)
	for _, name := range []string{"b1", "b2", "c"} {
		recv(name, 3, 0)
	}
	// b's three QPs saw each packet in the same engine call: the detached
	// and never attached ones would have their completions by now.
	empty("bdetached")
	empty("bnever")

	for _, name := range []string{"b1", "b2"} {
		if err := b.DetachMulticast(qps[name].qp, group); err != nil {
			t.Fatal(err)
		}
	}
	before := b.Counters()
	send(1, 3)
	recv("c", 1, 3)
	for _, name := range []string{"b1", "b2", "bdetached", "bnever"} {
		empty(name)
	}
	if after := b.Counters(); after.NotForUs != before.NotForUs || after.FramesIn != before.FramesIn {
		t.Errorf("b saw a frame after leaving the group: %+v -> %+v", before, after)
	}

	// C's capture holds the 4 messages its member socket received, as
	// frames to the group.
	if err := cw.Flush(); err != nil {
		t.Fatal(err)
	}
	toGroup := 0
	for _, fr := range readCapture(t, bytes.NewReader(capC.Bytes())) {
		var f roce.Frame
		if f.DecodeEthernet(fr) == nil && f.Dst == netip.AddrFrom16(group).Unmap() && f.DstPort == netio.RoCEv2Port {
			toGroup++
		}
	}
	if toGroup != 4 {
		t.Errorf("C's capture has %d frames to the group, want the 4 it received", toGroup)
	}
}
