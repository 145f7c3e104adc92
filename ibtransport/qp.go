package ibtransport

import (
	"fmt"
)

// QPCap sizes a QP's queues (struct ibv_qp_cap).
type QPCap struct {
	MaxSendWR     int
	MaxRecvWR     int
	MaxSendSGE    int
	MaxRecvSGE    int
	MaxInlineData int
}

// QPInitAttr describes a QP to create (struct ibv_qp_init_attr).
type QPInitAttr struct {
	// Type is the transport service.
	Type QPType
	// SendCQ and RecvCQ receive the send and receive completions; they may be the
	// same CQ.
	SendCQ *CQ
	RecvCQ *CQ
	// SRQ, if set, supplies the receive WRs; the QP then has no receive queue.
	SRQ *SRQ
	// Cap sizes the queues.
	Cap QPCap
	// SignalAll makes every send WR signaled (sq_sig_all).
	SignalAll bool
	// External gives the QP's wire protocol to an external transport (package
	// iwarp) through QP.Wire: the engine keeps the verbs semantics but sends and
	// receives no IB packets for it. Only RC QPs can be external. See external.go.
	External bool
}

// QP is a queue pair (ibv_qp) together with its transport state: the requester
// that turns send WRs into packets, the responder that executes incoming requests,
// and the completer that matches responses to WRs.
type QP struct {
	ctx    *Context
	pd     *PD
	qpn    uint32
	typ    QPType
	sendCQ *CQ
	recvCQ *CQ
	srq    *SRQ
	cap    QPCap
	sigAll bool
	state  QPState
	attr   QPAttr         // current attributes (AH is held in ah)
	ah     *AddressHandle // immutable copy of the primary path's address
	mtu    uint32         // path MTU in bytes
	pkey   uint16
	dead   bool

	sq   sendQueue
	rq   recvQueue
	rcur curRecv // the receive WQE a message is being placed into

	req  requester
	resp responder

	counters QPCounters

	wire    *Wire  // set for an external QP (external.go)
	checkWR SendWR // the copy of a WR that wire.check sees (postSendOne)

	inActive  bool // in Context.active
	inTimered bool // in Context.timered
	commEst   bool // EventCommEst posted
	preferReq bool // Output alternates between responder and requester packets

	posterFlushes bool // SetPosterFlushes: PostSend does not signal Wake
}

// SetPosterFlushes says whether whoever posts on the QP has its device
// flush right after PostSend returns, from the posting thread (the C
// library's ibv_post_send does, as the kernel's rxe sends from the post's
// system call): PostSend then queues the work for Output without signalling
// Context.Wake. The signal would only wake the device loop, a goroutine on
// another thread, to find nothing left to send: two context switches per
// post. Other output (answers to received packets, timers, state changes)
// still signals.
//
// The QP then stays on the Context's timer list (NextDeadline), with a
// deadline a timeout after the last Output while it has no timer running
// (see deadline).
func (qp *QP) SetPosterFlushes(v bool) {
	qp.ctx.mu.Lock()
	defer qp.ctx.mu.Unlock()
	qp.posterFlushes = v
	if v {
		qp.addTimered()
	}
}

// CreateQP creates a queue pair in pd (ibv_create_qp). It starts in RESET.
func (c *Context) CreateQP(pd *PD, attr QPInitAttr) (*QP, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.checkQPInit(pd, &attr); err != nil {
		return nil, fmt.Errorf("create qp: %w", err)
	}
	var qpn uint32
	if attr.Type == QPTypeGSI {
		if c.gsi != nil {
			return nil, fmt.Errorf("create qp: the GSI QP exists: %w", ErrBusy)
		}
		qpn = 1
	} else {
		n, err := c.allocQPN()
		if err != nil {
			return nil, err
		}
		qpn = n
	}
	qp := &QP{
		ctx:    c,
		pd:     pd,
		qpn:    qpn,
		typ:    attr.Type,
		sendCQ: attr.SendCQ,
		recvCQ: attr.RecvCQ,
		srq:    attr.SRQ,
		cap:    attr.Cap,
		sigAll: attr.SignalAll,
		state:  QPStateReset,
		mtu:    uint32(c.cfg.PortMTU),
	}
	if qp.cap.MaxSendSGE == 0 {
		qp.cap.MaxSendSGE = 1
	}
	qp.sq = newSendQueue(qp.cap.MaxSendWR, qp.cap.MaxSendSGE)
	if qp.srq == nil {
		if qp.cap.MaxRecvSGE == 0 {
			qp.cap.MaxRecvSGE = 1
		}
		qp.rq = newRecvQueue(qp.cap.MaxRecvWR, qp.cap.MaxRecvSGE)
		qp.rcur.wqe.sgeBuf = make([]SGE, qp.cap.MaxRecvSGE)
	} else {
		qp.srq.refs++
		qp.rcur.wqe.sgeBuf = make([]SGE, qp.srq.maxSGE)
	}
	qp.attr.Port = 1
	if qp.typ == QPTypeGSI {
		qp.attr.QKey = GSIQKey
		c.gsi = qp
	}
	if attr.External || c.cfg.ExternalQPs {
		qp.wire = &Wire{qp: qp, wake: make(chan struct{}, 1)}
	}
	qp.resetTransport()
	attr.SendCQ.attach(qp)
	attr.RecvCQ.attach(qp)
	pd.refs++
	c.qps[qpn] = qp
	return qp, nil
}

// GSIQKey is the well-known Q_Key of QP1 (IBTA 13.5.3.1).
const GSIQKey = 0x80010000

func (c *Context) checkQPInit(pd *PD, a *QPInitAttr) error {
	switch a.Type {
	case QPTypeRC, QPTypeUC, QPTypeUD, QPTypeGSI:
	default:
		return fmt.Errorf("type %s: %w", a.Type, ErrInvalidArgument)
	}
	if pd == nil || pd.ctx != c || pd.dead {
		return fmt.Errorf("bad pd: %w", ErrInvalidArgument)
	}
	if (a.External || c.cfg.ExternalQPs) && a.Type != QPTypeRC {
		return fmt.Errorf("type %s: an external transport runs RC QPs only: %w", a.Type, ErrInvalidArgument)
	}
	if a.SendCQ == nil || a.RecvCQ == nil || a.SendCQ.ctx != c || a.RecvCQ.ctx != c || a.SendCQ.dead || a.RecvCQ.dead {
		return fmt.Errorf("SendCQ and RecvCQ are required: %w", ErrInvalidArgument)
	}
	cp := &a.Cap
	// rxe accepts max_send_wr 0 (rxe_qp_chk_cap checks only the maximum; qperf's
	// servers ask for it); siw refuses it (siw_create_qp: "QP must have send
	// queue"), and so does a QP of an external (iWARP) transport.
	minSend := 0
	if a.External || c.cfg.ExternalQPs {
		minSend = 1
	}
	if err := capInRange("MaxSendWR", cp.MaxSendWR, minSend, c.cfg.MaxQPWR, "MaxQPWR"); err != nil {
		return err
	}
	if err := capInRange("MaxSendSGE", cp.MaxSendSGE, 0, c.cfg.MaxSGE, "MaxSGE"); err != nil {
		return err
	}
	if err := capInRange("MaxInlineData", cp.MaxInlineData, 0, c.cfg.MaxInlineData, "MaxInlineData"); err != nil {
		return err
	}
	if a.SRQ != nil {
		if a.SRQ.ctx != c || a.SRQ.dead || a.SRQ.pd != pd {
			return fmt.Errorf("SRQ of another PD or context: %w", ErrInvalidArgument)
		}
		return nil
	}
	// A QP without an SRQ may have no receive queue at all: rxe (rxe_qp_chk_cap)
	// and siw (siw_create_qp) accept max_recv_wr 0, and programs that only send
	// ask for it (qperf's rc_bw client). A SEND to it is RNR NAKed.
	if err := capInRange("MaxRecvWR", cp.MaxRecvWR, 0, c.cfg.MaxQPWR, "MaxQPWR"); err != nil {
		return err
	}
	if err := capInRange("MaxRecvSGE", cp.MaxRecvSGE, 0, c.cfg.MaxSGE, "MaxSGE"); err != nil {
		return err
	}
	return nil
}

// capInRange returns an error naming the capacity field unless lo <= v <= max,
// where max is the ContextConfig limit named limit: ErrInvalidArgument below lo,
// a *LimitError above max.
func capInRange(field string, v, lo, max int, limit string) error {
	if v < lo {
		return fmt.Errorf("%s %d not in %d..%d: %w", field, v, lo, max, ErrInvalidArgument)
	}
	if v > max {
		return tooLargeError(field, limit, uint64(v), uint64(max))
	}
	return nil
}

// Destroy destroys the QP (ibv_destroy_qp) without generating completions.
func (qp *QP) Destroy() error {
	c := qp.ctx
	c.mu.Lock()
	defer c.mu.Unlock()
	if qp.dead {
		return fmt.Errorf("destroy qp 0x%x: %w", qp.qpn, ErrDestroyed)
	}
	qp.dead = true
	c.retired.Add(qp.countersLocked())
	qp.state = QPStateReset
	qp.notifyWire()
	delete(c.qps, qp.qpn)
	c.detachAllMulticastLocked(qp)
	if c.gsi == qp {
		c.gsi = nil
	}
	qp.sendCQ.detach(qp)
	qp.recvCQ.detach(qp)
	if qp.srq != nil {
		qp.srq.refs--
	}
	for _, mw := range qp.boundMWs() {
		mw.unbind()
	}
	qp.pd.refs--
	c.settlePlacements()
	return nil
}

// boundMWs lists the type 2 windows bound through the QP.
func (qp *QP) boundMWs() []*MW {
	var mws []*MW
	for _, e := range qp.ctx.keys {
		if e.mw != nil && e.mw.qp == qp {
			mws = append(mws, e.mw)
		}
	}
	return mws
}

// QPN returns the QP number.
func (qp *QP) QPN() uint32 { return qp.qpn }

// Type returns the QP's transport service.
func (qp *QP) Type() QPType { return qp.typ }

// Context returns the Context the QP was created on.
func (qp *QP) Context() *Context { return qp.ctx }

// State returns the current state.
func (qp *QP) State() QPState {
	qp.ctx.mu.Lock()
	defer qp.ctx.mu.Unlock()
	return qp.state
}

// Query returns the current attributes (ibv_query_qp).
func (qp *QP) Query() QPAttr {
	qp.ctx.mu.Lock()
	defer qp.ctx.mu.Unlock()
	a := qp.attr
	a.QPState = qp.state
	a.CurQPState = qp.state
	if qp.ah != nil {
		a.AH = *qp.ah
	}
	return a
}

// Cap returns the QP's queue sizes.
func (qp *QP) Cap() QPCap { return qp.cap }

// PostSend posts send WRs (ibv_post_send). It refuses a WR — and the ones after
// it — with a *PostError if the QP's state does not allow posting (RESET, INIT,
// RTR), the send queue is full, or the WR is malformed (opcode not supported by the
// QP type, too many SGEs, too much inline data). In the error state (and SQE) WRs
// are accepted and completed at once with IBV_WC_WR_FLUSH_ERR, as rxe does.
func (qp *QP) PostSend(wrs ...SendWR) error {
	c := qp.ctx
	c.mu.Lock()
	hook := qp.postHook()
	posted := false
	var err error
	for i := range wrs {
		wr := &wrs[i]
		if e := qp.postSendOne(wr); e != nil {
			err = &PostError{Index: i, WRID: wr.WRID, Err: fmt.Errorf("post send qp 0x%x: %w", qp.qpn, e)}
			break
		}
		posted = true
	}
	switch {
	case posted && hook != nil:
		qp.scheduleQuiet()
	case posted:
		qp.schedulePosted()
	}
	c.mu.Unlock()
	if posted && hook != nil {
		hook()
	}
	return err
}

// schedulePosted is schedule after a post: without the wake-up if the
// poster flushes (SetPosterFlushes). mu is held.
func (qp *QP) schedulePosted() {
	if !qp.posterFlushes || qp.wire != nil {
		qp.schedule()
		return
	}
	qp.scheduleQuiet()
}

// scheduleQuiet is schedule without the wake-up. mu is held.
func (qp *QP) scheduleQuiet() {
	if qp.dead || qp.inActive {
		return
	}
	qp.inActive = true
	qp.ctx.active = append(qp.ctx.active, qp)
}

func (qp *QP) postSendOne(wr *SendWR) error {
	if qp.dead {
		return ErrDestroyed
	}
	switch qp.state {
	case QPStateRTS, QPStateSQD, QPStateErr, QPStateSQE:
	default:
		return fmt.Errorf("state %s: %w", qp.state, ErrBadState)
	}
	if err := qp.checkSendWR(wr); err != nil {
		return err
	}
	if qp.wire != nil && qp.wire.check != nil {
		// The check is a function value, so whatever it is given escapes: a
		// copy in the QP keeps the caller's WRs (PostSend's variadic slice)
		// off the heap. mu is held, so the QP's copy is not shared.
		qp.checkWR = *wr
		err := qp.wire.check(&qp.checkWR)
		qp.checkWR = SendWR{}
		if err != nil {
			return err
		}
	}
	if qp.sq.full() {
		return fullError("send queue", "MaxSendWR", len(qp.sq.slots), ErrQueueFull)
	}
	w := qp.sq.post(wr, qp)
	if qp.state == QPStateErr || qp.state == QPStateSQE {
		w.state = wqeDone
		w.status = WCWRFlushErr
		qp.retire()
	}
	return nil
}

// PostRecv posts receive WRs (ibv_post_recv). Posting is allowed in every state but
// RESET; in the error state the WRs complete at once with IBV_WC_WR_FLUSH_ERR.
func (qp *QP) PostRecv(wrs ...RecvWR) error {
	c := qp.ctx
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range wrs {
		wr := &wrs[i]
		if err := qp.postRecvOne(wr); err != nil {
			return &PostError{Index: i, WRID: wr.WRID, Err: fmt.Errorf("post recv qp 0x%x: %w", qp.qpn, err)}
		}
	}
	return nil
}

func (qp *QP) postRecvOne(wr *RecvWR) error {
	if qp.dead {
		return ErrDestroyed
	}
	if qp.srq != nil {
		return fmt.Errorf("the QP uses an SRQ: %w", ErrInvalidArgument)
	}
	if qp.state == QPStateReset {
		return fmt.Errorf("state %s: %w", qp.state, ErrBadState)
	}
	if err := checkRecvWR(wr, "MaxRecvSGE", qp.cap.MaxRecvSGE); err != nil {
		return err
	}
	if qp.rq.full() {
		return fullError("receive queue", "MaxRecvWR", len(qp.rq.slots), ErrQueueFull)
	}
	qp.rq.post(wr)
	if qp.state == QPStateErr {
		qp.flushRecv()
	}
	return nil
}

// BindMW binds a type 1 memory window through the QP's send queue (ibv_bind_mw):
// it posts a WRBindMW WR with a fresh key byte and returns the window's new R_Key,
// valid once the WR completes successfully.
func (qp *QP) BindMW(mw *MW, wrid uint64, signaled bool, b MWBindInfo) (uint32, error) {
	c := qp.ctx
	c.mu.Lock()
	if mw == nil || mw.typ != MWType1 {
		c.mu.Unlock()
		return 0, fmt.Errorf("bind mw: not a type 1 window: %w", ErrInvalidArgument)
	}
	b.MW = mw
	b.RKey = mw.rkey&^0xff | (mw.rkey+1)&0xff
	c.mu.Unlock()
	err := qp.PostSend(SendWR{WRID: wrid, Opcode: WRBindMW, Signaled: signaled, Bind: b})
	if err != nil {
		return 0, err
	}
	return b.RKey, nil
}

// schedule puts the QP on the Context's output list and wakes the device loop.
// mu is held.
func (qp *QP) schedule() {
	if qp.wire != nil {
		qp.wire.signal() // an external transport sends for it
		return
	}
	if qp.dead || qp.inActive {
		return
	}
	qp.inActive = true
	qp.ctx.active = append(qp.ctx.active, qp)
	qp.ctx.signalWake()
}

// signaledWQE reports whether a successful WQE generates a completion.
func (qp *QP) signaledWQE(w *sendWQE) bool { return qp.sigAll || w.wr.Signaled }

// retire completes the WQEs at the head of the send queue that are done, in
// posting order (IBTA 10.8.5: completions are returned in the order the WRs were
// posted). Unsignaled successful WQEs retire silently. mu is held.
func (qp *QP) retire() {
	retired := false
	for qp.sq.head != qp.sq.tail {
		w := qp.sq.at(qp.sq.head)
		if w.state != wqeDone {
			break
		}
		if w.status != WCSuccess || qp.signaledWQE(w) {
			head := qp.sq.head
			qp.sendCQ.push(qp.sendWC(w), false)
			if qp.sq.head != head {
				// The push overran the CQ: the QP went to the error
				// state and its flush retired the queue, this WQE too.
				return
			}
		}
		w.release()
		qp.sq.head++
		if qp.sq.next < qp.sq.head {
			qp.sq.next = qp.sq.head
		}
		retired = true
	}
	if retired && qp.sq.next != qp.sq.tail {
		qp.schedule() // a fenced or local WQE may start now
	}
	qp.checkDrained()
}

// sendWC builds the completion of a send WQE.
func (qp *QP) sendWC(w *sendWQE) WC {
	wc := WC{WRID: w.wr.WRID, Status: w.status, Opcode: wcOpcodeFor(w.wr.Opcode), QPNum: qp.qpn}
	if w.status == WCSuccess {
		switch w.wr.Opcode {
		case WRRDMARead, WRRDMAReadWithInv, WRSend, WRSendWithImm, WRSendWithInv, WRRDMAWrite, WRRDMAWriteWithImm:
			wc.ByteLen = uint32(w.length)
		case WRAtomicCmpAndSwp, WRAtomicFetchAdd, WRAtomicWrite:
			wc.ByteLen = 8
		}
	}
	return wc
}

// checkDrained posts EventSQDrained once an SQD QP has nothing outstanding.
func (qp *QP) checkDrained() {
	if qp.state != QPStateSQD || qp.sq.drainNotified {
		return
	}
	if qp.sq.head == qp.sq.next && (qp.sq.next == qp.sq.tail || qp.sq.at(qp.sq.next).state != wqeStarted) {
		qp.sq.drainNotified = true
		if qp.attr.EnSQDAsyncNotify {
			qp.ctx.postEvent(AsyncEvent{Type: EventSQDrained, QP: qp})
		}
	}
}

// fail completes the send WQE w with status and moves the QP to the error state
// (RC) or the send queue error state (UC, UD), flushing the rest (IBTA 10.3.1,
// 11.6.2). WQEs posted before w that are still outstanding are flushed first, so
// that completions stay in posting order. mu is held.
func (qp *QP) fail(w *sendWQE, status WCStatus) {
	w.state = wqeDone
	w.status = status
	if qp.typ == QPTypeRC {
		qp.enterError()
		return
	}
	qp.state = QPStateSQE
	qp.flushSend()
}

// fatal moves the QP to the error state because of a failure outside the QP (a
// CQ overrun) and posts ev. mu is held.
func (qp *QP) fatal(ev AsyncEventType) {
	if qp.state == QPStateErr || qp.state == QPStateReset {
		return
	}
	qp.ctx.postEvent(AsyncEvent{Type: ev, QP: qp})
	qp.enterError()
}

// enterError moves the QP to the error state: every outstanding send and receive
// WR completes with IBV_WC_WR_FLUSH_ERR (IBTA 10.3.1, 11.4.2). mu is held.
func (qp *QP) enterError() {
	if qp.state == QPStateErr {
		return
	}
	qp.state = QPStateErr
	qp.notifyWire()
	qp.req.stopTimers()
	qp.flushSend()
	qp.flushRecv()
	if qp.srq != nil {
		qp.ctx.postEvent(AsyncEvent{Type: EventQPLastWQEReached, QP: qp})
	}
}

// flushSend completes every unretired send WQE with IBV_WC_WR_FLUSH_ERR, except
// those already completed with a status of their own.
func (qp *QP) flushSend() {
	for i := qp.sq.head; i != qp.sq.tail; i++ {
		w := qp.sq.at(i)
		if w.state != wqeDone {
			w.state = wqeDone
			w.status = WCWRFlushErr
		}
	}
	qp.sq.next = qp.sq.tail
	qp.sq.rdAtomic = 0
	qp.retire()
}

// flushRecv completes every posted receive WQE (and one in use by the responder)
// with IBV_WC_WR_FLUSH_ERR. SRQ WQEs stay in the SRQ for the other QPs.
func (qp *QP) flushRecv() {
	if qp.rcur.have {
		qp.rcur.have = false
		qp.recvCQ.push(WC{WRID: qp.rcur.wqe.wrid, Status: WCWRFlushErr, Opcode: WCRecv, QPNum: qp.qpn}, false)
	}
	if qp.srq != nil {
		return
	}
	for qp.rq.head != qp.rq.tail {
		wrid := qp.rq.slots[qp.rq.head%uint64(len(qp.rq.slots))].wrid
		qp.rq.head++
		qp.recvCQ.push(WC{WRID: wrid, Status: WCWRFlushErr, Opcode: WCRecv, QPNum: qp.qpn}, false)
	}
}

// resetTransport clears all transport state (modify to RESET).
func (qp *QP) resetTransport() {
	qp.sq.clear()
	qp.rq.clear()
	qp.req.reset()
	qp.resp.reset()
	qp.rcur.have, qp.rcur.off = false, 0 // the WQE's SGE buffer is kept
	qp.commEst = false
}
