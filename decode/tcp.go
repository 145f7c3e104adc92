package decode

import (
	"fmt"
	"time"
)

// maxPendingBytes bounds the out-of-order data buffered for one TCP direction. Past it the
// oldest hole is declared lost (the capture missed those bytes) and decoding resumes after
// it: a capture with a dropped segment must not make the decoder hold the rest of a
// long stream in memory.
const maxPendingBytes = 4 << 20

// streamSink consumes the bytes of one TCP direction in sequence order.
type streamSink interface {
	// data delivers in-order bytes that arrived in frame, at time t.
	data(frame int, t time.Time, b []byte)
	// lost reports n bytes of sequence space that the capture does not hold, found
	// missing at frame; the next call to data continues after them.
	lost(frame int, n uint32)
}

// tcpSegment is one buffered out-of-order segment (its data is a copy).
type tcpSegment struct {
	seq     uint32
	frame   int
	time    time.Time
	data    []byte
	missing uint32 // bytes of the segment that the capture cut off after data
}

// tcpStream reassembles one direction of a TCP connection by sequence number:
// retransmitted and overlapping segments are trimmed to the new bytes, out-of-order
// segments are buffered until the hole before them is filled.
type tcpStream struct {
	sink      streamSink
	started   bool // next is valid
	synSeen   bool // next was set from a SYN
	midStream bool // data was seen before any SYN
	finSeen   bool
	isn       uint32 // the SYN's sequence number (synSeen)
	next      uint32 // next expected sequence number
	pending   []tcpSegment
	pendBytes int

	// The end of the direction's data that the capture proves was sent, whether or
	// not it holds the bytes: the sequence number of its FIN (finEnd, at finFrame) and
	// the highest acknowledgment number of the peer (ackEnd, at ackFrame). finish
	// declares the bytes between the last captured one and that end lost: a capture
	// that dropped the last segments of a direction (tcpdump's ring full) is thereby
	// told apart from a stream that ended inside an FPDU.
	finEnd, ackEnd     uint32
	finKnown, ackKnown bool
	finFrame, ackFrame int
	// lossCause says why the bytes lose reports are missing when it is not a hole
	// between captured segments or a frame cut short ("" then).
	lossCause string

	segments      int // segments carrying data
	retransmitted int // segments holding only bytes already delivered
	overlapping   int // segments holding some bytes already delivered
	outOfOrder    int // segments that arrived before the bytes preceding them
	lostBytes     uint64
}

// seqBefore reports whether sequence number a is before b (RFC 1982 serial arithmetic).
func seqBefore(a, b uint32) bool { return int32(a-b) < 0 }

// startsStream reports whether a segment at seq carries the first octet after the SYN:
// the direction's first octet of data.
func (s *tcpStream) startsStream(seq uint32) bool { return s.synSeen && seq == s.isn+1 }

// segment takes one TCP segment: payload is what the capture holds, wireLen what the
// segment carried (larger when the capture cut the frame short).
func (s *tcpStream) segment(frame int, t time.Time, seq uint32, syn, fin bool, payload []byte, wireLen int) {
	if syn {
		if !s.started {
			s.started, s.synSeen, s.isn, s.next = true, true, seq, seq+1
		}
		seq++
	}
	if fin {
		s.finSeen = true
		if !s.finKnown {
			s.finEnd, s.finKnown, s.finFrame = seq+uint32(wireLen), true, frame
		}
	}
	if wireLen == 0 {
		return
	}
	s.segments++
	if !s.started {
		s.started, s.midStream, s.next = true, true, seq
	}
	missing := uint32(wireLen - len(payload))
	end := seq + uint32(wireLen)
	if !seqBefore(s.next, end) {
		s.retransmitted++
		return
	}
	if seqBefore(seq, s.next) {
		s.overlapping++
		skip := s.next - seq
		if skip >= uint32(len(payload)) {
			missing -= skip - uint32(len(payload))
			payload = nil
		} else {
			payload = payload[skip:]
		}
		seq = s.next
	}
	if seq != s.next {
		s.outOfOrder++
		s.buffer(tcpSegment{seq: seq, frame: frame, time: t, data: append([]byte(nil), payload...), missing: missing})
		for s.pendBytes > maxPendingBytes && len(s.pending) > 0 {
			first := s.pending[0]
			s.lose(first.frame, first.seq-s.next)
			s.drain()
		}
		return
	}
	s.deliver(frame, t, payload, missing)
	s.drain()
}

// acked tells the stream that the peer acknowledged everything before ack: a hole
// before buffered data that the peer has acknowledged was delivered, and the capture
// missed it, so it is declared lost at once rather than at the end of the capture.
func (s *tcpStream) acked(frame int, ack uint32) {
	if !s.ackKnown || seqBefore(s.ackEnd, ack) {
		s.ackEnd, s.ackKnown, s.ackFrame = ack, true, frame
	}
	for len(s.pending) > 0 && !seqBefore(ack, s.pending[0].seq) {
		s.lose(frame, s.pending[0].seq-s.next)
		s.drain()
	}
}

// buffer inserts seg into the pending list, kept sorted by sequence number.
func (s *tcpStream) buffer(seg tcpSegment) {
	i := len(s.pending)
	for i > 0 && seqBefore(seg.seq, s.pending[i-1].seq) {
		i--
	}
	s.pending = append(s.pending, tcpSegment{})
	copy(s.pending[i+1:], s.pending[i:])
	s.pending[i] = seg
	s.pendBytes += len(seg.data)
}

// deliver hands in-order bytes to the sink.
func (s *tcpStream) deliver(frame int, t time.Time, b []byte, missing uint32) {
	if len(b) > 0 {
		s.sink.data(frame, t, b)
		s.next += uint32(len(b))
	}
	if missing > 0 {
		s.lose(frame, missing)
	}
}

// lose skips n bytes of sequence space the capture does not hold.
func (s *tcpStream) lose(frame int, n uint32) {
	if n == 0 {
		return
	}
	s.lostBytes += uint64(n)
	s.sink.lost(frame, n)
	s.next += n
}

// drain delivers the buffered segments that are now in order.
func (s *tcpStream) drain() {
	for len(s.pending) > 0 {
		p := s.pending[0]
		if seqBefore(s.next, p.seq) {
			return
		}
		s.pending = s.pending[1:]
		s.pendBytes -= len(p.data)
		end := p.seq + uint32(len(p.data)) + p.missing
		if !seqBefore(s.next, end) {
			continue
		}
		skip := s.next - p.seq
		data, missing := p.data, p.missing
		if skip >= uint32(len(data)) {
			missing -= skip - uint32(len(data))
			data = nil
		} else {
			data = data[skip:]
		}
		s.deliver(p.frame, p.time, data, missing)
	}
	if len(s.pending) == 0 {
		s.pending = nil
	}
}

// finish is called at the end of the capture: holes that were never filled are declared
// lost and the data after them is delivered; then the bytes after the last captured one
// that the direction's FIN or the peer's ACK shows were sent are declared lost (as
// Wireshark's "ACKed segment that wasn't captured"). The FIN's sequence number is the
// exact end. Without it, an ACK one past the last captured byte is taken for the ACK of
// an uncaptured FIN (no data lost), and one further on, if it also covers such a FIN,
// counts it as one byte more.
func (s *tcpStream) finish() {
	for len(s.pending) > 0 {
		first := s.pending[0]
		s.lose(first.frame, first.seq-s.next)
		s.drain()
	}
	if !s.started {
		return
	}
	switch {
	case s.finKnown && seqBefore(s.next, s.finEnd):
		s.lossCause = fmt.Sprintf("the FIN at frame %d comes after them", s.finFrame)
		s.lose(s.finFrame, s.finEnd-s.next)
	case !s.finKnown && s.ackKnown && seqBefore(s.next+1, s.ackEnd):
		s.lossCause = fmt.Sprintf("the peer's ACK at frame %d acknowledges them", s.ackFrame)
		s.lose(s.ackFrame, s.ackEnd-s.next)
	}
	s.lossCause = ""
}
