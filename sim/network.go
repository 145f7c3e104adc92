package sim

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/softrdma/softrdma/netio"
)

// Epoch is the virtual time at which every Network starts. It is a fixed,
// non-zero instant so that captures of identical runs are byte-identical.
var Epoch = time.Date(2000, time.January, 1, 0, 0, 0, 0, time.UTC)

// ErrNotConnected is returned by Port.Write on a port not yet given a link.
var ErrNotConnected = errors.New("sim: port is not connected")

// Network is a simulated Ethernet: nodes' Ports joined by Links, directly
// or through Switches, under one virtual clock. All randomness comes from
// the seed given to New, so a run is a pure function of the seed and of the
// calls made on the Network; nothing depends on the wall clock or on the Go
// scheduler unless RunRealtime is used.
//
// A Network is safe for concurrent use: one mutex guards all of its state.
// Callbacks (timer functions and Port.OnReceive functions) run without the
// mutex held and may call any method. DropFunc and DelayFunc run with it
// held and must not call back into the Network.
type Network struct {
	mu     sync.Mutex
	seed   uint64
	start  time.Time
	now    int64 // virtual nanoseconds since start
	seq    uint64
	events eventHeap

	freeEvents []*event
	bufCap     int // capacity of the buffers getBufLocked makes: the largest frame seen
	freeBufs   [][]byte

	ports      []*Port
	links      []*Link
	switches   []*Switch
	partitions []partition

	rt   *realtime
	wake chan struct{}
}

// New returns an empty Network whose randomness derives from seed and whose
// clock reads Epoch.
func New(seed uint64) *Network {
	return &Network{seed: seed, start: Epoch, wake: make(chan struct{}, 1)}
}

// Clock is the Network's virtual clock. It implements netio.Clock.
type Clock struct{ n *Network }

// Now returns the current virtual time.
func (c Clock) Now() time.Time { return c.n.Now() }

var _ netio.Clock = Clock{}

// Clock returns the Network's virtual clock, for devices that take a
// netio.Clock.
func (n *Network) Clock() Clock { return Clock{n} }

// Now returns the current virtual time.
func (n *Network) Now() time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.syncRealtimeLocked()
	return n.timeOf(n.now)
}

// Seed returns the seed given to New.
func (n *Network) Seed() uint64 { return n.seed }

func (n *Network) timeOf(v int64) time.Time { return n.start.Add(time.Duration(v)) }

// vtime converts t to virtual nanoseconds since start.
func (n *Network) vtime(t time.Time) int64 { return int64(t.Sub(n.start)) }

// eventKind says what an event does when it fires.
type eventKind uint8

const (
	eventDeliver eventKind = iota // a frame reaches the far end of a link direction
	eventTimer                    // a function registered with AddTimer
)

type event struct {
	at    int64
	seq   uint64
	index int // position in the heap, -1 when not queued
	kind  eventKind

	// eventDeliver
	dir    *linkDir
	data   []byte
	origin *Port
	sentAt int64

	// eventTimer
	fn func()
}

// eventHeap orders events by (time, sequence number): events at the same
// instant fire in the order they were scheduled.
type eventHeap []*event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *eventHeap) Push(x any) {
	ev := x.(*event)
	ev.index = len(*h)
	*h = append(*h, ev)
}
func (h *eventHeap) Pop() any {
	old := *h
	ev := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	ev.index = -1
	return ev
}

func (n *Network) scheduleLocked(ev *event) {
	if ev.at < n.now {
		ev.at = n.now
	}
	n.seq++
	ev.seq = n.seq
	heap.Push(&n.events, ev)
	if n.rt != nil {
		select {
		case n.wake <- struct{}{}:
		default:
		}
	}
}

func (n *Network) newDeliveryLocked() *event {
	if k := len(n.freeEvents); k > 0 {
		ev := n.freeEvents[k-1]
		n.freeEvents = n.freeEvents[:k-1]
		return ev
	}
	return &event{index: -1}
}

func (n *Network) recycleEventLocked(ev *event) {
	*ev = event{index: -1}
	n.freeEvents = append(n.freeEvents, ev)
}

// getBufLocked returns a buffer of length size, reusing a freed one if it is
// large enough. Every buffer is made with the capacity of the largest frame
// seen, so that a freed ACK-sized buffer on top of the stack does not force an
// allocation for the next full-sized frame.
func (n *Network) getBufLocked(size int) []byte {
	n.bufCap = max(n.bufCap, size, 2048)
	if k := len(n.freeBufs); k > 0 && cap(n.freeBufs[k-1]) >= size {
		b := n.freeBufs[k-1]
		n.freeBufs = n.freeBufs[:k-1]
		return b[:size]
	}
	return make([]byte, size, n.bufCap)
}

// putBufLocked keeps b for reuse unless it is smaller than the frames now
// carried (those are left to the garbage collector).
func (n *Network) putBufLocked(b []byte) {
	if b != nil && cap(b) >= n.bufCap && len(n.freeBufs) < 4096 {
		n.freeBufs = append(n.freeBufs, b)
	}
}

// Step fires the next event, advancing the clock to its time, and reports
// whether there was one. Firing a delivery queues the frame on the
// destination Port (and calls its OnReceive function) or forwards it through
// a Switch; firing a timer calls its function.
func (n *Network) Step() bool {
	n.mu.Lock()
	if len(n.events) == 0 {
		n.mu.Unlock()
		return false
	}
	ev := heap.Pop(&n.events).(*event)
	cb := n.fireLocked(ev)
	n.mu.Unlock()
	if cb != nil {
		cb()
	}
	return true
}

// RunUntil fires, in order, every event due at or before t, then sets the
// clock to t (if it is not already later). It returns the number of events
// fired. Events scheduled by callbacks are fired too if they are due by t.
func (n *Network) RunUntil(t time.Time) int {
	fired := 0
	for {
		n.mu.Lock()
		limit := n.vtime(t)
		if len(n.events) == 0 || n.events[0].at > limit {
			if limit > n.now {
				n.now = limit
			}
			n.mu.Unlock()
			return fired
		}
		ev := heap.Pop(&n.events).(*event)
		cb := n.fireLocked(ev)
		n.mu.Unlock()
		if cb != nil {
			cb()
		}
		fired++
	}
}

// RunFor is RunUntil(Now().Add(d)).
func (n *Network) RunFor(d time.Duration) int { return n.RunUntil(n.Now().Add(d)) }

// NextEventTime returns the time of the next event, or false if none is
// scheduled.
func (n *Network) NextEventTime() (time.Time, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.events) == 0 {
		return time.Time{}, false
	}
	return n.timeOf(n.events[0].at), true
}

// Pending returns the number of scheduled events.
func (n *Network) Pending() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.events)
}

// fireLocked advances the clock to ev and fires it. It returns a callback to
// run once the lock is released, or nil.
func (n *Network) fireLocked(ev *event) func() {
	if ev.at > n.now {
		n.now = ev.at
	}
	switch ev.kind {
	case eventTimer:
		fn := ev.fn
		ev.fn = nil
		return fn
	case eventDeliver:
		cb := ev.dir.arriveLocked(ev.data, ev.origin, ev.sentAt)
		n.recycleEventLocked(ev)
		return cb
	}
	panic(fmt.Sprintf("sim: unknown event kind %d", ev.kind))
}

// Timer is a function scheduled with AddTimer.
type Timer struct {
	n  *Network
	ev *event
	at time.Time
}

// AddTimer schedules fn to be called at virtual time t (or at the current
// time, if t has passed) by Step, RunUntil or RunRealtime. Devices register
// their retransmission and ACK deadlines this way. fn runs without the
// Network's lock held.
func (n *Network) AddTimer(t time.Time, fn func()) *Timer {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.syncRealtimeLocked()
	ev := &event{index: -1, kind: eventTimer, at: n.vtime(t), fn: fn}
	n.scheduleLocked(ev)
	return &Timer{n: n, ev: ev, at: n.timeOf(ev.at)}
}

// AfterFunc schedules fn at Now()+d; see AddTimer.
func (n *Network) AfterFunc(d time.Duration, fn func()) *Timer {
	return n.AddTimer(n.Now().Add(d), fn)
}

// When returns the virtual time at which the timer fires (or fired).
func (t *Timer) When() time.Time { return t.at }

// Stop cancels the timer. It reports whether the timer was still pending.
func (t *Timer) Stop() bool {
	t.n.mu.Lock()
	defer t.n.mu.Unlock()
	if t.ev.index < 0 {
		return false
	}
	heap.Remove(&t.n.events, t.ev.index)
	t.ev.fn = nil
	return true
}

// realtime ties the virtual clock to the wall clock while RunRealtime runs.
type realtime struct {
	wall0 time.Time
	v0    int64
}

// syncRealtimeLocked moves the virtual clock up to the wall-clock time when
// RunRealtime is active; it never moves it back.
func (n *Network) syncRealtimeLocked() {
	if n.rt == nil {
		return
	}
	if v := n.rt.v0 + int64(time.Since(n.rt.wall0)); v > n.now {
		n.now = v
	}
}

// RunRealtime drives the Network in step with the wall clock until ctx is
// done, for devices that run their own goroutines and block in Port.Read.
// While it runs, the virtual clock advances with wall time (Now, Write and
// AddTimer read it), and each event fires when its virtual time comes; an
// event that comes due while the driver is busy fires late, never early.
// Do not call Step or RunUntil concurrently with it. It returns ctx.Err(),
// or an error if RunRealtime is already running.
func (n *Network) RunRealtime(ctx context.Context) error {
	n.mu.Lock()
	if n.rt != nil {
		n.mu.Unlock()
		return errors.New("sim: RunRealtime is already running")
	}
	n.rt = &realtime{wall0: time.Now(), v0: n.now}
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		n.rt = nil
		n.mu.Unlock()
	}()

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		n.mu.Lock()
		n.syncRealtimeLocked()
		if len(n.events) > 0 && n.events[0].at <= n.now {
			ev := heap.Pop(&n.events).(*event)
			// fireLocked would move the clock to ev.at; it is already later.
			cb := n.fireLocked(ev)
			n.mu.Unlock()
			if cb != nil {
				cb()
			}
			continue
		}
		wait := time.Hour
		if len(n.events) > 0 {
			wait = time.Duration(n.events[0].at - n.now)
		}
		n.mu.Unlock()
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-n.wake:
		case <-timer.C:
		}
	}
}

// partition makes frames sent between a and b during [from, until) vanish.
type partition struct {
	a, b        *Port
	from, until int64 // until < 0: never heals
}

// Partition drops every frame sent from a to b or from b to a at a virtual
// time in [from, until), whatever path it takes; a zero until never heals.
// The frame is dropped on arrival at the destination Port (it still uses
// the links' bandwidth) and counted as DropPartition on the last link.
func (n *Network) Partition(a, b *Port, from, until time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	p := partition{a: a, b: b, from: n.vtime(from), until: -1}
	if !until.IsZero() {
		p.until = n.vtime(until)
	}
	n.partitions = append(n.partitions, p)
}

// Heal removes every partition between a and b.
func (n *Network) Heal(a, b *Port) {
	n.mu.Lock()
	defer n.mu.Unlock()
	kept := n.partitions[:0]
	for _, p := range n.partitions {
		if !p.between(a, b) {
			kept = append(kept, p)
		}
	}
	n.partitions = kept
}

func (p partition) between(a, b *Port) bool {
	return (p.a == a && p.b == b) || (p.a == b && p.b == a)
}

func (n *Network) partitionedLocked(a, b *Port, at int64) bool {
	for _, p := range n.partitions {
		if p.between(a, b) && at >= p.from && (p.until < 0 || at < p.until) {
			return true
		}
	}
	return false
}

// Ports returns the Network's ports in the order they were added.
func (n *Network) Ports() []*Port {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]*Port(nil), n.ports...)
}

// Links returns the Network's links in the order they were made.
func (n *Network) Links() []*Link {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]*Link(nil), n.links...)
}

// Close closes every Port, waking any blocked Read. Scheduled events stay
// queued; frames arriving at closed ports are dropped.
func (n *Network) Close() error {
	for _, p := range n.Ports() {
		p.Close()
	}
	return nil
}
