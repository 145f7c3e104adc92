package conform

import (
	"bytes"
	"context"
	"fmt"

	"github.com/softrdma/softrdma/iwarp"
)

// Citations: RFC 5044 (MPA), RFC 6581 (enhanced MPA connection setup), RFC 5041
// (DDP), RFC 5040 (RDMAP). The Terminate error codes are those of RFC 5040 §4.8
// with the DDP (RFC 5041 §7.2) and MPA (RFC 5044 §8) codes they embed; the layer
// that reports an STag fault follows package iwarp's reading: DDP for the tagged
// placement checks (STag, bounds), RDMAP for access rights and for the Read and
// atomic sources (RFC 5040 §6.4).

var (
	iwNeedsConn = []string{OpCreateQP, OpRegMR}
	iwNeedsRecv = []string{OpCreateQP, OpRegMR, OpPostRecv, OpPollCQ}
	iwNeedsMem  = []string{OpCreateQP, OpRegMR, OpWriteMR, OpReadMR}
)

// IWARPCases returns the iWARP catalogue, its cases bound to e (nil to list it).
func IWARPCases(e *IWARPEnv) []Case {
	type body func(t *iwt) error
	mk := func(id, section, summary, sends, expects string, needs []string, f body) Case {
		return Case{ID: id, Section: section, Summary: summary, Sends: sends, Expects: expects,
			Run: func(ctx context.Context) Verdict { return e.run(ctx, needs, f) }}
	}
	return []Case{
		// MPA connection setup.
		mk("mpa.reply.accept", "RFC 5044 §7.1, RFC 6581 §9.1",
			"a valid revision 2 MPA Request is accepted with a Reply that negotiates IRD and ORD",
			"MPA Request: revision 2, H (IRD 4, ORD 4), C, no markers",
			"MPA Reply: key \"MPA ID Rep Frame\", R clear, revision 2, H set with IRD/ORD words, the Reply's ORD at most the Request's IRD (4)",
			iwNeedsConn, func(t *iwt) error {
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
			}),
		mk("mpa.reply.rev1", "RFC 5044 §7.1, RFC 6581 §5 (revision negotiation)",
			"a revision 1 MPA Request is answered in revision 1",
			"MPA Request: revision 1, C, no private data",
			"MPA Reply with R clear and revision 1, without the H bit",
			iwNeedsConn, func(t *iwt) error {
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
			}),
		mk("mpa.req.bad-key", "RFC 5044 §7.1",
			"a start frame with the wrong key is not an MPA Request: the responder closes the connection",
			"20 octets with the key \"MPA ID Bad Frame\"",
			"no MPA Reply that accepts; the responder closes the TCP connection",
			iwNeedsConn, func(t *iwt) error {
				c, err := t.dialQP(iwOpts{})
				if err != nil {
					return err
				}
				req := defaultRequest()
				b, _ := req.Append(nil)
				copy(b, "MPA ID Bad Frame")
				c.write(b)
				return t.notAccepted(c)
			}),
		mk("mpa.req.pd-too-long", "RFC 5044 §7.1 (PD_Length at most 512)",
			"an MPA Request with more than 512 octets of private data is refused",
			"MPA Request, revision 1, PD_Length 600 and 600 octets of private data",
			"no MPA Reply that accepts; the responder closes the TCP connection (a Reply with R set before it is allowed)",
			iwNeedsConn, func(t *iwt) error {
				c, err := t.dialQP(iwOpts{})
				if err != nil {
					return err
				}
				f := iwarp.MPAFrameFields{Request: true, Revision: iwarp.MPARevision1}
				b, _ := f.Append(nil)
				iwarp.MPAFrame(b).SetPrivateDataLen(600)
				c.write(append(b, make([]byte, 600)...))
				return t.notAccepted(c)
			}),
		mk("mpa.crc.used", "RFC 5044 §7.1, §4.4 (CRC32c in both directions if either side sets C)",
			"when the initiator sets C, the responder's FPDUs carry a correct CRC32c",
			"MPA Request with C; then an RDMA Read Request of 100 octets",
			"a Read Response FPDU whose CRC field is the CRC32c of its octets",
			iwNeedsMem, func(t *iwt) error {
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
			}),
		mk("mpa.crc.unused", "RFC 5044 §4.4, §7.1 (no CRC: the field is 0)",
			"when neither side sets C, the responder's FPDUs carry 0 in the CRC field",
			"MPA Request without C (the peer does not ask for CRCs); then an RDMA Read Request",
			"an MPA Reply without C and a Read Response FPDU with CRC field 0",
			iwNeedsMem, func(t *iwt) error {
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
			}),
		mk("mpa.fpdu.bad-crc", "RFC 5044 §8, RFC 5040 §4.8",
			"an FPDU with a bad CRC is not delivered and terminates the stream with an MPA CRC error",
			"a Send of 16 octets (one receive posted: 16 octets fit any peer's) with one CRC bit flipped",
			"a Terminate: layer LLP (MPA), error 0x02 CRC error; no receive completes successfully",
			iwNeedsRecv, func(t *iwt) error {
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
			}),

		// DDP checks (RFC 5041 §7.2).
		mk("ddp.version.untagged", "RFC 5041 §7.2 (DDP version), RFC 5040 §4.8",
			"an untagged segment with a DDP version other than 1 is an untagged buffer error",
			"a Send whose DDP version field is 0",
			"a Terminate: layer DDP, untagged buffer error, 0x06 invalid DDP version",
			iwNeedsRecv, func(t *iwt) error {
				c, err := t.connect(iwOpts{recvs: 1})
				if err != nil {
					return err
				}
				h := rdmapFields(iwarp.RDMAPFields{Opcode: iwarp.OpSend, Last: true, MSN: 1})
				h.Version = 0
				c.send(h, pattern(16, 2), fpduOpts{})
				return t.terminated(c, iwarp.LayerDDP, iwarp.ETypeDDPUntaggedBuffer, iwarp.ECodeDDPUntaggedInvalidVersion)
			}),
		mk("ddp.version.tagged", "RFC 5041 §7.2 (DDP version), RFC 5040 §4.8",
			"a tagged segment with a DDP version other than 1 is a tagged buffer error",
			"an RDMA Write whose DDP version field is 0",
			"a Terminate: layer DDP, tagged buffer error, 0x04 invalid DDP version",
			iwNeedsConn, func(t *iwt) error {
				c, err := t.connect(iwOpts{})
				if err != nil {
					return err
				}
				h := rdmapFields(iwarp.RDMAPFields{Opcode: iwarp.OpWrite, Last: true, STag: c.mr.RKey, TO: c.mr.VA})
				h.Version = 0
				c.send(h, pattern(16, 3), fpduOpts{})
				return t.terminated(c, iwarp.LayerDDP, iwarp.ETypeDDPTaggedBuffer, iwarp.ECodeDDPTaggedInvalidVersion)
			}),
		mk("ddp.qn.invalid", "RFC 5041 §7.2 (queue number), RFC 5040 §5.1",
			"an untagged segment on a queue RDMAP does not use is an invalid QN",
			"a Send-shaped untagged segment on queue 7",
			"a Terminate: layer DDP, untagged buffer error, 0x01 invalid QN",
			iwNeedsRecv, func(t *iwt) error {
				c, err := t.connect(iwOpts{recvs: 1})
				if err != nil {
					return err
				}
				h := rdmapFields(iwarp.RDMAPFields{Opcode: iwarp.OpSend, Last: true, MSN: 1})
				h.QN = 7
				c.send(h, pattern(16, 4), fpduOpts{})
				return t.terminated(c, iwarp.LayerDDP, iwarp.ETypeDDPUntaggedBuffer, iwarp.ECodeDDPUntaggedInvalidQN)
			}),
		mk("ddp.msn.range", "RFC 5041 §5.3, §7.2 (MSN)",
			"a Send with an MSN out of range is an invalid MSN",
			"the first Send on queue 0 with MSN 5 (the first must be 1)",
			"a Terminate: layer DDP, untagged buffer error, 0x03 invalid MSN (range not valid)",
			iwNeedsRecv, func(t *iwt) error {
				c, err := t.connect(iwOpts{recvs: 2})
				if err != nil {
					return err
				}
				c.msn[0] = 5
				c.sendMsg(pattern(16, 5), 0, true, fpduOpts{})
				return t.terminated(c, iwarp.LayerDDP, iwarp.ETypeDDPUntaggedBuffer, iwarp.ECodeDDPUntaggedMSNRange)
			}),
		mk("ddp.msn.no-buffer", "RFC 5041 §7.2 (no buffer available), RFC 5040 §5.3",
			"a Send with no receive posted finds no buffer",
			"a Send of 16 octets with no receive posted",
			"a Terminate: layer DDP, untagged buffer error, 0x02 invalid MSN (no buffer available)",
			iwNeedsConn, func(t *iwt) error {
				c, err := t.connect(iwOpts{})
				if err != nil {
					return err
				}
				c.sendMsg(pattern(16, 6), 0, true, fpduOpts{})
				return t.terminated(c, iwarp.LayerDDP, iwarp.ETypeDDPUntaggedBuffer, iwarp.ECodeDDPUntaggedNoBuffer)
			}),
		mk("ddp.mo.invalid", "RFC 5041 §7.2 (MO)",
			"a Send segment whose MO does not follow the message so far is an invalid MO",
			"the first segment of a Send with MO 100 (must be 0)",
			"a Terminate: layer DDP, untagged buffer error, 0x04 invalid MO",
			iwNeedsRecv, func(t *iwt) error {
				c, err := t.connect(iwOpts{recvs: 1})
				if err != nil {
					return err
				}
				c.sendMsg(pattern(16, 7), 100, true, fpduOpts{})
				return t.terminated(c, iwarp.LayerDDP, iwarp.ETypeDDPUntaggedBuffer, iwarp.ECodeDDPUntaggedInvalidMO)
			}),
		mk("ddp.too-long", "RFC 5041 §7.2 (message too long for the buffer)",
			"a Send longer than the posted receive is an untagged buffer error",
			"a Send of 64 octets into a 16-octet receive",
			"a Terminate: layer DDP, untagged buffer error, 0x05 DDP message too long for available buffer",
			iwNeedsRecv, func(t *iwt) error {
				c, err := t.connect(iwOpts{recvs: 1, recvLen: 16})
				if err != nil {
					return err
				}
				c.sendMsg(pattern(64, 8), 0, true, fpduOpts{})
				return t.terminated(c, iwarp.LayerDDP, iwarp.ETypeDDPUntaggedBuffer, iwarp.ECodeDDPUntaggedTooLong)
			}),
		mk("ddp.stag.invalid", "RFC 5041 §7.2 (tagged buffer: invalid STag)",
			"an RDMA Write to an STag that names no region is an invalid STag",
			"an RDMA Write of 16 octets whose STag differs from the region's in its key octet",
			"a Terminate: layer DDP, tagged buffer error, 0x00 invalid STag",
			iwNeedsConn, func(t *iwt) error {
				c, err := t.connect(iwOpts{})
				if err != nil {
					return err
				}
				c.writeMsg(c.mr.RKey^0x80, c.mr.VA, pattern(16, 9), true)
				return t.terminated(c, iwarp.LayerDDP, iwarp.ETypeDDPTaggedBuffer, iwarp.ECodeDDPTaggedInvalidSTag)
			}),
		mk("ddp.stag.bounds", "RFC 5041 §7.2 (tagged buffer: base or bounds violation)",
			"an RDMA Write past the end of the region is a base or bounds violation",
			"an RDMA Write of 16 octets at the region's last 8 octets",
			"a Terminate: layer DDP, tagged buffer error, 0x01 base or bounds violation",
			iwNeedsConn, func(t *iwt) error {
				c, err := t.connect(iwOpts{})
				if err != nil {
					return err
				}
				c.writeMsg(c.mr.RKey, c.mr.VA+uint64(c.mr.Length-8), pattern(16, 10), true)
				return t.terminated(c, iwarp.LayerDDP, iwarp.ETypeDDPTaggedBuffer, iwarp.ECodeDDPTaggedBaseBounds)
			}),

		// RDMAP checks (RFC 5040).
		mk("rdmap.version", "RFC 5040 §4.8 (remote operation error: invalid RDMAP version)",
			"a message with an RDMAP version other than 1 is a remote operation error",
			"a Send whose RDMAP version field is 0",
			"a Terminate: layer RDMAP, remote operation error, 0x05 invalid RDMAP version",
			iwNeedsRecv, func(t *iwt) error {
				c, err := t.connect(iwOpts{recvs: 1})
				if err != nil {
					return err
				}
				h := rdmapFields(iwarp.RDMAPFields{Opcode: iwarp.OpSend, Last: true, MSN: 1})
				h.RsvdULP0 = uint8(iwarp.OpSend) // RV = 0
				c.send(h, pattern(16, 11), fpduOpts{})
				return t.terminated(c, iwarp.LayerRDMAP, iwarp.ETypeRDMAPRemoteOperation, iwarp.ECodeRDMAPInvalidVersion)
			}),
		mk("rdmap.opcode.reserved", "RFC 5040 §4.3, §4.8 (unexpected opcode)",
			"a message with a reserved RDMAP opcode is an unexpected opcode",
			"an untagged segment on queue 0 with RDMAP opcode 0xe",
			"a Terminate: layer RDMAP, remote operation error, 0x06 unexpected opcode",
			iwNeedsRecv, func(t *iwt) error {
				c, err := t.connect(iwOpts{recvs: 1})
				if err != nil {
					return err
				}
				h := rdmapFields(iwarp.RDMAPFields{Opcode: iwarp.OpSend, Last: true, MSN: 1})
				h.RsvdULP0 = iwarp.RDMAPControl(0xe)
				c.send(h, pattern(16, 12), fpduOpts{})
				return t.terminated(c, iwarp.LayerRDMAP, iwarp.ETypeRDMAPRemoteOperation, iwarp.ECodeRDMAPUnexpectedOpcode)
			}),
		mk("rdmap.opcode.model", "RFC 5040 §4.3, §4.8 (a Send is untagged)",
			"a Send carried in a tagged segment is an unexpected opcode",
			"a tagged DDP segment (T set, the region's STag) whose RDMAP opcode is Send",
			"a Terminate: layer RDMAP, remote operation error, 0x06 unexpected opcode",
			iwNeedsRecv, func(t *iwt) error {
				c, err := t.connect(iwOpts{recvs: 1})
				if err != nil {
					return err
				}
				h := rdmapFields(iwarp.RDMAPFields{Opcode: iwarp.OpWrite, Last: true, STag: c.mr.RKey, TO: c.mr.VA})
				h.RsvdULP0 = iwarp.RDMAPControl(iwarp.OpSend)
				c.send(h, pattern(16, 13), fpduOpts{})
				return t.terminated(c, iwarp.LayerRDMAP, iwarp.ETypeRDMAPRemoteOperation, iwarp.ECodeRDMAPUnexpectedOpcode)
			}),
		mk("rdmap.write.rights", "RFC 5040 §6.4, §4.8 (remote protection error: access rights)",
			"an RDMA Write to a region without remote write access is an access rights violation",
			"an RDMA Write of 16 octets to a region registered for remote read only",
			"a Terminate: layer RDMAP, remote protection error, 0x02 access rights violation",
			iwNeedsConn, func(t *iwt) error {
				c, err := t.connect(iwOpts{mrAccess: []string{AccessRemoteRead}})
				if err != nil {
					return err
				}
				c.writeMsg(c.mr.RKey, c.mr.VA, pattern(16, 14), true)
				return t.terminated(c, iwarp.LayerRDMAP, iwarp.ETypeRDMAPRemoteProtection, iwarp.ECodeRDMAPAccessRights)
			}),
		mk("rdmap.read.stag", "RFC 5040 §6.4, §4.8 (remote protection error: invalid STag)",
			"an RDMA Read Request whose Data Source STag names no region is an invalid STag",
			"an RDMA Read Request of 64 octets from the region's STag with its key octet changed",
			"a Terminate: layer RDMAP, remote protection error, 0x00 invalid STag",
			iwNeedsConn, func(t *iwt) error {
				c, err := t.connect(iwOpts{})
				if err != nil {
					return err
				}
				c.readReq(0x1234, 0x500, 64, c.mr.RKey^0x80, c.mr.VA)
				return t.terminated(c, iwarp.LayerRDMAP, iwarp.ETypeRDMAPRemoteProtection, iwarp.ECodeRDMAPInvalidSTag)
			}),
		mk("rdmap.read.bounds", "RFC 5040 §6.4, §4.8 (remote protection error: base or bounds violation)",
			"an RDMA Read Request past the end of the region is a base or bounds violation",
			"an RDMA Read Request of the region's length + 1 octets",
			"a Terminate: layer RDMAP, remote protection error, 0x01 base or bounds violation",
			iwNeedsConn, func(t *iwt) error {
				c, err := t.connect(iwOpts{})
				if err != nil {
					return err
				}
				c.readReq(0x1234, 0x500, uint32(c.mr.Length+1), c.mr.RKey, c.mr.VA)
				return t.terminated(c, iwarp.LayerRDMAP, iwarp.ETypeRDMAPRemoteProtection, iwarp.ECodeRDMAPBaseBounds)
			}),

		// Data transfer.
		mk("rdmap.read.response", "RFC 5040 §4.4, §5.2 (RDMA Read Response)",
			"an RDMA Read Request is answered by Read Responses to the Data Sink, the last with L set",
			"an RDMA Read Request of 3000 octets at region offset 64, Data Sink STag 0x1234 TO 0x500",
			"tagged Read Response segments to STag 0x1234 at TO 0x500 onwards, contiguous, the last with L, carrying the region's 3000 octets",
			iwNeedsMem, func(t *iwt) error {
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
			}),
		mk("rdmap.write.place", "RFC 5041 §5.1, RFC 5040 §5.1 (RDMA Write; a later Send completes after it is placed)",
			"an RDMA Write in two segments is placed at the tagged offsets and needs no answer",
			"an RDMA Write of 40 octets at region offset 100 in two segments (24 octets without L, 16 with L), then a Send of 4 octets",
			"no FPDU in answer to the Write; once the Send's receive completes, the region holds the 40 octets at offset 100",
			append(iwNeedsRecv, OpReadMR), func(t *iwt) error {
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
			}),
		mk("rdmap.send.deliver", "RFC 5041 §5.2, §5.3, RFC 5040 §5.3 (Send)",
			"a Send in two segments lands in one receive and completes once",
			"a Send of 48 octets in two segments on queue 0, MSN 1: MO 0 (32 octets, no L), MO 32 (16 octets, L)",
			"one receive completion of 48 octets; the receive buffer holds them",
			append(iwNeedsRecv, OpReadMR), func(t *iwt) error {
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
			}),
		mk("rdmap.terminate.header", "RFC 5040 §4.8 (the Terminate carries the erroneous DDP header)",
			"the Terminate for a bad segment carries that segment's DDP header",
			"an RDMA Write of 16 octets to an STag that names no region",
			"a Terminate with the D bit set whose DDP header is the Write's (tagged, the same STag and TO)",
			iwNeedsConn, func(t *iwt) error {
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
			}),
		mk("rdmap.terminate.close", "RFC 5040 §4.8, §6.2 (a Terminate ends the stream)",
			"after sending a Terminate the responder closes the stream and its QP is in the error state",
			"a Send with no receive posted",
			"a Terminate, then the TCP connection closes; the peer's QP is in ERR",
			append(iwNeedsConn, OpQueryQP), func(t *iwt) error {
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
			}),
		mk("rdmap.send.after-write", "RFC 5040 §5.3, RFC 5041 §5.3 (the untagged MSN counts Sends only)",
			"RDMA Writes consume no receive and no MSN: the following Send is MSN 1",
			"an RDMA Write of 16 octets, then a Send of 20 octets with MSN 1",
			"one receive completion of 20 octets (IBV_WC_RECV) and no Terminate",
			iwNeedsRecv, func(t *iwt) error {
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
			}),
	}
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
