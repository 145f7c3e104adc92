package decode

import (
	hexenc "encoding/hex"
	"errors"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/softrdma/softrdma/iwarp"
)

// tcpSegmentInfo is one TCP segment of the capture.
type tcpSegmentInfo struct {
	src, dst           netip.AddrPort
	seq, ackNum        uint32
	syn, ack, fin, rst bool
	payload            []byte // what the capture holds
	wireLen            int    // what the segment carried
	cut                string // why payload is shorter, or ""
}

// connKey identifies a TCP connection whatever the direction: a < b.
type connKey struct{ a, b netip.AddrPort }

func canonical(x, y netip.AddrPort) connKey {
	if x.Compare(y) > 0 {
		x, y = y, x
	}
	return connKey{x, y}
}

type connState uint8

const (
	connUnknown connState = iota // no payload seen yet (or mid-stream and no FPDU found yet)
	connIWARP                    // MPA: decoded
	connOther                    // another protocol: ignored
)

// maxProbes bounds the segments of a connection that started before the capture which
// are tried as the start of an FPDU before the connection is taken for another protocol.
const maxProbes = 32

// tcpConn is one TCP connection.
type tcpConn struct {
	ends      [2]netip.AddrPort // [0] sent the SYN (or the first segment seen)
	dirs      [2]*iwarpDir
	state     connState
	synSeen   bool
	midStream bool
	probes    int
	neg       *iwarp.Negotiation
	hadData   bool
	closed    bool

	first, last  time.Time
	packets      int
	bytes        int
	payloadBytes int
	fpdus        int
	terminates   int
	crcErrors    int
	errors       int
	opcodes      map[string]int
	messages     map[string]int
	mpa          *MPANegotiation
}

// chunk says that the decoder's stream octets up to end arrived in frame.
type chunk struct {
	end   uint64
	frame int
	time  time.Time
}

// iwarpDir is one direction of a connection: TCP reassembly feeding an
// iwarp.StreamDecoder.
type iwarpDir struct {
	d        *decoder
	c        *tcpConn
	src      netip.AddrPort
	dst      netip.AddrPort
	stream   tcpStream
	dec      *iwarp.StreamDecoder
	decoders int
	chunks   []chunk
	fed      uint64
	locked   bool // this direction's FPDU framing was found (mid-stream connections)
	probes   int
	// resync: the current decoder started mid-stream or after lost octets; until its
	// first FPDU, its framing complaints are expected and are notes.
	resync   bool
	midNote  string // note for the direction's first FPDU
	closing  string // why the decoder is being closed: "gap" or "end"
	lostSeen bool
	// classify holds the first in-order octets of a connection not yet known to be MPA.
	classify []classifyChunk
}

type classifyChunk struct {
	frame int
	time  time.Time
	b     []byte
}

func (d *decoder) tcpSegment(s *tcpSegmentInfo) {
	k := canonical(s.src, s.dst)
	c := d.conns[k]
	if c != nil && s.syn && !s.ack && c.hadData {
		// A new connection on the same addresses and ports.
		d.closeConn(c)
		d.conns[k] = nil
		c = nil
	}
	if c == nil {
		c = &tcpConn{ends: [2]netip.AddrPort{s.src, s.dst}, neg: new(iwarp.Negotiation),
			opcodes: map[string]int{}, messages: map[string]int{}}
		for i := range c.dirs {
			dir := &iwarpDir{d: d, c: c, src: c.ends[i], dst: c.ends[1-i]}
			dir.stream.sink = dir
			c.dirs[i] = dir
		}
		d.conns[k] = c
		d.connOrder = append(d.connOrder, c)
	}
	if c.state == connOther {
		return
	}
	dir := c.dirs[0]
	if s.src != c.ends[0] {
		dir = c.dirs[1]
	}
	if s.syn {
		c.synSeen = true
	}
	if s.wireLen > 0 {
		c.hadData = true
		if c.packets == 0 {
			c.first = d.now
		}
		c.packets++
		c.bytes += s.wireLen
		c.last = d.now
	}
	if s.wireLen > 0 && c.state == connUnknown && !c.synSeen {
		// The capture missed the handshake: decide on this segment.
		switch {
		case startsWithMPAKey(s.payload):
			c.state = connIWARP
			dir.locked = true
		case probeFPDU(s.payload):
			c.state, c.midStream = connIWARP, true
			dir.locked = true
			dir.midNote = midStreamNote
		default:
			if c.probes++; c.probes > maxProbes {
				c.drop()
			}
			return
		}
	}
	if s.wireLen > 0 && c.state == connIWARP && !dir.locked {
		if c.midStream && !dir.stream.synSeen {
			if !probeFPDU(s.payload) {
				if dir.probes++; dir.probes == maxProbes {
					d.notef(d.frame, "tcp %s → %s: no FPDU boundary found in %d segments: direction not decoded", dir.src, dir.dst, maxProbes)
				}
				return
			}
			dir.midNote = midStreamNote
		}
		dir.locked = true
	}
	// A connection whose handshake was seen is classified by its first in-order octets
	// (see iwarpDir.data), so its segments are reassembled from the start.
	dir.stream.segment(d.frame, d.now, s.seq, s.syn, s.fin, s.payload, s.wireLen)
	if s.cut != "" && c.state == connIWARP {
		c.errors++
		d.errorf(d.frame, "tcp %s → %s: %s", s.src, s.dst, s.cut)
	}
	if s.ack {
		other := c.dirs[0]
		if other == dir {
			other = c.dirs[1]
		}
		other.stream.acked(d.frame, s.ackNum)
	}
}

const midStreamNote = "capture starts mid-stream: no MPA negotiation seen; FPDU framing found at this segment"

// drop gives up on a connection that is not iWARP and frees what it buffered.
func (c *tcpConn) drop() {
	c.state = connOther
	for _, dir := range c.dirs {
		dir.stream.pending, dir.stream.pendBytes = nil, 0
		dir.classify = nil
	}
}

// startsWithMPAKeyPrefix reports whether b (shorter than a key) could begin one.
func startsWithMPAKeyPrefix(b []byte) bool {
	n := min(len(b), iwarp.MPAKeyLen)
	return string(b[:n]) == iwarp.MPAKeyRequest[:n] || string(b[:n]) == iwarp.MPAKeyReply[:n]
}

// startsWithMPAKey reports whether a segment starts like an MPA start frame: at least 4
// octets, all of them the start of "MPA ID Req Frame" or "MPA ID Rep Frame".
func startsWithMPAKey(b []byte) bool {
	n := min(len(b), iwarp.MPAKeyLen)
	if n < 4 {
		return false
	}
	return string(b[:n]) == iwarp.MPAKeyRequest[:n] || string(b[:n]) == iwarp.MPAKeyReply[:n]
}

// probeFPDU reports whether a segment of a connection whose start the capture missed
// begins with an FPDU: a throwaway StreamDecoder, which looks for FPDU boundaries, must
// find one at offset 0 and find nothing wrong with the rest of the segment.
func probeFPDU(b []byte) bool {
	found, bad := false, false
	dec := iwarp.NewStreamDecoder(nil, func(r *iwarp.Record) {
		switch {
		case r.Kind == iwarp.RecordFPDU && r.Err == nil:
			if r.Offset == 0 {
				found = true
			}
		case r.Kind == iwarp.RecordError && errors.Is(r.Err, iwarp.ErrNoNegotiation):
		case r.Kind == iwarp.RecordError && errors.Is(r.Err, iwarp.ErrTruncated) && found:
		default:
			bad = true
		}
	})
	dec.Write(b)
	dec.Close()
	return found && !bad
}

// data feeds in-order octets of the direction to its stream decoder.
func (dir *iwarpDir) data(frame int, t time.Time, b []byte) {
	c := dir.c
	if c.state == connOther {
		return
	}
	if c.state == connUnknown {
		// The first in-order octets of a connection tell whether it is MPA: the
		// initiator's MPA Request comes first.
		dir.classify = append(dir.classify, classifyChunk{frame, t, append([]byte(nil), b...)})
		var head []byte
		for _, ch := range dir.classify {
			head = append(head, ch.b...)
			if len(head) >= iwarp.MPAKeyLen {
				break
			}
		}
		if len(head) < iwarp.MPAKeyLen && startsWithMPAKeyPrefix(head) {
			return // wait for more
		}
		if !startsWithMPAKey(head) {
			c.drop()
			return
		}
		c.state = connIWARP
		dir.locked = true
		pend := dir.classify
		dir.classify = nil
		for _, ch := range pend {
			dir.data(ch.frame, ch.time, ch.b)
		}
		return
	}
	if dir.dec == nil {
		neg := dir.c.neg
		if dir.decoders > 0 {
			neg = nil
		}
		dir.decoders++
		dir.chunks, dir.fed = dir.chunks[:0], 0
		dec := dir
		dir.dec = iwarp.NewStreamDecoder(neg, func(r *iwarp.Record) { dec.record(r) })
	}
	dir.fed += uint64(len(b))
	dir.chunks = append(dir.chunks, chunk{end: dir.fed, frame: frame, time: t})
	dir.dec.Write(b)
}

// lost ends the current decoder: the octets after a hole start a new one.
func (dir *iwarpDir) lost(frame int, n uint32) {
	switch dir.c.state {
	case connOther:
		return
	case connUnknown:
		// Octets missing before the connection could be classified.
		dir.c.drop()
		return
	}
	dir.d.notef(frame, "tcp %s → %s: %d bytes missing from the capture (found at this frame); FPDU framing resynchronised after them", dir.src, dir.dst, n)
	dir.lostSeen = true
	if dir.dec != nil {
		dir.closing = "gap"
		dir.dec.Close()
		dir.dec = nil
		dir.closing = ""
	}
	dir.resync = true
}

// frameOf returns the frame (and its time) that delivered stream octet off.
func (dir *iwarpDir) frameOf(off uint64) (int, time.Time) {
	i := sort.Search(len(dir.chunks), func(i int) bool { return dir.chunks[i].end > off })
	if i == len(dir.chunks) {
		if len(dir.chunks) == 0 {
			return dir.d.frame, dir.d.now
		}
		i--
	}
	c := dir.chunks[i]
	dir.chunks = dir.chunks[:copy(dir.chunks, dir.chunks[i:])]
	return c.frame, c.time
}

// record explains one record of the direction's stream decoder.
func (dir *iwarpDir) record(r *iwarp.Record) {
	d := dir.d
	last := r.Offset
	if r.Len > 0 {
		last = r.Offset + uint64(r.Len) - 1
	}
	frame, t := dir.frameOf(last)
	switch r.Kind {
	case iwarp.RecordMPAFrame:
		d.mpaRecord(dir, frame, t, r)
	case iwarp.RecordFPDU:
		d.fpduRecord(dir, frame, t, r)
	default:
		d.iwarpProblem(dir, frame, t, r)
	}
}

func (dir *iwarpDir) packet(frame int, t time.Time) *Packet {
	p := &dir.d.pkt
	*p = Packet{Frame: frame, Time: dir.d.relTime(t), Src: dir.src.String(), Dst: dir.dst.String(), Transport: "iWARP"}
	return p
}

// rtrKinds names the RFC 6581 RTR flags set in w, comma-separated.
func rtrKinds(w iwarp.MPAv2IRDORD) string {
	var s []string
	if w.ZeroLengthRTR() {
		s = append(s, "zlen")
	}
	if w.WriteRTR() {
		s = append(s, "write")
	}
	if w.ReadRTR() {
		s = append(s, "read")
	}
	return strings.Join(s, ",")
}

func (d *decoder) mpaRecord(dir *iwarpDir, frame int, t time.Time, r *iwarp.Record) {
	c := dir.c
	d.markRDMA(frame)
	d.res.Packets++
	p := dir.packet(frame, t)
	m := r.MPA
	kind := "reply"
	p.Opcode = "MPA Reply"
	if m.IsRequest() {
		kind, p.Opcode = "request", "MPA Request"
	}
	mi := &MPAInfo{Kind: kind, Revision: m.Revision(), Markers: m.Markers(), CRC: m.CRC(),
		Reject: m.Reject(), Enhanced: m.Enhanced(), PrivateDataLen: int(m.PrivateDataLen())}
	if w, ok := m.IRDORD(); ok {
		ird, ord := w.IRD(), w.ORD()
		mi.IRD, mi.ORD = &ird, &ord
		mi.PeerToPeer = w.PeerToPeer()
		mi.RTR = rtrKinds(w)
	}
	mi.ULPData = m.ULPPrivateData()
	if pd := m.PrivateData(); len(pd) > 0 {
		mi.PrivateData = hexenc.EncodeToString(pd)
	}
	p.MPA = mi
	if mi.Reject {
		p.Note = d.notef(frame, "MPA Reply rejects the connection %s → %s", dir.src, dir.dst)
	}
	if c.mpa == nil {
		c.mpa = &MPANegotiation{}
	}
	n := c.mpa
	if m.IsRequest() || n.Revision == 0 {
		n.Revision = mi.Revision
	}
	if m.IsRequest() && mi.IRD != nil {
		n.IRD, n.ORD = mi.IRD, mi.ORD
	}
	n.CRC = c.neg.CRC() || mi.CRC
	n.Markers = n.Markers || mi.Markers
	n.Rejected = n.Rejected || mi.Reject
	d.out.packet(p)
}

func (d *decoder) fpduRecord(dir *iwarpDir, frame int, t time.Time, r *iwarp.Record) {
	c := dir.c
	d.markRDMA(frame)
	d.res.Packets++
	dir.resync = false
	p := dir.packet(frame, t)
	if dir.midNote != "" {
		p.Note = d.notef(frame, "tcp %s → %s: %s", dir.src, dir.dst, dir.midNote)
		dir.midNote = ""
	}
	c.fpdus++
	ulpdu := int(r.FPDU.ULPDULength())
	p.ULPDULen = &ulpdu
	if m := (r.Len - len(r.FPDU)) / iwarp.MarkerLen; m > 0 {
		p.Markers = m
	}
	p.CRC = "none"
	if r.CRCChecked {
		p.CRC = "ok"
		if errors.Is(r.Err, iwarp.ErrBadCRC) {
			p.CRC = "bad"
			c.crcErrors++
		}
	}
	var errs []string
	if r.Err != nil {
		errs = append(errs, r.Err.Error())
	}
	p.Opcode = "FPDU"
	if r.DDP != nil {
		dd := r.DDP
		op := r.RDMAP.Opcode()
		p.Opcode = op.String()
		info := &DDPInfo{Tagged: dd.Tagged(), Last: dd.Last()}
		if dd.Tagged() {
			info.STag, info.TO = u32p(dd.STag()), u64p(dd.TO())
		} else {
			info.QN, info.MSN, info.MO = u32p(dd.QN()), u32p(dd.MSN()), u32p(dd.MO())
			if op.Invalidates() {
				info.InvalidateSTag = u32p(r.RDMAP.InvalidateSTag())
			}
		}
		p.DDP = info
		payload := r.Payload
		switch op {
		case iwarp.OpReadRequest:
			rr, err := iwarp.ParseReadRequest(payload)
			if err != nil {
				errs = append(errs, err.Error())
			} else {
				p.ReadRequest = &ReadRequestInfo{SinkSTag: rr.SinkSTag(), SinkTO: rr.SinkTO(), Size: rr.Size(),
					SourceSTag: rr.SourceSTag(), SourceTO: rr.SourceTO()}
				payload = payload[len(rr):]
			}
		case iwarp.OpAtomicRequest:
			a, err := iwarp.ParseAtomicRequest(payload)
			if err != nil {
				errs = append(errs, err.Error())
			} else {
				p.AtomicRequest = &IWARPAtomicRequestInfo{Op: a.Opcode().String(), RequestID: a.RequestID(),
					STag: a.RemoteSTag(), TO: a.RemoteTO(), AddSwap: a.AddSwapData(), AddSwapMask: a.AddSwapMask(),
					Compare: a.CompareData(), CompareMask: a.CompareMask()}
				payload = payload[len(a):]
			}
		case iwarp.OpAtomicResponse:
			a, err := iwarp.ParseAtomicResponse(payload)
			if err != nil {
				errs = append(errs, err.Error())
			} else {
				p.AtomicResponse = &IWARPAtomicResponseInfo{RequestID: a.RequestID(), Original: a.OriginalValue()}
				payload = payload[len(a):]
			}
		case iwarp.OpImmediateData, iwarp.OpImmediateDataSE:
			im, err := iwarp.ParseImmediateData(payload)
			if err != nil {
				errs = append(errs, err.Error())
			} else {
				p.Immediate = u64p(im.Value())
				payload = payload[len(im):]
			}
		case iwarp.OpTerminate:
			c.terminates++
			tm, err := iwarp.ParseTerminate(payload)
			if err != nil {
				errs = append(errs, err.Error())
			} else {
				l := tm.Layer()
				p.Terminate = &TerminateInfo{Layer: l.String(), EType: iwarp.TerminateETypeName(l, tm.EType()),
					ErrorCode: iwarp.TerminateErrorName(l, tm.EType(), tm.ErrorCode())}
				payload = payload[len(tm):]
			}
		}
		p.PayloadLen = intp(len(payload))
		if r.Err == nil {
			c.opcodes[op.String()]++
			if dd.Last() {
				c.messages[op.String()]++
			}
			c.payloadBytes += len(payload)
		}
	}
	if len(errs) > 0 {
		c.errors++
		p.Error = d.errorf(frame, "tcp %s → %s: %s", dir.src, dir.dst, joinErrs(errs))
	}
	d.out.packet(p)
}

func joinErrs(errs []string) string {
	s := errs[0]
	for _, e := range errs[1:] {
		s += "; " + e
	}
	return s
}

// iwarpProblem handles an error record of a stream decoder: octets that are not MPA, or
// the state of the stream. What the capture explains (it started mid-stream, it lost
// octets, it ended) is a note; anything else is an error.
func (d *decoder) iwarpProblem(dir *iwarpDir, frame int, t time.Time, r *iwarp.Record) {
	c := dir.c
	where := "tcp " + dir.src.String() + " → " + dir.dst.String() + ": "
	expected := dir.resync || c.midStream && !dir.stream.synSeen
	switch {
	case errors.Is(r.Err, iwarp.ErrNoNegotiation):
		if expected || dir.decoders > 1 {
			if dir.midNote == "" && dir.decoders == 1 {
				dir.midNote = "capture starts mid-stream: no MPA negotiation seen"
			}
			dir.resync = true
			return
		}
	case errors.Is(r.Err, iwarp.ErrNegotiationIncomplete):
		d.notef(frame, "%s%v", where, r.Err)
		return
	case errors.Is(r.Err, iwarp.ErrFramingLost) && expected:
		d.notef(frame, "%s%v (looking for an FPDU boundary)", where, r.Err)
		return
	case errors.Is(r.Err, iwarp.ErrTruncated) && dir.closing == "gap":
		d.notef(frame, "%s%v (before bytes the capture lost)", where, r.Err)
		return
	case errors.Is(r.Err, iwarp.ErrTruncated) && dir.closing == "end" && (!dir.stream.finSeen || dir.lostSeen):
		d.notef(frame, "%s%v (the capture ends inside it)", where, r.Err)
		return
	}
	c.errors++
	p := dir.packet(frame, t)
	p.Opcode = "?"
	reason := r.Err.Error()
	if errors.Is(r.Err, iwarp.ErrFramingLost) && !strings.Contains(reason, "framing") {
		reason += " (" + iwarp.ErrFramingLost.Error() + ")"
	}
	p.Error = d.errorf(frame, "%s%s", where, reason)
	d.out.packet(p)
}

// closeConn ends a connection: holes never filled, decoders closed.
func (d *decoder) closeConn(c *tcpConn) {
	if c.closed {
		return
	}
	c.closed = true
	if c.state != connIWARP {
		return
	}
	for _, dir := range c.dirs {
		dir.stream.finish()
	}
	for _, dir := range c.dirs {
		if dir.dec != nil {
			dir.closing = "end"
			dir.dec.Close()
			dir.dec = nil
			dir.closing = ""
		}
	}
}

// summary returns the flow summary of an iWARP connection.
func (c *tcpConn) summary(d *decoder) FlowSummary {
	pa, pb := c.ends[0].Port(), c.ends[1].Port()
	f := FlowSummary{
		Transport: "iWARP",
		A:         Endpoint{Addr: c.ends[0].Addr().String(), Port: &pa},
		B:         Endpoint{Addr: c.ends[1].Addr().String(), Port: &pb},
		MPA:       c.mpa,
		MidStream: c.midStream,
		Packets:   c.packets, Bytes: c.bytes, PayloadBytes: c.payloadBytes, FPDUs: c.fpdus,
		Opcodes: c.opcodes, Messages: c.messages, NAKs: map[string]int{},
		Terminates: c.terminates, CRCErrors: c.crcErrors, Errors: c.errors,
		First: d.relTime(c.first), Last: d.relTime(c.last),
		goodBytes: c.payloadBytes,
	}
	for _, dir := range c.dirs {
		f.Duplicates += dir.stream.retransmitted + dir.stream.overlapping
		f.OutOfOrder += dir.stream.outOfOrder
		f.LostBytes += dir.stream.lostBytes
	}
	f.finishGoodput()
	return f
}
