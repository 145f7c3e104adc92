package iwarp

import (
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/softrdma/softrdma/header"
)

// This file is MPA connection setup (RFC 5044 §7, RFC 6581): the Request and Reply
// start frames, the negotiation of revision, CRC, markers, IRD/ORD and the
// peer-to-peer RTR, and rejection.
//
// What Linux siw does, from the captures (testdata/captures/siw-*.pcap): revision 2
// with H set and exactly 4 octets of private data, the IRD/ORD words, in both
// frames: 0x0001/0x0001 for rping (rdma_cm's default responder resources and
// initiator depth of 1), 0x0000/0x0000 for perftest's write_bw and send_bw,
// 0x0080/0x0080 for read_bw. Neither word ever has P, Z, W or R set: siw runs with
// peer_to_peer off and sends no RTR. The first FPDU after the Reply is the ULP's own
// (in rping the client's, i.e. the initiator's, Send).

// handshakeError wraps err as an ErrHandshake error.
func handshakeError(err error) error {
	return fmt.Errorf("%w: %w", ErrHandshake, err)
}

// readStartFrame reads exactly one MPA start frame from nc (no octet beyond it, so
// that the FPDU stream that follows stays in the socket), with the key request
// selects. The frame's octets go to obs.
func readStartFrame(nc net.Conn, obs StreamObserver, request bool) (MPAFrame, error) {
	var hdr [MPAFrameHeaderLen + MPAMaxPrivateData]byte
	n, err := io.ReadFull(nc, hdr[:MPAFrameHeaderLen])
	if obs != nil && n > 0 {
		obs.Received(hdr[:n])
	}
	what := "reply"
	if request {
		what = "request"
	}
	if err != nil {
		return nil, handshakeError(fmt.Errorf("mpa: %s frame: %d of %d octets: %w", what, n, MPAFrameHeaderLen, err))
	}
	m := MPAFrame(hdr[:MPAFrameHeaderLen])
	if (request && !m.IsRequest()) || (!request && !m.IsReply()) {
		return nil, handshakeError(&header.Error{Header: "mpa", Field: "key", NoValue: true,
			Reason: quoteKey(m.Key()) + " is not the " + what + " key", Err: ErrBadKey})
	}
	pd := int(m.PrivateDataLen())
	if pd > MPAMaxPrivateData {
		return m, handshakeError(&header.Error{Header: "mpa", Field: "private data length", Value: uint64(pd),
			Limit: MPAMaxPrivateData, Rel: ">", Err: ErrTooLong})
	}
	n, err = io.ReadFull(nc, hdr[MPAFrameHeaderLen:MPAFrameHeaderLen+pd])
	if obs != nil && n > 0 {
		obs.Received(hdr[MPAFrameHeaderLen : MPAFrameHeaderLen+n])
	}
	if err != nil {
		return m, handshakeError(fmt.Errorf("mpa: %s private data: %d of %d octets: %w", what, n, pd, err))
	}
	return append(MPAFrame(nil), hdr[:MPAFrameHeaderLen+pd]...), nil
}

// writeStartFrame encodes f and writes it.
func writeStartFrame(nc net.Conn, obs StreamObserver, f *MPAFrameFields) error {
	b, err := f.Append(nil)
	if err != nil {
		return err
	}
	if obs != nil {
		obs.Sent(b)
	}
	_, err = nc.Write(b)
	return err
}

// appPrivateData returns a copy of the frame's ULP private data.
func appPrivateData(m MPAFrame) []byte {
	return append([]byte(nil), m.ULPPrivateData()...)
}

// enhancedFrame reports whether m is an RFC 6581 frame with IRD/ORD words.
func enhancedFrame(m MPAFrame) bool {
	_, ok := m.IRDORD()
	return ok
}

// maxAppPrivateData returns how much application private data a frame of the
// revision carries.
func maxAppPrivateData(rev uint8) int {
	if rev >= MPARevision2 {
		return MPAMaxPrivateData - MPAv2IRDORDLen
	}
	return MPAMaxPrivateData
}

// buildIRDORD returns the 4 IRD/ORD octets.
func buildIRDORD(ird, ord int, p2p bool, rtr RTRFlags) []byte {
	w := MPAv2IRDORD(make([]byte, MPAv2IRDORDLen))
	w.SetIRD(uint16(ird))
	w.SetORD(uint16(ord))
	w.SetPeerToPeer(p2p)
	w.SetZeroLengthRTR(rtr&RTRZeroLength != 0)
	w.SetWriteRTR(rtr&RTRWrite != 0)
	w.SetReadRTR(rtr&RTRRead != 0)
	return w
}

// rtrOf returns the RTR bits of IRD/ORD words.
func rtrOf(w MPAv2IRDORD) RTRFlags {
	var f RTRFlags
	if w.ZeroLengthRTR() {
		f |= RTRZeroLength
	}
	if w.WriteRTR() {
		f |= RTRWrite
	}
	if w.ReadRTR() {
		f |= RTRRead
	}
	return f
}

// requestFrame builds the initiator's Request.
func requestFrame(p *ConnParams, ird, ord int) (*MPAFrameFields, error) {
	rev := p.revision()
	if len(p.PrivateData) > maxAppPrivateData(rev) {
		return nil, &header.Error{Header: "mpa", Field: "private data length", Value: uint64(len(p.PrivateData)),
			Limit: uint64(maxAppPrivateData(rev)), Rel: ">", Reason: "revision " + strconv.Itoa(int(rev)), Err: ErrTooLong}
	}
	f := &MPAFrameFields{Request: true, Revision: rev,
		Markers: p.Markers == MarkersRequest, CRC: p.CRC != CRCAccept}
	if !p.NoExtensions {
		f.Reserved = MPAFlagSoftRDMAExtensions | p.largeFPDUFlag()
	}
	pd := p.PrivateData
	if rev == MPARevision2 {
		f.Enhanced = true
		var rtr RTRFlags
		if p.PeerToPeer {
			rtr = p.rtrSet()
		}
		pd = append(buildIRDORD(ird, ord, p.PeerToPeer, rtr), p.PrivateData...)
	}
	f.PrivateData = pd
	return f, nil
}

// negotiateAsInitiator evaluates the Reply to our Request. A non-nil term asks for
// a Terminate before the connection is dropped (RFC 6581 §9: no matching RTR,
// insufficient IRD).
func negotiateAsInitiator(p *ConnParams, req, rep MPAFrame, ird, ord int) (neg Negotiated, peerPD []byte, term *TerminateFields, err error) {
	rev := rep.Revision()
	neg = Negotiated{Revision: rev, IRD: ird, ORD: ord, PeerIRD: -1, PeerORD: -1}
	if rev < MPARevision1 || rev > req.Revision() {
		return neg, nil, nil, handshakeError(&header.Error{Header: "mpa", Field: "reply revision", Value: uint64(rev),
			Reason: "the request offered " + strconv.Itoa(int(req.Revision())), Err: ErrBadValue})
	}
	neg.Enhanced = rev == MPARevision2 && enhancedFrame(req) && enhancedFrame(rep)
	peerPD = appPrivateData(rep)
	if rep.Reject() {
		return neg, peerPD, nil, &RejectError{ByPeer: true, PrivateData: peerPD,
			Reason: "the peer's private data: " + strconv.Quote(string(peerPD))}
	}
	neg.CRC = req.CRC() || rep.CRC()
	if p.CRC == CRCRequire && !rep.CRC() {
		return neg, peerPD, nil, &RejectError{Reason: "CRC required, and the reply has C=0"}
	}
	if rep.Markers() && p.Markers == MarkersRefuse {
		return neg, peerPD, nil, &RejectError{Reason: "the peer asks for markers"}
	}
	neg.SendMarkers, neg.RecvMarkers = rep.Markers(), req.Markers()
	neg.Extensions = req.Reserved()&MPAFlagSoftRDMAExtensions != 0 && rep.Reserved()&MPAFlagSoftRDMAExtensionsAck != 0
	neg.LargeFPDU = neg.Extensions && rep.Reserved()&MPAFlagSoftRDMALargeFPDU != 0 && !p.SegmentFPDUs && !neg.SendMarkers
	if !neg.Enhanced {
		return neg, peerPD, nil, nil
	}
	qw, _ := req.IRDORD()
	rw, _ := rep.IRDORD()
	neg.PeerIRD, neg.PeerORD = int(rw.IRD()), int(rw.ORD())
	neg.ORD = min(ord, neg.PeerIRD)
	if neg.PeerORD > ird {
		// RFC 6581 §9.1: the responder's ORD must not exceed our IRD.
		return neg, peerPD, &TerminateFields{Layer: LayerLLP, EType: ETypeLLPMPA, ErrorCode: ECodeMPAInsufficientIRD},
			&TerminateError{Local: true, Layer: LayerLLP, EType: ETypeLLPMPA, Code: ECodeMPAInsufficientIRD,
				Err: fmt.Errorf("mpa: the peer's ORD %d > our IRD %d", neg.PeerORD, ird)}
	}
	if qw.PeerToPeer() && rw.PeerToPeer() {
		neg.PeerToPeer = true
		got := rtrOf(rw)
		if got&(got-1) != 0 || got&rtrOf(qw) == 0 {
			return neg, peerPD, &TerminateFields{Layer: LayerLLP, EType: ETypeLLPMPA, ErrorCode: ECodeMPANoMatchingRTROption},
				&TerminateError{Local: true, Layer: LayerLLP, EType: ETypeLLPMPA, Code: ECodeMPANoMatchingRTROption,
					Err: fmt.Errorf("mpa: the reply picks RTR %s, the request offered %s", got, rtrOf(qw))}
		}
		neg.RTR = got
	}
	return neg, peerPD, nil, nil
}

// requestVerdict is the responder's evaluation of a Request against its policy.
type requestVerdict struct {
	rev      uint8
	enhanced bool
	p2p      bool
	rtr      RTRFlags
	reject   string // why the policy rejects it ("" to accept)
}

// judgeRequest applies the responder's policy to a Request.
func judgeRequest(p *ConnParams, req MPAFrame) requestVerdict {
	v := requestVerdict{rev: min(req.Revision(), p.revision())}
	if req.Revision() == 0 {
		v.rev = p.revision()
		v.reject = "MPA revision 0"
		return v
	}
	v.enhanced = v.rev == MPARevision2 && enhancedFrame(req)
	if v.enhanced {
		qw, _ := req.IRDORD()
		v.p2p = qw.PeerToPeer()
		if v.p2p {
			offered := rtrOf(qw) & p.rtrSet()
			for _, f := range []RTRFlags{RTRWrite, RTRRead, RTRZeroLength} {
				if offered&f != 0 {
					v.rtr = f
					break
				}
			}
		}
	}
	switch {
	case p.CRC == CRCRequire && !req.CRC():
		v.reject = "CRC required"
	case req.Markers() && p.Markers == MarkersRefuse:
		v.reject = "markers not supported"
	case p.PeerToPeer && !v.p2p:
		v.reject = "peer-to-peer mode required"
	case v.p2p && v.rtr == 0:
		v.reject = "no matching RTR option"
	}
	return v
}

// replyFrame builds the responder's Reply: an acceptance, or with reject a
// rejection carrying pd.
func replyFrame(p *ConnParams, req MPAFrame, v requestVerdict, ird, ord int, reject bool, pd []byte) (*MPAFrameFields, error) {
	if len(pd) > maxAppPrivateData(v.rev) {
		return nil, &header.Error{Header: "mpa", Field: "private data length", Value: uint64(len(pd)),
			Limit: uint64(maxAppPrivateData(v.rev)), Rel: ">", Err: ErrTooLong}
	}
	f := &MPAFrameFields{Revision: v.rev, Reject: reject,
		CRC: req.CRC() || p.CRC != CRCAccept, Markers: p.Markers == MarkersRequest}
	if !p.NoExtensions && req.Reserved()&MPAFlagSoftRDMAExtensions != 0 {
		f.Reserved = MPAFlagSoftRDMAExtensionsAck | p.largeFPDUFlag()
	}
	if v.enhanced {
		f.Enhanced = true
		qw, _ := req.IRDORD()
		o := ord
		if !reject {
			o = min(ord, int(qw.IRD()))
		}
		pd = append(buildIRDORD(ird, o, v.p2p && !reject, v.rtr), pd...)
	}
	f.PrivateData = pd
	return f, nil
}

// negotiatedAsResponder is what an accepting Reply settles.
func negotiatedAsResponder(p *ConnParams, req MPAFrame, v requestVerdict, ird, ord int) Negotiated {
	neg := Negotiated{Revision: v.rev, Enhanced: v.enhanced, IRD: ird, ORD: ord, PeerIRD: -1, PeerORD: -1,
		CRC:         req.CRC() || p.CRC != CRCAccept,
		SendMarkers: req.Markers(), RecvMarkers: p.Markers == MarkersRequest,
		Extensions: !p.NoExtensions && req.Reserved()&MPAFlagSoftRDMAExtensions != 0,
		PeerToPeer: v.p2p, RTR: v.rtr}
	neg.LargeFPDU = neg.Extensions && req.Reserved()&MPAFlagSoftRDMALargeFPDU != 0 && !p.SegmentFPDUs && !neg.SendMarkers
	if v.enhanced {
		qw, _ := req.IRDORD()
		neg.PeerIRD, neg.PeerORD = int(qw.IRD()), int(qw.ORD())
		neg.ORD = min(ord, neg.PeerIRD)
	}
	return neg
}

// setHandshakeDeadline bounds the exchange by the params and ctx's deadline.
func setHandshakeDeadline(nc net.Conn, p *ConnParams, ctxDeadline time.Time, ok bool) {
	d := time.Now().Add(p.handshakeTimeout())
	if ok && ctxDeadline.Before(d) {
		d = ctxDeadline
	}
	nc.SetDeadline(d)
}

// handshakeTerminate returns the octets of a Terminate FPDU (queue 2, MSN 1) sent
// during connection setup, framed as neg says (the FPDU stream starts with it).
func handshakeTerminate(neg *Negotiated, t *TerminateFields) []byte {
	var ulpdu [DDPUntaggedHeaderLen + 64]byte
	rf := RDMAPFields{Opcode: OpTerminate, Last: true, MSN: 1}
	n, _ := rf.Encode(ulpdu[:])
	m, _ := t.Encode(ulpdu[n:])
	if neg.SendMarkers {
		b, _ := AppendMarkedFPDU(nil, 0, neg.CRC, ulpdu[:n+m])
		return b
	}
	b, _ := AppendFPDU(nil, neg.CRC, ulpdu[:n+m])
	return b
}
