package ibcm

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/roce"
)

// cmFlowLabels returns, for a capture with rdma_cm connections, the primary flow
// label of each connection by QPN (both ends' QPNs: the REQ's and the REP's); nil if
// the capture has no REQ.
func cmFlowLabels(tb testing.TB, name string) map[uint32]uint32 {
	tb.Helper()
	var m map[uint32]uint32
	byComm := map[uint32]uint32{} // REQ local comm ID -> flow label
	for _, mad := range captureMADs(tb, name) {
		switch mad.Attribute() {
		case AttrREQ:
			if m == nil {
				m = map[uint32]uint32{}
			}
			r := mad.REQ()
			fl := r.PrimaryPath().FlowLabel()
			m[r.LocalQPN()] = fl
			byComm[r.LocalCommID()] = fl
		case AttrREP:
			r := mad.REP()
			m[r.LocalQPN()] = byComm[r.RemoteCommID()]
		}
	}
	return m
}

var (
	addr21 = netip.MustParseAddr("10.77.0.21") // server, from the rping log
	addr22 = netip.MustParseAddr("10.77.0.22") // client
)

// connection is what one captured rdma_cm connection must show.
type connection struct {
	reqComm, repComm uint32 // local communication IDs of REQ and REP
	qpn              uint32 // both ends' QPN (equal in these runs)
	reqPSN, repPSN   uint32
	resources        uint8 // responder resources = initiator depth, both ways
	cmaSrcPort       uint16
	servicePort      uint16
}

func TestCMCaptures(t *testing.T) {
	tests := []struct {
		capture string
		conns   []connection
	}{
		// rping: port 7174 is rping's default.
		{"rxe-rdma-cm-rping.pcap", []connection{
			{0x20054e4f, 0xfcc6d299, 0x1b, 0x68f4fe, 0x6f92e1, 1, 0xb823, 7174},
		}},
		// perftest -R: two connections (parameter exchange, then test) to port 18515.
		{"rxe-write-bw-rdma-cm.pcap", []connection{
			{0x21054e4f, 0xfec6d299, 0x1c, 0x44c886, 0x172fcc, 0, 0xb0cb, 18515},
			{0x22054e4f, 0xf8c6d299, 0x1d, 0x62aab1, 0xb4f504, 0, 0xa4dc, 18515},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.capture, func(t *testing.T) {
			mads := captureMADs(t, tc.capture)
			frames := roceFrames(t, tc.capture)
			for _, c := range tc.conns {
				checkConnection(t, mads, frames, c)
			}
		})
	}
}

func checkConnection(t *testing.T, mads []MAD, frames []roce.Frame, c connection) {
	t.Helper()
	var seen []string
	for _, m := range mads {
		switch m.Attribute() {
		case AttrREQ:
			r := m.REQ()
			if r.LocalCommID() != c.reqComm {
				continue
			}
			seen = append(seen, "REQ")
			ps, port, ok := ParseCMAServiceID(r.ServiceID())
			if !ok || ps != RDMAPortSpaceTCP || port != c.servicePort || r.ServiceID() != CMAServiceID(RDMAPortSpaceTCP, c.servicePort) {
				t.Errorf("REQ service ID %#x: %#x %d %v", r.ServiceID(), ps, port, ok)
			}
			if r.LocalCAGUID() != 0x505400fffe770002 || r.LocalQKey() != 0 || r.LocalQPN() != c.qpn ||
				r.ResponderResources() != c.resources || r.InitiatorDepth() != c.resources ||
				r.LocalEECN() != 0 || r.RemoteEECN() != 0 || r.StartingPSN() != c.reqPSN {
				t.Errorf("REQ %+v", r.Fields())
			}
			if r.RemoteCMResponseTimeout() != 0x14 || r.TransportServiceType() != 0 || r.EndToEndFlowControl() ||
				r.LocalCMResponseTimeout() != 0x14 || r.RetryCount() != 7 || r.PKey() != 0xFFFF ||
				r.PathMTU() != 3 || r.RDCExists() || r.RNRRetryCount() != 7 || r.MaxCMRetries() != 15 ||
				r.SRQ() || r.ExtendedTransportType() != 0 {
				t.Errorf("REQ flags %+v", r.Fields())
			}
			p := r.PrimaryPath()
			if p.LocalLID() != 0xFFFF || p.RemoteLID() != 0xFFFF ||
				p.LocalGID() != addr22.As16() || p.RemoteGID() != addr21.As16() ||
				p.TrafficClass() != 0 || p.HopLimit() != 64 || p.SL() != 0 || p.SubnetLocal() ||
				p.LocalACKTimeout() != 0x13 || p.PacketRate() != 0 {
				t.Errorf("REQ primary path %+v", p.Fields())
			}
			// rdma_cm's default flow label, from its ports (tshark shows it shifted).
			if fl := p.FlowLabel(); fl != roce.CMFlowLabel(c.cmaSrcPort, c.servicePort) {
				t.Errorf("REQ flow label %#x, want %#x", fl, roce.CMFlowLabel(c.cmaSrcPort, c.servicePort))
			}
			if r.AlternatePath().Fields() != (PathFields{}) {
				t.Errorf("REQ alternate path %+v", r.AlternatePath().Fields())
			}
			h := CMAHeader(r.PrivateData())
			if err := h.Check(); err != nil {
				t.Fatal(err)
			}
			if h.Version() != 0 || h.IPVersion() != 4 || h.SrcPort() != c.cmaSrcPort ||
				h.SrcAddr() != addr22 || h.DstAddr() != addr21 {
				t.Errorf("CMA header %+v", h.Fields())
			}
			if consumer := r.PrivateData()[CMAHeaderLen:]; len(consumer) != 56 || !bytes.Equal(consumer, make([]byte, 56)) {
				t.Errorf("consumer private data %x", consumer)
			}
			// The header re-encodes to the same 36 bytes.
			hf := h.Fields()
			c2 := make(CMAHeader, CMAHeaderLen)
			c2.Encode(&hf)
			if !bytes.Equal(c2, h[:CMAHeaderLen]) {
				t.Errorf("CMA header re-encodes to %x, want %x", c2, h[:CMAHeaderLen])
			}
			checkReencode(t, m)
		case AttrREP:
			r := m.REP()
			if r.RemoteCommID() != c.reqComm {
				continue
			}
			seen = append(seen, "REP")
			if r.LocalCommID() != c.repComm || r.LocalQKey() != 0 || r.LocalQPN() != c.qpn || r.LocalEECN() != 0 ||
				r.StartingPSN() != c.repPSN || r.ResponderResources() != c.resources || r.InitiatorDepth() != c.resources ||
				r.TargetACKDelay() != 0x0f || r.FailoverAccepted() != 0 || r.EndToEndFlowControl() ||
				r.RNRRetryCount() != 7 || r.SRQ() || r.LocalCAGUID() != 0x505400fffe770001 {
				t.Errorf("REP %+v", r.Fields())
			}
			checkReencode(t, m)
		case AttrRTU:
			r := m.RTU()
			if r.LocalCommID() != c.reqComm {
				continue
			}
			seen = append(seen, "RTU")
			if r.RemoteCommID() != c.repComm || len(r.PrivateData()) != RTUPrivateDataLen {
				t.Errorf("RTU %#x", r.RemoteCommID())
			}
			checkReencode(t, m)
		case AttrDREQ:
			r := m.DREQ()
			if r.LocalCommID() != c.reqComm {
				continue
			}
			seen = append(seen, "DREQ")
			if r.RemoteCommID() != c.repComm || r.RemoteQPN() != c.qpn {
				t.Errorf("DREQ %#x %#x", r.RemoteCommID(), r.RemoteQPN())
			}
			checkReencode(t, m)
		case AttrDREP:
			r := m.DREP()
			if r.RemoteCommID() != c.reqComm {
				continue
			}
			seen = append(seen, "DREP")
			if r.LocalCommID() != c.repComm {
				t.Errorf("DREP %#x", r.LocalCommID())
			}
			checkReencode(t, m)
		}
	}
	if got := strings.Join(seen, " "); got != "REQ REP RTU DREQ DREP" {
		t.Errorf("connection %#x: messages %s", c.reqComm, got)
	}
	// Starting PSNs on the wire: the active side (10.77.0.22) starts at the REP's,
	// the passive side at the REQ's. ACKs echo the peer's PSN, so look at requests.
	first := map[netip.Addr]uint32{}
	for _, f := range frames {
		var p ibtransport.Packet
		if err := p.Decode(f.IB); err != nil {
			t.Fatal(err)
		}
		if p.BTH.DestQP() != c.qpn || p.AETH != nil {
			continue
		}
		if _, ok := first[f.Src]; !ok {
			first[f.Src] = p.BTH.PSN()
		}
	}
	if first[addr22] != c.repPSN {
		t.Errorf("active side's first PSN %#x, REP says %#x", first[addr22], c.repPSN)
	}
	if psn, ok := first[addr21]; ok && psn != c.reqPSN {
		t.Errorf("passive side's first PSN %#x, REQ says %#x", psn, c.reqPSN)
	}
}

// checkReencode rebuilds a captured CM MAD through its Fields struct or its setters
// and compares the bytes.
func checkReencode(t *testing.T, m MAD) {
	t.Helper()
	out := make(MAD, MADLen)
	Encode(out, m.Attribute(), m.TransactionID())
	switch m.Attribute() {
	case AttrREQ:
		f := m.REQ().Fields()
		out.REQ().Encode(&f)
	case AttrREP:
		f := m.REP().Fields()
		out.REP().Encode(&f)
	case AttrRTU:
		r, o := m.RTU(), out.RTU()
		o.SetLocalCommID(r.LocalCommID())
		o.SetRemoteCommID(r.RemoteCommID())
		copy(o.PrivateData(), r.PrivateData())
	case AttrDREQ:
		r, o := m.DREQ(), out.DREQ()
		o.SetLocalCommID(r.LocalCommID())
		o.SetRemoteCommID(r.RemoteCommID())
		o.SetRemoteQPN(r.RemoteQPN())
		copy(o.PrivateData(), r.PrivateData())
	case AttrDREP:
		r, o := m.DREP(), out.DREP()
		o.SetLocalCommID(r.LocalCommID())
		o.SetRemoteCommID(r.RemoteCommID())
		copy(o.PrivateData(), r.PrivateData())
	}
	if !bytes.Equal(out, m) {
		for i := range out {
			if out[i] != m[i] {
				t.Errorf("%v re-encodes differently from byte %d: %x, want %x", m.Attribute(), i, out[i:min(i+8, MADLen)], m[i:min(i+8, MADLen)])
				break
			}
		}
	}
}

// TestCMBuild writes each message through its setters and checks the bytes at the
// offsets of IBTA Vol. 1 Tables 106-120 (MAD offset = data offset + 24).
func TestCMBuild(t *testing.T) {
	m := make(MAD, MADLen)
	at := func(off int, want ...byte) {
		t.Helper()
		if got := m[MADHeaderLen+off : MADHeaderLen+off+len(want)]; !bytes.Equal(got, want) {
			t.Errorf("%v: data[%d:] = %x, want %x", m.Attribute(), off, got, want)
		}
	}

	Encode(m, AttrREJ, 7)
	j := m.REJ()
	j.SetLocalCommID(0x01020304)
	j.SetRemoteCommID(0x05060708)
	j.SetMessageRejected(2)
	j.SetReason(RejConsumer)
	j.SetARI([]byte{0xAA, 0xBB, 0xCC})
	copy(j.PrivateData(), "why")
	at(0, 1, 2, 3, 4, 5, 6, 7, 8, 0x80, 3<<1, 0, 28, 0xAA, 0xBB, 0xCC)
	at(84, 'w', 'h', 'y')
	if j.Reason() != RejConsumer || j.Reason().String() != "consumer reject" || !bytes.Equal(j.ARI(), []byte{0xAA, 0xBB, 0xCC}) ||
		j.MessageRejected() != 2 || j.RejectedInfoLength() != 3 || len(j.PrivateData()) != REJPrivateDataLen {
		t.Errorf("REJ %v %x", j.Reason(), j.ARI())
	}
	if Check(m) != nil || m.Attribute().String() != "ConnectReject" || m.Method() != MADMethodSend || m.TransactionID() != 7 {
		t.Error("REJ header")
	}

	Encode(m, AttrMRA, 8)
	a := m.MRA()
	a.SetLocalCommID(1)
	a.SetRemoteCommID(2)
	a.SetMessageMRAed(1)
	a.SetServiceTimeout(0x1F)
	at(8, 0x40, 0xF8)
	if a.MessageMRAed() != 1 || a.ServiceTimeout() != 0x1F || a.LocalCommID() != 1 || a.RemoteCommID() != 2 || len(a.PrivateData()) != MRAPrivateDataLen {
		t.Error("MRA")
	}

	Encode(m, AttrSIDRREQ, 9)
	s := m.SIDRREQ()
	s.SetRequestID(0x11223344)
	s.SetPKey(0xFFFF)
	s.SetServiceID(CMAServiceID(RDMAPortSpaceUDP, 7471))
	at(0, 0x11, 0x22, 0x33, 0x44, 0xFF, 0xFF, 0, 0, 0, 0, 0, 0, 1, 0x11, 0x1D, 0x2F)
	if s.RequestID() != 0x11223344 || s.PKey() != 0xFFFF || len(s.PrivateData()) != SIDRREQPrivateDataLen {
		t.Error("SIDR_REQ")
	}

	Encode(m, AttrSIDRREP, 10)
	p := m.SIDRREP()
	p.SetRequestID(0x11223344)
	p.SetStatus(0)
	p.SetAdditionalInfoLength(2)
	p.SetQPN(0x123456)
	p.SetServiceID(0x0102030405060708)
	p.SetQKey(0x11111111)
	at(4, 0, 2, 0, 0, 0x12, 0x34, 0x56, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x11, 0x11, 0x11)
	if p.QPN() != 0x123456 || p.ServiceID() != 0x0102030405060708 || p.QKey() != 0x11111111 ||
		len(p.AdditionalInfo()) != 2 || len(p.PrivateData()) != SIDRREPPrivateDataLen || p.Status() != 0 || p.RequestID() != 0x11223344 {
		t.Error("SIDR_REP")
	}

	// REQ bit fields do not spill into each other.
	Encode(m, AttrREQ, 11)
	r := m.REQ()
	r.SetLocalQPN(0xFFFFFF)
	r.SetResponderResources(0xFF)
	r.SetStartingPSN(0xABCDEF)
	r.SetLocalCMResponseTimeout(0x1F)
	r.SetRetryCount(5)
	r.SetPathMTU(5)
	r.SetRDCExists(true)
	r.SetRNRRetryCount(6)
	r.SetMaxCMRetries(0xA)
	r.SetSRQ(true)
	r.SetExtendedTransportType(1)
	r.SetRemoteCMResponseTimeout(0x11)
	r.SetTransportServiceType(1)
	r.SetEndToEndFlowControl(true)
	at(32, 0xFF, 0xFF, 0xFF, 0xFF)
	at(43, 0x11<<3|1<<1|1, 0xAB, 0xCD, 0xEF, 0x1F<<3|5)
	at(50, 5<<4|1<<3|6, 0xA<<4|1<<3|1)
	pp := r.PrimaryPath()
	pp.SetFlowLabel(0xFFFFF)
	pp.SetPacketRate(0x3F)
	pp.SetSL(0xF)
	pp.SetSubnetLocal(true)
	pp.SetLocalACKTimeout(0x1F)
	at(88, 0xFF, 0xFF, 0xF0, 0x3F, 0, 0, 0xF8, 0xF8)
	pp.SetFlowLabel(0x12345)
	if pp.FlowLabel() != 0x12345 || pp.PacketRate() != 0x3F {
		t.Errorf("flow label %#x rate %#x", pp.FlowLabel(), pp.PacketRate())
	}
	r.SetSAPSupported(true)
	if !r.SAPSupported() || r.AlternatePath().LocalACKTimeout() != 0 || m[MADHeaderLen+139] != 0x04 {
		t.Error("SAP bit")
	}

	Encode(m, AttrREP, 12)
	p2 := m.REP()
	p2.SetTargetACKDelay(0x1F)
	p2.SetFailoverAccepted(2)
	p2.SetEndToEndFlowControl(true)
	p2.SetRNRRetryCount(7)
	p2.SetSRQ(true)
	at(26, 0xFD, 0xF0)
}

func TestCMNames(t *testing.T) {
	want := map[Attribute]string{
		0x0001: "ClassPortInfo", 0x0010: "ConnectRequest", 0x0011: "MsgRcptAck", 0x0012: "ConnectReject",
		0x0013: "ConnectReply", 0x0014: "ReadyToUse", 0x0015: "DisconnectRequest", 0x0016: "DisconnectReply",
		0x0017: "ServiceIDResReq", 0x0018: "ServiceIDResReqResp", 0x0019: "LoadAlternatePath",
		0x001A: "AlternatePathResponse", 0x0020: "CMAttribute(0x20)",
	}
	for a, name := range want {
		if a.String() != name {
			t.Errorf("%#x: %s, want %s", uint16(a), a.String(), name)
		}
	}
	if RejectReason(34).String() != "CMRejectReason(34)" || RejStaleConnection.String() != "stale connection" {
		t.Error("reject reason names")
	}
	m := make(MAD, MADLen)
	Encode(m, 0x0020, 1)
	if err := Check(m); err == nil || err.Error() != "cm: attribute id 0x20: unknown" {
		t.Errorf("unknown attribute: %v", err)
	}
	Encode(m, AttrREQ, 1)
	m.SetClassVersion(1)
	if err := Check(m); err == nil || err.Error() != "cm: class version 1 != 2" {
		t.Errorf("class version: %v", err)
	}
}

func TestCMAHeaderIPv6(t *testing.T) {
	h := make(CMAHeader, CMAHeaderLen+4)
	src, dst := netip.MustParseAddr("fd77::22"), netip.MustParseAddr("fd77::21")
	h.Encode(&CMAHeaderFields{SrcPort: 0xb823, Src: src, Dst: dst})
	if err := h.Check(); err != nil {
		t.Fatal(err)
	}
	if h.IPVersion() != 6 || h.SrcAddr() != src || h.DstAddr() != dst || h.SrcPort() != 0xb823 || h[1] != 0x60 {
		t.Fatalf("%+v %x", h.Fields(), h)
	}
	// IPv4 addresses go in the last 4 bytes; IPv4-mapped ones stay IPv6.
	h.Encode(&CMAHeaderFields{Src: addr22, Dst: addr21})
	if h.IPVersion() != 4 || h.SrcAddr() != addr22 || h.DstAddr() != addr21 || !bytes.Equal(h[4:16], make([]byte, 12)) {
		t.Fatalf("%+v %x", h.Fields(), h)
	}
	mapped := netip.AddrFrom16(addr22.As16())
	h.Encode(&CMAHeaderFields{Src: mapped, Dst: netip.AddrFrom16(addr21.As16())})
	if h.IPVersion() != 6 || h.SrcAddr() != mapped {
		t.Fatalf("%+v %x", h.Fields(), h)
	}
	h[0] = 1
	if err := h.Check(); err == nil {
		t.Error("version 1 accepted")
	}
	h[0], h[1] = 0, 0x50
	if err := h.Check(); err == nil {
		t.Error("ip version 5 accepted")
	}
	if err := CMAHeader(h[:35]).Check(); err == nil {
		t.Error("short header accepted")
	}
	if _, _, ok := ParseCMAServiceID(CMAServiceID(RDMAPortSpaceIPoIB, 1)); ok {
		t.Error("IPoIB service ID has no IP CM prefix")
	}
}

// TestUDPSourcePort checks the port functions against what rxe sent: for every
// RoCE frame of every rxe capture, the UDP source port is derived from the SENDER's
// QP: UD and GSI from the DETH source QP, RC from the two QPNs in the run's log, or,
// for rdma_cm connections, from the REQ's primary flow label.
func TestUDPSourcePort(t *testing.T) {
	// Spot values straight from the captures.
	for _, tc := range []struct {
		qpn  uint32
		port uint16
	}{{1, 55410}, {0x13, 53368}} {
		if got := roce.UDPSourcePort(tc.qpn); got != tc.port {
			t.Errorf("roce.UDPSourcePort(%#x) = %d, want %d", tc.qpn, got, tc.port)
		}
	}
	for _, tc := range []struct {
		qpn  uint32
		port uint16
	}{{0x11, 49441}, {0x12, 49476}, {0x14, 49552}, {0x18, 49728}, {0x1a, 49828}} {
		if got := roce.ConnectedUDPSourcePort(0, tc.qpn, tc.qpn); got != tc.port {
			t.Errorf("roce.ConnectedUDPSourcePort(0, %#x, %#x) = %d, want %d", tc.qpn, tc.qpn, got, tc.port)
		}
	}
	for _, name := range captureNames(t, "rxe-") {
		t.Run(name, func(t *testing.T) {
			client, server := logQPNs(t, name)
			flowLabels := cmFlowLabels(t, name) // QPN -> flow label, for rdma_cm
			checked := 0
			for i, f := range roceFrames(t, name) {
				var p ibtransport.Packet
				if err := p.Decode(f.IB); err != nil {
					t.Fatal(err)
				}
				dest := p.BTH.DestQP()
				var want uint16
				switch {
				case p.DETH != nil:
					// UD (and QP1): the port of the sending QP, named by the DETH.
					want = roce.UDPSourcePort(p.DETH.SrcQP())
				case flowLabels != nil:
					fl, ok := flowLabels[dest]
					if !ok {
						t.Fatalf("frame %d: no REQ/REP for QP %#x", i, dest)
					}
					want = roce.ConnectedUDPSourcePort(fl, dest, dest)
				case client != 0:
					// Sender and receiver: from the log, by the destination QP.
					local, remote := client, server
					if f.Src == netip.MustParseAddr("10.77.0.21") || f.Src == netip.MustParseAddr("fd77::21") {
						local, remote = server, client
					}
					if dest != remote {
						t.Fatalf("frame %d: destination QP %#x, log says %#x", i, dest, remote)
					}
					want = roce.ConnectedUDPSourcePort(0, local, remote)
				default:
					t.Fatalf("frame %d: no QPNs known", i)
				}
				if f.SrcPort != want {
					t.Errorf("frame %d (dest QP %#x): source port %d, want %d", i, dest, f.SrcPort, want)
				}
				checked++
			}
			if checked == 0 {
				t.Error("no frames")
			}
		})
	}
}
