package ibtransport

import (
	"errors"
	"time"
)

// MaxTransportHeaderLen bounds the BTH plus extension headers of any packet the
// engine sends (an atomic request: BTH 12 + AtomicETH 28; RDMA WRITE Only with
// immediate: 12 + 16 + 4), rounded up.
const MaxTransportHeaderLen = 64

// MaxPacketLen is the longest IB transport packet (BTH .. pad) the engine sends:
// headers plus a 4096-byte payload. The ICRC is not included.
const MaxPacketLen = MaxTransportHeaderLen + 4096

// OutputPacket is one packet produced by Context.Output.
type OutputPacket struct {
	// Buf holds the packet at Buf[Offset:]: BTH, extension headers, payload and pad,
	// without ICRC. Buf[:Offset] is free headroom for the device's headers, and
	// cap(Buf)-len(Buf) is at least the batch's tailroom (for the ICRC).
	// If Payload is not nil, Buf[Offset:] holds the headers only.
	Buf []byte
	// Offset is where the BTH starts: the batch's headroom.
	Offset int
	// Payload, in a batch that gathers (OutputBatch.Gather), is the packet's
	// payload where it lies — slices of the registered memory regions the work
	// request names, or of its inline data — to be sent after Buf[Offset:] and
	// followed by Pad zero bytes, without a copy. The slices are valid until the
	// application reuses the memory: send them before Output is called again.
	// Only RC packets gather (an RC WQE completes on the ACK, after the send); a
	// UC or UD WQE completes as its packet is built, so its payload is copied.
	// Nil when the payload is in Buf (always, in a batch that does not gather).
	Payload [][]byte
	// Pad is the number of pad bytes after Payload (the BTH's PadCount).
	Pad int
	// AH is the destination address (the QP's path, or the UD WR's AH).
	AH *AddressHandle
	// SrcQPN is the sending QP (rxe derives the UDP source port from it).
	SrcQPN uint32
	// DestQPN is the destination QP, as in the BTH.
	DestQPN uint32
}

// Packet returns the IB transport packet: Buf[Offset:] (only its headers when
// Payload is set).
func (p *OutputPacket) Packet() []byte { return p.Buf[p.Offset:] }

// Len returns the IB transport packet's length: headers, payload and pad.
func (p *OutputPacket) Len() int {
	n := len(p.Buf) - p.Offset
	if p.Payload != nil {
		for _, s := range p.Payload {
			n += len(s)
		}
		n += p.Pad
	}
	return n
}

// OutputBatch is a caller-owned batch of packet buffers that Output fills. Its
// buffers are allocated once by NewOutputBatch and reused after Reset: filling a
// batch allocates nothing.
type OutputBatch struct {
	// Packets are the packets filled since the last Reset.
	Packets  []OutputPacket
	headroom int
	tailroom int
	bufs     [][]byte
	pieces   [][]byte // Gather: the Payload slices, perPkt per packet
	perPkt   int
}

// Gather makes the batch hand out payloads in place (OutputPacket.Payload)
// instead of copying them next to the headers, for a device whose endpoint
// sends a frame from several buffers (scatter/gather); a payload in more than
// maxPieces pieces is copied anyway. maxPieces 0 turns gathering off.
func (b *OutputBatch) Gather(maxPieces int) {
	b.perPkt = max(maxPieces, 0)
	b.pieces = nil
	if b.perPkt > 0 {
		b.pieces = make([][]byte, b.perPkt*len(b.bufs))
	}
}

// pieceSpace returns room for the next packet's payload slices, or nil when
// the batch copies payloads.
func (b *OutputBatch) pieceSpace() [][]byte {
	if b.perPkt == 0 {
		return nil
	}
	i := len(b.Packets) * b.perPkt
	return b.pieces[i : i : i+b.perPkt]
}

// NewOutputBatch returns a batch of up to capacity packets, each buffer with
// headroom bytes before the BTH and tailroom bytes after the longest packet.
func NewOutputBatch(capacity, headroom, tailroom int) *OutputBatch {
	if capacity < 1 {
		capacity = 1
	}
	b := &OutputBatch{
		Packets:  make([]OutputPacket, 0, capacity),
		headroom: headroom,
		tailroom: tailroom,
		bufs:     make([][]byte, capacity),
	}
	size := headroom + MaxPacketLen + tailroom
	mem := make([]byte, size*capacity)
	for i := range b.bufs {
		b.bufs[i] = mem[i*size : (i+1)*size : (i+1)*size]
	}
	return b
}

// Reset empties the batch, keeping its buffers (and dropping its references
// to payloads).
func (b *OutputBatch) Reset() {
	// The pieces used, and those of a packet begun but not added: clearing
	// all of them (46 KiB of slice headers for a device's batch) took 3.6% of
	// the CPU of softrdma bench's RoCE latency rows.
	clear(b.pieces[:min(len(b.pieces), (len(b.Packets)+1)*b.perPkt)])
	b.Packets = b.Packets[:0]
}

// Len returns the number of packets in the batch.
func (b *OutputBatch) Len() int { return len(b.Packets) }

// Cap returns the batch's capacity in packets.
func (b *OutputBatch) Cap() int { return len(b.bufs) }

// Full reports whether the batch has no free buffer.
func (b *OutputBatch) Full() bool { return len(b.Packets) == len(b.bufs) }

// Headroom returns the headroom of each buffer.
func (b *OutputBatch) Headroom() int { return b.headroom }

// space returns the buffer for the next packet, from the BTH on.
func (b *OutputBatch) space() []byte {
	buf := b.bufs[len(b.Packets)]
	return buf[b.headroom : b.headroom+MaxPacketLen]
}

// commit adds the next packet, n bytes long in its buffer, to the batch;
// payload, if not nil, is its payload in place, followed by pad bytes.
func (b *OutputBatch) commit(n int, payload [][]byte, pad int, ah *AddressHandle, src, dst uint32) {
	buf := b.bufs[len(b.Packets)]
	b.Packets = append(b.Packets, OutputPacket{
		Buf:     buf[:b.headroom+n],
		Offset:  b.headroom,
		Payload: payload,
		Pad:     pad,
		AH:      ah,
		SrcQPN:  src,
		DestQPN: dst,
	})
}

// InputMeta is what the device layer knows about a received packet besides its
// transport bytes.
type InputMeta struct {
	// HasGRH says that SGID, DGID and the traffic fields are set (always true on
	// RoCE, where the IP header stands for the GRH).
	HasGRH bool
	// SGID and DGID are the source and destination GIDs (IPv4-mapped IPv6
	// addresses for RoCEv2 over IPv4).
	SGID, DGID [16]byte
	// TrafficClass, FlowLabel and HopLimit come from the IP header.
	TrafficClass uint8
	FlowLabel    uint32
	HopLimit     uint8
	// GRH, if exactly 40 bytes long, is copied verbatim into the GRH area of a UD
	// receive buffer instead of a GRH built from the fields above. (rxe puts an
	// IPv4 header in the last 20 bytes of the area for RoCEv2 over IPv4; a device
	// that wants that builds it here.)
	GRH []byte
}

// DropReason says why Input dropped a packet.
type DropReason uint8

// Reasons for dropping a packet.
const (
	DropMalformed          DropReason = iota // the headers did not decode
	DropUnknownQP                            // no QP with the BTH's DestQP
	DropBadState                             // the QP's state does not accept it
	DropWrongService                         // the opcode is of another transport service
	DropPKey                                 // P_Key mismatch
	DropQKey                                 // UD Q_Key mismatch
	DropOutOfSequence                        // PSN gap (after the one NAK per gap, or UC)
	DropNoReceiveWQE                         // UD/UC: no receive WR posted
	DropTooLong                              // UD/UC: larger than the MTU or the receive buffer
	DropInvalidRequest                       // UD/UC: malformed request
	DropAccess                               // UC: R_Key violation
	DropUnexpectedResponse                   // a response or ACK that matches no outstanding request
	DropDuplicate                            // a duplicate request that cannot be answered again
	DropResources                            // the responder's response queue is full
	DropSourceAddress                        // RC/UC: the source GID is not the QP's destination GID
	numDropReasons
)

var dropReasonNames = [numDropReasons]string{
	"malformed", "unknown QP", "bad QP state", "wrong transport service", "P_Key mismatch",
	"Q_Key mismatch", "out of sequence", "no receive WQE", "too long", "invalid request",
	"access violation", "unexpected response", "unanswerable duplicate", "no responder resources",
	"source address mismatch",
}

// String names the reason.
func (r DropReason) String() string {
	if r < numDropReasons {
		return dropReasonNames[r]
	}
	return "unknown"
}

// ErrDropped is matched (errors.Is) by every *DropError.
var ErrDropped = errors.New("packet dropped")

// DropError is returned by Input for a packet it dropped. The values are shared:
// do not modify them.
type DropError struct{ Reason DropReason }

// Error reads "packet dropped: P_Key mismatch".
func (e *DropError) Error() string { return "packet dropped: " + e.Reason.String() }

// Is makes errors.Is(err, ErrDropped) true.
func (e *DropError) Is(target error) bool { return target == ErrDropped }

var dropErrors = func() (a [numDropReasons]*DropError) {
	for i := range a {
		a[i] = &DropError{Reason: DropReason(i)}
	}
	return
}()

// QPCounters count a QP's traffic and its protocol events. On an external QP
// (iWARP) a packet is an FPDU and its bytes run from ULPDU_Length to the CRC,
// markers included; the IB-specific counters stay zero.
type QPCounters struct {
	PacketsOut uint64
	BytesOut   uint64 // transport bytes (BTH .. pad)
	PacketsIn  uint64
	BytesIn    uint64
	// TerminatesSent and TerminatesReceived count iWARP Terminate messages.
	TerminatesSent     uint64
	TerminatesReceived uint64
	// Retransmissions counts request packets sent again (go-back-N).
	Retransmissions uint64
	// Timeouts counts expiries of the retransmission timer.
	Timeouts uint64
	// Probes counts tail-loss probes: the last packet sent again, with
	// AckReq, after two round trips without an ACK (not in Retransmissions).
	Probes uint64
	// AcksSent and AcksReceived count Acknowledge packets with an ACK syndrome.
	AcksSent     uint64
	AcksReceived uint64
	// NAKsSent and NAKsReceived count NAKs by NAK code (IBTA Table 43; index 0 is
	// PSN sequence error, 1 invalid request, 2 remote access, 3 remote operational,
	// 4 invalid RD request).
	NAKsSent     [5]uint64
	NAKsReceived [5]uint64
	// RNRNAKsSent and RNRNAKsReceived count RNR NAKs.
	RNRNAKsSent     uint64
	RNRNAKsReceived uint64
	// DuplicateRequests counts duplicate requests the responder answered or dropped.
	DuplicateRequests uint64
	// DuplicateResponses counts responses for PSNs already acknowledged.
	DuplicateResponses uint64
	// Drops counts dropped packets by reason.
	Drops [numDropReasons]uint64
}

// Counters returns a snapshot of the QP's counters.
func (qp *QP) Counters() QPCounters {
	qp.ctx.mu.Lock()
	defer qp.ctx.mu.Unlock()
	return qp.countersLocked()
}

// Input processes one received packet: pkt runs from the BTH to the end of the pad
// (the RoCE layer checked and removed the ICRC). Input copies what it needs; pkt
// may be reused when it returns. The packet's effects (data placed, completions,
// ACKs queued for Output) happen before Input returns. It returns a
// *header.Error for a packet that does not decode, a *DropError for one it dropped,
// and nil otherwise (including duplicates it answered).
func (c *Context) Input(now time.Time, pkt []byte, meta InputMeta) error {
	var p Packet
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counters.PacketsIn++
	if err := p.Decode(pkt); err != nil {
		c.counters.Malformed++
		return err
	}
	if p.BTH.DestQP() == MulticastQPN {
		return c.inputMulticast(now, &p, &meta, len(pkt))
	}
	qp := c.qps[p.BTH.DestQP()]
	if qp == nil || qp.wire != nil { // an external QP takes no IB packets
		c.counters.UnknownQP++
		return dropErrors[DropUnknownQP]
	}
	qp.counters.PacketsIn++
	qp.counters.BytesIn += uint64(len(pkt))
	if r, dropped := qp.input(now, &p, &meta); dropped {
		qp.counters.Drops[r]++
		return dropErrors[r]
	}
	return nil
}

// input dispatches a decoded packet to the responder (requests) or the completer
// (responses). It returns a reason and true for a dropped packet.
func (qp *QP) input(now time.Time, p *Packet, meta *InputMeta) (DropReason, bool) {
	switch qp.state {
	case QPStateRTR, QPStateRTS, QPStateSQD, QPStateSQE:
	default:
		return DropBadState, true // IBTA 10.3.1: RESET, INIT and ERR drop everything
	}
	op := p.Opcode()
	if !serviceMatches(qp.typ, op.Service()) {
		return DropWrongService, true
	}
	if !qp.fromPeer(meta) {
		return DropSourceAddress, true
	}
	if (p.BTH.PKey()^qp.pkey)&0x7fff != 0 || (p.BTH.PKey()&0x7fff) == 0 {
		return DropPKey, true // IBTA 9.6 / 10.9: P_Key check (base values must match)
	}
	if qp.state == QPStateRTR && !qp.commEst {
		qp.commEst = true
		qp.ctx.postEvent(AsyncEvent{Type: EventCommEst, QP: qp})
	}
	if op.IsResponse() {
		if qp.typ != QPTypeRC || qp.state == QPStateRTR {
			return DropBadState, true
		}
		return qp.complete(now, p)
	}
	switch qp.typ {
	case QPTypeRC:
		return qp.rcRequest(p)
	case QPTypeUC:
		return qp.ucRequest(p)
	default:
		return qp.udRequest(p, meta)
	}
}

// fromPeer reports whether a packet may be for the QP as far as its source
// address goes: a connected (RC or UC) QP takes packets only from the GID of
// its primary path: the packet's SGID (on RoCEv2 the IP source) must be the
// DGID of the QP's address handle, as Linux rxe's check_addr requires of the
// IP source against the address vector's destination. Without the check any host that
// guesses a QPN and PSN could WRITE into a registered region. A packet
// without a GRH (no RoCE device delivers one) and a QP without an address
// handle are not checked; UD takes packets from anyone.
func (qp *QP) fromPeer(meta *InputMeta) bool {
	if qp.typ != QPTypeRC && qp.typ != QPTypeUC {
		return true
	}
	if !meta.HasGRH || qp.ah == nil {
		return true
	}
	return meta.SGID == qp.ah.DGID
}

// serviceMatches reports whether an opcode's service is the QP's.
func serviceMatches(t QPType, s ServiceType) bool {
	switch t {
	case QPTypeRC:
		return s == ServiceRC
	case QPTypeUC:
		return s == ServiceUC
	case QPTypeUD, QPTypeGSI:
		return s == ServiceUD
	}
	return false
}

// Output appends packets to send to out until it is full or no QP has anything
// to send, and returns how many it appended. It first runs the timers that expired
// by now (retransmission, RNR waits). QPs take turns, at most OutputBurst packets
// each per turn; a QP that was cut short by a full batch continues on the next call.
func (c *Context) Output(now time.Time, out *OutputBatch) int {
	return c.OutputSealed(now, out, nil)
}

// OutputSealed is Output, and then, if any packet was appended, seal(first)
// with out.Packets[first:] the packets appended, before the Context's lock is
// released. A device whose batch gathers payloads in place
// (OutputBatch.Gather) frames them in seal: the payload it reads there (for
// the ICRC, say) is a work request's memory, which the application may reuse
// once the request completes, and no request completes while seal runs (a
// retransmitted packet's request may complete as soon as the lock is free,
// when the ACK of its first transmission arrives). seal must not call into
// the engine.
func (c *Context) OutputSealed(now time.Time, out *OutputBatch, seal func(first int)) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastOutput = now
	c.runTimers(now)
	start := out.Len()
	burst := c.cfg.OutputBurst
	for !out.Full() && c.activeHead < len(c.active) {
		qp := c.active[c.activeHead]
		c.active[c.activeHead] = nil
		c.activeHead++
		qp.inActive = false
		if qp.dead {
			continue
		}
		n := 0
		for n < burst && !out.Full() && qp.outputOne(now, out) {
			n++
		}
		if (n == burst || out.Full()) && !qp.inActive {
			qp.inActive = true
			c.active = append(c.active, qp) // may have more
		}
	}
	if c.activeHead == len(c.active) {
		c.active, c.activeHead = c.active[:0], 0
	} else if c.activeHead > 64 && 2*c.activeHead > len(c.active) {
		n := copy(c.active, c.active[c.activeHead:])
		clear(c.active[n:])
		c.active, c.activeHead = c.active[:n], 0
	}
	sent := out.Len() - start
	c.counters.PacketsOut += uint64(sent)
	if sent > 0 && seal != nil {
		seal(start)
	}
	return sent
}

// HasOutput reports whether some QP may have packets to send now.
func (c *Context) HasOutput() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.activeHead < len(c.active)
}

// outputOne appends one packet of the QP, alternating between responses and
// requests, and reports whether it did.
func (qp *QP) outputOne(now time.Time, out *OutputBatch) bool {
	qp.preferReq = !qp.preferReq
	if qp.preferReq {
		if qp.requesterOutput(now, out) || qp.responderOutput(out) {
			return true
		}
		return false
	}
	return qp.responderOutput(out) || qp.requesterOutput(now, out)
}

// emitPayload commits a packet whose headers are n bytes in the batch's buffer
// and whose payload is in place (nil: in the buffer, counted in n), and counts it.
func (qp *QP) emitPayload(out *OutputBatch, n int, payload [][]byte, pad int, ah *AddressHandle, dst uint32) {
	out.commit(n, payload, pad, ah, qp.qpn, dst)
	total := n
	if payload != nil {
		for _, s := range payload {
			total += len(s)
		}
		total += pad
	}
	qp.counters.PacketsOut++
	qp.counters.BytesOut += uint64(total)
}
