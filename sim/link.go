package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/softrdma/softrdma/netio"
)

// Direction names one direction of a Link. For Connect(a, b, ...), AtoB
// carries frames written on a; for ConnectSwitch(p, sw, ...), AtoB carries
// frames from the port p into the switch.
type Direction int

const (
	AtoB Direction = iota // from the link's first end to its second
	BtoA                  // from the link's second end to its first
)

// String returns "a->b" or "b->a".
func (d Direction) String() string {
	switch d {
	case AtoB:
		return "a->b"
	case BtoA:
		return "b->a"
	}
	return fmt.Sprintf("Direction(%d)", int(d))
}

// DropFunc decides, for a frame entering one direction of a link, whether to
// drop it (counted as DropFiltered). It sees the frame before any random
// fault and must not keep or modify it. It runs with the Network locked and
// must not call the Network.
type DropFunc func(dir Direction, frame []byte) bool

// DelayFunc returns the propagation delay of a frame, replacing Latency,
// Jitter and Reorder for that frame; frames it delays are not kept in order.
// Negative results count as zero. The same rules apply as for DropFunc.
type DelayFunc func(dir Direction, frame []byte) time.Duration

// GilbertElliott is the two-state burst loss model: each frame is lost with
// the current state's probability, then the state moves good→bad with
// probability P or bad→good with probability R. The mean burst (stay in the
// bad state) is 1/R frames; the long-run fraction of time in the bad state
// is P/(P+R). The model is off while P is zero.
type GilbertElliott struct {
	P        float64 // per-frame probability of moving from good to bad
	R        float64 // per-frame probability of moving from bad to good
	LossBad  float64 // loss probability in the bad state; zero means 1 (the Gilbert model)
	LossGood float64 // loss probability in the good state
}

// LinkConfig describes one direction of a link (Connect uses it for both).
// The zero value is a perfect link: no delay, unlimited bandwidth, no loss,
// MTU netio.DefaultMTU.
//
// A frame entering a direction is dropped if the link is down, if DropFunc
// says so, if it is longer than netio.MaxFrameLen(MTU), or if QueueLimit
// frames are already waiting; otherwise it is serialised behind the frames
// before it (Bandwidth), may be lost (Loss, Burst), corrupted (Corrupt),
// delayed (Latency, Jitter, Reorder or DelayFunc) and duplicated (Duplicate).
// Apart from Reorder and DelayFunc, a direction delivers in FIFO order:
// jitter delays a frame but never lets it overtake an earlier one.
type LinkConfig struct {
	Latency time.Duration // propagation delay, added after serialisation
	Jitter  time.Duration // extra delay drawn uniformly from [0, Jitter)

	// Bandwidth in bits per second; zero is unlimited. A frame of L bytes
	// takes ceil(8·L·1e9/Bandwidth) ns on the wire (frame bytes only: no
	// preamble, FCS or inter-frame gap) and waits for the frames before it.
	Bandwidth int64

	MTU        int // interface MTU; longer frames are dropped (DropMTU); zero means netio.DefaultMTU
	QueueLimit int // frames waiting for or in serialisation; zero is unlimited; needs Bandwidth

	Loss  float64        // independent per-frame loss probability
	Burst GilbertElliott // burst loss, on top of Loss

	Reorder      float64       // probability that a frame is held back by ReorderDelay and may be overtaken
	ReorderDelay time.Duration // extra delay of a reordered frame; zero means 1ms
	Duplicate    float64       // probability that a frame is delivered twice
	Corrupt      float64       // probability that one random bit of a frame is flipped

	DropFunc  DropFunc
	DelayFunc DelayFunc
}

// DefaultReorderDelay is the hold-back of a reordered frame when
// LinkConfig.ReorderDelay is zero.
const DefaultReorderDelay = time.Millisecond

// Validate reports the first field of c that is out of range.
func (c LinkConfig) Validate() error {
	probs := []struct {
		name string
		v    float64
	}{
		{"Loss", c.Loss}, {"Burst.P", c.Burst.P}, {"Burst.R", c.Burst.R},
		{"Burst.LossBad", c.Burst.LossBad}, {"Burst.LossGood", c.Burst.LossGood},
		{"Reorder", c.Reorder}, {"Duplicate", c.Duplicate}, {"Corrupt", c.Corrupt},
	}
	for _, p := range probs {
		if !(p.v >= 0 && p.v <= 1) {
			return fmt.Errorf("sim: link config: %s %v outside [0, 1]", p.name, p.v)
		}
	}
	durs := []struct {
		name string
		v    time.Duration
	}{{"Latency", c.Latency}, {"Jitter", c.Jitter}, {"ReorderDelay", c.ReorderDelay}}
	for _, d := range durs {
		if d.v < 0 {
			return fmt.Errorf("sim: link config: %s %v < 0", d.name, d.v)
		}
	}
	switch {
	case c.Bandwidth < 0:
		return fmt.Errorf("sim: link config: Bandwidth %d < 0", c.Bandwidth)
	case c.MTU < 0:
		return fmt.Errorf("sim: link config: MTU %d < 0", c.MTU)
	case c.QueueLimit < 0:
		return fmt.Errorf("sim: link config: QueueLimit %d < 0", c.QueueLimit)
	case c.Burst.P > 0 && c.Burst.R == 0:
		return fmt.Errorf("sim: link config: Burst.R 0 with Burst.P %v: the bad state never ends", c.Burst.P)
	}
	return nil
}

func (c LinkConfig) mtu() int {
	if c.MTU == 0 {
		return netio.DefaultMTU
	}
	return c.MTU
}

// DropReason says why a link dropped a frame.
type DropReason int

const (
	DropDown         DropReason = iota // the link was down (SetDown)
	DropFiltered                       // LinkConfig.DropFunc returned true
	DropMTU                            // longer than netio.MaxFrameLen(MTU)
	DropQueue                          // QueueLimit frames were already waiting
	DropLoss                           // random loss (Loss)
	DropBurst                          // Gilbert–Elliott burst loss
	DropPartition                      // sent between partitioned ports
	DropReceiveQueue                   // the destination port's receive queue was full
	DropClosed                         // the destination port was closed
	NumDropReasons                     // number of drop reasons
)

var dropReasonNames = [NumDropReasons]string{
	"down", "filtered", "mtu", "queue", "loss", "burst", "partition", "receive-queue", "closed",
}

// String returns a short lower-case name, e.g. "loss".
func (r DropReason) String() string {
	if r >= 0 && r < NumDropReasons {
		return dropReasonNames[r]
	}
	return fmt.Sprintf("DropReason(%d)", int(r))
}

// LinkStats counts what happened to frames in one direction of a link.
// Delivered = Sent + Duplicated − TotalDropped() once nothing is in flight.
type LinkStats struct {
	Sent       uint64                 // frames offered to this direction
	Delivered  uint64                 // frames handed to the far end (duplicates included)
	Duplicated uint64                 // extra copies made by Duplicate
	Corrupted  uint64                 // frames with a bit flipped by Corrupt
	Reordered  uint64                 // frames held back by Reorder
	Dropped    [NumDropReasons]uint64 // drops, indexed by DropReason
}

// TotalDropped returns the sum of s.Dropped.
func (s LinkStats) TotalDropped() uint64 {
	var t uint64
	for _, d := range s.Dropped {
		t += d
	}
	return t
}

// attachment is what sits at one end of a link: a node's Port or a
// Switch's port.
type attachment interface {
	// arriveLocked takes ownership of data, a frame delivered by dir. It
	// returns a callback to run without the lock, or nil.
	arriveLocked(dir *linkDir, data []byte, origin *Port, sentAt int64) func()
	name() string
}

// Link is a full-duplex cable between two attachments. Each direction has
// its own configuration, fault state, random stream and counters.
type Link struct {
	n    *Network
	ends [2]attachment
	dirs [2]*linkDir
	down bool

	captures []linkCapture
}

// linkDir is one direction of a Link.
type linkDir struct {
	link *Link
	dir  Direction
	to   attachment
	cfg  LinkConfig
	rng  *rand.Rand

	busyUntil   int64   // when the transmitter finishes its current queue
	txEnds      []int64 // serialisation end times of queued frames, for QueueLimit
	txHead      int
	lastArrival int64 // latest in-order arrival, for FIFO delivery
	bad         bool  // Gilbert–Elliott state

	stats LinkStats
}

func (n *Network) newLinkLocked(a, b attachment, cfg LinkConfig) *Link {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	l := &Link{n: n, ends: [2]attachment{a, b}}
	idx := uint64(len(n.links))
	for d := AtoB; d <= BtoA; d++ {
		l.dirs[d] = &linkDir{
			link: l,
			dir:  d,
			to:   l.ends[1-d],
			cfg:  cfg,
			// One independent stream per direction, so traffic on one
			// direction or link never shifts the faults of another.
			rng: rand.New(rand.NewPCG(n.seed, idx<<1|uint64(d))),
		}
	}
	n.links = append(n.links, l)
	return l
}

// String returns "a<->b" with the ends' names.
func (l *Link) String() string { return l.ends[0].name() + "<->" + l.ends[1].name() }

// Stats returns a snapshot of the counters of direction d.
func (l *Link) Stats(d Direction) LinkStats {
	l.n.mu.Lock()
	defer l.n.mu.Unlock()
	return l.dirs[d].stats
}

// Config returns the configuration of direction d.
func (l *Link) Config(d Direction) LinkConfig {
	l.n.mu.Lock()
	defer l.n.mu.Unlock()
	return l.dirs[d].cfg
}

// SetConfig replaces the configuration of direction d from now on; frames
// already in flight keep their fate. The fault state (burst state, queue)
// carries over. It panics if cfg is invalid (see LinkConfig.Validate).
func (l *Link) SetConfig(d Direction, cfg LinkConfig) {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	l.n.mu.Lock()
	defer l.n.mu.Unlock()
	l.dirs[d].cfg = cfg
}

// SetDown takes the link down (every frame entering either direction is
// dropped as DropDown; frames already in flight still arrive) or back up.
// Schedule it with AddTimer for a timed outage.
func (l *Link) SetDown(down bool) {
	l.n.mu.Lock()
	defer l.n.mu.Unlock()
	l.down = down
}

// Down reports whether the link is down.
func (l *Link) Down() bool {
	l.n.mu.Lock()
	defer l.n.mu.Unlock()
	return l.down
}

// serialisation returns the time, in ns, that size bytes take at bw bits/s.
func serialisation(size int, bw int64) int64 {
	if bw <= 0 || size == 0 {
		return 0
	}
	bits := int64(size) * 8 * int64(time.Second)
	return (bits + bw - 1) / bw
}

// transmitLocked offers frame (borrowed, not kept) to this direction at the
// current virtual time.
func (d *linkDir) transmitLocked(frame []byte, origin *Port, sentAt int64) {
	n := d.link.n
	now := n.now
	cfg := &d.cfg
	d.stats.Sent++

	switch {
	case d.link.down:
		d.stats.Dropped[DropDown]++
		return
	case cfg.DropFunc != nil && cfg.DropFunc(d.dir, frame):
		d.stats.Dropped[DropFiltered]++
		return
	case len(frame) > netio.MaxFrameLen(cfg.mtu()):
		d.stats.Dropped[DropMTU]++
		return
	}

	// Serialisation and the transmit queue.
	if cfg.QueueLimit > 0 {
		for d.txHead < len(d.txEnds) && d.txEnds[d.txHead] <= now {
			d.txHead++
		}
		if d.txHead == len(d.txEnds) {
			d.txEnds, d.txHead = d.txEnds[:0], 0
		}
		if len(d.txEnds)-d.txHead >= cfg.QueueLimit {
			d.stats.Dropped[DropQueue]++
			return
		}
	}
	txEnd := max(now, d.busyUntil) + serialisation(len(frame), cfg.Bandwidth)
	d.busyUntil = txEnd
	if cfg.QueueLimit > 0 {
		if d.txHead > len(d.txEnds)/2 && d.txHead > 64 {
			k := copy(d.txEnds, d.txEnds[d.txHead:])
			d.txEnds, d.txHead = d.txEnds[:k], 0
		}
		d.txEnds = append(d.txEnds, txEnd)
	}
	d.link.captureLocked(CaptureTransmitted, now, frame)

	// Loss: the frame used the wire but never arrives.
	if cfg.Loss > 0 && d.rng.Float64() < cfg.Loss {
		d.stats.Dropped[DropLoss]++
		return
	}
	if cfg.Burst.P == 0 {
		d.bad = false // the model is off: a later SetConfig starts it in the good state
	} else if d.burstLost() {
		d.stats.Dropped[DropBurst]++
		return
	}

	buf := n.getBufLocked(len(frame))
	copy(buf, frame)
	if cfg.Corrupt > 0 && len(buf) > 0 && d.rng.Float64() < cfg.Corrupt {
		bit := d.rng.IntN(len(buf) * 8)
		buf[bit/8] ^= 1 << (bit % 8)
		d.stats.Corrupted++
	}

	var arrival int64
	if cfg.DelayFunc != nil {
		arrival = txEnd + max(0, int64(cfg.DelayFunc(d.dir, buf)))
	} else {
		arrival = txEnd + int64(cfg.Latency)
		if cfg.Jitter > 0 {
			arrival += d.rng.Int64N(int64(cfg.Jitter))
		}
		if cfg.Reorder > 0 && d.rng.Float64() < cfg.Reorder {
			hold := cfg.ReorderDelay
			if hold == 0 {
				hold = DefaultReorderDelay
			}
			arrival += int64(hold)
			d.stats.Reordered++
		} else {
			arrival = max(arrival, d.lastArrival)
			d.lastArrival = arrival
		}
	}
	d.scheduleLocked(arrival, buf, origin, sentAt)

	if cfg.Duplicate > 0 && d.rng.Float64() < cfg.Duplicate {
		dup := n.getBufLocked(len(buf))
		copy(dup, buf)
		d.stats.Duplicated++
		d.scheduleLocked(arrival, dup, origin, sentAt)
	}
}

func (d *linkDir) scheduleLocked(at int64, buf []byte, origin *Port, sentAt int64) {
	n := d.link.n
	ev := n.newDeliveryLocked()
	ev.kind = eventDeliver
	ev.at = at
	ev.dir = d
	ev.data = buf
	ev.origin = origin
	ev.sentAt = sentAt
	n.scheduleLocked(ev)
}

// burstLost runs one step of the Gilbert–Elliott model: it decides the loss
// of this frame from the current state, then moves the state.
func (d *linkDir) burstLost() bool {
	ge := &d.cfg.Burst
	p := ge.LossGood
	if d.bad {
		p = ge.LossBad
		if p == 0 {
			p = 1
		}
	}
	lost := p >= 1 || (p > 0 && d.rng.Float64() < p)
	if d.bad {
		if d.rng.Float64() < ge.R {
			d.bad = false
		}
	} else if d.rng.Float64() < ge.P {
		d.bad = true
	}
	return lost
}

// arriveLocked hands a frame that has crossed the link to the far end.
func (d *linkDir) arriveLocked(data []byte, origin *Port, sentAt int64) func() {
	return d.to.arriveLocked(d, data, origin, sentAt)
}

// deliveredLocked counts and captures a frame accepted by the far end.
func (d *linkDir) deliveredLocked(data []byte) {
	d.stats.Delivered++
	d.link.captureLocked(CaptureDelivered, d.link.n.now, data)
}

// dropLocked counts a frame refused by the far end and frees its buffer.
func (d *linkDir) dropLocked(reason DropReason, data []byte) {
	d.stats.Dropped[reason]++
	d.link.n.putBufLocked(data)
}
