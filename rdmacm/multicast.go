package rdmacm

import (
	"fmt"
	"net/netip"
	"syscall"

	"github.com/softrdma/softrdma/ibtransport"
)

// UD multicast through rdma_cm (rdma_join_multicast, rdma_join_multicast_ex,
// rdma_leave_multicast), as the kernel's cma.c does it on a RoCEv2 port
// (cma_iboe_join_multicast, cma_iboe_set_mgid, cma_make_mc_event) and
// rdma-core's librdmacm completes it (cma.c ucma_process_join attaches the
// ID's QP when the join event arrives, rdma_leave_multicast detaches it):
//   - the ID must be bound to a device (ADDR_BOUND or ADDR_RESOLVED), else
//     EINVAL; iWARP has no multicast (rdma_join_multicast: -ENOSYS);
//   - the group is an IPv4 multicast address; its MGID is the IPv4-mapped
//     address (::ffff:a.b.c.d: RoCEv2's GID type); an IPv6 group on RoCEv2 is
//     -ENOTSUPP in the kernel, EOPNOTSUPP here;
//   - MULTICAST_JOIN's UD parameters: an address handle whose DGID is the
//     MGID, from the ID's source GID, hop limit 64 (IPV6_DEFAULT_HOPLIMIT),
//     traffic class and SL 0; QPN 0xFFFFFF; Q_Key RDMA_UDP_QKEY
//     (0x01234567) in the UDP port space;
//   - a full member's QP is attached to the group (which joins the IP group
//     on the device's network), a send-only full member's is not (and the
//     kernel sends no IGMP join for it).

// JoinFlag is how an ID joins a group (enum rdma_cm_join_mc_attr_ex's
// join_flags).
type JoinFlag int

const (
	// JoinFullMember sends to and receives from the group
	// (RDMA_MC_JOIN_FLAG_FULLMEMBER).
	JoinFullMember JoinFlag = 0
	// JoinSendOnlyFullMember only sends to it
	// (RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER).
	JoinSendOnlyFullMember JoinFlag = 1
)

// JoinMulticast joins the ID to the IPv4 multicast group (rdma_join_multicast):
// the ID's QP, if it has one and flag is JoinFullMember, is attached to the
// group now, and EventMulticastJoin follows with the UD parameters that send
// to the group. Joining a group the ID has joined already is EADDRINUSE
// (softrdma's choice: one membership per group and ID, which
// rdma_leave_multicast's lookup by address assumes).
func (id *ID) JoinMulticast(group netip.Addr, flag JoinFlag) error {
	m := id.m
	m.mu.Lock()
	defer m.mu.Unlock()
	g := group.Unmap()
	switch {
	case flag != JoinFullMember && flag != JoinSendOnlyFullMember:
		return fmt.Errorf("rdmacm: join %v: join flags %d: %w", g, flag, ErrInvalid)
	case id.state != stateAddrBound && id.state != stateAddrResolved:
		return id.errState("join multicast")
	case id.tr == nil:
		return fmt.Errorf("rdmacm: join %v: the ID has no device: %w", g, ErrInvalid)
	case !g.IsMulticast():
		return fmt.Errorf("rdmacm: join %v: not a multicast address: %w", g, ErrInvalid)
	}
	t, ok := id.tr.(*roceTransport)
	if !ok {
		return fmt.Errorf("rdmacm: join %v: multicast over %v: %w", g, id.tr.kind(), syscall.ENOSYS)
	}
	if !g.Is4() {
		return fmt.Errorf("rdmacm: join %v: IPv6 groups over RoCEv2 (the kernel: -ENOTSUPP): %w", g, ErrNotSupported)
	}
	if id.mcast[g] {
		return fmt.Errorf("rdmacm: join %v: joined already: %w", g, syscall.EADDRINUSE)
	}
	idx, ok := t.sgidIndex(id.local.Addr())
	if !ok {
		return fmt.Errorf("rdmacm: join %v: %v is no GID of the device: %w", g, id.local.Addr(), ErrNoDevice)
	}
	mgid := g.As16() // IPv4-mapped
	if id.qp != nil && flag == JoinFullMember {
		if err := t.dev.AttachMulticast(id.qp, mgid); err != nil {
			return fmt.Errorf("rdmacm: join %v: %w", g, err)
		}
	}
	if id.mcast == nil {
		id.mcast = map[netip.Addr]bool{}
	}
	id.mcast[g] = flag == JoinFullMember
	var qkey uint32
	if id.ps == PortSpaceUDP {
		qkey = UDPQKey
	}
	m.push(id, Event{Type: EventMulticastJoin, UD: UDParam{
		AH:    ibtransport.AddressHandle{DGID: mgid, SGIDIndex: idx, HopLimit: 64},
		QPNum: ibtransport.MulticastQPN, QKey: qkey,
	}})
	return nil
}

// LeaveMulticast leaves a group the ID joined (rdma_leave_multicast),
// detaching its QP; a group it has not joined is EADDRNOTAVAIL (rdma-core's
// rdma_leave_multicast).
func (id *ID) LeaveMulticast(group netip.Addr) error {
	m := id.m
	m.mu.Lock()
	defer m.mu.Unlock()
	g := group.Unmap()
	full, ok := id.mcast[g]
	if !ok {
		return fmt.Errorf("rdmacm: leave %v: not joined: %w", g, syscall.EADDRNOTAVAIL)
	}
	delete(id.mcast, g)
	if t, ok := id.tr.(*roceTransport); ok && full && id.qp != nil {
		// The QP may have been attached by the program too, or destroyed
		// and made again: a QP not attached is no error here.
		_ = t.dev.DetachMulticast(id.qp, g.As16())
	}
	return nil
}
