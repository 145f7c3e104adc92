package rdmacm

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/softrdma/softrdma/ibcm"
	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/roce"
)

// The RoCE backend: rdma_cm over the IB CM of a ibcm.Agent, as the kernel's
// cma.c drives ib_cm.

// Sizes of the consumer's private data in the IB CM messages, after rdma_cm's
// CMA header where it has one (IB_CM_*_PRIVATE_DATA_SIZE - sizeof(cma_hdr)).
const (
	MaxREQPrivateData     = ibcm.REQPrivateDataLen - ibcm.CMAHeaderLen     // 56
	MaxREPPrivateData     = ibcm.REPPrivateDataLen                         // 196
	MaxREJPrivateData     = ibcm.REJPrivateDataLen                         // 148
	MaxSIDRREQPrivateData = ibcm.SIDRREQPrivateDataLen - ibcm.CMAHeaderLen // 180
	MaxSIDRREPPrivateData = ibcm.SIDRREPPrivateDataLen                     // 136
)

// roceState is the RoCE part of an ID. Guarded by Manager.mu.
type roceState struct {
	cm    *ibcm.ID
	ah    ibtransport.AddressHandle // the QP's path
	path  ibcm.PathFields           // the REQ's primary path (active)
	mtu   int
	psn   uint32 // the starting PSN this side expects
	retry uint8  // the REQ's retry count (active)
	req   *ibcm.REQFields

	// A QP the ID does not manage (rdma_connect/rdma_accept with a
	// qp_num and no rdma_create_qp; the program moves it with
	// rdma_init_qp_attr's attributes): see userqp.go.
	userQPN uint32
	psnSet  bool     // psn is chosen (passive: by InitQPAttr before the accept)
	conn    qpConn   // the attributes for the QP, once the peer's are known
	connSet bool     // conn is set
	rep     *ibcm.ID // active: the CMID whose RTU Establish sends
}

type roceTransport struct {
	m       *Manager
	agent   *ibcm.Agent
	dev     *roce.Device
	byCM    map[*ibcm.ID]*ID
	listens map[uint64]*roceListen
}

type roceListen struct {
	l    *ibcm.Listener
	refs int
}

// AddRoCE adds a RoCE device through its CM agent. The agent and the device
// must be driven (their Run methods, or Poll in a simulation) for anything to
// happen; the agent must use the Manager's clock.
func (m *Manager) AddRoCE(agent *ibcm.Agent) error {
	t := &roceTransport{m: m, agent: agent, dev: agent.Device(), byCM: map[*ibcm.ID]*ID{}, listens: map[uint64]*roceListen{}}
	return m.addTransport(t)
}

func (t *roceTransport) kind() Transport               { return TransportRoCE }
func (t *roceTransport) context() *ibtransport.Context { return t.dev.Context() }

func (t *roceTransport) addrs() []netip.Addr {
	gids := t.dev.GIDs()
	out := make([]netip.Addr, 0, len(gids))
	for _, g := range gids {
		out = append(out, g.Unmap())
	}
	return out
}

// sources are the addresses the device sends from (roce.Device.Addrs), and
// the link-local GIDs, which AddressHandle takes for a link-local
// destination.
func (t *roceTransport) sources() []netip.Addr {
	out := append([]netip.Addr(nil), t.dev.Addrs()...)
	for _, g := range t.dev.GIDs() {
		if g = g.Unmap(); g.Is6() && g.IsLinkLocalUnicast() {
			out = append(out, g)
		}
	}
	return out
}

func (t *roceTransport) resolveAddr(id *ID, dst netip.Addr, timeout time.Duration) {
	gen := id.resolveGen
	m := t.m
	if dst.IsMulticast() {
		// A group's link address is computed, not asked for (the kernel's
		// neighbour for it is NUD_NOARP: arp_mc_map, ndisc_mc_map).
		m.addrResolved(id, gen, nil)
		return
	}
	t.agent.ResolveNeighbor(dst, timeout, func(_ [6]byte, err error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.addrResolved(id, gen, err)
	})
}

// sgidIndex returns the GID table index of local.
func (t *roceTransport) sgidIndex(local netip.Addr) (uint8, bool) {
	for i, g := range t.dev.GIDs() {
		if g.Unmap() == local.Unmap() {
			return uint8(i), true
		}
	}
	return 0, false
}

// resolveRoute makes the path as rdma_cm's cma_resolve_iboe_route does: the
// GIDs of the two addresses, hop limit 64, the ID's TOS as traffic class, SL
// 0, the port's MTU, and the flow label from the two ports.
func (t *roceTransport) resolveRoute(id *ID) error {
	rs := &id.roce
	ah, err := t.dev.AddressHandle(id.remote.Addr())
	if err != nil {
		return err
	}
	idx, ok := t.sgidIndex(id.local.Addr())
	if !ok {
		return fmt.Errorf("rdmacm: %v is no GID of the device: %w", id.local.Addr(), ErrNoDevice)
	}
	ah.SGIDIndex = idx
	ah.TrafficClass = id.tos
	ah.FlowLabel = roce.CMFlowLabel(id.local.Port(), id.remote.Port())
	rs.ah = ah
	rs.mtu = t.dev.PathMTU()
	rs.path = ibcm.PathFields{
		LocalLID: 0xFFFF, RemoteLID: 0xFFFF,
		LocalGID: t.dev.GIDs()[idx].As16(), RemoteGID: id.remote.Addr().As16(),
		FlowLabel: ah.FlowLabel, TrafficClass: id.tos, HopLimit: ah.HopLimit,
	}
	return nil
}

func (t *roceTransport) initQP(id *ID, qp *ibtransport.QP) error {
	if err := ipoibQKey(id); err != nil {
		return err
	}
	if qp.Type() == ibtransport.QPTypeUD {
		return initUDQP(qp)
	}
	// cma_init_conn_qp: INIT with no remote access yet.
	return qp.Modify(&ibtransport.QPAttr{QPState: ibtransport.QPStateInit, Port: 1},
		ibtransport.QPAttrState|ibtransport.QPAttrPKeyIndex|ibtransport.QPAttrPort|ibtransport.QPAttrAccessFlags)
}

// ipoibQKey refuses an RDMA_PS_IPOIB ID's QP: its Q_Key would be the IPoIB
// broadcast group's, and a RoCE port has no such group (see PortSpaceIPoIB).
func ipoibQKey(id *ID) error {
	if id.ps != PortSpaceIPoIB {
		return nil
	}
	return fmt.Errorf("rdmacm: RDMA_PS_IPOIB: a RoCE port has no IPoIB broadcast group to take the Q_Key from: %w", ErrNoDevice)
}

// initUDQP brings a UD QP to RTS as cma_init_ud_qp does: Q_Key RDMA_UDP_QKEY,
// send PSN 0.
func initUDQP(qp *ibtransport.QP) error {
	steps := []struct {
		a ibtransport.QPAttr
		m ibtransport.QPAttrMask
	}{
		{ibtransport.QPAttr{QPState: ibtransport.QPStateInit, Port: 1, QKey: UDPQKey},
			ibtransport.QPAttrState | ibtransport.QPAttrPKeyIndex | ibtransport.QPAttrPort | ibtransport.QPAttrQKey},
		{ibtransport.QPAttr{QPState: ibtransport.QPStateRTR}, ibtransport.QPAttrState},
		{ibtransport.QPAttr{QPState: ibtransport.QPStateRTS}, ibtransport.QPAttrState | ibtransport.QPAttrSQPSN},
	}
	for _, s := range steps {
		if err := qp.Modify(&s.a, s.m); err != nil {
			return err
		}
	}
	return nil
}

// qpConn is what moving a connected QP to RTS needs.
type qpConn struct {
	peerReads               bool // the peer issues READs: grant remote read and atomics
	destQPN, rqPSN, sqPSN   uint32
	mtu                     int
	maxDestRdAtomic, maxRd  uint8
	timeout, retry, rnrRetr uint8
}

// qpStep is one Modify of a QP's way to RTS.
type qpStep struct {
	a ibtransport.QPAttr
	m ibtransport.QPAttrMask
}

// access is the remote access the QP grants: WRITE, and READ and atomics
// when the peer issues them (ib_cm_init_qp_attr).
func (c qpConn) access() ibtransport.Access {
	access := ibtransport.AccessRemoteWrite
	if c.peerReads {
		access |= ibtransport.AccessRemoteRead | ibtransport.AccessRemoteAtomic
	}
	return access
}

// steps returns the Modify calls that take a QP from INIT to RTS as
// cma_modify_qp_rtr and cma_modify_qp_rts do (with ib_cm's attributes): INIT
// (access), RTR, RTS.
func (c qpConn) steps(ctx *ibtransport.Context, ah ibtransport.AddressHandle) [3]qpStep {
	maxRd := ctx.Config().MaxRdAtomic
	return [3]qpStep{
		{ibtransport.QPAttr{QPState: ibtransport.QPStateInit, AccessFlags: c.access()},
			ibtransport.QPAttrState | ibtransport.QPAttrAccessFlags},
		{ibtransport.QPAttr{QPState: ibtransport.QPStateRTR, AH: ah, PathMTU: c.mtu, DestQPN: c.destQPN, RQPSN: c.rqPSN,
			MaxDestRdAtomic: min(int(c.maxDestRdAtomic), maxRd)},
			ibtransport.QPAttrState | ibtransport.QPAttrAH | ibtransport.QPAttrPathMTU | ibtransport.QPAttrDestQPN |
				ibtransport.QPAttrRQPSN | ibtransport.QPAttrMaxDestRdAtomic | ibtransport.QPAttrMinRNRTimer},
		{ibtransport.QPAttr{QPState: ibtransport.QPStateRTS, SQPSN: c.sqPSN, Timeout: c.timeout, RetryCnt: min(c.retry, 7),
			RNRRetry: min(c.rnrRetr, 7), MaxRdAtomic: min(int(c.maxRd), maxRd)},
			ibtransport.QPAttrState | ibtransport.QPAttrSQPSN | ibtransport.QPAttrTimeout | ibtransport.QPAttrRetryCnt |
				ibtransport.QPAttrRNRRetry | ibtransport.QPAttrMaxRdAtomic},
	}
}

// connectQP moves a QP from INIT to RTS as cma_modify_qp_rtr and
// cma_modify_qp_rts do (with ib_cm's attributes).
func connectQP(ctx *ibtransport.Context, qp *ibtransport.QP, ah ibtransport.AddressHandle, c qpConn) error {
	for _, s := range c.steps(ctx, ah) {
		if err := qp.Modify(&s.a, s.m); err != nil {
			return err
		}
	}
	return nil
}

// cmaPrivateData returns the CMA header for id followed by pd.
func cmaPrivateData(id *ID, pd []byte) []byte {
	b := make([]byte, ibcm.CMAHeaderLen+len(pd))
	ibcm.CMAHeader(b).Encode(&ibcm.CMAHeaderFields{SrcPort: id.local.Port(), Src: id.local.Addr(), Dst: id.remote.Addr()})
	copy(b[ibcm.CMAHeaderLen:], pd)
	return b
}

func (t *roceTransport) connect(id *ID, p *ConnParam) error {
	rs := &id.roce
	if id.qpType == ibtransport.QPTypeUD {
		if len(p.PrivateData) > MaxSIDRREQPrivateData {
			return fmt.Errorf("rdmacm: SIDR private data %d > %d: %w", len(p.PrivateData), MaxSIDRREQPrivateData, ErrInvalid)
		}
		cm, err := t.agent.SIDRRequest(&ibcm.SIDRRequestParams{
			ServiceID: ibcm.CMAServiceID(ibcm.RDMAPortSpace(id.ps), id.remote.Port()),
			To:        ibcm.MADAddress{Remote: id.remote.Addr(), Local: id.local.Addr()},
			// rdma_cm's SIDR_REQ carries the CMA header too.
			PrivateData: cmaPrivateData(id, p.PrivateData),
		}, t.handle)
		if err != nil {
			return err
		}
		rs.cm = cm
		t.byCM[cm] = id
		return nil
	}
	if len(p.PrivateData) > MaxREQPrivateData {
		return fmt.Errorf("rdmacm: REQ private data %d > %d: %w", len(p.PrivateData), MaxREQPrivateData, ErrInvalid)
	}
	rs.psn, rs.psnSet = t.m.randomPSN(), true
	rs.retry = min(p.RetryCount, 7)
	qpn := p.QPNum
	if id.qp != nil {
		qpn = id.qp.QPN()
	}
	rs.userQPN = 0
	if id.qp == nil {
		rs.userQPN = qpn
	}
	cm, err := t.agent.Connect(&ibcm.ConnectParams{
		ServiceID:          ibcm.CMAServiceID(ibcm.RDMAPortSpace(id.ps), id.remote.Port()),
		Path:               rs.path,
		PathMTU:            rs.mtu,
		QPN:                qpn,
		StartingPSN:        rs.psn,
		ResponderResources: p.ResponderResources,
		InitiatorDepth:     p.InitiatorDepth,
		RetryCount:         p.RetryCount,
		RNRRetryCount:      p.RNRRetryCount,
		SRQ:                p.SRQ,
		FlowControl:        p.FlowControl,
		PrivateData:        cmaPrivateData(id, p.PrivateData),
	}, t.handle)
	if err != nil {
		return err
	}
	rs.cm = cm
	t.byCM[cm] = id
	return nil
}

func (t *roceTransport) listen(id *ID) error {
	sid := ibcm.CMAServiceID(ibcm.RDMAPortSpace(id.ps), id.local.Port())
	rl := t.listens[sid]
	if rl == nil {
		l, err := t.agent.Listen(sid, t.handle)
		if err != nil {
			return err
		}
		rl = &roceListen{l: l}
		t.listens[sid] = rl
	}
	rl.refs++
	return nil
}

func (t *roceTransport) unlisten(id *ID) {
	sid := ibcm.CMAServiceID(ibcm.RDMAPortSpace(id.ps), id.local.Port())
	if rl := t.listens[sid]; rl != nil {
		if rl.refs--; rl.refs <= 0 {
			rl.l.Close()
			delete(t.listens, sid)
		}
	}
}

func (t *roceTransport) accept(id *ID, p *ConnParam) error {
	rs := &id.roce
	if id.qpType == ibtransport.QPTypeUD {
		if len(p.PrivateData) > MaxSIDRREPPrivateData {
			return fmt.Errorf("rdmacm: SIDR_REP private data %d > %d: %w", len(p.PrivateData), MaxSIDRREPPrivateData, ErrInvalid)
		}
		if err := rs.cm.SIDRReply(&ibcm.SIDRReply{Status: ibcm.SIDRSuccess, QPN: id.qp.QPN(), QKey: UDPQKey, PrivateData: p.PrivateData}); err != nil {
			return err
		}
		id.state = stateEstablished
		return nil
	}
	if len(p.PrivateData) > MaxREPPrivateData {
		return fmt.Errorf("rdmacm: REP private data %d > %d: %w", len(p.PrivateData), MaxREPPrivateData, ErrInvalid)
	}
	if id.qp == nil {
		// A QP the program moved itself (rdma_init_qp_attr): the REP
		// names it, with the PSN InitQPAttr gave it to expect.
		if !rs.psnSet {
			rs.psn, rs.psnSet = t.m.randomPSN(), true
		}
		if err := rs.cm.Accept(&ibcm.ReplyParams{
			QPN: p.QPNum, StartingPSN: rs.psn,
			ResponderResources: p.ResponderResources, InitiatorDepth: p.InitiatorDepth,
			RNRRetryCount: p.RNRRetryCount, SRQ: p.SRQ, FlowControl: p.FlowControl,
			PrivateData: p.PrivateData,
		}); err != nil {
			return err
		}
		rs.userQPN = p.QPNum
		id.state = stateAccepted
		return nil
	}
	req := rs.req
	if !rs.psnSet {
		rs.psn, rs.psnSet = t.m.randomPSN(), true
	}
	err := connectQP(t.dev.Context(), id.qp, rs.ah, qpConn{
		peerReads: req.InitiatorDepth > 0,
		destQPN:   req.LocalQPN, rqPSN: rs.psn, sqPSN: req.StartingPSN,
		mtu:             ibcm.MTUFromCode(req.PathMTU),
		maxDestRdAtomic: p.ResponderResources, maxRd: p.InitiatorDepth,
		timeout: req.Primary.LocalACKTimeout, retry: req.RetryCount, rnrRetr: req.RNRRetryCount,
	})
	if err != nil {
		// cma_accept: a QP that cannot be connected rejects the request.
		id.qpToError()
		rs.cm.Reject(ibcm.RejConsumer, nil, nil)
		id.state = stateDisconnect
		return fmt.Errorf("rdmacm: accept: %w", err)
	}
	err = rs.cm.Accept(&ibcm.ReplyParams{
		QPN: id.qp.QPN(), StartingPSN: rs.psn,
		ResponderResources: p.ResponderResources, InitiatorDepth: p.InitiatorDepth,
		RNRRetryCount: p.RNRRetryCount, SRQ: p.SRQ, FlowControl: p.FlowControl,
		PrivateData: p.PrivateData, QP: id.qp,
	})
	if err != nil {
		return err
	}
	id.state = stateAccepted
	return nil
}

func (t *roceTransport) reject(id *ID, pd []byte, reason ibcm.RejectReason) error {
	rs := &id.roce
	if id.qpType == ibtransport.QPTypeUD {
		if len(pd) > MaxSIDRREPPrivateData {
			return fmt.Errorf("rdmacm: SIDR_REP private data %d > %d: %w", len(pd), MaxSIDRREPPrivateData, ErrInvalid)
		}
		return rs.cm.SIDRReply(&ibcm.SIDRReply{Status: ibcm.SIDRReject, PrivateData: pd})
	}
	if len(pd) > MaxREJPrivateData {
		return fmt.Errorf("rdmacm: REJ private data %d > %d: %w", len(pd), MaxREJPrivateData, ErrInvalid)
	}
	return rs.cm.Reject(reason, nil, pd)
}

func (t *roceTransport) disconnect(id *ID) error {
	id.qpToError()
	if id.roce.cm == nil {
		return id.errState("disconnect")
	}
	if err := id.roce.cm.Disconnect(nil); err != nil && !errors.Is(err, ibcm.ErrClosed) {
		return err
	}
	return nil
}

func (t *roceTransport) destroy(id *ID) {
	if cm := id.roce.cm; cm != nil {
		cm.Destroy()
		delete(t.byCM, cm)
		id.roce.cm = nil
	}
}

// handle is the handler of every CMID of the transport's agent.
func (t *roceTransport) handle(ev *ibcm.Event) {
	m := t.m
	m.mu.Lock()
	defer m.mu.Unlock()
	switch ev.Type {
	case ibcm.EventREQ:
		t.onREQ(ev)
		return
	case ibcm.EventSIDRREQ:
		t.onSIDRREQ(ev)
		return
	}
	id := t.byCM[ev.ID]
	if id == nil || id.state == stateDestroyed {
		return
	}
	switch ev.Type {
	case ibcm.EventREP:
		t.onREP(id, ev)
	case ibcm.EventREQError, ibcm.EventREPError:
		id.state = stateDisconnect
		m.push(id, Event{Type: EventUnreachable, Status: StatusTimedOut})
	case ibcm.EventREJ:
		id.qpToError()
		id.state = stateDisconnect
		m.push(id, Event{Type: EventRejected, Status: int(ev.Reason), Param: ConnParam{PrivateData: ev.PrivateData},
			Err: fmt.Errorf("rdmacm: rejected: %v", ev.Reason)})
	case ibcm.EventRTU, ibcm.EventUserEstablished:
		id.state = stateEstablished
		m.push(id, Event{Type: EventEstablished})
	case ibcm.EventDREQ, ibcm.EventDREP:
		m.disconnected(id, 0)
	case ibcm.EventDREQError:
		m.disconnected(id, StatusTimedOut)
	case ibcm.EventTimeWaitExit:
		m.push(id, Event{Type: EventTimewaitExit})
	case ibcm.EventSIDRREP:
		t.onSIDRREP(id, ev)
	case ibcm.EventSIDRREQError:
		id.state = stateDisconnect
		m.push(id, Event{Type: EventUnreachable, Status: StatusTimedOut})
	}
}

// onREP finishes an active connection as cma_rep_recv does: QP to RTR and
// RTS, then the RTU; a QP that cannot be connected rejects the REP.
func (t *roceTransport) onREP(id *ID, ev *ibcm.Event) {
	rs := &id.roce
	rep := ev.REP
	if id.qp == nil && rs.userQPN != 0 {
		t.onREPUserQP(id, ev)
		return
	}
	if id.qp == nil {
		ev.ID.Reject(ibcm.RejConsumer, nil, nil)
		t.m.push(id, Event{Type: EventConnectError, Status: StatusInvalid, Err: errors.New("rdmacm: the QP is gone")})
		return
	}
	err := connectQP(t.dev.Context(), id.qp, rs.ah, qpConn{
		peerReads: rep.InitiatorDepth > 0,
		destQPN:   rep.LocalQPN, rqPSN: rs.psn, sqPSN: rep.StartingPSN,
		mtu:             rs.mtu,
		maxDestRdAtomic: rep.InitiatorDepth, maxRd: rep.ResponderResources,
		timeout: ibcm.LocalACKTimeout(t.agent.Config().PacketLifeTime, t.agent.Config().CAACKDelay),
		retry:   rs.retry, rnrRetr: rep.RNRRetryCount,
	})
	if err != nil {
		id.qpToError()
		ev.ID.Reject(ibcm.RejConsumer, nil, nil)
		id.state = stateDisconnect
		t.m.push(id, Event{Type: EventConnectError, Status: StatusInvalid, Err: err})
		return
	}
	if err := ev.ID.SendRTU(nil); err != nil {
		t.m.push(id, Event{Type: EventConnectError, Status: StatusIO, Err: err})
		return
	}
	id.state = stateEstablished
	t.m.push(id, Event{Type: EventEstablished, Param: ConnParam{
		PrivateData:        rep.PrivateData,
		ResponderResources: rep.InitiatorDepth, InitiatorDepth: rep.ResponderResources,
		FlowControl: rep.EndToEndFlowControl, RNRRetryCount: rep.RNRRetryCount, SRQ: rep.SRQ, QPNum: rep.LocalQPN,
	}})
}

// requestTarget checks a request's CMA header and finds the listener it is for.
func (t *roceTransport) requestTarget(serviceID uint64, pd []byte, want PortSpace) (l *ID, h ibcm.CMAHeader, port uint16, ok bool) {
	h = ibcm.CMAHeader(pd)
	if h.Check() != nil {
		return nil, h, 0, false
	}
	ps, port, isCMA := ibcm.ParseCMAServiceID(serviceID)
	if !isCMA || PortSpace(ps) != want {
		return nil, h, 0, false
	}
	dst := h.DstAddr()
	if t.m.transportFor(dst) != t {
		return nil, h, 0, false
	}
	l = t.m.findListener(t, want, port, dst)
	return l, h, port, l != nil
}

// onREQ makes the ID of an incoming connection (cma_ib_req_handler).
func (t *roceTransport) onREQ(ev *ibcm.Event) {
	m := t.m
	req := ev.REQ
	// An RC request is for a listener of the port space its service ID
	// names, TCP's or IB's (the kernel's cma_ib_id_from_event looks in
	// rdma_ps_from_service_id's).
	want := PortSpaceTCP
	if ps, _, isCMA := ibcm.ParseCMAServiceID(req.ServiceID); isCMA && PortSpace(ps) == PortSpaceIB {
		want = PortSpaceIB
	}
	l, h, port, ok := t.requestTarget(req.ServiceID, req.PrivateData, want)
	if !ok || req.TransportServiceType != 0 {
		// No rdma_cm ID takes it (a bad CMA header, another port space, an
		// address no listener is bound to): the consumer's reject.
		m.counters.RequestsRefused++
		ev.ID.Reject(ibcm.RejConsumer, nil, nil)
		return
	}
	c := m.newConn(l, t, netip.AddrPortFrom(h.DstAddr(), port), netip.AddrPortFrom(h.SrcAddr(), h.SrcPort()))
	rs := &c.roce
	rs.cm, rs.req = ev.ID, req
	peer := ev.From.Remote
	if !peer.IsValid() {
		peer = netip.AddrFrom16(req.Primary.LocalGID).Unmap()
	}
	ah, err := t.dev.AddressHandle(peer)
	if err != nil {
		m.counters.RequestsRefused++
		ev.ID.Reject(ibcm.RejConsumer, nil, nil)
		return
	}
	if idx, ok := t.sgidIndex(netip.AddrFrom16(req.Primary.RemoteGID)); ok {
		ah.SGIDIndex = idx
	}
	ah.FlowLabel, ah.HopLimit, ah.TrafficClass, ah.SL = req.Primary.FlowLabel, req.Primary.HopLimit, req.Primary.TrafficClass, req.Primary.SL
	rs.ah = ah
	rs.mtu = ibcm.MTUFromCode(req.PathMTU)
	pd := req.PrivateData[ibcm.CMAHeaderLen:]
	if !m.deliverRequest(l, c, Event{Param: ConnParam{
		PrivateData:        pd,
		ResponderResources: req.InitiatorDepth, InitiatorDepth: req.ResponderResources,
		FlowControl: req.EndToEndFlowControl, RetryCount: req.RetryCount, RNRRetryCount: req.RNRRetryCount,
		SRQ: req.SRQ, QPNum: req.LocalQPN,
	}}) {
		ev.ID.Drop() // the backlog is full: the REQ's retry asks again
		return
	}
	t.byCM[ev.ID] = c
}

// onSIDRREQ makes the ID of an incoming UD request (cma_ib_req_handler for SIDR).
func (t *roceTransport) onSIDRREQ(ev *ibcm.Event) {
	m := t.m
	r := ev.SIDRREQ
	l, h, port, ok := t.requestTarget(r.ServiceID, r.PrivateData, PortSpaceUDP)
	if !ok {
		m.counters.RequestsRefused++
		ev.ID.SIDRReply(&ibcm.SIDRReply{Status: ibcm.SIDRReject})
		return
	}
	ah, err := t.agent.GSI().AddressHandle(ev.From)
	if err != nil {
		m.counters.RequestsRefused++
		ev.ID.SIDRReply(&ibcm.SIDRReply{Status: ibcm.SIDRReject})
		return
	}
	c := m.newConn(l, t, netip.AddrPortFrom(h.DstAddr(), port), netip.AddrPortFrom(h.SrcAddr(), h.SrcPort()))
	c.roce.cm = ev.ID
	c.roce.ah = *ah
	if !m.deliverRequest(l, c, Event{UD: UDParam{PrivateData: r.PrivateData[ibcm.CMAHeaderLen:], AH: *ah}}) {
		ev.ID.Drop()
		return
	}
	t.byCM[ev.ID] = c
}

// onSIDRREP ends an active UD resolution (cma_sidr_rep_handler).
func (t *roceTransport) onSIDRREP(id *ID, ev *ibcm.Event) {
	rep := ev.SIDRREP
	switch {
	case rep.Status != ibcm.SIDRSuccess:
		id.state = stateDisconnect
		t.m.push(id, Event{Type: EventUnreachable, Status: int(rep.Status), UD: UDParam{PrivateData: rep.PrivateData}})
	case rep.QKey != UDPQKey:
		id.state = stateDisconnect
		t.m.push(id, Event{Type: EventAddrError, Status: StatusInvalid, Err: fmt.Errorf("rdmacm: SIDR reply Q_Key %#x", rep.QKey)})
	default:
		id.state = stateEstablished
		t.m.push(id, Event{Type: EventEstablished, UD: UDParam{PrivateData: rep.PrivateData, AH: id.roce.ah, QPNum: rep.QPN, QKey: rep.QKey}})
	}
}
