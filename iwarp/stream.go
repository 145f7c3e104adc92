package iwarp

import (
	"encoding/binary"
	"errors"

	"github.com/softrdma/softrdma/header"
)

// ErrClosed is returned by StreamDecoder.Write after Close.
var ErrClosed = errors.New("iwarp: stream decoder closed")

// Negotiation is what the two MPA start frames of one connection negotiated. The
// decoders of the connection's two directions share one: the CRC is used in both
// directions if either frame has C set (RFC 5044 §7.1, and Wireshark's reading), and the
// markers a direction carries are asked for by the frame of the *other* direction (M in
// the Request means the responder must send markers; M in the Reply, the initiator).
//
// A Negotiation is not safe for concurrent use; feed one connection's decoders from one
// goroutine.
type Negotiation struct {
	reqSeen, repSeen   bool
	reqFlags, repFlags uint8
	reqRev, repRev     uint8
	decoders           [2]*StreamDecoder
}

// SetRequest records the flags and revision of the MPA Request (for a decoder that will
// not see it).
func (n *Negotiation) SetRequest(flags, revision uint8) {
	n.reqSeen, n.reqFlags, n.reqRev = true, flags, revision
	n.resume()
}

// SetReply records the flags and revision of the MPA Reply.
func (n *Negotiation) SetReply(flags, revision uint8) {
	n.repSeen, n.repFlags, n.repRev = true, flags, revision
	n.resume()
}

// Request returns the Request's flags and revision, and whether it was seen.
func (n *Negotiation) Request() (flags, revision uint8, ok bool) {
	return n.reqFlags, n.reqRev, n.reqSeen
}

// Reply returns the Reply's flags and revision, and whether it was seen.
func (n *Negotiation) Reply() (flags, revision uint8, ok bool) {
	return n.repFlags, n.repRev, n.repSeen
}

// Complete reports whether both start frames are known.
func (n *Negotiation) Complete() bool { return n.reqSeen && n.repSeen }

// CRC reports whether FPDUs carry a CRC32c: either frame has C set.
func (n *Negotiation) CRC() bool { return (n.reqFlags|n.repFlags)&MPAFlagCRC != 0 }

// Rejected reports whether the Reply rejected the connection.
func (n *Negotiation) Rejected() bool { return n.repFlags&MPAFlagReject != 0 }

// Markers reports whether the FPDUs sent by the initiator (true) or by the responder
// (false) carry markers.
func (n *Negotiation) Markers(initiator bool) bool {
	if initiator {
		return n.repFlags&MPAFlagMarkers != 0
	}
	return n.reqFlags&MPAFlagMarkers != 0
}

func (n *Negotiation) register(d *StreamDecoder) {
	for i, x := range n.decoders {
		if x == nil {
			n.decoders[i] = d
			return
		}
	}
}

// resume lets a decoder that waited for the peer's start frame go on.
func (n *Negotiation) resume() {
	if !n.Complete() {
		return
	}
	for _, d := range n.decoders {
		if d != nil && d.state == stWait {
			d.endWait(false)
		}
	}
}

// RecordKind says what a Record holds.
type RecordKind uint8

// Record kinds.
const (
	// RecordMPAFrame: an MPA Request or Reply frame (Record.MPA).
	RecordMPAFrame RecordKind = iota + 1
	// RecordFPDU: an FPDU (Record.FPDU, DDP, RDMAP, Payload).
	RecordFPDU
	// RecordError: octets that could not be decoded, or a problem of the stream as a
	// whole (Record.Err says which).
	RecordError
)

// String names the kind.
func (k RecordKind) String() string {
	switch k {
	case RecordMPAFrame:
		return "MPA frame"
	case RecordFPDU:
		return "FPDU"
	case RecordError:
		return "error"
	}
	return "invalid"
}

// Record is one decoded element of a stream. Its slices point into the decoder's input
// or its reassembly buffer and are valid only during the callback that receives it.
type Record struct {
	// Kind says what the record holds.
	Kind RecordKind
	// Offset is the stream offset (octets since the first octet fed) of the first octet.
	Offset uint64
	// Len is the number of stream octets the record covers, markers included.
	Len int
	// MPA is the start frame (RecordMPAFrame).
	MPA MPAFrame
	// FPDU is the FPDU with markers removed (RecordFPDU).
	FPDU FPDU
	// DDP is the DDP segment, the FPDU's ULPDU (nil if too short for its header).
	DDP DDP
	// RDMAP views the RDMAP fields of the DDP header (nil when DDP is).
	RDMAP RDMAP
	// Payload is the DDP payload (for Read Request and Terminate it starts with their
	// RDMAP headers).
	Payload []byte
	// CRCChecked reports that the FPDU carries a CRC32c and it was checked (Err tells
	// whether it matched).
	CRCChecked bool
	// Err is the first problem found: a CRC or marker mismatch, a bad DDP or RDMAP
	// header, octets skipped to find the framing again, a stream that did not start with
	// an MPA frame.
	Err error
}

type streamState uint8

const (
	stStart  streamState = iota // expecting an MPA start frame
	stMPA                       // reading the start frame's private data
	stWait                      // start frame seen, waiting for the peer's
	stFPDU                      // delimiting FPDUs
	stResync                    // looking for an FPDU boundary
	stDead                      // framing lost for good (markers in use)
	stClosed
)

type crcMode uint8

const (
	crcOff    crcMode = iota
	crcOn             // negotiated
	crcDetect         // unknown: decided by the first FPDU
)

// Role is the part a direction of a connection plays in MPA.
type Role uint8

// Roles.
const (
	RoleUnknown   Role = iota
	RoleInitiator      // sends the MPA Request
	RoleResponder      // sends the MPA Reply
)

const (
	// maxWait bounds what a decoder buffers while waiting for the peer's start frame.
	maxWait = 1 << 20
	// maxResync bounds the resynchronisation buffer: two of the largest FPDUs.
	maxResync = 2 * (FPDUHeaderLen + MaxULPDULen + 1 + CRCLen + 2*MarkerLen)
)

// StreamDecoder decodes the octets of one direction of a TCP connection that carries
// MPA, in sequence order: the MPA Request or Reply, then FPDUs, which may be split across
// any number of writes or several to a write. It strips markers and checks CRCs as the
// Negotiation says, and hands each element to a callback as a Record; errors are records
// too, never panics.
//
// FPDUs that lie wholly inside one Write are handed out as sub-slices of it; only an FPDU
// that straddles writes is copied, into a small reassembly buffer (and, when markers are
// in use, every FPDU is, to remove them: a deliberate copy on a path Linux siw never
// takes).
//
// Feed the two directions in the order the octets were on the wire (as a capture lists
// them): decoding FPDUs needs the peer's start frame. A decoder that gets FPDUs before
// the peer's frame is known buffers them (up to 1 MiB, or until Close, then it decodes
// with what it knows and says so with an ErrNegotiationIncomplete record) and goes on,
// emitting their records, as soon as the other direction's decoder sees the peer's frame,
// that is within the other decoder's Write. Negotiation.SetRequest and SetReply stand in
// for a direction that is not fed.
//
// A stream that does not start with an MPA frame (a capture started after connection
// setup) is reported with an ErrNoNegotiation record; the decoder then looks for an FPDU
// boundary heuristically (a plausible DDP/RDMAP header whose CRC verifies, or whose CRC
// is 0 and which ends the data so far or is followed by another plausible header),
// assuming no markers, and detects from that FPDU whether CRCs are in use. An FPDU whose
// first 4 octets do not show DDP and RDMAP version 1 means the framing is lost: the
// decoder resynchronises the same way from the next octet (ErrFramingLost records tell
// what it skipped), or, with markers in use, stops decoding.
type StreamDecoder struct {
	neg   *Negotiation
	emit  func(*Record)
	rec   Record
	state streamState
	role  Role

	pos     uint64 // stream offset of the next octet to consume
	origin  uint64 // stream offset of the first octet after our start frame
	buf     []byte // reassembly buffer (stripped of markers)
	bufOff  uint64 // stream offset of buf[0] (stStart, stMPA, stWait, stResync)
	crc     crcMode
	markers bool
	closing bool

	// The FPDU in progress (both paths), and the marker path's state.
	inFPDU    bool
	fpduStart uint64
	hdrPos    uint32 // marker-relative position of the ULPDU_Length field
	markerAt  uint32
	leading   bool
	mscratch  [MarkerLen]byte
	crcAcc    uint32
	markerErr error
}

// NewStreamDecoder returns a decoder for one direction of the connection whose two
// directions share neg (nil: a private Negotiation), calling emit for each record (the
// Record and its slices are reused after emit returns). At most two decoders share a
// Negotiation.
func NewStreamDecoder(neg *Negotiation, emit func(*Record)) *StreamDecoder {
	if neg == nil {
		neg = new(Negotiation)
	}
	if emit == nil {
		emit = func(*Record) {}
	}
	d := &StreamDecoder{neg: neg, emit: emit}
	neg.register(d)
	return d
}

// Negotiation returns the negotiation the decoder shares.
func (d *StreamDecoder) Negotiation() *Negotiation { return d.neg }

// Role returns which start frame this direction sent (RoleUnknown before it, or if none).
func (d *StreamDecoder) Role() Role { return d.role }

// Offset returns the number of octets consumed so far.
func (d *StreamDecoder) Offset() uint64 { return d.pos }

// Write feeds the next octets of the stream. It always consumes all of p and returns
// len(p), nil (ErrClosed after Close); problems are reported as records.
func (d *StreamDecoder) Write(p []byte) (int, error) {
	if d.state == stClosed {
		return 0, ErrClosed
	}
	d.feed(p)
	return len(p), nil
}

// Close ends the stream: a decoder still waiting for the peer's frame decodes what it
// holds with what it knows, one still resynchronising gives up on what it could not use,
// and an incomplete trailing element is reported as an ErrTruncated record.
func (d *StreamDecoder) Close() error {
	if d.state == stClosed {
		return nil
	}
	d.closing = true
	if d.state == stWait {
		d.endWait(true)
	}
	if d.state == stResync {
		d.scan(true)
	}
	switch d.state {
	case stStart, stMPA:
		if len(d.buf) > 0 {
			want := MPAFrameHeaderLen
			if len(d.buf) >= MPAFrameHeaderLen {
				want = MPAFrame(d.buf).Len()
			}
			d.errorRecord(d.bufOff, len(d.buf), truncated("stream", "MPA frame length",
				len(d.buf), want))
		}
	case stFPDU:
		if d.inFPDU {
			want := framedLen
			if len(d.buf) >= framedLen {
				want = FPDULen(int(binary.BigEndian.Uint16(d.buf)))
			}
			d.errorRecord(d.fpduStart, int(d.pos-d.fpduStart), truncated("stream",
				"FPDU length", len(d.buf), want))
		}
	}
	d.state = stClosed
	d.buf = nil
	return nil
}

func (d *StreamDecoder) errorRecord(off uint64, n int, err error) {
	d.rec = Record{Kind: RecordError, Offset: off, Len: n, Err: err}
	d.emit(&d.rec)
}

// feed dispatches p by state until it is consumed.
func (d *StreamDecoder) feed(p []byte) {
	for len(p) > 0 {
		switch d.state {
		case stStart, stMPA:
			p = d.feedStart(p)
		case stWait:
			d.feedWait(p)
			return
		case stFPDU:
			if d.markers {
				p = d.feedMarked(p)
			} else {
				p = d.feedFPDU(p)
			}
		case stResync:
			d.feedResync(p)
			return
		default: // stDead, stClosed
			d.pos += uint64(len(p))
			return
		}
	}
}

// keyPrefix reports whether b could be the start of an MPA key.
func keyPrefix(b []byte) bool {
	n := min(len(b), MPAKeyLen)
	return string(b[:n]) == MPAKeyRequest[:n] || string(b[:n]) == MPAKeyReply[:n]
}

func (d *StreamDecoder) feedStart(p []byte) []byte {
	if len(d.buf) == 0 {
		d.bufOff = d.pos
	}
	want := MPAFrameHeaderLen
	if d.state == stMPA {
		want = MPAFrameHeaderLen + int(binary.BigEndian.Uint16(d.buf[mpaPDLenOff:]))
	}
	k := min(want-len(d.buf), len(p))
	d.buf = append(d.buf, p[:k]...)
	d.pos += uint64(k)
	p = p[k:]
	if d.state == stStart {
		if !keyPrefix(d.buf) {
			d.errorRecord(d.bufOff, 0, &header.Error{Header: "stream", Err: ErrNoNegotiation})
			d.crc = crcDetect
			d.enterResync(d.buf, d.bufOff)
			return p
		}
		if len(d.buf) < MPAFrameHeaderLen {
			return p
		}
		if _, err := ParseMPAFrame(d.buf); err != nil && !errors.Is(err, ErrTruncated) {
			d.errorRecord(d.bufOff, len(d.buf), err)
			d.crc = crcDetect
			d.enterResync(d.buf[1:], d.bufOff+1)
			return p
		}
		d.state = stMPA
	}
	m, err := ParseMPAFrame(d.buf)
	if err != nil {
		return p // truncated: wait for more
	}
	d.rec = Record{Kind: RecordMPAFrame, Offset: d.bufOff, Len: len(m), MPA: m}
	d.emit(&d.rec)
	if m.IsRequest() {
		d.role = RoleInitiator
	} else {
		d.role = RoleResponder
	}
	d.origin = d.pos
	d.buf = d.buf[:0]
	d.bufOff = d.pos
	d.state = stWait
	if d.role == RoleInitiator {
		d.neg.SetRequest(m.Flags(), m.Revision())
	} else {
		d.neg.SetReply(m.Flags(), m.Revision())
	}
	if d.state == stWait && d.neg.Complete() {
		d.endWait(false)
	}
	return p
}

func (d *StreamDecoder) feedWait(p []byte) {
	if len(d.buf)+len(p) > maxWait {
		d.buf = append(d.buf, p...)
		d.pos += uint64(len(p))
		d.endWait(true)
		return
	}
	d.buf = append(d.buf, p...)
	d.pos += uint64(len(p))
}

// endWait leaves stWait: with the negotiation complete, or (force) with what is known.
func (d *StreamDecoder) endWait(force bool) {
	n := d.neg
	if n.Complete() {
		d.crc = crcOff
		if n.CRC() {
			d.crc = crcOn
		}
		d.markers = n.Markers(d.role == RoleInitiator)
	} else {
		if !force {
			return
		}
		// Only our own frame is known: CRC is on if we asked for it, else detected;
		// markers are assumed off.
		d.crc = crcDetect
		own := n.repFlags
		if d.role == RoleInitiator {
			own = n.reqFlags
		}
		if own&MPAFlagCRC != 0 {
			d.crc = crcOn
		}
		if len(d.buf) > 0 {
			d.errorRecord(d.bufOff, 0, &header.Error{Header: "stream", Err: ErrNegotiationIncomplete,
				Reason: "decoding without the peer's MPA frame"})
		}
	}
	d.state = stFPDU
	data := d.buf
	d.buf = nil
	d.pos -= uint64(len(data))
	d.feed(data)
}

// ctrlPlausible is the strict header check used to find FPDU boundaries: b starts with
// an FPDU header (ULPDU_Length, DDP control, RDMAP control, and for untagged segments the
// queue number) of a well-formed DDP/RDMAP segment. It needs 4 octets, 12 if untagged.
func ctrlPlausible(b []byte) (ok, needMore bool) {
	if len(b) < 4 {
		return false, true
	}
	l := int(binary.BigEndian.Uint16(b))
	dc, rc := b[2], b[3]
	if dc&DDPVersionMask != DDPVersion || dc&DDPReservedMask != 0 ||
		rc>>6 != RDMAPVersion || rc&RDMAPReservedMask != 0 {
		return false, false
	}
	op := Opcode(rc & RDMAPOpcodeMask)
	tagged := dc&DDPFlagTagged != 0
	if !op.Valid() || op.Tagged() != tagged {
		return false, false
	}
	if tagged {
		return l >= DDPTaggedHeaderLen, false
	}
	if l < DDPUntaggedHeaderLen {
		return false, false
	}
	if len(b) < FPDUHeaderLen+10 {
		return false, true
	}
	return binary.BigEndian.Uint32(b[FPDUHeaderLen+6:]) == op.QueueNumber(), false
}

// framedLen is how many octets of an FPDU the framing check needs.
const framedLen = 4

// framed is the check that the framing still holds, made on the first 4 octets of each
// FPDU: a ULPDU of at least 2 octets whose DDP and RDMAP versions are both 1. (Both are
// fixed by the RFCs, so a peer that sends anything else is taken for lost framing; any
// other problem of the header is reported on the FPDU.)
func framed(b []byte) bool {
	return binary.BigEndian.Uint16(b) >= 2 && b[2]&DDPVersionMask == DDPVersion &&
		b[3]>>6 == RDMAPVersion
}

// fpdu emits one complete FPDU whose framing was checked. computed is the CRC over its
// raw octets when haveCRC (the marker path); off and rawLen place it in the stream.
func (d *StreamDecoder) fpdu(f FPDU, off uint64, rawLen int, computed uint32, haveCRC bool) {
	if !haveCRC && d.crc != crcOff {
		computed = f.ComputeCRC()
	}
	got := f.CRC()
	if d.crc == crcDetect {
		// A CRC field of 0 means no CRC (siw's, and RFC 5044's, way); one that is
		// neither 0 nor right is a CRC gone bad.
		d.crc = crcOn
		if got == 0 && computed != 0 {
			d.crc = crcOff
		}
	}
	r := &d.rec
	*r = Record{Kind: RecordFPDU, Offset: off, Len: rawLen, FPDU: f}
	if d.markerErr != nil {
		r.Err = d.markerErr
		d.markerErr = nil
	}
	if d.crc == crcOn {
		r.CRCChecked = true
		if got != computed && r.Err == nil {
			r.Err = checkCRC(got, computed)
		}
	}
	ddp, err := ParseDDP(f.ULPDU())
	if ddp != nil {
		r.DDP = ddp
		r.RDMAP = RDMAP(ddp)
		r.Payload = ddp.Payload()
		if err == nil {
			_, err = ParseRDMAP(ddp)
		}
	}
	if r.Err == nil {
		r.Err = err
	}
	d.emit(r)
}

// feedFPDU is the marker-free path: FPDUs inside p are emitted in place.
func (d *StreamDecoder) feedFPDU(p []byte) []byte {
	for len(p) > 0 && d.state == stFPDU {
		if d.inFPDU {
			want := framedLen
			if len(d.buf) >= framedLen {
				want = FPDULen(int(binary.BigEndian.Uint16(d.buf)))
			}
			k := min(want-len(d.buf), len(p))
			d.buf = append(d.buf, p[:k]...)
			d.pos += uint64(k)
			p = p[k:]
			if len(d.buf) < want {
				continue
			}
			if want == framedLen {
				if !framed(d.buf) {
					d.inFPDU = false
					d.enterResync(d.buf[1:], d.fpduStart+1)
					return p
				}
				continue
			}
			d.inFPDU = false
			d.fpdu(FPDU(d.buf), d.fpduStart, len(d.buf), 0, false)
			d.buf = d.buf[:0]
			continue
		}
		if len(p) >= framedLen {
			if !framed(p) {
				d.pos++
				d.enterResync(nil, d.pos)
				return p[1:]
			}
			if n := FPDULen(int(binary.BigEndian.Uint16(p))); len(p) >= n {
				d.fpdu(FPDU(p[:n]), d.pos, n, 0, false)
				d.pos += uint64(n)
				p = p[n:]
				continue
			}
		}
		// The FPDU straddles writes: copy what there is (at most the FPDU: p holds less
		// than it, or less than the 4 octets that tell).
		d.inFPDU = true
		d.fpduStart = d.pos
		d.buf = append(d.buf[:0], p...)
		d.pos += uint64(len(p))
		return nil
	}
	return p
}

// feedMarked is the marker path: it strips markers into buf, checks their FPDU
// pointers and computes the CRC over the raw octets.
func (d *StreamDecoder) feedMarked(p []byte) []byte {
	for len(p) > 0 && d.state == stFPDU {
		mp := uint32(d.pos - d.origin)
		o := int(mp % MarkerInterval)
		if o < MarkerLen {
			if o == 0 {
				d.markerAt = mp
				d.leading = !d.inFPDU
				if d.leading {
					d.startMarked()
				}
			}
			k := min(MarkerLen-o, len(p))
			copy(d.mscratch[o:], p[:k])
			if d.inFPDU {
				d.crcAcc = UpdateCRC32c(d.crcAcc, p[:k])
			}
			d.pos += uint64(k)
			p = p[k:]
			if o+k == MarkerLen && d.inFPDU {
				ptr := Marker(d.mscratch[:]).FPDUPointer()
				var want uint16
				if !d.leading {
					want = uint16(d.markerAt - d.hdrPos)
				}
				if ptr != want && d.markerErr == nil {
					d.markerErr = &header.Error{Header: "marker", Field: "FPDU pointer",
						Value: uint64(ptr), Limit: uint64(want), Rel: "!=", Err: ErrMarkerMismatch}
				}
			}
			continue
		}
		if !d.inFPDU {
			d.startMarked()
		}
		if len(d.buf) == 0 {
			d.hdrPos = mp
		}
		want := framedLen
		if len(d.buf) >= framedLen {
			want = FPDULen(int(binary.BigEndian.Uint16(d.buf)))
		}
		k := min(MarkerInterval-o, len(p), want-len(d.buf))
		chunk := p[:k]
		if want == framedLen {
			d.crcAcc = UpdateCRC32c(d.crcAcc, chunk) // FPDULen >= 8: no CRC octet yet
		} else if c := want - CRCLen - len(d.buf); c > 0 {
			d.crcAcc = UpdateCRC32c(d.crcAcc, chunk[:min(c, k)])
		}
		d.buf = append(d.buf, chunk...)
		d.pos += uint64(k)
		p = p[k:]
		if len(d.buf) == framedLen && want == framedLen && !framed(d.buf) {
			d.inFPDU = false
			d.errorRecord(d.fpduStart, int(d.pos-d.fpduStart), &header.Error{
				Header: "stream", Err: ErrFramingLost, Reason: "markers in use, decoding stopped"})
			d.state = stDead
			d.buf = d.buf[:0]
			return p
		}
		if len(d.buf) == want && want > framedLen {
			d.inFPDU = false
			d.fpdu(FPDU(d.buf), d.fpduStart, int(d.pos-d.fpduStart), d.crcAcc, true)
			d.buf = d.buf[:0]
		}
	}
	return p
}

func (d *StreamDecoder) startMarked() {
	d.inFPDU = true
	d.fpduStart = d.pos
	d.crcAcc = 0
	d.markerErr = nil
	d.buf = d.buf[:0]
}

// enterResync switches to resynchronisation with the octets b (a suffix of what was
// consumed, starting at stream offset off) still to scan.
func (d *StreamDecoder) enterResync(b []byte, off uint64) {
	if d.markers {
		d.errorRecord(off, len(b), &header.Error{Header: "stream", Err: ErrFramingLost,
			Reason: "markers in use, decoding stopped"})
		d.state = stDead
		d.buf = d.buf[:0]
		return
	}
	d.state = stResync
	d.inFPDU = false
	d.buf = append(d.buf[:0], b...) // b may alias buf: append moves it down
	d.bufOff = off
	d.scan(false)
}

func (d *StreamDecoder) feedResync(p []byte) {
	d.buf = append(d.buf, p...)
	d.pos += uint64(len(p))
	if over := len(d.buf) - maxResync; over > 0 {
		d.skip(over)
	}
	d.scan(false)
}

// skip drops n octets from the front of the resync buffer, reporting them.
func (d *StreamDecoder) skip(n int) {
	if n <= 0 {
		return
	}
	d.errorRecord(d.bufOff, n, &header.Error{Header: "stream", Field: "octets skipped",
		Value: uint64(n), Err: ErrFramingLost})
	d.buf = append(d.buf[:0], d.buf[n:]...)
	d.bufOff += uint64(n)
}

// scan looks for an FPDU boundary in the resync buffer. With final, a candidate that
// needs more octets is rejected (the stream has ended).
func (d *StreamDecoder) scan(final bool) {
	final = final || d.closing
	b := d.buf
	for i := 0; i < len(b); i++ {
		ok, more := d.candidate(b[i:], final)
		if more && !final {
			d.skip(i)
			return
		}
		if !ok {
			continue
		}
		d.skip(i)
		d.state = stFPDU
		data := d.buf
		d.buf = nil
		d.pos = d.bufOff
		d.feed(data)
		return
	}
	// No position can start an FPDU, whatever follows.
	d.skip(len(b))
}

// candidate reports whether b starts with an FPDU that resynchronisation can trust.
func (d *StreamDecoder) candidate(b []byte, final bool) (ok, needMore bool) {
	ok, more := ctrlPlausible(b)
	if !ok {
		return false, more && !final
	}
	n := FPDULen(int(binary.BigEndian.Uint16(b)))
	if len(b) < n {
		return false, !final
	}
	f := FPDU(b[:n])
	got, computed := f.CRC(), f.ComputeCRC()
	if got == computed && d.crc != crcOff {
		if d.crc == crcDetect {
			d.crc = crcOn
		}
		return true, false
	}
	if got != 0 || d.crc == crcOn {
		return false, false
	}
	// CRC 0 (CRC off, or unknown): trust it if it ends the data so far or another
	// plausible header follows.
	rest := b[n:]
	if len(rest) == 0 {
		if d.crc == crcDetect {
			d.crc = crcOff
		}
		return true, false
	}
	ok, more = ctrlPlausible(rest)
	if more && !final {
		return false, true
	}
	if ok && d.crc == crcDetect {
		d.crc = crcOff
	}
	return ok, false
}
