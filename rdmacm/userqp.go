package rdmacm

import (
	"fmt"

	"github.com/softrdma/softrdma/ibcm"
	"github.com/softrdma/softrdma/ibtransport"
)

// A QP the ID does not manage: rdma_cm lets a program create its QP with the
// verbs, name it in rdma_connect's or rdma_accept's conn_param.qp_num, and
// move it through INIT, RTR and RTS itself with the attributes
// rdma_init_qp_attr gives (rping -q). The kernel's rdma_cm then leaves the
// QP alone: on the active side the REP gives RDMA_CM_EVENT_CONNECT_RESPONSE
// instead of ESTABLISHED, and rdma_establish sends the RTU once the program
// has its QP in RTS (cma_ib_handler, IB_CM_REP_RECEIVED without id->qp); the
// passive side's REP names the program's QP and the RTU gives ESTABLISHED as
// usual. iWARP binds the QP itself to the connection's stream: the kernel's
// iw_cm looks the QP up by number on the device (iw_get_qp) and the driver
// moves it from INIT (or RESET) to RTS at the MPA exchange, keeping the access
// flags the program gave it; so do both sides here (iwarpTransport.connect and
// accept). rdma_init_qp_attr on iWARP gives what iw_cm_init_qp_attr and
// rdma_cm give (InitQPAttr), and the active side gets ESTABLISHED, never
// CONNECT_RESPONSE (cma_iw_handler).

// checkQP reports whether op (connect or accept) has a QP to name: the ID's,
// or on RoCE an RC QP the program gives by number, or on iWARP (accept) an RC
// QP of the device's Context. m.mu is held.
func (id *ID) checkQP(op string, qpn uint32) error {
	switch {
	case id.qp != nil:
		return nil
	case qpn == 0:
		return fmt.Errorf("rdmacm: %s without a QP: %w", op, ErrInvalidState)
	case id.qpType != ibtransport.QPTypeRC:
		return fmt.Errorf("rdmacm: %s of a %s ID with a QP it does not manage: %w", op, id.qpType, ErrNotSupported)
	case id.tr == nil:
		return fmt.Errorf("rdmacm: %s with a QP the ID does not manage before the ID has a device: %w", op, ErrInvalidState)
	case id.tr.kind() == TransportIWARP && (op == "accept" || op == "connect"):
		if _, err := id.tr.(*iwarpTransport).userQP(qpn); err != nil {
			return fmt.Errorf("rdmacm: %s: %w", op, err)
		}
	case id.tr.kind() != TransportRoCE:
		return fmt.Errorf("rdmacm: %s with a QP the ID does not manage: RoCE, and accept and connect on iWARP, only: %w", op, ErrNotSupported)
	}
	return nil
}

// userQP returns the device's RC QP numbered qpn, which a program names in
// rdma_accept or rdma_connect (conn_param.qp_num), as iw_cm takes it
// (iw_cm_connect and iw_cm_accept find the QP by number, iw_get_qp).
func (t *iwarpTransport) userQP(qpn uint32) (*ibtransport.QP, error) {
	qp := t.dev.Context().QP(qpn)
	if qp == nil || qp.Type() != ibtransport.QPTypeRC {
		return nil, fmt.Errorf("no RC QP 0x%x on the device: %w", qpn, ErrInvalid)
	}
	return qp, nil
}

// InitQPAttr returns the attributes and mask that move a QP to state for
// this ID's connection (rdma_init_qp_attr), as the kernel's rdma_cm gives
// them: INIT with the port, P_Key index 0 and the remote access the peer's
// initiator depth calls for (none before the peer is known); RTR with the
// path, MTU, the peer's QPN, the PSN this side expects, responder resources;
// RTS with the peer's starting PSN, ACK timeout, retry counts and initiator
// depth. A UD ID's QP gets the Q_Key RDMA_UDP_QKEY and send PSN 0. RTR and
// RTS of an RC ID need the peer's REQ (passive) or REP (active). iWARP's
// answers are iw_cm's (iwarpInitQPAttr).
func (id *ID) InitQPAttr(state ibtransport.QPState) (ibtransport.QPAttr, ibtransport.QPAttrMask, error) {
	m := id.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if id.state == stateDestroyed {
		return ibtransport.QPAttr{}, 0, ErrDestroyed
	}
	if id.tr == nil {
		return ibtransport.QPAttr{}, 0, fmt.Errorf("rdmacm: init qp attr before the ID has a device: %w", ErrInvalidState)
	}
	if id.tr.kind() == TransportIWARP {
		return id.iwarpInitQPAttr(state)
	}
	t, ok := id.tr.(*roceTransport)
	if !ok {
		return ibtransport.QPAttr{}, 0, fmt.Errorf("rdmacm: init qp attr on %v: %w", id.tr.kind(), ErrNotSupported)
	}
	a := ibtransport.QPAttr{QPState: state}
	if err := ipoibQKey(id); err != nil {
		return a, 0, err
	}
	if id.qpType == ibtransport.QPTypeUD {
		switch state {
		case ibtransport.QPStateInit:
			a.Port, a.QKey = 1, UDPQKey
			return a, ibtransport.QPAttrState | ibtransport.QPAttrPKeyIndex | ibtransport.QPAttrPort | ibtransport.QPAttrQKey, nil
		case ibtransport.QPStateRTR:
			return a, ibtransport.QPAttrState, nil
		case ibtransport.QPStateRTS:
			return a, ibtransport.QPAttrState | ibtransport.QPAttrSQPSN, nil
		}
		return a, 0, fmt.Errorf("rdmacm: init qp attr for state %v: %w", state, ErrInvalid)
	}
	c, known := t.userConn(id)
	switch state {
	case ibtransport.QPStateInit:
		a.Port = 1
		if known {
			a.AccessFlags = c.access()
		}
		return a, ibtransport.QPAttrState | ibtransport.QPAttrAccessFlags | ibtransport.QPAttrPKeyIndex | ibtransport.QPAttrPort, nil
	case ibtransport.QPStateRTR, ibtransport.QPStateRTS:
		if !known {
			return a, 0, fmt.Errorf("rdmacm: init qp attr for %v before the peer's REQ or REP: %w", state, ErrInvalidState)
		}
		steps := c.steps(t.dev.Context(), id.roce.ah)
		s := steps[1]
		if state == ibtransport.QPStateRTS {
			s = steps[2]
		}
		return s.a, s.m, nil
	}
	return a, 0, fmt.Errorf("rdmacm: init qp attr for state %v: %w", state, ErrInvalid)
}

// userConn returns the connection attributes of id's QP once the peer is
// known: a passive ID's from the REQ (choosing the PSN it will expect, which
// its REP then carries), an active one's from the REP. m.mu is held.
func (t *roceTransport) userConn(id *ID) (qpConn, bool) {
	rs := &id.roce
	if rs.connSet {
		return rs.conn, true
	}
	req := rs.req
	if id.listener == nil || req == nil {
		return qpConn{}, false
	}
	if !rs.psnSet {
		rs.psn, rs.psnSet = t.m.randomPSN(), true
	}
	// ib_cm's passive side: responder resources are the REQ's initiator
	// depth, the initiator depth its responder resources.
	rs.conn = qpConn{
		peerReads: req.InitiatorDepth > 0,
		destQPN:   req.LocalQPN, rqPSN: rs.psn, sqPSN: req.StartingPSN,
		mtu:             ibcm.MTUFromCode(req.PathMTU),
		maxDestRdAtomic: req.InitiatorDepth, maxRd: req.ResponderResources,
		timeout: req.Primary.LocalACKTimeout, retry: req.RetryCount, rnrRetr: req.RNRRetryCount,
	}
	rs.connSet = true
	return rs.conn, true
}

// onREPUserQP takes the REP of an active ID whose QP the program moves: the
// attributes are kept for InitQPAttr and the program gets CONNECT_RESPONSE;
// Establish sends the RTU. m.mu is held.
func (t *roceTransport) onREPUserQP(id *ID, ev *ibcm.Event) {
	rs := &id.roce
	rep := ev.REP
	rs.conn = qpConn{
		peerReads: rep.InitiatorDepth > 0,
		destQPN:   rep.LocalQPN, rqPSN: rs.psn, sqPSN: rep.StartingPSN,
		mtu:             rs.mtu,
		maxDestRdAtomic: rep.InitiatorDepth, maxRd: rep.ResponderResources,
		timeout: ibcm.LocalACKTimeout(t.agent.Config().PacketLifeTime, t.agent.Config().CAACKDelay),
		retry:   rs.retry, rnrRetr: rep.RNRRetryCount,
	}
	rs.connSet = true
	rs.rep = ev.ID
	t.m.push(id, Event{Type: EventConnectResponse, Param: ConnParam{
		PrivateData:        rep.PrivateData,
		ResponderResources: rep.InitiatorDepth, InitiatorDepth: rep.ResponderResources,
		FlowControl: rep.EndToEndFlowControl, RNRRetryCount: rep.RNRRetryCount, SRQ: rep.SRQ, QPNum: rep.LocalQPN,
	}})
}

// iwarpInitQPAttr is InitQPAttr on iWARP, as the kernel's rdma_init_qp_attr
// answers for an iWARP device: before the ID connects (it has no iw_cm ID
// yet) the state asked for with no access, mask STATE|ACCESS_FLAGS; once it
// connects or a request came (iw_cm_init_qp_attr) INIT and RTR with remote
// write and read, mask STATE|ACCESS_FLAGS, and RTS with an empty mask, since
// the driver moves the QP to RTS at the MPA exchange; rdma_cm adds the port
// (PORT) to each. A listening ID, and a state other than INIT, RTR and RTS
// of a connection, get EINVAL. m.mu is held.
func (id *ID) iwarpInitQPAttr(state ibtransport.QPState) (ibtransport.QPAttr, ibtransport.QPAttrMask, error) {
	a := ibtransport.QPAttr{QPState: state, Port: 1}
	switch id.state {
	case stateListen:
		return a, 0, fmt.Errorf("rdmacm: init qp attr of a listening iWARP ID: %w", ErrInvalidState)
	case stateConnect, stateAccepted, stateEstablished, stateDisconnect:
	default:
		return a, ibtransport.QPAttrState | ibtransport.QPAttrAccessFlags | ibtransport.QPAttrPort, nil
	}
	switch state {
	case ibtransport.QPStateInit, ibtransport.QPStateRTR:
		a.AccessFlags = ibtransport.AccessRemoteWrite | ibtransport.AccessRemoteRead
		return a, ibtransport.QPAttrState | ibtransport.QPAttrAccessFlags | ibtransport.QPAttrPort, nil
	case ibtransport.QPStateRTS:
		return a, ibtransport.QPAttrPort, nil
	}
	return a, 0, fmt.Errorf("rdmacm: init qp attr for state %v of an iWARP connection: %w", state, ErrInvalid)
}

// Establish completes an active connection whose QP the program moved to
// RTS itself (rdma_establish): RoCE sends the RTU. No event follows, as with
// the kernel's rdma_cm.
//
// On iWARP the connection is complete at ESTABLISHED and there is nothing to
// send: an established active iWARP connection returns nil. This differs
// from the kernel on purpose: its rdma_establish reaches cma_accept_iw
// without connection parameters, which returns EINVAL, so that rping -q's
// client, which calls rdma_establish after ESTABLISHED on every transport,
// fails on siw; here it runs as over RoCE.
func (id *ID) Establish() error {
	m := id.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if id.tr != nil && id.tr.kind() == TransportIWARP {
		if id.state != stateEstablished || id.listener != nil {
			return id.errState("establish")
		}
		return nil
	}
	rs := &id.roce
	if id.state != stateConnect || id.listener != nil || rs.rep == nil {
		return id.errState("establish")
	}
	if err := rs.rep.SendRTU(nil); err != nil {
		return err
	}
	rs.rep = nil
	id.state = stateEstablished
	return nil
}
