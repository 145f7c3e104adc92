package decode

import (
	"encoding/binary"
	hexenc "encoding/hex"
	"errors"
	"fmt"
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
	created   int // the frame of its first segment
	idx       int // its index in decoder.connOrder
	// seen is the time of its first data segment (counted or not: flows are ordered by
	// it); shown says a packet of it was shown (a filter may show none).
	seen  time.Time
	shown bool
	// points are the payloads of the FPDUs counted (for the throughput), readRTT the
	// Read Request → first Read Response times, readPending the Read Requests not yet
	// answered, by sink STag and TO.
	points      []iwarpPoint
	readRTT     []float64
	readPending map[[2]uint64]float64

	first, last  time.Time
	packets      int
	bytes        int
	payloadBytes int
	fpdus        int
	terminates   int
	crcErrors    int
	errors       int
	cut          int // data segments cut by the snap length inside an FPDU, after its headers
	opcodes      map[string]int
	messages     map[string]int
	mpa          *MPANegotiation

	// While the connection is not known to be iWARP: its data segments cut short (errors
	// once it is; if it never is, those that showed too little to tell are one error of
	// the capture; at most maxPendingCuts, cutsDropped counts the rest) and its notes.
	pendingCuts  []pendingCut
	cutsDropped  int
	pendingNotes []Problem
}

// maxPendingCuts bounds the cut segments kept for a connection not yet classified.
const maxPendingCuts = 64

// pendingCut is a data segment cut short in a connection not yet classified; unsure
// says the capture kept too little of it (under 4 payload octets) to tell whether it is
// MPA, had it been examined.
type pendingCut struct {
	Problem
	unsure bool
}

// other returns the other direction of dir's connection.
func (c *tcpConn) other(dir *iwarpDir) *iwarpDir {
	if dir == c.dirs[0] {
		return c.dirs[1]
	}
	return c.dirs[0]
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
	// classify holds the first in-order octets of a connection not yet known to be MPA
	// (and, after its start was lost, the losses among them).
	classify []classifyChunk

	// active: the direction sent a SYN without ACK (the TCP initiator, which sends the
	// MPA Request).
	active bool
	// head is the direction's first octets, up to an MPA start frame's header, before
	// anything was lost.
	head []byte
	// startSeen: the direction's MPA start frame was decoded; role and rev are its.
	startSeen bool
	role      iwarp.Role
	rev       uint8
	// startLost: the capture lost octets of the direction before its start frame was
	// decoded (a frame cut short, a segment missing). Its FPDUs are then found as in a
	// capture that starts mid-stream, and the peer's decoder, which needs this start
	// frame's flags, is given them: from head if it holds them, else the CRC use found
	// in the direction's first FPDU (lostFlags, crcFound).
	startLost      bool
	lostRole       iwarp.Role
	lostFlagsKnown bool
	lostFlags      uint8
	lostRev        uint8
	crcKnown       bool
	crcFound       bool
	negFilled      bool

	// A segment the capture cut inside an FPDU whose headers it holds loses only that
	// FPDU's payload: its lost octets are fed to the decoder as zeros (fillCut), so that
	// the FPDU is decoded from its headers and the framing goes on after it.
	// framing: the decoder is delimiting FPDUs from the end of its last MPA frame or
	// FPDU record (afterFPDU: an FPDU), boundary, where the FPDU in progress starts;
	// peek holds its first peekN octets from the capture (peekOff = boundary when they
	// are the current FPDU's).
	framing   bool
	afterFPDU bool
	boundary  uint64
	peek      [maxFPDUPeek]byte
	peekOff   uint64
	peekN     int
	// seg is the segment being delivered when the capture cut it; filling says zeros
	// are being fed for it; filledInside says all its lost octets were inside the FPDU
	// in progress, fillRest how many were lost after it.
	seg          *tcpSegmentInfo
	filling      bool
	filledInside bool
	fillRest     uint32
	// fillFrame is the first frame filled inside the FPDU in progress (0: none) and its
	// lengths; reported is the frame whose cut an FPDU's line reported as its error.
	fillFrame          int
	fillOrig, fillCapt int
	reported           int
}

// maxFPDUPeek is how much of the start of an FPDU in progress a direction keeps: enough
// for the longest headers fillCut needs (MPA length, untagged DDP, an Atomic Request).
const maxFPDUPeek = 128

// zeroOctets stand for the octets of an FPDU that the capture cut off.
var zeroOctets [4096]byte

// classifyChunk is octets of the stream, or (lost > 0) octets the capture lost.
type classifyChunk struct {
	frame int
	time  time.Time
	b     []byte
	lost  uint32
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
		c = &tcpConn{ends: [2]netip.AddrPort{s.src, s.dst}, neg: new(iwarp.Negotiation), created: d.frame,
			idx: len(d.connOrder), opcodes: map[string]int{}, messages: map[string]int{}}
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
		if !s.ack {
			dir.active = true
		}
	}
	if s.wireLen > 0 && !c.hadData {
		c.seen = d.now
	}
	if s.wireLen > 0 {
		c.hadData = true
	}
	if s.wireLen > 0 && (d.filter == nil || d.filter.inTime(d.relTime(d.now))) {
		// A filter counts the segments in its time range.
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
			c.becomeIWARP(d, dir)
			dir.locked = true
		case probeFPDU(s.payload):
			c.midStream = true
			c.becomeIWARP(d, dir)
			dir.locked = true
			dir.midNote = midStreamNote
		default:
			if s.cut != "" {
				d.tcpCut(c, dir, s, false)
			}
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
	starts := s.wireLen > 0 && !s.syn && dir.stream.startsStream(s.seq)
	if s.cut != "" && c.state == connUnknown && starts && len(s.payload) > 0 && startsWithMPAKeyPrefix(s.payload) {
		// The direction's first segment, cut short: all the capture holds of it is the
		// start of an MPA key. That is all there will be to tell the connection is
		// iWARP; the decoders find the FPDUs after the lost octets.
		c.becomeIWARP(d, dir)
		dir.locked = true
	}
	if s.cut != "" {
		dir.seg, dir.filledInside, dir.fillRest = s, false, 0
	}
	dir.stream.segment(d.frame, d.now, s.seq, s.syn, s.fin, s.payload, s.wireLen)
	dir.seg = nil
	if s.cut != "" {
		d.tcpCut(c, dir, s, starts)
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

// tcpCut reports a data segment the frame holds only part of (s.cut says how): an error
// if the connection is iWARP, kept until it is known if it is not yet known.
// startsStream says the segment is the direction's first: it carries the start of the
// MPA Request or Reply.
func (d *decoder) tcpCut(c *tcpConn, dir *iwarpDir, s *tcpSegmentInfo, startsStream bool) {
	if s.wireLen <= len(s.payload) {
		return // no data lost: a bare ACK, SYN or FIN cut inside its header options
	}
	if dir.reported == d.frame {
		return // the line of the FPDU the frame ends says it was cut
	}
	if dir.filledInside && c.state == connIWARP {
		// All the frame lost is inside an FPDU whose headers it holds (or an earlier
		// frame held): the FPDU's line, where it ends, shows them.
		c.errors++
		c.cut++
		d.markRDMA(d.frame)
		d.cutError(d.frame, fmt.Sprintf("tcp %s → %s: %s inside an FPDU, after its headers: headers decoded (on the line of the frame the FPDU ends in), payload and CRC not verified",
			s.src, s.dst, s.cut))
		return
	}
	reason := s.cut
	if startsStream && (len(s.payload) == 0 || startsWithMPAKeyPrefix(s.payload)) {
		reason += fmt.Sprintf(": %s truncated (%d of the segment's %d payload bytes captured)",
			startFrameName(dir.guessRole(s.payload)), len(s.payload), s.wireLen)
	}
	p := Problem{Frame: d.frame, Reason: fmt.Sprintf("tcp %s → %s: %s", s.src, s.dst, reason)}
	switch c.state {
	case connIWARP:
		c.errors++
		d.markRDMA(p.Frame)
		d.res.Errors = append(d.res.Errors, p)
	case connUnknown:
		if len(c.pendingCuts) < maxPendingCuts {
			c.pendingCuts = append(c.pendingCuts, pendingCut{p, len(s.payload) < 4})
		} else {
			c.cutsDropped++
		}
	}
}

// startFrameName names the start frame a direction in role sends.
func startFrameName(r iwarp.Role) string {
	switch r {
	case iwarp.RoleInitiator:
		return "MPA Request frame"
	case iwarp.RoleResponder:
		return "MPA Reply frame"
	}
	return "MPA start frame"
}

// keyRole returns the role whose key b begins: b must hold enough of it to tell
// ("MPA ID Req" from "MPA ID Rep"), else RoleUnknown.
func keyRole(b []byte) iwarp.Role {
	n := min(len(b), iwarp.MPAKeyLen)
	const differ = len("MPA ID Re") // the keys differ at this offset
	switch {
	case n <= differ:
		return iwarp.RoleUnknown
	case string(b[:n]) == iwarp.MPAKeyRequest[:n]:
		return iwarp.RoleInitiator
	case string(b[:n]) == iwarp.MPAKeyReply[:n]:
		return iwarp.RoleResponder
	}
	return iwarp.RoleUnknown
}

// guessRole says which start frame the direction sends: as its first octets b say, or
// as the peer's start frame implies, or by who sent the SYN (the side that opens the TCP
// connection sends the MPA Request: rdma_cm's active side does both, as in every siw
// capture here).
func (dir *iwarpDir) guessRole(b []byte) iwarp.Role {
	if r := keyRole(b); r != iwarp.RoleUnknown {
		return r
	}
	other := dir.c.other(dir)
	switch {
	case other.startSeen && other.role == iwarp.RoleInitiator:
		return iwarp.RoleResponder
	case other.startSeen:
		return iwarp.RoleInitiator
	case dir.active:
		return iwarp.RoleInitiator
	case other.active:
		return iwarp.RoleResponder
	}
	return iwarp.RoleUnknown
}

// becomeIWARP marks a connection as iWARP (first found it so): the cut segments and
// notes kept for it are reported, and the octets both directions held back while it
// was unknown are decoded, first's first.
func (c *tcpConn) becomeIWARP(d *decoder, first *iwarpDir) {
	c.state = connIWARP
	d.res.Notes = append(d.res.Notes, c.pendingNotes...)
	for _, p := range c.pendingCuts {
		c.errors++
		d.markRDMA(p.Frame)
		d.res.Errors = append(d.res.Errors, p.Problem)
	}
	if c.cutsDropped > 0 {
		c.errors += c.cutsDropped
		d.errorf(c.pendingCuts[len(c.pendingCuts)-1].Frame, "tcp %s ↔ %s: %d more data segments cut short before the connection was known to be iWARP",
			c.ends[0], c.ends[1], c.cutsDropped)
	}
	c.pendingCuts, c.cutsDropped, c.pendingNotes = nil, 0, nil
	for _, dir := range [2]*iwarpDir{first, c.other(first)} {
		pend := dir.classify
		dir.classify = nil
		for _, ch := range pend {
			if ch.lost > 0 {
				dir.lost(ch.frame, ch.lost)
			} else {
				dir.data(ch.frame, ch.time, ch.b)
			}
		}
	}
}

// drop gives up on a connection that is not iWARP and frees what it buffered.
func (c *tcpConn) drop() {
	c.state = connOther
	c.pendingCuts, c.cutsDropped, c.pendingNotes = nil, 0, nil
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
func startsWithMPAKey(b []byte) bool { return len(b) >= 4 && startsWithMPAKeyPrefix(b) }

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
	if len(dir.head) < iwarp.MPAFrameHeaderLen && !dir.lostSeen && !dir.startLost {
		dir.head = append(dir.head, b[:min(len(b), iwarp.MPAFrameHeaderLen-len(dir.head))]...)
	}
	if c.state == connUnknown && dir.startLost {
		// The capture lost the start of this direction before the connection was
		// classified: its octets are FPDUs if it is iWARP. The other direction's start
		// frame, or an FPDU found here, says it is.
		dir.classify = append(dir.classify, classifyChunk{frame: frame, time: t, b: append([]byte(nil), b...)})
		if probeFPDU(b) {
			c.becomeIWARP(dir.d, dir)
			dir.locked = true
			return
		}
		if dir.probes++; dir.probes >= maxProbes {
			c.drop()
		}
		return
	}
	if c.state == connUnknown {
		// The first in-order octets of a connection tell whether it is MPA: the
		// initiator's MPA Request comes first.
		dir.classify = append(dir.classify, classifyChunk{frame: frame, time: t, b: append([]byte(nil), b...)})
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
		c.becomeIWARP(dir.d, dir)
		dir.locked = true
		return
	}
	if dir.dec == nil {
		// The first decoder of a direction starts with its start frame and shares the
		// negotiation with the other direction; one that starts after lost octets looks
		// for FPDUs on its own.
		neg := dir.c.neg
		if dir.decoders > 0 || dir.startLost {
			neg = nil
		}
		dir.decoders++
		dir.chunks, dir.fed = dir.chunks[:0], 0
		dir.framing, dir.fillFrame = false, 0
		dec := dir
		dir.dec = iwarp.NewStreamDecoder(neg, func(r *iwarp.Record) { dec.record(r) })
	}
	fed0 := dir.fed
	dir.fed += uint64(len(b))
	dir.chunks = append(dir.chunks, chunk{end: dir.fed, frame: frame, time: t})
	dir.dec.Write(b)
	dir.keepPeek(fed0, b)
}

// keepPeek keeps the first octets of the FPDU in progress after b, fed at stream offset
// fed0: from b if the FPDU starts in it, else appended to those kept if b follows them.
func (dir *iwarpDir) keepPeek(fed0 uint64, b []byte) {
	switch {
	case !dir.framing:
	case dir.boundary >= fed0 && dir.boundary <= dir.fed:
		dir.peekOff = dir.boundary
		dir.peekN = copy(dir.peek[:], b[dir.boundary-fed0:])
	case dir.peekOff == dir.boundary && dir.peekOff+uint64(dir.peekN) == fed0:
		dir.peekN += copy(dir.peek[dir.peekN:], b)
	}
}

// fpduHeaderLen returns how many octets of an FPDU starting with h (at least 4) its
// headers are: the MPA length, the DDP header and the RDMAP header that Read Request,
// the atomics and Immediate Data carry in the DDP payload (Terminate: all of it). ok is
// false if h does not start an FPDU.
func fpduHeaderLen(h []byte) (n int, ok bool) {
	ulpdu := int(binary.BigEndian.Uint16(h))
	if ulpdu < 2 || h[2]&iwarp.DDPVersionMask != iwarp.DDPVersion || h[3]>>6 != iwarp.RDMAPVersion {
		return 0, false
	}
	ddp := iwarp.DDPUntaggedHeaderLen
	if h[2]&iwarp.DDPFlagTagged != 0 {
		ddp = iwarp.DDPTaggedHeaderLen
	}
	switch iwarp.Opcode(h[3] & iwarp.RDMAPOpcodeMask) {
	case iwarp.OpReadRequest:
		ddp += iwarp.ReadRequestLen
	case iwarp.OpAtomicRequest:
		ddp += iwarp.AtomicRequestLen
	case iwarp.OpAtomicResponse:
		ddp += iwarp.AtomicResponseLen
	case iwarp.OpImmediateData, iwarp.OpImmediateDataSE:
		ddp += iwarp.ImmediateDataLen
	case iwarp.OpTerminate:
		ddp = ulpdu
	}
	return iwarp.FPDUHeaderLen + min(ddp, ulpdu), true
}

// fillCut takes n octets that the capture lost at frame, the segment being delivered
// (dir.seg), when they fall inside an FPDU whose headers the capture holds: it feeds
// the decoder zeros for those up to the FPDU's end, which it then decodes from its
// headers, and returns how many octets are lost after the FPDU (n if none were taken:
// no FPDU in progress, its headers cut, markers in use).
func (dir *iwarpDir) fillCut(frame int, n uint32) uint32 {
	s := dir.seg
	if s == nil || frame != dir.d.frame || dir.dec == nil || !dir.framing || dir.peekOff != dir.boundary || dir.peekN < 4 {
		return n
	}
	neg := dir.dec.Negotiation()
	if !dir.afterFPDU && !neg.Complete() || neg.Markers(true) || neg.Markers(false) {
		return n
	}
	need, ok := fpduHeaderLen(dir.peek[:dir.peekN])
	if !ok || dir.peekN < need {
		return n
	}
	total := uint64(iwarp.FPDULen(int(binary.BigEndian.Uint16(dir.peek[:]))))
	inFPDU := dir.fed - dir.boundary
	if inFPDU >= total {
		return n // the decoder would have ended it: not an FPDU in progress
	}
	k := min(uint64(n), total-inFPDU)
	if dir.fillFrame == 0 {
		dir.fillFrame, dir.fillOrig, dir.fillCapt = frame, dir.d.wire, dir.d.captured
	}
	dir.fillRest = n - uint32(k)
	dir.filledInside = dir.fillRest == 0
	dir.fed += k
	dir.chunks = append(dir.chunks, chunk{end: dir.fed, frame: frame, time: dir.d.now})
	dir.filling = true
	for left := k; left > 0; {
		m := min(left, uint64(len(zeroOctets)))
		dir.dec.Write(zeroOctets[:m])
		left -= m
	}
	dir.filling = false
	return dir.fillRest
}

// lost ends the current decoder: the octets after a hole start a new one.
func (dir *iwarpDir) lost(frame int, n uint32) {
	c := dir.c
	if c.state == connOther {
		return
	}
	if c.state == connIWARP {
		if n = dir.fillCut(frame, n); n == 0 {
			dir.lostSeen = true
			return
		}
	}
	if c.state == connUnknown && dir.startLost {
		if k := len(dir.classify); k > 0 && dir.classify[k-1].lost > 0 {
			dir.classify[k-1].lost += n // one hole: segments cut to nothing add no chunks
			return
		}
		dir.classify = append(dir.classify, classifyChunk{frame: frame, lost: n})
		return
	}
	note := Problem{Frame: frame, Reason: fmt.Sprintf("tcp %s → %s: %d bytes missing from the capture (found at this frame)", dir.src, dir.dst, n)}
	if cause := dir.stream.lossCause; cause != "" {
		note.Reason = fmt.Sprintf("tcp %s → %s: %d bytes sent after the last captured byte of the direction not captured (%s)", dir.src, dir.dst, n, cause)
	}
	if !dir.startSeen && !dir.startLost && (c.state == connUnknown || dir.stream.synSeen) {
		// Octets lost before the direction's start frame was decoded: part or all of
		// it is among them.
		dir.loseStart(frame)
		note.Reason += fmt.Sprintf(", part or all of the %s among them", startFrameName(dir.lostRole))
	}
	note.Reason += "; FPDU framing resynchronised after them"
	dir.lostSeen = true
	if c.state == connUnknown {
		c.pendingNotes = append(c.pendingNotes, note)
		dir.classify = nil
		return
	}
	dir.d.res.Notes = append(dir.d.res.Notes, note)
	if dir.dec != nil {
		dir.closing = "gap"
		dir.dec.Close()
		dir.dec = nil
		dir.closing = ""
	}
	dir.resync = true
}

// loseStart records that the capture lost octets of the direction before its start
// frame was decoded (found at frame): which start frame it was, and its flags if the
// octets before the loss hold them.
func (dir *iwarpDir) loseStart(frame int) {
	dir.startLost, dir.resync = true, true
	h := dir.head
	dir.lostRole = dir.guessRole(h)
	if len(h) >= iwarp.MPAKeyLen+2 && startsWithMPAKey(h) {
		// The key, then the flags and revision octets (RFC 5044 §7.1).
		dir.lostFlagsKnown, dir.lostFlags, dir.lostRev = true, h[iwarp.MPAKeyLen], h[iwarp.MPAKeyLen+1]
	}
	dir.midNote = fmt.Sprintf("the capture lost part or all of the %s (found at frame %d); FPDU framing found at this segment",
		startFrameName(dir.lostRole), frame)
	dir.c.fillLostStart()
}

// fillLostStart gives the negotiation the start frame that a direction lost, once the
// other direction's start frame is known (its decoder waits for the peer's before it
// decodes FPDUs) and this one's flags are: from the octets the capture kept, or from the
// CRC use of the direction's first FPDU. Markers are taken as off: nothing shows them.
func (c *tcpConn) fillLostStart() {
	for i, dir := range c.dirs {
		other := c.dirs[1-i]
		if !dir.startLost || dir.negFilled || !other.startSeen {
			continue
		}
		var flags, rev uint8
		switch {
		case dir.lostFlagsKnown:
			flags, rev = dir.lostFlags, dir.lostRev
		case dir.crcKnown:
			if dir.crcFound {
				flags = iwarp.MPAFlagCRC
			}
			rev = other.rev
		default:
			continue
		}
		dir.negFilled = true
		if other.role == iwarp.RoleInitiator {
			c.neg.SetReply(flags, rev)
		} else {
			c.neg.SetRequest(flags, rev)
		}
		if c.mpa != nil {
			c.mpa.CRC = c.neg.CRC()
		}
	}
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
	case iwarp.RecordMPAFrame, iwarp.RecordFPDU:
		dir.framing, dir.afterFPDU, dir.boundary = true, r.Kind == iwarp.RecordFPDU, r.Offset+uint64(r.Len)
	default:
		dir.framing = false
	}
	switch r.Kind {
	case iwarp.RecordMPAFrame:
		dir.fillFrame = 0
		d.mpaRecord(dir, frame, t, r)
	case iwarp.RecordFPDU:
		d.fpduRecord(dir, frame, t, r)
	default:
		dir.fillFrame = 0
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
	p := dir.packet(frame, t)
	m := r.MPA
	kind := "reply"
	p.Opcode = "MPA Reply"
	dir.role = iwarp.RoleResponder
	if m.IsRequest() {
		kind, p.Opcode = "request", "MPA Request"
		dir.role = iwarp.RoleInitiator
	}
	dir.startSeen, dir.rev = true, m.Revision()
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
	d.emit(p, d.selectsConn(p, c), true)
	// The peer's start frame may be the one the capture lost: its decoder can go on.
	c.fillLostStart()
}

func (d *decoder) fpduRecord(dir *iwarpDir, frame int, t time.Time, r *iwarp.Record) {
	c := dir.c
	d.markRDMA(frame)
	dir.resync = false
	p := dir.packet(frame, t)
	if dir.midNote != "" {
		p.Note = d.notef(frame, "tcp %s → %s: %s", dir.src, dir.dst, dir.midNote)
		dir.midNote = ""
	}
	// Whether the filter shows the FPDU, and so whether its connection counts it.
	p.Opcode = "FPDU"
	if r.DDP != nil {
		p.Opcode = r.RDMAP.Opcode().String()
	}
	sel := d.selectsConn(p, c)
	n := 0 // what the counters add: 1 if the FPDU is counted
	if sel {
		n = 1
	}
	c.fpdus += n
	ulpdu := int(r.FPDU.ULPDULength())
	p.ULPDULen = &ulpdu
	if m := (r.Len - len(r.FPDU)) / iwarp.MarkerLen; m > 0 {
		p.Markers = m
	}
	cutFrame := dir.fillFrame
	dir.fillFrame = 0
	recErr := r.Err
	p.CRC = "none"
	switch {
	case cutFrame != 0:
		// The octets after the headers are zeros standing for what the capture cut:
		// the CRC cannot be checked, and the headers' own errors are what is left.
		if r.CRCChecked {
			p.CRC = "not verified"
		}
		recErr = nil
		if errors.Is(r.Err, iwarp.ErrBadCRC) {
			if _, err := iwarp.ParseDDP(r.FPDU.ULPDU()); err != nil {
				recErr = err
			} else if _, err := iwarp.ParseRDMAP(r.DDP); err != nil {
				recErr = err
			}
		} else {
			recErr = r.Err
		}
		p.Cut, p.OrigLen, p.CapLen = true, dir.fillOrig, dir.fillCapt
	case r.CRCChecked:
		p.CRC = "ok"
		if errors.Is(r.Err, iwarp.ErrBadCRC) {
			p.CRC = "bad"
			c.crcErrors += n
			d.res.CRCErrors += n
		}
	}
	var errs []string
	if recErr != nil {
		errs = append(errs, recErr.Error())
	}
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
			if recErr == nil {
				c.terminates += n
			}
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
		if recErr == nil && sel {
			c.opcodes[op.String()]++
			if dd.Last() {
				c.messages[op.String()]++
			}
			c.payloadBytes += len(payload)
			di := 0
			if dir == c.dirs[1] {
				di = 1
			}
			c.points = append(c.points, iwarpPoint{t: p.Time, payload: len(payload), dir: di})
			switch {
			case p.ReadRequest != nil:
				if c.readPending == nil {
					c.readPending = map[[2]uint64]float64{}
				}
				c.readPending[[2]uint64{uint64(p.ReadRequest.SinkSTag), p.ReadRequest.SinkTO}] = p.Time
			case op == iwarp.OpReadResponse && dd.Tagged():
				k := [2]uint64{uint64(dd.STag()), dd.TO()}
				if t0, ok := c.readPending[k]; ok {
					c.readRTT = append(c.readRTT, p.Time-t0)
					delete(c.readPending, k)
				}
			}
		}
	}
	switch {
	case cutFrame != 0 && dir.filling:
		// The FPDU ends in the octets the frame being delivered lost: its line carries
		// the frame's error.
		what := "payload not captured"
		if r.CRCChecked {
			what = "payload and CRC not verified"
		}
		reason := fmt.Sprintf("%s after the headers of the FPDU it ends: headers decoded, %s", dir.seg.cut, what)
		if dir.fillRest > 0 {
			reason += fmt.Sprintf("; %d bytes after the FPDU lost", dir.fillRest)
		}
		c.errors += n
		dir.reported = d.frame
		if len(errs) == 0 && dir.fillRest == 0 {
			c.cut += n
			p.Error = d.cutError(frame, fmt.Sprintf("tcp %s → %s: %s", dir.src, dir.dst, reason))
		} else {
			errs = append([]string{reason}, errs...)
			p.Error = d.errorf(frame, "tcp %s → %s: %s", dir.src, dir.dst, joinErrs(errs))
		}
	case len(errs) > 0:
		c.errors += n
		p.Error = d.errorf(frame, "tcp %s → %s: %s", dir.src, dir.dst, joinErrs(errs))
	}
	if cutFrame != 0 && p.Error == "" {
		p.Note = fmt.Sprintf("FPDU cut short by the capture at frame %d (%d of %d bytes), after its headers: headers decoded, payload not captured", cutFrame, dir.fillCapt, dir.fillOrig)
	}
	d.emit(p, sel, true)
	if dir.startLost && !dir.crcKnown {
		// The first FPDU after a lost start frame shows whether CRCs are in use: the
		// peer's decoder, waiting for that start frame, can go on (it may print FPDUs
		// now, so p is done with).
		dir.crcKnown, dir.crcFound = true, r.CRCChecked
		c.fillLostStart()
	}
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
		if dir.startLost && !dir.startSeen {
			return // the start frame the loss cut short: its note says so
		}
		d.notef(frame, "%s%v (before bytes the capture lost)", where, r.Err)
		return
	case errors.Is(r.Err, iwarp.ErrTruncated) && dir.closing == "end" && (!dir.stream.finSeen || dir.lostSeen):
		d.notef(frame, "%s%v (the capture ends inside it)", where, r.Err)
		return
	}
	p := dir.packet(frame, t)
	p.Opcode = "?"
	sel := d.selectsConn(p, c)
	if sel {
		c.errors++
	}
	reason := r.Err.Error()
	if errors.Is(r.Err, iwarp.ErrFramingLost) && !strings.Contains(reason, "framing") {
		reason += " (" + iwarp.ErrFramingLost.Error() + ")"
	}
	p.Error = d.errorf(frame, "%s%s", where, reason)
	d.emit(p, sel, false)
}

// closeConn ends a connection: holes never filled, decoders closed.
func (d *decoder) closeConn(c *tcpConn) {
	if c.closed {
		return
	}
	c.closed = true
	if c.state == connUnknown {
		for _, p := range c.pendingCuts {
			if p.unsure {
				d.unknownCuts.add(p.Frame)
			}
		}
		d.unknownCuts.n += c.cutsDropped
	}
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
		Terminates: c.terminates, CRCErrors: c.crcErrors, Errors: c.errors, Cut: c.cut,
		First: d.relTime(c.first), Last: d.relTime(c.last),
		goodBytes: c.payloadBytes,
		order:     d.relTime(c.seen), conn: c.idx + 1, shown: c.shown,
	}
	for _, dir := range c.dirs {
		f.Duplicates += dir.stream.retransmitted + dir.stream.overlapping
		f.OutOfOrder += dir.stream.outOfOrder
		f.LostBytes += dir.stream.lostBytes
	}
	f.finishGoodput()
	if r := newRTTStats(append([]float64(nil), c.readRTT...)); r != nil {
		f.RTT = &FlowRTT{ReadResponse: r}
	}
	if c.shown {
		f.Throughput = throughput(f.First, f.Last, func(yield func(float64, int)) {
			for _, p := range c.points {
				yield(p.t, p.payload)
			}
		})
	}
	if d.opts.Report {
		f.series = &flowSeries{readRTT: c.readRTT, iwarpPts: c.points,
			dirs: []seriesDir{{name: c.dirs[0].src.String() + " → " + c.dirs[0].dst.String()}, {name: c.dirs[1].src.String() + " → " + c.dirs[1].dst.String()}}}
	}
	return f
}
