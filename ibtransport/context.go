package ibtransport

import (
	"time"

	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
)

// ContextConfig sets the limits and the identity of a Context: what ibv_query_device
// would report for a device. Zero fields take the defaults named in their comments
// (the defaults are rxe's, rxe_param.h).
type ContextConfig struct {
	// MaxQP is the largest number of QPs (default 4096).
	MaxQP int
	// MaxMR is the largest number of memory regions and windows together (default 65536).
	MaxMR int
	// MaxCQ is the largest number of completion queues (default 16384).
	MaxCQ int
	// MaxCQE is the deepest completion queue (default 32768).
	MaxCQE int
	// MaxQPWR is the deepest send or receive queue (default 16384).
	MaxQPWR int
	// MaxSGE is the longest scatter/gather list of a work request (default 32).
	MaxSGE int
	// MaxInlineData is the most inline data a send WR may carry (default 512).
	MaxInlineData int
	// MaxSRQ is the largest number of shared receive queues (default 1024).
	MaxSRQ int
	// MaxSRQWR is the deepest shared receive queue (default 16384).
	MaxSRQWR int
	// MaxSRQSGE is the longest scatter list of an SRQ's work requests (default
	// and at most MaxSGE; rxe's is 27, less than its MaxSGE).
	MaxSRQSGE int
	// MaxRdAtomic bounds a QP's MaxRdAtomic and MaxDestRdAtomic: outstanding RDMA
	// READ and atomic operations (default 128).
	MaxRdAtomic int
	// MaxMsgSize is the longest message (default and at most 1<<31 bytes,
	// IBTA's limit; with ExternalQPs, iWARP's, up to 1<<32-1, siw's).
	MaxMsgSize uint32
	// PortMTU is the active MTU of the port, the largest PathMTU a QP may use
	// (default 4096).
	PortMTU int
	// MaxUnackedPSNs is the requester's largest window: how many PSNs it sends
	// beyond the oldest unacknowledged one (default 1024). An RC QP starts at
	// rxe's fixed window, 128 (RXE_MAX_UNACKED_PSNS), or this if smaller, widens
	// it by one PSN per PSN acknowledged up to this, and halves it at each loss.
	MaxUnackedPSNs int
	// AckReqInterval sets AckReq on every Nth packet of a long message as well as on
	// its last (default 64; rxe's captures show AckReq only on last packets of
	// 4-packet messages).
	AckReqInterval int
	// PKeys is the partition key table (default [0xFFFF], the default partition).
	PKeys []uint16
	// Seed makes the QPN start, the key bytes and the virtual address base
	// reproducible: two Contexts with the same seed (0 included) allocate the same
	// numbers. A device picks a random seed.
	Seed uint64
	// AsyncEventDepth is the capacity of the AsyncEvents channel (default 256).
	// Events that do not fit are counted and dropped.
	AsyncEventDepth int
	// OutputBurst is how many packets one QP emits before Output moves on to the
	// next QP with work (default 16).
	OutputBurst int
	// ExternalQPs makes every QP of the Context external (QPInitAttr.External): an
	// iWARP device's Context, whose QPs package iwarp runs.
	ExternalQPs bool
}

func (c *ContextConfig) setDefaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.MaxQP, 4096)
	def(&c.MaxMR, 65536)
	def(&c.MaxCQ, 16384)
	def(&c.MaxCQE, 32768)
	def(&c.MaxQPWR, 16384)
	def(&c.MaxSGE, 32)
	def(&c.MaxInlineData, 512)
	def(&c.MaxSRQ, 1024)
	def(&c.MaxSRQWR, 16384)
	if c.MaxSRQSGE <= 0 || c.MaxSRQSGE > c.MaxSGE {
		c.MaxSRQSGE = c.MaxSGE
	}
	def(&c.MaxRdAtomic, 128)
	// IBTA caps a message at 2^31 bytes (the IB transport's DMA length);
	// RDMAP (iWARP's QPs, ExternalQPs) carries up to 2^32-1, as siw says.
	if c.MaxMsgSize == 0 || c.MaxMsgSize > 1<<31 && !c.ExternalQPs {
		c.MaxMsgSize = 1 << 31
	}
	def(&c.PortMTU, 4096)
	def(&c.MaxUnackedPSNs, 1024)
	def(&c.AckReqInterval, 64)
	def(&c.AsyncEventDepth, 256)
	def(&c.OutputBurst, 16)
	if c.MaxUnackedPSNs > 1<<22 {
		c.MaxUnackedPSNs = 1 << 22
	}
	if mtuValid(c.PortMTU) != nil {
		c.PortMTU = 4096
	}
	if len(c.PKeys) == 0 {
		c.PKeys = []uint16{0xFFFF}
	}
	c.PKeys = append([]uint16(nil), c.PKeys...)
}

// Context is one verbs device context: the owner of PDs, MRs, CQs, SRQs and QPs,
// and the sans-I/O transport engine that runs them. Applications post work requests
// and poll completions from any goroutine; a device loop feeds received packets to
// Input, collects packets to send with Output, and calls Output again at
// NextDeadline. The Context never starts a goroutine, opens a socket or reads the
// clock.
//
// One mutex guards all of a Context's state.
type Context struct {
	mu  sync.Mutex
	cfg ContextConfig
	rng *rand.Rand

	lastOutput time.Time // the now of the last Output (NextDeadline's watch on quiet posters)

	qps     map[uint32]*QP
	nextQPN uint32
	gsi     *QP

	keys         map[uint32]keyEntry // key index (key >> 8) → object
	nextKeyIndex uint32
	nextVA       uint64
	numKeys      int
	numCQ        int
	numSRQ       int

	active     []*QP // QPs that may have packets to send, round-robin from activeHead
	activeHead int
	timered    []*QP // QPs with a timer armed, scanned by NextDeadline

	wake           chan struct{}
	wakeHeld       bool            // HoldWake: the wake-ups below wait for ReleaseWake
	quietWakes     bool            // SetQuietWakes
	wakeMissed     bool            // a Wake signal was held back
	heldWaiters    []chan struct{} // CQ waiters' and completion channels' wake-ups held back (nil: taken back by a cancelled Wait)
	heldCompletion bool            // the OnCompletion hook's call held back
	onCompletion   func()          // OnCompletion (compwait.go)
	postHookFn     func()          // SetPostHook (posthook.go)
	waitHookFn     func()          // SetWaitHook (posthook.go)
	events         chan AsyncEvent
	eventsDropped  uint64
	counters       ContextCounters
	retired        QPCounters // the destroyed QPs' counters, summed (QPStats)

	mcast         multicastGroups                 // UD multicast groups' QPs (multicast.go)
	mcastAttached int                             // attachments in mcast
	mcastHook     func(gid [16]byte, member bool) // SetMulticastHook

	placing   []*Wire    // Wires with an open placement (placement.go)
	placeDone *sync.Cond // signalled when a placement ends; made at the first wait
}

// ContextCounters count packets that never reached a QP.
type ContextCounters struct {
	// PacketsIn is every packet handed to Input.
	PacketsIn uint64
	// Malformed counts packets whose headers did not decode.
	Malformed uint64
	// UnknownQP counts packets for a QPN that does not exist.
	UnknownQP uint64
	// PacketsOut is every packet Output produced.
	PacketsOut uint64
	// AsyncEventsDropped counts events that did not fit the AsyncEvents channel.
	AsyncEventsDropped uint64
}

// keyEntry is what a memory key's index names: a memory region or a memory window.
type keyEntry struct {
	mr *MR
	mw *MW
}

// Errors of verbs calls. They are wrapped with details (fmt.Errorf("%w")), so test
// with errors.Is.
var (
	// ErrInvalidArgument means a verb got a value it does not accept (EINVAL).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrNoResources means a Context limit was reached (ENOMEM).
	ErrNoResources = errors.New("no resources")
	// ErrBusy means the object is still in use (EBUSY).
	ErrBusy = errors.New("resource busy")
	// ErrQueueFull means a send or receive queue has no free slot (ENOMEM from
	// ibv_post_send).
	ErrQueueFull = errors.New("queue full")
	// ErrBadState means the QP's state does not allow the call.
	ErrBadState = errors.New("bad QP state")
	// ErrDestroyed means the object was destroyed.
	ErrDestroyed = errors.New("object destroyed")
)

// NewContext returns a Context with cfg's limits; zero fields take defaults.
func NewContext(cfg ContextConfig) *Context {
	cfg.setDefaults()
	seed := cfg.Seed
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	c := &Context{
		cfg:    cfg,
		rng:    rng,
		qps:    make(map[uint32]*QP),
		keys:   make(map[uint32]keyEntry),
		wake:   make(chan struct{}, 1),
		events: make(chan AsyncEvent, cfg.AsyncEventDepth),
	}
	// QPNs start somewhere in 0x11..0x20000, like a device that has been in use
	// (rxe's are pool indexes from 16 up, handed out cyclically); 0 and 1 are SMI
	// and GSI. rxe draws one device's QPNs for all its processes from one pool;
	// here each process has an engine of its own on the same address, so
	// successive processes (a forking server's children: qperf) must not draw
	// from a small window, or a peer that still holds one's connection in
	// time-wait rejects the next one's REP as stale. Key indexes start anywhere
	// below 2^20, and the VA base looks like an x86-64 user-space heap address
	// (0x7fxx_xxxx_x000).
	c.nextQPN = 0x11 + uint32(rng.IntN(0x20000-0x11+1))
	c.nextKeyIndex = 1 + uint32(rng.IntN(1<<20))
	c.nextVA = 0x7f00_0000_0000 + uint64(rng.IntN(1<<15))<<24
	return c
}

// Config returns the configuration with its defaults filled in.
func (c *Context) Config() ContextConfig {
	cfg := c.cfg
	cfg.PKeys = append([]uint16(nil), cfg.PKeys...)
	return cfg
}

// Wake returns a channel that receives a value when work was posted that gives
// Output something to send. A device loop selects on it to sleep otherwise. The
// channel has capacity one: a value means "call Output", not "one packet".
func (c *Context) Wake() <-chan struct{} { return c.wake }

// AsyncEvents returns the channel of asynchronous events (ibv_get_async_event).
func (c *Context) AsyncEvents() <-chan AsyncEvent { return c.events }

// Counters returns the Context-level packet counters.
func (c *Context) Counters() ContextCounters {
	c.mu.Lock()
	defer c.mu.Unlock()
	cc := c.counters
	cc.AsyncEventsDropped = c.eventsDropped
	return cc
}

// signalWake tells a sleeping device loop that Output has work. mu is held.
func (c *Context) signalWake() {
	if c.wakeHeld {
		c.wakeMissed = true
		return
	}
	if c.quietWakes {
		return
	}
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// postEvent queues an asynchronous event, dropping it if the channel is full. mu is held.
func (c *Context) postEvent(ev AsyncEvent) {
	select {
	case c.events <- ev:
	default:
		c.eventsDropped++
	}
}

// allocQPN returns a free QPN above 1, the way a device hands them out: in
// sequence from a random start, wrapping at 2^24.
func (c *Context) allocQPN() (uint32, error) {
	if len(c.qps) >= c.cfg.MaxQP {
		return 0, fmt.Errorf("create qp: %d QPs exist: %w", len(c.qps), fullError("QP table", "MaxQP", c.cfg.MaxQP, ErrNoResources))
	}
	for {
		n := c.nextQPN & QPNMask
		c.nextQPN = n + 1
		if n < 2 {
			continue
		}
		if _, used := c.qps[n]; !used {
			return n, nil
		}
	}
}

// allocKey returns a fresh memory key: a 24-bit index that names the object and a
// variable low "key" byte (IBTA 10.6.3.1: the consumer-owned key portion).
func (c *Context) allocKey(e keyEntry) (uint32, error) {
	if c.numKeys >= c.cfg.MaxMR {
		return 0, fmt.Errorf("%d memory regions and windows exist: %w", c.numKeys, fullError("memory key table", "MaxMR", c.cfg.MaxMR, ErrNoResources))
	}
	for {
		idx := c.nextKeyIndex & 0xFFFFFF
		c.nextKeyIndex = idx + 1
		if idx == 0 {
			continue // key 0x000000xx is never handed out: 0 looks like "no key"
		}
		if _, used := c.keys[idx]; used {
			continue
		}
		c.keys[idx] = e
		c.numKeys++
		return idx<<8 | uint32(c.rng.IntN(256)), nil
	}
}

// freeKey releases a key index.
func (c *Context) freeKey(key uint32) {
	if _, ok := c.keys[key>>8]; ok {
		delete(c.keys, key>>8)
		c.numKeys--
	}
}

// allocVA reserves a range of the fake virtual address space for a region of n
// bytes: page aligned, with an unmapped guard page after it.
func (c *Context) allocVA(n int) uint64 {
	va := c.nextVA
	pages := (uint64(n) + 4095) / 4096
	c.nextVA += (pages + 1) * 4096
	return va
}

// pkey returns the partition key at index i of the table.
func (c *Context) pkey(i uint16) uint16 {
	if int(i) < len(c.cfg.PKeys) {
		return c.cfg.PKeys[i]
	}
	return 0
}
