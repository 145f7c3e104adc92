// Package ibtest is a test harness for the ibtransport engine: a manual clock and
// an in-memory wire that connects two Contexts through a link that can drop,
// duplicate, delay and reorder chosen packets, and helpers that bring QPs to RTS.
// Everything is deterministic: time moves only when the wire jumps it to the next
// packet delivery or engine deadline.
package ibtest

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/softrdma/softrdma/ibtransport"
)

// Clock is a manual clock. The zero value is not usable; use NewClock.
type Clock struct{ now time.Time }

// Epoch is where every Clock starts: a fixed instant, so that runs are identical.
var Epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// NewClock returns a clock at Epoch.
func NewClock() *Clock { return &Clock{now: Epoch} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time { return c.now }

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) { c.now = c.now.Add(d) }

// Set moves the clock to t if t is later.
func (c *Clock) Set(t time.Time) {
	if t.After(c.now) {
		c.now = t
	}
}

// Direction is the direction of a packet on the wire.
type Direction int

// Directions.
const (
	AToB Direction = iota
	BToA
)

// String returns "A→B" or "B→A".
func (d Direction) String() string {
	if d == AToB {
		return "A→B"
	}
	return "B→A"
}

// Frame is a packet offered to a Wire's Filter.
type Frame struct {
	// Dir is the packet's direction.
	Dir Direction
	// Index counts the packets sent in Dir, from 0.
	Index int
	// Data is the transport packet (BTH .. pad). The filter may modify it.
	Data []byte
	// Time is when the packet was sent.
	Time time.Time
}

// Action is a Filter's verdict.
type Action struct {
	// Drop loses the packet.
	Drop bool
	// Duplicates delivers this many extra copies right after the packet.
	Duplicates int
	// Delay postpones the delivery beyond the wire's latency; packets sent after
	// it overtake it (reordering).
	Delay time.Duration
}

// Wire connects two Contexts. Set its fields before the first Run.
type Wire struct {
	A, B  *ibtransport.Context
	Clock *Clock
	// Latency is the one-way delay of every packet (default 0: delivered at the
	// instant it is sent, after the sender's batch).
	Latency time.Duration
	// Filter, if set, sees every packet and decides its fate.
	Filter func(f *Frame) Action
	// Tap, if set, sees every packet as sent (before the filter) and every
	// Input error.
	Tap func(dir Direction, data []byte)
	// InputErr, if set, sees the error of every Input that failed.
	InputErr func(dir Direction, data []byte, err error)
	// BatchSize is the Output batch capacity (default 32).
	BatchSize int
	// Gather, if positive, makes the Output batch gather payloads in place
	// (OutputBatch.Gather with that many pieces) and the wire join each packet's
	// headers, payload pieces and pad, as a scatter/gather send does.
	Gather int

	sent     [2]int
	join     []byte // a gathered packet joined
	seq      uint64
	inflight []flight // sorted by delivery time, from head
	head     int
	frame    Frame
	free     [][]byte
	batch    *ibtransport.OutputBatch
	// Delivered counts the packets delivered in each direction.
	Delivered [2]int
}

type flight struct {
	at   time.Time
	seq  uint64
	dir  Direction
	data []byte
}

// The sides' GIDs, parsed once (GID is called for every packet delivered).
var (
	gidA = netip.MustParseAddr("::ffff:10.0.0.1").As16()
	gidB = netip.MustParseAddr("::ffff:10.0.0.2").As16()
)

// GID returns the GID the wire gives each side: ::ffff:10.0.0.1 for A and
// ::ffff:10.0.0.2 for B.
func GID(d Direction) [16]byte {
	if d == AToB {
		return gidA
	}
	return gidB
}

// NewWire returns a wire between a and b on a fresh clock.
func NewWire(a, b *ibtransport.Context) *Wire {
	return &Wire{A: a, B: b, Clock: NewClock()}
}

// ErrIdle means Run stopped because nothing was left to do: no packet in flight,
// no output and no timer, and the condition was still false.
var ErrIdle = errors.New("ibtest: wire idle")

// ErrSteps means Run gave up after its step limit.
var ErrSteps = errors.New("ibtest: step limit reached")

// Run moves packets and time until done returns true. It returns ErrIdle if the
// system comes to rest first, ErrSteps after maxSteps clock jumps and pumps.
func (w *Wire) Run(done func() bool, maxSteps int) error {
	for i := 0; i < maxSteps; i++ {
		if done != nil && done() {
			return nil
		}
		if w.Pump() {
			continue
		}
		next, ok := w.nextEvent()
		if !ok {
			if done != nil && done() {
				return nil
			}
			return ErrIdle
		}
		w.Clock.Set(next)
	}
	if done != nil && done() {
		return nil
	}
	return fmt.Errorf("%w (%d)", ErrSteps, maxSteps)
}

// RunFor moves packets and time until the clock has advanced by d or nothing is
// left to do.
func (w *Wire) RunFor(d time.Duration, maxSteps int) {
	end := w.Clock.Now().Add(d)
	for i := 0; i < maxSteps; i++ {
		if w.Pump() {
			continue
		}
		next, ok := w.nextEvent()
		if !ok || next.After(end) {
			w.Clock.Set(end)
			w.Pump()
			return
		}
		w.Clock.Set(next)
	}
}

// Pump collects the output of both sides and delivers the packets due now. It
// reports whether anything moved.
func (w *Wire) Pump() bool {
	if w.batch == nil {
		n := w.BatchSize
		if n <= 0 {
			n = 32
		}
		w.batch = ibtransport.NewOutputBatch(n, 0, 0)
		w.batch.Gather(w.Gather)
	}
	moved := w.collect(AToB, w.A)
	moved = w.collect(BToA, w.B) || moved
	now := w.Clock.Now()
	for w.head < len(w.inflight) && !w.inflight[w.head].at.After(now) {
		f := w.inflight[w.head]
		w.inflight[w.head] = flight{}
		w.head++
		w.deliver(f)
		moved = true
	}
	if w.head == len(w.inflight) {
		w.inflight, w.head = w.inflight[:0], 0
	} else if w.head > 1024 && 2*w.head > len(w.inflight) {
		n := copy(w.inflight, w.inflight[w.head:])
		clear(w.inflight[n:])
		w.inflight, w.head = w.inflight[:n], 0
	}
	return moved
}

// zeros are pad bytes.
var zeros [4]byte

func (w *Wire) collect(dir Direction, c *ibtransport.Context) bool {
	now := w.Clock.Now()
	moved := false
	for {
		w.batch.Reset()
		if c.Output(now, w.batch) == 0 {
			return moved
		}
		moved = true
		for i := range w.batch.Packets {
			p := &w.batch.Packets[i]
			if p.Payload == nil {
				w.send(dir, p.Packet())
				continue
			}
			w.join = append(w.join[:0], p.Packet()...)
			for _, s := range p.Payload {
				w.join = append(w.join, s...)
			}
			w.join = append(w.join, zeros[:p.Pad]...)
			w.send(dir, w.join)
		}
	}
}

func (w *Wire) buf(data []byte) []byte {
	var b []byte
	if n := len(w.free); n > 0 {
		b, w.free = w.free[n-1][:0], w.free[:n-1]
	}
	return append(b, data...)
}

func (w *Wire) send(dir Direction, pkt []byte) {
	data := w.buf(pkt)
	if w.Tap != nil {
		w.Tap(dir, data)
	}
	fr := &w.frame
	*fr = Frame{Dir: dir, Index: w.sent[dir], Data: data, Time: w.Clock.Now()}
	w.sent[dir]++
	var act Action
	if w.Filter != nil {
		act = w.Filter(fr)
	}
	if act.Drop {
		w.free = append(w.free, data)
		return
	}
	at := w.Clock.Now().Add(w.Latency + act.Delay)
	w.enqueue(flight{at: at, dir: dir, data: fr.Data})
	for range act.Duplicates {
		w.enqueue(flight{at: at, dir: dir, data: w.buf(fr.Data)})
	}
}

func (w *Wire) enqueue(f flight) {
	w.seq++
	f.seq = w.seq
	if w.head > 0 && w.head == len(w.inflight) {
		w.inflight, w.head = w.inflight[:0], 0
	}
	// Packets are mostly sent in delivery order: search from the back.
	i := len(w.inflight)
	for i > w.head && w.inflight[i-1].at.After(f.at) {
		i--
	}
	w.inflight = append(w.inflight, flight{})
	copy(w.inflight[i+1:], w.inflight[i:])
	w.inflight[i] = f
}

func (w *Wire) deliver(f flight) {
	dst := w.B
	if f.dir == BToA {
		dst = w.A
	}
	meta := ibtransport.InputMeta{HasGRH: true, SGID: GID(f.dir), DGID: GID(1 - f.dir), HopLimit: 64}
	err := dst.Input(w.Clock.Now(), f.data, meta)
	if err != nil && w.InputErr != nil {
		w.InputErr(f.dir, f.data, err)
	}
	w.Delivered[f.dir]++
	w.free = append(w.free, f.data)
}

// nextEvent returns the earliest pending delivery or engine deadline.
func (w *Wire) nextEvent() (time.Time, bool) {
	var best time.Time
	ok := false
	consider := func(t time.Time) {
		if !ok || t.Before(best) {
			best, ok = t, true
		}
	}
	if w.head < len(w.inflight) {
		consider(w.inflight[w.head].at)
	}
	if t, has := w.A.NextDeadline(); has {
		consider(t)
	}
	if t, has := w.B.NextDeadline(); has {
		consider(t)
	}
	return best, ok
}

// InFlight returns the number of packets on the wire.
func (w *Wire) InFlight() int { return len(w.inflight) - w.head }

// Sent returns the number of packets sent in a direction.
func (w *Wire) Sent(d Direction) int { return w.sent[d] }
