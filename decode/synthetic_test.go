package decode

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/softrdma/softrdma/ibcm"
	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/iwarp"
	"github.com/softrdma/softrdma/roce"
)

// synthSeg is one TCP data segment of a synthetic connection: dir 0 is the initiator.
type synthSeg struct {
	dir     int
	payload []byte
}

// synthCapture builds a pcap of one TCP connection: the three-way handshake, the data
// segments (each acknowledged), FINs.
func synthCapture(t testing.TB, segs []synthSeg) []byte {
	t.Helper()
	ips := [2]net.IP{{10, 0, 0, 1}, {10, 0, 0, 2}}
	macs := [2]net.HardwareAddr{{2, 0, 0, 0, 0, 1}, {2, 0, 0, 0, 0, 2}}
	ports := [2]layers.TCPPort{40000, 7174}
	seq := [2]uint32{1000, 900000}
	var frames []frameOut
	ts := time.Unix(1700000000, 0)
	emit := func(dir int, syn, ack, fin bool, payload []byte) {
		eth := &layers.Ethernet{SrcMAC: macs[dir], DstMAC: macs[1-dir], EthernetType: layers.EthernetTypeIPv4}
		ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: ips[dir], DstIP: ips[1-dir]}
		tcp := &layers.TCP{SrcPort: ports[dir], DstPort: ports[1-dir], Seq: seq[dir], Ack: seq[1-dir],
			SYN: syn, ACK: ack, FIN: fin, Window: 65535}
		if err := tcp.SetNetworkLayerForChecksum(ip); err != nil {
			t.Fatal(err)
		}
		buf := gopacket.NewSerializeBuffer()
		if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
			eth, ip, tcp, gopacket.Payload(payload)); err != nil {
			t.Fatal(err)
		}
		d := append([]byte(nil), buf.Bytes()...)
		ts = ts.Add(time.Millisecond)
		frames = append(frames, frameOut{gopacket.CaptureInfo{Timestamp: ts, CaptureLength: len(d), Length: len(d)}, d})
		seq[dir] += uint32(len(payload))
		if syn || fin {
			seq[dir]++
		}
	}
	emit(0, true, false, false, nil)
	emit(1, true, true, false, nil)
	emit(0, false, true, false, nil)
	for _, s := range segs {
		emit(s.dir, false, true, false, s.payload)
		emit(1-s.dir, false, true, false, nil)
	}
	emit(0, false, true, true, nil)
	emit(1, false, true, true, nil)
	return writeCapture(t, frames, layers.LinkTypeEthernet, false)
}

// mpaStream builds one direction of an MPA connection with markers and CRCs: the start
// frame, then FPDUs with markers counted from the first FPDU (RFC 5044 §4.3).
type mpaStream struct {
	t     testing.TB
	b     []byte
	fpdus int // stream octets of FPDUs so far: the marker position
}

func (m *mpaStream) start(f iwarp.MPAFrameFields) {
	b, err := f.Append(m.b)
	if err != nil {
		m.t.Fatal(err)
	}
	m.b = b
}

func (m *mpaStream) fpdu(h iwarp.RDMAPFields, payload []byte) {
	hdr := make([]byte, iwarp.DDPUntaggedHeaderLen)
	n, err := h.Encode(hdr)
	if err != nil {
		m.t.Fatal(err)
	}
	before := len(m.b)
	b, err := iwarp.AppendMarkedFPDU(m.b, uint32(m.fpdus), true, hdr[:n], payload)
	if err != nil {
		m.t.Fatal(err)
	}
	m.b = b
	m.fpdus += len(b) - before
}

// TestSyntheticMarkersTerminate decodes a connection that negotiates markers and CRCs
// (MPA revision 1), sends FPDUs with markers split over segments, and ends with a
// Terminate.
func TestSyntheticMarkersTerminate(t *testing.T) {
	var req, rep mpaStream
	req.t, rep.t = t, t
	req.start(iwarp.MPAFrameFields{Request: true, Markers: true, CRC: true, Revision: iwarp.MPARevision1, PrivateData: []byte("hello")})
	rep.start(iwarp.MPAFrameFields{Markers: true, CRC: true, Revision: iwarp.MPARevision1})
	reqStart, repStart := len(req.b), len(rep.b)
	req.fpdu(iwarp.RDMAPFields{Opcode: iwarp.OpSend, Last: true, MSN: 1}, bytes.Repeat([]byte{'s'}, 1500))
	req.fpdu(iwarp.RDMAPFields{Opcode: iwarp.OpWrite, Last: true, STag: 0x1234, TO: 0x5000}, bytes.Repeat([]byte{'w'}, 100))
	term := make([]byte, 4)
	tf := iwarp.TerminateFields{Layer: iwarp.LayerRDMAP, EType: iwarp.ETypeRDMAPRemoteProtection, ErrorCode: iwarp.ECodeRDMAPInvalidSTag}
	if _, err := tf.Encode(term); err != nil {
		t.Fatal(err)
	}
	rep.fpdu(iwarp.RDMAPFields{Opcode: iwarp.OpTerminate, Last: true, MSN: 1}, term)
	// Segments: start frames whole; the initiator's FPDUs in 700-octet pieces.
	segs := []synthSeg{{0, req.b[:reqStart]}, {1, rep.b[:repStart]}}
	for o := reqStart; o < len(req.b); o += 700 {
		segs = append(segs, synthSeg{0, req.b[o:min(o+700, len(req.b))]})
	}
	segs = append(segs, synthSeg{1, rep.b[repStart:]})
	capture := synthCapture(t, segs)
	res, out, err := decodeBytes(t, capture, allOn)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Errors) != 0 || len(res.Notes) != 0 || res.Packets != 5 {
		t.Fatalf("errors %v notes %v, %d packets\n%s", res.Errors, res.Notes, res.Packets, out)
	}
	for _, want := range []string{"MPA Request rev=1 flags=MC-- private_data=5:68656c6c6f\n", "MPA Reply rev=1 flags=MC--",
		"Send len=1500 untagged QN=0 MSN=1 MO=0 L=1 ulpdu=1518 markers=3 CRC ok",
		"Write len=100 tagged STag=0x00001234 TO=0x5000 L=1 ulpdu=114 markers=1 CRC ok",
		"Terminate len=0 untagged QN=2 MSN=1 MO=0 L=1 RDMA Remote Protection Error: Invalid STag"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	f := res.Flows[0]
	if f.Terminates != 1 || f.MPA == nil || !f.MPA.Markers || !f.MPA.CRC || f.MPA.Revision != 1 || f.FPDUs != 3 {
		t.Errorf("flow %+v", f)
	}
	// A flipped octet in the Write's payload: a bad CRC, named at its frame.
	bad := bytes.Replace(capture, bytes.Repeat([]byte{'w'}, 100), append(bytes.Repeat([]byte{'w'}, 99), 'x'), 1)
	res, _, _ = decodeBytes(t, bad, allOn)
	if len(res.Errors) != 1 || !strings.Contains(res.Errors[0].Reason, "CRC") || res.Flows[0].CRCErrors != 1 {
		t.Errorf("corrupted Write: errors %v", res.Errors)
	}
}

// TestSyntheticRFC7306: Atomic Request, Atomic Response and Immediate Data FPDUs show
// their bodies' fields, and the payload length excludes the body.
func TestSyntheticRFC7306(t *testing.T) {
	var req, rep mpaStream
	req.t, rep.t = t, t
	req.start(iwarp.MPAFrameFields{Request: true, Markers: true, CRC: true, Revision: iwarp.MPARevision1})
	rep.start(iwarp.MPAFrameFields{Markers: true, CRC: true, Revision: iwarp.MPARevision1})
	a := iwarp.AtomicRequest(make([]byte, iwarp.AtomicRequestLen))
	a.SetOpcode(iwarp.AtomicCompareSwap)
	a.SetRequestID(7)
	a.SetRemoteSTag(0xabcd)
	a.SetRemoteTO(0x1000)
	a.SetAddSwapData(0x22)
	a.SetAddSwapMask(0xff)
	a.SetCompareData(0x11)
	a.SetCompareMask(0xf0)
	req.fpdu(iwarp.RDMAPFields{Opcode: iwarp.OpAtomicRequest, Last: true, MSN: 1}, a)
	im := iwarp.ImmediateData(make([]byte, iwarp.ImmediateDataLen))
	im.SetValue(0x0102030405060708)
	req.fpdu(iwarp.RDMAPFields{Opcode: iwarp.OpImmediateDataSE, Last: true, MSN: 1}, im)
	r := iwarp.AtomicResponse(make([]byte, iwarp.AtomicResponseLen))
	r.SetRequestID(7)
	r.SetOriginalValue(0x11)
	rep.fpdu(iwarp.RDMAPFields{Opcode: iwarp.OpAtomicResponse, Last: true, MSN: 1}, r)
	res, out, err := decodeBytes(t, synthCapture(t, []synthSeg{{0, req.b}, {1, rep.b}}), allOn)
	if err != nil || len(res.Errors) != 0 {
		t.Fatalf("err %v, errors %v\n%s", err, res.Errors, out)
	}
	for _, want := range []string{
		"Atomic Request len=0 untagged QN=1 MSN=1 MO=0 L=1 CmpSwap ReqID=7 STag=0x0000abcd TO=0x1000 AddSwap=0x22/0xff Compare=0x11/0xf0",
		"len=0 untagged QN=0 MSN=1 MO=0 L=1 Imm=0x0102030405060708",
		"Atomic Response len=0 untagged QN=3 MSN=1 MO=0 L=1 ReqID=7 Orig=0x11",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestSyntheticGarbage: a connection that starts with an MPA Request and then carries
// octets that are no FPDU is an error, not a crash; a connection of another protocol is
// ignored.
func TestSyntheticGarbage(t *testing.T) {
	var req, rep mpaStream
	req.t, rep.t = t, t
	req.start(iwarp.MPAFrameFields{Request: true, Revision: iwarp.MPARevision2, Enhanced: true, PrivateData: []byte{0x80, 1, 0, 1}})
	rep.start(iwarp.MPAFrameFields{Revision: iwarp.MPARevision2, Enhanced: true, PrivateData: []byte{0x80, 1, 0, 1}})
	junk := bytes.Repeat([]byte{0xde, 0xad, 0xbe, 0xef}, 100)
	res, out, err := decodeBytes(t, synthCapture(t, []synthSeg{{0, req.b}, {1, rep.b}, {0, junk}}), allOn)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode() != 1 || len(res.Errors) == 0 || !strings.Contains(res.Errors[0].Reason, "octets skipped 396 (FPDU framing lost)") {
		t.Errorf("garbage after MPA: errors %v\n%s", res.Errors, out)
	}
	if !strings.Contains(out, "IRD=1 ORD=1 P2P") {
		t.Errorf("MPA v2 IRD/ORD not shown:\n%s", out)
	}
	res, _, _ = decodeBytes(t, synthCapture(t, []synthSeg{{0, []byte("GET / HTTP/1.1\r\n\r\n")}, {1, junk}}), allOn)
	if res.RDMAFrames != 0 || len(res.Errors) != 0 || len(res.Flows) != 0 {
		t.Errorf("HTTP connection: %d RDMA frames, errors %v", res.RDMAFrames, res.Errors)
	}
}

// jsonPackets decodes a capture with --json (no summary) and returns its packets.
func jsonPackets(t *testing.T, capture []byte) []Packet {
	t.Helper()
	_, js, err := decodeBytes(t, capture, Options{JSON: true})
	if err != nil {
		t.Fatal(err)
	}
	var pkts []Packet
	for _, line := range strings.Split(strings.TrimSpace(js), "\n") {
		var p Packet
		if err := json.Unmarshal([]byte(line), &p); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		pkts = append(pkts, p)
	}
	return pkts
}

// TestSyntheticMPAPrivateData: an MPA v2 exchange in peer-to-peer mode shows the RTR
// flags and the ULP's private data after the IRD/ORD words, in text and in JSON.
func TestSyntheticMPAPrivateData(t *testing.T) {
	var req, rep mpaStream
	req.t, rep.t = t, t
	// IRD word: P2P, zero-length RTR, IRD 3; ORD word: WRITE and READ RTR, ORD 2.
	ulp := bytes.Repeat([]byte{0xab}, 40)
	req.start(iwarp.MPAFrameFields{Request: true, CRC: true, Revision: iwarp.MPARevision2, Enhanced: true,
		PrivateData: append([]byte{0xc0, 3, 0xc0, 2}, ulp...)})
	// The reply picks WRITE as the RTR and carries no ULP data.
	rep.start(iwarp.MPAFrameFields{CRC: true, Revision: iwarp.MPARevision2, Enhanced: true, PrivateData: []byte{0x80, 2, 0x80, 3}})
	capture := synthCapture(t, []synthSeg{{0, req.b}, {1, rep.b}})
	res, out, err := decodeBytes(t, capture, allOn)
	if err != nil || len(res.Errors) != 0 {
		t.Fatalf("err %v, errors %v\n%s", err, res.Errors, out)
	}
	for _, want := range []string{
		"MPA Request rev=2 flags=-C-H IRD=3 ORD=2 P2P RTR=zlen,write,read private_data=44:" + strings.Repeat("ab", 32) + "…\n",
		"MPA Reply rev=2 flags=-C-H IRD=2 ORD=3 P2P RTR=write private_data=4\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	var got []MPAInfo
	for _, p := range jsonPackets(t, capture) {
		if p.MPA != nil {
			got = append(got, *p.MPA)
		}
	}
	if len(got) != 2 || got[0].PrivateData != "c003c002"+strings.Repeat("ab", 40) || got[0].RTR != "zlen,write,read" ||
		got[1].PrivateData != "80028003" || got[1].RTR != "write" || !got[1].PeerToPeer {
		t.Errorf("JSON MPA records %+v", got)
	}
}

// rewriteRoCE edits a RoCE frame's IB packet with fn and fixes the ICRC.
func rewriteRoCE(t testing.TB, data []byte, fn func(p *ibtransport.Packet)) []byte {
	t.Helper()
	d := append([]byte(nil), data...)
	var f roce.Frame
	if err := f.DecodeEthernet(d); err != nil {
		t.Fatal(err)
	}
	var p ibtransport.Packet
	if err := p.Decode(f.IB); err != nil {
		t.Fatal(err)
	}
	fn(&p)
	roce.SetICRC(&f)
	return d
}

// firstFrame returns a copy of the first frame of a capture whose IB packet has opcode op
// (and, for QP1, whose CM MAD is attribute cm when cm is not 0).
func firstFrame(t testing.TB, name string, op ibtransport.Opcode, cm ibcm.Attribute) frameOut {
	t.Helper()
	for _, fr := range readFrames(t, readFile(t, captureDir+"/"+name)) {
		var f roce.Frame
		var p ibtransport.Packet
		if f.DecodeEthernet(fr.data) != nil || p.Decode(f.IB) != nil || p.BTH.Opcode() != op {
			continue
		}
		if cm != 0 {
			if mad, err := ibcm.MADFromPacket(&p); err != nil || mad.Attribute() != cm {
				continue
			}
		}
		fr.data = append([]byte(nil), fr.data...)
		return fr
	}
	t.Fatalf("%s: no frame with opcode %v", name, op)
	return frameOut{}
}

// retypeRoCE gives a RoCE frame's IB packet opcode op, keeping every byte after the
// BTH (so the extension headers op adds are read from the payload), and fixes the ICRC.
func retypeRoCE(t testing.TB, data []byte, op ibtransport.Opcode) []byte {
	return rewriteRoCE(t, data, func(p *ibtransport.Packet) { p.BTH.SetOpcode(op) })
}

// TestExtensionHeaderFields: the per-packet line and the JSON object show the ImmDt, IETH,
// AtomicETH and AtomicAckETH fields, each set here to a value no capture has.
func TestExtensionHeaderFields(t *testing.T) {
	send := firstFrame(t, "rxe-send-lat.pcap", ibtransport.OpcodeRCSendOnly, 0)
	imm, inv := send, send
	imm.data = rewriteRoCE(t, retypeRoCE(t, send.data, ibtransport.OpcodeRCSendOnlyWithImm),
		func(p *ibtransport.Packet) { p.ImmDt.SetImmediate(0xdeadbeef) })
	inv.data = rewriteRoCE(t, retypeRoCE(t, send.data, ibtransport.OpcodeRCSendOnlyWithInvalidate),
		func(p *ibtransport.Packet) { p.IETH.SetRKey(0x00c0ffee); p.BTH.SetPSN(p.BTH.PSN() + 1) })
	cas := firstFrame(t, "rxe-atomic-cas.pcap", ibtransport.OpcodeRCCompareSwap, 0)
	cas.data = rewriteRoCE(t, cas.data, func(p *ibtransport.Packet) {
		p.AtomicETH.SetVA(0x7f0000001000)
		p.AtomicETH.SetRKey(0x1234)
		p.AtomicETH.SetSwapAdd(0x1122334455667788)
		p.AtomicETH.SetCompare(0x99aabbccddeeff00)
	})
	ack := firstFrame(t, "rxe-atomic-cas.pcap", ibtransport.OpcodeRCAtomicAcknowledge, 0)
	ack.data = rewriteRoCE(t, ack.data, func(p *ibtransport.Packet) { p.AtomicAckETH.SetOrigData(0x0123456789abcdef) })
	cas.ci.Timestamp, ack.ci.Timestamp = send.ci.Timestamp, send.ci.Timestamp
	capture := writeCapture(t, []frameOut{imm, inv, cas, ack}, layers.LinkTypeEthernet, false)
	res, out, err := decodeBytes(t, capture, allOn)
	if err != nil || len(res.Errors) != 0 {
		t.Fatalf("err %v, errors %v\n%s", err, res.Errors, out)
	}
	for _, want := range []string{
		"RC SEND Only with Immediate QP=", " len=60 ImmDt=0xdeadbeef\n",
		"RC SEND Only with Invalidate QP=", " len=60 IETH RKey=0x00c0ffee\n",
		" AtomicETH VA=0x7f0000001000 RKey=0x00001234 SwapAdd=0x1122334455667788 Compare=0x99aabbccddeeff00",
		" AtomicAckETH Orig=0x123456789abcdef",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	pkts := jsonPackets(t, capture)
	if len(pkts) != 4 || pkts[0].ImmDt == nil || *pkts[0].ImmDt != 0xdeadbeef || pkts[1].IETHRKey == nil || *pkts[1].IETHRKey != 0xc0ffee ||
		pkts[2].AtomicETH == nil || pkts[2].AtomicETH.SwapAdd != 0x1122334455667788 || pkts[2].AtomicETH.Compare != 0x99aabbccddeeff00 ||
		pkts[3].AtomicAckOrig == nil || *pkts[3].AtomicAckOrig != 0x0123456789abcdef {
		t.Errorf("JSON packets: %+v", pkts)
	}
}

// TestCMMRAAndREJ: a captured CM REP rewritten as an MRA and as a REJ decodes to lines
// that name the message, both communication IDs and the REJ's reason.
func TestCMMRAAndREJ(t *testing.T) {
	rep := firstFrame(t, "rxe-rdma-cm-rping.pcap", ibtransport.OpcodeUDSendOnly, ibcm.AttrREP)
	toCM := func(a ibcm.Attribute, fill func(m ibcm.MAD)) frameOut {
		fr := rep
		fr.data = rewriteRoCE(t, rep.data, func(p *ibtransport.Packet) {
			m, err := ibcm.MADFromPacket(p)
			if err != nil {
				t.Fatal(err)
			}
			r := m.REP()
			local, remote := r.LocalCommID(), r.RemoteCommID()
			ibcm.Encode(m, a, m.TransactionID())
			m.REJ().SetLocalCommID(local) // MRA and REJ put the IDs where every CM message does
			m.REJ().SetRemoteCommID(remote)
			fill(m)
		})
		return fr
	}
	mra := toCM(ibcm.AttrMRA, func(m ibcm.MAD) { m.MRA().SetMessageMRAed(0); m.MRA().SetServiceTimeout(20) })
	rej := toCM(ibcm.AttrREJ, func(m ibcm.MAD) { m.REJ().SetMessageRejected(0); m.REJ().SetReason(ibcm.RejConsumer) })
	res, out, err := decodeBytes(t, writeCapture(t, []frameOut{mra, rej}, layers.LinkTypeEthernet, false), allOn)
	if err != nil || len(res.Errors) != 0 {
		t.Fatalf("err %v, errors %v\n%s", err, res.Errors, out)
	}
	for _, want := range []string{
		"UD SEND only CM MRA QP=0x000001",
		"LocalCommID=0xfcc6d299 RemoteCommID=0x20054e4f\n",
		"UD SEND only CM REJ QP=0x000001",
		"LocalCommID=0xfcc6d299 RemoteCommID=0x20054e4f reason: consumer reject\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestRoCEFlowStats edits a capture: a request sent twice (a retransmission), a request
// missing (a PSN gap), ACKs turned into a NAK and an RNR NAK. The flow summary counts
// each, and the frames are still well formed.
func TestRoCEFlowStats(t *testing.T) {
	frames := readFrames(t, readFile(t, captureDir+"/rxe-send-lat.pcap"))
	var out []frameOut
	var reqs, acks int
	for _, fr := range frames {
		var f roce.Frame
		var p ibtransport.Packet
		if f.DecodeEthernet(fr.data) != nil || p.Decode(f.IB) != nil {
			out = append(out, fr)
			continue
		}
		op := p.BTH.Opcode()
		switch {
		case op == ibtransport.OpcodeRCSendOnly:
			reqs++
			switch reqs {
			case 3: // retransmitted
				out = append(out, fr, fr)
				continue
			case 6: // lost
				continue
			}
		case op == ibtransport.OpcodeRCAcknowledge:
			acks++
			switch acks {
			case 8:
				fr.data = rewriteRoCE(t, fr.data, func(p *ibtransport.Packet) {
					p.AETH.SetSyndrome(ibtransport.NewNAKSyndrome(ibtransport.NAKPSNSequenceError))
				})
			case 9:
				fr.data = rewriteRoCE(t, fr.data, func(p *ibtransport.Packet) {
					p.AETH.SetSyndrome(ibtransport.NewRNRNAKSyndrome(14))
				})
			}
		}
		out = append(out, fr)
	}
	res, text, err := decodeBytes(t, writeCapture(t, out, layers.LinkTypeEthernet, false), allOn)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Errors) != 0 || len(res.Flows) != 1 {
		t.Fatalf("errors %v, %d flows", res.Errors, len(res.Flows))
	}
	f := res.Flows[0]
	if f.Duplicates != 1 || f.PSNGaps != 1 || f.PSNsMissing != 1 || f.RNRNAKs != 1 || f.NAKs["PSN sequence error"] != 1 || f.ACKs != 18 {
		t.Errorf("flow: duplicates %d, gaps %d (%d missing), RNR NAKs %d, NAKs %v, ACKs %d",
			f.Duplicates, f.PSNGaps, f.PSNsMissing, f.RNRNAKs, f.NAKs, f.ACKs)
	}
	if f.Messages["SEND"] != 19 {
		t.Errorf("messages %v: the retransmission counted, or the loss not", f.Messages)
	}
	for _, want := range []string{"AETH NAK PSN sequence error MSN=", "AETH RNR NAK timer=14 (1.28ms) MSN="} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// TestRoCEv1AndVLAN: RoCEv1 frames (Ethertype 0x8915, GRH) built from the capture's
// packets, and frames with an 802.1Q tag, decode without errors.
func TestRoCEv1AndVLAN(t *testing.T) {
	frames := readFrames(t, readFile(t, captureDir+"/rxe-rdma-cm-rping.pcap"))
	var v1 []frameOut
	for _, fr := range frames {
		var f roce.Frame
		if err := f.DecodeEthernet(fr.data); err != nil {
			t.Fatal(err)
		}
		h := f.Headers()
		h.Version = roce.RoCEv1
		h.Src, h.Dst = ipToGID(f.Src), ipToGID(f.Dst)
		d := make([]byte, h.Len()+len(f.IB)+roce.ICRCLen)
		copy(d[h.Len():], f.IB)
		if _, err := h.EncodeFrame(d, len(f.IB)); err != nil {
			t.Fatal(err)
		}
		ci := fr.ci
		ci.CaptureLength, ci.Length = len(d), len(d)
		v1 = append(v1, frameOut{ci, d})
	}
	res, out, err := decodeBytes(t, writeCapture(t, v1, layers.LinkTypeEthernet, false), allOn)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Errors) != 0 || res.RDMAFrames != len(frames) || !strings.Contains(out, "10.77.0.22 → 10.77.0.21 RoCEv1 UD SEND only CM REQ") {
		t.Errorf("RoCEv1: errors %v, %d RDMA frames\n%.400s", res.Errors, res.RDMAFrames, out)
	}
	// RoCEv1 in Linux cooked captures (the protocol field 0x8915), whole and cut after
	// the headers of the largest (the GRH is 40 bytes, a CM MAD's BTH and DETH 20).
	for _, snapLen := range []int{0, 14 + 40 + 20 + 10} {
		eth := v1
		if snapLen > 0 {
			eth = snap(v1, snapLen)
		}
		want, wantOut, _ := decodeBytes(t, writeCapture(t, eth, layers.LinkTypeEthernet, false), Options{})
		for _, link := range []linkType{linkLinuxSLL, linkLinuxSLL2} {
			cooked := cook(t, v1, link)
			delta := len(cooked[0].data) - len(v1[0].data)
			if snapLen > 0 {
				cooked = snap(cooked, snapLen+delta)
			}
			res, out, err := decodeBytes(t, withLinkType(t, cooked, link, false), Options{})
			if err != nil {
				t.Fatal(err)
			}
			out = unshiftLengths(out, delta)
			for i := range res.Errors {
				res.Errors[i].Reason = unshiftLengths(res.Errors[i].Reason, delta)
			}
			if out != wantOut || fmt.Sprint(res.Errors) != fmt.Sprint(want.Errors) || res.Cut != want.Cut || res.RDMAFrames != len(v1) {
				t.Errorf("RoCEv1 as %v (snap length %d): errors %v (want %v), %d RDMA frames\n%.400s\nwant\n%.400s", link, snapLen, res.Errors, want.Errors, res.RDMAFrames, out, wantOut)
			}
		}
	}
	for _, name := range []string{"rxe-rdma-cm-rping.pcap", "siw-crc-rping.pcap"} {
		frames := readFrames(t, readFile(t, captureDir+"/"+name))
		want, _, _ := decodeBytes(t, writeCapture(t, frames, layers.LinkTypeEthernet, false), Options{})
		for i, fr := range frames {
			d := make([]byte, 0, len(fr.data)+4)
			d = append(d, fr.data[:12]...)
			d = append(d, 0x81, 0x00, 0x00, 0x07)
			d = append(d, fr.data[12:]...)
			frames[i].data = d
			frames[i].ci.CaptureLength, frames[i].ci.Length = len(d), len(d)
		}
		res, _, err := decodeBytes(t, writeCapture(t, frames, layers.LinkTypeEthernet, false), Options{})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Errors) != 0 || res.RDMAFrames != want.RDMAFrames || res.Packets != want.Packets {
			t.Errorf("%s with VLAN tags: errors %v, %d RDMA frames (want %d)", name, res.Errors, res.RDMAFrames, want.RDMAFrames)
		}
	}
}

func ipToGID(a netip.Addr) netip.Addr { return netip.AddrFrom16(a.As16()) }

// TestOpcodeFilterNAKs: --opcode nak shows the NAKs and RNR NAKs (Acknowledges
// whose AETH says so: no opcode of their own), --opcode rnr the RNR NAK alone,
// --opcode "sequence error" the PSN sequence error NAK; --opcode acknowledge
// still shows every Acknowledge.
func TestOpcodeFilterNAKs(t *testing.T) {
	frames := readFrames(t, readFile(t, captureDir+"/rxe-send-lat.pcap"))
	var acks int
	for i, fr := range frames {
		var f roce.Frame
		var p ibtransport.Packet
		if f.DecodeEthernet(fr.data) != nil || p.Decode(f.IB) != nil || p.BTH.Opcode() != ibtransport.OpcodeRCAcknowledge {
			continue
		}
		switch acks++; acks {
		case 8:
			frames[i].data = rewriteRoCE(t, fr.data, func(p *ibtransport.Packet) {
				p.AETH.SetSyndrome(ibtransport.NewNAKSyndrome(ibtransport.NAKPSNSequenceError))
			})
		case 9:
			frames[i].data = rewriteRoCE(t, fr.data, func(p *ibtransport.Packet) {
				p.AETH.SetSyndrome(ibtransport.NewRNRNAKSyndrome(14))
			})
		}
	}
	capture := writeCapture(t, frames, layers.LinkTypeEthernet, false)
	for _, c := range []struct {
		opcode string
		want   []string // what each line shown contains, in order
	}{
		{"nak", []string{"AETH NAK PSN sequence error", "AETH RNR NAK"}},
		{"NAK", []string{"AETH NAK PSN sequence error", "AETH RNR NAK"}},
		{"rnr", []string{"AETH RNR NAK"}},
		{"sequence error", []string{"AETH NAK PSN sequence error"}},
	} {
		f := Filter{Opcodes: []string{c.opcode}}
		_, out, err := decodeBytes(t, capture, Options{Filter: &f})
		if err != nil {
			t.Fatal(err)
		}
		got := shownLines(out)
		if len(got) != len(c.want) {
			t.Errorf("--opcode %q: %d lines, want %d:\n%s", c.opcode, len(got), len(c.want), strings.Join(got, "\n"))
			continue
		}
		for i, w := range c.want {
			if !strings.Contains(got[i], w) {
				t.Errorf("--opcode %q: line %q, want one with %q", c.opcode, got[i], w)
			}
		}
	}
	f := Filter{Opcodes: []string{"acknowledge"}}
	_, out, err := decodeBytes(t, capture, Options{Filter: &f})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(shownLines(out)); n != acks {
		t.Errorf("--opcode acknowledge: %d lines, want every Acknowledge, %d", n, acks)
	}
}
