package ibtransport

import (
	"encoding/binary"
	"time"
)

// This file is the completer (IBTA Vol1 9.7.5.2, 9.9.2): it matches ACKs, NAKs,
// RDMA READ responses and atomic ACKs to outstanding send WQEs, places response
// data, completes WQEs, and drives retransmission on NAKs and RNR NAKs.

// complete handles a response packet on an RC QP.
func (qp *QP) complete(now time.Time, p *Packet) (DropReason, bool) {
	op := p.Opcode()
	switch {
	case op == OpcodeRCAcknowledge:
		return qp.onAcknowledge(now, p)
	case op == OpcodeRCAtomicAcknowledge:
		return qp.onAtomicAck(now, p)
	case op.IsRead():
		return qp.onReadResponse(now, p)
	}
	return DropUnexpectedResponse, true
}

// unackedPSN reports whether psn was sent and is not yet acknowledged.
func (qp *QP) unackedPSN(psn uint32) bool {
	return PSNLessEqual(qp.req.unacked, psn) && PSNLess(psn, qp.req.sentHigh)
}

// onAcknowledge handles an Acknowledge packet: ACK, RNR NAK or NAK (IBTA
// 9.7.5.2).
func (qp *QP) onAcknowledge(now time.Time, p *Packet) (DropReason, bool) {
	psn := p.BTH.PSN()
	syn := p.AETH.Syndrome()
	switch syn.Kind() {
	case AETHKindACK:
		qp.counters.AcksReceived++
		// An ACK acknowledges every PSN up to its own; one older than the oldest
		// unacknowledged PSN is a duplicate (IBTA 9.7.5.2: it is ignored).
		if !qp.unackedPSN(psn) {
			if PSNLess(psn, qp.req.unacked) {
				qp.counters.DuplicateResponses++
				return 0, false
			}
			return DropUnexpectedResponse, true
		}
		qp.ackThrough(now, psn)
	case AETHKindRNRNAK:
		qp.counters.RNRNAKsReceived++
		if !qp.unackedPSN(psn) {
			return DropUnexpectedResponse, true
		}
		qp.ackThrough(now, PSNAdd(psn, -1))
		qp.onRNR(now, psn, syn.RNRTimer())
	case AETHKindNAK:
		code := syn.NAKCode()
		if int(code) < len(qp.counters.NAKsReceived) {
			qp.counters.NAKsReceived[code]++
		}
		if !qp.unackedPSN(psn) {
			return DropUnexpectedResponse, true
		}
		qp.ackThrough(now, PSNAdd(psn, -1))
		qp.onNAK(now, psn, code)
	default:
		return DropUnexpectedResponse, true
	}
	return 0, false
}

// ackThrough acknowledges every PSN up to and including psn: SEND and WRITE WQEs
// wholly covered complete. A READ or atomic WQE covered by the ACK whose responses
// have not all arrived lost them (the responder answers in order): the requester
// resends it from its first missing response (rxe: COMPST_ERROR_RETRY).
func (qp *QP) ackThrough(now time.Time, psn uint32) {
	if PSNLess(psn, qp.req.unacked) {
		return
	}
	newUnacked := PSNAdd(psn, 1)
	for i := qp.sq.head; i != qp.sq.tail; i++ {
		w := qp.sq.at(i)
		if w.state == wqeDone {
			continue
		}
		if w.state != wqeStarted || PSNLess(psn, w.firstPSN) {
			break
		}
		if w.wr.Opcode.readLike() {
			newUnacked = PSNAdd(w.firstPSN, int(w.resp))
			if !qp.req.rewound || qp.req.rewindPSN != newUnacked {
				qp.progress(now, newUnacked)
				qp.rewind(newUnacked)
				return
			}
			break
		}
		if PSNLess(psn, w.lastPSN()) {
			break // partly acknowledged (an AckReq inside a long message)
		}
		w.state, w.status = wqeDone, WCSuccess
	}
	qp.progress(now, newUnacked)
	qp.retire()
}

// progress records that PSNs before unacked are acknowledged: the retry counters
// reset, the retransmission timer restarts (or stops), and the send cursor, if it
// was rewound behind the acknowledged PSNs, moves forward.
func (qp *QP) progress(now time.Time, unacked uint32) {
	if !PSNLess(qp.req.unacked, unacked) {
		return
	}
	qp.growWindow(PSNDiff(unacked, qp.req.unacked))
	qp.rttAcked(now, unacked)
	qp.req.unacked = unacked
	qp.req.rewound = false
	qp.req.lastActive, qp.req.probed = now, false
	qp.req.resetRetries(&qp.attr)
	if PSNLess(qp.req.psn, unacked) {
		qp.seek(unacked)
	}
	if qp.outstanding() {
		qp.armTimer(now)
	} else {
		qp.req.timer = time.Time{}
	}
	if qp.sq.next != qp.sq.tail {
		// The window moved: a WQE not yet (fully) sent may go now. With
		// nothing left to send the wake-up would only find no output.
		qp.scheduleUnheld()
	}
}

// findStarted returns the started WQE that holds psn.
func (qp *QP) findStarted(psn uint32) *sendWQE {
	for i := qp.sq.head; i != qp.sq.tail; i++ {
		w := qp.sq.at(i)
		if w.state == wqePosted {
			return nil
		}
		if w.state == wqeStarted && w.holds(psn) {
			return w
		}
	}
	return nil
}

// onNAK handles a NAK with code for PSN psn (IBTA 9.7.5.2): a sequence
// error resends from psn; the others complete the WQE with an error and move the QP
// to the error state.
func (qp *QP) onNAK(now time.Time, psn uint32, code NAKCode) {
	if code == NAKPSNSequenceError {
		// Resend from the NAK's PSN, or from an earlier READ or atomic whose
		// response is missing (ackThrough stopped there): never skip it.
		from := qp.resendPoint(psn)
		if qp.req.rewound && qp.req.rewindPSN == from {
			return // already resending from there
		}
		if qp.req.retries == 0 {
			qp.failAt(from, WCRetryExcErr)
			return
		}
		qp.req.retries--
		qp.rewind(from)
		qp.armTimer(now)
		return
	}
	status := WCRemOpErr
	switch code {
	case NAKInvalidRequest:
		status = WCRemInvReqErr
	case NAKRemoteAccessError:
		status = WCRemAccessErr
	case NAKRemoteOperationalError:
		status = WCRemOpErr
	case NAKInvalidRDRequest:
		status = WCRemInvRdReqErr
	}
	qp.failAt(psn, status)
}

// resendPoint returns where to resend from when the responder asks for psn:
// psn itself, or the oldest unacknowledged PSN if that is earlier (a READ or
// atomic before psn still lacks its response).
func (qp *QP) resendPoint(psn uint32) uint32 {
	if PSNLess(qp.req.unacked, psn) {
		return qp.req.unacked
	}
	return psn
}

// failAt completes the WQE holding psn (or the oldest outstanding one) with status.
func (qp *QP) failAt(psn uint32, status WCStatus) {
	w := qp.findStarted(psn)
	if w == nil {
		w = qp.oldestOutstanding()
	}
	if w == nil {
		qp.enterError()
		return
	}
	qp.fail(w, status)
}

// oldestOutstanding returns the oldest WQE that is not done.
func (qp *QP) oldestOutstanding() *sendWQE {
	for i := qp.sq.head; i != qp.sq.tail; i++ {
		if w := qp.sq.at(i); w.state != wqeDone {
			return w
		}
	}
	return nil
}

// onRNR handles an RNR NAK for psn (IBTA 9.7.5.2): wait the responder's RNR
// timer, then resend from psn; after RNRRetry attempts (7 = forever) complete with
// IBV_WC_RNR_RETRY_EXC_ERR.
func (qp *QP) onRNR(now time.Time, psn uint32, timerCode uint8) {
	if qp.req.rnrRetries == 0 {
		qp.failAt(psn, WCRNRRetryExcErr)
		return
	}
	if qp.req.rnrRetries != 7 {
		qp.req.rnrRetries--
	}
	from := qp.resendPoint(psn)
	qp.seek(from)
	qp.req.rewound = true
	qp.req.rewindPSN = from
	qp.req.timer = time.Time{}
	qp.req.rnrWait = true
	qp.req.rnrUntil = now.Add(RNRTimerDuration(timerCode))
	qp.addTimered()
}

// onReadResponse handles an RDMA READ response packet (also the zero-length READ
// response Only that answers FLUSH and ATOMIC WRITE).
func (qp *QP) onReadResponse(now time.Time, p *Packet) (DropReason, bool) {
	psn := p.BTH.PSN()
	op := p.Opcode()
	if p.AETH != nil && p.AETH.Syndrome().Kind() != AETHKindACK {
		return DropUnexpectedResponse, true
	}
	w := qp.findStarted(psn)
	if w == nil || !w.wr.Opcode.readLike() || w.wr.Opcode.atomic() {
		if PSNLess(psn, qp.req.unacked) {
			qp.counters.DuplicateResponses++
			return 0, false
		}
		return DropUnexpectedResponse, true
	}
	expected := PSNAdd(w.firstPSN, int(w.resp))
	if psn != expected {
		if PSNLess(psn, expected) {
			qp.counters.DuplicateResponses++
			return 0, false
		}
		// A response is missing: ask again from it (rxe: COMPST_ERROR_RETRY).
		qp.ackThrough(now, PSNAdd(w.firstPSN, -1))
		from := qp.resendPoint(expected)
		if (!qp.req.rewound || qp.req.rewindPSN != from) && (qp.state == QPStateRTS || qp.state == QPStateSQD) {
			qp.rewind(from)
		}
		return DropOutOfSequence, true
	}
	// A response implicitly acknowledges every earlier request (IBTA 9.7.5.2).
	qp.ackThrough(now, PSNAdd(w.firstPSN, -1))
	if qp.req.unacked != psn || w.state != wqeStarted {
		return DropOutOfSequence, true
	}
	final := w.resp == w.npkts-1
	if final != op.IsLast() {
		return DropUnexpectedResponse, true
	}
	if w.wr.Opcode != WRRDMARead {
		// FLUSH and ATOMIC WRITE are answered by a zero-length READ response Only.
		if op != OpcodeRCRDMAReadResponseOnly || len(p.Payload) != 0 {
			return DropUnexpectedResponse, true
		}
	} else {
		off := uint64(w.resp) * uint64(qp.mtu)
		want := min(uint64(qp.mtu), w.length-off)
		if uint64(len(p.Payload)) != want {
			return DropUnexpectedResponse, true // IBTA 9.7.5.2: the length must match
		}
		if f := qp.scatter(w.wr.SGL, off, p.Payload); f != faultNone {
			qp.fail(w, WCLocProtErr)
			return 0, false
		}
	}
	w.resp++
	if final {
		qp.finishReadLike(w, WCSuccess)
	}
	qp.progress(now, PSNAdd(psn, 1))
	qp.retire()
	return 0, false
}

// onAtomicAck handles an ATOMIC Acknowledge: the original remote value goes to the
// WQE's 8-byte local buffer in host byte order, as verbs returns it.
func (qp *QP) onAtomicAck(now time.Time, p *Packet) (DropReason, bool) {
	psn := p.BTH.PSN()
	if p.AETH.Syndrome().Kind() != AETHKindACK {
		return DropUnexpectedResponse, true
	}
	w := qp.findStarted(psn)
	if w == nil || !w.wr.Opcode.atomic() || psn != w.firstPSN {
		if PSNLess(psn, qp.req.unacked) {
			qp.counters.DuplicateResponses++
			return 0, false
		}
		return DropUnexpectedResponse, true
	}
	qp.ackThrough(now, PSNAdd(psn, -1))
	if qp.req.unacked != psn || w.state != wqeStarted {
		return DropOutOfSequence, true
	}
	var v [8]byte
	binary.NativeEndian.PutUint64(v[:], p.AtomicAckETH.OrigData())
	if f := qp.scatter(w.wr.SGL, 0, v[:]); f != faultNone {
		qp.fail(w, WCLocProtErr)
		return 0, false
	}
	w.resp = 1
	qp.finishReadLike(w, WCSuccess)
	qp.progress(now, PSNAdd(psn, 1))
	qp.retire()
	return 0, false
}

// finishReadLike completes a READ/atomic WQE and frees its MaxRdAtomic slot.
func (qp *QP) finishReadLike(w *sendWQE, status WCStatus) {
	w.state, w.status = wqeDone, status
	if w.counted {
		w.counted = false
		qp.sq.rdAtomic--
	}
}
