package roce

import (
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/netio"
)

// UD multicast on a RoCE device (issue 20). The engine delivers a packet to
// QPN 0xFFFFFF to the QPs attached to its destination GID
// (ibtransport.AttachMulticast); the device's part is the network's:
//
//   - Sending needs nothing new: an address handle whose DGID is the group's
//     (the IPv4-mapped group address, as rdma_cm's cma_iboe_set_mgid makes
//     it for RoCEv2) sends RoCEv2 to the IP multicast address, as rxe does
//     (rxe_net.c prepares the IP header from the AV's DGID); on Ethernet the
//     destination MAC is the IP multicast MAC (neigh.MulticastMAC: RFC 1112
//     01:00:5e + the group's low 23 bits; RFC 2464 33:33 + the low 32 bits).
//   - Receiving: the device accepts a frame addressed to a group some QP is
//     attached to (verify), and over the UDP backend it joins the group when
//     its first QP attaches and leaves when the last one goes
//     (netio.UDPEndpoint.JoinGroup: IP_ADD_MEMBERSHIP on a member socket of
//     its own), as rxe's attach makes the netdev listen to the group's MAC
//     and rdma_cm sends the IGMP join (cma.c cma_igmp_send). The other
//     backends see whatever frames their link delivers.
//
// A member socket's datagrams are read by a goroutine of its own and handed
// to the engine at the wall clock's time (UD receives use no timers); a
// capture wrapping the endpoint (--pcap) records them as the endpoint's own.

// groupJoiner is implemented by endpoints that must join an IP multicast
// group to receive it (netio.UDPEndpoint).
type groupJoiner interface {
	JoinGroup(group netip.Addr) (*netio.UDPGroup, error)
}

// mcastState is a device's multicast membership: one member socket per group
// with QPs attached, and the last join failure of each group, which
// AttachMulticast reports.
type mcastState struct {
	mu     sync.Mutex
	groups map[[16]byte]*netio.UDPGroup
	failed map[[16]byte]error
	closed bool
}

// joiner returns the endpoint that joins groups, seen through wrappers (a
// capture), or nil.
func (d *Device) joiner() groupJoiner {
	for ep := d.cfg.Endpoint; ep != nil; {
		if j, ok := ep.(groupJoiner); ok {
			return j
		}
		u, ok := ep.(interface{ Unwrap() netio.Endpoint })
		if !ok {
			return nil
		}
		ep = u.Unwrap()
	}
	return nil
}

// multicastChanged is the engine's multicast hook: the first QP attached to
// gid joins the group, the last one gone leaves it. It runs with the
// engine's lock held and takes only the device's multicast lock.
func (d *Device) multicastChanged(gid [16]byte, member bool) {
	j := d.joiner()
	if j == nil {
		return
	}
	m := &d.mc
	m.mu.Lock()
	defer m.mu.Unlock()
	if !member {
		if g := m.groups[gid]; g != nil {
			delete(m.groups, gid)
			g.Close()
		}
		return
	}
	if m.closed || m.groups[gid] != nil {
		return
	}
	g, err := j.JoinGroup(netip.AddrFrom16(gid))
	if err != nil {
		if m.failed == nil {
			m.failed = map[[16]byte]error{}
		}
		m.failed[gid] = err
		return
	}
	if m.groups == nil {
		m.groups = map[[16]byte]*netio.UDPGroup{}
	}
	m.groups[gid] = g
	go d.readGroup(g)
}

// datagramRecorder is implemented by a capture wrapping the endpoint
// (netio.Capture): it records what the member sockets receive.
type datagramRecorder interface {
	RecordDatagrams(d []netio.Datagram)
}

// readGroup hands a member socket's datagrams to the engine until the
// socket is closed, recording each in the endpoint's capture, if any.
func (d *Device) readGroup(g *netio.UDPGroup) {
	var hdr datagramHeaders
	dg := make([]netio.Datagram, 1)
	rec, _ := d.cfg.Endpoint.(datagramRecorder)
	for {
		var err error
		dg[0], err = g.ReadDatagram()
		if err != nil {
			return
		}
		if rec != nil {
			rec.RecordDatagrams(dg)
		}
		d.inputDatagrams(time.Now(), dg, &hdr)
	}
}

// AttachMulticast attaches qp, a UD QP of the device, to the multicast group
// gid (ibv_attach_mcast) and, for the group's first QP on a UDP endpoint,
// joins the group on the network. It fails, leaving qp detached, if the
// engine refuses (not UD, not a multicast GID) or the join fails (an IPv6
// group over UDP: errors.ErrUnsupported).
func (d *Device) AttachMulticast(qp *ibtransport.QP, gid [16]byte) error {
	if qp.Context() != d.ctx {
		return fmt.Errorf("roce: attach mcast: qp 0x%x is not the device's: %w", qp.QPN(), ibtransport.ErrInvalidArgument)
	}
	if err := qp.AttachMulticast(gid); err != nil {
		return err
	}
	d.mc.mu.Lock()
	err := d.mc.failed[gid]
	delete(d.mc.failed, gid)
	d.mc.mu.Unlock()
	if err != nil {
		qp.DetachMulticast(gid)
		return fmt.Errorf("roce: attach mcast: %w", err)
	}
	return nil
}

// DetachMulticast detaches qp from the group gid (ibv_detach_mcast); the
// group's last QP leaves the group on the network.
func (d *Device) DetachMulticast(qp *ibtransport.QP, gid [16]byte) error {
	return qp.DetachMulticast(gid)
}

// closeMulticast closes the member sockets (Close).
func (d *Device) closeMulticast() {
	m := &d.mc
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	for gid, g := range m.groups {
		g.Close()
		delete(m.groups, gid)
	}
}

// isGroup reports whether dst is a multicast group some QP of the device is
// attached to: verify's test for a frame not addressed to the device.
func (d *Device) isGroup(dst netip.Addr) bool {
	return dst.IsMulticast() && d.ctx.MulticastMember(dst.As16())
}
