package conform

// Citations: RFC 5044 (MPA), RFC 6581 (enhanced MPA connection setup), RFC 5041
// (DDP), RFC 5040 (RDMAP). The Terminate error codes are those of RFC 5040 §4.8
// with the DDP (RFC 5041 §7.2) and MPA (RFC 5044 §8) codes they embed; the layer
// that reports an STag fault follows package iwarp's reading: DDP for the tagged
// placement checks (STag, bounds), RDMAP for access rights and for the Read and
// atomic sources (RFC 5040 §6.4). An RFC clause is its own citation (no statement
// numbers); Level is Must where the cited clause requires the behaviour, Should
// where it recommends it or leaves the choice open (mpa.reply.rev1: answering a
// revision 1 Request in kind; rdmap.terminate.header: the optional header copy).

var (
	iwNeedsConn = []string{OpCreateQP, OpRegMR}
	iwNeedsRecv = []string{OpCreateQP, OpRegMR, OpPostRecv, OpPollCQ}
	iwNeedsMem  = []string{OpCreateQP, OpRegMR, OpWriteMR, OpReadMR}
)

// IWARPCases returns the iWARP catalogue, its cases bound to e (nil to list it).
func IWARPCases(e *IWARPEnv) []Case {
	return bind(iwarpCatalogue, e.run)
}

// iwarpCatalogue is the iWARP catalogue as data: one row per case, with its citation and
// level; the bodies are the methods below and the helpers after them.
var iwarpCatalogue = []caseDef[iwt]{
	// MPA connection setup.
	{ID: "mpa.reply.accept", Section: "RFC 5044 §7.1, RFC 6581 §9.1", Level: Must,
		Summary: "a valid revision 2 MPA Request is accepted with a Reply that negotiates IRD and ORD",
		Sends:   "MPA Request: revision 2, H (IRD 4, ORD 4), C, no markers",
		Expects: "MPA Reply: key \"MPA ID Rep Frame\", R clear, revision 2, H set with IRD/ORD words, the Reply's ORD at most the Request's IRD (4)",
		Needs:   iwNeedsConn, Body: (*iwt).mpaReplyAccept},
	{ID: "mpa.reply.rev1", Section: "RFC 5044 §7.1, RFC 6581 §5 (revision negotiation)", Level: Should,
		Summary: "a revision 1 MPA Request is answered in revision 1",
		Sends:   "MPA Request: revision 1, C, no private data",
		Expects: "MPA Reply with R clear and revision 1, without the H bit",
		Needs:   iwNeedsConn, Body: (*iwt).mpaReplyRev1},
	{ID: "mpa.req.bad-key", Section: "RFC 5044 §7.1", Level: Must,
		Summary: "a start frame with the wrong key is not an MPA Request: the responder closes the connection",
		Sends:   "20 octets with the key \"MPA ID Bad Frame\"",
		Expects: "no MPA Reply that accepts; the responder closes the TCP connection",
		Needs:   iwNeedsConn, Body: (*iwt).mpaReqBadKey},
	{ID: "mpa.req.pd-too-long", Section: "RFC 5044 §7.1 (PD_Length at most 512)", Level: Must,
		Summary: "an MPA Request with more than 512 octets of private data is refused",
		Sends:   "MPA Request, revision 1, PD_Length 600 and 600 octets of private data",
		Expects: "no MPA Reply that accepts; the responder closes the TCP connection (a Reply with R set before it is allowed)",
		Needs:   iwNeedsConn, Body: (*iwt).mpaReqPdTooLong},
	{ID: "mpa.crc.used", Section: "RFC 5044 §7.1, §4.4 (CRC32c in both directions if either side sets C)", Level: Must,
		Summary: "when the initiator sets C, the responder's FPDUs carry a correct CRC32c",
		Sends:   "MPA Request with C; then an RDMA Read Request of 100 octets",
		Expects: "a Read Response FPDU whose CRC field is the CRC32c of its octets",
		Needs:   iwNeedsMem, Body: (*iwt).mpaCrcUsed},
	{ID: "mpa.crc.unused", Section: "RFC 5044 §4.4, §7.1 (no CRC: the field is 0)", Level: Must,
		Summary: "when neither side sets C, the responder's FPDUs carry 0 in the CRC field",
		Sends:   "MPA Request without C (the peer does not ask for CRCs); then an RDMA Read Request",
		Expects: "an MPA Reply without C and a Read Response FPDU with CRC field 0",
		Needs:   iwNeedsMem, Body: (*iwt).mpaCrcUnused},
	{ID: "mpa.fpdu.bad-crc", Section: "RFC 5044 §8, RFC 5040 §4.8", Level: Must,
		Summary: "an FPDU with a bad CRC is not delivered and terminates the stream with an MPA CRC error",
		Sends:   "a Send of 16 octets (one receive posted: 16 octets fit any peer's) with one CRC bit flipped",
		Expects: "a Terminate: layer LLP (MPA), error 0x02 CRC error; no receive completes successfully",
		Needs:   iwNeedsRecv, Body: (*iwt).mpaFpduBadCrc},

	// DDP checks (RFC 5041 §7.2).
	{ID: "ddp.version.untagged", Section: "RFC 5041 §7.2 (DDP version), RFC 5040 §4.8", Level: Must,
		Summary: "an untagged segment with a DDP version other than 1 is an untagged buffer error",
		Sends:   "a Send whose DDP version field is 0",
		Expects: "a Terminate: layer DDP, untagged buffer error, 0x06 invalid DDP version",
		Needs:   iwNeedsRecv, Body: (*iwt).ddpVersionUntagged},
	{ID: "ddp.version.tagged", Section: "RFC 5041 §7.2 (DDP version), RFC 5040 §4.8", Level: Must,
		Summary: "a tagged segment with a DDP version other than 1 is a tagged buffer error",
		Sends:   "an RDMA Write whose DDP version field is 0",
		Expects: "a Terminate: layer DDP, tagged buffer error, 0x04 invalid DDP version",
		Needs:   iwNeedsConn, Body: (*iwt).ddpVersionTagged},
	{ID: "ddp.qn.invalid", Section: "RFC 5041 §7.2 (queue number), RFC 5040 §5.1", Level: Must,
		Summary: "an untagged segment on a queue RDMAP does not use is an invalid QN",
		Sends:   "a Send-shaped untagged segment on queue 7",
		Expects: "a Terminate: layer DDP, untagged buffer error, 0x01 invalid QN",
		Needs:   iwNeedsRecv, Body: (*iwt).ddpQnInvalid},
	{ID: "ddp.msn.range", Section: "RFC 5041 §5.3, §7.2 (MSN)", Level: Must,
		Summary: "a Send with an MSN out of range is an invalid MSN",
		Sends:   "the first Send on queue 0 with MSN 5 (the first must be 1)",
		Expects: "a Terminate: layer DDP, untagged buffer error, 0x03 invalid MSN (range not valid)",
		Needs:   iwNeedsRecv, Body: (*iwt).ddpMsnRange},
	{ID: "ddp.msn.no-buffer", Section: "RFC 5041 §7.2 (no buffer available), RFC 5040 §5.3", Level: Must,
		Summary: "a Send with no receive posted finds no buffer",
		Sends:   "a Send of 16 octets with no receive posted",
		Expects: "a Terminate: layer DDP, untagged buffer error, 0x02 invalid MSN (no buffer available)",
		Needs:   iwNeedsConn, Body: (*iwt).ddpMsnNoBuffer},
	{ID: "ddp.mo.invalid", Section: "RFC 5041 §7.2 (MO)", Level: Must,
		Summary: "a Send segment whose MO does not follow the message so far is an invalid MO",
		Sends:   "the first segment of a Send with MO 100 (must be 0)",
		Expects: "a Terminate: layer DDP, untagged buffer error, 0x04 invalid MO",
		Needs:   iwNeedsRecv, Body: (*iwt).ddpMoInvalid},
	{ID: "ddp.too-long", Section: "RFC 5041 §7.2 (message too long for the buffer)", Level: Must,
		Summary: "a Send longer than the posted receive is an untagged buffer error",
		Sends:   "a Send of 64 octets into a 16-octet receive",
		Expects: "a Terminate: layer DDP, untagged buffer error, 0x05 DDP message too long for available buffer",
		Needs:   iwNeedsRecv, Body: (*iwt).ddpTooLong},
	{ID: "ddp.stag.invalid", Section: "RFC 5041 §7.2 (tagged buffer: invalid STag)", Level: Must,
		Summary: "an RDMA Write to an STag that names no region is an invalid STag",
		Sends:   "an RDMA Write of 16 octets whose STag differs from the region's in its key octet",
		Expects: "a Terminate: layer DDP, tagged buffer error, 0x00 invalid STag",
		Needs:   iwNeedsConn, Body: (*iwt).ddpStagInvalid},
	{ID: "ddp.stag.bounds", Section: "RFC 5041 §7.2 (tagged buffer: base or bounds violation)", Level: Must,
		Summary: "an RDMA Write past the end of the region is a base or bounds violation",
		Sends:   "an RDMA Write of 16 octets at the region's last 8 octets",
		Expects: "a Terminate: layer DDP, tagged buffer error, 0x01 base or bounds violation",
		Needs:   iwNeedsConn, Body: (*iwt).ddpStagBounds},

	// RDMAP checks (RFC 5040).
	{ID: "rdmap.version", Section: "RFC 5040 §4.8 (remote operation error: invalid RDMAP version)", Level: Must,
		Summary: "a message with an RDMAP version other than 1 is a remote operation error",
		Sends:   "a Send whose RDMAP version field is 0",
		Expects: "a Terminate: layer RDMAP, remote operation error, 0x05 invalid RDMAP version",
		Needs:   iwNeedsRecv, Body: (*iwt).rdmapVersion},
	{ID: "rdmap.opcode.reserved", Section: "RFC 5040 §4.3, §4.8 (unexpected opcode)", Level: Must,
		Summary: "a message with a reserved RDMAP opcode is an unexpected opcode",
		Sends:   "an untagged segment on queue 0 with RDMAP opcode 0xe",
		Expects: "a Terminate: layer RDMAP, remote operation error, 0x06 unexpected opcode",
		Needs:   iwNeedsRecv, Body: (*iwt).rdmapOpcodeReserved},
	{ID: "rdmap.opcode.model", Section: "RFC 5040 §4.3, §4.8 (a Send is untagged)", Level: Must,
		Summary: "a Send carried in a tagged segment is an unexpected opcode",
		Sends:   "a tagged DDP segment (T set, the region's STag) whose RDMAP opcode is Send",
		Expects: "a Terminate: layer RDMAP, remote operation error, 0x06 unexpected opcode",
		Needs:   iwNeedsRecv, Body: (*iwt).rdmapOpcodeModel},
	{ID: "rdmap.write.rights", Section: "RFC 5040 §6.4, §4.8 (remote protection error: access rights)", Level: Must,
		Summary: "an RDMA Write to a region without remote write access is an access rights violation",
		Sends:   "an RDMA Write of 16 octets to a region registered for remote read only",
		Expects: "a Terminate: layer RDMAP, remote protection error, 0x02 access rights violation",
		Needs:   iwNeedsConn, Body: (*iwt).rdmapWriteRights},
	{ID: "rdmap.read.stag", Section: "RFC 5040 §6.4, §4.8 (remote protection error: invalid STag)", Level: Must,
		Summary: "an RDMA Read Request whose Data Source STag names no region is an invalid STag",
		Sends:   "an RDMA Read Request of 64 octets from the region's STag with its key octet changed",
		Expects: "a Terminate: layer RDMAP, remote protection error, 0x00 invalid STag",
		Needs:   iwNeedsConn, Body: (*iwt).rdmapReadStag},
	{ID: "rdmap.read.bounds", Section: "RFC 5040 §6.4, §4.8 (remote protection error: base or bounds violation)", Level: Must,
		Summary: "an RDMA Read Request past the end of the region is a base or bounds violation",
		Sends:   "an RDMA Read Request of the region's length + 1 octets",
		Expects: "a Terminate: layer RDMAP, remote protection error, 0x01 base or bounds violation",
		Needs:   iwNeedsConn, Body: (*iwt).rdmapReadBounds},

	// Data transfer.
	{ID: "rdmap.read.response", Section: "RFC 5040 §4.4, §5.2 (RDMA Read Response)", Level: Must,
		Summary: "an RDMA Read Request is answered by Read Responses to the Data Sink, the last with L set",
		Sends:   "an RDMA Read Request of 3000 octets at region offset 64, Data Sink STag 0x1234 TO 0x500",
		Expects: "tagged Read Response segments to STag 0x1234 at TO 0x500 onwards, contiguous, the last with L, carrying the region's 3000 octets",
		Needs:   iwNeedsMem, Body: (*iwt).rdmapReadResponse},
	{ID: "rdmap.write.place", Section: "RFC 5041 §5.1, RFC 5040 §5.1 (RDMA Write; a later Send completes after it is placed)", Level: Must,
		Summary: "an RDMA Write in two segments is placed at the tagged offsets and needs no answer",
		Sends:   "an RDMA Write of 40 octets at region offset 100 in two segments (24 octets without L, 16 with L), then a Send of 4 octets",
		Expects: "no FPDU in answer to the Write; once the Send's receive completes, the region holds the 40 octets at offset 100",
		Needs:   append(iwNeedsRecv, OpReadMR), Body: (*iwt).rdmapWritePlace},
	{ID: "rdmap.send.deliver", Section: "RFC 5041 §5.2, §5.3, RFC 5040 §5.3 (Send)", Level: Must,
		Summary: "a Send in two segments lands in one receive and completes once",
		Sends:   "a Send of 48 octets in two segments on queue 0, MSN 1: MO 0 (32 octets, no L), MO 32 (16 octets, L)",
		Expects: "one receive completion of 48 octets; the receive buffer holds them",
		Needs:   append(iwNeedsRecv, OpReadMR), Body: (*iwt).rdmapSendDeliver},
	{ID: "rdmap.terminate.header", Section: "RFC 5040 §4.8 (the Terminate carries the erroneous DDP header)", Level: Should,
		Summary: "the Terminate for a bad segment carries that segment's DDP header",
		Sends:   "an RDMA Write of 16 octets to an STag that names no region",
		Expects: "a Terminate with the D bit set whose DDP header is the Write's (tagged, the same STag and TO)",
		Needs:   iwNeedsConn, Body: (*iwt).rdmapTerminateHeader},
	{ID: "rdmap.terminate.close", Section: "RFC 5040 §4.8, §6.2 (a Terminate ends the stream)", Level: Must,
		Summary: "after sending a Terminate the responder closes the stream and its QP is in the error state",
		Sends:   "a Send with no receive posted",
		Expects: "a Terminate, then the TCP connection closes; the peer's QP is in ERR",
		Needs:   append(iwNeedsConn, OpQueryQP), Body: (*iwt).rdmapTerminateClose},
	{ID: "rdmap.send.after-write", Section: "RFC 5040 §5.3, RFC 5041 §5.3 (the untagged MSN counts Sends only)", Level: Must,
		Summary: "RDMA Writes consume no receive and no MSN: the following Send is MSN 1",
		Sends:   "an RDMA Write of 16 octets, then a Send of 20 octets with MSN 1",
		Expects: "one receive completion of 20 octets (IBV_WC_RECV) and no Terminate",
		Needs:   iwNeedsRecv, Body: (*iwt).rdmapSendAfterWrite},
}
