package main

// ibv_modify_qp on an iWARP device, where siw takes what the IBTA state table
// refuses. siw (siw_verbs_modify_qp, siw_qp_modify) keeps RESET and INIT as
// one state, IDLE, and reads only the state and the access flags of a modify:
// IDLE to RTR leaves the QP in IDLE, a QP in RTS asked for INIT, RTR or RTS
// stays in RTS, and a mask without the state changes the access flags and
// nothing else; every other attribute is ignored. Programs that move their QP
// with rdma_init_qp_attr's masks rely on this (rping -q: INIT→RTR with the
// state, access flags and port only; RTS→INIT once connected; RTS with only
// the port), so a modify the engine refuses for its mask or transition, and
// that siw performs as such a no-op, applies the access flags and leaves the
// state; SOFTRDMA_DEBUG says so.

import (
	"errors"

	ib "github.com/softrdma/softrdma/ibtransport"
)

// siwNoop reports whether siw leaves the state of a QP in from alone for a
// modify to `to` (to == from when the mask has no state).
func siwNoop(from, to ib.QPState) bool {
	switch from {
	case ib.QPStateReset, ib.QPStateInit:
		return to == ib.QPStateRTR || to == from
	case ib.QPStateRTS:
		return to == ib.QPStateInit || to == ib.QPStateRTR || to == ib.QPStateRTS
	}
	return false
}

// siwModify retries a modify of an iWARP QP that the engine refused with
// err as siw performs it, when siw would: the state stays, the port (if
// given) must be 1, the access flags (if given) apply. It returns err
// unchanged when siw would refuse it too or the refusal was of a value.
func siwModify(q *ib.QP, a *ib.QPAttr, m ib.QPAttrMask, err error) error {
	var me *ib.ModifyQPError
	if !errors.As(err, &me) || me.Attr != 0 || !q.Context().Config().ExternalQPs {
		return err
	}
	from, to := q.State(), q.State()
	if m&ib.QPAttrState != 0 {
		to = a.QPState
	}
	if !siwNoop(from, to) {
		return err
	}
	if m&ib.QPAttrPort != 0 && a.Port != 1 {
		return err
	}
	if m&ib.QPAttrAccessFlags != 0 && from != ib.QPStateReset {
		if e := q.Modify(&ib.QPAttr{AccessFlags: a.AccessFlags}, ib.QPAttrAccessFlags); e != nil {
			return e
		}
	}
	debugf("%v: on iWARP the QP stays in %v and only its access flags change, as siw does", err, from)
	return nil
}
