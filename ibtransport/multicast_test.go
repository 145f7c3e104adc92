package ibtransport_test

import (
	"errors"
	"net/netip"
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/ibtransport/ibtest"
)

// udQP makes a UD QP on e's context, in RTS with Q_Key qkey, receiving into e.CQ.
func udQP(t *testing.T, e *ibtest.Endpoint, qkey uint32) *ib.QP {
	t.Helper()
	qp, err := e.Ctx.CreateQP(e.PD, ib.QPInitAttr{Type: ib.QPTypeUD, SendCQ: e.CQ, RecvCQ: e.CQ,
		Cap: ib.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ibtest.UDToRTS(qp, qkey, 1); err != nil {
		t.Fatal(err)
	}
	return qp
}

// TestMulticastDelivery: a UD packet to QPN 0xFFFFFF and a group's GID
// reaches every QP attached to the group with the right Q_Key (each its own
// completion), and none that is detached, was never attached, has another
// Q_Key, or was destroyed; a group without QPs drops it. The hook hears of
// the group's first attachment and of its last detachment.
func TestMulticastDelivery(t *testing.T) {
	p := udPair(t)
	group := netip.MustParseAddr("::ffff:239.1.2.3").As16()
	var hook []string
	p.B.Ctx.SetMulticastHook(func(gid [16]byte, member bool) {
		hook = append(hook, netip.AddrFrom16(gid).Unmap().String()+map[bool]string{true: " join", false: " leave"}[member])
	})
	const qkey = 0x11111111
	qps := map[string]*ib.QP{
		"attached":  p.B.QP,
		"attached2": udQP(t, p.B, qkey),
		"detached":  udQP(t, p.B, qkey),
		"never":     udQP(t, p.B, qkey),
		"otherqkey": udQP(t, p.B, 0x22222222),
		"destroyed": udQP(t, p.B, qkey),
	}
	for _, name := range []string{"attached", "attached2", "detached", "otherqkey", "destroyed"} {
		if err := qps[name].AttachMulticast(group); err != nil {
			t.Fatalf("attach %s: %v", name, err)
		}
	}
	if err := qps["attached"].AttachMulticast(group); err != nil {
		t.Fatalf("a second attach of the same QP: %v, want nil (rxe)", err)
	}
	if err := qps["detached"].DetachMulticast(group); err != nil {
		t.Fatal(err)
	}
	if err := qps["destroyed"].Destroy(); err != nil {
		t.Fatal(err)
	}
	dst := newGuarded(t, p.B.PD, 40*6+6*64, ib.AccessLocalWrite)
	wrid := map[uint64]string{}
	i := uint64(0)
	for name, qp := range qps {
		if name == "destroyed" {
			continue
		}
		i++
		wrid[i] = name
		postRecv(t, qp, ib.RecvWR{WRID: i, SGL: []ib.SGE{dst.mr.SGE(int(i-1)*104, 104)}})
	}

	src := regMR(t, p.A.PD, pattern(64, 9), 0)
	post(t, p.A.QP, ib.SendWR{WRID: 100, Opcode: ib.WRSend, SGL: []ib.SGE{src.SGE(0, 64)},
		AH: &ib.AddressHandle{DGID: group, HopLimit: 64}, RemoteQPN: ib.MulticastQPN, RemoteQKey: qkey})
	out := ib.NewOutputBatch(4, 128, 0)
	if n := p.A.Ctx.Output(p.Wire.Clock.Now(), out); n != 1 {
		t.Fatalf("A output %d packets, want 1", n)
	}
	pkt := out.Packets[0]
	if pkt.DestQPN != ib.MulticastQPN {
		t.Fatalf("sent to QPN %#x", pkt.DestQPN)
	}
	meta := ib.InputMeta{HasGRH: true, SGID: ibtest.GID(ibtest.AToB), DGID: group, HopLimit: 64}
	if err := p.B.Ctx.Input(p.Wire.Clock.Now(), pkt.Packet(), meta); err != nil {
		t.Fatalf("multicast input: %v", err)
	}
	got := map[string]bool{}
	wcs := make([]ib.WC, 16)
	n := p.B.CQ.Poll(wcs)
	for _, wc := range wcs[:n] {
		if wc.Status != ib.WCSuccess || wc.ByteLen != 40+64 || wc.Flags&ib.WCFlagGRH == 0 {
			t.Errorf("%s: completion %v", wrid[wc.WRID], wc)
		}
		got[wrid[wc.WRID]] = true
	}
	for name := range qps {
		want := name == "attached" || name == "attached2"
		if got[name] != want {
			t.Errorf("QP %s received: %v, want %v", name, got[name], want)
		}
	}
	if c := qps["otherqkey"].Counters(); c.Drops[ib.DropQKey] != 1 {
		t.Errorf("QP otherqkey drops %v, want one Q_Key drop", c.Drops)
	}

	// Another group's packet, and this group's once all have left: dropped.
	other := meta
	other.DGID = netip.MustParseAddr("::ffff:239.9.9.9").As16()
	if err := p.B.Ctx.Input(p.Wire.Clock.Now(), pkt.Packet(), other); !errors.Is(err, ib.ErrDropped) {
		t.Errorf("packet to a group without QPs: %v, want a drop", err)
	}
	for _, name := range []string{"attached", "attached2", "otherqkey"} {
		if err := qps[name].DetachMulticast(group); err != nil {
			t.Fatalf("detach %s: %v", name, err)
		}
	}
	if err := qps["attached"].DetachMulticast(group); !errors.Is(err, ib.ErrInvalidArgument) {
		t.Errorf("detach of a QP not attached: %v, want EINVAL", err)
	}
	if p.B.Ctx.MulticastMember(group) {
		t.Error("group still has members")
	}
	if err := p.B.Ctx.Input(p.Wire.Clock.Now(), pkt.Packet(), meta); !errors.Is(err, ib.ErrDropped) {
		t.Errorf("packet to a left group: %v, want a drop", err)
	}
	if want := []string{"239.1.2.3 join", "239.1.2.3 leave"}; len(hook) != 2 || hook[0] != want[0] || hook[1] != want[1] {
		t.Errorf("hook calls %q, want %q", hook, want)
	}
}

// TestMulticastAttachRefusals: ib_attach_mcast's -EINVAL cases.
func TestMulticastAttachRefusals(t *testing.T) {
	rc := newRC(t)
	ud := udPair(t)
	group := netip.MustParseAddr("::ffff:239.1.2.3").As16()
	for _, c := range []struct {
		name string
		qp   *ib.QP
		gid  [16]byte
	}{
		{"RC QP", rc.A.QP, group},
		{"unicast IPv4 GID", ud.A.QP, netip.MustParseAddr("::ffff:10.0.0.1").As16()},
		{"unicast IPv6 GID", ud.A.QP, netip.MustParseAddr("fe80::1").As16()},
	} {
		if err := c.qp.AttachMulticast(c.gid); !errors.Is(err, ib.ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", c.name, err)
		}
	}
	if err := ud.A.QP.AttachMulticast(netip.MustParseAddr("ff0e::1").As16()); err != nil {
		t.Errorf("IPv6 multicast GID: %v", err)
	}
}
