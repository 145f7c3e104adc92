package ibtransport

import (
	"time"
)

// This file is the requester (IBTA Vol1 9.7.1-9.7.4, 9.8): it turns send WQEs into
// request packets — segmentation to the path MTU, PSN assignment, AckReq — and
// retransmits them go-back-N from the WQEs themselves. No packet is kept: a
// retransmission rebuilds the packet from the WQE and the memory region.

// wqeState is the progress of a send WQE.
type wqeState uint8

const (
	wqePosted  wqeState = iota // not started: no PSNs yet
	wqeStarted                 // PSNs assigned; packets sent or being sent
	wqeDone                    // finished with status; retires in posting order
)

// sendWQE is a posted send work request and its transport progress.
type sendWQE struct {
	wr       SendWR // copy of the WR; wr.SGL points into sgeBuf
	sgeBuf   []SGE
	inline   []byte // inline data copied at post time
	length   uint64 // message length
	state    wqeState
	status   WCStatus
	firstPSN uint32
	npkts    uint32 // PSNs the WQE occupies (READ: one per response packet)
	resp     uint32 // READ: response packets received so far
	counted  bool   // holds one of the QP's MaxRdAtomic slots
}

// lastPSN returns the WQE's last PSN.
func (w *sendWQE) lastPSN() uint32 { return PSNAdd(w.firstPSN, int(w.npkts)-1) }

// holds reports whether PSN psn belongs to the started WQE.
func (w *sendWQE) holds(psn uint32) bool { return PSNInWindow(psn, w.firstPSN, int(w.npkts)) }

// release drops the references a retired WQE holds, so that the GC can free them.
func (w *sendWQE) release() {
	w.wr.AH = nil
	w.wr.RegMR = RegMRInfo{}
	w.wr.Bind = MWBindInfo{}
	w.wr.SGL = nil
}

// sendQueue is the ring of send WQEs. Indexes grow forever; slot = index % size.
// [head, next) have been started (or are done); next is the WQE the requester
// sends from; [next, tail) are waiting. After a rewind next moves back.
type sendQueue struct {
	slots []sendWQE
	head  uint64 // oldest WQE not yet retired
	next  uint64 // the WQE holding the next PSN to send
	tail  uint64 // next free slot

	// rdAtomic counts started READ/atomic WQEs not yet done (against the QP's
	// max_rd_atomic, or iWARP's ORD): verbs state, shared by the IB requester
	// and an external transport (docs/verbs-split.md, step 1).
	rdAtomic int
	// drainNotified is set once EventSQDrained was posted for the current SQD.
	drainNotified bool
}

func newSendQueue(depth, maxSGE int) sendQueue {
	q := sendQueue{slots: make([]sendWQE, depth)}
	for i := range q.slots {
		q.slots[i].sgeBuf = make([]SGE, maxSGE)
	}
	return q
}

func (q *sendQueue) at(i uint64) *sendWQE { return &q.slots[i%uint64(len(q.slots))] }
func (q *sendQueue) count() int           { return int(q.tail - q.head) }
func (q *sendQueue) full() bool           { return q.count() == len(q.slots) }

func (q *sendQueue) clear() {
	for i := q.head; i != q.tail; i++ {
		q.at(i).release()
	}
	q.head, q.next = q.tail, q.tail
	q.rdAtomic, q.drainNotified = 0, false
}

// post copies wr into the next slot. The caller checked room and validity.
func (q *sendQueue) post(wr *SendWR, qp *QP) *sendWQE {
	w := q.at(q.tail)
	q.tail++
	sgeBuf, inline := w.sgeBuf, w.inline[:0]
	*w = sendWQE{wr: *wr, sgeBuf: sgeBuf}
	w.wr.SGL = sgeBuf[:copy(sgeBuf, wr.SGL)]
	w.wr.InlineData = nil
	w.length = sglLength(wr.SGL)
	if wr.Inline {
		inline = qp.copyInline(inline, wr)
		w.length = uint64(len(inline))
		w.wr.SGL = w.wr.SGL[:0]
	}
	w.inline = inline
	return w
}

// copyInline copies an inline WR's data at post time: InlineData, or the bytes
// its SGL names through their L_Keys (an unknown key contributes zero bytes; the
// length was checked).
func (qp *QP) copyInline(dst []byte, wr *SendWR) []byte {
	if wr.InlineData != nil {
		return append(dst, wr.InlineData...)
	}
	for _, s := range wr.SGL {
		mem, f := qp.ctx.lookupLocal(qp.pd, s.LKey, s.Addr, uint64(s.Length), false)
		if f != faultNone {
			mem = make([]byte, s.Length)
		}
		dst = append(dst, mem...)
	}
	return dst
}

// requester is the requester's state.
type requester struct {
	psn      uint32 // next PSN to send (the send cursor)
	unacked  uint32 // oldest PSN not yet acknowledged
	sentHigh uint32 // PSN after the highest ever sent: below it is a retransmission

	retries    uint8 // retries left before IBV_WC_RETRY_EXC_ERR
	rnrRetries uint8 // RNR retries left (7 = infinite)

	timer    time.Time // retransmission deadline; zero when not armed
	rnrUntil time.Time // while rnrWait, nothing is sent before this
	rnrWait  bool

	rewound   bool   // a rewind to rewindPSN happened without progress since
	rewindPSN uint32 // (suppresses repeated rewinds for one loss)
	noAckPkts int    // packets sent since the last AckReq
	cwnd      int32  // the window in use (sendWindow); 0 before the first ACK

	// The tail-loss probe (probe.go).
	srtt       time.Duration // smoothed round trip of new packets; 0 before a sample
	rttSent    time.Time     // when rttPSN left; zero when nothing is timed
	rttPSN     uint32
	lastActive time.Time // the last packet sent or PSN acknowledged
	probed     bool      // the probe for this ACK went out (or was passed over)
	probing    bool      // the packet before sentHigh, at the send cursor, is the probe
}

func (r *requester) reset() { *r = requester{} }

func (r *requester) stopTimers() {
	r.timer = time.Time{}
	r.rnrWait = false
}

// start initializes the requester at RTR→RTS.
func (r *requester) start(qp *QP) {
	psn := qp.attr.SQPSN
	r.psn, r.unacked, r.sentHigh = psn, psn, psn
	r.resetRetries(&qp.attr)
}

func (r *requester) resetRetries(a *QPAttr) {
	r.retries = a.RetryCnt
	r.rnrRetries = a.RNRRetry
}

// timeout returns the retransmission timeout: 4.096 µs × 2^Timeout (IBTA
// 9.7.6), or 0 for "infinite" (Timeout 0).
func (qp *QP) timeout() time.Duration {
	t := qp.attr.Timeout
	if t == 0 {
		return 0
	}
	return time.Duration(4096) << t // nanoseconds
}

// outstanding reports whether PSNs were sent that are not yet acknowledged.
func (qp *QP) outstanding() bool { return PSNLess(qp.req.unacked, qp.req.sentHigh) }

// window returns the requester's largest window: PSNs it may send past the
// oldest unacknowledged one (rxe: RXE_MAX_UNACKED_PSNS).
func (qp *QP) window() int32 { return int32(qp.ctx.cfg.MaxUnackedPSNs) }

// sendWindow returns the window in use. A QP starts at initialSendWindow, as
// rxe's fixed window, and widens it by one PSN per PSN acknowledged up to
// window(), so that a fast path gets more than 128 KiB in flight (softrdma
// bench, RoCE 1 MiB WRITEs between namespaces: about a quarter more with 1024
// than with 128) while a slow peer sees rxe's burst first; a loss (a rewind)
// halves it. Go-back-N resends everything past a loss, so with a fixed
// 128-PSN window and 10% loss nearly every window held a loss and each cost up
// to 128 packets (softrdma demo --loss 0.1 resent ~50 packets per packet
// delivered); the IBTA bounds the PSNs outstanding (2^23) but leaves their
// number to the requester.
func (qp *QP) sendWindow() int32 {
	if qp.req.cwnd <= 0 {
		return min(initialSendWindow, qp.window())
	}
	return min(qp.req.cwnd, qp.window())
}

// initialSendWindow is the window an RC QP starts with: rxe's.
const initialSendWindow = 128

// minSendWindow is the smallest window a loss shrinks sendWindow to.
const minSendWindow = 16

// shrinkWindow halves the window in use after a loss.
func (qp *QP) shrinkWindow() {
	qp.req.cwnd = max(qp.sendWindow()/2, min(minSendWindow, qp.window()))
}

// growWindow widens the window in use by the n PSNs just acknowledged.
func (qp *QP) growWindow(n int32) {
	qp.req.cwnd = min(qp.sendWindow()+n, qp.window())
}

// packetsFor returns the number of PSNs a message of n bytes occupies.
func packetsFor(op WROpcode, n uint64, mtu uint32) uint32 {
	switch op {
	case WRAtomicCmpAndSwp, WRAtomicFetchAdd, WRAtomicWrite, WRFlush:
		return 1
	}
	if n == 0 {
		return 1
	}
	return uint32((n + uint64(mtu) - 1) / uint64(mtu))
}

// requesterOutput appends the next request packet, if the requester may send one.
func (qp *QP) requesterOutput(now time.Time, out *OutputBatch) bool {
	for {
		if qp.state != QPStateRTS && qp.state != QPStateSQD {
			return false
		}
		if qp.req.rnrWait || qp.sq.next == qp.sq.tail {
			return false
		}
		w := qp.sq.at(qp.sq.next)
		switch w.state {
		case wqeDone:
			qp.sq.next++
			continue
		case wqePosted:
			if qp.state == QPStateSQD {
				return false // SQD: finish started messages, start no new one (IBTA 10.3.1)
			}
			if !qp.startWQE(w) {
				return false
			}
			if w.state == wqeDone { // a local operation
				continue
			}
		}
		if qp.typ == QPTypeRC && PSNDiff(qp.req.psn, qp.req.unacked) >= qp.sendWindow() {
			return false // window full: wait for ACKs
		}
		return qp.sendPacket(now, w, out)
	}
}

// startWQE starts the WQE at the send cursor: it assigns its PSNs, or executes a
// local operation. It returns false if the WQE must wait (fence, MaxRdAtomic,
// window) or failed.
func (qp *QP) startWQE(w *sendWQE) bool {
	op := w.wr.Opcode
	// Fence (IBTA 10.8.3): wait until every earlier WR has completed. Local
	// operations are fenced implicitly so that an invalidation never races a
	// retransmission that still reads the memory.
	if (w.wr.Fence || op.local()) && qp.sq.head != qp.sq.next {
		return false
	}
	if op.local() {
		qp.execLocal(w)
		return w.state == wqeDone && qp.state != QPStateErr
	}
	if op.readLike() && qp.sq.rdAtomic >= max(1, qp.attr.MaxRdAtomic) {
		return false // IBTA 9.7.5.1 / 11.2.4: at most MaxRdAtomic outstanding
	}
	if qp.typ == QPTypeRC && PSNDiff(qp.req.psn, qp.req.unacked) >= qp.sendWindow() {
		return false
	}
	if qp.typ.datagram() && w.length > uint64(qp.mtu) {
		// A UD message fits one packet (IBTA 9.8); one longer than the MTU
		// is sent as no packet at all and is no error (C10-93.1.1): it
		// completes successfully, taking its PSN, as on rxe (rxe_req.c:
		// "fake a successful UD send").
		w.firstPSN, w.npkts = qp.req.psn, 1
		qp.req.psn = PSNAdd(qp.req.psn, 1)
		if PSNLess(qp.req.sentHigh, qp.req.psn) {
			qp.req.sentHigh = qp.req.psn
		}
		qp.req.unacked = qp.req.psn
		w.state, w.status = wqeDone, WCSuccess
		qp.sq.next++
		qp.retire()
		return true
	}
	if f := qp.checkLocalSGL(w); f != faultNone {
		qp.fail(w, WCLocProtErr)
		return false
	}
	w.firstPSN = qp.req.psn
	w.npkts = packetsFor(op, w.length, qp.mtu)
	w.resp = 0
	w.state = wqeStarted
	if op.readLike() {
		qp.sq.rdAtomic++
		w.counted = true
	}
	return true
}

// checkLocalSGL validates the WQE's L_Keys for the access the operation needs:
// read for data sent, local write for READ and atomic results (IBTA 10.6.3.2).
// A zero-length SGE names no memory and its L_Key is not checked, as rxe's
// copy_data and siw's siw_check_sgl_tx do not.
func (qp *QP) checkLocalSGL(w *sendWQE) accessFault {
	if w.wr.Inline {
		return faultNone
	}
	write := false
	switch w.wr.Opcode {
	case WRRDMARead, WRAtomicCmpAndSwp, WRAtomicFetchAdd:
		write = true
	case WRFlush:
		return faultNone // FLUSH has no local data
	}
	for _, s := range w.wr.SGL {
		if s.Length == 0 {
			continue
		}
		if _, f := qp.ctx.lookupLocal(qp.pd, s.LKey, s.Addr, uint64(s.Length), write); f != faultNone {
			return f
		}
	}
	return faultNone
}

// sendPacket builds and appends the WQE's packet at the send cursor.
func (qp *QP) sendPacket(now time.Time, w *sendWQE, out *OutputBatch) bool {
	psn := qp.req.psn
	var n, pad int
	var payload [][]byte
	var ok bool
	if w.wr.Opcode.readLike() {
		n, ok = qp.buildReadLike(w, psn, out.space())
	} else {
		n, payload, pad, ok = qp.buildSendWrite(w, psn, out)
	}
	if !ok {
		return false // the WQE failed (bad local memory); the QP changed state
	}
	ah, dst := qp.ah, qp.attr.DestQPN
	if qp.typ.datagram() {
		ah, dst = w.wr.AH, w.wr.RemoteQPN
	}
	qp.emitPayload(out, n, payload, pad, ah, dst)
	switch {
	case qp.isProbe(psn):
		qp.req.probing = false // counted in Probes
	case PSNLess(psn, qp.req.sentHigh):
		qp.counters.Retransmissions++
	case qp.typ == QPTypeRC:
		qp.rttSample(now, psn)
	}
	// Advance the cursor past this packet (a READ request past all its PSNs).
	next := PSNAdd(psn, 1)
	if w.wr.Opcode.readLike() {
		next = PSNAdd(w.lastPSN(), 1)
	}
	qp.req.psn = next
	if PSNLess(qp.req.sentHigh, next) {
		qp.req.sentHigh = next
	}
	if !PSNInWindow(next, w.firstPSN, int(w.npkts)) {
		qp.sq.next++ // the WQE is fully sent
		if qp.typ != QPTypeRC {
			w.state, w.status = wqeDone, WCSuccess // UC and UD complete when sent
			qp.req.unacked = next
			qp.retire()
		}
	}
	if qp.typ == QPTypeRC {
		if qp.req.timer.IsZero() {
			qp.armTimer(now)
		}
		qp.req.lastActive = now
		qp.addTimered() // the probe's deadline, even with an infinite timeout
	}
	return true
}

// ackReq decides the AckReq bit (IBTA 9.2.6 / 9.7.5.1): on the last packet of every
// message, on READ and atomic requests, every AckReqInterval packets of a long
// message, and on the packet that fills the window. rxe's captures show AckReq on
// last packets only (4-packet messages), which this matches.
func (qp *QP) ackReq(psn uint32, last bool) bool {
	if qp.typ != QPTypeRC {
		return false
	}
	qp.req.noAckPkts++
	if qp.isProbe(psn) {
		qp.req.noAckPkts = 0
		return true // the probe asks for an ACK (probe.go)
	}
	if last || qp.req.noAckPkts >= qp.ctx.cfg.AckReqInterval ||
		PSNDiff(PSNAdd(psn, 1), qp.req.unacked) >= qp.sendWindow() {
		qp.req.noAckPkts = 0
		return true
	}
	return false
}

// sendWriteOpcode returns the opcode of a SEND or WRITE packet at its position in
// the message; UC's opcodes are RC's plus 0x20 (IBTA Table 35).
func sendWriteOpcode(t QPType, op WROpcode, first, last bool) Opcode {
	var o Opcode
	switch op {
	case WRSend, WRSendWithImm, WRSendWithInv:
		switch {
		case first && last:
			o = OpcodeRCSendOnly
			if op == WRSendWithImm {
				o = OpcodeRCSendOnlyWithImm
			} else if op == WRSendWithInv {
				o = OpcodeRCSendOnlyWithInvalidate
			}
		case first:
			o = OpcodeRCSendFirst
		case last:
			o = OpcodeRCSendLast
			if op == WRSendWithImm {
				o = OpcodeRCSendLastWithImm
			} else if op == WRSendWithInv {
				o = OpcodeRCSendLastWithInvalidate
			}
		default:
			o = OpcodeRCSendMiddle
		}
	default: // RDMA WRITE
		switch {
		case first && last:
			o = OpcodeRCRDMAWriteOnly
			if op == WRRDMAWriteWithImm {
				o = OpcodeRCRDMAWriteOnlyWithImm
			}
		case first:
			o = OpcodeRCRDMAWriteFirst
		case last:
			o = OpcodeRCRDMAWriteLast
			if op == WRRDMAWriteWithImm {
				o = OpcodeRCRDMAWriteLastWithImm
			}
		default:
			o = OpcodeRCRDMAWriteMiddle
		}
	}
	switch t {
	case QPTypeUC:
		o |= 0x20
	case QPTypeUD, QPTypeGSI:
		o = OpcodeUDSendOnly
		if op == WRSendWithImm {
			o = OpcodeUDSendOnlyWithImm
		}
	}
	return o
}

// buildSendWrite writes the SEND or RDMA WRITE packet with PSN psn into the
// batch's next buffer: its headers, and its payload and pad too unless the batch
// gathers, when the payload is returned in place (nil: it is in the buffer after
// all) with the pad's length.
func (qp *QP) buildSendWrite(w *sendWQE, psn uint32, out *OutputBatch) (int, [][]byte, int, bool) {
	b := out.space()
	idx := uint32(PSNDiff(psn, w.firstPSN))
	first, last := idx == 0, idx == w.npkts-1
	off := uint64(idx) * uint64(qp.mtu)
	plen := int(min(uint64(qp.mtu), w.length-off))
	op := sendWriteOpcode(qp.typ, w.wr.Opcode, first, last)
	var f PacketFields
	f.BTH = BTHFields{
		Opcode:   op,
		SE:       last && w.wr.Solicited && (w.wr.Opcode != WRRDMAWrite),
		PadCount: PadCountFor(plen),
		PKey:     qp.pkey,
		DestQP:   qp.attr.DestQPN,
		AckReq:   qp.ackReq(psn, last),
		PSN:      psn,
	}
	f.RETH = RETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, DMALen: uint32(w.length)}
	f.Immediate = w.wr.Imm
	f.InvalidateRKey = w.wr.InvalidateRKey
	if qp.typ.datagram() {
		f.BTH.DestQP = w.wr.RemoteQPN
		qkey := w.wr.RemoteQKey
		if qkey&0x80000000 != 0 {
			qkey = qp.attr.QKey // IBTA 10.2.5: a controlled Q_Key means the QP's own
		}
		f.DETH = DETHFields{QKey: qkey, SrcQP: qp.qpn}
	}
	n := f.EncodeHeaders(b)
	pad := int(f.BTH.PadCount)
	// Only RC payloads are handed out in place. A UC or UD WQE completes as its
	// last packet is built, before the device has sent it; once the completion
	// can be polled the buffer is the application's again (rxe has copied it
	// into the skb by then), so the bytes go into the packet buffer now.
	if ps := out.pieceSpace(); ps != nil && plen > 0 && qp.typ == QPTypeRC {
		pieces, fault := qp.gatherInPlace(w, off, plen, ps)
		if fault != faultNone {
			qp.fail(w, WCLocProtErr)
			return 0, nil, 0, false
		}
		if pieces != nil {
			return n, pieces, pad, true
		}
	}
	if fault := qp.gather(w, off, b[n:n+plen]); fault != faultNone {
		qp.fail(w, WCLocProtErr)
		return 0, nil, 0, false
	}
	n += plen
	clear(b[n : n+pad])
	return n + pad, nil, 0, true
}

// buildReadLike writes the READ, atomic, ATOMIC WRITE or FLUSH request with PSN
// psn. A READ retried after k responses arrived asks only for the rest: its RETH
// starts k MTUs further (IBTA 9.7.5.2: a retried READ may resume).
func (qp *QP) buildReadLike(w *sendWQE, psn uint32, b []byte) (int, bool) {
	var f PacketFields
	f.BTH = BTHFields{PKey: qp.pkey, DestQP: qp.attr.DestQPN, AckReq: qp.ackReq(psn, true), PSN: psn}
	plen := 0
	switch w.wr.Opcode {
	case WRRDMARead:
		f.BTH.Opcode = OpcodeRCRDMAReadRequest
		off := uint64(PSNDiff(psn, w.firstPSN)) * uint64(qp.mtu)
		f.RETH = RETHFields{VA: w.wr.RemoteAddr + off, RKey: w.wr.RKey, DMALen: uint32(w.length - off)}
	case WRAtomicCmpAndSwp:
		f.BTH.Opcode = OpcodeRCCompareSwap
		f.AtomicETH = AtomicETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, SwapAdd: w.wr.Swap, Compare: w.wr.CompareAdd}
	case WRAtomicFetchAdd:
		f.BTH.Opcode = OpcodeRCFetchAdd
		f.AtomicETH = AtomicETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, SwapAdd: w.wr.CompareAdd}
	case WRAtomicWrite:
		f.BTH.Opcode = OpcodeRCAtomicWrite
		f.RETH = RETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, DMALen: AtomicWriteDataLen}
		plen = AtomicWriteDataLen
	case WRFlush:
		f.BTH.Opcode = OpcodeRCFlush
		f.FETH = FETHFields{PlacementType: w.wr.Flush.Type, SelectivityLevel: w.wr.Flush.Level}
		f.RETH = RETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, DMALen: w.wr.Flush.Len}
	}
	n := f.EncodeHeaders(b)
	if plen > 0 {
		if fault := qp.gather(w, 0, b[n:n+plen]); fault != faultNone {
			qp.fail(w, WCLocProtErr)
			return 0, false
		}
	}
	return n + plen, true
}

// gather copies the WQE's message bytes [off, off+len(dst)) into dst, checking
// every L_Key again: the region may have been deregistered since the post. This
// is the send path's one copy (region → packet buffer) for devices that cannot
// send from several buffers (gatherInPlace is the others'); rebuilding packets
// from the WQE and the region is also what lets a retransmission do without a
// send buffer.
func (qp *QP) gather(w *sendWQE, off uint64, dst []byte) accessFault {
	if w.wr.Inline {
		copy(dst, w.inline[off:])
		return faultNone
	}
	for _, s := range w.wr.SGL {
		if len(dst) == 0 {
			break
		}
		if off >= uint64(s.Length) {
			off -= uint64(s.Length)
			continue
		}
		n := min(uint64(len(dst)), uint64(s.Length)-off)
		mem, f := qp.ctx.lookupLocal(qp.pd, s.LKey, s.Addr+off, n, false)
		if f != faultNone {
			return f
		}
		copy(dst, mem)
		dst = dst[n:]
		off = 0
	}
	return faultNone
}

// gatherInPlace is gather without the copy, for a batch that gathers: it
// appends to pieces the slices of the WQE's message bytes [off, off+n) where
// they lie — registered memory (its L_Keys checked again, as gather does) or the
// inline copy — and returns them; nil (and no fault) if they take more slices
// than pieces has room for, so that the caller copies them instead.
func (qp *QP) gatherInPlace(w *sendWQE, off uint64, n int, pieces [][]byte) ([][]byte, accessFault) {
	if w.wr.Inline {
		return append(pieces, w.inline[off:off+uint64(n)]), faultNone
	}
	left := uint64(n)
	for _, s := range w.wr.SGL {
		if left == 0 {
			break
		}
		if off >= uint64(s.Length) {
			off -= uint64(s.Length)
			continue
		}
		k := min(left, uint64(s.Length)-off)
		mem, f := qp.ctx.lookupLocal(qp.pd, s.LKey, s.Addr+off, k, false)
		if f != faultNone {
			return nil, f
		}
		if len(pieces) == cap(pieces) {
			return nil, faultNone
		}
		pieces = append(pieces, mem)
		left -= k
		off = 0
	}
	return pieces, faultNone
}

// scatter copies src into the SGL sgl at byte offset off, checking every L_Key for
// local write access: the receive path's one copy (packet → region). It returns
// faultBounds if src does not fit.
func (qp *QP) scatter(sgl []SGE, off uint64, src []byte) accessFault {
	for _, s := range sgl {
		if len(src) == 0 {
			return faultNone
		}
		if off >= uint64(s.Length) {
			off -= uint64(s.Length)
			continue
		}
		n := min(uint64(len(src)), uint64(s.Length)-off)
		mem, f := qp.ctx.lookupLocal(qp.pd, s.LKey, s.Addr+off, n, true)
		if f != faultNone {
			return f
		}
		copy(mem, src[:n])
		src = src[n:]
		off = 0
	}
	if len(src) > 0 {
		return faultBounds
	}
	return faultNone
}

// seek moves the send cursor to psn: onto the started WQE that holds it, or onto
// the first WQE not yet started.
func (qp *QP) seek(psn uint32) {
	qp.req.psn = psn
	for i := qp.sq.head; i != qp.sq.tail; i++ {
		w := qp.sq.at(i)
		if w.state == wqePosted || (w.state == wqeStarted && w.holds(psn)) {
			qp.sq.next = i
			return
		}
	}
	qp.sq.next = qp.sq.tail
}

// rewind restarts transmission go-back-N from psn (IBTA 9.7.5.2: after a NAK
// sequence error from the NAK's PSN, after a timeout from the oldest unacknowledged
// PSN).
func (qp *QP) rewind(psn uint32) {
	qp.shrinkWindow()
	qp.req.rttSent = time.Time{} // an ACK may now answer either copy
	qp.req.probing = false
	qp.seek(psn)
	qp.req.rewound = true
	qp.req.rewindPSN = psn
	qp.req.noAckPkts = 0
	qp.schedule()
}
