package iwarp

import (
	"encoding/binary"
	"net"

	ib "github.com/softrdma/softrdma/ibtransport"
)

// This file is the send path: the writer goroutine of a connection turns send WQEs,
// Read and Atomic Responses and Terminates into FPDUs and writes a batch of them
// with one writev: net.Buffers{header, payload straight from the registered memory,
// trailer, ...}.WriteTo(conn). Headers, pads, CRCs and markers live in a
// fixed-size arena; payload octets are never copied (the one exception is the
// small inline-data copy the engine makes at NextSend).

// MULPDU returns the largest ULPDU whose FPDU, with markers if markers is set, fits
// one TCP segment of emss octets (RFC 5044 §5.1 sizing: MULPDU = EMSS - (6 +
// (EMSS mod 4)) without markers, EMSS - (6 + 4*ceil(EMSS/512) + (EMSS mod 4))
// with), clamped to [minMULPDU, MaxULPDULen]. Linux siw's FPDUs follow the first
// rule: ULPDUs of 1442 octets on a 1448-octet MSS (siw-write-bw.pcap).
func MULPDU(emss int, markers bool) int {
	u := emss - (6 + emss%4)
	if markers {
		u -= 4 * ((emss + MarkerInterval - 1) / MarkerInterval)
	}
	return min(max(u, minMULPDU), MaxULPDULen)
}

// minMULPDU keeps room for the longest header (an Atomic Request) and some payload
// when the MSS is tiny or unknown.
const minMULPDU = 256

// Batch limits of the writer: an arena that never reallocates while a batch refers
// to it, and bounds on the FPDUs and octets of one writev.
const (
	txArenaSize = 64 << 10
	txFPDUArena = 1024 // worst case of one FPDU: headers, pad, CRC, and 4 octets per 508 with markers
	txMaxFPDUs  = 128
	txMaxBytes  = 1 << 20
)

// txSendBatch is how many send WQEs the writer takes from the engine per
// acquisition of its lock (Wire.NextSends).
const txSendBatch = 16

// txState is the writer goroutine's framing state.
type txState struct {
	pos     uint64    // stream octets since the origin (the octet after our start frame)
	msn     [4]uint32 // next MSN per untagged queue
	markers bool
	crc     bool
	mulpdu  int
	obs     StreamObserver

	iov       net.Buffers
	iovBack   [][]byte
	arena     []byte
	arenaTail bool // the last iov entry ends at the arena's end (and may grow)
	bytes     int
	fpdus     int

	fcrc    uint32 // the CRC of the FPDU being framed
	started bool   // its ULPDU_Length octets were framed
	hdrPos  uint64 // their stream position

	// What completes once the batch is written.
	doneWQEs []uint64
	scratch  [][]byte
	hdr      [FPDUHeaderLen + DDPUntaggedHeaderLen + AtomicRequestLen]byte
}

func newTxState(neg *Negotiated, obs StreamObserver) txState {
	t := txState{markers: neg.SendMarkers, crc: neg.CRC, mulpdu: neg.MULPDU, obs: obs,
		arena: make([]byte, 0, txArenaSize)}
	for i := range t.msn {
		t.msn[i] = 1 // RFC 5041 §5.3: the first message of each queue has MSN 1
	}
	return t
}

func (t *txState) reset() {
	t.iovBack = t.iovBack[:0]
	t.arena = t.arena[:0]
	t.arenaTail = false
	t.bytes, t.fpdus = 0, 0
	t.doneWQEs = t.doneWQEs[:0]
}

func (t *txState) empty() bool { return t.fpdus == 0 }

// room reports whether another FPDU fits the batch.
func (t *txState) room() bool {
	return t.fpdus < txMaxFPDUs && t.bytes < txMaxBytes && len(t.arena)+txFPDUArena <= cap(t.arena)
}

// emitArena copies b into the arena and the iov list (extending the last entry if
// it is the arena's tail).
func (t *txState) emitArena(b []byte) {
	start := len(t.arena)
	t.arena = append(t.arena, b...)
	if t.arenaTail {
		last := &t.iovBack[len(t.iovBack)-1]
		*last = (*last)[:len(*last)+len(b)]
		return
	}
	t.iovBack = append(t.iovBack, t.arena[start:len(t.arena):cap(t.arena)])
	t.arenaTail = true
}

// emitRef adds b to the iov list without copying it.
func (t *txState) emitRef(b []byte) {
	t.iovBack = append(t.iovBack, b)
	t.arenaTail = false
}

// marker frames an MPA marker at the current position (RFC 5044 §4.3): FPDUPTR is
// 0 before the FPDU's ULPDU_Length, else the octets back to it.
func (t *txState) marker() {
	var ptr uint64
	if t.started {
		ptr = t.pos - t.hdrPos
	}
	m := [MarkerLen]byte{0, 0, byte(ptr >> 8), byte(ptr)}
	if t.crc {
		t.fcrc = UpdateCRC32c(t.fcrc, m[:])
	}
	t.emitArena(m[:])
	t.pos += MarkerLen
	t.bytes += MarkerLen
}

// put frames FPDU octets: copied into the arena, or referenced (ref), with markers
// inserted where they fall.
func (t *txState) put(p []byte, ref bool) {
	for len(p) > 0 {
		if t.markers && t.pos%MarkerInterval == 0 {
			t.marker()
		}
		if !t.started {
			t.hdrPos, t.started = t.pos, true
		}
		k := len(p)
		if t.markers {
			k = min(k, MarkerInterval-int(t.pos%MarkerInterval))
		}
		if t.crc {
			t.fcrc = UpdateCRC32c(t.fcrc, p[:k])
		}
		if ref {
			t.emitRef(p[:k])
		} else {
			t.emitArena(p[:k])
		}
		t.pos += uint64(k)
		t.bytes += k
		p = p[k:]
	}
}

// txCopyMax is the longest payload fpdu copies into the arena instead of
// referencing it: the FPDUs of a batch of small messages are then one
// contiguous iovec for writev, not three each (header, payload, trailer);
// the 64 B WRITE rate row spent 28% of its CPU in writev, with 384 iovecs
// per batch of 128 FPDUs. With the headers, pad, CRC and markers such an FPDU
// stays within txFPDUArena.
const txCopyMax = 512

// fpdu frames one FPDU: hdr holds ULPDU_Length, the DDP/RDMAP header and any RDMAP
// header after it; payload is referenced (copied if at most txCopyMax octets).
// The CRC (RFC 5044 §4.4, little-endian as siw sends it, see fpdu.go) is
// computed over everything framed since the FPDU began, markers included.
func (t *txState) fpdu(hdr []byte, payload [][]byte) { t.frame(hdr, payload, true) }

// fpduCopy is fpdu with the payload copied into the arena: octets that do not
// outlive the batch (a WQE's inline copy, which the next NextSend overwrites).
func (t *txState) fpduCopy(hdr []byte, payload [][]byte) { t.frame(hdr, payload, false) }

// frame frames one FPDU, its payload referenced (ref) or copied.
func (t *txState) frame(hdr []byte, payload [][]byte, ref bool) {
	ulpdu := len(hdr) - FPDUHeaderLen
	for _, p := range payload {
		ulpdu += len(p)
	}
	binary.BigEndian.PutUint16(hdr, uint16(ulpdu))
	t.fcrc, t.started = 0, false
	t.put(hdr, false)
	ref = ref && ulpdu-len(hdr)+FPDUHeaderLen > txCopyMax
	for _, p := range payload {
		t.put(p, ref)
	}
	t.put(zeroPad[:PadLen(ulpdu)], false)
	if t.markers && t.pos%MarkerInterval == 0 {
		t.marker() // between the pad and the CRC
	}
	var c [CRCLen]byte
	if t.crc {
		binary.LittleEndian.PutUint32(c[:], t.fcrc)
	}
	t.emitArena(c[:])
	t.pos += CRCLen
	t.bytes += CRCLen
	t.fpdus++
}

// header encodes the DDP/RDMAP header of f after the ULPDU_Length octets and
// returns the header buffer up to its end.
func (t *txState) header(f *RDMAPFields) []byte {
	n, _ := f.Encode(t.hdr[FPDUHeaderLen:])
	return t.hdr[:FPDUHeaderLen+n]
}

// untagged returns the header of an untagged message on its queue, taking the
// queue's next MSN when last.
func (t *txState) untagged(op Opcode, mo uint32, last bool, inv uint32) []byte {
	q := op.QueueNumber()
	f := RDMAPFields{Opcode: op, Last: last, MSN: t.msn[q], MO: mo, InvalidateSTag: inv}
	if last {
		t.msn[q]++
	}
	return t.header(&f)
}

// write writes the batch with one writev (net.Buffers.WriteTo) and resets it.
func (t *txState) write(nc net.Conn) error {
	if t.obs != nil {
		for _, b := range t.iovBack {
			t.obs.Sent(b)
		}
	}
	t.iov = t.iovBack
	_, err := t.iov.WriteTo(nc)
	return err
}

// writeBatch writes the framed batch and counts its FPDUs and octets.
func (c *Conn) writeBatch() error {
	t := &c.tx
	fpdus, n := t.fpdus, t.bytes
	if err := t.write(c.nc); err != nil {
		return err
	}
	c.cnt.packetsOut.Add(uint64(fpdus))
	c.cnt.bytesOut.Add(uint64(n))
	return nil
}

// txMsg is the send WQE being framed, which may take several batches.
type txMsg struct {
	active bool
	w      *ib.SendWork // in Conn.sends
	off    uint64       // payload octets framed
	di     int          // cursor into w.Data
	doff   int
	imm    bool // WRITE_WITH_IMM: the Immediate Data message is still to frame
}

// take returns the next n payload octets of the message as slices of w.Data.
func (m *txMsg) take(n int, dst [][]byte) [][]byte {
	dst = dst[:0]
	for n > 0 && m.di < len(m.w.Data) {
		d := m.w.Data[m.di][m.doff:]
		k := min(n, len(d))
		dst = append(dst, d[:k])
		n -= k
		m.doff += k
		if m.doff == len(m.w.Data[m.di]) {
			m.di, m.doff = m.di+1, 0
		}
	}
	return dst
}

// sendOpcode returns the RDMAP opcode of a SEND WQE.
func sendOpcode(w *ib.SendWork) Opcode {
	inv := w.Opcode == ib.WRSendWithInv
	switch {
	case inv && w.Solicited:
		return OpSendSEInvalidate
	case inv:
		return OpSendInvalidate
	case w.Solicited:
		return OpSendSE
	}
	return OpSend
}

// frameMsg frames as much of the current WQE as the batch takes and reports
// whether the WQE is fully framed (it is then in t.doneWQEs, unless it waits for a
// response: READ and atomics, whose ORQ entry c.addORQ records).
func (c *Conn) frameMsg(m *txMsg) bool {
	t := &c.tx
	w := m.w
	switch w.Opcode {
	case ib.WRRDMARead, ib.WRRDMAReadWithInv:
		if !t.room() {
			return false
		}
		c.addORQ(outReq{id: w.ID, sinkSTag: w.SinkKey, sinkTO: w.SinkAddr, length: w.Length})
		f := RDMAPFields{Opcode: OpReadRequest, Last: true, MSN: t.msn[QueueReadRequest]}
		t.msn[QueueReadRequest]++
		h := t.header(&f)
		rr := ReadRequestFields{SinkSTag: w.SinkKey, SinkTO: w.SinkAddr, Size: uint32(w.Length),
			SourceSTag: w.RKey, SourceTO: w.RemoteAddr}
		rr.Encode(t.hdr[len(h):])
		t.fpdu(t.hdr[:len(h)+ReadRequestLen], nil)
		return true
	case ib.WRAtomicFetchAdd, ib.WRAtomicCmpAndSwp:
		if !t.room() {
			return false
		}
		c.reqID++
		c.addORQ(outReq{id: w.ID, atomic: true, reqID: c.reqID})
		f := RDMAPFields{Opcode: OpAtomicRequest, Last: true, MSN: t.msn[QueueReadRequest]}
		t.msn[QueueReadRequest]++
		h := t.header(&f)
		a := AtomicRequest(t.hdr[len(h) : len(h)+AtomicRequestLen])
		if w.Opcode == ib.WRAtomicFetchAdd {
			a.SetOpcode(AtomicFetchAdd)
			a.SetAddSwapData(w.CompareAdd)
			a.SetAddSwapMask(0)
			a.SetCompareData(0)
			a.SetCompareMask(0)
		} else {
			a.SetOpcode(AtomicCompareSwap)
			a.SetAddSwapData(w.Swap)
			a.SetAddSwapMask(^uint64(0))
			a.SetCompareData(w.CompareAdd)
			a.SetCompareMask(^uint64(0))
		}
		a.SetRequestID(c.reqID)
		a.SetRemoteSTag(w.RKey)
		a.SetRemoteTO(w.RemoteAddr)
		t.fpdu(t.hdr[:len(h)+AtomicRequestLen], nil)
		return true
	}
	tagged := w.Opcode == ib.WRRDMAWrite || w.Opcode == ib.WRRDMAWriteWithImm
	hl := DDPUntaggedHeaderLen
	if tagged {
		hl = DDPTaggedHeaderLen
	}
	maxPay := uint64(t.mulpdu - hl)
	// An inline WQE's octets are the SendWork's own copy, which the next
	// NextSend into it overwrites while this batch may still refer to them:
	// they go into the arena (at most the Context's MaxInlineData octets,
	// 512 or fewer, well within the arena).
	inline := w.InlineCopy()
	for !m.imm {
		n := min(maxPay, w.Length-m.off)
		if !t.room() || (inline && len(t.arena)+txFPDUArena+int(n) > cap(t.arena)) {
			return false
		}
		last := m.off+n == w.Length
		var h []byte
		if tagged {
			f := RDMAPFields{Opcode: OpWrite, Last: last, STag: w.RKey, TO: w.RemoteAddr + m.off}
			h = t.header(&f)
		} else {
			h = t.untagged(sendOpcode(w), uint32(m.off), last, w.InvalidateRKey)
		}
		t.scratch = m.take(int(n), t.scratch)
		if inline {
			t.fpduCopy(h, t.scratch)
		} else {
			t.fpdu(h, t.scratch)
		}
		m.off += n
		if last {
			m.imm = w.Opcode == ib.WRRDMAWriteWithImm
			if !m.imm {
				t.doneWQEs = append(t.doneWQEs, w.ID)
				return true
			}
		}
	}
	// RFC 7306 §7: an RDMA Write with Immediate Data is the Write followed by an
	// Immediate Data message (8 octets on queue 0). softrdma carries the verbs'
	// 32-bit immediate in the low half, big-endian.
	if !t.room() {
		return false
	}
	op := OpImmediateData
	if w.Solicited {
		op = OpImmediateDataSE
	}
	h := t.untagged(op, 0, true, 0)
	ImmediateData(t.hdr[len(h) : len(h)+ImmediateDataLen]).SetValue(uint64(w.Imm))
	t.fpdu(t.hdr[:len(h)+ImmediateDataLen], nil)
	m.imm = false
	t.doneWQEs = append(t.doneWQEs, w.ID)
	return true
}

// frameRTR frames the initiator's RFC 6581 ready-to-receive message.
func (c *Conn) frameRTR() {
	t := &c.tx
	switch c.neg.RTR {
	case RTRWrite:
		f := RDMAPFields{Opcode: OpWrite, Last: true}
		t.fpdu(t.header(&f), nil)
	case RTRRead:
		c.mu.Lock()
		c.rtrReadPending = true
		c.mu.Unlock()
		f := RDMAPFields{Opcode: OpReadRequest, Last: true, MSN: t.msn[QueueReadRequest]}
		t.msn[QueueReadRequest]++
		h := t.header(&f)
		clear(t.hdr[len(h) : len(h)+ReadRequestLen])
		t.fpdu(t.hdr[:len(h)+ReadRequestLen], nil)
	case RTRZeroLength:
		t.fpdu(t.untagged(OpSend, 0, true, 0), nil)
	}
}

// frameResponses frames queued Read and Atomic Responses. It returns a local error
// if a Read Response's source no longer passes the STag check.
func (c *Conn) frameResponses() *rxError {
	t := &c.tx
	maxPay := uint64(t.mulpdu - DDPTaggedHeaderLen)
	for t.room() {
		c.mu.Lock()
		if c.respHead == len(c.respQ) {
			c.mu.Unlock()
			return nil
		}
		r := c.respQ[c.respHead] // the writer alone advances off
		c.mu.Unlock()
		if r.atomic {
			f := RDMAPFields{Opcode: OpAtomicResponse, Last: true, MSN: t.msn[QueueAtomicResponse]}
			t.msn[QueueAtomicResponse]++
			h := t.header(&f)
			a := AtomicResponse(t.hdr[len(h) : len(h)+AtomicResponseLen])
			binary.BigEndian.PutUint32(a, r.reqID)
			a.SetOriginalValue(r.orig)
			t.fpdu(t.hdr[:len(h)+AtomicResponseLen], nil)
			c.popResp()
			continue
		}
		for {
			n := min(maxPay, r.size-r.off)
			mem, f := c.wire.RemoteBuffer(r.srcSTag, r.srcTO+r.off, n, ib.AccessRemoteRead)
			if f != ib.KeyOK {
				// The region changed since the request was checked (RFC 5040 §6.4).
				e := rdmapProtection(f, "rdmap: read response source")
				return e
			}
			last := r.off+n == r.size
			hf := RDMAPFields{Opcode: OpReadResponse, Last: last, STag: r.sinkSTag, TO: r.sinkTO + r.off}
			t.scratch = append(t.scratch[:0], mem)
			if n == 0 {
				t.scratch = t.scratch[:0]
			}
			t.fpdu(t.header(&hf), t.scratch)
			r.off += n
			if last {
				c.popResp()
				break
			}
			if !t.room() {
				c.mu.Lock()
				c.respQ[c.respHead].off = r.off
				c.mu.Unlock()
				return nil
			}
		}
	}
	return nil
}

// popResp retires the head response, whose last FPDU is framed, and frees its
// IRD slot now: before the octets can reach the peer, which may issue its next
// Read as soon as it has the response (freeing the slot after the write returned
// was a race that rejected a well-behaved peer's Read beyond IRD).
func (c *Conn) popResp() {
	c.mu.Lock()
	c.respQ[c.respHead] = inResp{}
	c.respHead++
	if c.respHead == len(c.respQ) {
		c.respQ, c.respHead = c.respQ[:0], 0
	}
	c.irdUsed--
	c.mu.Unlock()
}

// frameTerminate frames a Terminate message (RFC 5040 §4.8, queue 2).
func (c *Conn) frameTerminate(tf *TerminateFields) {
	t := &c.tx
	h := t.untagged(OpTerminate, 0, true, 0)
	n, err := tf.Encode(t.hdr[len(h):])
	if err != nil { // a header that does not fit: send the error fields alone
		tf.DDPHeader, tf.RDMAHeader = nil, nil
		n, _ = tf.Encode(t.hdr[len(h):])
	}
	t.fpdu(t.hdr[:len(h)+n], nil)
}

// takeSends takes the next send WQEs from the engine into c.sends, growing
// it when the engine filled it (up to txSendBatch).
func (c *Conn) takeSends() {
	if c.sendsN == len(c.sends) && len(c.sends) < txSendBatch {
		c.sends = make([]ib.SendWork, min(txSendBatch, max(1, 4*len(c.sends))))
	}
	c.sendsHead, c.sendsN = 0, c.wire.NextSends(c.sends)
}

// writer is the connection's sending goroutine.
func (c *Conn) writer() {
	defer c.exited()
	t := &c.tx
	var m txMsg
	gate := c.rtrGate
	if c.initiator && c.neg.PeerToPeer {
		t.reset()
		c.frameRTR()
		if err := c.writeBatch(); err != nil {
			c.lost(err)
		}
	}
	for {
		if c.failed.Load() {
			c.mu.Lock()
			term := c.term
			c.term = nil
			c.mu.Unlock()
			if term != nil {
				t.reset()
				c.frameTerminate(term)
				if c.writeBatch() == nil {
					c.cnt.terminatesSent.Add(1)
				}
			}
			close(c.termWritten)
			c.closeWrite()
			return
		}
		if c.kickWrite.Swap(false) && !m.active {
			t.reset()
			c.frameKick()
			if err := c.writeBatch(); err != nil {
				c.lost(err)
			}
			continue
		}
		if gate != nil {
			select {
			case <-gate:
				gate = nil
			case <-c.kick:
			}
			continue
		}
		t.reset()
		if e := c.frameResponses(); e != nil {
			c.localError(e, nil)
			continue
		}
		for t.room() {
			if !m.active {
				if c.sendsHead == c.sendsN {
					c.takeSends()
					if c.sendsN == 0 {
						break
					}
				}
				m.w = &c.sends[c.sendsHead]
				c.sendsHead++
				m.active, m.off, m.di, m.doff, m.imm = true, 0, 0, 0, false
			}
			if !c.frameMsg(&m) {
				break
			}
			m.active = false
		}
		if t.empty() {
			if st := c.wire.State(); st != ib.QPStateRTS && st != ib.QPStateSQD {
				c.fail(ErrQPError, nil)
				continue
			}
			select {
			case <-c.wire.Wake():
			case <-c.kick:
			}
			continue
		}
		if err := c.writeBatch(); err != nil {
			c.lost(err)
			continue
		}
		// One lock for the batch's completions: CompleteSend per WQE was
		// 5-7% of the 64 B rate rows' CPU, a Context.mu round trip each.
		if len(t.doneWQEs) > 0 {
			c.wire.CompleteSends(t.doneWQEs)
		}
	}
}
