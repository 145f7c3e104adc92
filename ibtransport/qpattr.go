package ibtransport

import (
	"errors"
	"fmt"
	"strings"
)

// QPAttr holds QP attributes (struct ibv_qp_attr). Modify reads the fields its mask
// names; Query fills them all.
type QPAttr struct {
	// QPState is the state to move to.
	QPState QPState
	// CurQPState, if given, must equal the QP's current state.
	CurQPState QPState
	// EnSQDAsyncNotify asks for EventSQDrained when SQD has drained.
	EnSQDAsyncNotify bool
	// AccessFlags are the remote operations the QP accepts as a responder
	// (AccessRemoteWrite, AccessRemoteRead, AccessRemoteAtomic).
	AccessFlags Access
	// PKeyIndex indexes the partition key table.
	PKeyIndex uint16
	// Port is the port number; the engine has one port, 1.
	Port uint8
	// QKey is the UD Q_Key.
	QKey uint32
	// AH is the primary path's address (IBV_QP_AV).
	AH AddressHandle
	// PathMTU is the path MTU in bytes: 256, 512, 1024, 2048 or 4096.
	PathMTU int
	// Timeout is the local ACK timeout: 4.096 µs × 2^Timeout, 0 = infinite (0..31).
	Timeout uint8
	// RetryCnt is how often the requester retries after a timeout or a sequence
	// NAK (0..7).
	RetryCnt uint8
	// RNRRetry is how often it retries after an RNR NAK; 7 = forever (0..7).
	RNRRetry uint8
	// RQPSN is the responder's first expected PSN.
	RQPSN uint32
	// MaxRdAtomic is the number of READ/atomic requests the QP has outstanding as
	// a requester (initiator depth); 0 is taken as 1.
	MaxRdAtomic int
	// MinRNRTimer is the RNR NAK timer code this QP sends as a responder (0..31,
	// IBTA Table 45).
	MinRNRTimer uint8
	// SQPSN is the requester's first PSN.
	SQPSN uint32
	// MaxDestRdAtomic is the number of READ/atomic requests the QP accepts
	// outstanding as a responder (responder resources); 0 is taken as 1.
	MaxDestRdAtomic int
	// DestQPN is the remote QP number.
	DestQPN uint32
}

// QPAttrMask selects the attributes of a Modify (enum ibv_qp_attr_mask).
type QPAttrMask uint32

// Attribute mask bits.
const (
	QPAttrState            QPAttrMask = 1 << 0  // IBV_QP_STATE
	QPAttrCurState         QPAttrMask = 1 << 1  // IBV_QP_CUR_STATE
	QPAttrEnSQDAsyncNotify QPAttrMask = 1 << 2  // IBV_QP_EN_SQD_ASYNC_NOTIFY
	QPAttrAccessFlags      QPAttrMask = 1 << 3  // IBV_QP_ACCESS_FLAGS
	QPAttrPKeyIndex        QPAttrMask = 1 << 4  // IBV_QP_PKEY_INDEX
	QPAttrPort             QPAttrMask = 1 << 5  // IBV_QP_PORT
	QPAttrQKey             QPAttrMask = 1 << 6  // IBV_QP_QKEY
	QPAttrAH               QPAttrMask = 1 << 7  // IBV_QP_AV
	QPAttrPathMTU          QPAttrMask = 1 << 8  // IBV_QP_PATH_MTU
	QPAttrTimeout          QPAttrMask = 1 << 9  // IBV_QP_TIMEOUT
	QPAttrRetryCnt         QPAttrMask = 1 << 10 // IBV_QP_RETRY_CNT
	QPAttrRNRRetry         QPAttrMask = 1 << 11 // IBV_QP_RNR_RETRY
	QPAttrRQPSN            QPAttrMask = 1 << 12 // IBV_QP_RQ_PSN
	QPAttrMaxRdAtomic      QPAttrMask = 1 << 13 // IBV_QP_MAX_QP_RD_ATOMIC
	QPAttrAltPath          QPAttrMask = 1 << 14 // IBV_QP_ALT_PATH (not supported)
	QPAttrMinRNRTimer      QPAttrMask = 1 << 15 // IBV_QP_MIN_RNR_TIMER
	QPAttrSQPSN            QPAttrMask = 1 << 16 // IBV_QP_SQ_PSN
	QPAttrMaxDestRdAtomic  QPAttrMask = 1 << 17 // IBV_QP_MAX_DEST_RD_ATOMIC
	QPAttrPathMigState     QPAttrMask = 1 << 18 // IBV_QP_PATH_MIG_STATE (not supported)
	QPAttrCap              QPAttrMask = 1 << 19 // IBV_QP_CAP (not supported)
	QPAttrDestQPN          QPAttrMask = 1 << 20 // IBV_QP_DEST_QPN
)

// qpAttrOrder is the order in which attributes are named in messages: the order in
// which a connection setup usually thinks of them.
var qpAttrOrder = []struct {
	m    QPAttrMask
	name string
}{
	{QPAttrState, "QPState"}, {QPAttrCurState, "CurQPState"}, {QPAttrEnSQDAsyncNotify, "EnSQDAsyncNotify"},
	{QPAttrAccessFlags, "AccessFlags"}, {QPAttrPKeyIndex, "PKeyIndex"}, {QPAttrPort, "Port"},
	{QPAttrQKey, "QKey"}, {QPAttrDestQPN, "DestQPN"}, {QPAttrRQPSN, "RQPSN"}, {QPAttrSQPSN, "SQPSN"},
	{QPAttrPathMTU, "PathMTU"}, {QPAttrTimeout, "Timeout"}, {QPAttrRetryCnt, "RetryCnt"},
	{QPAttrRNRRetry, "RNRRetry"}, {QPAttrMaxRdAtomic, "MaxRdAtomic"},
	{QPAttrMaxDestRdAtomic, "MaxDestRdAtomic"}, {QPAttrMinRNRTimer, "MinRNRTimer"}, {QPAttrAH, "AH"},
	{QPAttrAltPath, "AltPath"}, {QPAttrPathMigState, "PathMigState"}, {QPAttrCap, "Cap"},
}

// String names the attributes, e.g. "DestQPN, RQPSN, PathMTU".
func (m QPAttrMask) String() string {
	var parts []string
	for _, a := range qpAttrOrder {
		if m&a.m != 0 {
			parts = append(parts, a.name)
			m &^= a.m
		}
	}
	if m != 0 {
		parts = append(parts, fmt.Sprintf("0x%x", uint32(m)))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// ErrModifyQP is wrapped by every *ModifyQPError.
var ErrModifyQP = errors.New("invalid QP modification")

// ModifyQPError says why Modify refused a change: a transition the state machine
// does not have, required attributes missing, attributes the transition does not
// accept, or a value out of range.
type ModifyQPError struct {
	QPN      uint32
	Type     QPType
	From, To QPState
	// Missing are required attributes the mask lacks.
	Missing QPAttrMask
	// Unexpected are attributes the transition does not accept.
	Unexpected QPAttrMask
	// Attr is the attribute whose value is wrong, with Reason.
	Attr   QPAttrMask
	Reason string
}

// Error reads like "modify qp 0x12: INIT→RTR on RC requires DestQPN, RQPSN, PathMTU,
// MaxDestRdAtomic, MinRNRTimer, AH".
func (e *ModifyQPError) Error() string {
	head := fmt.Sprintf("modify qp 0x%x: ", e.QPN)
	tr := fmt.Sprintf("%s→%s on %s", e.From, e.To, e.Type)
	switch {
	case e.Missing != 0:
		return head + tr + " requires " + e.Missing.String()
	case e.Unexpected != 0:
		return head + tr + " does not accept " + e.Unexpected.String()
	case e.Attr != 0:
		return head + e.Attr.String() + " " + e.Reason
	}
	return head + tr + " " + e.Reason
}

// Unwrap returns ErrModifyQP.
func (e *ModifyQPError) Unwrap() error { return ErrModifyQP }

// transition lists, per QP type, the attributes a state transition requires and
// the ones it also accepts. It follows IBTA Vol1 11.2.5 / Table 91 as the kernel
// encodes it in ib_modify_qp_is_ok's qp_state_table. Index: qpTypeIndex.
type transition struct {
	required [4]QPAttrMask
	optional [4]QPAttrMask
}

// qpTypeIndex orders the types in transition arrays: RC, UC, UD, GSI.
func qpTypeIndex(t QPType) int {
	switch t {
	case QPTypeRC:
		return 0
	case QPTypeUC:
		return 1
	case QPTypeUD:
		return 2
	}
	return 3
}

type stateEdge struct{ from, to QPState }

const (
	maskPKeyPortQKey   = QPAttrPKeyIndex | QPAttrPort | QPAttrQKey
	maskPKeyPortAccess = QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags
)

// qpTransitions is the state machine. Every state may also go to RESET and ERR
// with no attributes; those edges are added by init.
var qpTransitions = map[stateEdge]transition{
	{QPStateReset, QPStateInit}: {
		required: [4]QPAttrMask{maskPKeyPortAccess, maskPKeyPortAccess, maskPKeyPortQKey, QPAttrQKey},
		optional: [4]QPAttrMask{0, 0, 0, QPAttrPKeyIndex | QPAttrPort},
	},
	{QPStateInit, QPStateInit}: {
		optional: [4]QPAttrMask{maskPKeyPortAccess, maskPKeyPortAccess, maskPKeyPortQKey, QPAttrQKey | QPAttrPKeyIndex},
	},
	{QPStateInit, QPStateRTR}: {
		required: [4]QPAttrMask{
			QPAttrAH | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN | QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer,
			QPAttrAH | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN,
			0, 0,
		},
		optional: [4]QPAttrMask{
			QPAttrAltPath | QPAttrAccessFlags | QPAttrPKeyIndex,
			QPAttrAltPath | QPAttrAccessFlags | QPAttrPKeyIndex,
			QPAttrPKeyIndex | QPAttrQKey,
			QPAttrPKeyIndex | QPAttrQKey,
		},
	},
	{QPStateRTR, QPStateRTS}: {
		required: [4]QPAttrMask{
			QPAttrSQPSN | QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxRdAtomic,
			QPAttrSQPSN, QPAttrSQPSN, QPAttrSQPSN,
		},
		optional: [4]QPAttrMask{
			QPAttrCurState | QPAttrAltPath | QPAttrAccessFlags | QPAttrMinRNRTimer | QPAttrPathMigState,
			QPAttrCurState | QPAttrAltPath | QPAttrAccessFlags | QPAttrPathMigState,
			QPAttrCurState | QPAttrQKey,
			QPAttrCurState | QPAttrQKey,
		},
	},
	{QPStateRTS, QPStateRTS}: {
		optional: [4]QPAttrMask{
			QPAttrCurState | QPAttrAccessFlags | QPAttrAltPath | QPAttrPathMigState | QPAttrMinRNRTimer,
			QPAttrCurState | QPAttrAccessFlags | QPAttrAltPath | QPAttrPathMigState,
			QPAttrCurState | QPAttrQKey,
			QPAttrCurState | QPAttrQKey,
		},
	},
	{QPStateRTS, QPStateSQD}: {
		optional: [4]QPAttrMask{QPAttrEnSQDAsyncNotify, QPAttrEnSQDAsyncNotify, QPAttrEnSQDAsyncNotify, QPAttrEnSQDAsyncNotify},
	},
	{QPStateSQD, QPStateRTS}: {
		optional: [4]QPAttrMask{
			QPAttrCurState | QPAttrAltPath | QPAttrAccessFlags | QPAttrMinRNRTimer | QPAttrPathMigState,
			QPAttrCurState | QPAttrAltPath | QPAttrAccessFlags | QPAttrPathMigState,
			QPAttrCurState | QPAttrQKey,
			QPAttrCurState | QPAttrQKey,
		},
	},
	{QPStateSQD, QPStateSQD}: {
		optional: [4]QPAttrMask{
			QPAttrPort | QPAttrAH | QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxRdAtomic |
				QPAttrMaxDestRdAtomic | QPAttrAltPath | QPAttrAccessFlags | QPAttrPKeyIndex | QPAttrMinRNRTimer | QPAttrPathMigState,
			QPAttrAH | QPAttrAltPath | QPAttrAccessFlags | QPAttrPKeyIndex | QPAttrPathMigState,
			QPAttrPKeyIndex | QPAttrQKey,
			QPAttrPKeyIndex | QPAttrQKey,
		},
	},
	{QPStateSQE, QPStateRTS}: {
		optional: [4]QPAttrMask{
			0, // RC has no SQE state
			QPAttrCurState | QPAttrAccessFlags,
			QPAttrCurState | QPAttrQKey,
			QPAttrCurState | QPAttrQKey,
		},
	},
}

func init() {
	for s := QPStateReset; s <= QPStateErr; s++ {
		qpTransitions[stateEdge{s, QPStateReset}] = transition{}
		qpTransitions[stateEdge{s, QPStateErr}] = transition{}
	}
}

// unsupportedAttrs are accepted by the state machine but not implemented.
const unsupportedAttrs = QPAttrAltPath | QPAttrPathMigState | QPAttrCap

// Modify changes the QP's state and attributes (ibv_modify_qp). Without
// QPAttrState in mask the state stays and only the attributes change (a
// state-to-itself transition). Every transition checks that mask holds the
// attributes IBTA requires for it and no others, and that each value is in range;
// the returned *ModifyQPError names what is wrong. Nothing changes on error.
func (qp *QP) Modify(attr *QPAttr, mask QPAttrMask) error {
	c := qp.ctx
	c.mu.Lock()
	defer c.mu.Unlock()
	if qp.dead {
		return fmt.Errorf("modify qp 0x%x: %w", qp.qpn, ErrDestroyed)
	}
	from, to := qp.state, qp.state
	if mask&QPAttrState != 0 {
		to = attr.QPState
	}
	e := &ModifyQPError{QPN: qp.qpn, Type: qp.typ, From: from, To: to}
	if to > QPStateErr {
		e.Attr, e.Reason = QPAttrState, fmt.Sprintf("%d is not a state", to)
		return e
	}
	if mask&QPAttrCurState != 0 && attr.CurQPState != from {
		e.Attr, e.Reason = QPAttrCurState, fmt.Sprintf("%s does not match the QP's state %s", attr.CurQPState, from)
		return e
	}
	tr, ok := qpTransitions[stateEdge{from, to}]
	if !ok || (from == QPStateSQE && qp.typ == QPTypeRC && to == QPStateRTS) {
		e.Reason = "is not a valid transition"
		return e
	}
	ti := qpTypeIndex(qp.typ)
	given := mask &^ QPAttrState
	if missing := tr.required[ti] &^ given; missing != 0 {
		e.Missing = missing
		return e
	}
	if extra := given &^ (tr.required[ti] | tr.optional[ti]); extra != 0 {
		e.Unexpected = extra
		return e
	}
	if bad := given & unsupportedAttrs; bad != 0 {
		e.Attr, e.Reason = bad, "is not supported"
		return e
	}
	if err := qp.checkAttrValues(attr, given, e); err != nil {
		return err
	}
	qp.applyAttrs(attr, given)
	qp.changeState(from, to)
	qp.notifyWire()
	return nil
}

// checkAttrValues validates the values of the given attributes.
func (qp *QP) checkAttrValues(a *QPAttr, m QPAttrMask, e *ModifyQPError) error {
	c := qp.ctx
	bad := func(attr QPAttrMask, format string, args ...any) error {
		e.Attr, e.Reason = attr, fmt.Sprintf(format, args...)
		return e
	}
	if m&QPAttrPathMTU != 0 {
		if err := mtuValid(a.PathMTU); err != nil {
			return bad(QPAttrPathMTU, "%d %v", a.PathMTU, err)
		}
		if a.PathMTU > c.cfg.PortMTU {
			return bad(QPAttrPathMTU, "%d > port MTU %d", a.PathMTU, c.cfg.PortMTU)
		}
	}
	if m&QPAttrPKeyIndex != 0 && int(a.PKeyIndex) >= len(c.cfg.PKeys) {
		return bad(QPAttrPKeyIndex, "%d >= table size %d", a.PKeyIndex, len(c.cfg.PKeys))
	}
	if m&QPAttrPort != 0 && a.Port != 1 {
		return bad(QPAttrPort, "%d: the only port is 1", a.Port)
	}
	if m&QPAttrAccessFlags != 0 && a.AccessFlags&^accessAll != 0 {
		return bad(QPAttrAccessFlags, "%s has unknown bits", a.AccessFlags)
	}
	if m&QPAttrTimeout != 0 && a.Timeout > 31 {
		return bad(QPAttrTimeout, "%d > 31", a.Timeout)
	}
	if m&QPAttrRetryCnt != 0 && a.RetryCnt > 7 {
		return bad(QPAttrRetryCnt, "%d > 7", a.RetryCnt)
	}
	if m&QPAttrRNRRetry != 0 && a.RNRRetry > 7 {
		return bad(QPAttrRNRRetry, "%d > 7", a.RNRRetry)
	}
	if m&QPAttrMinRNRTimer != 0 && a.MinRNRTimer > 31 {
		return bad(QPAttrMinRNRTimer, "%d > 31", a.MinRNRTimer)
	}
	if m&QPAttrMaxRdAtomic != 0 && (a.MaxRdAtomic < 0 || a.MaxRdAtomic > c.cfg.MaxRdAtomic) {
		return bad(QPAttrMaxRdAtomic, "%d not in 0..%d", a.MaxRdAtomic, c.cfg.MaxRdAtomic)
	}
	if m&QPAttrMaxDestRdAtomic != 0 && (a.MaxDestRdAtomic < 0 || a.MaxDestRdAtomic > c.cfg.MaxRdAtomic) {
		return bad(QPAttrMaxDestRdAtomic, "%d not in 0..%d", a.MaxDestRdAtomic, c.cfg.MaxRdAtomic)
	}
	if m&QPAttrDestQPN != 0 && a.DestQPN > QPNMask {
		return bad(QPAttrDestQPN, "0x%x is wider than 24 bits", a.DestQPN)
	}
	if m&QPAttrRQPSN != 0 && a.RQPSN > PSNMask {
		return bad(QPAttrRQPSN, "0x%x is wider than 24 bits", a.RQPSN)
	}
	if m&QPAttrSQPSN != 0 && a.SQPSN > PSNMask {
		return bad(QPAttrSQPSN, "0x%x is wider than 24 bits", a.SQPSN)
	}
	return nil
}

// mtuValid checks an IB MTU in bytes.
func mtuValid(n int) error {
	switch n {
	case 256, 512, 1024, 2048, 4096:
		return nil
	}
	return errors.New("not one of 256, 512, 1024, 2048, 4096")
}

// applyAttrs stores the given attributes.
func (qp *QP) applyAttrs(a *QPAttr, m QPAttrMask) {
	q := &qp.attr
	if m&QPAttrEnSQDAsyncNotify != 0 {
		q.EnSQDAsyncNotify = a.EnSQDAsyncNotify
	}
	if m&QPAttrAccessFlags != 0 {
		q.AccessFlags = a.AccessFlags
	}
	if m&QPAttrPKeyIndex != 0 {
		q.PKeyIndex = a.PKeyIndex
	}
	if m&QPAttrPort != 0 {
		q.Port = a.Port
	}
	if m&QPAttrQKey != 0 {
		q.QKey = a.QKey
	}
	if m&QPAttrAH != 0 {
		ah := a.AH
		qp.ah = &ah // a fresh copy: packets already in a batch keep the old one
	}
	if m&QPAttrPathMTU != 0 {
		q.PathMTU = a.PathMTU
		qp.mtu = uint32(a.PathMTU)
	}
	if m&QPAttrTimeout != 0 {
		q.Timeout = a.Timeout
	}
	if m&QPAttrRetryCnt != 0 {
		q.RetryCnt = a.RetryCnt
	}
	if m&QPAttrRNRRetry != 0 {
		q.RNRRetry = a.RNRRetry
	}
	if m&QPAttrRQPSN != 0 {
		q.RQPSN = a.RQPSN
	}
	if m&QPAttrMaxRdAtomic != 0 {
		q.MaxRdAtomic = a.MaxRdAtomic
	}
	if m&QPAttrMinRNRTimer != 0 {
		q.MinRNRTimer = a.MinRNRTimer
	}
	if m&QPAttrSQPSN != 0 {
		q.SQPSN = a.SQPSN
	}
	if m&QPAttrMaxDestRdAtomic != 0 {
		q.MaxDestRdAtomic = a.MaxDestRdAtomic
	}
	if m&QPAttrDestQPN != 0 {
		q.DestQPN = a.DestQPN
	}
	qp.pkey = qp.ctx.pkey(q.PKeyIndex)
	if qp.typ.datagram() {
		qp.mtu = uint32(qp.ctx.cfg.PortMTU)
	}
	if m&(QPAttrRetryCnt|QPAttrRNRRetry) != 0 {
		qp.req.resetRetries(q)
	}
}

// changeState performs the side effects of entering state to.
func (qp *QP) changeState(from, to QPState) {
	switch to {
	case QPStateReset:
		qp.state = QPStateReset
		qp.resetTransport()
		qp.sendCQ.drop(qp.qpn)
		if qp.recvCQ != qp.sendCQ {
			qp.recvCQ.drop(qp.qpn)
		}
		return
	case QPStateErr:
		qp.enterError()
		return
	}
	qp.state = to
	switch {
	case from == QPStateInit && to == QPStateRTR:
		qp.resp.start(qp)
	case from == QPStateRTR && to == QPStateRTS:
		qp.req.start(qp)
		qp.schedule()
	case to == QPStateSQD && from != QPStateSQD:
		qp.sq.drainNotified = false
		qp.checkDrained()
	case to == QPStateRTS && (from == QPStateSQD || from == QPStateSQE):
		qp.schedule()
	}
}
