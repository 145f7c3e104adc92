package conform

import (
	ib "github.com/softrdma/softrdma/ibtransport"
)

// Spec citations. IBTA Vol. 1 is the InfiniBand Architecture Specification Volume
// 1 (Release 1.2.1 and later). Its text is not public, so a case's Statement (the
// compliance statement number) is given only where a public implementation quotes
// it: Linux rxe (drivers/infiniband/sw/rxe/rxe_resp.c) cites C9-105 (a duplicate
// SEND or WRITE is ACKed again) and C9-148 (an RDMA READ increments the MSN); pib
// (a software IB HCA) cites C9-41/C9-42/C9-43 (P_Key checks of QP0, QP1 and other
// QPs) and quotes C10-87 ("shall not consume a Work Request" for an RDMA WRITE
// without immediate). Every other case cites the section alone, and Citation says
// the statement number is not confirmed. Level Must marks what those sections
// require of a responder or requester; Should what they leave open or what the
// case checks as rxe answers (see each case's Expects).
const (
	secResponder = "IBTA Vol. 1 9.7.5.1"
	secErrors    = "9.9.3"
)

// invalidRequest completes a row whose request the responder must refuse as an
// invalid request (IBTA Vol. 1 9.9.3): Must, the outcome every such row expects,
// and the QP-state query that checks the error state.
func invalidRequest(d caseDef[rt]) caseDef[rt] {
	d.Level = Must
	d.Expects = "NAK invalid request with its PSN; the responder QP goes to the error state"
	d.Needs = needsState
	return d
}

// remoteAccessError completes a row whose request the responder must refuse
// for its R_Key, its bounds or the region's rights: Must, the access
// sections, the outcome every such row expects, and the QP state to see it.
func remoteAccessError(d caseDef[rt]) caseDef[rt] {
	d.Section = secResponder + ", " + secErrors + ", 10.6.3"
	d.Level = Must
	d.Expects = "NAK remote access error with the request's PSN; the responder QP goes to the error state"
	d.Needs = needsState
	return d
}

// droppedThenAcked completes a row that sends a bad packet the responder must drop
// silently, then the same packet made good: Must, the outcome every such row
// expects, and a posted receive for the good one.
func droppedThenAcked(d caseDef[rt]) caseDef[rt] {
	d.Level = Must
	d.Expects = "no answer to the first; ACK with MSN 1 to the second and exactly one receive completion"
	d.Needs = needsRecv
	return d
}

// add is 24-bit PSN addition.
func add(psn uint32, n int) uint32 { return ib.PSNAdd(psn, n) }

// RoCECases returns the RoCE catalogue, its cases bound to e. e may be nil to
// list the catalogue; running a case then panics.
func RoCECases(e *RoCEEnv) []Case {
	return bind(roceCatalogue, e.run)
}

// roceCatalogue is the RoCE catalogue as data: one row per case, with its citation and
// level; the bodies are the methods below and the helpers after them.
var roceCatalogue = []caseDef[rt]{
	// PSN checks.
	{ID: "rc.psn.gap", Section: secResponder + ", " + secErrors, Level: Must,
		Summary: "a request from the future is NAKed with the PSN the responder expects",
		Sends:   "SEND Only with PSN = expected PSN + 2",
		Expects: "Acknowledge, AETH NAK PSN sequence error, BTH PSN = the expected PSN, MSN 0",
		Needs:   needsRC, Body: (*rt).rcPsnGap},
	{ID: "rc.psn.gap-once", Section: secResponder, Level: Should,
		Summary: "one NAK per gap; the expected PSN is then accepted",
		Sends:   "SEND Only at expected+2, SEND Only at expected+3, then SEND Only at the expected PSN",
		Expects: "one NAK PSN sequence error (PSN = expected), silence for the second, then ACK of the expected PSN with MSN 1 and one receive completion",
		Needs:   needsRecv, Body: (*rt).rcPsnGapOnce},

	// Duplicates.
	{ID: "rc.dup.send", Section: secResponder, Statement: "C9-105", Level: Must,
		Summary: "a duplicate SEND is ACKed again and not delivered twice",
		Sends:   "SEND Only at PSN p (ACKed), then the same packet again",
		Expects: "ACK with BTH PSN p and MSN 1 both times; one receive completion, the second receive still posted",
		Needs:   needsRecv, Body: (*rt).rcDupSend},
	{ID: "rc.dup.write", Section: secResponder, Statement: "C9-105", Level: Must,
		Summary: "a duplicate RDMA WRITE is ACKed again and not executed again",
		Sends:   "RDMA WRITE Only at PSN p (ACKed); the application clears the bytes; the same WRITE again",
		Expects: "ACK with PSN p both times; the cleared bytes stay cleared",
		Needs:   needsMem, Body: (*rt).rcDupWrite},
	{ID: "rc.dup.read", Section: secResponder, Level: Must,
		Summary: "a duplicate RDMA READ is answered again, packet for packet",
		Sends:   "RDMA READ request of 2 MTU + 100 bytes at PSN p, then the same request again",
		Expects: "READ responses First/Middle/Last at PSNs p, p+1, p+2 with the region's bytes, both times identical",
		Needs:   needsMem, Body: (*rt).rcDupRead},
	{ID: "rc.dup.fetch-add", Section: "IBTA Vol. 1 9.4, 9.7.5.1 (responder resources)", Level: Must,
		Summary: "a duplicate FetchAdd returns the saved original value and is not executed again",
		Sends:   "FetchAdd +5 on 1000 at PSN p, then the same request again",
		Expects: "ATOMIC Acknowledge PSN p, original 1000, both times; memory holds 1005",
		Needs:   needsMem, Body: func(t *rt) error { return t.dupAtomic(ib.OpcodeRCFetchAdd, 5, 0, 1005) }},
	{ID: "rc.dup.cmp-swap", Section: "IBTA Vol. 1 9.4, 9.7.5.1 (responder resources)", Level: Must,
		Summary: "a duplicate CmpSwap returns the saved original value and is not executed again",
		Sends:   "CmpSwap compare 1000 swap 2000 on 1000 at PSN p, then the same request again",
		Expects: "ATOMIC Acknowledge PSN p, original 1000, both times (2000 if executed twice); memory holds 2000",
		Needs:   needsMem, Body: func(t *rt) error { return t.dupAtomic(ib.OpcodeRCCompareSwap, 2000, 1000, 2000) }},

	// Access checks.
	remoteAccessError(caseDef[rt]{ID: "rc.access.rkey",
		Summary: "an RDMA WRITE with a wrong R_Key is a remote access error",
		Sends:   "RDMA WRITE Only of 16 bytes whose R_Key differs from the region's in the key byte",
		Body:    (*rt).rcAccessRkey}),
	remoteAccessError(caseDef[rt]{ID: "rc.access.bounds-write",
		Summary: "an RDMA WRITE past the end of the region is a remote access error",
		Sends:   "RDMA WRITE Only of 16 bytes at the region's last 8 bytes",
		Body:    (*rt).rcAccessBoundsWrite}),
	remoteAccessError(caseDef[rt]{ID: "rc.access.bounds-read",
		Summary: "an RDMA READ past the end of the region is a remote access error",
		Sends:   "RDMA READ request of the region's length + 1 bytes",
		Body:    (*rt).rcAccessBoundsRead}),
	remoteAccessError(caseDef[rt]{ID: "rc.access.mr-rights",
		Summary: "an RDMA WRITE to a region without remote write access is a remote access error",
		Sends:   "RDMA WRITE Only to a region registered for remote read only",
		Body:    (*rt).rcAccessMrRights}),
	{ID: "rc.access.qp-rights", Section: secResponder + ", " + secErrors, Level: Should,
		Summary: "an RDMA READ to a QP not enabled for remote read is an invalid request (as rxe answers)",
		Sends:   "RDMA READ request to a QP whose access flags grant remote write only",
		Expects: "NAK invalid request with the request's PSN; the responder QP goes to the error state",
		Needs:   needsState, Body: (*rt).rcAccessQpRights},
	{ID: "rc.atomic.misaligned", Section: "IBTA Vol. 1 9.4, " + secErrors, Level: Must,
		Summary: "an atomic on an address that is not 8-byte aligned is an invalid request",
		Sends:   "FetchAdd at region address + 4",
		Expects: "NAK invalid request with the request's PSN; the responder QP goes to the error state",
		Needs:   needsState, Body: (*rt).rcAtomicMisaligned},

	// Receive resources.
	{ID: "rc.rnr.send", Section: secResponder + ", " + secErrors + ", Table 45", Level: Must,
		Summary: "a SEND without a posted receive gets an RNR NAK with the QP's minimum RNR timer",
		Sends:   "SEND Only with no receive posted (min_rnr_timer 18); then, after a receive is posted, the same SEND again",
		Expects: "Acknowledge RNR NAK, timer field 18, PSN of the SEND, MSN 0; then ACK of the same PSN, MSN 1, and one receive completion",
		Needs:   needsRecv, Body: (*rt).rcRnrSend},
	{ID: "rc.rnr.write-imm", Section: secResponder + ", " + secErrors + ", Table 45", Level: Must,
		Summary: "an RDMA WRITE with immediate without a posted receive gets an RNR NAK",
		Sends:   "RDMA WRITE Only with Immediate with no receive posted (min_rnr_timer 7); then, with a receive, again",
		Expects: "RNR NAK, timer field 7, PSN of the request; then ACK and a RECV_RDMA_WITH_IMM completion with the immediate",
		Needs:   needsRecv, Body: (*rt).rcRnrWriteImm},
	{ID: "rc.write.recv-untouched", Section: "IBTA Vol. 1 10.7.2.2", Statement: "C10-87", Level: Must,
		Summary: "an RDMA WRITE without immediate consumes no receive WQE",
		Sends:   "RDMA WRITE Only (one receive posted), then SEND Only of 32 bytes",
		Expects: "ACKs for both; exactly one receive completion: the SEND's (IBV_WC_RECV, 32 bytes, the first WR ID)",
		Needs:   needsRecv, Body: (*rt).rcWriteRecvUntouched},
	{ID: "rc.write.zero-len", Section: secResponder + " (zero-length RDMA: R_Key not validated)", Level: Should,
		Summary: "a zero-length RDMA WRITE is not checked against any region",
		Sends:   "RDMA WRITE Only with DMA length 0, R_Key 0x00badd00 and VA 0, no payload",
		Expects: "ACK with the request's PSN, MSN 1",
		Needs:   needsRC, Body: (*rt).rcWriteZeroLen},

	// READ responses.
	{ID: "rc.read.multi", Section: "IBTA Vol. 1 9.7.4, 9.3.5, 9.2 (PadCnt)", Level: Must,
		Summary: "an RDMA READ is answered by First/Middle/Last responses, one PSN each, AETH on First and Last",
		Sends:   "RDMA READ request of 2 MTU + 5 bytes",
		Expects: "READ response First (AETH ACK), Middle (no AETH), Last (AETH ACK, pad count 3) at PSNs p..p+2, payloads MTU, MTU, 5 bytes of the region",
		Needs:   needsMem, Body: (*rt).rcReadMulti},
	{ID: "rc.read.zero-len", Section: secResponder + " (zero-length RDMA: R_Key not validated)", Level: Should,
		Summary: "a zero-length RDMA READ is answered by an empty READ response Only",
		Sends:   "RDMA READ request with DMA length 0 and R_Key 0x00badd00",
		Expects: "READ response Only, PSN of the request, AETH ACK with MSN 1, no payload",
		Needs:   needsRC, Body: (*rt).rcReadZeroLen},

	// Opcode sequence and lengths.
	invalidRequest(caseDef[rt]{ID: "rc.seq.middle", Section: secResponder + " (opcode sequence), " + secErrors,
		Summary: "a SEND Middle without a SEND First is an invalid request",
		Sends:   "SEND Middle of one MTU at the expected PSN, no message in progress",
		Body:    (*rt).rcSeqMiddle}),
	{ID: "rc.seq.last-missing", Section: secResponder + " (opcode sequence), " + secErrors, Level: Must,
		Summary: "a new message inside an unfinished SEND is an invalid request",
		Sends:   "SEND First of one MTU at p, then SEND Only at p+1",
		Expects: "NAK invalid request with PSN p+1; the responder QP goes to the error state",
		Needs:   needsState, Body: (*rt).rcSeqLastMissing},
	invalidRequest(caseDef[rt]{ID: "rc.len.oversize", Section: secResponder + " (length check), " + secErrors,
		Summary: "a payload longer than the path MTU is an invalid request",
		Sends:   "SEND Only with path MTU + 4 bytes (a receive of 4096 bytes posted)",
		Body:    (*rt).rcLenOversize}),
	invalidRequest(caseDef[rt]{ID: "rc.len.first-short", Section: secResponder + " (length check), " + secErrors,
		Summary: "a SEND First shorter than the path MTU is an invalid request",
		Sends:   "SEND First with path MTU - 4 bytes",
		Body:    (*rt).rcLenFirstShort}),
	invalidRequest(caseDef[rt]{ID: "rc.pad.write", Section: "IBTA Vol. 1 9.2 (PadCnt), 9.7.5.1 (length check)",
		Summary: "a pad count that makes the payload disagree with the DMA length is an invalid request",
		Sends:   "RDMA WRITE Only, DMA length 6: 6 data bytes and 2 pad bytes but BTH pad count 3 (payload 5)",
		Body:    (*rt).rcPadWrite}),
	{ID: "rc.recv.too-long", Section: "IBTA Vol. 1 " + secErrors + " (message longer than the receive buffer)", Level: Must,
		Summary: "a SEND longer than the posted receive buffer is an invalid request and a local length error",
		Sends:   "SEND Only of 64 bytes into a 16-byte receive",
		Expects: "NAK invalid request with its PSN; the receive completes with IBV_WC_LOC_LEN_ERR, the status ibv_poll_cq(3) gives a receive too small for the message (rxe reports IBV_WC_REM_INV_REQ_ERR)",
		Needs:   needsRecv, Body: (*rt).rcRecvTooLong},

	// Header and integrity checks: silent drops.
	droppedThenAcked(caseDef[rt]{ID: "roce.icrc.bad", Section: "IBTA Vol. 1 7.8.1 (ICRC), Annex A17 (RoCEv2)",
		Summary: "a packet with a bad ICRC is dropped silently, and later traffic still works",
		Sends:   "SEND Only with one ICRC bit flipped, then the same SEND with a good ICRC",
		Body:    (*rt).roceIcrcBad}),
	{ID: "roce.icrc.answers", Section: "IBTA Vol. 1 7.8.1 (ICRC), Annex A17 (RoCEv2)", Level: Must,
		Summary: "every answer of the peer carries a valid ICRC and RoCEv2 headers addressed to the tester",
		Sends:   "RDMA WRITE Only, RDMA READ request, FetchAdd",
		Expects: "ACK, READ response Only, ATOMIC Acknowledge: each with a good ICRC, to the RoCEv2 UDP port (4791), from the peer's IP",
		Needs:   needsRC, Body: (*rt).roceIcrcAnswers},
	droppedThenAcked(caseDef[rt]{ID: "rc.pkey.wrong", Section: "IBTA Vol. 1 9.6 (P_Key check)", Statement: "C9-43",
		Summary: "a packet with another partition's P_Key is dropped silently",
		Sends:   "SEND Only with P_Key 0x8001 (the QP's is 0xffff), then with the right P_Key",
		Body:    (*rt).rcPkeyWrong}),
	droppedThenAcked(caseDef[rt]{ID: "rc.tver.bad", Section: "IBTA Vol. 1 9.6, 9.2 (TVer)",
		Summary: "a packet with an unsupported transport header version is dropped silently",
		Sends:   "SEND Only with BTH TVer 1, then with TVer 0",
		Body:    (*rt).rcTverBad}),
	{ID: "rc.qpn.unknown", Section: "IBTA Vol. 1 9.6 (destination QP check)", Level: Must,
		Summary: "a packet to a QP that does not exist is dropped silently, and the connection goes on",
		Sends:   "SEND Only at p to the real QP; SEND Only at p+1 to QP 0xfffffe; SEND Only at p+1 to the real QP",
		Expects: "ACK of p (MSN 1); no answer to the second; ACK of p+1 (MSN 2); two receive completions",
		Needs:   needsRecv, Body: (*rt).rcQpnUnknown},

	// Acknowledgements.
	{ID: "rc.ack.coalesce", Section: "IBTA Vol. 1 9.7.5.1.2 (coalesced acknowledges)", Level: Must,
		Summary: "ACKs may be coalesced, but the last one covers every request, with the MSN of all three",
		Sends:   "three SEND Only at p, p+1, p+2, AckReq on the last only",
		Expects: "ACKs with non-decreasing PSNs in p..p+2, the last at p+2 with MSN 3; three receive completions",
		Needs:   needsRecv, Body: (*rt).rcAckCoalesce},
	{ID: "rc.ack.msn-read", Section: secResponder + " (MSN of RDMA READ)", Statement: "C9-148", Level: Must,
		Summary: "an RDMA READ counts as a message: its response carries the incremented MSN",
		Sends:   "RDMA WRITE Only at p, then RDMA READ request of 16 bytes at p+1",
		Expects: "ACK of p with MSN 1, then READ response Only at p+1 with AETH MSN 2",
		Needs:   needsRC, Body: (*rt).rcAckMsnRead},
	{ID: "rc.ack.credits", Section: "IBTA Vol. 1 9.3.5, Table 44 (AETH credit count)", Level: Should,
		Summary: "an ACK's credit field never promises more receive WQEs than are posted",
		Sends:   "SEND Only with AckReq, three receives posted",
		Expects: "ACK whose credit code is 31 (no end-to-end credits, as rxe sends) or stands for at most the 2 receives left",
		Needs:   needsRecv, Body: (*rt).rcAckCredits},

	// UD.
	{ID: "ud.qkey.wrong", Section: "IBTA Vol. 1 9.6 (Q_Key check), 10.2.5", Level: Must,
		Summary: "a UD SEND with the wrong Q_Key is dropped silently",
		Sends:   "UD SEND Only with Q_Key 0x2ce2ce2c (the QP's is 0x1ce1ce1c), then with the right one",
		Expects: "no receive completion for the first; one for the second, byte_len 40 + payload, src_qp the tester's QPN",
		Needs:   needsRecv, Body: func(t *rt) error { return t.udDropThenDeliver(func(p *Packet) { p.Fields.DETH.QKey = 0x2ce2ce2c }, 64) }},
	{ID: "ud.pkey.wrong", Section: "IBTA Vol. 1 9.6 (P_Key check)", Statement: "C9-43", Level: Must,
		Summary: "a UD SEND with another partition's P_Key is dropped silently",
		Sends:   "UD SEND Only with P_Key 0x8001, then with 0xffff",
		Expects: "no receive completion for the first; one for the second",
		Needs:   needsRecv, Body: func(t *rt) error { return t.udDropThenDeliver(func(p *Packet) { p.Fields.BTH.PKey = 0x8001 }, 64) }},
	{ID: "ud.len.oversize", Section: "IBTA Vol. 1 9.8 (a UD message is one packet of at most the MTU)", Level: Must,
		Summary: "a UD SEND longer than the MTU is dropped silently",
		Sends:   "UD SEND Only of MTU + 4 bytes, then of MTU bytes",
		Expects: "no receive completion for the first; one of 40 + MTU bytes for the second",
		Needs:   needsRecv, Body: func(t *rt) error { return t.udDropThenDeliver(nil, 0) }},
	{ID: "ud.recv.grh", Section: "IBTA Vol. 1 9.8, 11.4 (the 40-byte GRH area of UD receive buffers)", Level: Must,
		Summary: "a UD receive holds the GRH in its first 40 bytes and the payload after",
		Sends:   "UD SEND Only of 100 bytes",
		Expects: "one receive completion with byte_len 140 and the GRH flag; the payload at offset 40 of the buffer",
		Needs:   needsRecv, Body: (*rt).udRecvGrh},

	// The peer as requester.
	{ID: "rc.req.nak-seq", Section: "IBTA Vol. 1 9.7.5.2 (NAK PSN sequence error: go back to its PSN)", Level: Must,
		Summary: "after a NAK PSN sequence error the requester resends from the NAK's PSN, not before",
		Sends:   "the peer SENDs 3 MTU (3 packets at q..q+2); the tester NAKs sequence error with PSN q+1, then ACKs q+2",
		Expects: "the peer resends SEND Middle at q+1 and Last at q+2 with the original bytes; its WR completes successfully",
		Needs:   needsSender, Body: (*rt).rcReqNakSeq},
	{ID: "rc.req.rnr", Section: "IBTA Vol. 1 9.7.5.2 (RNR NAK), Table 45", Level: Must,
		Summary: "after an RNR NAK the requester waits at least the NAK's timer before resending",
		Sends:   "the peer SENDs 16 bytes at q; the tester answers RNR NAK with timer 14 (1.28 ms), then ACKs the resend",
		Expects: "the same SEND at q again, no sooner than 1.28 ms after the NAK; the WR completes successfully",
		Needs:   needsSender, Body: (*rt).rcReqRnr},
	{ID: "rc.req.implicit-ack", Section: "IBTA Vol. 1 9.7.5.1.2, 9.7.5.2 (an ACK acknowledges every earlier request)", Level: Must,
		Summary: "one ACK of the later of two SENDs completes both",
		Sends:   "the peer SENDs twice (q, q+1); the tester ACKs q+1 only",
		Expects: "both WRs complete successfully, in order",
		Needs:   needsSender, Body: (*rt).rcReqImplicitAck},
	{ID: "rc.req.timeout", Section: "IBTA Vol. 1 9.7.6.1.3 (transport timer: local ACK timeout)", Level: Must,
		Summary: "an unanswered request is resent with the same PSN, no sooner than the local ACK timeout",
		Sends:   "the peer (timeout 12: 4.096 µs × 2^12 = 16.8 ms) SENDs 16 bytes at q; the tester stays silent, then ACKs the resend",
		Expects: "the same SEND at q again, at least 16.8 ms after the tester asked for the SEND; the WR completes successfully",
		Needs:   needsSender, Body: (*rt).rcReqTimeout},
	{ID: "rc.req.read-resp", Section: "IBTA Vol. 1 9.7.5.2, 9.7.4 (READ responses complete the READ)", Level: Must,
		Summary: "READ responses from the responder land in the requester's buffer and complete the READ",
		Sends:   "the peer READs 2 MTU + 8 bytes at VA 0x10000 R_Key 0x4242; the tester answers First/Middle/Last",
		Expects: "a READ request with that RETH at q; then an IBV_WC_RDMA_READ completion of 2 MTU + 8 bytes and the bytes in the peer's region",
		Needs:   append(needsSender, OpReadMR), Body: (*rt).rcReqReadResp},
}
