package rdmacm

import (
	"errors"

	"github.com/softrdma/softrdma/ibtransport"
)

// ModifyAsSiw retries, as siw performs it, a modify of an iWARP QP that the
// engine refused with refused. A program that moves its own QP with
// InitQPAttr's iWARP masks (rping -q: INIT→RTR with the state, access flags
// and port only; RTS→INIT once connected; RTS with only the port) relies on
// siw, which the IBTA table refuses: siw (siw_verbs_modify_qp, siw_qp_modify)
// keeps RESET and INIT as one state, reads only the state and the access
// flags, leaves a QP in INIT asked for RTR in INIT and one in RTS asked for
// INIT, RTR or RTS in RTS. Such a modify here applies the access flags (if
// given) and leaves the state; it returns nil. It returns refused unchanged
// when siw would refuse too, when the refusal was of a value (a port other
// than 1 among them), and on a QP not of an iWARP device (RoCE keeps the
// IBTA table).
func ModifyAsSiw(q *ibtransport.QP, a *ibtransport.QPAttr, m ibtransport.QPAttrMask, refused error) error {
	var me *ibtransport.ModifyQPError
	if !errors.As(refused, &me) || me.Attr != 0 || !q.Context().Config().ExternalQPs {
		return refused
	}
	from, to := q.State(), q.State()
	if m&ibtransport.QPAttrState != 0 {
		to = a.QPState
	}
	if !siwNoop(from, to) {
		return refused
	}
	if m&ibtransport.QPAttrPort != 0 && a.Port != 1 {
		return refused
	}
	if m&ibtransport.QPAttrAccessFlags != 0 && from != ibtransport.QPStateReset {
		if err := q.Modify(&ibtransport.QPAttr{AccessFlags: a.AccessFlags}, ibtransport.QPAttrAccessFlags); err != nil {
			return err
		}
	}
	return nil
}

// siwNoop reports whether siw leaves the state of a QP in from alone for a
// modify to `to` (to == from when the mask has no state).
func siwNoop(from, to ibtransport.QPState) bool {
	switch from {
	case ibtransport.QPStateReset, ibtransport.QPStateInit:
		return to == ibtransport.QPStateRTR || to == from
	case ibtransport.QPStateRTS:
		return to == ibtransport.QPStateInit || to == ibtransport.QPStateRTR || to == ibtransport.QPStateRTS
	}
	return false
}
