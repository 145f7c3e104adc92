package decode

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/google/gopacket"

	"github.com/softrdma/softrdma/ibcm"
	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/roce"
)

// roce explains one RoCE frame, d.rf (decErr says why roce.Frame rejected it, if it did).
func (d *decoder) roce(ci gopacket.CaptureInfo, decErr error) {
	var icrcErr error
	if decErr == nil && !d.cutHeaders {
		icrcErr = roce.VerifyICRC(&d.rf)
		if icrcErr != nil && !d.inGSO && cutShort(ci) == "" && d.splitGSO(ci) {
			return
		}
	}
	d.markRDMA(d.frame)
	p := &d.pkt
	*p = Packet{Frame: d.frame, Time: d.relTime(d.now), Transport: "RoCEv2"}
	cut := cutShort(ci)
	if decErr != nil {
		// Addresses from parse's view of the frame (isRoCE decoded it).
		switch {
		case d.has(layerIPv4):
			p.Src, p.Dst = d.hdr.ip4.Src().String(), d.hdr.ip4.Dst().String()
		case d.has(layerIPv6):
			p.Src, p.Dst = d.hdr.ip6.Src().Unmap().String(), d.hdr.ip6.Dst().Unmap().String()
		default:
			p.Transport = "RoCEv1"
		}
		p.Opcode = "?"
		reason := decErr.Error()
		if cut != "" {
			reason = cut + ": " + reason
		}
		p.Error = d.errorf(d.frame, "%s", reason)
		d.emit(p, d.selects(p, 0), true)
		return
	}
	f := &d.rf
	p.Transport = f.Version.String()
	p.Src, p.Dst = f.Src.String(), f.Dst.String()
	if f.Version == roce.RoCEv1 {
		p.Src, p.Dst = gidString(f.Src), gidString(f.Dst)
	}
	var errs []string
	if cut != "" && !d.cutHeaders {
		errs = append(errs, cut)
	}
	pkt := &d.ib
	ibErr := pkt.Decode(f.IB)
	if ibErr != nil {
		errs = append(errs, ibErr.Error())
		if len(f.IB) > 0 {
			p.Opcode = opcodeName(ibtransport.Opcode(f.IB[0]))
		}
		if len(f.IB) >= ibtransport.BTHLen {
			bth := ibtransport.BTH(f.IB[:ibtransport.BTHLen])
			p.DestQP, p.PSN = u32p(bth.DestQP()), u32p(bth.PSN())
		}
	} else {
		d.fillIB(p, pkt)
	}
	// A frame cut after its headers (d.cutHeaders) holds the payload only if the cut
	// is in the ICRC or the Ethernet padding; it never holds a verifiable ICRC.
	payloadCaptured := !d.cutHeaders || ci.CaptureLength >= d.cutWhole
	// Whether the filter shows the packet, and so whether the flow counts it.
	var key roceDirKey
	haveKey := len(f.IB) >= ibtransport.BTHLen
	if haveKey {
		key = d.roceKey(f, ibtransport.BTH(f.IB[:ibtransport.BTHLen]), pkt, ibErr == nil)
	}
	sel := true
	if d.filter != nil {
		flow := 0
		if haveKey {
			flow = d.dirFlow[key]
		}
		sel = d.selects(p, flow)
	}
	badICRC := false
	switch err := icrcErr; {
	case d.cutHeaders:
		p.ICRC = "not verified"
		p.Cut, p.OrigLen, p.CapLen = true, ci.Length, ci.CaptureLength
	case err != nil:
		p.ICRC = "bad"
		badICRC = true
		if sel {
			d.res.CRCErrors++
		}
		errs = append(errs, err.Error())
	default:
		p.ICRC = "ok"
	}
	// No RoCE packet carries more than the largest IB MTU: a longer one is several, a
	// UDP GSO datagram that the capture shows unsegmented (splitGSO found no split:
	// the capture cut it, or it is damaged).
	overlong := ibErr == nil && len(pkt.Payload) > maxIBMTU
	if overlong {
		errs = append(errs, fmt.Sprintf("payload %d bytes > %d, the largest IB MTU: not one RoCE packet but, it seems, a UDP GSO datagram captured before segmentation, which is not split%s",
			len(pkt.Payload), maxIBMTU, map[bool]string{true: " (cut by the capture)", false: " (no segment size makes every ICRC right)"}[d.cutHeaders]))
	}
	var madInfo *cmPair
	mad := ibErr == nil && pkt.BTH.DestQP() == ibcm.GSIQPN && pkt.BTH.Opcode() == ibtransport.OpcodeUDSendOnly
	if mad && payloadCaptured {
		var err error
		madInfo, err = d.fillMAD(p, pkt, f)
		if err != nil {
			errs = append(errs, err.Error())
		}
	}
	switch {
	case d.cutHeaders:
		what := "ICRC not verified"
		if mad && !payloadCaptured {
			what = "MAD not decoded, ICRC not verified"
		}
		reason := fmt.Sprintf("frame cut short by the capture (%d of %d bytes) after its headers: headers decoded, %s",
			ci.CaptureLength, ci.Length, what)
		if len(errs) == 0 {
			p.Error = d.cutError(d.frame, reason)
		} else {
			p.Error = d.errorf(d.frame, "%s; %s", reason, strings.Join(errs, "; "))
		}
	case len(errs) > 0:
		p.Error = d.errorf(d.frame, "%s", strings.Join(errs, "; "))
	}
	switch {
	case badICRC:
		// The packet is not what its sender sent: any field may be the corrupted one
		// (a PSN far ahead made every later packet a duplicate), so it feeds no
		// statistic. It is counted apart, in the direction its headers name if that
		// direction exists at the end (roceFlows).
		if haveKey && sel {
			d.roceICRCErrors[key]++
		}
		madInfo = nil
	case overlong:
		// Several packets taken for one: nothing in it can be counted right but the
		// error, in its direction (its headers are whole).
		r := d.roceDirFor(f, pkt)
		if sel {
			r.errors++
			r.counted(d.now)
		}
	case ibErr == nil:
		gap, dup := d.roceStats(f, pkt, p.Error != "", p.Cut, sel)
		// UD and RD receivers do not check PSNs (a CM MAD sent again keeps its PSN):
		// a gap or a repeat says nothing of a UD packet.
		if s := pkt.BTH.Opcode().Service(); s != ibtransport.ServiceUD && s != ibtransport.ServiceRD {
			if gap > 0 {
				p.PSNGap = intp(gap)
			}
			p.Duplicate = dup
		}
	}
	if madInfo != nil {
		d.cmPairs = append(d.cmPairs, *madInfo)
	}
	d.emit(p, sel, true)
}

// maxIBMTU is the largest IB path MTU, and so the most payload one RoCE packet carries.
const maxIBMTU = 4096

// gidString prints a RoCEv1 GID: as an IPv4 address if it is IPv4-mapped.
func gidString(a netip.Addr) string {
	if a.Is4In6() {
		return a.Unmap().String()
	}
	return a.String()
}

// opcodeName names a BTH opcode as "RC SEND Only".
func opcodeName(op ibtransport.Opcode) string {
	if !op.Valid() {
		return op.String()
	}
	return op.Service().String() + " " + op.Name()
}

func u32p(v uint32) *uint32 { return &v }
func u64p(v uint64) *uint64 { return &v }
func intp(v int) *int       { return &v }

// fillIB copies the fields of a decoded IB packet into p.
func (d *decoder) fillIB(p *Packet, pkt *ibtransport.Packet) {
	b := pkt.BTH
	op := b.Opcode()
	p.Opcode = opcodeName(op)
	p.DestQP, p.PSN = u32p(b.DestQP()), u32p(b.PSN())
	ack := b.AckReq()
	p.AckReq = &ack
	p.SE = b.SE()
	p.PadCount = int(b.PadCount())
	if op.HasPayload() {
		p.PayloadLen = intp(len(pkt.Payload))
	}
	if pkt.AETH != nil {
		s := pkt.AETH.Syndrome()
		a := &AETHInfo{Syndrome: s.Kind().String(), MSN: pkt.AETH.MSN()}
		switch s.Kind() {
		case ibtransport.AETHKindACK:
			if c := s.Credits(); c != ibtransport.ACKCreditsInvalid {
				a.Credits = intp(int(c))
			}
		case ibtransport.AETHKindRNRNAK:
			a.RNRTimer = u32p(uint32(s.RNRTimer()))
			a.RNRDelay = ibtransport.RNRTimerDuration(s.RNRTimer()).String()
		case ibtransport.AETHKindNAK:
			a.NAKCode = s.NAKCode().String()
		}
		p.AETH = a
	}
	if pkt.RETH != nil {
		p.RETH = &RETHInfo{VA: pkt.RETH.VA(), RKey: pkt.RETH.RKey(), DMALen: pkt.RETH.DMALen()}
	}
	if pkt.AtomicETH != nil {
		p.AtomicETH = &AtomicETHInfo{VA: pkt.AtomicETH.VA(), RKey: pkt.AtomicETH.RKey(),
			SwapAdd: pkt.AtomicETH.SwapAdd(), Compare: pkt.AtomicETH.Compare()}
	}
	if pkt.AtomicAckETH != nil {
		p.AtomicAckOrig = u64p(pkt.AtomicAckETH.OrigData())
	}
	if pkt.ImmDt != nil {
		p.ImmDt = u32p(pkt.ImmDt.Immediate())
	}
	if pkt.IETH != nil {
		p.IETHRKey = u32p(pkt.IETH.RKey())
	}
	if pkt.DETH != nil {
		p.DETH = &DETHInfo{QKey: pkt.DETH.QKey(), SrcQP: pkt.DETH.SrcQP()}
	}
}

// cmPair is what a CM REQ or REP says about a connection: the sender's QP number.
type cmPair struct {
	from      netip.Addr
	to        netip.Addr
	localQPN  uint32
	localComm uint32
	rep       bool
}

// fillMAD decodes the MAD a packet to QP1 carries and, for the CM, the message. It
// returns what a REQ or REP says about the QPs it connects.
func (d *decoder) fillMAD(p *Packet, pkt *ibtransport.Packet, f *roce.Frame) (*cmPair, error) {
	mad, err := ibcm.MADFromPacket(pkt)
	if err != nil {
		return nil, err
	}
	mi := &MADInfo{Class: mad.MgmtClass().String(), Method: mad.Method().String(),
		Attribute: fmt.Sprintf("0x%04x", mad.AttributeID()), TID: mad.TransactionID(), Status: mad.Status()}
	p.MAD = mi
	if mad.MgmtClass() != ibcm.MgmtClassCM {
		return nil, nil
	}
	if err := ibcm.Check(mad); err != nil {
		return nil, err
	}
	a := mad.Attribute()
	cm := &CMInfo{Message: cmShortName(a), Name: a.String()}
	mi.Attribute = a.String()
	mi.CM = cm
	var pair *cmPair
	switch a {
	case ibcm.AttrREQ:
		r := mad.REQ()
		cm.LocalCommID = u32p(r.LocalCommID())
		cm.LocalQPN = u32p(r.LocalQPN())
		cm.StartingPSN = u32p(r.StartingPSN())
		cm.ServiceID = u64p(r.ServiceID())
		if ps, port, ok := ibcm.ParseCMAServiceID(r.ServiceID()); ok && (ps == ibcm.RDMAPortSpaceTCP || ps == ibcm.RDMAPortSpaceUDP || ps == ibcm.RDMAPortSpaceIB) {
			h := ibcm.CMAHeader(r.PrivateData())
			if h.Check() == nil {
				cm.RDMACM = &RDMACMInfo{
					Src: netip.AddrPortFrom(h.SrcAddr(), h.SrcPort()).String(),
					Dst: netip.AddrPortFrom(h.DstAddr(), port).String(),
				}
			}
		}
		pair = &cmPair{from: f.Src, to: f.Dst, localQPN: r.LocalQPN(), localComm: r.LocalCommID()}
	case ibcm.AttrMRA:
		r := mad.MRA()
		cm.LocalCommID, cm.RemoteCommID = u32p(r.LocalCommID()), u32p(r.RemoteCommID())
	case ibcm.AttrREJ:
		r := mad.REJ()
		cm.LocalCommID, cm.RemoteCommID = u32p(r.LocalCommID()), u32p(r.RemoteCommID())
		cm.Reason = r.Reason().String()
	case ibcm.AttrREP:
		r := mad.REP()
		cm.LocalCommID, cm.RemoteCommID = u32p(r.LocalCommID()), u32p(r.RemoteCommID())
		cm.LocalQPN = u32p(r.LocalQPN())
		cm.StartingPSN = u32p(r.StartingPSN())
		pair = &cmPair{from: f.Src, to: f.Dst, localQPN: r.LocalQPN(), localComm: r.LocalCommID(), rep: true}
	case ibcm.AttrRTU:
		r := mad.RTU()
		cm.LocalCommID, cm.RemoteCommID = u32p(r.LocalCommID()), u32p(r.RemoteCommID())
	case ibcm.AttrDREQ:
		r := mad.DREQ()
		cm.LocalCommID, cm.RemoteCommID = u32p(r.LocalCommID()), u32p(r.RemoteCommID())
		cm.RemoteQPN = u32p(r.RemoteQPN())
	case ibcm.AttrDREP:
		r := mad.DREP()
		cm.LocalCommID, cm.RemoteCommID = u32p(r.LocalCommID()), u32p(r.RemoteCommID())
	case ibcm.AttrSIDRREQ:
		r := mad.SIDRREQ()
		cm.RequestID = u32p(r.RequestID())
		cm.ServiceID = u64p(r.ServiceID())
	case ibcm.AttrSIDRREP:
		r := mad.SIDRREP()
		cm.RequestID = u32p(r.RequestID())
		cm.ServiceID = u64p(r.ServiceID())
		cm.LocalQPN = u32p(r.QPN())
	}
	return pair, nil
}

// cmShortName gives the IBTA abbreviation of a CM message.
func cmShortName(a ibcm.Attribute) string {
	switch a {
	case ibcm.AttrREQ:
		return "REQ"
	case ibcm.AttrMRA:
		return "MRA"
	case ibcm.AttrREJ:
		return "REJ"
	case ibcm.AttrREP:
		return "REP"
	case ibcm.AttrRTU:
		return "RTU"
	case ibcm.AttrDREQ:
		return "DREQ"
	case ibcm.AttrDREP:
		return "DREP"
	case ibcm.AttrSIDRREQ:
		return "SIDR_REQ"
	case ibcm.AttrSIDRREP:
		return "SIDR_REP"
	case ibcm.AttrLAP:
		return "LAP"
	case ibcm.AttrAPR:
		return "APR"
	case ibcm.AttrClassPortInfo:
		return "ClassPortInfo"
	}
	return a.String()
}

// ---- RoCE flows ----

// unknownQP stands for a source QP number the packets do not carry.
const unknownQP = ^uint32(0)

// roceDirKey identifies one direction of a RoCE flow: addresses and the destination QP
// (and for UD, whose DETH carries it, the source QP).
type roceDirKey struct {
	src, dst netip.Addr
	qp       uint32
	srcQP    uint32
}

// roceDir is the statistics of one direction.
type roceDir struct {
	key      roceDirKey
	version  string
	service  ibtransport.ServiceType
	packets  int
	bytes    int
	payload  int
	goodput  int // payload bytes of packets that were not duplicates
	errors   int
	icrc     int // packets whose ICRC is wrong (counted in nothing else)
	cut      int // packets cut by the snap length after their headers
	opcodes  map[string]int
	messages map[string]int
	first    time.Time // the first packet's time (counted or not: flows are ordered by it)
	from, to time.Time // the first and last counted packets' (a filter may count some)
	shown    bool      // a packet of the direction was counted
	events   []roceEvent

	// Request PSNs: after the highest PSN so far, the next new one is in [nextLo, nextHi]
	// (a READ request advances the PSN by its response count, which depends on the
	// path MTU: 256 to 4096 bytes).
	reqSeen         bool
	reqFirst        uint32
	nextLo, nextHi  uint32
	gaps, missing   int
	duplicates      int
	respSeen        bool
	respFirst       uint32
	acks, rnrNAKs   int
	naks            map[string]int
	peerQP          uint32 // the sender's QP, once known
	lastRespPSN     uint32
	respDuplicates  int
	haveLastRespPSN bool
}

// roceKey is the direction a packet's headers name: its addresses, destination QP and,
// if decoded says pkt holds its decoded headers and it has a DETH, its source QP.
func (d *decoder) roceKey(f *roce.Frame, b ibtransport.BTH, pkt *ibtransport.Packet, decoded bool) roceDirKey {
	key := roceDirKey{src: f.Src, dst: f.Dst, qp: b.DestQP(), srcQP: unknownQP}
	if decoded && pkt.DETH != nil {
		key.srcQP = pkt.DETH.SrcQP()
	}
	return key
}

// roceDirFor returns the direction of a decoded packet, made if new.
func (d *decoder) roceDirFor(f *roce.Frame, pkt *ibtransport.Packet) *roceDir {
	key := d.roceKey(f, pkt.BTH, pkt, true)
	r := d.roceDirs[key]
	if r == nil {
		r = &roceDir{key: key, version: f.Version.String(), service: pkt.BTH.Opcode().Service(), first: d.now,
			opcodes: map[string]int{}, messages: map[string]int{}, naks: map[string]int{}, peerQP: key.srcQP}
		d.roceDirs[key] = r
		d.roceOrder = append(d.roceOrder, r)
	}
	return r
}

// counted notes that the direction counted a packet at now.
func (r *roceDir) counted(now time.Time) {
	if !r.shown {
		r.shown, r.from = true, now
	}
	r.to = now
}

// roceStats counts a packet in its direction's statistics: bad if it is an error, cut if
// the capture cut it after its headers (its length is still the frame's on the wire, and
// its payload length the one its headers declare). It returns the verdicts of the
// packet's PSN: how many request PSNs are missing just before it (a gap), and whether
// it is a duplicate (a request PSN, or READ response PSN, already seen). With count
// false (a filter does not show the packet) the packet only moves the PSN tracking on,
// so that the verdicts on the packets counted do not depend on the filter.
func (d *decoder) roceStats(f *roce.Frame, pkt *ibtransport.Packet, bad, cut, count bool) (gap int, dup bool) {
	b := pkt.BTH
	op := b.Opcode()
	r := d.roceDirFor(f, pkt)
	n := 0 // what the counters add: 1 if the packet is counted
	if count {
		n = 1
		r.counted(d.now)
		r.packets++
		r.bytes += d.wire
		r.opcodes[opcodeName(op)]++
		if bad {
			r.errors++
		}
		if cut {
			r.cut++
		}
	}
	psn := b.PSN()
	switch {
	case op.IsRequest():
		if !r.reqSeen {
			r.reqSeen, r.reqFirst = true, psn
		} else {
			switch {
			case ibtransport.PSNLess(psn, r.nextLo):
				dup = true
				r.duplicates += n
			case ibtransport.PSNLess(r.nextHi, psn):
				gap = int(ibtransport.PSNDiff(psn, r.nextHi))
				r.gaps += n
				r.missing += gap * n
			}
		}
		if !dup {
			lo, hi := 1, 1
			if op.IsRead() && pkt.RETH != nil {
				n := int(pkt.RETH.DMALen())
				lo, hi = max(1, (n+4095)/4096), max(1, (n+255)/256)
			}
			r.nextLo, r.nextHi = ibtransport.PSNAdd(psn, lo), ibtransport.PSNAdd(psn, hi)
		}
	case op.IsResponse():
		if !r.respSeen {
			r.respSeen, r.respFirst = true, psn
		}
		if op.IsRead() {
			if r.haveLastRespPSN && !ibtransport.PSNLess(r.lastRespPSN, psn) {
				dup = true
				r.respDuplicates += n
			}
			r.lastRespPSN, r.haveLastRespPSN = psn, true
		}
	}
	if !count {
		return gap, dup
	}
	if !count {
		return gap, dup
	}
	if pkt.AETH != nil {
		s := pkt.AETH.Syndrome()
		switch s.Kind() {
		case ibtransport.AETHKindACK:
			if op.IsAck() {
				r.acks++
			}
		case ibtransport.AETHKindRNRNAK:
			r.rnrNAKs++
		case ibtransport.AETHKindNAK:
			r.naks[s.NAKCode().String()]++
		}
	}
	r.payload += len(pkt.Payload)
	if !dup {
		r.goodput += len(pkt.Payload)
		if op.IsLast() && op.IsRequest() {
			r.messages[messageName(op)]++
		}
	}
	r.addEvent(d.relTime(d.now), op, pkt, dup, len(pkt.Payload))
	return gap, dup
}

// messageName names the operation of a message-ending request opcode.
func messageName(op ibtransport.Opcode) string {
	switch {
	case op.IsSend():
		switch {
		case op.HasImmediate():
			return "SEND with Immediate"
		case op.HasInvalidate():
			return "SEND with Invalidate"
		}
		return "SEND"
	case op.IsWrite():
		if op.HasImmediate() {
			return "RDMA WRITE with Immediate"
		}
		return "RDMA WRITE"
	case op.IsRead():
		return "RDMA READ"
	}
	return op.Name()
}

// roceFlows pairs the two directions of each QP pair and summarizes them. A direction
// learns its sender's QP from a DETH (UD), from a CM REQ or REP, or from responses
// (ACK, READ response, ATOMIC ACK) whose PSNs answer the requests of a direction the
// other way.
func (d *decoder) roceFlows() []FlowSummary {
	// CM: the REQ's sender QP talks to the REP's sender QP.
	for i, req := range d.cmPairs {
		if req.rep {
			continue
		}
		for _, rep := range d.cmPairs[i+1:] {
			if rep.rep && rep.from == req.to && rep.to == req.from {
				d.setPeer(req.from, req.to, rep.localQPN, req.localQPN)
				d.setPeer(rep.from, rep.to, req.localQPN, rep.localQPN)
				break
			}
		}
	}
	// Responses: D (B→A, to QP a) answers R (A→B, to QP b) if D's first response PSN is
	// among R's request PSNs.
	for _, dir := range d.roceOrder {
		if dir.peerQP != unknownQP || !dir.respSeen {
			continue
		}
		for _, req := range d.roceOrder {
			if req.key.src != dir.key.dst || req.key.dst != dir.key.src || !req.reqSeen || req.peerQP != unknownQP && req.peerQP != dir.key.qp {
				continue
			}
			if !ibtransport.PSNLess(dir.respFirst, req.reqFirst) && ibtransport.PSNLess(dir.respFirst, req.nextHi) {
				dir.peerQP = req.key.qp
				req.peerQP = dir.key.qp
				break
			}
		}
	}
	type pairKey struct {
		a, b     netip.Addr
		qpa, qpb uint32
	}
	// Packets with a wrong ICRC go to the direction their headers name, if there is
	// one (the corrupted field may be the address or the QP: then only the total has
	// them).
	for _, dir := range d.roceOrder {
		dir.icrc = d.roceICRCErrors[dir.key]
	}
	flows := map[pairKey]*FlowSummary{}
	var out []FlowSummary
	var order []pairKey
	for _, dir := range d.roceOrder {
		k := pairKey{a: dir.key.src, qpa: dir.peerQP, b: dir.key.dst, qpb: dir.key.qp}
		if dir.key.src.Compare(dir.key.dst) > 0 || dir.key.src == dir.key.dst && dir.peerQP > dir.key.qp {
			k = pairKey{a: dir.key.dst, qpa: dir.key.qp, b: dir.key.src, qpb: dir.peerQP}
		}
		if dir.peerQP == unknownQP {
			// Unpaired: a flow of its own.
			k = pairKey{a: dir.key.src, qpa: unknownQP, b: dir.key.dst, qpb: dir.key.qp}
		}
		fs := flows[k]
		if fs == nil {
			fs = &FlowSummary{Transport: dir.version, Service: dir.service.String(),
				A: Endpoint{Addr: k.a.String()}, B: Endpoint{Addr: k.b.String()},
				Opcodes: map[string]int{}, Messages: map[string]int{}, NAKs: map[string]int{},
				First: d.relTime(dir.from), Last: d.relTime(dir.to), order: d.relTime(dir.first)}
			if k.qpa != unknownQP {
				fs.A.QP = u32p(k.qpa)
			}
			if k.qpb != unknownQP {
				fs.B.QP = u32p(k.qpb)
			}
			flows[k] = fs
			order = append(order, k)
		}
		fs.Packets += dir.packets
		fs.Bytes += dir.bytes
		fs.PayloadBytes += dir.payload
		fs.goodBytes += dir.goodput
		fs.Errors += dir.errors + dir.icrc
		fs.ICRCErrors += dir.icrc
		fs.Cut += dir.cut
		for o, n := range dir.opcodes {
			fs.Opcodes[o] += n
		}
		for o, n := range dir.messages {
			fs.Messages[o] += n
		}
		for o, n := range dir.naks {
			fs.NAKs[o] += n
		}
		fs.PSNGaps += dir.gaps
		fs.PSNsMissing += dir.missing
		fs.Duplicates += dir.duplicates + dir.respDuplicates
		fs.ACKs += dir.acks
		fs.RNRNAKs += dir.rnrNAKs
		if dir.shown {
			if !fs.shown {
				fs.First, fs.Last = d.relTime(dir.from), d.relTime(dir.to)
			}
			fs.First = min(fs.First, d.relTime(dir.from))
			fs.Last = max(fs.Last, d.relTime(dir.to))
			fs.shown = true
		}
		fs.order = min(fs.order, d.relTime(dir.first))
		fs.dirKeys = append(fs.dirKeys, dir.key)
	}
	for _, k := range order {
		fs := flows[k]
		fs.finishGoodput()
		d.roceFlowTimes(fs)
		out = append(out, *fs)
	}
	return out
}

// setPeer records that packets from src to dst's QP qp come from QP peer.
func (d *decoder) setPeer(src, dst netip.Addr, qp, peer uint32) {
	if r := d.roceDirs[roceDirKey{src: src, dst: dst, qp: qp, srcQP: unknownQP}]; r != nil && r.peerQP == unknownQP {
		r.peerQP = peer
	}
}

// roceFlowTimes computes a RoCE flow's RTTs and throughput from its directions'
// events, and keeps them for the HTML report (Options.Report).
func (d *decoder) roceFlowTimes(fs *FlowSummary) {
	var dirs []*roceDir
	for _, k := range fs.dirKeys {
		dirs = append(dirs, d.roceDirs[k])
	}
	ack, read := roceTimes(dirs, func(r *roceDir) *roceDir {
		if r.service == ibtransport.ServiceUD || r.peerQP == unknownQP {
			return nil
		}
		return d.roceDirs[roceDirKey{src: r.key.dst, dst: r.key.src, qp: r.peerQP, srcQP: unknownQP}]
	})
	if a, r := newRTTStats(ack), newRTTStats(read); a != nil || r != nil {
		fs.RTT = &FlowRTT{RequestACK: a, ReadResponse: r}
	}
	if fs.shown {
		fs.Throughput = throughput(fs.First, fs.Last, func(yield func(float64, int)) {
			for _, r := range dirs {
				for _, e := range r.events {
					yield(e.t, int(e.payload))
				}
			}
		})
	}
	if d.opts.Report {
		s := &flowSeries{ackRTT: ack, readRTT: read}
		for _, r := range dirs {
			s.dirs = append(s.dirs, seriesDir{name: fmt.Sprintf("%s → %s QP 0x%06x", r.key.src, r.key.dst, r.key.qp), events: r.events})
		}
		fs.series = s
	}
}
