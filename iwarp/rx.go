package iwarp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"

	"github.com/softrdma/softrdma/header"
)

// This file is the receive path: the reader goroutine of a connection reads each
// FPDU's ULPDU_Length and DDP/RDMAP headers (through a small buffer), finds where its
// payload goes — an STag and tagged offset checked by the engine, a receive WQE, a
// READ's sink — and reads the payload straight into that memory (one copy, the
// kernel's; only octets the small buffer had already read ahead are copied from
// it), computing the CRC32c over the octets as they land, then reads the pad and
// the CRC and checks it. Nothing that completes a WR, executes an atomic or queues a
// response happens before the CRC has been checked; data placed before the check
// belongs to a connection that is then terminated (RFC 5041 §3 allows placement
// before delivery). The engine records each FPDU's target regions as the
// connection's open placement (ibtransport placement.go) until the payload is
// in, so that a Dereg or an invalidation meanwhile interrupts the read and
// waits for it, and no octet lands in the region once it has returned.

// rxBufSize is the read-ahead buffer of a connection without readv (not Linux
// TCP): big enough for several small FPDUs per read system call, small enough
// that the payload octets it copies on the way to their memory are a small
// fraction of a large FPDU. It is also how far a Linux TCP reader reads ahead
// after a large FPDU (rxCopyMax).
const rxBufSize = 2048

// A Linux TCP reader reads through a pooled buffer of rxPoolBufSize octets
// (readv_linux.go): one read system call then takes every FPDU the socket
// holds, up to 64 KiB, instead of 2 KiB of them. The 4 KiB WRITE row's profile
// had 70% of its CPU time in the reader's system calls, two per 4 KiB FPDU
// (the header through the 2 KiB buffer, then the payload); the 64-byte rows
// took 24 FPDUs per read. Small payloads are then copied from the buffer (a
// memmove, cheaper than the system call it saves); a payload of more than
// rxCopyMax octets is read straight into its memory as before, and after such
// an FPDU the reader reads ahead rxBufSize octets only, so that the next large
// payload is not copied either. The reader holds the buffer only while it has
// unread octets in it: idle connections hold none (the scale rows have
// thousands).
const (
	rxPoolBufSize = 64 << 10
	rxCopyMax     = 16 << 10
	rxPoolMax     = 64 // buffers the pool keeps
)

// rxPool is the free list of the readers' pooled buffers (a sync.Pool would
// drop them at each collection, an allocation of 64 KiB each time).
var rxPool struct {
	sync.Mutex
	free [][]byte
}

func getRxBuf() []byte {
	rxPool.Lock()
	if n := len(rxPool.free); n > 0 {
		b := rxPool.free[n-1]
		rxPool.free[n-1] = nil
		rxPool.free = rxPool.free[:n-1]
		rxPool.Unlock()
		return b
	}
	rxPool.Unlock()
	return make([]byte, rxPoolBufSize)
}

func putRxBuf(b []byte) {
	rxPool.Lock()
	if len(rxPool.free) < rxPoolMax {
		rxPool.free = append(rxPool.free, b)
	}
	rxPool.Unlock()
}

// rxState is the reader goroutine's framing state.
type rxState struct {
	nc      net.Conn
	rc      syscall.RawConn // for readv (Linux TCP), else nil
	iov     [2][]byte
	obs     StreamObserver
	buf     []byte // read-ahead: fixed (rc nil) or pooled (rc set; nil when empty)
	pooled  bool   // buf comes from rxPool
	ahead   int    // pooled: octets to read ahead (rxPoolBufSize, or rxBufSize after a large FPDU)
	r, w    int
	pos     uint64 // stream octets consumed since the origin (the octet after the peer's start frame)
	markers bool
	crc     bool

	fcrc    uint32
	started bool
	hdrPos  uint64
	scratch []byte
	pad     [3]byte      // trailer's pad octets (locals escape through read)
	crcBuf  [CRCLen]byte // trailer's CRC octets

	// kickPending: Read or Atomic Responses were queued since the writer was
	// last kicked; readRaw kicks it before it reads the socket again.
	kickPending bool
	kick        chan<- struct{} // the writer's kick channel

	readv    func(fd uintptr) bool // readSocket's RawConn.Read callback, made once
	readvN   int
	readvErr error

	held  atomic.Bool   // a pooled buffer is held (for tests: ReaderHoldsBuffer)
	reads atomic.Uint64 // readv calls that returned octets (for tests: ReaderReads)
	fast  atomic.Uint64 // FPDUs executed by readBuffered (for tests: ReaderBuffered)
}

// init sets up the reader's state for nc.
func (r *rxState) init(nc net.Conn, obs StreamObserver, neg *Negotiated) {
	r.nc, r.rc, r.obs, r.markers, r.crc, r.ahead = nc, rawReader(nc), obs, neg.RecvMarkers, neg.CRC, rxPoolBufSize
	if r.rc != nil {
		r.pooled = true
	} else {
		r.buf = make([]byte, rxBufSize)
	}
}

// take takes a pooled buffer for a read.
func (r *rxState) take() {
	r.buf = getRxBuf()
	r.held.Store(true)
}

// release returns an empty pooled buffer to the pool.
func (r *rxState) release() {
	if r.pooled && r.buf != nil {
		putRxBuf(r.buf)
		r.buf, r.r, r.w = nil, 0, 0
		r.held.Store(false)
	}
}

// sized sets the read-ahead after an FPDU whose ULPDU has n octets (rxCopyMax).
func (r *rxState) sized(n int) {
	if n > rxCopyMax {
		r.ahead = rxBufSize
	} else {
		r.ahead = rxPoolBufSize
	}
}

// readRaw fills p from the read-ahead buffer, then from the connection.
func (r *rxState) readRaw(p []byte) error {
	n := copy(p, r.buf[r.r:r.w])
	r.r += n
	p = p[n:]
	if r.r == r.w {
		r.release()
	}
	if len(p) == 0 {
		return nil
	}
	if r.kickPending {
		// The responses to every request read so far are queued: the writer
		// frames them in one batch (one wake-up and one writev for them,
		// where a kick per request had it write one or two per writev).
		r.kickPending = false
		select {
		case r.kick <- struct{}{}:
		default:
		}
	}
	var err error
	if r.rc != nil {
		err = r.readSocket(p)
	} else {
		err = r.readConn(p)
	}
	if err == io.EOF && n > 0 {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// readConn fills p from a connection without readv, the read-ahead buffer
// being empty: straight into p when it is at least as big as the buffer, else
// through the buffer.
func (r *rxState) readConn(p []byte) error {
	if len(p) >= len(r.buf) {
		k, err := io.ReadFull(r.nc, p)
		if r.obs != nil && k > 0 {
			r.obs.Received(p[:k])
		}
		return err
	}
	k, err := io.ReadAtLeast(r.nc, r.buf, len(p))
	if r.obs != nil && k > 0 {
		r.obs.Received(r.buf[:k])
	}
	r.r, r.w = 0, k
	if err != nil {
		return err
	}
	r.r = copy(p, r.buf[:k])
	return nil
}

// begin starts an FPDU.
func (r *rxState) begin() { r.fcrc, r.started = 0, false }

// marker reads and checks the marker at the current position. A mismatch is
// returned at once (RFC 5044 §4.3, §8: the stream's framing is lost): no octet
// after it is placed, and a peer that negotiated markers but sends none is
// caught at the first marker position instead of having its octets taken for an
// FPDU header (a ULPDU length out of the data, waited for in silence).
func (r *rxState) marker() error {
	var m [MarkerLen]byte
	if err := r.readRaw(m[:]); err != nil {
		return err
	}
	if r.crc {
		r.fcrc = UpdateCRC32c(r.fcrc, m[:])
	}
	var want uint64
	if r.started {
		want = r.pos - r.hdrPos
	}
	if got := Marker(m[:]).FPDUPointer(); uint64(got) != want {
		return &header.Error{Header: "marker", Field: "FPDU pointer", Value: uint64(got), Limit: want,
			Rel: "!=", Err: ErrMarkerMismatch}
	}
	r.pos += MarkerLen
	return nil
}

// read fills p with FPDU octets, stripping and checking markers, updating the CRC.
func (r *rxState) read(p []byte) error {
	for len(p) > 0 {
		if r.markers && r.pos%MarkerInterval == 0 {
			if err := r.marker(); err != nil {
				return err
			}
		}
		if !r.started {
			r.hdrPos, r.started = r.pos, true
		}
		k := len(p)
		if r.markers {
			k = min(k, MarkerInterval-int(r.pos%MarkerInterval))
		}
		if err := r.readRaw(p[:k]); err != nil {
			return err
		}
		if r.crc {
			r.fcrc = UpdateCRC32c(r.fcrc, p[:k])
		}
		r.pos += uint64(k)
		p = p[k:]
	}
	return nil
}

// discard reads and drops n FPDU octets.
func (r *rxState) discard(n int) error {
	if r.scratch == nil {
		r.scratch = make([]byte, 4096)
	}
	for n > 0 {
		k := min(n, len(r.scratch))
		if err := r.read(r.scratch[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// trailer reads the pad and the CRC of an FPDU with a ULPDU of n octets and checks
// the CRC and the markers.
func (r *rxState) trailer(n int) error {
	if err := r.read(r.pad[:PadLen(n)]); err != nil {
		return err
	}
	if r.markers && r.pos%MarkerInterval == 0 {
		if err := r.marker(); err != nil {
			return err
		}
	}
	c := r.crcBuf[:]
	if err := r.readRaw(c); err != nil {
		return err
	}
	r.pos += CRCLen
	if r.crc {
		if got := binary.LittleEndian.Uint32(c); got != r.fcrc {
			return checkCRC(got, r.fcrc)
		}
	}
	return nil
}

// rxError is an error this side found in the peer's traffic (or in its own
// responder state): the Terminate to send, the local error, and what happens to
// the QP.
type rxError struct {
	term   TerminateFields
	err    error
	status ib.WCStatus // for the receive WQE in use (0: none)
	event  ib.AsyncEventType
	rdma   bool // include the Read Request header in the Terminate (R)
}

// Error returns the local error's text.
func (e *rxError) Error() string { return e.err.Error() }

func newRxError(l TerminateLayer, etype, code uint8, ev ib.AsyncEventType, err error) *rxError {
	return &rxError{term: TerminateFields{Layer: l, EType: etype, ErrorCode: code}, err: err, event: ev}
}

// llpError is an MPA-level error (RFC 5044 §8).
func llpError(code uint8, err error) *rxError {
	return newRxError(LayerLLP, ETypeLLPMPA, code, ib.EventQPFatal, err)
}

// ddpTagged maps an STag check of tagged placement (RFC 5041 §7.2, the DDP checks:
// STag, bounds, association) to its Terminate; the access right is RDMAP's (RFC
// 5040 §6.4, Remote Protection Error, Access Rights Violation), as in siw.
func ddpTagged(f ib.KeyFault, what string) *rxError {
	err := fmt.Errorf("%s: STag check: %s", what, f)
	switch f {
	case ib.KeyBounds:
		return newRxError(LayerDDP, ETypeDDPTaggedBuffer, ECodeDDPTaggedBaseBounds, ib.EventQPAccessErr, err)
	case ib.KeyOtherPD, ib.KeyOtherQP:
		return newRxError(LayerDDP, ETypeDDPTaggedBuffer, ECodeDDPTaggedSTagNotAssociated, ib.EventQPAccessErr, err)
	case ib.KeyNoAccess, ib.KeyQPAccess:
		return newRxError(LayerRDMAP, ETypeRDMAPRemoteProtection, ECodeRDMAPAccessRights, ib.EventQPAccessErr, err)
	}
	return newRxError(LayerDDP, ETypeDDPTaggedBuffer, ECodeDDPTaggedInvalidSTag, ib.EventQPAccessErr, err)
}

// rdmapProtection maps an STag check RDMAP makes (the Data Source of a Read, the
// target of an atomic: RFC 5040 §6.4, §7.4) to a Remote Protection Error.
func rdmapProtection(f ib.KeyFault, what string) *rxError {
	err := fmt.Errorf("%s: STag check: %s", what, f)
	code := uint8(ECodeRDMAPInvalidSTag)
	switch f {
	case ib.KeyBounds:
		code = ECodeRDMAPBaseBounds
	case ib.KeyNoAccess, ib.KeyQPAccess:
		code = ECodeRDMAPAccessRights
	case ib.KeyOtherPD, ib.KeyOtherQP:
		code = ECodeRDMAPSTagNotAssociated
	}
	return newRxError(LayerRDMAP, ETypeRDMAPRemoteProtection, code, ib.EventQPAccessErr, err)
}

func ddpUntagged(code uint8, err error) *rxError {
	return newRxError(LayerDDP, ETypeDDPUntaggedBuffer, code, ib.EventQPReqErr, err)
}

func rdmapOperation(code uint8, err error) *rxError {
	return newRxError(LayerRDMAP, ETypeRDMAPRemoteOperation, code, ib.EventQPReqErr, err)
}

// rxQueue is the receive state of one untagged queue.
type rxQueue struct {
	msn uint32 // MSN of the message in progress, or of the next one
	mo  uint32 // next expected MO
}

var errOrderlyEOF = errors.New("orderly EOF")

// rxHdr is the decoded header part of an FPDU.
type rxHdr struct {
	b      [FPDUHeaderLen + DDPUntaggedHeaderLen + AtomicRequestLen]byte
	ulpdu  int
	hl     int // DDP header length
	ddp    DDP
	op     Opcode
	opHdr  []byte
	paylen int
}

// opHeaderLen returns the length of the RDMAP header that follows the DDP header
// (-1: the whole rest, a Terminate).
func opHeaderLen(op Opcode) int {
	switch op {
	case OpReadRequest:
		return ReadRequestLen
	case OpAtomicRequest:
		return AtomicRequestLen
	case OpAtomicResponse:
		return AtomicResponseLen
	case OpImmediateData, OpImmediateDataSE:
		return ImmediateDataLen
	case OpTerminate:
		return -1
	}
	return 0
}

// readFPDU reads and executes one FPDU. It returns nil to go on, errOrderlyEOF at
// the peer's FIN between FPDUs, a *rxError for a protocol error found (the caller
// terminates), a *TerminateError for the peer's Terminate, and an I/O error
// otherwise.
func (c *Conn) readFPDU(h *rxHdr) error {
	h.ddp, h.opHdr = nil, nil // a Terminate echoes this FPDU's header, once read
	err := c.readFPDU1(h)
	switch {
	case err == io.EOF:
		err = io.ErrUnexpectedEOF // the orderly EOF between FPDUs is errOrderlyEOF
	case errors.Is(err, ErrMarkerMismatch):
		var re *rxError
		if !errors.As(err, &re) {
			err = llpError(ECodeMPAMarkerMismatch, err)
		}
	}
	return err
}

func (c *Conn) readFPDU1(h *rxHdr) error {
	r := &c.rx
	r.begin()
	start := r.pos
	if err := r.read(h.b[:FPDUHeaderLen]); err != nil {
		if err == io.EOF && r.pos == start {
			return errOrderlyEOF
		}
		return err
	}
	h.ulpdu = int(binary.BigEndian.Uint16(h.b[:]))
	h.ddp, h.opHdr = nil, nil
	if h.ulpdu > c.maxRecv {
		return llpError(ECodeMPAMarkerMismatch, &header.Error{Header: "fpdu", Field: "ULPDU length",
			Value: uint64(h.ulpdu), Limit: uint64(c.maxRecv), Rel: ">", Err: ErrTooLong})
	}
	if h.ulpdu < 2 {
		return llpError(ECodeMPAMarkerMismatch, truncated("ddp", "segment length", h.ulpdu, 2))
	}
	r.sized(h.ulpdu)
	if err := r.read(h.b[FPDUHeaderLen : FPDUHeaderLen+2]); err != nil {
		return err
	}
	h.hl = DDP(h.b[FPDUHeaderLen:]).HeaderLen()
	if h.ulpdu < h.hl {
		return llpError(ECodeMPAMarkerMismatch, truncated("ddp", "segment length", h.ulpdu, h.hl))
	}
	if err := r.read(h.b[FPDUHeaderLen+2 : FPDUHeaderLen+h.hl]); err != nil {
		return err
	}
	h.ddp = DDP(h.b[FPDUHeaderLen : FPDUHeaderLen+h.hl])
	rest := h.ulpdu - h.hl

	// Check the headers; an error found here is reported once the FPDU has been read
	// and its CRC checked (a bad CRC is the better explanation of a bad header).
	perr := c.checkHeaders(h, rest)
	var ophl int
	if perr == nil {
		ophl = opHeaderLen(h.op)
		if ophl < 0 {
			ophl = min(rest, len(h.b)-FPDUHeaderLen-h.hl)
		}
		if rest < ophl || (ophl > 0 && h.op != OpTerminate && rest != ophl) {
			perr = rdmapOperation(ECodeRDMAPCatastrophicStream, &header.Error{Header: "rdmap",
				Field: h.op.String() + " length", Value: uint64(rest), Limit: uint64(ophl), Rel: "!=", Err: ErrBadValue})
			ophl = 0
		}
	}
	if ophl > 0 {
		if err := r.read(h.b[FPDUHeaderLen+h.hl : FPDUHeaderLen+h.hl+ophl]); err != nil {
			return err
		}
		h.opHdr = h.b[FPDUHeaderLen+h.hl : FPDUHeaderLen+h.hl+ophl]
	}
	h.paylen = rest - ophl
	if perr == nil && r.buffered(h) {
		if done, err := c.readBuffered(h, start); done {
			return err
		}
	}
	var target [][]byte
	var effect func() error
	if perr == nil {
		target, effect, perr = c.place(h)
	}
	placed := 0
	var rerr error
	if perr == nil {
		for _, b := range target {
			if rerr = r.read(b); rerr != nil {
				break
			}
			placed += len(b)
		}
	}
	// The engine recorded the regions place resolved as this connection's open
	// placement; a Dereg or an invalidation of one of them has interrupted the
	// read above (a read deadline in the past) and waits for this. The rest of
	// the segment is not placed: the STag is no longer valid (RFC 5041 §7.2:
	// tagged Invalid STag; a receive buffer gone is a local catastrophic error),
	// and the stream is not read on, so the connection is terminated.
	if (len(target) > 0 || perr != nil) && c.endPlacement() {
		return c.revoked(h)
	}
	if rerr != nil {
		return rerr
	}
	if err := r.discard(h.paylen - placed); err != nil {
		return err
	}
	err := r.trailer(h.ulpdu)
	if err == nil || errors.Is(err, ErrMarkerMismatch) || errors.Is(err, ErrBadCRC) {
		// The whole FPDU was read (checked or not).
		c.cnt.packetsIn.Add(1)
		c.cnt.bytesIn.Add(r.pos - start)
	}
	if err != nil {
		if errors.Is(err, ErrMarkerMismatch) {
			return llpError(ECodeMPAMarkerMismatch, err)
		}
		if errors.Is(err, ErrBadCRC) {
			return llpError(ECodeMPACRC, err)
		}
		return err
	}
	if perr != nil {
		return perr
	}
	if effect != nil {
		return effect()
	}
	return nil
}

// buffered reports whether the rest of the FPDU whose headers h holds (its
// payload, pad and CRC) is in the read-ahead buffer, with no marker in it.
func (r *rxState) buffered(h *rxHdr) bool {
	return !r.markers && r.w-r.r >= h.paylen+PadLen(h.ulpdu)+CRCLen
}

// readBuffered executes a WRITE, a one-segment SEND or a Read Response
// segment whose payload is in the read-ahead buffer (rxState.buffered): it
// checks the CRC first, then hands the payload to the engine, which checks
// the key, copies it and completes the WR under one acquisition of its lock
// (Wire.WriteRemote, DeliverRecv, PlaceReadResponse), where the general path
// takes it three or four times per FPDU (the key check, EndPlacement, the
// completion) and reads the FPDU piece by piece; those acquisitions were the
// largest item of the 64 B rate rows' profiles. It reports false, having
// read nothing, for any other FPDU (or an RTR).
func (c *Conn) readBuffered(h *rxHdr, start uint64) (bool, error) {
	r := &c.rx
	d := h.ddp
	n := h.paylen
	var o outReq
	switch h.op {
	case OpWrite:
		if c.awaitRTR != 0 {
			return false, nil
		}
	case OpSend, OpSendInvalidate, OpSendSE, OpSendSEInvalidate:
		if c.awaitRTR != 0 || d.MO() != 0 || !d.Last() {
			return false, nil
		}
	case OpReadResponse:
		if c.awaitRTR != 0 {
			return false, nil
		}
		var perr *rxError
		var rtr bool
		if o, rtr, perr = c.checkReadResponse(d, uint64(n)); rtr || perr != nil {
			return false, nil // the general path reports it
		}
	default:
		return false, nil
	}
	pad := PadLen(h.ulpdu)
	payload := r.buf[r.r : r.r+n]
	crcAt := r.r + n + pad
	if r.crc {
		r.fcrc = UpdateCRC32c(r.fcrc, r.buf[r.r:crcAt])
	}
	got := binary.LittleEndian.Uint32(r.buf[crcAt:])
	r.r = crcAt + CRCLen
	r.pos += uint64(n + pad + CRCLen)
	c.cnt.packetsIn.Add(1)
	c.cnt.bytesIn.Add(r.pos - start)
	r.fast.Add(1)
	// The payload is read from the buffer below: give it back after.
	defer func() {
		if r.r == r.w {
			r.release()
		}
	}()
	if r.crc && got != r.fcrc {
		return true, llpError(ECodeMPACRC, checkCRC(got, r.fcrc))
	}
	switch h.op {
	case OpWrite:
		to := d.TO()
		if to+uint64(n) < to {
			return true, newRxError(LayerDDP, ETypeDDPTaggedBuffer, ECodeDDPTaggedTOWrap, ib.EventQPAccessErr,
				fmt.Errorf("ddp: TO 0x%x + %d wraps", to, n))
		}
		if f := c.wire.WriteRemote(d.STag(), to, payload); f != ib.KeyOK {
			return true, ddpTagged(f, fmt.Sprintf("rdma write STag 0x%08x TO 0x%x length %d", d.STag(), to, n))
		}
		c.writeLen += uint64(n)
		if d.Last() {
			c.lastWriteLen, c.writeLen = c.writeLen, 0
		}
		return true, nil
	case OpReadResponse:
		switch f := c.wire.PlaceReadResponse(o.id, d.TO()-o.sinkTO, payload, d.Last()); f {
		case ib.KeyOK:
		case ib.KeyUnknown:
			return true, nil // flushed: the QP is going down; drop the data
		default:
			e := ddpTagged(f, "rdma read sink")
			e.status = 0
			return true, e
		}
		c.readResponseDone(uint64(n), d.Last())
		return true, nil
	}
	inv := RDMAP(d).InvalidateSTag()
	taken, st, f := c.wire.DeliverRecv(payload, ib.RecvCompletion{ByteLen: uint32(n), Opcode: ib.WCRecv,
		Solicited: h.op.Solicited(), Invalidate: h.op.Invalidates(), InvalidateRKey: inv})
	switch {
	case !taken:
		return true, ddpUntagged(ECodeDDPUntaggedNoBuffer, fmt.Errorf("ddp: queue 0 MSN %d: no receive WR posted", d.MSN()))
	case st != ib.WCSuccess:
		return true, recvBufError(d, uint64(n), st)
	case f != ib.KeyOK:
		return true, cannotInvalidate(inv, f)
	}
	c.rq[QueueSend].msn++
	return true, nil
}

// endPlacement closes the engine's record of the FPDU's placement and reports
// whether one of its regions was invalidated meanwhile.
func (c *Conn) endPlacement() bool {
	revoked := c.wire.EndPlacement()
	c.interrupted.Store(false)
	return revoked
}

// interruptPlacement is the engine's placement interrupt (called with its lock
// held, while a Dereg or an invalidation waits): it stops the reader's read into
// the region with a read deadline in the past.
func (c *Conn) interruptPlacement() {
	c.interrupted.Store(true)
	c.nc.SetReadDeadline(time.Unix(1, 0))
}

// revoked is the error for an FPDU whose target was deregistered or invalidated
// while its payload was being placed.
func (c *Conn) revoked(h *rxHdr) *rxError {
	switch h.op {
	case OpSend, OpSendInvalidate, OpSendSE, OpSendSEInvalidate:
		e := newRxError(LayerRDMAP, ETypeRDMAPLocalCatastrophic, ECodeRDMAPLocalCatastrophic, ib.EventQPFatal,
			fmt.Errorf("ddp: queue 0 MSN %d: the receive WR's memory was deregistered during placement", h.ddp.MSN()))
		e.status = ib.WCLocProtErr
		return e
	}
	return ddpTagged(ib.KeyInvalid, fmt.Sprintf("%s STag 0x%08x TO 0x%x: invalidated during placement",
		h.op, h.ddp.STag(), h.ddp.TO()))
}

// checkHeaders checks the DDP and RDMAP versions and the opcode, and for untagged
// segments the queue, MSN and MO (RFC 5041 §7.2, RFC 5040 §7).
func (c *Conn) checkHeaders(h *rxHdr, rest int) *rxError {
	d := h.ddp
	if d.Version() != DDPVersion {
		err := &header.Error{Header: "ddp", Field: "version", Value: uint64(d.Version()), Limit: DDPVersion, Rel: "!=", Err: ErrBadVersion}
		if d.Tagged() {
			return newRxError(LayerDDP, ETypeDDPTaggedBuffer, ECodeDDPTaggedInvalidVersion, ib.EventQPReqErr, err)
		}
		return ddpUntagged(ECodeDDPUntaggedInvalidVersion, err)
	}
	rd := RDMAP(d)
	if rd.Version() != RDMAPVersion {
		return rdmapOperation(ECodeRDMAPInvalidVersion, &header.Error{Header: "rdmap", Field: "version",
			Value: uint64(rd.Version()), Limit: RDMAPVersion, Rel: "!=", Err: ErrBadVersion})
	}
	op := rd.Opcode()
	h.op = op
	ext := op == OpImmediateData || op == OpImmediateDataSE || op == OpAtomicRequest || op == OpAtomicResponse
	if !op.Valid() || op.Tagged() != d.Tagged() || (ext && !c.neg.Extensions) {
		reason := "not enabled on this connection"
		switch {
		case !op.Valid():
			reason = "reserved"
		case op.Tagged() != d.Tagged():
			reason = "wrong buffer model"
		}
		return rdmapOperation(ECodeRDMAPUnexpectedOpcode, &header.Error{Header: "rdmap", Field: "opcode",
			Value: uint64(op), Reason: reason, Err: ErrBadOpcode})
	}
	if d.Tagged() {
		return nil
	}
	qn := d.QN()
	if qn > QueueAtomicResponse || (qn == QueueAtomicResponse && !c.neg.Extensions) {
		return ddpUntagged(ECodeDDPUntaggedInvalidQN, &header.Error{Header: "ddp", Field: "queue number",
			Value: uint64(qn), Err: ErrBadValue})
	}
	if qn != op.QueueNumber() {
		return rdmapOperation(ECodeRDMAPUnexpectedOpcode, &header.Error{Header: "rdmap", Field: "queue number",
			Value: uint64(qn), Limit: uint64(op.QueueNumber()), Rel: "!=", Reason: "for " + op.String(), Err: ErrBadOpcode})
	}
	q := &c.rq[qn]
	if d.MSN() != q.msn {
		return ddpUntagged(ECodeDDPUntaggedMSNRange, &header.Error{Header: "ddp", Field: "MSN",
			Value: uint64(d.MSN()), Limit: uint64(q.msn), Rel: "!=", Reason: fmt.Sprintf("queue %d", qn), Err: ErrBadValue})
	}
	if d.MO() != q.mo {
		return ddpUntagged(ECodeDDPUntaggedInvalidMO, &header.Error{Header: "ddp", Field: "MO",
			Value: uint64(d.MO()), Limit: uint64(q.mo), Rel: "!=", Err: ErrBadValue})
	}
	if qn != QueueSend && !d.Last() {
		// Read Requests, Terminates and atomics are single-segment messages.
		return ddpUntagged(ECodeDDPUntaggedInvalidMO, &header.Error{Header: "ddp", Field: "L",
			Value: 0, Reason: op.String() + " must be one segment", Err: ErrBadValue})
	}
	return nil
}

// place finds where an FPDU's payload goes and what to do once it is in (after the
// CRC check).
func (c *Conn) place(h *rxHdr) ([][]byte, func() error, *rxError) {
	d := h.ddp
	n := uint64(h.paylen)
	switch h.op {
	case OpWrite:
		return c.placeWrite(h, d, n)
	case OpReadResponse:
		return c.placeReadResponse(d, n)
	case OpSend, OpSendInvalidate, OpSendSE, OpSendSEInvalidate:
		return c.placeSend(h, d, n)
	case OpImmediateData, OpImmediateDataSE:
		return c.placeImmediate(h, d)
	case OpReadRequest, OpAtomicRequest, OpTerminate:
		c.fx = rxEffect{h: h}
		return nil, c.headerEffect, nil
	case OpAtomicResponse:
		return c.placeAtomicResponse(h)
	}
	return nil, nil, rdmapOperation(ECodeRDMAPUnexpectedOpcode, &header.Error{Header: "rdmap", Field: "opcode",
		Value: uint64(h.op), Reason: h.op.String() + " unexpected here", Err: ErrBadOpcode})
}

func (c *Conn) placeWrite(h *rxHdr, d DDP, n uint64) ([][]byte, func() error, *rxError) {
	to := d.TO()
	if to+n < to {
		return nil, nil, newRxError(LayerDDP, ETypeDDPTaggedBuffer, ECodeDDPTaggedTOWrap, ib.EventQPAccessErr,
			fmt.Errorf("ddp: TO 0x%x + %d wraps", to, n))
	}
	mem, f := c.wire.RemoteBuffer(d.STag(), to, n, ib.AccessRemoteWrite)
	if f != ib.KeyOK {
		return nil, nil, ddpTagged(f, fmt.Sprintf("rdma write STag 0x%08x TO 0x%x length %d", d.STag(), to, n))
	}
	last := d.Last()
	if c.awaitRTR != 0 && (c.awaitRTR != RTRWrite || n != 0 || !last) {
		return nil, nil, c.badRTR(h)
	}
	// The reader handles one FPDU at a time, so the effect's arguments and the
	// target wait in the Conn: a closure and a slice per FPDU were most of the
	// receive path's allocations.
	c.wroteN, c.wroteLast = n, last
	if mem == nil {
		return nil, c.wroteEffect, nil
	}
	// The segment's last octets are read into wroteTail and placed by wrote,
	// under the engine's lock (Wire.WriteRemote): see writeTailLen.
	k := min(n, writeTailLen)
	c.wroteSTag, c.wroteTailTO = d.STag(), to+n-k
	c.wroteTarget[0], c.wroteTarget[1] = mem[:n-k], c.wroteTail[:k]
	return c.wroteTarget[:], c.wroteEffect, nil
}

// writeTailLen is how many of a WRITE segment's last octets are placed under
// the engine's lock, once the segment's CRC has been checked: an application
// that polls the last octet of a message or a word the peer writes (perftest's
// write_lat, ib_send_bw's credit over iWARP) reads them with MR.ReadAt, under
// the same lock, and so in an order the race detector sees; the rest of the
// segment was placed before. Eight octets cover an aligned 64-bit word.
const writeTailLen = 8

// wrote accounts for a placed WRITE segment (placeWrite's effect, after the CRC
// check): the octets of the message so far, and at its end its length.
func (c *Conn) wrote() error {
	tail := c.wroteTarget[1]
	c.wroteTarget[0], c.wroteTarget[1] = nil, nil
	if f := c.wire.WriteRemote(c.wroteSTag, c.wroteTailTO, tail); f != ib.KeyOK {
		return ddpTagged(f, fmt.Sprintf("rdma write STag 0x%08x TO 0x%x length %d", c.wroteSTag, c.wroteTailTO, len(tail)))
	}
	c.writeLen += c.wroteN
	if c.wroteLast {
		c.lastWriteLen, c.writeLen = c.writeLen, 0
		if c.awaitRTR == RTRWrite && c.wroteN == 0 {
			c.rtrReceived()
		}
	}
	return nil
}

func (c *Conn) placeReadResponse(d DDP, n uint64) ([][]byte, func() error, *rxError) {
	if c.awaitRTR != 0 {
		return nil, nil, c.badRTR(nil)
	}
	o, rtr, perr := c.checkReadResponse(d, n)
	if perr != nil {
		return nil, nil, perr
	}
	if rtr {
		return nil, func() error {
			c.mu.Lock()
			c.rtrReadPending = false
			c.mu.Unlock()
			if c.rtrAnswered != nil {
				close(c.rtrAnswered)
			}
			return nil
		}, nil
	}
	bufs, f := c.wire.ReadSink(o.id, d.TO()-o.sinkTO, n, c.sinkBufs)
	if f == ib.KeyUnknown {
		// The WQE was flushed: the QP is in error and going down; drop the data.
		return nil, nil, nil
	}
	if f != ib.KeyOK {
		e := ddpTagged(f, "rdma read sink")
		e.status = 0
		return nil, nil, e
	}
	c.sinkBufs = bufs
	c.fx = rxEffect{n: n, last: d.Last(), id: o.id}
	return bufs, c.readRespEffect, nil
}

// checkReadResponse checks a Read Response segment of n octets against the
// oldest outstanding request and returns it; rtr says the segment is the
// answer to the initiator's Read RTR instead.
func (c *Conn) checkReadResponse(d DDP, n uint64) (o outReq, rtr bool, perr *rxError) {
	c.mu.Lock()
	if c.rtrReadPending {
		c.mu.Unlock()
		if n != 0 || !d.Last() {
			return o, false, llpError(ECodeMPANoMatchingRTROption, fmt.Errorf("rdmap: the RTR read response carries %d octets", n))
		}
		return o, true, nil
	}
	if c.orqHead == len(c.orq) || c.orq[c.orqHead].atomic {
		c.mu.Unlock()
		return o, false, rdmapOperation(ECodeRDMAPUnexpectedOpcode, errors.New("rdmap: Read Response without an outstanding Read Request"))
	}
	o = c.orq[c.orqHead]
	c.mu.Unlock()
	if d.STag() != o.sinkSTag {
		return o, false, newRxError(LayerDDP, ETypeDDPTaggedBuffer, ECodeDDPTaggedInvalidSTag, ib.EventQPAccessErr,
			&header.Error{Header: "rdmap", Field: "read response STag", Value: uint64(d.STag()), Rel: "!=",
				LimitName: "the sink's", Limit: uint64(o.sinkSTag), Hex: 8, Err: ErrBadValue})
	}
	off := d.TO() - o.sinkTO
	if d.TO() < o.sinkTO || off != o.placed || n > o.length-o.placed || (d.Last() && o.placed+n != o.length) {
		return o, false, newRxError(LayerDDP, ETypeDDPTaggedBuffer, ECodeDDPTaggedBaseBounds, ib.EventQPAccessErr,
			&header.Error{Header: "rdmap", Field: "read response TO", Value: d.TO(), Hex: 1, Err: ErrBadValue,
				Reason: fmt.Sprintf("length %d outside the sink's next octets (TO 0x%x, %d of %d placed)", n, o.sinkTO, o.placed, o.length)})
	}
	return o, false, nil
}

// readResponsePlaced accounts for a placed Read Response segment
// (placeReadResponse's effect): its octets, and at the end the READ's completion.
func (c *Conn) readResponsePlaced() error {
	fx := c.fx
	c.readResponseDone(fx.n, fx.last)
	if fx.last {
		c.wire.CompleteSend(fx.id, ib.WCSuccess)
	}
	return nil
}

// readResponseDone counts n placed octets of the oldest outstanding READ, and
// retires it at its last segment.
func (c *Conn) readResponseDone(n uint64, last bool) {
	c.mu.Lock()
	c.orq[c.orqHead].placed += n
	if last {
		c.orq[c.orqHead] = outReq{}
		c.orqHead++
		if c.orqHead == len(c.orq) {
			c.orq, c.orqHead = c.orq[:0], 0
		}
	}
	c.mu.Unlock()
}

func (c *Conn) placeSend(h *rxHdr, d DDP, n uint64) ([][]byte, func() error, *rxError) {
	q := &c.rq[QueueSend]
	last := d.Last()
	if c.awaitRTR != 0 {
		if c.awaitRTR != RTRZeroLength || h.op != OpSend || n != 0 || !last || q.msn != 1 {
			return nil, nil, c.badRTR(h)
		}
		return nil, func() error { q.msn++; c.rtrReceived(); return nil }, nil
	}
	if d.MO() == 0 {
		if _, ok := c.wire.BeginRecv(); !ok {
			return nil, nil, ddpUntagged(ECodeDDPUntaggedNoBuffer, fmt.Errorf("ddp: queue 0 MSN %d: no receive WR posted", d.MSN()))
		}
	}
	bufs, st := c.wire.RecvBuffers(uint64(d.MO()), n, c.recvBufs)
	if st != ib.WCSuccess {
		return nil, nil, recvBufError(d, uint64(d.MO())+n, st)
	}
	c.recvBufs = bufs
	c.fx = rxEffect{n: n, last: last, op: h.op, inv: RDMAP(d).InvalidateSTag()}
	return bufs, c.sendEffect, nil
}

// recvBufError is the error for a Send segment whose receive WR's memory
// (RecvBuffers, DeliverRecv) failed with st: the message has at least end
// octets.
func recvBufError(d DDP, end uint64, st ib.WCStatus) *rxError {
	if st == ib.WCLocLenErr {
		e := ddpUntagged(ECodeDDPUntaggedTooLong, fmt.Errorf("ddp: queue 0 MSN %d: message of at least %d octets too long for the receive WR",
			d.MSN(), end))
		e.status = ib.WCLocLenErr
		return e
	}
	e := newRxError(LayerRDMAP, ETypeRDMAPLocalCatastrophic, ECodeRDMAPLocalCatastrophic, ib.EventQPFatal,
		fmt.Errorf("ddp: queue 0 MSN %d: receive WR: %s", d.MSN(), st))
	e.status = st
	return e
}

// cannotInvalidate is the error for a Send with Invalidate whose STag the
// receiver may not invalidate (EndRecv's, DeliverRecv's fault f).
func cannotInvalidate(inv uint32, f ib.KeyFault) *rxError {
	e := newRxError(LayerRDMAP, ETypeRDMAPRemoteProtection, ECodeRDMAPCannotInvalidate, ib.EventQPAccessErr,
		fmt.Errorf("rdmap: send with invalidate: STag 0x%08x: %s", inv, f))
	e.status = ib.WCRemInvReqErr
	return e
}

// sendPlaced accounts for a placed Send segment (placeSend's effect): the
// message offset, and at its end the receive completion.
func (c *Conn) sendPlaced() error {
	fx := c.fx
	q := &c.rq[QueueSend]
	q.mo += uint32(fx.n)
	if !fx.last {
		return nil
	}
	total := q.mo
	q.msn++
	q.mo = 0
	f := c.wire.EndRecv(ib.RecvCompletion{ByteLen: total, Opcode: ib.WCRecv, Solicited: fx.op.Solicited(),
		Invalidate: fx.op.Invalidates(), InvalidateRKey: fx.inv})
	if f != ib.KeyOK {
		return cannotInvalidate(fx.inv, f)
	}
	return nil
}

func (c *Conn) placeImmediate(h *rxHdr, d DDP) ([][]byte, func() error, *rxError) {
	if c.awaitRTR != 0 {
		return nil, nil, c.badRTR(h)
	}
	if _, ok := c.wire.BeginRecv(); !ok {
		return nil, nil, ddpUntagged(ECodeDDPUntaggedNoBuffer, fmt.Errorf("ddp: queue 0 MSN %d: no receive WR for the immediate data", d.MSN()))
	}
	c.fx = rxEffect{op: h.op, imm: uint32(ImmediateData(h.opHdr).Value())}
	return nil, c.immEffect, nil
}

// immediatePlaced completes the receive WR an Immediate Data message consumes
// (placeImmediate's effect), with the length of the Write before it.
func (c *Conn) immediatePlaced() error {
	c.rq[QueueSend].msn++
	n := c.lastWriteLen
	c.lastWriteLen = 0
	c.wire.EndRecv(ib.RecvCompletion{ByteLen: uint32(n), Opcode: ib.WCRecvRDMAWithImm, HasImm: true,
		Imm: c.fx.imm, Solicited: c.fx.op.Solicited()})
	return nil
}

func (c *Conn) placeAtomicResponse(h *rxHdr) ([][]byte, func() error, *rxError) {
	if c.awaitRTR != 0 {
		return nil, nil, c.badRTR(h)
	}
	a := AtomicResponse(h.opHdr)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.orqHead == len(c.orq) || !c.orq[c.orqHead].atomic {
		return nil, nil, rdmapOperation(ECodeRDMAPUnexpectedOpcode, errors.New("rdmap: Atomic Response without an outstanding Atomic Request"))
	}
	o := c.orq[c.orqHead]
	id := binary.BigEndian.Uint32(a)
	if id != o.reqID {
		return nil, nil, rdmapOperation(ECodeRDMAPUnexpectedOpcode, &header.Error{Header: "atomic", Field: "response's request ID",
			Value: uint64(id), Rel: "!=", LimitName: "expected", Limit: uint64(o.reqID), Err: ErrBadValue})
	}
	c.fx = rxEffect{id: o.id, orig: a.OriginalValue()}
	return nil, c.atomicRespEffect, nil
}

// atomicResponsePlaced retires the oldest outstanding request, the Atomic
// Request an Atomic Response answers, and completes its WR
// (placeAtomicResponse's effect).
func (c *Conn) atomicResponsePlaced() error {
	c.rq[QueueAtomicResponse].msn++
	c.mu.Lock()
	c.orq[c.orqHead] = outReq{}
	c.orqHead++
	if c.orqHead == len(c.orq) {
		c.orq, c.orqHead = c.orq[:0], 0
	}
	c.mu.Unlock()
	c.wire.CompleteAtomic(c.fx.id, c.fx.orig)
	return nil
}

// headerOnly executes a message that is all headers: a Read Request, an Atomic
// Request or a Terminate (place's effect for them).
func (c *Conn) headerOnly() error {
	h := c.fx.h
	switch h.op {
	case OpReadRequest:
		return c.readRequest(h)
	case OpAtomicRequest:
		return c.atomicRequest(h)
	}
	return c.peerTerminate(h)
}

// readRequest executes an RDMA Read Request (RFC 5040 §4.4, §5.1): check the Data
// Source STag for the whole range and the IRD, and queue the response; its data is
// read from the region (through the STag again) as the writer frames it.
func (c *Conn) readRequest(h *rxHdr) error {
	rr := ReadRequest(h.opHdr)
	size := uint64(rr.Size())
	if c.awaitRTR != 0 {
		if c.awaitRTR != RTRRead || size != 0 {
			return c.badRTR(h)
		}
		c.rtrReceived()
	}
	if _, f := c.wire.RemoteBuffer(rr.SourceSTag(), rr.SourceTO(), size, ib.AccessRemoteRead); f != ib.KeyOK {
		e := rdmapProtection(f, fmt.Sprintf("rdma read request: source STag 0x%08x TO 0x%x size %d",
			rr.SourceSTag(), rr.SourceTO(), size))
		e.rdma = true
		return e
	}
	c.mu.Lock()
	if c.irdUsed >= c.neg.IRD {
		c.mu.Unlock()
		// RFC 5040 §5.4 / RFC 5041: each inbound Read is one of the IRD buffers of
		// queue 1; one more is "no buffer available".
		e := ddpUntagged(ECodeDDPUntaggedNoBuffer, fmt.Errorf("rdmap: read request beyond IRD %d", c.neg.IRD))
		e.rdma = true
		return e
	}
	c.irdUsed++
	c.respQ = append(c.respQ, inResp{sinkSTag: rr.SinkSTag(), sinkTO: rr.SinkTO(),
		srcSTag: rr.SourceSTag(), srcTO: rr.SourceTO(), size: size})
	c.mu.Unlock()
	c.rq[QueueReadRequest].msn++
	c.rx.kickPending = true
	return nil
}

// atomicRequest executes an RFC 7306 Atomic Request at once, under the engine's
// lock, and queues its response (which shares the IRD with Read Responses).
func (c *Conn) atomicRequest(h *rxHdr) error {
	if c.awaitRTR != 0 {
		return c.badRTR(h)
	}
	a := AtomicRequest(h.opHdr)
	args := ib.AtomicArgs{RKey: a.RemoteSTag(), VA: a.RemoteTO(), AddSwap: a.AddSwapData(), AddMask: a.AddSwapMask(),
		Compare: a.CompareData(), CmpMask: a.CompareMask()}
	switch a.Opcode() {
	case AtomicFetchAdd:
		args.Op = ib.AtomicOpFetchAdd
	case AtomicSwap:
		args.Op = ib.AtomicOpSwap
	case AtomicCompareSwap:
		args.Op = ib.AtomicOpCompareSwap
	default:
		return rdmapOperation(ECodeRDMAPUnspecified, &header.Error{Header: "atomic", Field: "operation",
			Value: uint64(a.Opcode()), Reason: a.Opcode().String() + " not supported", Err: ErrBadOpcode})
	}
	c.mu.Lock()
	full := c.irdUsed >= c.neg.IRD
	c.mu.Unlock()
	if full {
		return ddpUntagged(ECodeDDPUntaggedNoBuffer, fmt.Errorf("atomic: request beyond IRD %d", c.neg.IRD))
	}
	orig, f := c.wire.Atomic(args)
	if f != ib.KeyOK {
		// RFC 7306 §8 reuses RFC 5040's Remote Protection errors for the target; a
		// misaligned TO reports as a bounds violation.
		return rdmapProtection(f, fmt.Sprintf("atomic %s: STag 0x%08x TO 0x%x", a.Opcode(), args.RKey, args.VA))
	}
	c.mu.Lock()
	c.irdUsed++
	c.respQ = append(c.respQ, inResp{atomic: true, reqID: a.RequestID(), orig: orig})
	c.mu.Unlock()
	c.rq[QueueReadRequest].msn++
	c.rx.kickPending = true
	return nil
}

// peerTerminate handles the peer's Terminate message.
func (c *Conn) peerTerminate(h *rxHdr) error {
	c.rq[QueueTerminate].msn++
	c.cnt.terminatesReceived.Add(1)
	t, err := ParseTerminate(h.opHdr)
	if err != nil {
		return &TerminateError{Layer: LayerRDMAP, EType: ETypeRDMAPRemoteOperation, Code: ECodeRDMAPUnspecified, Err: err}
	}
	return &TerminateError{Layer: t.Layer(), EType: t.EType(), Code: t.ErrorCode()}
}

// badRTR is the error for a first FPDU that is not the negotiated RTR message
// (RFC 6581 §9: No Matching RTR Option).
func (c *Conn) badRTR(h *rxHdr) *rxError {
	what := "a Read Response"
	if h != nil {
		what = h.op.String()
	}
	return llpError(ECodeMPANoMatchingRTROption, fmt.Errorf("mpa: the first FPDU is %s, not the %s RTR", what, c.awaitRTR))
}

// rtrReceived opens the gate of the responder's writer.
func (c *Conn) rtrReceived() {
	c.awaitRTR = 0
	if c.rtrGate != nil {
		close(c.rtrGate)
	}
	c.kickWriter()
}

// statusForTerminate maps a received Terminate to the completion status of the
// oldest outstanding send WQE (RFC 5040 §8: the Terminate is about the stream's
// traffic in order).
func statusForTerminate(e *TerminateError) ib.WCStatus {
	switch {
	case e.Layer == LayerRDMAP && e.EType == ETypeRDMAPRemoteProtection, e.Layer == LayerDDP && e.EType == ETypeDDPTaggedBuffer:
		return ib.WCRemAccessErr
	case e.Layer == LayerDDP && e.EType == ETypeDDPUntaggedBuffer:
		return ib.WCRemInvReqErr
	}
	return ib.WCRemOpErr
}

// reader is the connection's receiving goroutine.
func (c *Conn) reader() {
	defer c.exited()
	var h rxHdr
	for !c.failed.Load() {
		err := c.readFPDU(&h)
		if err == nil {
			continue
		}
		var re *rxError
		var te *TerminateError
		switch {
		case errors.As(err, &re):
			c.localError(re, &h)
		case errors.As(err, &te):
			c.fail(te, nil)
			c.wire.FailOldest(statusForTerminate(te), ib.EventQPFatal, true)
		case err == errOrderlyEOF:
			// The QP enters the error state when the writer has stopped
			// (start): a WR the writer has just written, which the peer
			// may have answered before closing, completes with success
			// rather than being flushed (seen with perf's last message).
			c.fail(ErrPeerClosed, nil)
		default:
			c.lost(err)
		}
		break
	}
	c.rx.release()
	c.drain()
}

// drain reads and drops what the peer still sends until it closes or the linger
// deadline (armed by fail) passes, so that our Terminate and FIN are not lost to a
// reset caused by unread data.
func (c *Conn) drain() {
	var b [4096]byte
	for {
		if _, err := c.nc.Read(b[:]); err != nil {
			return
		}
	}
}
