package conform

import (
	"bytes"
	"fmt"

	"github.com/softrdma/softrdma/iwarp"
)

// mpaReplyAccept runs case mpa.reply.accept: a valid revision 2 MPA Request is accepted with a Reply that negotiates IRD and ORD.
func (t *iwt) mpaReplyAccept() error {
	c, err := t.dialQP(iwOpts{})
	if err != nil {
		return err
	}
	rep, err := c.handshake(defaultRequest())
	if err != nil {
		return err
	}
	seen := [][]byte{rep}
	if rep.Reject() || rep.Revision() != iwarp.MPARevision2 || !rep.Enhanced() {
		return mismatch(seen, "Reply R=%v revision %d H=%v, want R clear, revision 2, H set", rep.Reject(), rep.Revision(), rep.Enhanced())
	}
	w, ok := rep.IRDORD()
	if !ok {
		return mismatch(seen, "the revision 2 Reply carries no IRD/ORD words")
	}
	if w.ORD() > 4 {
		return mismatch(seen, "the Reply's ORD %d exceeds the Request's IRD 4", w.ORD())
	}
	t.note = fmt.Sprintf("accepted: revision 2, IRD %d ORD %d", w.IRD(), w.ORD())
	return nil
}

// mpaReplyRev1 runs case mpa.reply.rev1: a revision 1 MPA Request is answered in revision 1.
func (t *iwt) mpaReplyRev1() error {
	c, err := t.dialQP(iwOpts{})
	if err != nil {
		return err
	}
	rep, err := c.handshake(iwarp.MPAFrameFields{Request: true, CRC: true, Revision: iwarp.MPARevision1})
	if err != nil {
		return err
	}
	if rep.Reject() || rep.Revision() != iwarp.MPARevision1 || rep.Enhanced() {
		return mismatch([][]byte{rep}, "Reply R=%v revision %d H=%v, want R clear, revision 1, no H", rep.Reject(), rep.Revision(), rep.Enhanced())
	}
	t.note = "revision 1 Reply"
	return nil
}

// mpaReqBadKey runs case mpa.req.bad-key: a start frame with the wrong key is not an MPA Request: the responder closes the connection.
func (t *iwt) mpaReqBadKey() error {
	c, err := t.dialQP(iwOpts{})
	if err != nil {
		return err
	}
	req := defaultRequest()
	b, _ := req.Append(nil)
	copy(b, "MPA ID Bad Frame")
	c.write(b)
	return t.notAccepted(c)
}

// mpaReqPdTooLong runs case mpa.req.pd-too-long: an MPA Request with more than 512 octets of private data is refused.
func (t *iwt) mpaReqPdTooLong() error {
	c, err := t.dialQP(iwOpts{})
	if err != nil {
		return err
	}
	f := iwarp.MPAFrameFields{Request: true, Revision: iwarp.MPARevision1}
	b, _ := f.Append(nil)
	iwarp.MPAFrame(b).SetPrivateDataLen(600)
	c.write(append(b, make([]byte, 600)...))
	return t.notAccepted(c)
}

// mpaCrcUsed runs case mpa.crc.used: when the initiator sets C, the responder's FPDUs carry a correct CRC32c.
func (t *iwt) mpaCrcUsed() error {
	c, err := t.connect(iwOpts{})
	if err != nil {
		return err
	}
	c.readReq(0x1234, 0x500, 100, c.mr.RKey, c.mr.VA)
	s, err := c.expect("Read Response")
	if err != nil {
		return err
	}
	if f := iwarp.FPDU(s.raw); f.CRC() == 0 || f.VerifyCRC() != nil {
		return mismatch([][]byte{s.raw}, "CRC field 0x%08x, want CRC32c 0x%08x", f.CRC(), f.ComputeCRC())
	}
	t.note = "CRC32c verified"
	return nil
}

// mpaCrcUnused runs case mpa.crc.unused: when neither side sets C, the responder's FPDUs carry 0 in the CRC field.
func (t *iwt) mpaCrcUnused() error {
	c, err := t.dialQP(iwOpts{})
	if err != nil {
		return err
	}
	f := defaultRequest()
	f.CRC = false
	rep, err := c.handshake(f)
	if err != nil {
		return err
	}
	if rep.CRC() {
		return notApplicable("the peer asks for CRCs itself (its Reply sets C)")
	}
	c.readReq(0x1234, 0x500, 64, c.mr.RKey, c.mr.VA)
	s, err := c.expect("Read Response with CRC field 0")
	if err != nil {
		return err
	}
	if crc := iwarp.FPDU(s.raw).CRC(); crc != 0 {
		return mismatch([][]byte{s.raw}, "CRC field 0x%08x, want 0", crc)
	}
	t.note = "CRC field 0"
	return nil
}

// mpaFpduBadCrc runs case mpa.fpdu.bad-crc: an FPDU with a bad CRC is not delivered and terminates the stream with an MPA CRC error.
func (t *iwt) mpaFpduBadCrc() error {
	c, err := t.connect(iwOpts{recvs: 1})
	if err != nil {
		return err
	}
	c.sendMsg(pattern(16, 1), 0, true, fpduOpts{badCRC: true})
	if _, err := c.expectTerminate(iwarp.LayerLLP, iwarp.ETypeLLPMPA, iwarp.ECodeMPACRC); err != nil {
		return err
	}
	if err := c.noDelivery(); err != nil {
		return err
	}
	t.note = "Terminate MPA CRC error, nothing delivered"
	return nil
}

// ddpVersionUntagged runs case ddp.version.untagged: an untagged segment with a DDP version other than 1 is an untagged buffer error.
func (t *iwt) ddpVersionUntagged() error {
	c, err := t.connect(iwOpts{recvs: 1})
	if err != nil {
		return err
	}
	h := rdmapFields(iwarp.RDMAPFields{Opcode: iwarp.OpSend, Last: true, MSN: 1})
	h.Version = 0
	c.send(h, pattern(16, 2), fpduOpts{})
	return t.terminated(c, iwarp.LayerDDP, iwarp.ETypeDDPUntaggedBuffer, iwarp.ECodeDDPUntaggedInvalidVersion)
}

// ddpVersionTagged runs case ddp.version.tagged: a tagged segment with a DDP version other than 1 is a tagged buffer error.
func (t *iwt) ddpVersionTagged() error {
	c, err := t.connect(iwOpts{})
	if err != nil {
		return err
	}
	h := rdmapFields(iwarp.RDMAPFields{Opcode: iwarp.OpWrite, Last: true, STag: c.mr.RKey, TO: c.mr.VA})
	h.Version = 0
	c.send(h, pattern(16, 3), fpduOpts{})
	return t.terminated(c, iwarp.LayerDDP, iwarp.ETypeDDPTaggedBuffer, iwarp.ECodeDDPTaggedInvalidVersion)
}

// ddpQnInvalid runs case ddp.qn.invalid: an untagged segment on a queue RDMAP does not use is an invalid QN.
func (t *iwt) ddpQnInvalid() error {
	c, err := t.connect(iwOpts{recvs: 1})
	if err != nil {
		return err
	}
	h := rdmapFields(iwarp.RDMAPFields{Opcode: iwarp.OpSend, Last: true, MSN: 1})
	h.QN = 7
	c.send(h, pattern(16, 4), fpduOpts{})
	return t.terminated(c, iwarp.LayerDDP, iwarp.ETypeDDPUntaggedBuffer, iwarp.ECodeDDPUntaggedInvalidQN)
}

// ddpMsnRange runs case ddp.msn.range: a Send with an MSN out of range is an invalid MSN.
func (t *iwt) ddpMsnRange() error {
	c, err := t.connect(iwOpts{recvs: 2})
	if err != nil {
		return err
	}
	c.msn[0] = 5
	c.sendMsg(pattern(16, 5), 0, true, fpduOpts{})
	return t.terminated(c, iwarp.LayerDDP, iwarp.ETypeDDPUntaggedBuffer, iwarp.ECodeDDPUntaggedMSNRange)
}

// ddpMsnNoBuffer runs case ddp.msn.no-buffer: a Send with no receive posted finds no buffer.
func (t *iwt) ddpMsnNoBuffer() error {
	c, err := t.connect(iwOpts{})
	if err != nil {
		return err
	}
	c.sendMsg(pattern(16, 6), 0, true, fpduOpts{})
	return t.terminated(c, iwarp.LayerDDP, iwarp.ETypeDDPUntaggedBuffer, iwarp.ECodeDDPUntaggedNoBuffer)
}

// ddpMoInvalid runs case ddp.mo.invalid: a Send segment whose MO does not follow the message so far is an invalid MO.
func (t *iwt) ddpMoInvalid() error {
	c, err := t.connect(iwOpts{recvs: 1})
	if err != nil {
		return err
	}
	c.sendMsg(pattern(16, 7), 100, true, fpduOpts{})
	return t.terminated(c, iwarp.LayerDDP, iwarp.ETypeDDPUntaggedBuffer, iwarp.ECodeDDPUntaggedInvalidMO)
}

// ddpTooLong runs case ddp.too-long: a Send longer than the posted receive is an untagged buffer error.
func (t *iwt) ddpTooLong() error {
	c, err := t.connect(iwOpts{recvs: 1, recvLen: 16})
	if err != nil {
		return err
	}
	c.sendMsg(pattern(64, 8), 0, true, fpduOpts{})
	return t.terminated(c, iwarp.LayerDDP, iwarp.ETypeDDPUntaggedBuffer, iwarp.ECodeDDPUntaggedTooLong)
}

// ddpStagInvalid runs case ddp.stag.invalid: an RDMA Write to an STag that names no region is an invalid STag.
func (t *iwt) ddpStagInvalid() error {
	c, err := t.connect(iwOpts{})
	if err != nil {
		return err
	}
	c.writeMsg(c.mr.RKey^0x80, c.mr.VA, pattern(16, 9), true)
	return t.terminated(c, iwarp.LayerDDP, iwarp.ETypeDDPTaggedBuffer, iwarp.ECodeDDPTaggedInvalidSTag)
}

// ddpStagBounds runs case ddp.stag.bounds: an RDMA Write past the end of the region is a base or bounds violation.
func (t *iwt) ddpStagBounds() error {
	c, err := t.connect(iwOpts{})
	if err != nil {
		return err
	}
	c.writeMsg(c.mr.RKey, c.mr.VA+uint64(c.mr.Length-8), pattern(16, 10), true)
	return t.terminated(c, iwarp.LayerDDP, iwarp.ETypeDDPTaggedBuffer, iwarp.ECodeDDPTaggedBaseBounds)
}

// rdmapVersion runs case rdmap.version: a message with an RDMAP version other than 1 is a remote operation error.
func (t *iwt) rdmapVersion() error {
	c, err := t.connect(iwOpts{recvs: 1})
	if err != nil {
		return err
	}
	h := rdmapFields(iwarp.RDMAPFields{Opcode: iwarp.OpSend, Last: true, MSN: 1})
	h.RsvdULP0 = uint8(iwarp.OpSend) // RV = 0
	c.send(h, pattern(16, 11), fpduOpts{})
	return t.terminated(c, iwarp.LayerRDMAP, iwarp.ETypeRDMAPRemoteOperation, iwarp.ECodeRDMAPInvalidVersion)
}

// rdmapOpcodeReserved runs case rdmap.opcode.reserved: a message with a reserved RDMAP opcode is an unexpected opcode.
func (t *iwt) rdmapOpcodeReserved() error {
	c, err := t.connect(iwOpts{recvs: 1})
	if err != nil {
		return err
	}
	h := rdmapFields(iwarp.RDMAPFields{Opcode: iwarp.OpSend, Last: true, MSN: 1})
	h.RsvdULP0 = iwarp.RDMAPControl(0xe)
	c.send(h, pattern(16, 12), fpduOpts{})
	return t.terminated(c, iwarp.LayerRDMAP, iwarp.ETypeRDMAPRemoteOperation, iwarp.ECodeRDMAPUnexpectedOpcode)
}

// rdmapOpcodeModel runs case rdmap.opcode.model: a Send carried in a tagged segment is an unexpected opcode.
func (t *iwt) rdmapOpcodeModel() error {
	c, err := t.connect(iwOpts{recvs: 1})
	if err != nil {
		return err
	}
	h := rdmapFields(iwarp.RDMAPFields{Opcode: iwarp.OpWrite, Last: true, STag: c.mr.RKey, TO: c.mr.VA})
	h.RsvdULP0 = iwarp.RDMAPControl(iwarp.OpSend)
	c.send(h, pattern(16, 13), fpduOpts{})
	return t.terminated(c, iwarp.LayerRDMAP, iwarp.ETypeRDMAPRemoteOperation, iwarp.ECodeRDMAPUnexpectedOpcode)
}

// rdmapWriteRights runs case rdmap.write.rights: an RDMA Write to a region without remote write access is an access rights violation.
func (t *iwt) rdmapWriteRights() error {
	c, err := t.connect(iwOpts{mrAccess: []string{AccessRemoteRead}})
	if err != nil {
		return err
	}
	c.writeMsg(c.mr.RKey, c.mr.VA, pattern(16, 14), true)
	return t.terminated(c, iwarp.LayerRDMAP, iwarp.ETypeRDMAPRemoteProtection, iwarp.ECodeRDMAPAccessRights)
}

// rdmapReadStag runs case rdmap.read.stag: an RDMA Read Request whose Data Source STag names no region is an invalid STag.
func (t *iwt) rdmapReadStag() error {
	c, err := t.connect(iwOpts{})
	if err != nil {
		return err
	}
	c.readReq(0x1234, 0x500, 64, c.mr.RKey^0x80, c.mr.VA)
	return t.terminated(c, iwarp.LayerRDMAP, iwarp.ETypeRDMAPRemoteProtection, iwarp.ECodeRDMAPInvalidSTag)
}

// rdmapReadBounds runs case rdmap.read.bounds: an RDMA Read Request past the end of the region is a base or bounds violation.
func (t *iwt) rdmapReadBounds() error {
	c, err := t.connect(iwOpts{})
	if err != nil {
		return err
	}
	c.readReq(0x1234, 0x500, uint32(c.mr.Length+1), c.mr.RKey, c.mr.VA)
	return t.terminated(c, iwarp.LayerRDMAP, iwarp.ETypeRDMAPRemoteProtection, iwarp.ECodeRDMAPBaseBounds)
}

// rdmapReadResponse runs case rdmap.read.response: an RDMA Read Request is answered by Read Responses to the Data Sink, the last with L set.
func (t *iwt) rdmapReadResponse() error {
	c, err := t.connect(iwOpts{})
	if err != nil {
		return err
	}
	data := pattern(3000, 15)
	if err := t.e.Peer.WriteMR(t.ctx, c.mr.MR, 64, data); err != nil {
		return err
	}
	c.readReq(0x1234, 0x500, uint32(len(data)), c.mr.RKey, c.mr.VA+64)
	var got []byte
	for n := 0; ; n++ {
		s, err := c.expect("Read Response")
		if err != nil {
			return err
		}
		if s.op != iwarp.OpReadResponse || !s.ddp.Tagged() || s.ddp.STag() != 0x1234 ||
			s.ddp.TO() != 0x500+uint64(len(got)) {
			return mismatch([][]byte{s.raw}, "got %s, want a Read Response to STag 0x1234 at TO 0x%x", describeSeg(s), 0x500+len(got))
		}
		got = append(got, s.data...)
		if len(got) > len(data) {
			return mismatch([][]byte{s.raw}, "Read Responses carry %d octets, more than the %d asked for", len(got), len(data))
		}
		if s.ddp.Last() {
			if !bytes.Equal(got, data) {
				return mismatch([][]byte{s.raw}, "the Read Responses carry %d octets that differ from the region's %d", len(got), len(data))
			}
			t.note = fmt.Sprintf("%d Read Response segment(s), the region's bytes", n+1)
			return nil
		}
		if len(got) == len(data) {
			return mismatch([][]byte{s.raw}, "all %d octets arrived but the last segment has no L bit", len(data))
		}
	}
}

// rdmapWritePlace runs case rdmap.write.place: an RDMA Write in two segments is placed at the tagged offsets and needs no answer.
func (t *iwt) rdmapWritePlace() error {
	c, err := t.connect(iwOpts{recvs: 1})
	if err != nil {
		return err
	}
	data := pattern(40, 16)
	c.writeMsg(c.mr.RKey, c.mr.VA+100, data[:24], false)
	c.writeMsg(c.mr.RKey, c.mr.VA+124, data[24:], true)
	if err := c.silence("an RDMA Write is not answered"); err != nil {
		return err
	}
	// The Send's completion is what tells the application that the
	// Write before it is in memory (and orders the read-back after it).
	c.sendMsg(pattern(4, 22), 0, true, fpduOpts{})
	if _, err := c.awaitRecv(1, "IBV_WC_SUCCESS"); err != nil {
		return err
	}
	if err := c.expectMem(100, data, "the Write"); err != nil {
		return err
	}
	t.note = "placed, no answer"
	return nil
}

// rdmapSendDeliver runs case rdmap.send.deliver: a Send in two segments lands in one receive and completes once.
func (t *iwt) rdmapSendDeliver() error {
	c, err := t.connect(iwOpts{recvs: 1})
	if err != nil {
		return err
	}
	data := pattern(48, 17)
	c.sendMsg(data[:32], 0, false, fpduOpts{})
	c.sendMsg(data[32:], 32, true, fpduOpts{})
	wcs, err := c.awaitRecv(1, "IBV_WC_SUCCESS")
	if err != nil {
		return err
	}
	if wcs[0].ByteLen != 48 || wcs[0].Opcode != "IBV_WC_RECV" {
		return mismatch(nil, "receive completion %+v, want IBV_WC_RECV of 48 octets", wcs[0])
	}
	if err := c.expectMem(c.mr.Length-c.opts.recvLen, data, "the receive buffer"); err != nil {
		return err
	}
	t.note = "one completion of 48 octets"
	return nil
}

// rdmapTerminateHeader runs case rdmap.terminate.header: the Terminate for a bad segment carries that segment's DDP header.
func (t *iwt) rdmapTerminateHeader() error {
	c, err := t.connect(iwOpts{})
	if err != nil {
		return err
	}
	h := rdmapFields(iwarp.RDMAPFields{Opcode: iwarp.OpWrite, Last: true, STag: c.mr.RKey ^ 0x80, TO: c.mr.VA})
	want := make([]byte, h.Len())
	h.Encode(want)
	c.send(h, pattern(16, 18), fpduOpts{})
	s, err := c.expectTerminate(iwarp.LayerDDP, iwarp.ETypeDDPTaggedBuffer, iwarp.ECodeDDPTaggedInvalidSTag)
	if err != nil {
		return err
	}
	if !s.term.DDPHeaderIncluded() || !bytes.Equal(s.term.DDPHeader(), want) {
		return mismatch([][]byte{s.raw}, "the Terminate's DDP header (D=%v) is %x, want the Write's %x",
			s.term.DDPHeaderIncluded(), []byte(s.term.DDPHeader()), want)
	}
	t.note = "the Write's DDP header is in the Terminate"
	return nil
}

// rdmapTerminateClose runs case rdmap.terminate.close: after sending a Terminate the responder closes the stream and its QP is in the error state.
func (t *iwt) rdmapTerminateClose() error {
	c, err := t.connect(iwOpts{})
	if err != nil {
		return err
	}
	c.sendMsg(pattern(16, 19), 0, true, fpduOpts{})
	if _, err := c.expectTerminate(iwarp.LayerDDP, iwarp.ETypeDDPUntaggedBuffer, iwarp.ECodeDDPUntaggedNoBuffer); err != nil {
		return err
	}
	if err := c.expectClosed("after its Terminate"); err != nil {
		return err
	}
	if err := c.expectState("ERR"); err != nil {
		return err
	}
	t.note = "Terminate, close, QP in ERR"
	return nil
}

// rdmapSendAfterWrite runs case rdmap.send.after-write: RDMA Writes consume no receive and no MSN: the following Send is MSN 1.
func (t *iwt) rdmapSendAfterWrite() error {
	c, err := t.connect(iwOpts{recvs: 1})
	if err != nil {
		return err
	}
	c.writeMsg(c.mr.RKey, c.mr.VA, pattern(16, 20), true)
	c.sendMsg(pattern(20, 21), 0, true, fpduOpts{})
	wcs, err := c.awaitRecv(1, "IBV_WC_SUCCESS")
	if err != nil {
		return err
	}
	if wcs[0].ByteLen != 20 {
		return mismatch(nil, "receive completion %+v, want 20 octets", wcs[0])
	}
	if err := c.silence("nothing was wrong"); err != nil {
		return err
	}
	t.note = "the Send completed the only receive"
	return nil
}

// notAccepted checks that a connection whose MPA Request was bad is not
// accepted: no Reply without R, and the connection closes.
func (t *iwt) notAccepted(c *iwConn) error {
	rep, err := c.readReply()
	if err == nil {
		if !rep.Reject() {
			return mismatch([][]byte{rep}, "the responder accepted the bad Request (Reply without R)")
		}
	}
	if err := c.expectClosed("after a bad MPA Request"); err != nil {
		return err
	}
	t.note = "not accepted; connection closed"
	if err == nil {
		t.note = "rejected (R set); connection closed"
	}
	return nil
}

// terminated expects a Terminate with layer, etype and code.
func (t *iwt) terminated(c *iwConn, layer iwarp.TerminateLayer, etype, code uint8) error {
	s, err := c.expectTerminate(layer, etype, code)
	if err != nil {
		return err
	}
	t.note = describeSeg(s)
	return nil
}
