package rdmacm_test

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/rdmacm"
	"github.com/softrdma/softrdma/sim"
)

// TestRoCEMulticast: three hosts on a simulated switch (which floods frames
// to a multicast MAC). B and C join group 239.1.2.3 as full members, A as a
// send-only one, each after resolving the group's address (port 0, no
// neighbour query). Each join's MULTICAST_JOIN says how to send to the group:
// the IPv4-mapped MGID from the ID's own GID, hop limit 64, QPN 0xFFFFFF,
// RDMA_UDP_QKEY. A's SENDs with those reach B's and C's QPs; A's own QP, a
// send-only member, is not attached. After C leaves, the next SEND reaches B
// alone. A second join is EADDRINUSE, a leave of a group not joined
// EADDRNOTAVAIL, an IPv6 group ErrNotSupported, a join before the address
// is resolved ErrInvalidState.
func TestRoCEMulticast(t *testing.T) {
	w := newWorld(t, 5)
	a := w.host("a", macA, ipA, sim.LinkConfig{})
	b := w.host("b", macB, ipB, sim.LinkConfig{})
	c := w.host("c", [6]byte{2, 0, 0, 0, 0xB, 3}, netip.MustParseAddr("10.0.0.3"), sim.LinkConfig{})
	group := netip.MustParseAddr("239.1.2.3")

	idle, err := a.m.CreateID(rdmacm.PortSpaceUDP)
	must(t, err)
	if err := idle.JoinMulticast(group, rdmacm.JoinFullMember); !errors.Is(err, rdmacm.ErrInvalidState) {
		t.Errorf("join before resolving: %v, want ErrInvalidState", err)
	}
	must(t, idle.Destroy())

	type member struct {
		h  *host
		id *rdmacm.ID
		qp *ib.QP
		ev rdmacm.Event
	}
	join := func(h *host, flag rdmacm.JoinFlag) *member {
		t.Helper()
		id, err := h.m.CreateID(rdmacm.PortSpaceUDP)
		must(t, err)
		must(t, id.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(group, 0), 2*time.Second))
		w.next(id, rdmacm.EventAddrResolved, time.Second)
		qp := h.createQP(t, id)
		for i := range 4 {
			must(t, qp.PostRecv(ib.RecvWR{WRID: uint64(i), SGL: []ib.SGE{h.mr.SGE(i*1024, 1024)}}))
		}
		must(t, id.JoinMulticast(group, flag))
		ev := w.next(id, rdmacm.EventMulticastJoin, time.Second)
		return &member{h: h, id: id, qp: qp, ev: ev}
	}
	mb, mc, ma := join(b, rdmacm.JoinFullMember), join(c, rdmacm.JoinFullMember), join(a, rdmacm.JoinSendOnlyFullMember)
	for _, m := range []*member{mb, mc, ma} {
		ud := m.ev.UD
		gids := m.h.dev.GIDs()
		if ud.QPNum != ib.MulticastQPN || ud.QKey != rdmacm.UDPQKey || ud.AH.DGID != group.As16() ||
			ud.AH.HopLimit != 64 || int(ud.AH.SGIDIndex) >= len(gids) || gids[ud.AH.SGIDIndex].Unmap() != m.h.ip {
			t.Errorf("%s: MULTICAST_JOIN %+v", m.h.name, ud)
		}
	}
	if err := mb.id.JoinMulticast(group, rdmacm.JoinFullMember); !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("second join: %v, want EADDRINUSE", err)
	}
	if err := mb.id.LeaveMulticast(netip.MustParseAddr("239.9.9.9")); !errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Errorf("leave of a group not joined: %v, want EADDRNOTAVAIL", err)
	}
	if err := mb.id.JoinMulticast(netip.MustParseAddr("ff0e::1"), rdmacm.JoinFullMember); !errors.Is(err, rdmacm.ErrNotSupported) {
		t.Errorf("IPv6 group: %v, want ErrNotSupported", err)
	}

	send := func(i int) {
		t.Helper()
		copy(a.buf[32<<10+i*64:], []byte{byte('0' + i)})
		ah := ma.ev.UD.AH
		must(t, ma.qp.PostSend(ib.SendWR{WRID: uint64(100 + i), Opcode: ib.WRSend, SGL: []ib.SGE{a.mr.SGE(32<<10+i*64, 64)},
			Signaled: true, AH: &ah, RemoteQPN: ma.ev.UD.QPNum, RemoteQKey: ma.ev.UD.QKey}))
	}
	send(0)
	for _, m := range []*member{mb, mc} {
		wcs := w.completions(m.h, 1)
		if wcs[0].SrcQP != ma.qp.QPN() || wcs[0].ByteLen != 40+64 || m.h.buf[int(wcs[0].WRID)*1024+40] != '0' {
			t.Errorf("%s received %+v", m.h.name, wcs[0])
		}
	}
	w.completions(a, 1) // the send; the send-only member's QP receives nothing
	w.settle(time.Second)
	if k := a.cq.Poll(make([]ib.WC, 4)); k != 0 {
		t.Errorf("the send-only member received %d messages", k)
	}

	must(t, mc.id.LeaveMulticast(group))
	send(1)
	if wcs := w.completions(b, 1); b.buf[int(wcs[0].WRID)*1024+40] != '1' {
		t.Errorf("b received %+v", wcs[0])
	}
	w.completions(a, 1)
	w.settle(time.Second)
	if k := c.cq.Poll(make([]ib.WC, 4)); k != 0 {
		t.Errorf("c received %d messages after it left", k)
	}
	for _, m := range []*member{mb, mc, ma} {
		must(t, m.id.Destroy())
	}
}
