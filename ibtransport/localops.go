package ibtransport

// This file executes the send queue's local operations: LOCAL_INV, REG_MR (fast
// registration) and BIND_MW (IBTA Vol1 10.6.3.4, 10.6.7, 10.7.2.4). They run when
// they reach the send cursor with every earlier WR complete, and complete in order.

// execLocal performs a local operation and completes the WQE: on failure with
// IBV_WC_LOC_QP_OP_ERR (IBV_WC_MW_BIND_ERR for binds), which moves the QP to error.
func (qp *QP) execLocal(w *sendWQE) {
	var status WCStatus
	switch w.wr.Opcode {
	case WRLocalInv:
		status = qp.localInvalidate(w.wr.InvalidateRKey)
	case WRRegMR:
		status = qp.fastRegister(&w.wr.RegMR)
	case WRBindMW:
		status = qp.bindMW(&w.wr.Bind)
	}
	if status != WCSuccess {
		qp.fail(w, status)
		return
	}
	// An invalidation or (re)binding completes only once nothing writes into the
	// memory its key named any more (placement.go). While settling waits, the QP
	// may have been flushed (its own transport terminated for the revocation): the
	// WQE has completed then.
	if w.wr.Opcode != WRRegMR && qp.ctx.settlePlacements() && (qp.dead || qp.state == QPStateErr || qp.state == QPStateReset) {
		return
	}
	w.state, w.status = wqeDone, WCSuccess
	qp.sq.next++
	qp.retire()
}

// localInvalidate invalidates a fast-register MR (by L_Key or R_Key) or a type 2
// memory window of the QP (IBTA 10.6.3, 10.6.7). Regular MRs and type 1
// windows cannot be invalidated.
func (qp *QP) localInvalidate(key uint32) WCStatus {
	e, ok := qp.ctx.keys[key>>8]
	if !ok {
		return WCLocQPOpErr
	}
	switch {
	case e.mr != nil:
		mr := e.mr
		if !mr.fast || mr.lkey != key || mr.pd != qp.pd || mr.state != mrValid || mr.mws > 0 {
			return WCLocQPOpErr
		}
		mr.state = mrInvalid
	case e.mw != nil:
		mw := e.mw
		if mw.typ != MWType2 || mw.rkey != key || mw.pd != qp.pd || mw.state != mrValid {
			return WCLocQPOpErr
		}
		mw.unbind()
	}
	return WCSuccess
}

// fastRegister maps memory into an invalid fast-register MR and makes it valid with
// a new key byte (IBTA 10.6.3.4 fast registration).
func (qp *QP) fastRegister(r *RegMRInfo) WCStatus {
	mr := r.MR
	if mr == nil || !mr.fast || mr.ctx != qp.ctx || mr.pd != qp.pd || mr.state != mrInvalid {
		return WCLocQPOpErr
	}
	if len(r.Buf) > mr.maxLen || checkMRAccess(r.Access) != nil {
		return WCLocQPOpErr
	}
	mr.buf = r.Buf
	mr.access = r.Access
	switch {
	case r.Addr != 0:
		mr.addr = r.Addr
	case r.Access&AccessZeroBased != 0:
		mr.addr = 0
	default:
		mr.addr = qp.ctx.allocVA(len(r.Buf))
	}
	key := mr.lkey&^0xff | uint32(r.Key)
	mr.lkey, mr.rkey = key, key
	mr.state = mrValid
	return WCSuccess
}

// bindMW binds a memory window to a range of a region (IBTA 10.6.7.3). A type 1
// window may be rebound at any time, and a zero-length bind unbinds it; a type 2
// window must be unbound (invalidated) first, takes a region and a length, and is
// then tied to this QP.
func (qp *QP) bindMW(b *MWBindInfo) WCStatus {
	mw := b.MW
	if mw == nil || mw.ctx != qp.ctx || mw.state == mrFreed || mw.pd != qp.pd {
		return WCMWBindErr
	}
	if b.RKey>>8 != mw.rkey>>8 {
		return WCMWBindErr // only the key byte of a window's R_Key may change
	}
	if mw.typ == MWType2 && mw.state == mrValid {
		return WCMWBindErr
	}
	if b.Access&^(AccessRemoteRead|AccessRemoteWrite|AccessRemoteAtomic) != 0 {
		return WCMWBindErr
	}
	if mw.typ == MWType2 && (b.MR == nil || b.Length == 0) {
		return WCMWBindErr // a type 2 window is unbound only by invalidation (o10-37.2.40)
	}
	if mw.typ == MWType1 && b.Length == 0 {
		mw.unbind()
		mw.rkey = b.RKey
		return WCSuccess
	}
	mr := b.MR
	if mr == nil || mr.ctx != qp.ctx || mr.state != mrValid || mr.pd != qp.pd || mr.access&AccessMWBind == 0 {
		return WCMWBindErr
	}
	if _, ok := mr.slice(b.Addr, b.Length); !ok {
		return WCMWBindErr
	}
	if b.Access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && mr.access&AccessLocalWrite == 0 {
		return WCMWBindErr
	}
	mw.unbind()
	mw.mr = mr
	mr.mws++
	mw.addr, mw.length, mw.access = b.Addr, b.Length, b.Access
	mw.rkey = b.RKey
	mw.state = mrValid
	if mw.typ == MWType2 {
		mw.qp = qp
	}
	return WCSuccess
}
