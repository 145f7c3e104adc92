package decode

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

// recordSink records what a tcpStream delivers: bytes (with '?' for lost ones) and the
// frame of each delivery.
type recordSink struct {
	got    bytes.Buffer
	frames []int
}

func (r *recordSink) data(frame int, _ time.Time, b []byte) {
	r.got.Write(b)
	r.frames = append(r.frames, frame)
}

func (r *recordSink) lost(frame int, n uint32) {
	r.got.Write(bytes.Repeat([]byte{'?'}, int(n)))
	r.frames = append(r.frames, -frame)
}

func TestTCPStreamReassembly(t *testing.T) {
	const isn = 0xfffffff0 // sequence numbers wrap inside the stream
	msg := []byte("abcdefghijklmnopqrstuvwxyz0123456789")
	type seg struct {
		off, n  int // payload = msg[off:off+n] at seq isn+1+off
		wireLen int // 0: n
	}
	tests := []struct {
		name       string
		segs       []seg
		want       string
		frames     string
		retrans    int
		overlap    int
		outOfOrder int
	}{
		{"in order", []seg{{0, 10, 0}, {10, 10, 0}, {20, 16, 0}}, string(msg), "[1 2 3]", 0, 0, 0},
		{"retransmission", []seg{{0, 10, 0}, {0, 10, 0}, {10, 26, 0}}, string(msg), "[1 3]", 1, 0, 0},
		{"overlap", []seg{{0, 10, 0}, {5, 10, 0}, {15, 21, 0}}, string(msg), "[1 2 3]", 0, 1, 0},
		{"out of order", []seg{{0, 10, 0}, {20, 16, 0}, {10, 10, 0}}, string(msg), "[1 3 2]", 0, 0, 1},
		{"out of order overlapping", []seg{{20, 16, 0}, {10, 14, 0}, {0, 12, 0}}, string(msg),
			"[3 2 1]", 0, 0, 2},
		{"hole never filled", []seg{{0, 10, 0}, {20, 16, 0}}, string(msg[:10]) + "??????????" + string(msg[20:]),
			"[1 -2 2]", 0, 0, 1},
		{"frame cut short", []seg{{0, 5, 10}, {10, 26, 0}}, string(msg[:5]) + "?????" + string(msg[10:]),
			"[1 -1 2]", 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sink := &recordSink{}
			s := &tcpStream{sink: sink}
			s.segment(0, time.Time{}, isn, true, false, nil, 0)
			for i, g := range tt.segs {
				wl := g.wireLen
				if wl == 0 {
					wl = g.n
				}
				s.segment(i+1, time.Time{}, isn+1+uint32(g.off), false, false, msg[g.off:g.off+g.n], wl)
			}
			s.finish()
			if got := sink.got.String(); got != tt.want {
				t.Errorf("stream = %q, want %q", got, tt.want)
			}
			if got := fmt.Sprint(sink.frames); got != tt.frames {
				t.Errorf("delivery frames = %s, want %s", got, tt.frames)
			}
			if s.retransmitted != tt.retrans || s.overlapping != tt.overlap || s.outOfOrder != tt.outOfOrder {
				t.Errorf("retransmitted/overlapping/outOfOrder = %d/%d/%d, want %d/%d/%d",
					s.retransmitted, s.overlapping, s.outOfOrder, tt.retrans, tt.overlap, tt.outOfOrder)
			}
			if !s.synSeen || s.midStream {
				t.Errorf("synSeen=%v midStream=%v, want true false", s.synSeen, s.midStream)
			}
		})
	}
}

func TestTCPStreamMidStream(t *testing.T) {
	sink := &recordSink{}
	s := &tcpStream{sink: sink}
	s.segment(1, time.Time{}, 1000, false, false, []byte("hello"), 5)
	s.segment(2, time.Time{}, 1005, false, true, []byte("world"), 5)
	if !s.midStream || s.synSeen || !s.finSeen {
		t.Errorf("midStream=%v synSeen=%v finSeen=%v, want true false true", s.midStream, s.synSeen, s.finSeen)
	}
	if got := sink.got.String(); got != "helloworld" {
		t.Errorf("stream = %q", got)
	}
}

func TestTCPStreamPendingBound(t *testing.T) {
	sink := &recordSink{}
	s := &tcpStream{sink: sink}
	s.segment(0, time.Time{}, 0, true, false, nil, 0)
	chunk := make([]byte, 64<<10)
	// The first 100 bytes never arrive; everything after them does, far more than the
	// decoder is willing to buffer.
	n := maxPendingBytes/len(chunk) + 4
	for i := 0; i < n; i++ {
		s.segment(i+1, time.Time{}, 101+uint32(i*len(chunk)), false, false, chunk, len(chunk))
	}
	if s.pendBytes > maxPendingBytes {
		t.Errorf("pending %d bytes > bound %d", s.pendBytes, maxPendingBytes)
	}
	s.finish()
	if s.lostBytes != 100 {
		t.Errorf("lost %d bytes, want 100", s.lostBytes)
	}
	if got, want := sink.got.Len(), 100+n*len(chunk); got != want {
		t.Errorf("delivered %d bytes, want %d", got, want)
	}
}

func TestTCPStreamAcked(t *testing.T) {
	sink := &recordSink{}
	s := &tcpStream{sink: sink}
	s.segment(0, time.Time{}, 0, true, false, nil, 0)
	s.segment(1, time.Time{}, 1, false, false, []byte("abc"), 3)
	s.segment(2, time.Time{}, 7, false, false, []byte("ghi"), 3) // "def" never captured
	s.acked(3, 5)                                                // not past the hole yet
	if sink.got.String() != "abc" {
		t.Fatalf("stream = %q before the ACK covers the hole", sink.got.String())
	}
	s.acked(4, 10) // the peer got "def": the capture missed it
	if got := sink.got.String(); got != "abc???ghi" || s.lostBytes != 3 || len(s.pending) != 0 {
		t.Errorf("stream = %q, lost %d, pending %d", got, s.lostBytes, len(s.pending))
	}
	if got := fmt.Sprint(sink.frames); got != "[1 -4 2]" {
		t.Errorf("delivery frames %s", got)
	}
}

// TestTCPStreamTrailingLoss: at the end of the capture, the bytes between the last
// captured one and the end that the direction's FIN (or, without it, the peer's highest
// ACK) proves was sent are declared lost; an ACK one past the data is an uncaptured FIN's.
func TestTCPStreamTrailingLoss(t *testing.T) {
	tests := []struct {
		name      string
		fin       int // sequence offset of a captured FIN after the data (-1: none)
		ack       int // the peer's highest ACK, as an offset after the SYN (-1: none)
		want      string
		lost      uint64
		lostFrame int
	}{
		{"all captured, FIN", 6, 7, "abcdef", 0, 0},
		{"all captured, no FIN, ACK of the data", -1, 6, "abcdef", 0, 0},
		{"all captured, FIN not, its ACK", -1, 7, "abcdef", 0, 0},
		{"tail lost, FIN captured", 10, 11, "abcdef????", 4, -3},
		{"tail and FIN lost, ACK of them", -1, 11, "abcdef?????", 5, -4},
		{"tail lost, connection open, ACK of it", -1, 10, "abcdef????", 4, -4},
		{"nothing from the peer", -1, -1, "abcdef", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sink := &recordSink{}
			s := &tcpStream{sink: sink}
			s.segment(0, time.Time{}, 100, true, false, nil, 0)
			s.segment(1, time.Time{}, 101, false, false, []byte("abc"), 3)
			s.segment(2, time.Time{}, 104, false, false, []byte("def"), 3)
			if tt.fin >= 0 {
				s.segment(3, time.Time{}, 101+uint32(tt.fin), false, true, nil, 0)
			}
			if tt.ack >= 0 {
				s.acked(4, 101+uint32(tt.ack))
			}
			s.finish()
			if got := sink.got.String(); got != tt.want || s.lostBytes != tt.lost {
				t.Errorf("stream %q, lost %d; want %q, %d", got, s.lostBytes, tt.want, tt.lost)
			}
			if tt.lost > 0 && sink.frames[len(sink.frames)-1] != tt.lostFrame {
				t.Errorf("loss found at frame %d, want %d", -sink.frames[len(sink.frames)-1], -tt.lostFrame)
			}
		})
	}
}
