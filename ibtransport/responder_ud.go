package ibtransport

import "encoding/binary"

// This file is the UC and UD responder (IBTA Vol1 9.7.5.1 for UC, 9.8 for UD). Both
// are unacknowledged: errors drop the message silently (rxe: class D/E).

// ucRequest handles a request on a UC QP. A PSN gap drops the rest of the
// message in progress, whose receive WQE is kept for the next message; reception
// resynchronizes on the next First or Only packet (IBTA 9.7.5.1 for UC).
func (qp *QP) ucRequest(p *Packet) (DropReason, bool) {
	r := &qp.resp
	op := p.Opcode()
	psn := p.BTH.PSN()
	if psn != r.epsn || r.drop {
		if psn != r.epsn {
			qp.ucAbandon()
		}
		if !op.IsFirst() {
			r.drop = true
			r.epsn = PSNAdd(psn, 1)
			return DropOutOfSequence, true
		}
		r.drop = false
	}
	r.epsn = PSNAdd(psn, 1)
	if reason, ok := qp.ucCheck(p); !ok {
		qp.ucAbandon()
		r.drop = !op.IsLast()
		return reason, true
	}
	if op.IsSend() {
		return qp.ucSend(p)
	}
	return qp.ucWrite(p)
}

// ucCheck applies the sequence and length checks; a failure drops the message.
func (qp *QP) ucCheck(p *Packet) (DropReason, bool) {
	op := p.Opcode()
	if qp.checkSequence(op) != nil {
		if op.IsFirst() {
			qp.ucAbandon() // a new message ends the broken one (class D1)
			if qp.checkSequence(op) == nil {
				return 0, true
			}
		}
		return DropInvalidRequest, false
	}
	if qp.checkLength(p) != nil {
		return DropTooLong, false
	}
	if op.IsWrite() && qp.attr.AccessFlags&AccessRemoteWrite == 0 {
		return DropAccess, false
	}
	return 0, true
}

// ucAbandon forgets the message in progress. Its receive WQE stays for the next
// message, as if the broken one had never arrived.
func (qp *QP) ucAbandon() {
	r := &qp.resp
	r.inMsg = msgNone
	qp.rcur.off = 0
	r.wrLeft = 0
}

// ucSend places a UC SEND packet.
func (qp *QP) ucSend(p *Packet) (DropReason, bool) {
	r := &qp.resp
	op := p.Opcode()
	if op.IsFirst() {
		if !qp.takeRecv() {
			r.drop = !op.IsLast()
			return DropNoReceiveWQE, true
		}
		qp.rcur.off = 0
		r.inMsg = msgSend
	}
	if qp.rcur.off+uint64(len(p.Payload)) > qp.rcur.wqe.length {
		// Too long for the receive buffer: the WQE completes with a length error.
		qp.rcur.have, r.inMsg, r.drop = false, msgNone, !op.IsLast()
		qp.recvCQ.push(WC{WRID: qp.rcur.wqe.wrid, Status: WCLocLenErr, Opcode: WCRecv, QPNum: qp.qpn}, false)
		return DropTooLong, true
	}
	if f := qp.scatter(qp.rcur.wqe.sgl, qp.rcur.off, p.Payload); f != faultNone {
		qp.rcur.have, r.inMsg, r.drop = false, msgNone, !op.IsLast()
		qp.recvCQ.push(WC{WRID: qp.rcur.wqe.wrid, Status: WCLocProtErr, Opcode: WCRecv, QPNum: qp.qpn}, false)
		return DropAccess, true
	}
	qp.rcur.off += uint64(len(p.Payload))
	if op.IsLast() {
		wc := WC{WRID: qp.rcur.wqe.wrid, Opcode: WCRecv, ByteLen: uint32(qp.rcur.off), QPNum: qp.qpn}
		if op.HasImmediate() {
			wc.Imm, wc.Flags = p.ImmDt.Immediate(), WCFlagWithImm
		}
		qp.rcur.have, r.inMsg = false, msgNone
		qp.recvCQ.push(wc, p.BTH.SE())
	}
	return 0, false
}

// ucWrite places a UC RDMA WRITE packet; an R_Key violation drops the message.
func (qp *QP) ucWrite(p *Packet) (DropReason, bool) {
	r := &qp.resp
	op := p.Opcode()
	if op.IsFirst() {
		r.wrRKey, r.wrVA, r.wrLen = p.RETH.RKey(), p.RETH.VA(), p.RETH.DMALen()
		r.wrLeft = r.wrLen
		if _, f := qp.ctx.lookupRemote(qp, r.wrRKey, r.wrVA, uint64(r.wrLen), AccessRemoteWrite); f != faultNone {
			r.drop = !op.IsLast()
			return DropAccess, true
		}
		r.inMsg = msgWrite
	}
	n := uint32(len(p.Payload))
	if (op.IsLast() && n != r.wrLeft) || (!op.IsLast() && n >= r.wrLeft) {
		qp.ucAbandon()
		r.drop = !op.IsLast()
		return DropInvalidRequest, true
	}
	if op.HasImmediate() && !qp.takeRecv() {
		qp.ucAbandon()
		return DropNoReceiveWQE, true
	}
	if n > 0 {
		mem, f := qp.ctx.lookupRemote(qp, r.wrRKey, r.wrVA, uint64(n), AccessRemoteWrite)
		if f != faultNone {
			qp.ucAbandon()
			r.drop = !op.IsLast()
			return DropAccess, true
		}
		copy(mem, p.Payload)
	}
	r.wrVA += uint64(n)
	r.wrLeft -= n
	if op.IsLast() {
		r.inMsg = msgNone
		if op.HasImmediate() {
			qp.rcur.have = false
			qp.recvCQ.push(WC{WRID: qp.rcur.wqe.wrid, Opcode: WCRecvRDMAWithImm, ByteLen: r.wrLen, QPNum: qp.qpn,
				Imm: p.ImmDt.Immediate(), Flags: WCFlagWithImm}, p.BTH.SE())
		}
	}
	return 0, false
}

// grhLen is the size of the GRH area at the start of every UD receive buffer.
const grhLen = 40

// udRequest handles a UD SEND (IBTA 9.8): Q_Key check, one packet per message,
// the 40-byte GRH area first in the receive buffer.
func (qp *QP) udRequest(p *Packet, meta *InputMeta) (DropReason, bool) {
	op := p.Opcode()
	if op != OpcodeUDSendOnly && op != OpcodeUDSendOnlyWithImm {
		return DropInvalidRequest, true
	}
	if p.DETH.QKey() != qp.attr.QKey {
		return DropQKey, true // IBTA 9.6, 10.2.5: a Q_Key mismatch is silently dropped
	}
	if len(p.Payload) > int(qp.mtu) {
		return DropTooLong, true
	}
	if !qp.takeRecv() {
		return DropNoReceiveWQE, true
	}
	qp.rcur.have = false
	wc := WC{WRID: qp.rcur.wqe.wrid, Opcode: WCRecv, QPNum: qp.qpn, SrcQP: p.DETH.SrcQP(), PKeyIndex: qp.attr.PKeyIndex}
	if uint64(grhLen+len(p.Payload)) > qp.rcur.wqe.length {
		wc.Status = WCLocLenErr
		qp.recvCQ.push(wc, false)
		return DropTooLong, true
	}
	var grh [grhLen]byte
	if meta.HasGRH {
		buildGRH(grh[:], meta, len(p.Payload))
		wc.Flags |= WCFlagGRH
	}
	if f := qp.scatter(qp.rcur.wqe.sgl, 0, grh[:]); f != faultNone {
		wc.Status = WCLocProtErr
		qp.recvCQ.push(wc, false)
		return DropAccess, true
	}
	if f := qp.scatter(qp.rcur.wqe.sgl, grhLen, p.Payload); f != faultNone {
		wc.Status = WCLocProtErr
		qp.recvCQ.push(wc, false)
		return DropAccess, true
	}
	wc.ByteLen = uint32(grhLen + len(p.Payload))
	if op.HasImmediate() {
		wc.Imm, wc.Flags = p.ImmDt.Immediate(), wc.Flags|WCFlagWithImm
	}
	qp.recvCQ.push(wc, p.BTH.SE())
	return 0, false
}

// buildGRH fills the GRH area of a UD receive: meta.GRH verbatim if the device
// gave one, else an IPv6-style GRH (IBTA 8.3: IPVer 6, TClass, FlowLabel, PayLen,
// NxtHdr 0x1B, HopLmt, SGID, DGID) from meta's fields.
func buildGRH(b []byte, meta *InputMeta, payload int) {
	if len(meta.GRH) == grhLen {
		copy(b, meta.GRH)
		return
	}
	binary.BigEndian.PutUint32(b[0:], 6<<28|uint32(meta.TrafficClass)<<20|meta.FlowLabel&0xFFFFF)
	binary.BigEndian.PutUint16(b[4:], uint16(BTHLen+DETHLen+payload+4))
	b[6] = 0x1B
	b[7] = meta.HopLimit
	copy(b[8:24], meta.SGID[:])
	copy(b[24:40], meta.DGID[:])
}
