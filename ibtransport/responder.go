package ibtransport

import (
	"encoding/binary"
)

// This file is the responder (IBTA Vol1 9.7.5.1, 9.9.3): it checks incoming
// requests (PSN, opcode sequence, length, R_Key), places SEND and WRITE data,
// executes READs and atomics, and queues ACKs, NAKs and responses in PSN order.

// respKind is the kind of a queued response.
type respKind uint8

const (
	respAck       respKind = iota // Acknowledge with an ACK syndrome
	respNAK                       // Acknowledge with an RNR NAK or NAK syndrome
	respRead                      // RDMA READ response packets
	respAtomic                    // ATOMIC Acknowledge
	respReadEmpty                 // zero-length READ response Only (FLUSH, ATOMIC WRITE)
)

// respItem is one queued response. It carries everything needed to build its
// packets, so it does not depend on the resource ring it came from.
type respItem struct {
	kind   respKind
	psn    uint32 // first PSN of the response
	syn    AETHSyndrome
	msn    uint32
	rkey   uint32 // READ: the request's R_Key, VA and length from psn on
	va     uint64
	length uint32
	off    uint32 // READ: bytes already sent
	orig   uint64 // atomic: the original value
	dup    bool   // the answer to a duplicate request
}

// respResource remembers a READ, atomic, FLUSH or ATOMIC WRITE request so that a
// duplicate can be answered again (IBTA 9.7.5.1, responder resources;
// an atomic is never executed twice, its saved result is sent again).
type respResource struct {
	valid  bool
	kind   respKind
	first  uint32
	npkts  uint32
	rkey   uint32
	va     uint64
	length uint32
	orig   uint64
}

// Message being received.
const (
	msgNone uint8 = iota
	msgSend
	msgWrite
)

// responder is the responder's state.
type responder struct {
	epsn    uint32 // expected PSN
	msn     uint32 // message sequence number (AETH)
	nakSent bool   // a NAK/RNR NAK for the current gap was sent: drop until epsn

	inMsg  uint8  // msgSend or msgWrite while a multi-packet message is open
	drop   bool   // UC: discard until the next First/Only
	wrRKey uint32 // RDMA WRITE in progress: R_Key, next VA, bytes left
	wrVA   uint64
	wrLeft uint32
	wrLen  uint32

	items    []respItem // queued responses, FIFO from itemHead
	itemHead int
	readLike int // items[itemHead:] that are readLike: pendingReadLike
	res      []respResource
	resNext  int
}

func (r *responder) reset() {
	items, res := r.items[:0], r.res
	*r = responder{items: items, res: res}
	for i := range r.res {
		r.res[i] = respResource{}
	}
}

// start initializes the responder at INIT→RTR.
func (r *responder) start(qp *QP) {
	r.epsn = qp.attr.RQPSN
	n := max(1, qp.attr.MaxDestRdAtomic)
	if len(r.res) != n {
		r.res = make([]respResource, n)
	}
}

// pending returns the number of queued responses.
func (r *responder) pending() int { return len(r.items) - r.itemHead }

// pendingReadLike counts queued responses to new (not duplicate) READ/atomic
// requests. The requester counts a request outstanding until it has received the
// last response, which the responder has sent before, so a requester that keeps
// to the responder's MaxDestRdAtomic never finds this count at the limit.
func (r *responder) pendingReadLike() int { return r.readLike }

// readLike reports whether a queued response counts against
// MaxDestRdAtomic (pendingReadLike): a READ or atomic response, not a
// duplicate's. pendingReadLike was a walk over the queue for every READ
// request: 3.7% of softrdma bench's CPU in its RoCE 64 B READ rate row.
func (it *respItem) readLike() bool { return it.kind != respAck && it.kind != respNAK && !it.dup }

// popResp removes the response at the head of the queue.
func (r *responder) popResp() {
	if r.items[r.itemHead].readLike() {
		r.readLike--
	}
	r.itemHead++
	if r.itemHead == len(r.items) {
		r.items, r.itemHead = r.items[:0], 0
	}
}

// maxPending bounds the response queue (ACKs coalesce, so it holds mostly READ
// responses, at most MaxDestRdAtomic of them for a well-behaved requester).
func (qp *QP) maxPending() int { return 2*len(qp.resp.res) + 8 }

// pushResp appends a response and schedules the QP.
func (qp *QP) pushResp(it respItem) {
	r := &qp.resp
	if r.itemHead > 0 && r.itemHead == len(r.items) {
		r.items, r.itemHead = r.items[:0], 0
	}
	r.items = append(r.items, it)
	if it.readLike() {
		r.readLike++
	}
	qp.schedule()
}

// queueAck queues an ACK for psn, coalescing with a queued ACK not yet sent
// (IBTA 9.7.5.1: the responder may coalesce ACKs; a later ACK covers earlier PSNs).
func (qp *QP) queueAck(psn uint32) {
	r := &qp.resp
	if n := len(r.items); n > r.itemHead && r.items[n-1].kind == respAck {
		r.items[n-1].psn, r.items[n-1].msn = psn, r.msn
		return
	}
	qp.pushResp(respItem{kind: respAck, psn: psn, syn: NewACKSyndrome(ACKCreditsInvalid), msn: r.msn})
}

// queueNAK queues a NAK with code for psn.
func (qp *QP) queueNAK(psn uint32, code NAKCode) {
	qp.counters.NAKsSent[code]++
	qp.pushResp(respItem{kind: respNAK, psn: psn, syn: NewNAKSyndrome(code), msn: qp.resp.msn})
}

// rcFault is a class C/D/J responder error (IBTA 9.9.3): the NAK to send and
// the status of the receive WQE in use, if any.
type rcFault struct {
	nak    NAKCode
	status WCStatus
	event  AsyncEventType
}

var (
	faultInvalidRequest = &rcFault{NAKInvalidRequest, WCRemInvReqErr, EventQPReqErr}
	faultRemoteAccess   = &rcFault{NAKRemoteAccessError, WCRemAccessErr, EventQPAccessErr}
	faultRecvLength     = &rcFault{NAKInvalidRequest, WCLocLenErr, EventQPReqErr}
	faultRecvProtection = &rcFault{NAKRemoteOperationalError, WCLocProtErr, EventQPFatal}
	faultInvalidate     = &rcFault{NAKInvalidRequest, WCRemInvReqErr, EventQPReqErr}
)

// rcError answers a request that failed with a class C error: NAK with the
// request's PSN, complete the receive WQE in use with an error, post the async
// event and move the QP to the error state (IBTA 9.9.3; rxe does the same).
func (qp *QP) rcError(psn uint32, f *rcFault) {
	qp.queueNAK(psn, f.nak)
	if qp.rcur.have {
		qp.rcur.have = false
		qp.recvCQ.push(WC{WRID: qp.rcur.wqe.wrid, Status: f.status, Opcode: WCRecv, QPNum: qp.qpn}, false)
	}
	qp.ctx.postEvent(AsyncEvent{Type: f.event, QP: qp})
	qp.enterError()
}

// rcRequest handles a request packet on an RC QP.
func (qp *QP) rcRequest(p *Packet) (DropReason, bool) {
	r := &qp.resp
	psn := p.BTH.PSN()
	switch d := PSNDiff(psn, r.epsn); {
	case d > 0:
		// Packets were lost: one NAK per gap (IBTA 9.7.5.1), then silence
		// until the expected PSN arrives.
		if r.nakSent {
			return DropOutOfSequence, true
		}
		r.nakSent = true
		qp.queueNAK(r.epsn, NAKPSNSequenceError)
		return DropOutOfSequence, true
	case d < 0:
		return qp.duplicate(p)
	}
	r.nakSent = false
	op := p.Opcode()
	if f := qp.checkSequence(op); f != nil {
		qp.rcError(psn, f)
		return 0, false
	}
	if f := qp.checkQPAccess(op); f != nil {
		qp.rcError(psn, f)
		return 0, false
	}
	if f := qp.checkLength(p); f != nil {
		qp.rcError(psn, f)
		return 0, false
	}
	switch {
	case op.IsSend():
		return qp.rcSend(p)
	case op.IsWrite():
		return qp.rcWrite(p)
	case op == OpcodeRCRDMAReadRequest:
		return qp.rcRead(p)
	case op.IsAtomic():
		return qp.rcAtomic(p)
	case op.IsAtomicWrite():
		return qp.rcAtomicWrite(p)
	case op.IsFlush():
		return qp.rcFlush(p)
	}
	qp.rcError(psn, faultInvalidRequest)
	return 0, false
}

// checkSequence checks the opcode against the message in progress (IBTA 9.7.5.1,
// a Middle or Last without First, or a new message inside one, is an invalid
// request).
func (qp *QP) checkSequence(op Opcode) *rcFault {
	pos := op.Position()
	cont := pos == PositionMiddle || pos == PositionLast
	switch qp.resp.inMsg {
	case msgSend:
		if !op.IsSend() || !cont {
			return faultInvalidRequest
		}
	case msgWrite:
		if !op.IsWrite() || !cont {
			return faultInvalidRequest
		}
	default:
		if cont {
			return faultInvalidRequest
		}
	}
	return nil
}

// checkQPAccess checks that the QP accepts the operation (its AccessFlags). As in
// rxe and IBTA 9.7.5.1, an operation the QP is not enabled for is an invalid
// request, not an access error.
func (qp *QP) checkQPAccess(op Opcode) *rcFault {
	a := qp.attr.AccessFlags
	switch {
	case op.IsWrite() || op.IsAtomicWrite():
		if a&AccessRemoteWrite == 0 {
			return faultInvalidRequest
		}
	case op == OpcodeRCRDMAReadRequest:
		if a&AccessRemoteRead == 0 {
			return faultInvalidRequest
		}
	case op.IsAtomic():
		if a&AccessRemoteAtomic == 0 {
			return faultInvalidRequest
		}
	}
	return nil
}

// checkLength checks the payload length against the path MTU and the packet's
// position (IBTA 9.7.5.1: First and Middle carry exactly one MTU, Last 1..MTU,
// Only 0..MTU) and an RDMA length against 2^31.
func (qp *QP) checkLength(p *Packet) *rcFault {
	op := p.Opcode()
	if !op.HasPayload() || op.IsAtomicWrite() {
		if p.RETH != nil && p.RETH.DMALen() > 1<<31 {
			return faultInvalidRequest
		}
		return nil
	}
	n := uint32(len(p.Payload))
	switch op.Position() {
	case PositionFirst, PositionMiddle:
		if n != qp.mtu {
			return faultInvalidRequest
		}
	case PositionLast:
		if n == 0 || n > qp.mtu {
			return faultInvalidRequest
		}
	default:
		if n > qp.mtu {
			return faultInvalidRequest
		}
	}
	if p.RETH != nil && p.RETH.DMALen() > 1<<31 {
		return faultInvalidRequest
	}
	return nil
}

// takeRecv gets the receive WQE for a new message from the SRQ or the receive
// queue. It reports false if none is posted.
func (qp *QP) takeRecv() bool {
	if qp.rcur.have {
		return true // UC: the WQE of an abandoned message is used again
	}
	var ok bool
	if qp.srq != nil {
		ok = qp.srq.take(&qp.rcur.wqe)
	} else {
		ok = qp.rq.pop(&qp.rcur.wqe)
	}
	if ok {
		qp.rcur.have, qp.rcur.off = true, 0
	}
	return ok
}

// rcSend places a SEND packet's payload in the receive WQE.
func (qp *QP) rcSend(p *Packet) (DropReason, bool) {
	r := &qp.resp
	op := p.Opcode()
	psn := p.BTH.PSN()
	if op.IsFirst() {
		if !qp.takeRecv() {
			// No receive WQE: RNR NAK with the QP's timer (IBTA 9.9.3, class B);
			// the packet is not consumed.
			qp.counters.RNRNAKsSent++
			r.nakSent = true
			qp.pushResp(respItem{kind: respNAK, psn: psn, syn: NewRNRNAKSyndrome(qp.attr.MinRNRTimer), msn: r.msn})
			return 0, false
		}
		r.inMsg = msgSend
	}
	if qp.rcur.off+uint64(len(p.Payload)) > qp.rcur.wqe.length {
		qp.rcError(psn, faultRecvLength)
		return 0, false
	}
	if f := qp.scatter(qp.rcur.wqe.sgl, qp.rcur.off, p.Payload); f != faultNone {
		qp.rcError(psn, faultRecvProtection)
		return 0, false
	}
	qp.rcur.off += uint64(len(p.Payload))
	if op.IsLast() {
		wc := WC{WRID: qp.rcur.wqe.wrid, Opcode: WCRecv, ByteLen: uint32(qp.rcur.off), QPNum: qp.qpn}
		if op.HasImmediate() {
			wc.Imm, wc.Flags = p.ImmDt.Immediate(), wc.Flags|WCFlagWithImm
		}
		if op.HasInvalidate() {
			key := p.IETH.RKey()
			if qp.ctx.invalidateRemoteKey(qp, key) != faultNone {
				qp.rcError(psn, faultInvalidate)
				return 0, false
			}
			wc.InvalidatedRKey, wc.Flags = key, wc.Flags|WCFlagWithInv
		}
		qp.rcur.have, r.inMsg = false, msgNone
		r.msn = PSNAdd(r.msn, 1)
		qp.recvCQ.push(wc, p.BTH.SE())
	}
	qp.acceptPSN(p)
	return 0, false
}

// acceptPSN advances the expected PSN past a SEND or WRITE packet and ACKs it if
// asked to.
func (qp *QP) acceptPSN(p *Packet) {
	psn := p.BTH.PSN()
	qp.resp.epsn = PSNAdd(psn, 1)
	if p.BTH.AckReq() {
		qp.queueAck(psn)
	}
}

// remoteFault maps an R_Key check failure to the responder's answer.
func remoteFault(f accessFault) *rcFault {
	if f == faultNone {
		return nil
	}
	return faultRemoteAccess
}

// rcWrite places an RDMA WRITE packet's payload.
func (qp *QP) rcWrite(p *Packet) (DropReason, bool) {
	r := &qp.resp
	op := p.Opcode()
	psn := p.BTH.PSN()
	if op.IsFirst() {
		r.wrRKey, r.wrVA, r.wrLen = p.RETH.RKey(), p.RETH.VA(), p.RETH.DMALen()
		r.wrLeft = r.wrLen
		// The whole range is checked once at First (IBTA 9.7.5.1: R_Key,
		// bounds and rights), then each packet's part again as it is placed.
		if _, f := qp.ctx.lookupRemote(qp, r.wrRKey, r.wrVA, uint64(r.wrLen), AccessRemoteWrite); f != faultNone {
			qp.rcError(psn, remoteFault(f))
			return 0, false
		}
		r.inMsg = msgWrite
	}
	n := uint32(len(p.Payload))
	// The payload must fill the DMA length exactly: MTU-sized packets while more
	// than an MTU is left, the rest in the Last/Only packet.
	if (op.IsLast() && n != r.wrLeft) || (!op.IsLast() && n >= r.wrLeft) {
		qp.rcError(psn, faultInvalidRequest)
		return 0, false
	}
	if op.HasImmediate() && !qp.takeRecv() {
		if op.IsFirst() {
			r.inMsg = msgNone // the Only packet will come again
		}
		qp.counters.RNRNAKsSent++
		r.nakSent = true
		qp.pushResp(respItem{kind: respNAK, psn: psn, syn: NewRNRNAKSyndrome(qp.attr.MinRNRTimer), msn: r.msn})
		return 0, false
	}
	if n > 0 {
		mem, f := qp.ctx.lookupRemote(qp, r.wrRKey, r.wrVA, uint64(n), AccessRemoteWrite)
		if f != faultNone {
			qp.rcError(psn, remoteFault(f))
			return 0, false
		}
		copy(mem, p.Payload) // the receive path's one copy: packet → region
	}
	r.wrVA += uint64(n)
	r.wrLeft -= n
	if op.IsLast() {
		r.inMsg = msgNone
		r.msn = PSNAdd(r.msn, 1)
		if op.HasImmediate() {
			qp.rcur.have = false
			qp.recvCQ.push(WC{WRID: qp.rcur.wqe.wrid, Opcode: WCRecvRDMAWithImm, ByteLen: r.wrLen, QPNum: qp.qpn,
				Imm: p.ImmDt.Immediate(), Flags: WCFlagWithImm}, p.BTH.SE())
		}
	}
	qp.acceptPSN(p)
	return 0, false
}

// newResource records a READ/atomic request in the resource ring, replacing the
// oldest entry.
func (qp *QP) newResource(res respResource) {
	r := &qp.resp
	res.valid = true
	r.res[r.resNext] = res
	r.resNext = (r.resNext + 1) % len(r.res)
}

// findResource returns the remembered request that holds psn.
func (qp *QP) findResource(psn uint32) *respResource {
	for i := range qp.resp.res {
		res := &qp.resp.res[i]
		if res.valid && PSNInWindow(psn, res.first, int(res.npkts)) {
			return res
		}
	}
	return nil
}

// checkReadLikeRoom refuses a READ/atomic request beyond MaxDestRdAtomic
// outstanding responses (IBTA 9.7.5.1: responder resources exhausted is an
// invalid request).
func (qp *QP) checkReadLikeRoom(psn uint32) bool {
	if qp.resp.pendingReadLike() >= len(qp.resp.res) {
		qp.rcError(psn, faultInvalidRequest)
		return false
	}
	return true
}

// rcRead executes an RDMA READ request: check the R_Key for the whole range, then
// queue the responses; the data is read from the region as each packet is built.
func (qp *QP) rcRead(p *Packet) (DropReason, bool) {
	r := &qp.resp
	psn := p.BTH.PSN()
	rkey, va, n := p.RETH.RKey(), p.RETH.VA(), p.RETH.DMALen()
	if !qp.checkReadLikeRoom(psn) {
		return 0, false
	}
	if _, f := qp.ctx.lookupRemote(qp, rkey, va, uint64(n), AccessRemoteRead); f != faultNone {
		qp.rcError(psn, remoteFault(f))
		return 0, false
	}
	npkts := packetsFor(WRRDMARead, uint64(n), qp.mtu)
	r.msn = PSNAdd(r.msn, 1)
	qp.newResource(respResource{kind: respRead, first: psn, npkts: npkts, rkey: rkey, va: va, length: n})
	qp.pushResp(respItem{kind: respRead, psn: psn, syn: NewACKSyndrome(ACKCreditsInvalid), msn: r.msn,
		rkey: rkey, va: va, length: n})
	r.epsn = PSNAdd(psn, int(npkts)) // a READ occupies one PSN per response packet (IBTA 9.7.4)
	return 0, false
}

// rcAtomic executes a CmpSwap or FetchAdd exactly once (IBTA 9.4): 8 bytes,
// 8-byte aligned (misaligned is an invalid request), host byte order.
func (qp *QP) rcAtomic(p *Packet) (DropReason, bool) {
	r := &qp.resp
	psn := p.BTH.PSN()
	a := p.AtomicETH
	if !qp.checkReadLikeRoom(psn) {
		return 0, false
	}
	if a.VA()&7 != 0 {
		qp.rcError(psn, faultInvalidRequest)
		return 0, false
	}
	mem, f := qp.ctx.lookupRemote(qp, a.RKey(), a.VA(), 8, AccessRemoteAtomic)
	if f != faultNone {
		qp.rcError(psn, remoteFault(f))
		return 0, false
	}
	orig := binary.NativeEndian.Uint64(mem)
	v := orig + a.SwapAdd()
	if p.Opcode() == OpcodeRCCompareSwap {
		v = orig
		if orig == a.Compare() {
			v = a.SwapAdd()
		}
	}
	binary.NativeEndian.PutUint64(mem, v)
	r.msn = PSNAdd(r.msn, 1)
	qp.newResource(respResource{kind: respAtomic, first: psn, npkts: 1, orig: orig})
	qp.pushResp(respItem{kind: respAtomic, psn: psn, syn: NewACKSyndrome(ACKCreditsInvalid), msn: r.msn, orig: orig})
	r.epsn = PSNAdd(psn, 1)
	return 0, false
}

// rcAtomicWrite executes an ATOMIC WRITE (IBTA Annex A19): 8 bytes to an 8-byte
// aligned address with remote write access, answered by a zero-length READ
// response.
func (qp *QP) rcAtomicWrite(p *Packet) (DropReason, bool) {
	psn := p.BTH.PSN()
	rkey, va := p.RETH.RKey(), p.RETH.VA()
	if !qp.checkReadLikeRoom(psn) {
		return 0, false
	}
	if va&7 != 0 || p.RETH.DMALen() != AtomicWriteDataLen {
		qp.rcError(psn, faultInvalidRequest)
		return 0, false
	}
	mem, f := qp.ctx.lookupRemote(qp, rkey, va, 8, AccessRemoteWrite)
	if f != faultNone {
		qp.rcError(psn, remoteFault(f))
		return 0, false
	}
	copy(mem, p.AtomicWrite)
	qp.finishReadEmpty(psn)
	return 0, false
}

// rcFlush executes a FLUSH (IBTA Annex A19): Go memory needs no flushing, but the
// R_Key, range and the flush rights (placement type 1 global visibility needs
// AccessFlushGlobal, 2 persistence AccessFlushPersistent) are checked. Selectivity
// level 1 flushes the whole region: only the key is checked then.
func (qp *QP) rcFlush(p *Packet) (DropReason, bool) {
	psn := p.BTH.PSN()
	if !qp.checkReadLikeRoom(psn) {
		return 0, false
	}
	var want Access
	pt := p.FETH.PlacementType()
	if pt&1 != 0 {
		want |= AccessFlushGlobal
	}
	if pt&2 != 0 {
		want |= AccessFlushPersistent
	}
	if want == 0 || pt > 3 || p.FETH.SelectivityLevel() > 1 {
		qp.rcError(psn, faultInvalidRequest)
		return 0, false
	}
	va, n := p.RETH.VA(), uint64(p.RETH.DMALen())
	if p.FETH.SelectivityLevel() == 1 {
		va, n = 0, 0
		if _, f := qp.ctx.lookupRemoteKey(qp, p.RETH.RKey(), want); f != faultNone {
			qp.rcError(psn, remoteFault(f))
			return 0, false
		}
	} else if _, f := qp.ctx.lookupRemote(qp, p.RETH.RKey(), va, n, want); f != faultNone {
		qp.rcError(psn, remoteFault(f))
		return 0, false
	}
	qp.finishReadEmpty(psn)
	return 0, false
}

// finishReadEmpty completes a FLUSH or ATOMIC WRITE: remembered for duplicates and
// answered with a zero-length READ response Only (as rxe does).
func (qp *QP) finishReadEmpty(psn uint32) {
	r := &qp.resp
	r.msn = PSNAdd(r.msn, 1)
	qp.newResource(respResource{kind: respReadEmpty, first: psn, npkts: 1})
	qp.pushResp(respItem{kind: respReadEmpty, psn: psn, syn: NewACKSyndrome(ACKCreditsInvalid), msn: r.msn})
	r.epsn = PSNAdd(psn, 1)
}

// duplicate answers a request with a PSN before the expected one (IBTA 9.7.5.1):
// SEND and WRITE are ACKed again without being executed (rxe cites C9-105: with the PSN of
// the most recent request); a READ is executed again from the duplicate's PSN on,
// reading the memory again; an atomic, FLUSH or ATOMIC WRITE is answered from its
// saved result. A duplicate the resource ring has forgotten is dropped.
func (qp *QP) duplicate(p *Packet) (DropReason, bool) {
	qp.counters.DuplicateRequests++
	r := &qp.resp
	op := p.Opcode()
	psn := p.BTH.PSN()
	if op.IsSend() || op.IsWrite() {
		qp.queueAck(PSNAdd(r.epsn, -1))
		return 0, false
	}
	res := qp.findResource(psn)
	if res == nil {
		return DropDuplicate, true
	}
	if r.pending() >= qp.maxPending() {
		return DropResources, true
	}
	switch {
	case op == OpcodeRCRDMAReadRequest && res.kind == respRead:
		off := uint32(PSNDiff(psn, res.first)) * qp.mtu
		if p.RETH.DMALen() != res.length-off || p.RETH.VA() != res.va+uint64(off) {
			return DropDuplicate, true // not a resumption of the remembered READ
		}
		qp.pushResp(respItem{kind: respRead, psn: psn, syn: NewACKSyndrome(ACKCreditsInvalid), msn: r.msn,
			rkey: res.rkey, va: res.va + uint64(off), length: res.length - off, dup: true})
	case op.IsAtomic() && res.kind == respAtomic && psn == res.first:
		qp.pushResp(respItem{kind: respAtomic, psn: psn, syn: NewACKSyndrome(ACKCreditsInvalid), msn: r.msn, orig: res.orig, dup: true})
	case (op.IsFlush() || op.IsAtomicWrite()) && res.kind == respReadEmpty:
		qp.pushResp(respItem{kind: respReadEmpty, psn: psn, syn: NewACKSyndrome(ACKCreditsInvalid), msn: r.msn, dup: true})
	default:
		return DropDuplicate, true
	}
	return 0, false
}

// responderOutput appends the next queued response packet.
func (qp *QP) responderOutput(out *OutputBatch) bool {
	r := &qp.resp
	if r.pending() == 0 || qp.state == QPStateReset {
		return false
	}
	it := &r.items[r.itemHead]
	b := out.space()
	var f PacketFields
	f.BTH = BTHFields{PKey: qp.pkey, DestQP: qp.attr.DestQPN, PSN: it.psn}
	f.AETH = AETHFields{Syndrome: it.syn, MSN: it.msn}
	done := true
	n, pad := 0, 0
	var payload [][]byte
	switch it.kind {
	case respAck, respNAK:
		f.BTH.Opcode = OpcodeRCAcknowledge
		n = f.EncodeHeaders(b)
		if it.kind == respAck {
			qp.counters.AcksSent++
		}
	case respAtomic:
		f.BTH.Opcode = OpcodeRCAtomicAcknowledge
		f.AtomicAckOrigData = it.orig
		n = f.EncodeHeaders(b)
	case respReadEmpty:
		f.BTH.Opcode = OpcodeRCRDMAReadResponseOnly
		n = f.EncodeHeaders(b)
	case respRead:
		var ok bool
		n, payload, pad, done, ok = qp.buildReadResponse(it, &f, b, out.pieceSpace())
		if !ok {
			return qp.responderOutput(out) // the READ failed; its NAK is queued next
		}
	}
	qp.emitPayload(out, n, payload, pad, qp.ah, qp.attr.DestQPN)
	if done {
		r.popResp()
	}
	return true
}

// buildReadResponse writes the next packet of a READ response. The memory is
// read now, through the R_Key again: if the region went away since the request,
// the READ is answered with a remote access NAK at this packet's PSN. With
// pieces (a batch that gathers) the payload is not copied but returned in place,
// with the pad's length.
func (qp *QP) buildReadResponse(it *respItem, f *PacketFields, b []byte, pieces [][]byte) (n int, payload [][]byte, pad int, done, ok bool) {
	mtu := qp.mtu
	idx := it.off / mtu
	psn := PSNAdd(it.psn, int(idx))
	plen := min(mtu, it.length-it.off)
	first := it.off == 0
	last := it.off+plen >= it.length
	switch {
	case first && last:
		f.BTH.Opcode = OpcodeRCRDMAReadResponseOnly
	case first:
		f.BTH.Opcode = OpcodeRCRDMAReadResponseFirst
	case last:
		f.BTH.Opcode = OpcodeRCRDMAReadResponseLast
	default:
		f.BTH.Opcode = OpcodeRCRDMAReadResponseMiddle
	}
	f.BTH.PSN = psn
	f.BTH.PadCount = PadCountFor(int(plen))
	mem, fault := qp.ctx.lookupRemote(qp, it.rkey, it.va+uint64(it.off), uint64(plen), AccessRemoteRead)
	if fault != faultNone {
		qp.resp.popResp()
		qp.rcError(psn, faultRemoteAccess)
		return 0, nil, 0, false, false
	}
	n = f.EncodeHeaders(b)
	pad = int(f.BTH.PadCount)
	it.off += plen
	if pieces != nil && plen > 0 {
		return n, append(pieces, mem), pad, last, true // no copy: the device sends from the region
	}
	n += copy(b[n:n+int(plen)], mem) // the send path's one copy: region → packet
	clear(b[n : n+pad])
	return n + pad, nil, 0, last, true
}
