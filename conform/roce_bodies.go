package conform

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
)

// rcPsnGap runs case rc.psn.gap: a request from the future is NAKed with the PSN the responder expects.
func (t *rt) rcPsnGap() error {
	c, err := t.rc(rcOpts{recvs: 2})
	if err != nil {
		return err
	}
	if _, err := t.send(c.pkt(ib.OpcodeRCSendOnly, add(c.psn, 2), true, pattern(64, 1))); err != nil {
		return err
	}
	if _, err := t.expectAck(ib.AETHKindNAK, uint8(ib.NAKPSNSequenceError), c.psn, 0); err != nil {
		return err
	}
	t.note = fmt.Sprintf("NAK PSN sequence error, PSN 0x%06x", c.psn)
	return nil
}

// rcPsnGapOnce runs case rc.psn.gap-once: one NAK per gap; the expected PSN is then accepted.
func (t *rt) rcPsnGapOnce() error {
	c, err := t.rc(rcOpts{recvs: 2})
	if err != nil {
		return err
	}
	data := pattern(64, 2)
	t.send(c.pkt(ib.OpcodeRCSendOnly, add(c.psn, 2), true, data))
	if _, err := t.expectNAK(ib.NAKPSNSequenceError, c.psn); err != nil {
		return err
	}
	t.send(c.pkt(ib.OpcodeRCSendOnly, add(c.psn, 3), true, data))
	if err := t.silence("the gap was NAKed already"); err != nil {
		return err
	}
	if err := t.sendAcked(c.pkt(ib.OpcodeRCSendOnly, c.psn, true, data), c.psn, 1); err != nil {
		return err
	}
	if _, err := c.expectCompletions(true, 1, "IBV_WC_SUCCESS"); err != nil {
		return err
	}
	t.note = "one NAK, then the expected PSN was ACKed"
	return nil
}

// rcDupSend runs case rc.dup.send: a duplicate SEND is ACKed again and not delivered twice.
func (t *rt) rcDupSend() error {
	c, err := t.rc(rcOpts{recvs: 2})
	if err != nil {
		return err
	}
	p := c.pkt(ib.OpcodeRCSendOnly, c.psn, true, pattern(48, 3))
	for i := 0; i < 2; i++ {
		if err := t.sendAcked(p, c.psn, 1); err != nil {
			return err
		}
	}
	if _, err := c.expectCompletions(true, 1, "IBV_WC_SUCCESS"); err != nil {
		return err
	}
	t.note = "ACKed twice, delivered once"
	return nil
}

// rcDupWrite runs case rc.dup.write: a duplicate RDMA WRITE is ACKed again and not executed again.
func (t *rt) rcDupWrite() error {
	c, err := t.rc(rcOpts{})
	if err != nil {
		return err
	}
	data := pattern(64, 4)
	p := c.write(c.psn, 128, data)
	if err := t.sendAcked(p, c.psn, 1); err != nil {
		return err
	}
	if err := c.expectMem(128, data, "the WRITE"); err != nil {
		return err
	}
	zero := make([]byte, len(data))
	if err := c.setMem(128, zero); err != nil {
		return err
	}
	if err := t.sendAcked(p, c.psn, 1); err != nil {
		return err
	}
	if err := c.expectMem(128, zero, "a duplicate WRITE must not be executed"); err != nil {
		return err
	}
	t.note = "ACKed twice, executed once"
	return nil
}

// rcDupRead runs case rc.dup.read: a duplicate RDMA READ is answered again, packet for packet.
func (t *rt) rcDupRead() error {
	c, data, err := t.rcReadable(0, 100, 5)
	if err != nil {
		return err
	}
	req := c.read(c.psn, 0, len(data))
	t.send(req)
	first, err := t.readResponses(c, c.psn, data, 1)
	if err != nil {
		return err
	}
	t.send(req)
	again, err := t.readResponses(c, c.psn, data, 1)
	if err != nil {
		return err
	}
	for i := range first {
		if !bytes.Equal(first[i].IB, again[i].IB) {
			return mismatch([][]byte{first[i].IB, again[i].IB}, "response %d to the duplicate differs from the original", i)
		}
	}
	t.note = fmt.Sprintf("%d responses, resent identically", len(first))
	return nil
}

// rcAccessRkey runs case rc.access.rkey: an RDMA WRITE with a wrong R_Key is a remote access error.
func (t *rt) rcAccessRkey() error {
	c, err := t.rc(rcOpts{})
	if err != nil {
		return err
	}
	p := c.write(c.psn, 0, pattern(16, 6))
	p.Fields.RETH.RKey ^= 0x80
	return t.accessCase(c, p, ib.NAKRemoteAccessError)
}

// rcAccessBoundsWrite runs case rc.access.bounds-write: an RDMA WRITE past the end of the region is a remote access error.
func (t *rt) rcAccessBoundsWrite() error {
	c, err := t.rc(rcOpts{})
	if err != nil {
		return err
	}
	return t.accessCase(c, c.write(c.psn, c.mr.Length-8, pattern(16, 7)), ib.NAKRemoteAccessError)
}

// rcAccessBoundsRead runs case rc.access.bounds-read: an RDMA READ past the end of the region is a remote access error.
func (t *rt) rcAccessBoundsRead() error {
	c, err := t.rc(rcOpts{})
	if err != nil {
		return err
	}
	return t.accessCase(c, c.read(c.psn, 0, c.mr.Length+1), ib.NAKRemoteAccessError)
}

// rcAccessMrRights runs case rc.access.mr-rights: an RDMA WRITE to a region without remote write access is a remote access error.
func (t *rt) rcAccessMrRights() error {
	c, err := t.rc(rcOpts{mrAccess: []string{AccessRemoteRead}})
	if err != nil {
		return err
	}
	return t.accessCase(c, c.write(c.psn, 0, pattern(16, 8)), ib.NAKRemoteAccessError)
}

// rcAccessQpRights runs case rc.access.qp-rights: an RDMA READ to a QP not enabled for remote read is an invalid request (as rxe answers).
func (t *rt) rcAccessQpRights() error {
	c, err := t.rc(rcOpts{access: []string{AccessRemoteWrite}})
	if err != nil {
		return err
	}
	return t.accessCase(c, c.read(c.psn, 0, 64), ib.NAKInvalidRequest)
}

// rcAtomicMisaligned runs case rc.atomic.misaligned: an atomic on an address that is not 8-byte aligned is an invalid request.
func (t *rt) rcAtomicMisaligned() error {
	c, err := t.rc(rcOpts{})
	if err != nil {
		return err
	}
	return t.accessCase(c, c.atomic(ib.OpcodeRCFetchAdd, c.psn, 68, 1, 0), ib.NAKInvalidRequest)
}

// rcRnrSend runs case rc.rnr.send: a SEND without a posted receive gets an RNR NAK with the QP's minimum RNR timer.
func (t *rt) rcRnrSend() error {
	c, err := t.rc(rcOpts{minRNRTimer: 18})
	if err != nil {
		return err
	}
	data := pattern(100, 9)
	p := c.pkt(ib.OpcodeRCSendOnly, c.psn, true, data)
	t.send(p)
	if _, err := t.expectAck(ib.AETHKindRNRNAK, 18, c.psn, 0); err != nil {
		return err
	}
	if err := c.postRecv(1, 40); err != nil {
		return err
	}
	if err := t.sendAcked(p, c.psn, 1); err != nil {
		return err
	}
	wcs, err := c.expectCompletions(true, 1, "IBV_WC_SUCCESS")
	if err != nil {
		return err
	}
	if wcs[0].ByteLen != uint32(len(data)) || wcs[0].WRID != 40 {
		return mismatch(nil, "receive completion %+v, want wr_id 40 byte_len %d", wcs[0], len(data))
	}
	t.note = fmt.Sprintf("RNR NAK timer 18 (%v), then delivered", ib.RNRTimerDuration(18))
	return nil
}

// rcRnrWriteImm runs case rc.rnr.write-imm: an RDMA WRITE with immediate without a posted receive gets an RNR NAK.
func (t *rt) rcRnrWriteImm() error {
	c, err := t.rc(rcOpts{minRNRTimer: 7})
	if err != nil {
		return err
	}
	p := c.write(c.psn, 0, pattern(32, 10))
	p.Fields.BTH.Opcode = ib.OpcodeRCRDMAWriteOnlyWithImm
	p.Fields.Immediate = 0xfeedf00d
	t.send(p)
	if _, err := t.expectAck(ib.AETHKindRNRNAK, 7, c.psn, 0); err != nil {
		return err
	}
	if err := c.postRecv(1, 50); err != nil {
		return err
	}
	if err := t.sendAcked(p, c.psn, 1); err != nil {
		return err
	}
	wcs, err := c.expectCompletions(true, 1, "IBV_WC_SUCCESS")
	if err != nil {
		return err
	}
	if wcs[0].Opcode != "IBV_WC_RECV_RDMA_WITH_IMM" || wcs[0].Imm != 0xfeedf00d {
		return mismatch(nil, "receive completion %+v, want IBV_WC_RECV_RDMA_WITH_IMM imm 0xfeedf00d", wcs[0])
	}
	t.note = "RNR NAK timer 7, then completed with the immediate"
	return nil
}

// rcWriteRecvUntouched runs case rc.write.recv-untouched: an RDMA WRITE without immediate consumes no receive WQE.
func (t *rt) rcWriteRecvUntouched() error {
	c, err := t.rc(rcOpts{recvs: 1})
	if err != nil {
		return err
	}
	if err := t.sendAcked(c.write(c.psn, 0, pattern(64, 11)), c.psn, 1); err != nil {
		return err
	}
	if err := t.sendAcked(c.pkt(ib.OpcodeRCSendOnly, add(c.psn, 1), true, pattern(32, 12)), add(c.psn, 1), 2); err != nil {
		return err
	}
	wcs, err := c.expectCompletions(true, 1, "IBV_WC_SUCCESS")
	if err != nil {
		return err
	}
	if wcs[0].Opcode != "IBV_WC_RECV" || wcs[0].ByteLen != 32 || wcs[0].WRID != 0 {
		return mismatch(nil, "receive completion %+v, want IBV_WC_RECV of 32 bytes, wr_id 0", wcs[0])
	}
	t.note = "the WRITE left the receive for the SEND"
	return nil
}

// rcWriteZeroLen runs case rc.write.zero-len: a zero-length RDMA WRITE is not checked against any region.
func (t *rt) rcWriteZeroLen() error {
	c, err := t.rc(rcOpts{})
	if err != nil {
		return err
	}
	p := c.pkt(ib.OpcodeRCRDMAWriteOnly, c.psn, true, []byte{})
	p.Fields.RETH = ib.RETHFields{RKey: 0x00badd00}
	if err := t.sendAcked(p, c.psn, 1); err != nil {
		return err
	}
	t.note = "ACKed"
	return nil
}

// rcReadMulti runs case rc.read.multi: an RDMA READ is answered by First/Middle/Last responses, one PSN each, AETH on First and Last.
func (t *rt) rcReadMulti() error {
	c, data, err := t.rcReadable(64, 5, 13)
	if err != nil {
		return err
	}
	t.send(c.read(c.psn, 64, len(data)))
	rs, err := t.readResponses(c, c.psn, data, 1)
	if err != nil {
		return err
	}
	if last := rs[len(rs)-1]; last.Pkt.BTH.PadCount() != 3 {
		return mismatch([][]byte{last.IB}, "the last response has pad count %d, want 3", last.Pkt.BTH.PadCount())
	}
	t.note = fmt.Sprintf("%d responses with the region's bytes", len(rs))
	return nil
}

// rcReadZeroLen runs case rc.read.zero-len: a zero-length RDMA READ is answered by an empty READ response Only.
func (t *rt) rcReadZeroLen() error {
	c, err := t.rc(rcOpts{})
	if err != nil {
		return err
	}
	p := c.read(c.psn, 0, 0)
	p.Fields.RETH.RKey = 0x00badd00
	t.send(p)
	r, err := t.expect("READ response Only")
	if err != nil {
		return err
	}
	if r.Pkt.Opcode() != ib.OpcodeRCRDMAReadResponseOnly || r.Pkt.BTH.PSN() != c.psn || len(r.Pkt.Payload) != 0 ||
		r.Pkt.AETH.Syndrome().Kind() != ib.AETHKindACK || r.Pkt.AETH.MSN() != 1 {
		return mismatch([][]byte{r.IB}, "got %s, want an empty READ response Only at PSN 0x%06x with ACK MSN 1", describe(r), c.psn)
	}
	t.note = "empty READ response Only"
	return nil
}

// rcSeqMiddle runs case rc.seq.middle: a SEND Middle without a SEND First is an invalid request.
func (t *rt) rcSeqMiddle() error {
	c, err := t.rc(rcOpts{recvs: 1})
	if err != nil {
		return err
	}
	return t.accessCase(c, c.pkt(ib.OpcodeRCSendMiddle, c.psn, true, pattern(c.mtu, 14)), ib.NAKInvalidRequest)
}

// rcSeqLastMissing runs case rc.seq.last-missing: a new message inside an unfinished SEND is an invalid request.
func (t *rt) rcSeqLastMissing() error {
	c, err := t.rc(rcOpts{recvs: 1})
	if err != nil {
		return err
	}
	t.send(c.pkt(ib.OpcodeRCSendFirst, c.psn, false, pattern(c.mtu, 15)))
	c.psn = add(c.psn, 1)
	return t.accessCase(c, c.pkt(ib.OpcodeRCSendOnly, c.psn, true, pattern(16, 16)), ib.NAKInvalidRequest)
}

// rcLenOversize runs case rc.len.oversize: a payload longer than the path MTU is an invalid request.
func (t *rt) rcLenOversize() error {
	c, err := t.rc(rcOpts{recvs: 1, recvLen: 8192, mrLen: 16384})
	if err != nil {
		return err
	}
	return t.accessCase(c, c.pkt(ib.OpcodeRCSendOnly, c.psn, true, pattern(c.mtu+4, 17)), ib.NAKInvalidRequest)
}

// rcLenFirstShort runs case rc.len.first-short: a SEND First shorter than the path MTU is an invalid request.
func (t *rt) rcLenFirstShort() error {
	c, err := t.rc(rcOpts{recvs: 1})
	if err != nil {
		return err
	}
	return t.accessCase(c, c.pkt(ib.OpcodeRCSendFirst, c.psn, true, pattern(c.mtu-4, 18)), ib.NAKInvalidRequest)
}

// rcPadWrite runs case rc.pad.write: a pad count that makes the payload disagree with the DMA length is an invalid request.
func (t *rt) rcPadWrite() error {
	c, err := t.rc(rcOpts{})
	if err != nil {
		return err
	}
	p := c.write(c.psn, 0, pattern(6, 19))
	p.PadCount, p.PadBytes = 3, 2
	return t.accessCase(c, p, ib.NAKInvalidRequest)
}

// rcRecvTooLong runs case rc.recv.too-long: a SEND longer than the posted receive buffer is an invalid request and a local length error.
func (t *rt) rcRecvTooLong() error {
	c, err := t.rc(rcOpts{recvs: 1, recvLen: 16})
	if err != nil {
		return err
	}
	t.send(c.pkt(ib.OpcodeRCSendOnly, c.psn, true, pattern(64, 20)))
	if _, err := t.expectNAK(ib.NAKInvalidRequest, c.psn); err != nil {
		return err
	}
	if _, err := c.expectCompletions(true, 1, "IBV_WC_LOC_LEN_ERR"); err != nil {
		return err
	}
	t.note = "NAK invalid request, receive IBV_WC_LOC_LEN_ERR"
	return nil
}

// roceIcrcBad runs case roce.icrc.bad: a packet with a bad ICRC is dropped silently, and later traffic still works.
func (t *rt) roceIcrcBad() error {
	c, err := t.rc(rcOpts{recvs: 2})
	if err != nil {
		return err
	}
	return t.dropThenDeliver(c, func(p *Packet) { p.BadICRC = true }, "the ICRC is bad")
}

// roceIcrcAnswers runs case roce.icrc.answers: every answer of the peer carries a valid ICRC and RoCEv2 headers addressed to the tester.
func (t *rt) roceIcrcAnswers() error {
	c, err := t.rc(rcOpts{})
	if err != nil {
		return err
	}
	t.send(c.write(c.psn, 0, pattern(40, 21)))
	t.send(c.read(add(c.psn, 1), 0, 40))
	t.send(c.atomic(ib.OpcodeRCFetchAdd, add(c.psn, 2), 64, 1, 0))
	for i := 0; i < 3; i++ {
		r, err := t.expect("an answer")
		if err != nil {
			return err
		}
		if err := t.checkFrame(r); err != nil {
			return err
		}
	}
	t.note = "3 answers, ICRC and headers good"
	return nil
}

// rcPkeyWrong runs case rc.pkey.wrong: a packet with another partition's P_Key is dropped silently.
func (t *rt) rcPkeyWrong() error {
	c, err := t.rc(rcOpts{recvs: 2})
	if err != nil {
		return err
	}
	return t.dropThenDeliver(c, func(p *Packet) { p.Fields.BTH.PKey = 0x8001 }, "the P_Key is another partition's")
}

// rcTverBad runs case rc.tver.bad: a packet with an unsupported transport header version is dropped silently.
func (t *rt) rcTverBad() error {
	c, err := t.rc(rcOpts{recvs: 2})
	if err != nil {
		return err
	}
	return t.dropThenDeliver(c, func(p *Packet) { p.Fields.BTH.TVer = 1 }, "TVer 1 is not supported")
}

// rcQpnUnknown runs case rc.qpn.unknown: a packet to a QP that does not exist is dropped silently, and the connection goes on.
func (t *rt) rcQpnUnknown() error {
	c, err := t.rc(rcOpts{recvs: 2})
	if err != nil {
		return err
	}
	if err := t.sendAcked(c.pkt(ib.OpcodeRCSendOnly, c.psn, true, pattern(40, 33)), c.psn, 1); err != nil {
		return err
	}
	bad := c.pkt(ib.OpcodeRCSendOnly, add(c.psn, 1), true, pattern(40, 34))
	bad.Fields.BTH.DestQP = 0xfffffe
	t.send(bad)
	if err := t.silence("no such QP"); err != nil {
		return err
	}
	if err := t.sendAcked(c.pkt(ib.OpcodeRCSendOnly, add(c.psn, 1), true, pattern(40, 34)), add(c.psn, 1), 2); err != nil {
		return err
	}
	if _, err := c.expectCompletions(true, 2, "IBV_WC_SUCCESS"); err != nil {
		return err
	}
	t.note = "dropped silently; the connection went on"
	return nil
}

// rcAckCoalesce runs case rc.ack.coalesce: ACKs may be coalesced, but the last one covers every request, with the MSN of all three.
func (t *rt) rcAckCoalesce() error {
	c, err := t.rc(rcOpts{recvs: 3})
	if err != nil {
		return err
	}
	for i := 0; i < 3; i++ {
		t.send(c.pkt(ib.OpcodeRCSendOnly, add(c.psn, i), i == 2, pattern(24, byte(22+i))))
	}
	last := add(c.psn, 2)
	prev := add(c.psn, -1)
	for n := 0; ; n++ {
		r, err := t.expect(wantAck(ib.AETHKindACK, 0, last))
		if err != nil {
			return err
		}
		psn := r.Pkt.BTH.PSN()
		if r.Pkt.Opcode() != ib.OpcodeRCAcknowledge || r.Pkt.AETH.Syndrome().Kind() != ib.AETHKindACK ||
			ib.PSNLess(psn, prev) || ib.PSNLess(last, psn) {
			return mismatch([][]byte{r.IB}, "got %s, want ACKs with PSNs rising to 0x%06x", describe(r), last)
		}
		prev = psn
		if psn == last {
			if r.Pkt.AETH.MSN() != 3 {
				return mismatch([][]byte{r.IB}, "the ACK of 0x%06x has MSN %d, want 3", last, r.Pkt.AETH.MSN())
			}
			t.note = fmt.Sprintf("%d ACK(s), the last with MSN 3", n+1)
			break
		}
	}
	_, err = c.expectCompletions(true, 3, "IBV_WC_SUCCESS")
	return err
}

// rcAckMsnRead runs case rc.ack.msn-read: an RDMA READ counts as a message: its response carries the incremented MSN.
func (t *rt) rcAckMsnRead() error {
	c, err := t.rc(rcOpts{})
	if err != nil {
		return err
	}
	if err := t.sendAcked(c.write(c.psn, 0, pattern(16, 25)), c.psn, 1); err != nil {
		return err
	}
	t.send(c.read(add(c.psn, 1), 0, 16))
	r, err := t.expect("READ response Only with MSN 2")
	if err != nil {
		return err
	}
	if r.Pkt.Opcode() != ib.OpcodeRCRDMAReadResponseOnly || r.Pkt.BTH.PSN() != add(c.psn, 1) || r.Pkt.AETH.MSN() != 2 {
		return mismatch([][]byte{r.IB}, "got %s, want READ response Only at PSN 0x%06x with MSN 2", describe(r), add(c.psn, 1))
	}
	t.note = "MSN 1, then 2"
	return nil
}

// rcAckCredits runs case rc.ack.credits: an ACK's credit field never promises more receive WQEs than are posted.
func (t *rt) rcAckCredits() error {
	c, err := t.rc(rcOpts{recvs: 3})
	if err != nil {
		return err
	}
	t.send(c.pkt(ib.OpcodeRCSendOnly, c.psn, true, pattern(8, 26)))
	r, err := t.expectAck(ib.AETHKindACK, 0, c.psn, 1)
	if err != nil {
		return err
	}
	code := r.Pkt.AETH.Syndrome().Credits()
	if n, ok := ib.ACKCreditCount(code); ok && n > 2 {
		return mismatch([][]byte{r.IB}, "credit code %d stands for %d receives, but 2 are posted", code, n)
	}
	t.note = r.Pkt.AETH.Syndrome().String()
	return nil
}

// udRecvGrh runs case ud.recv.grh: a UD receive holds the GRH in its first 40 bytes and the payload after.
func (t *rt) udRecvGrh() error {
	u, err := t.ud(2, 4096)
	if err != nil {
		return err
	}
	data := pattern(100, 27)
	t.send(u.pkt(data))
	wcs, err := u.awaitRecv(1)
	if err != nil {
		return err
	}
	if wcs[0].ByteLen != 140 || wcs[0].SrcQP != t.qpn {
		return mismatch(nil, "receive completion %+v, want byte_len 140, src_qp 0x%x", wcs[0], t.qpn)
	}
	if wcs[0].Flags == "" || !bytes.Contains([]byte(wcs[0].Flags), []byte("GRH")) {
		return mismatch(nil, "receive completion %+v lacks the GRH flag", wcs[0])
	}
	got, err := t.e.Peer.ReadMR(t.ctx, u.mr.MR, 40, len(data))
	if err != nil {
		return err
	}
	if !bytes.Equal(got, data) {
		return mismatch([][]byte{got}, "the payload at offset 40 is %x, want %x", clip(got), clip(data))
	}
	t.note = "GRH area, then the payload"
	return nil
}

// rcReqNakSeq runs case rc.req.nak-seq: after a NAK PSN sequence error the requester resends from the NAK's PSN, not before.
func (t *rt) rcReqNakSeq() error {
	c, err := t.rc(rcOpts{fill: 0x5a})
	if err != nil {
		return err
	}
	if err := t.e.Peer.PostSend(t.ctx, SendSpec{QPN: c.qp.QPN, Opcode: "send", MR: c.mr.MR, Length: 3 * c.mtu, WRID: 7}); err != nil {
		return err
	}
	ops := []ib.Opcode{ib.OpcodeRCSendFirst, ib.OpcodeRCSendMiddle, ib.OpcodeRCSendLast}
	var orig []*Captured
	for i, op := range ops {
		r, err := t.expectRequest(op, add(c.rpsn, i))
		if err != nil {
			return err
		}
		orig = append(orig, r)
	}
	t.send(c.ack(add(c.rpsn, 1), ib.NewNAKSyndrome(ib.NAKPSNSequenceError), 0))
	for i := 1; i < 3; i++ {
		r, err := t.expectRequest(ops[i], add(c.rpsn, i))
		if err != nil {
			return err
		}
		if !bytes.Equal(r.Pkt.Payload, orig[i].Pkt.Payload) {
			return mismatch([][]byte{r.IB, orig[i].IB}, "the resent packet at 0x%06x carries other bytes", add(c.rpsn, i))
		}
	}
	t.send(c.ack(add(c.rpsn, 2), ib.NewACKSyndrome(ib.ACKCreditsInvalid), 1))
	if _, err := c.awaitSend(1, "IBV_WC_SUCCESS"); err != nil {
		return err
	}
	t.note = "resent from q+1, completed"
	return nil
}

// rcReqRnr runs case rc.req.rnr: after an RNR NAK the requester waits at least the NAK's timer before resending.
func (t *rt) rcReqRnr() error {
	c, err := t.rc(rcOpts{})
	if err != nil {
		return err
	}
	if err := t.e.Peer.PostSend(t.ctx, SendSpec{QPN: c.qp.QPN, Opcode: "send", MR: c.mr.MR, Length: 16, WRID: 8}); err != nil {
		return err
	}
	if _, err := t.expectRequest(ib.OpcodeRCSendOnly, c.rpsn); err != nil {
		return err
	}
	nakAt, _ := t.send(c.ack(c.rpsn, ib.NewRNRNAKSyndrome(14), 0))
	r, err := t.expectRequestWithin(ib.OpcodeRCSendOnly, c.rpsn, ib.RNRTimerDuration(14)+t.e.answerTimeout())
	if err != nil {
		return err
	}
	if gap, min := r.At.Sub(nakAt), ib.RNRTimerDuration(14); gap < min {
		return mismatch([][]byte{r.IB}, "resent %v after the RNR NAK, want at least %v", gap, min)
	}
	gap := r.At.Sub(nakAt)
	t.send(c.ack(c.rpsn, ib.NewACKSyndrome(ib.ACKCreditsInvalid), 1))
	if _, err := c.awaitSend(1, "IBV_WC_SUCCESS"); err != nil {
		return err
	}
	t.note = fmt.Sprintf("resent %v after the RNR NAK", gap)
	return nil
}

// rcReqImplicitAck runs case rc.req.implicit-ack: one ACK of the later of two SENDs completes both.
func (t *rt) rcReqImplicitAck() error {
	c, err := t.rc(rcOpts{})
	if err != nil {
		return err
	}
	for i := 0; i < 2; i++ {
		if err := t.e.Peer.PostSend(t.ctx, SendSpec{QPN: c.qp.QPN, Opcode: "send", MR: c.mr.MR, Length: 32,
			Offset: 64 * i, WRID: uint64(20 + i)}); err != nil {
			return err
		}
	}
	for i := 0; i < 2; i++ {
		if _, err := t.expectRequest(ib.OpcodeRCSendOnly, add(c.rpsn, i)); err != nil {
			return err
		}
	}
	t.send(c.ack(add(c.rpsn, 1), ib.NewACKSyndrome(ib.ACKCreditsInvalid), 2))
	wcs, err := c.awaitSend(2, "IBV_WC_SUCCESS")
	if err != nil {
		return err
	}
	if wcs[0].WRID != 20 || wcs[1].WRID != 21 {
		return mismatch(nil, "send completions %+v, want wr_id 20 then 21", wcs)
	}
	t.note = "both completed"
	return nil
}

// rcReqTimeout runs case rc.req.timeout: an unanswered request is resent with the same PSN, no sooner than the local ACK timeout.
func (t *rt) rcReqTimeout() error {
	c, err := t.rc(rcOpts{timeout: 12})
	if err != nil {
		return err
	}
	// The peer cannot send before it is asked to: the time of the
	// request is a lower bound of its first transmission that no
	// delivery delay can move later (the first packet's arrival can).
	asked := t.e.Wire.Now()
	if err := t.e.Peer.PostSend(t.ctx, SendSpec{QPN: c.qp.QPN, Opcode: "send", MR: c.mr.MR, Length: 16, WRID: 9}); err != nil {
		return err
	}
	if _, err := t.expectRequest(ib.OpcodeRCSendOnly, c.rpsn); err != nil {
		return err
	}
	timeout := time.Duration(4096<<12) * time.Nanosecond
	r, err := t.expectRequestWithin(ib.OpcodeRCSendOnly, c.rpsn, 4*timeout+t.e.answerTimeout())
	if err != nil {
		return err
	}
	gap := r.At.Sub(asked)
	if gap < timeout {
		return mismatch([][]byte{r.IB}, "resent %v after the SEND was asked for, want at least %v", gap, timeout)
	}
	t.send(c.ack(c.rpsn, ib.NewACKSyndrome(ib.ACKCreditsInvalid), 1))
	if _, err := c.awaitSend(1, "IBV_WC_SUCCESS"); err != nil {
		return err
	}
	t.note = fmt.Sprintf("resent %v after the SEND was asked for", gap)
	return nil
}

// rcReqReadResp runs case rc.req.read-resp: READ responses from the responder land in the requester's buffer and complete the READ.
func (t *rt) rcReqReadResp() error {
	c, err := t.rc(rcOpts{})
	if err != nil {
		return err
	}
	n := 2*c.mtu + 8
	if err := t.e.Peer.PostSend(t.ctx, SendSpec{QPN: c.qp.QPN, Opcode: "read", MR: c.mr.MR, Length: n,
		RemoteVA: 0x10000, RKey: 0x4242, WRID: 11}); err != nil {
		return err
	}
	req, err := t.expectRequest(ib.OpcodeRCRDMAReadRequest, c.rpsn)
	if err != nil {
		return err
	}
	if r := req.Pkt.RETH; r.VA() != 0x10000 || r.RKey() != 0x4242 || r.DMALen() != uint32(n) {
		return mismatch([][]byte{req.IB}, "READ request %s, want VA 0x10000 R_Key 0x4242 length %d", describe(req), n)
	}
	data := pattern(n, 28)
	ops := []ib.Opcode{ib.OpcodeRCRDMAReadResponseFirst, ib.OpcodeRCRDMAReadResponseMiddle, ib.OpcodeRCRDMAReadResponseLast}
	for i, op := range ops {
		f := c.fields(op, add(c.rpsn, i), false)
		f.AETH = ib.AETHFields{Syndrome: ib.NewACKSyndrome(ib.ACKCreditsInvalid), MSN: 1}
		t.send(NewPacket(f, data[i*c.mtu:min(n, (i+1)*c.mtu)]))
	}
	wcs, err := c.awaitSend(1, "IBV_WC_SUCCESS")
	if err != nil {
		return err
	}
	if wcs[0].Opcode != "IBV_WC_RDMA_READ" || wcs[0].ByteLen != uint32(n) {
		return mismatch(nil, "send completion %+v, want IBV_WC_RDMA_READ of %d bytes", wcs[0], n)
	}
	if err := c.expectMem(0, data, "the READ's destination"); err != nil {
		return err
	}
	t.note = "READ completed with the responses' bytes"
	return nil
}

// accessCase sends p and expects a NAK with code at p's PSN and the peer QP in
// the error state (IBTA 9.9.3: class C errors).
func (t *rt) accessCase(c *rcConn, p *Packet, code ib.NAKCode) error {
	t.send(p)
	psn := p.Fields.BTH.PSN
	if _, err := t.expectNAK(code, psn); err != nil {
		return err
	}
	if err := c.expectState("ERR"); err != nil {
		return err
	}
	t.note = fmt.Sprintf("NAK %s at PSN 0x%06x, QP in ERR", code, psn)
	return nil
}

// dropThenDeliver sends a SEND Only spoiled by spoil and expects silence, then
// the good one and expects an ACK with MSN 1 and one receive completion.
func (t *rt) dropThenDeliver(c *rcConn, spoil func(*Packet), why string) error {
	data := pattern(72, 30)
	bad := c.pkt(ib.OpcodeRCSendOnly, c.psn, true, data)
	spoil(bad)
	t.send(bad)
	if err := t.silence(why); err != nil {
		return err
	}
	if err := t.sendAcked(c.pkt(ib.OpcodeRCSendOnly, c.psn, true, data), c.psn, 1); err != nil {
		return err
	}
	if _, err := c.expectCompletions(true, 1, "IBV_WC_SUCCESS"); err != nil {
		return err
	}
	t.note = "dropped silently; the good packet was ACKed and delivered once"
	return nil
}

// dupAtomic runs a duplicate atomic case: 1000 in memory, the atomic twice at
// the same PSN, the original 1000 both times and want in memory.
func (t *rt) dupAtomic(op ib.Opcode, swapAdd, compare, want uint64) error {
	c, err := t.rc(rcOpts{})
	if err != nil {
		return err
	}
	const off = 64
	var b [8]byte
	t.order().PutUint64(b[:], 1000)
	if err := c.setMem(off, b[:]); err != nil {
		return err
	}
	p := c.atomic(op, c.psn, off, swapAdd, compare)
	for i := 0; i < 2; i++ {
		t.send(p)
		r, err := t.expect("ATOMIC Acknowledge with original 1000")
		if err != nil {
			return err
		}
		if r.Pkt.Opcode() != ib.OpcodeRCAtomicAcknowledge || r.Pkt.BTH.PSN() != c.psn ||
			r.Pkt.AETH.Syndrome().Kind() != ib.AETHKindACK || r.Pkt.AtomicAckETH.OrigData() != 1000 {
			return mismatch([][]byte{r.IB}, "got %s, want ATOMIC Acknowledge PSN 0x%06x orig 1000 (%s)", describe(r), c.psn,
				[]string{"the request", "the duplicate"}[i])
		}
	}
	t.order().PutUint64(b[:], want)
	if err := c.expectMem(off, b[:], "the atomic must run once"); err != nil {
		return err
	}
	t.note = fmt.Sprintf("original 1000 twice, memory %d", want)
	return nil
}

// readResponses collects the READ responses to a request of len(want) bytes at
// psn and checks their opcodes, PSNs, AETHs (MSN msn) and payloads.
func (t *rt) readResponses(c *rcConn, psn uint32, want []byte, msn uint32) ([]*Captured, error) {
	n := max(1, (len(want)+c.mtu-1)/c.mtu)
	var out []*Captured
	for i := 0; i < n; i++ {
		op := ib.OpcodeRCRDMAReadResponseMiddle
		switch {
		case n == 1:
			op = ib.OpcodeRCRDMAReadResponseOnly
		case i == 0:
			op = ib.OpcodeRCRDMAReadResponseFirst
		case i == n-1:
			op = ib.OpcodeRCRDMAReadResponseLast
		}
		wantPSN := add(psn, i)
		part := want[i*c.mtu : min(len(want), (i+1)*c.mtu)]
		r, err := t.expect(fmt.Sprintf("%s at PSN 0x%06x", op, wantPSN))
		if err != nil {
			return out, err
		}
		seen := [][]byte{r.IB}
		if r.Pkt.Opcode() != op || r.Pkt.BTH.PSN() != wantPSN {
			return out, mismatch(seen, "got %s, want %s at PSN 0x%06x", describe(r), op, wantPSN)
		}
		if r.Pkt.AETH != nil && (r.Pkt.AETH.Syndrome().Kind() != ib.AETHKindACK || r.Pkt.AETH.MSN() != msn) {
			return out, mismatch(seen, "got %s, want AETH ACK with MSN %d", describe(r), msn)
		}
		if !bytes.Equal(r.Pkt.Payload, part) {
			return out, mismatch(seen, "response at PSN 0x%06x carries %d bytes %x..., want %d bytes %x...", wantPSN,
				len(r.Pkt.Payload), clip(r.Pkt.Payload), len(part), clip(part))
		}
		out = append(out, r)
	}
	return out, nil
}

// checkFrame checks an answer's RoCEv2 framing: the RoCEv2 UDP destination
// port, the peer's source address, a good ICRC (already checked by next).
func (t *rt) checkFrame(r *Captured) error {
	if r.DstPort != t.e.Wire.Port() {
		return mismatch([][]byte{r.IB}, "the answer went to UDP port %d, want %d", r.DstPort, t.e.Wire.Port())
	}
	if r.Src != t.e.Wire.PeerIP() {
		return mismatch([][]byte{r.IB}, "the answer came from %v, want %v", r.Src, t.e.Wire.PeerIP())
	}
	return nil
}

// expectRequest waits for a request packet with opcode op at psn from the peer.
func (t *rt) expectRequest(op ib.Opcode, psn uint32) (*Captured, error) {
	return t.expectRequestWithin(op, psn, t.e.answerTimeout())
}

func (t *rt) expectRequestWithin(op ib.Opcode, psn uint32, d time.Duration) (*Captured, error) {
	r, err := t.next(t.e.Wire.Now().Add(d))
	if errors.Is(err, ErrTimeout) {
		return nil, mismatch(nil, "no %s at PSN 0x%06x within %v", op, psn, d)
	}
	if err != nil {
		return r, err
	}
	if r.Pkt.Opcode() != op || r.Pkt.BTH.PSN() != psn&ib.PSNMask {
		return r, mismatch([][]byte{r.IB}, "got %s, want %s at PSN 0x%06x", describe(r), op, psn&ib.PSNMask)
	}
	return r, nil
}

// awaitSend waits (on the link's clock, letting the peer run) until the peer's
// send CQ holds n completions, and checks their status.
func (c *rcConn) awaitSend(n int, status string) ([]Completion, error) {
	return awaitCompletions(c.t, func() ([]Completion, error) { return c.completions(false) }, n, status, "send")
}

func awaitCompletions(t *rt, poll func() ([]Completion, error), n int, status, which string) ([]Completion, error) {
	var all []Completion
	deadline := t.e.Wire.Now().Add(t.e.answerTimeout())
	for {
		wcs, err := poll()
		if err != nil {
			return all, err
		}
		all = append(all, wcs...)
		if len(all) >= n || !t.e.Wire.Now().Before(deadline) {
			break
		}
		t.wait(t.e.answerTimeout() / 50)
	}
	if len(all) != n {
		return all, mismatch(nil, "the peer's %s CQ holds %d completions %+v, want %d", which, len(all), all, n)
	}
	for _, wc := range all {
		if wc.Status != status {
			return all, mismatch(nil, "the peer's %s completion %+v has status %s, want %s", which, wc, wc.Status, status)
		}
	}
	return all, nil
}

// udConn is a UD QP on the peer.
type udConn struct {
	t       *rt
	qp      *QPInfo
	mr      *MRInfo
	qkey    uint32
	recvLen int
}

// ud creates a UD QP with Q_Key 0x1ce1ce1c and recvs receives of recvLen bytes.
func (t *rt) ud(recvs, recvLen int) (*udConn, error) {
	u := &udConn{t: t, qkey: 0x1ce1ce1c, recvLen: recvLen}
	q, err := t.e.Peer.CreateQP(t.ctx, QPSpec{Type: "ud", QKey: u.qkey, SQPSN: t.e.psn()})
	if err != nil {
		return nil, err
	}
	u.qp = q
	if u.mr, err = t.e.Peer.RegMR(t.ctx, MRSpec{Length: recvs * recvLen}); err != nil {
		return nil, err
	}
	if err := t.e.Peer.PostRecv(t.ctx, RecvSpec{QPN: q.QPN, MR: u.mr.MR, Length: recvLen, Count: recvs}); err != nil {
		return nil, err
	}
	return u, nil
}

// pkt returns a UD SEND Only from the tester's QP to the peer's.
func (u *udConn) pkt(data []byte) *Packet {
	f := ib.PacketFields{BTH: ib.BTHFields{Opcode: ib.OpcodeUDSendOnly, PKey: u.qp.PKey, DestQP: u.qp.QPN, PSN: 1},
		DETH: ib.DETHFields{QKey: u.qkey, SrcQP: u.t.qpn}}
	return NewPacket(f, data)
}

// awaitRecv waits until the UD QP's receive CQ holds n completions, all good.
func (u *udConn) awaitRecv(n int) ([]Completion, error) {
	return awaitCompletions(u.t, func() ([]Completion, error) {
		return u.t.e.Peer.PollCQ(u.t.ctx, PollArgs{QPN: u.qp.QPN, Recv: true})
	}, n, "IBV_WC_SUCCESS", "receive")
}

// udDropThenDeliver sends a UD SEND spoiled by spoil (nil: one of MTU + 4 bytes),
// checks that no completion comes, then sends a good one of n bytes (0: the MTU)
// and expects exactly one completion.
func (t *rt) udDropThenDeliver(spoil func(*Packet), n int) error {
	u, err := t.ud(2, 8192)
	if err != nil {
		return err
	}
	mtu := u.qp.PathMTU
	if mtu == 0 {
		mtu = t.e.Hello.PathMTU
	}
	if n == 0 {
		n = mtu
	}
	bad := u.pkt(pattern(n, 31))
	if spoil != nil {
		spoil(bad)
	} else {
		bad.Payload = pattern(mtu+4, 31)
	}
	t.send(bad)
	t.wait(t.e.silence())
	wcs, err := t.e.Peer.PollCQ(t.ctx, PollArgs{QPN: u.qp.QPN, Recv: true})
	if err != nil {
		return err
	}
	if len(wcs) != 0 {
		return mismatch(nil, "the spoiled UD SEND was delivered: %+v", wcs)
	}
	t.send(u.pkt(pattern(n, 32)))
	wcs, err = u.awaitRecv(1)
	if err != nil {
		return err
	}
	if wcs[0].ByteLen != uint32(40+n) || wcs[0].SrcQP != t.qpn {
		return mismatch(nil, "receive completion %+v, want byte_len %d, src_qp 0x%x", wcs[0], 40+n, t.qpn)
	}
	t.note = "dropped; the good one was delivered once"
	return nil
}
