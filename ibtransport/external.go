package ibtransport

import (
	"encoding/binary"
	"fmt"
)

// This file is the external-transport SPI: what a package that runs a QP's wire
// protocol outside the engine (package iwarp: RDMAP/DDP/MPA over TCP) calls, while
// the engine keeps the verbs semantics.
//
// An external QP (QPInitAttr.External, or every QP of a Context with
// ContextConfig.ExternalQPs) is an ordinary QP to the application: the same PD, MR,
// MW, CQ, SRQ, Modify state machine, PostSend/PostRecv checks and completions in
// posting order. The engine never turns its WRs into IB packets (Output skips it,
// Input drops IB packets addressed to it); instead the transport takes the WRs from
// the QP's Wire:
//
//   - Send queue. Wire.NextSend hands out the next send WQE once it may start
//     (QP in RTS, fence satisfied, MaxRdAtomic not exhausted), with its SGL already
//     checked and resolved to byte slices of the registered memory (no copy). Local
//     operations (LOCAL_INV, REG_MR, BIND_MW) never reach the transport: NextSend
//     executes them when they reach the head, in order. The transport completes
//     each handed-out WQE with CompleteSend (SEND, WRITE: once its bytes are on the
//     wire; READ: when its last response byte is placed, through ReadSink), or
//     CompleteAtomic; completions are still returned in posting order.
//   - Receive queue. BeginRecv takes the next receive WQE (from the QP's RQ or its
//     SRQ), RecvBuffers resolves a range of it to byte slices to place a message
//     into, EndRecv completes it (doing a remote invalidation if asked);
//     DeliverRecv does the three, and the copy, for a message the transport
//     holds whole, as PlaceReadResponse does for a READ's response segment.
//   - Remote memory. RemoteBuffer checks an R_Key (an iWARP STag), a virtual
//     address (a tagged offset), a length and the right needed against the MR or
//     MW table and the QP's own access flags, byte-exact, and returns the memory;
//     Atomic executes an atomic operation under the Context's lock.
//   - Errors. FailSend, FailOldest and FailRecv complete a WQE with an error
//     status and move the QP to the error state, which flushes every other
//     outstanding WR with IBV_WC_WR_FLUSH_ERR; SetError does the same without a
//     WQE of its own.
//
// Every Wire method takes the Context's mutex for its duration, so the
// transport's goroutines may call them freely; slices returned point into
// registered memory and are read or written by the transport after the call
// returns, without the lock (that is the zero-copy path; verbs forbid the
// application to touch memory of outstanding WRs, and the engine itself never
// does). None blocks, except that a call which invalidates a key (NextSend
// executing LOCAL_INV or BIND_MW, EndRecv's remote invalidation, CompleteSend of
// READ_WITH_INV) waits for the placements into that memory to end (placement.go). The Wake channel tells the transport that something changed: WRs were
// posted, a WQE may start, or the QP's state changed (check State).

// KeyFault says why a memory key check failed.
type KeyFault uint8

// Key check results.
const (
	// KeyOK means the access is allowed.
	KeyOK KeyFault = KeyFault(faultNone)
	// KeyUnknown means no memory region or window has the key, or its key byte differs.
	KeyUnknown KeyFault = KeyFault(faultBadKey)
	// KeyInvalid means the key's region or window is invalid (deregistered,
	// invalidated, unbound, or not a kind that can be invalidated).
	KeyInvalid KeyFault = KeyFault(faultInvalid)
	// KeyOtherPD means the region or window belongs to another PD.
	KeyOtherPD KeyFault = KeyFault(faultPD)
	// KeyNoAccess means the region or window does not grant the right.
	KeyNoAccess KeyFault = KeyFault(faultAccess)
	// KeyBounds means the range is not inside the region or window.
	KeyBounds KeyFault = KeyFault(faultBounds)
	// KeyOtherQP means a type 2 window bound through another QP.
	KeyOtherQP KeyFault = KeyFault(faultQP)
	// KeyQPAccess means the QP's own AccessFlags do not enable the operation.
	KeyQPAccess KeyFault = KeyFault(faultQP + 1)
)

// String names the fault, e.g. "out of bounds".
func (f KeyFault) String() string {
	if f == KeyQPAccess {
		return "not enabled on the QP"
	}
	if int(f) < len(faultNames) {
		return faultNames[f]
	}
	return fmt.Sprintf("KeyFault(%d)", uint8(f))
}

// Wire is the engine's side of an external QP: the methods its transport calls.
// See the contract above (external.go). A Wire is created with the QP and lives as
// long as it.
type Wire struct {
	qp    *QP
	wake  chan struct{}
	owner any
	check func(*SendWR) error
	place placement // the transport's open placement (placement.go)

	counters func(*QPCounters) // the transport's counts (SetCounterSource)
}

// SetCounterSource installs fn, which QP.Counters calls (with the Context's lock
// held: it must not call into the engine) to add the transport's counts to the
// QP's; the transport counts without the lock. The source it replaces is called
// once more and its counts are kept in the QP's, so a transport that stops
// calls SetCounterSource(nil) when its counts are final.
func (w *Wire) SetCounterSource(fn func(*QPCounters)) {
	c := w.qp.ctx
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.counters != nil {
		w.counters(&w.qp.counters)
	}
	w.counters = fn
}

// Wire returns the QP's external-transport interface, or nil if the QP is not
// external. It is for transport implementations, not applications.
func (qp *QP) Wire() *Wire { return qp.wire }

// External reports whether the QP's wire protocol is run by an external transport.
func (qp *QP) External() bool { return qp.wire != nil }

// QP returns the queue pair.
func (w *Wire) QP() *QP { return w.qp }

// Context returns the QP's Context.
func (w *Wire) Context() *Context { return w.qp.ctx }

// Wake returns a channel (capacity one) that receives a value when the transport
// should look at the QP again: send WRs were posted or may start now, or the QP's
// state changed.
func (w *Wire) Wake() <-chan struct{} { return w.wake }

// signal wakes the transport; callable with or without the lock.
func (w *Wire) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// notifyWire wakes the QP's transport, if it has one. mu is held.
func (qp *QP) notifyWire() {
	if qp.wire != nil {
		qp.wire.signal()
	}
}

// Attach records owner as the transport running the QP; it fails with ErrBusy if
// another owner is attached, so that one QP is never connected twice.
func (w *Wire) Attach(owner any) error {
	c := w.qp.ctx
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.qp.dead {
		return fmt.Errorf("attach qp 0x%x: %w", w.qp.qpn, ErrDestroyed)
	}
	if w.owner != nil && w.owner != owner {
		return fmt.Errorf("attach qp 0x%x: a transport is attached: %w", w.qp.qpn, ErrBusy)
	}
	w.owner = owner
	return nil
}

// Detach releases the QP if owner is attached, and removes the post check.
func (w *Wire) Detach(owner any) {
	c := w.qp.ctx
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.owner == owner {
		w.owner = nil
		w.check = nil
	}
}

// SetPostCheck installs fn, which PostSend calls (with the Context's lock held:
// it must not call back into the engine) for every WR after the engine's own
// checks; a non-nil error refuses the WR like any other post error. A transport
// uses it to refuse operations its protocol or the connection cannot carry.
func (w *Wire) SetPostCheck(fn func(*SendWR) error) {
	c := w.qp.ctx
	c.mu.Lock()
	defer c.mu.Unlock()
	w.check = fn
}

// State returns the QP's state.
func (w *Wire) State() QPState { return w.qp.State() }

// SendWork is a send WQE handed to the transport by NextSend. Its slices stay
// valid until the WQE is completed (or flushed).
type SendWork struct {
	// ID names the WQE in CompleteSend, CompleteAtomic, ReadSink and FailSend.
	ID uint64
	// WRID is the work request's WRID (for diagnostics; completions carry it).
	WRID uint64
	// Opcode is the operation: never a local one.
	Opcode WROpcode
	// Data is the message of SEND and WRITE operations, the registered memory the
	// SGL names in order (or the WR's inline data). Nil for READ and atomics.
	Data [][]byte
	// Length is the message length: the sum of Data, the READ length, or 8.
	Length uint64
	// Solicited is the WR's Solicited flag.
	Solicited bool
	// Imm is the immediate data of *WithImm opcodes.
	Imm uint32
	// InvalidateRKey is the key of SEND_WITH_INV (invalidated at the peer) or of
	// READ_WITH_INV (invalidated locally when the READ completes).
	InvalidateRKey uint32
	// RemoteAddr and RKey address the remote memory (WRITE, READ, atomics).
	RemoteAddr uint64
	RKey       uint32
	// CompareAdd and Swap are the atomic operands.
	CompareAdd, Swap uint64
	// SinkKey and SinkAddr are the L_Key and address of the first SGE: where a
	// READ's data goes (the iWARP Data Sink STag and TO). Zero with no SGL.
	SinkKey  uint32
	SinkAddr uint64

	inline []byte // storage for the inline data copy
}

// lock locks the context of the wire's QP, which every Wire method runs under,
// and returns the QP and the context; the caller unlocks c.mu.
func (w *Wire) lock() (qp *QP, c *Context) {
	qp = w.qp
	c = qp.ctx
	c.mu.Lock()
	return qp, c
}

// NextSend moves the next send WQE that may start to the transport and fills dst
// with it (reusing dst's slices, so that a transport that keeps one SendWork
// allocates nothing). It reports false if there is none now: the queue is empty,
// the QP is not in RTS, a fence or MaxRdAtomic holds the next WQE back, or the WQE
// failed its local checks (then the QP is in the error state and its completion
// is queued). Local operations at the head are executed on the way.
//
// The memory of a non-inline WR is not copied: Data aliases the registered
// regions. Inline data is copied into dst (at most MaxInlineData bytes), because
// the WQE slot that holds it may be reused as soon as the WQE retires.
func (w *Wire) NextSend(dst *SendWork) bool {
	qp, c := w.lock()
	defer c.mu.Unlock()
	return qp.nextSend(dst)
}

// NextSends is NextSend for up to len(dst) WQEs under one acquisition of the
// Context's lock: it fills dst[0], dst[1], ... in posting order and returns
// how many it filled. A transport that frames a batch of small messages takes
// the lock once for them instead of once per WQE (NextSend was 9% of the
// iWARP 64 B rate rows' CPU time).
func (w *Wire) NextSends(dst []SendWork) int {
	qp, c := w.lock()
	defer c.mu.Unlock()
	n := 0
	for n < len(dst) && qp.nextSend(&dst[n]) {
		n++
	}
	return n
}

// nextSend is NextSend's body. mu is held.
func (qp *QP) nextSend(dst *SendWork) bool {
	for {
		if qp.dead || (qp.state != QPStateRTS && qp.state != QPStateSQD) || qp.sq.next == qp.sq.tail {
			return false
		}
		wq := qp.sq.at(qp.sq.next)
		switch wq.state {
		case wqeDone:
			qp.sq.next++
			continue
		case wqeStarted:
			return false // cannot happen: an external WQE is started and passed on at once
		}
		if qp.state == QPStateSQD {
			return false
		}
		op := wq.wr.Opcode
		// Fence (IBTA 10.8.3); local operations are fenced implicitly, as in the
		// IB requester.
		if (wq.wr.Fence || op.local()) && qp.sq.head != qp.sq.next {
			return false
		}
		if op.local() {
			qp.execLocal(wq)
			if qp.state == QPStateErr {
				return false
			}
			continue
		}
		if op.readLike() && qp.sq.rdAtomic >= max(1, qp.attr.MaxRdAtomic) {
			return false
		}
		if !qp.fillSendWork(wq, dst) {
			qp.fail(wq, WCLocProtErr)
			return false
		}
		wq.state = wqeStarted
		if op.readLike() {
			qp.sq.rdAtomic++
			wq.counted = true
		}
		qp.sq.next++
		return true
	}
}

// InlineCopy reports whether Data is the engine's copy of an inline WR's
// octets, held in w itself: the next NextSend into w overwrites it, so a
// transport that frames several works before it writes them copies these.
func (w *SendWork) InlineCopy() bool { return len(w.inline) > 0 }

// fillSendWork resolves the WQE's SGL and copies its parameters into dst. It
// reports false if an L_Key check fails.
func (qp *QP) fillSendWork(wq *sendWQE, dst *SendWork) bool {
	wr := &wq.wr
	*dst = SendWork{
		ID: qp.sq.next, WRID: wr.WRID, Opcode: wr.Opcode, Data: dst.Data[:0], Length: wq.length,
		Solicited: wr.Solicited, Imm: wr.Imm, InvalidateRKey: wr.InvalidateRKey,
		RemoteAddr: wr.RemoteAddr, RKey: wr.RKey, CompareAdd: wr.CompareAdd, Swap: wr.Swap,
		inline: dst.inline[:0],
	}
	if len(wr.SGL) > 0 {
		dst.SinkKey, dst.SinkAddr = wr.SGL[0].LKey, wr.SGL[0].Addr
	}
	switch wr.Opcode {
	case WRRDMARead, WRRDMAReadWithInv, WRAtomicCmpAndSwp, WRAtomicFetchAdd:
		if wr.Opcode.atomic() {
			dst.Length = 8
		}
		// The sink is written when the response arrives; check it now as the
		// IB requester does (IBTA 10.6.3.2: local write access).
		for _, s := range wr.SGL {
			if s.Length == 0 {
				continue // no memory, no L_Key check (checkLocalSGL)
			}
			if _, f := qp.ctx.lookupLocal(qp.pd, s.LKey, s.Addr, uint64(s.Length), true); f != faultNone {
				return false
			}
		}
		return true
	}
	if wr.Inline {
		// A deliberate copy of at most MaxInlineData bytes: the slot's inline
		// buffer is reused when the WQE retires, possibly while the transport
		// still writes a flushed WQE's bytes.
		dst.inline = append(dst.inline, wq.inline...)
		if len(dst.inline) > 0 {
			dst.Data = append(dst.Data, dst.inline)
		}
		return true
	}
	for _, s := range wr.SGL {
		if s.Length == 0 {
			continue // no memory, no L_Key check (checkLocalSGL)
		}
		mem, f := qp.ctx.lookupLocal(qp.pd, s.LKey, s.Addr, uint64(s.Length), false)
		if f != faultNone {
			return false
		}
		if len(mem) > 0 {
			dst.Data = append(dst.Data, mem)
		}
	}
	return true
}

// startedWQE returns the WQE id if it was handed out and is not done (and the QP
// is not destroyed: a destroyed QP generates no completions). mu is held.
func (qp *QP) startedWQE(id uint64) *sendWQE {
	if qp.dead || id < qp.sq.head || id >= qp.sq.next {
		return nil
	}
	wq := qp.sq.at(id)
	if wq.state != wqeStarted {
		return nil
	}
	return wq
}

// CompleteSend completes the handed-out WQE id with status: WCSuccess, or an error
// status, which moves the QP to the error state and flushes the rest (as FailSend).
// A READ_WITH_INV invalidates its InvalidateRKey on success; if that fails the
// WQE completes with IBV_WC_LOC_QP_OP_ERR. It reports false if the WQE is no
// longer outstanding (it was flushed): the transport just drops it.
func (w *Wire) CompleteSend(id uint64, status WCStatus) bool {
	qp, c := w.lock()
	defer c.mu.Unlock()
	return qp.completeSend(id, status)
}

// CompleteSends completes the handed-out WQEs ids with WCSuccess, in that
// order, as CompleteSend each, under one acquisition of the Context's lock:
// a transport completing the WQEs of one batch as its write returns takes the
// lock once instead of once per WQE. It returns how many were still
// outstanding (the others were flushed).
func (w *Wire) CompleteSends(ids []uint64) int {
	qp, c := w.lock()
	defer c.mu.Unlock()
	n := 0
	for _, id := range ids {
		if qp.completeSend(id, WCSuccess) {
			n++
		}
	}
	return n
}

// completeSend is CompleteSend's body. mu is held.
func (qp *QP) completeSend(id uint64, status WCStatus) bool {
	c := qp.ctx
	wq := qp.startedWQE(id)
	if wq == nil {
		return false
	}
	if status == WCSuccess && wq.wr.Opcode == WRRDMAReadWithInv {
		status = qp.localInvalidate(wq.wr.InvalidateRKey)
		if status == WCSuccess && c.settlePlacements() {
			if wq = qp.startedWQE(id); wq == nil {
				return false // flushed while the invalidation settled
			}
		}
	}
	qp.finishExternal(wq, status)
	return true
}

// finishExternal completes a started WQE. mu is held.
func (qp *QP) finishExternal(wq *sendWQE, status WCStatus) {
	if wq.counted {
		wq.counted = false
		qp.sq.rdAtomic--
	}
	if status != WCSuccess {
		qp.fail(wq, status)
		return
	}
	wq.state, wq.status = wqeDone, WCSuccess
	qp.retire()
	if qp.sq.next != qp.sq.tail {
		// A READ slot or a fence may have opened for a WQE not handed out
		// yet. With none waiting there is nothing to wake the transport for
		// (a post wakes it): each iWARP READ completion woke the idle
		// writer for nothing.
		qp.notifyWire()
	}
}

// CompleteAtomic completes the handed-out atomic WQE id: orig, the remote value
// before the operation, goes to the WQE's 8-byte local buffer in host byte order
// (as verbs returns it). A local protection fault completes the WQE with
// IBV_WC_LOC_PROT_ERR. It reports false if the WQE is no longer outstanding.
func (w *Wire) CompleteAtomic(id uint64, orig uint64) bool {
	qp, c := w.lock()
	defer c.mu.Unlock()
	wq := qp.startedWQE(id)
	if wq == nil || !wq.wr.Opcode.atomic() {
		return false
	}
	var v [8]byte
	binary.NativeEndian.PutUint64(v[:], orig)
	status := WCSuccess
	if qp.scatter(wq.wr.SGL, 0, v[:]) != faultNone {
		status = WCLocProtErr
	}
	qp.finishExternal(wq, status)
	return true
}

// ReadSink returns the handed-out READ WQE id's local memory for the response
// bytes [off, off+n) of its SGL, appended to dst[:0], checking every L_Key for
// local write access again. It returns KeyBounds if the range is not inside the
// READ's length, and nil, KeyUnknown if id is not an outstanding READ.
func (w *Wire) ReadSink(id, off, n uint64, dst [][]byte) ([][]byte, KeyFault) {
	qp, c := w.lock()
	defer c.mu.Unlock()
	wq := qp.startedWQE(id)
	if wq == nil || (wq.wr.Opcode != WRRDMARead && wq.wr.Opcode != WRRDMAReadWithInv) {
		return nil, KeyUnknown
	}
	if off > wq.length || n > wq.length-off {
		return nil, KeyBounds
	}
	bufs, f := qp.resolveSGL(wq.wr.SGL, off, n, dst[:0])
	if f == KeyOK {
		w.recordSGL(wq.wr.SGL, off, n)
	}
	return bufs, f
}

// PlaceReadResponse copies src, the READ response bytes [off, off+len(src)) of
// the handed-out READ WQE id, into its local memory (ReadSink's checks), and if
// last completes the WQE (CompleteSend), under one acquisition of the
// Context's lock: a transport whose response segment is already in its own
// buffer takes the lock once instead of three times (ReadSink, EndPlacement,
// CompleteSend). It returns KeyUnknown if id is not an outstanding READ (it
// was flushed: the transport drops the data) and ReadSink's faults otherwise;
// on a fault nothing completes.
func (w *Wire) PlaceReadResponse(id, off uint64, src []byte, last bool) KeyFault {
	qp, c := w.lock()
	defer c.mu.Unlock()
	wq := qp.startedWQE(id)
	if wq == nil || (wq.wr.Opcode != WRRDMARead && wq.wr.Opcode != WRRDMAReadWithInv) {
		return KeyUnknown
	}
	n := uint64(len(src))
	if off > wq.length || n > wq.length-off {
		return KeyBounds
	}
	if f := qp.scatter(wq.wr.SGL, off, src); f != faultNone {
		return KeyFault(f)
	}
	if last {
		qp.completeSend(id, WCSuccess)
	}
	return KeyOK
}

// recordSGL adds the regions of bytes [off, off+n) of sgl (just resolved) to the
// Wire's open placement. mu is held.
func (w *Wire) recordSGL(sgl []SGE, off, n uint64) {
	if w.place.interrupt == nil {
		return
	}
	for _, s := range sgl {
		if n == 0 {
			break
		}
		if off >= uint64(s.Length) {
			off -= uint64(s.Length)
			continue
		}
		if e, ok := w.qp.ctx.keys[s.LKey>>8]; ok && e.mr != nil {
			w.recordMR(e.mr)
		}
		n -= min(n, uint64(s.Length)-off)
		off = 0
	}
}

// resolveSGL returns the local-write memory of bytes [off, off+n) of sgl. mu is held.
func (qp *QP) resolveSGL(sgl []SGE, off, n uint64, dst [][]byte) ([][]byte, KeyFault) {
	for _, s := range sgl {
		if n == 0 {
			break
		}
		if off >= uint64(s.Length) {
			off -= uint64(s.Length)
			continue
		}
		k := min(n, uint64(s.Length)-off)
		mem, f := qp.ctx.lookupLocal(qp.pd, s.LKey, s.Addr+off, k, true)
		if f != faultNone {
			return nil, KeyFault(f)
		}
		dst = append(dst, mem)
		n -= k
		off = 0
	}
	if n > 0 {
		return nil, KeyBounds
	}
	return dst, KeyOK
}

// FailSend completes the handed-out WQE id with the error status and moves the QP
// to the error state, flushing every other outstanding WR. It reports false if the
// WQE is no longer outstanding (the QP is then already in error, or moves there).
func (w *Wire) FailSend(id uint64, status WCStatus) bool {
	qp, c := w.lock()
	defer c.mu.Unlock()
	wq := qp.startedWQE(id)
	if wq == nil {
		qp.enterError()
		return false
	}
	qp.finishExternal(wq, status)
	return true
}

// FailOldest completes the oldest handed-out WQE that is not done with status
// (the peer reported an error about the stream, and the oldest outstanding request
// is the one it can be about) and moves the QP to the error state. With no such
// WQE it just moves the QP to the error state.
func (w *Wire) FailOldest(status WCStatus, ev AsyncEventType, postEvent bool) {
	qp, c := w.lock()
	defer c.mu.Unlock()
	if !qp.failable(ev, postEvent) {
		return
	}
	for i := qp.sq.head; i != qp.sq.next; i++ {
		if wq := qp.sq.at(i); wq.state == wqeStarted {
			qp.finishExternal(wq, status)
			return
		}
	}
	qp.enterError()
}

// SetError moves the QP to the error state (flushing every outstanding WR), posting
// the asynchronous event ev first if postEvent is set. A QP already in the error
// (or reset) state is left alone.
func (w *Wire) SetError(ev AsyncEventType, postEvent bool) {
	qp, c := w.lock()
	defer c.mu.Unlock()
	if !qp.failable(ev, postEvent) {
		return
	}
	qp.enterError()
}

// failable reports whether a failure the wire reports may still move qp to the
// error state: not if it is already in the error or reset state, or destroyed.
// If it may, and postEvent is set, it posts the asynchronous event ev first.
// c.mu is held.
func (qp *QP) failable(ev AsyncEventType, postEvent bool) bool {
	if qp.state == QPStateErr || qp.state == QPStateReset || qp.dead {
		return false
	}
	if postEvent {
		qp.ctx.postEvent(AsyncEvent{Type: ev, QP: qp})
	}
	return true
}

// PostEvent posts an asynchronous event about the QP (EventCommEst, say).
func (w *Wire) PostEvent(ev AsyncEventType) {
	c := w.qp.ctx
	c.mu.Lock()
	defer c.mu.Unlock()
	c.postEvent(AsyncEvent{Type: ev, QP: w.qp})
}

// BeginRecv takes the next receive WQE for a new incoming message, from the QP's
// receive queue or its SRQ (posting the SRQ limit event if it fires), and returns
// its buffer length. One WQE is held at a time: while one is held, BeginRecv
// returns it again. It reports false if none is posted, or the QP is not in a
// state that receives (RTR, RTS, SQD).
func (w *Wire) BeginRecv() (length uint64, ok bool) {
	qp, c := w.lock()
	defer c.mu.Unlock()
	switch qp.state {
	case QPStateRTR, QPStateRTS, QPStateSQD:
	default:
		return 0, false
	}
	if !qp.takeRecv() {
		return 0, false
	}
	return qp.rcur.wqe.length, true
}

// RecvBuffers returns the held receive WQE's memory for the message bytes
// [off, off+n), appended to dst[:0]. It returns IBV_WC_LOC_LEN_ERR if the range
// ends beyond the WQE's buffers, IBV_WC_LOC_PROT_ERR if an L_Key check fails, and
// IBV_WC_LOC_QP_OP_ERR if no WQE is held.
func (w *Wire) RecvBuffers(off, n uint64, dst [][]byte) ([][]byte, WCStatus) {
	qp, c := w.lock()
	defer c.mu.Unlock()
	if !qp.rcur.have {
		return nil, WCLocQPOpErr
	}
	if off > qp.rcur.wqe.length || n > qp.rcur.wqe.length-off {
		return nil, WCLocLenErr
	}
	bufs, f := qp.resolveSGL(qp.rcur.wqe.sgl, off, n, dst[:0])
	if f != KeyOK {
		return nil, WCLocProtErr
	}
	w.recordSGL(qp.rcur.wqe.sgl, off, n)
	return bufs, WCSuccess
}

// RecvCompletion describes the end of an incoming message.
type RecvCompletion struct {
	// ByteLen is the message length.
	ByteLen uint32
	// Opcode is WCRecv, or WCRecvRDMAWithImm for an RDMA WRITE with immediate.
	Opcode WCOpcode
	// HasImm says that Imm is valid.
	HasImm bool
	Imm    uint32
	// Invalidate asks for InvalidateRKey to be invalidated before the completion
	// (a SEND with invalidate, IBTA 9.4.1 / RFC 5040 §5.3).
	Invalidate     bool
	InvalidateRKey uint32
	// Solicited marks a message with the solicited event bit (for CQ.Notify).
	Solicited bool
}

// EndRecv completes the held receive WQE successfully. If the message asks for an
// invalidation that the key does not allow, nothing completes and the fault is
// returned: the transport reports the error to its peer and calls FailRecv.
func (w *Wire) EndRecv(rc RecvCompletion) KeyFault {
	qp, c := w.lock()
	defer c.mu.Unlock()
	return qp.endRecv(rc)
}

// DeliverRecv places src, a whole incoming message, into the next receive WQE
// and completes it with rc: BeginRecv, RecvBuffers, the copy and EndRecv under
// one acquisition of the Context's lock (a small SEND took four). taken is false
// if BeginRecv would have reported false; st is RecvBuffers' status and f
// EndRecv's fault, and with either not successful the WQE stays held (the
// transport calls FailRecv), as with those calls.
func (w *Wire) DeliverRecv(src []byte, rc RecvCompletion) (taken bool, st WCStatus, f KeyFault) {
	qp, c := w.lock()
	defer c.mu.Unlock()
	switch qp.state {
	case QPStateRTR, QPStateRTS, QPStateSQD:
	default:
		return false, WCSuccess, KeyOK
	}
	if !qp.takeRecv() {
		return false, WCSuccess, KeyOK
	}
	n := uint64(len(src))
	if qp.rcur.wqe.length < n {
		return true, WCLocLenErr, KeyOK
	}
	if qp.scatter(qp.rcur.wqe.sgl, 0, src) != faultNone {
		return true, WCLocProtErr, KeyOK
	}
	return true, WCSuccess, qp.endRecv(rc)
}

// endRecv is EndRecv's body. mu is held.
func (qp *QP) endRecv(rc RecvCompletion) KeyFault {
	c := qp.ctx
	if !qp.rcur.have || qp.dead {
		return KeyInvalid
	}
	wc := WC{WRID: qp.rcur.wqe.wrid, Opcode: rc.Opcode, ByteLen: rc.ByteLen, QPNum: qp.qpn}
	if wc.Opcode != WCRecvRDMAWithImm {
		wc.Opcode = WCRecv
	}
	if rc.HasImm {
		wc.Imm, wc.Flags = rc.Imm, wc.Flags|WCFlagWithImm
	}
	if rc.Invalidate {
		if f := c.invalidateRemoteKey(qp, rc.InvalidateRKey); f != faultNone {
			return KeyFault(f)
		}
		if c.settlePlacements() && (!qp.rcur.have || qp.dead) {
			return KeyOK // flushed while the invalidation settled
		}
		wc.InvalidatedRKey, wc.Flags = rc.InvalidateRKey, wc.Flags|WCFlagWithInv
	}
	qp.rcur.have = false
	qp.recvCQ.push(wc, rc.Solicited)
	return KeyOK
}

// FailRecv completes the held receive WQE (if any) with status, posts ev if
// postEvent is set, and moves the QP to the error state, flushing the rest.
func (w *Wire) FailRecv(status WCStatus, ev AsyncEventType, postEvent bool) {
	qp, c := w.lock()
	defer c.mu.Unlock()
	if qp.rcur.have && qp.state != QPStateErr && !qp.dead {
		qp.rcur.have = false
		qp.recvCQ.push(WC{WRID: qp.rcur.wqe.wrid, Status: status, Opcode: WCRecv, QPNum: qp.qpn}, false)
	}
	if !qp.failable(ev, postEvent) {
		return
	}
	qp.enterError()
}

// RemoteBuffer checks a remote access of n bytes at va through rkey needing want
// (AccessRemoteWrite, AccessRemoteRead or AccessRemoteAtomic) — the QP's state
// and AccessFlags first (a QP that is not in RTR, RTS or SQD accepts no remote
// access: KeyQPAccess), then the key as lookupRemote does (IBTA 9.7.5.1, 10.6;
// RFC 5040 §6.4) — and returns the memory. A zero-length access checks nothing
// and returns nil, KeyOK.
func (w *Wire) RemoteBuffer(rkey uint32, va, n uint64, want Access) ([]byte, KeyFault) {
	qp, c := w.lock()
	defer c.mu.Unlock()
	if n == 0 {
		return nil, KeyOK
	}
	if !qp.acceptsRemote() || qp.attr.AccessFlags&want != want {
		return nil, KeyQPAccess
	}
	mem, f := c.lookupRemote(qp, rkey, va, n, want)
	if f == faultNone && want&AccessRemoteWrite != 0 {
		w.recordRemote(rkey)
	}
	return mem, KeyFault(f)
}

// AtomicOp is an atomic operation for Wire.Atomic (the RFC 7306 set, which
// contains the verbs one).
type AtomicOp uint8

// Atomic operations.
const (
	// AtomicOpFetchAdd adds (with AddMask marking field boundaries: the carry out
	// of a bit set in it is dropped; 0 is a plain 64-bit add).
	AtomicOpFetchAdd AtomicOp = iota
	// AtomicOpSwap replaces the bits set in SwapMask with Swap's.
	AtomicOpSwap
	// AtomicOpCompareSwap does AtomicOpSwap if the bits set in CompareMask equal
	// Compare's.
	AtomicOpCompareSwap
)

// AtomicArgs are the operands of Wire.Atomic.
type AtomicArgs struct {
	Op               AtomicOp
	AddSwap, AddMask uint64 // AddMask doubles as the swap mask
	Compare, CmpMask uint64
	RKey             uint32
	VA               uint64
}

// Atomic executes an atomic operation on the 8 bytes at VA through RKey (which
// needs AccessRemoteAtomic, and the QP too) under the Context's lock, so that it
// is atomic with respect to every other atomic of the Context, and returns the
// original value. The memory is a 64-bit integer in host byte order, as for the IB
// transport's atomics. A VA that is not 8-byte aligned returns KeyBounds.
func (w *Wire) Atomic(a AtomicArgs) (uint64, KeyFault) {
	qp, c := w.lock()
	defer c.mu.Unlock()
	if !qp.acceptsRemote() || qp.attr.AccessFlags&AccessRemoteAtomic == 0 {
		return 0, KeyQPAccess
	}
	if a.VA&7 != 0 {
		return 0, KeyBounds
	}
	mem, f := c.lookupRemote(qp, a.RKey, a.VA, 8, AccessRemoteAtomic)
	if f != faultNone {
		return 0, KeyFault(f)
	}
	orig := binary.NativeEndian.Uint64(mem)
	v := orig
	switch a.Op {
	case AtomicOpFetchAdd:
		v = maskedAdd(orig, a.AddSwap, a.AddMask)
	case AtomicOpSwap:
		v = orig&^a.AddMask | a.AddSwap&a.AddMask
	case AtomicOpCompareSwap:
		if orig&a.CmpMask == a.Compare&a.CmpMask {
			v = orig&^a.AddMask | a.AddSwap&a.AddMask
		}
	}
	binary.NativeEndian.PutUint64(mem, v)
	return orig, KeyOK
}

// maskedAdd adds b to a; every bit set in boundaries ends a field, so the carry out
// of it is dropped (IBTA's masked fetch-and-add, RFC 7306's Add Mask).
func maskedAdd(a, b, boundaries uint64) uint64 {
	if boundaries == 0 {
		return a + b
	}
	var sum, carry uint64
	for i := 0; i < 64; i++ {
		x, y := a>>i&1, b>>i&1
		s := x ^ y ^ carry
		carry = x&y | x&carry | y&carry
		sum |= s << i
		if boundaries>>i&1 != 0 {
			carry = 0
		}
	}
	return sum
}

// acceptsRemote reports whether the QP's state lets peers access memory through
// it (IBTA 10.3.1: RESET, INIT and ERR drop every request). mu is held.
func (qp *QP) acceptsRemote() bool {
	switch qp.state {
	case QPStateRTR, QPStateRTS, QPStateSQD:
		return !qp.dead
	}
	return false
}

// WriteRemote copies src to the n = len(src) bytes at va through rkey, with
// RemoteBuffer's checks, under the Context's lock. A transport that places a
// segment's payload without the lock (straight from its socket into the
// memory RemoteBuffer returned) places the segment's last bytes with it: an
// application that reads the region under the lock (MR.ReadAt), polling for
// the last byte of a message or a counter the peer writes, then sees them in
// an order the race detector knows, with the rest of the segment placed
// before. The key is checked again: it may have been invalidated since.
func (w *Wire) WriteRemote(rkey uint32, va uint64, src []byte) KeyFault {
	qp, c := w.lock()
	defer c.mu.Unlock()
	if len(src) == 0 {
		return KeyOK
	}
	if !qp.acceptsRemote() || qp.attr.AccessFlags&AccessRemoteWrite == 0 {
		return KeyQPAccess
	}
	mem, f := c.lookupRemote(qp, rkey, va, uint64(len(src)), AccessRemoteWrite)
	if f != faultNone {
		return KeyFault(f)
	}
	copy(mem, src)
	return KeyOK
}
