package netio

import (
	"fmt"
	"io"
	"net"
	"sync"
)

// DefaultPipeQueueLen is the number of frames each direction of a Pipe holds
// before it drops, when NewPipe chooses.
const DefaultPipeQueueLen = 1024

// PipeStats counts what one end of a pipe did. Drops are counted at the end
// that wrote the frame.
type PipeStats struct {
	Sent               uint64 // frames this end wrote that were queued for the peer
	Received           uint64 // frames this end read
	DroppedFull        uint64 // frames this end wrote while the peer's queue was full
	DroppedOversize    uint64 // frames this end wrote longer than MaxFrameLen(MTU())
	DroppedPeerClosed  uint64 // frames this end wrote after the peer closed
	DroppedShortBuffer uint64 // frames this end read that did not fit the read buffer
}

// PipeEnd is one end of an in-memory, full-duplex Ethernet link made by
// NewPipe. Each direction is a bounded FIFO queue; a frame written while the
// queue is full is dropped and counted, as a NIC would. Frames are copied on
// Write and on Read, so neither side shares buffers with the other.
//
// Read blocks until a frame arrives. After the end itself is closed, Read
// and Write return net.ErrClosed; after the peer is closed, Read returns the
// frames still queued and then io.EOF, and written frames are dropped.
type PipeEnd struct {
	mu    *sync.Mutex // shared by both ends
	peer  *PipeEnd
	batch int
	mtu   int

	// Guarded by mu.
	rx     frameRing  // frames waiting for this end to read
	rxCond *sync.Cond // signalled when rx gains a frame or either end closes
	closed bool
	stats  PipeStats
}

// NewPipe returns the two connected ends of an in-memory Ethernet link with
// the given batch size and interface MTU, each direction queueing up to
// DefaultPipeQueueLen frames.
func NewPipe(batch, mtu int) (a, b *PipeEnd) {
	return NewPipeQueue(batch, mtu, DefaultPipeQueueLen)
}

// NewPipeQueue is NewPipe with each direction queueing up to queueLen frames.
// Non-positive arguments take defaults: batch 1, mtu DefaultMTU, queueLen
// DefaultPipeQueueLen.
func NewPipeQueue(batch, mtu, queueLen int) (a, b *PipeEnd) {
	if batch <= 0 {
		batch = 1
	}
	if mtu <= 0 {
		mtu = DefaultMTU
	}
	if queueLen <= 0 {
		queueLen = DefaultPipeQueueLen
	}
	mu := new(sync.Mutex)
	a = &PipeEnd{mu: mu, batch: batch, mtu: mtu, rx: newFrameRing(queueLen)}
	b = &PipeEnd{mu: mu, batch: batch, mtu: mtu, rx: newFrameRing(queueLen)}
	a.rxCond = sync.NewCond(mu)
	b.rxCond = sync.NewCond(mu)
	a.peer, b.peer = b, a
	return a, b
}

// Read reads up to len(bufs) frames, blocking until at least one is queued.
// See Endpoint.
func (e *PipeEnd) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for e.rx.len() == 0 && !e.closed && !e.peer.closed {
		e.rxCond.Wait()
	}
	return e.readLocked(bufs, sizes, offset)
}

// TryRead reads up to len(bufs) frames without blocking; it returns 0, nil
// when none are queued. See Poller.
func (e *PipeEnd) TryRead(bufs [][]byte, sizes []int, offset int) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.readLocked(bufs, sizes, offset)
}

func (e *PipeEnd) readLocked(bufs [][]byte, sizes []int, offset int) (int, error) {
	if e.closed {
		return 0, net.ErrClosed
	}
	want := min(len(bufs), len(sizes))
	n := 0
	for n < want && e.rx.len() > 0 {
		frame := e.rx.front()
		m, err := CopyFrame(bufs[n], offset, frame)
		e.rx.pop()
		if err != nil {
			e.stats.DroppedShortBuffer++
			return n, err
		}
		sizes[n] = m
		n++
		e.stats.Received++
	}
	if n == 0 && e.peer.closed {
		return 0, io.EOF
	}
	return n, nil
}

// Write queues each bufs[i][offset:] for the peer; frames that do not fit
// the queue or exceed MaxFrameLen(MTU()) are dropped and counted. See
// Endpoint.
func (e *PipeEnd) Write(bufs [][]byte, offset int) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return 0, net.ErrClosed
	}
	peer := e.peer
	queued := false
	for i, b := range bufs {
		if offset < 0 || offset > len(b) {
			return i, fmt.Errorf("netio: pipe write offset %d outside buffer %d of length %d", offset, i, len(b))
		}
		frame := b[offset:]
		switch {
		case peer.closed:
			e.stats.DroppedPeerClosed++
		case len(frame) > MaxFrameLen(e.mtu):
			e.stats.DroppedOversize++
		case !peer.rx.push(frame):
			e.stats.DroppedFull++
		default:
			e.stats.Sent++
			queued = true
		}
	}
	if queued {
		peer.rxCond.Broadcast()
	}
	return len(bufs), nil
}

// BatchSize returns the batch size given to NewPipe.
func (e *PipeEnd) BatchSize() int { return e.batch }

// MTU returns the interface MTU given to NewPipe.
func (e *PipeEnd) MTU() int { return e.mtu }

// Close closes this end: its own Reads and Writes fail with net.ErrClosed,
// and the peer's Read returns io.EOF once it has drained its queue.
func (e *PipeEnd) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.closed {
		e.closed = true
		e.rx.clear()
		e.rxCond.Broadcast()
		e.peer.rxCond.Broadcast()
	}
	return nil
}

// Stats returns a snapshot of this end's counters.
func (e *PipeEnd) Stats() PipeStats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stats
}

// Queued returns the number of frames waiting for this end to read.
func (e *PipeEnd) Queued() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.rx.len()
}

// frameRing is a bounded FIFO of frames. Each slot keeps its buffer between
// uses, so a steady stream of frames allocates nothing once every slot has
// grown to the frame size.
type frameRing struct {
	slots [][]byte
	head  int
	n     int
}

func newFrameRing(limit int) frameRing { return frameRing{slots: make([][]byte, limit)} }

func (r *frameRing) len() int { return r.n }

// push copies frame into the ring and reports whether there was room.
func (r *frameRing) push(frame []byte) bool {
	if r.n == len(r.slots) {
		return false
	}
	i := (r.head + r.n) % len(r.slots)
	r.slots[i] = append(r.slots[i][:0], frame...)
	r.n++
	return true
}

// front returns the oldest frame; the ring must not be empty.
func (r *frameRing) front() []byte { return r.slots[r.head] }

// pop discards the oldest frame; the ring must not be empty.
func (r *frameRing) pop() {
	r.head = (r.head + 1) % len(r.slots)
	r.n--
}

func (r *frameRing) clear() { r.head, r.n = 0, 0 }

var (
	_ Endpoint = (*PipeEnd)(nil)
	_ Poller   = (*PipeEnd)(nil)
)
