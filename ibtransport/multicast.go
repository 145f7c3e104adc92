package ibtransport

import (
	"fmt"
	"net/netip"
	"slices"
	"time"
)

// UD multicast (IBTA Vol1 10.5, as Linux rxe implements it in rxe_mcast.c and
// rxe_recv.c): a UD QP attached to a multicast group receives every UD packet
// sent to the group's GID with the destination QPN 0xFFFFFF, each attached
// QP a copy, after the same state, P_Key and Q_Key checks as a unicast
// packet. A packet to the multicast QPN must carry a GRH (on RoCEv2 the IP
// header, whose destination is the group: rxe_recv.c hdr_check, "no grh for
// mcast qpn"); one to a group with no QP attached is dropped.

// MulticastQPN is the destination QPN of every multicast packet
// (IB_MULTICAST_QPN, 0xFFFFFF).
const MulticastQPN = 0xFFFFFF

// Multicast limits of a Context, rxe's (rxe_param.h: RXE_MAX_MCAST_GRP,
// RXE_MAX_MCAST_QP_ATTACH, RXE_MAX_TOT_MCAST_QP_ATTACH), as ibv_query_device
// reports them.
const (
	MaxMulticastGroups      = 8192
	MaxMulticastQPAttach    = 56
	MaxTotalMulticastAttach = 0x70000
)

// IsMulticastGID reports whether gid is a multicast group's GID: an IPv6
// multicast address (ff00::/8) or the IPv4-mapped form of an IPv4 multicast
// address (::ffff:224.0.0.0/100), as ib_core's rdma_is_multicast_addr.
func IsMulticastGID(gid [16]byte) bool {
	return netip.AddrFrom16(gid).Unmap().IsMulticast()
}

// multicastGroups maps a group's GID to the QPs attached to it, in attach
// order. Context.mcast; guarded by Context.mu.
type multicastGroups map[[16]byte][]*QP

// SetMulticastHook sets f to be called when a group gains its first attached
// QP (member true) or loses its last (member false, also when that QP is
// destroyed): what a device needs to join or leave the group on its network
// (IP_ADD_MEMBERSHIP on a UDP socket). f runs with the Context locked: it
// must not call the Context.
func (c *Context) SetMulticastHook(f func(gid [16]byte, member bool)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mcastHook = f
}

// AttachMulticast attaches a UD QP to the multicast group gid
// (ibv_attach_mcast). Attaching a QP already attached succeeds (rxe:
// rxe_attach_mcast finds the attachment and returns 0). The hook set by
// SetMulticastHook runs before it returns when gid had no QP attached; an
// error from joining there is the hook's to report, not the engine's.
func (qp *QP) AttachMulticast(gid [16]byte) error {
	c := qp.ctx
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case qp.dead:
		return fmt.Errorf("attach mcast: qp 0x%x: %w", qp.qpn, ErrDestroyed)
	case qp.typ != QPTypeUD:
		// ib_attach_mcast: -EINVAL unless the QP is UD.
		return fmt.Errorf("attach mcast: qp 0x%x is %v, not UD: %w", qp.qpn, qp.typ, ErrInvalidArgument)
	case !IsMulticastGID(gid):
		return fmt.Errorf("attach mcast: gid %v is not a multicast address: %w", netip.AddrFrom16(gid), ErrInvalidArgument)
	}
	if c.mcast == nil {
		c.mcast = multicastGroups{}
	}
	g := c.mcast[gid]
	if slices.Contains(g, qp) {
		return nil
	}
	switch {
	case g == nil && len(c.mcast) >= MaxMulticastGroups:
		return fmt.Errorf("attach mcast: %d groups already: %w", len(c.mcast), ErrNoResources)
	case len(g) >= MaxMulticastQPAttach:
		return fmt.Errorf("attach mcast: group %v has %d QPs: %w", netip.AddrFrom16(gid), len(g), ErrNoResources)
	case c.mcastAttached >= MaxTotalMulticastAttach:
		return fmt.Errorf("attach mcast: %d attachments already: %w", c.mcastAttached, ErrNoResources)
	}
	c.mcast[gid] = append(g, qp)
	c.mcastAttached++
	if g == nil && c.mcastHook != nil {
		c.mcastHook(gid, true)
	}
	return nil
}

// DetachMulticast detaches the QP from the group gid (ibv_detach_mcast). A
// QP not attached to it is EINVAL (rxe_detach_mcast: -EINVAL).
func (qp *QP) DetachMulticast(gid [16]byte) error {
	c := qp.ctx
	c.mu.Lock()
	defer c.mu.Unlock()
	if qp.typ != QPTypeUD || !IsMulticastGID(gid) {
		return fmt.Errorf("detach mcast: qp 0x%x (%v), gid %v: %w", qp.qpn, qp.typ, netip.AddrFrom16(gid), ErrInvalidArgument)
	}
	if !c.detachMulticastLocked(qp, gid) {
		return fmt.Errorf("detach mcast: qp 0x%x is not attached to %v: %w", qp.qpn, netip.AddrFrom16(gid), ErrInvalidArgument)
	}
	return nil
}

// detachMulticastLocked removes qp from group gid, reporting whether it was
// attached; the group goes (and the hook hears of it) with its last QP.
func (c *Context) detachMulticastLocked(qp *QP, gid [16]byte) bool {
	g := c.mcast[gid]
	i := slices.Index(g, qp)
	if i < 0 {
		return false
	}
	g = slices.Delete(g, i, i+1)
	c.mcastAttached--
	if len(g) > 0 {
		c.mcast[gid] = g
		return true
	}
	delete(c.mcast, gid)
	if c.mcastHook != nil {
		c.mcastHook(gid, false)
	}
	return true
}

// detachAllMulticastLocked detaches a QP being destroyed from every group
// (rxe_qp.c: rxe_qp_do_cleanup drops the QP's attachments).
func (c *Context) detachAllMulticastLocked(qp *QP) {
	for gid, g := range c.mcast {
		if slices.Contains(g, qp) {
			c.detachMulticastLocked(qp, gid)
		}
	}
}

// MulticastMember reports whether any QP is attached to the group gid: a
// device accepts packets addressed to the group only then.
func (c *Context) MulticastMember(gid [16]byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.mcast[gid]) > 0
}

// MulticastGroups returns the GIDs of the groups that have QPs attached.
func (c *Context) MulticastGroups() [][16]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	gids := make([][16]byte, 0, len(c.mcast))
	for gid := range c.mcast {
		gids = append(gids, gid)
	}
	return gids
}

// inputMulticast delivers a decoded packet addressed to MulticastQPN to every
// QP attached to its destination GID (meta.DGID), each through the checks of
// a unicast packet (rxe_rcv_mcast_pkt: check_type_state, check_keys, then a
// copy per QP). It returns a *DropError if no QP took it. c.mu is held.
func (c *Context) inputMulticast(now time.Time, p *Packet, meta *InputMeta, n int) error {
	g := c.mcast[meta.DGID]
	if !meta.HasGRH || len(g) == 0 {
		c.counters.UnknownQP++
		return dropErrors[DropUnknownQP]
	}
	taken := false
	var last DropReason
	for _, qp := range g {
		qp.counters.PacketsIn++
		qp.counters.BytesIn += uint64(n)
		if r, dropped := qp.input(now, p, meta); dropped {
			qp.counters.Drops[r]++
			last = r
			continue
		}
		taken = true
	}
	if !taken {
		return dropErrors[last]
	}
	return nil
}
