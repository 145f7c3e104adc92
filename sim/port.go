package sim

import (
	"fmt"
	"net"
	"sync"

	"github.com/softrdma/softrdma/netio"
)

// DefaultBatchSize is Port.BatchSize.
const DefaultBatchSize = 64

// DefaultReceiveQueueLen is the number of delivered frames a Port holds for
// its reader before it drops (DropReceiveQueue on the delivering link).
const DefaultReceiveQueueLen = 4096

// Port is a node's network interface: a netio.Endpoint and netio.Poller
// attached to one Link.
//
// Write hands frames to the link at the current virtual time; it copies
// them and never blocks. Frames arrive in the port's receive queue when the
// Network fires their delivery events; TryRead takes them without blocking,
// and Read blocks until one is there (or the port is closed).
type Port struct {
	n    *Network
	nm   string
	mac  [6]byte
	link *Link
	out  *linkDir // the link direction leaving this port

	// Guarded by n.mu.
	rx        [][]byte
	rxHead    int
	rxLimit   int
	cond      *sync.Cond
	closed    bool
	onReceive func()
}

// AddNode adds a node with one network interface whose MAC address is mac
// and returns that interface. Connect it with Connect or ConnectSwitch.
func (n *Network) AddNode(name string, mac [6]byte) *Port {
	n.mu.Lock()
	defer n.mu.Unlock()
	p := &Port{n: n, nm: name, mac: mac, rxLimit: DefaultReceiveQueueLen}
	p.cond = sync.NewCond(&n.mu)
	n.ports = append(n.ports, p)
	return p
}

// Connect joins two ports with a point-to-point link whose two directions
// both start with cfg. Every frame written on one port reaches the other,
// whatever its destination MAC, as on a cable. It panics if either port
// already has a link or belongs to another Network, or if cfg is invalid:
// those are programming errors (check user input with cfg.Validate).
func (n *Network) Connect(a, b *Port, cfg LinkConfig) *Link {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.checkFreeLocked(a)
	n.checkFreeLocked(b)
	if a == b {
		panic("sim: Connect: a port cannot be connected to itself")
	}
	l := n.newLinkLocked(a, b, cfg)
	a.link, a.out = l, l.dirs[AtoB]
	b.link, b.out = l, l.dirs[BtoA]
	return l
}

func (n *Network) checkFreeLocked(p *Port) {
	if p.n != n {
		panic(fmt.Sprintf("sim: port %s belongs to another Network", p.nm))
	}
	if p.link != nil {
		panic(fmt.Sprintf("sim: port %s is already connected (%v)", p.nm, p.link))
	}
}

// Name returns the node name given to AddNode.
func (p *Port) Name() string { return p.nm }

func (p *Port) name() string { return p.nm }

// MAC returns the port's MAC address.
func (p *Port) MAC() [6]byte { return p.mac }

// HardwareAddr returns the port's MAC address as a net.HardwareAddr.
func (p *Port) HardwareAddr() net.HardwareAddr { return append(net.HardwareAddr(nil), p.mac[:]...) }

// Link returns the port's link, or nil.
func (p *Port) Link() *Link {
	p.n.mu.Lock()
	defer p.n.mu.Unlock()
	return p.link
}

// OnReceive registers fn to be called each time the Network queues a frame
// on the port, from the goroutine that fired the delivery (Step, RunUntil or
// RunRealtime) and without the Network's lock held. A deterministic driver
// uses it to let the receiving device TryRead at once; nil removes it.
func (p *Port) OnReceive(fn func()) {
	p.n.mu.Lock()
	defer p.n.mu.Unlock()
	p.onReceive = fn
}

// SetReceiveQueueLimit sets how many delivered frames the port holds before
// it drops; non-positive means DefaultReceiveQueueLen.
func (p *Port) SetReceiveQueueLimit(limit int) {
	if limit <= 0 {
		limit = DefaultReceiveQueueLen
	}
	p.n.mu.Lock()
	defer p.n.mu.Unlock()
	p.rxLimit = limit
}

// Queued returns the number of frames waiting to be read.
func (p *Port) Queued() int {
	p.n.mu.Lock()
	defer p.n.mu.Unlock()
	return len(p.rx) - p.rxHead
}

// BatchSize returns DefaultBatchSize.
func (p *Port) BatchSize() int { return DefaultBatchSize }

// MTU returns the MTU of the link direction leaving the port, or
// netio.DefaultMTU while the port is not connected.
func (p *Port) MTU() int {
	p.n.mu.Lock()
	defer p.n.mu.Unlock()
	if p.out == nil {
		return netio.DefaultMTU
	}
	return p.out.cfg.mtu()
}

// Write hands each bufs[i][offset:] to the port's link at the current
// virtual time. The frames are copied; Write never blocks. Frames the link
// drops still count as written. It returns ErrNotConnected before Connect
// and net.ErrClosed after Close.
func (p *Port) Write(bufs [][]byte, offset int) (int, error) {
	n := p.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if p.closed {
		return 0, net.ErrClosed
	}
	if p.out == nil {
		return 0, ErrNotConnected
	}
	n.syncRealtimeLocked()
	for i, b := range bufs {
		if offset < 0 || offset > len(b) {
			return i, fmt.Errorf("sim: port %s: write offset %d outside buffer %d of length %d", p.nm, offset, i, len(b))
		}
		p.out.transmitLocked(b[offset:], p, n.now)
	}
	return len(bufs), nil
}

// Read reads up to len(bufs) delivered frames, blocking until there is at
// least one. Some other goroutine must be driving the Network (RunRealtime,
// or Step in a loop) for frames to arrive. See netio.Endpoint.
func (p *Port) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	p.n.mu.Lock()
	defer p.n.mu.Unlock()
	for len(p.rx) == p.rxHead && !p.closed {
		p.cond.Wait()
	}
	return p.readLocked(bufs, sizes, offset)
}

// TryRead reads up to len(bufs) delivered frames without blocking; it
// returns 0, nil when none is waiting. See netio.Poller.
func (p *Port) TryRead(bufs [][]byte, sizes []int, offset int) (int, error) {
	p.n.mu.Lock()
	defer p.n.mu.Unlock()
	return p.readLocked(bufs, sizes, offset)
}

func (p *Port) readLocked(bufs [][]byte, sizes []int, offset int) (int, error) {
	if p.closed {
		return 0, net.ErrClosed
	}
	want := min(len(bufs), len(sizes))
	k := 0
	for k < want && p.rxHead < len(p.rx) {
		frame := p.rx[p.rxHead]
		p.rx[p.rxHead] = nil
		p.rxHead++
		m, err := netio.CopyFrame(bufs[k], offset, frame)
		p.n.putBufLocked(frame)
		if err != nil {
			p.compactLocked()
			return k, err
		}
		sizes[k] = m
		k++
	}
	p.compactLocked()
	return k, nil
}

func (p *Port) compactLocked() {
	if p.rxHead == len(p.rx) {
		p.rx, p.rxHead = p.rx[:0], 0
	} else if p.rxHead > 64 && p.rxHead > len(p.rx)/2 {
		k := copy(p.rx, p.rx[p.rxHead:])
		clear(p.rx[k:])
		p.rx, p.rxHead = p.rx[:k], 0
	}
}

// Close closes the port: queued frames are discarded, blocked and later
// Reads and Writes return net.ErrClosed, and frames arriving later are
// dropped (DropClosed).
func (p *Port) Close() error {
	p.n.mu.Lock()
	defer p.n.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	for _, f := range p.rx[p.rxHead:] {
		p.n.putBufLocked(f)
	}
	clear(p.rx)
	p.rx, p.rxHead = nil, 0
	p.cond.Broadcast()
	return nil
}

// arriveLocked queues a frame delivered by dir.
func (p *Port) arriveLocked(dir *linkDir, data []byte, origin *Port, sentAt int64) func() {
	switch {
	case origin != nil && p.n.partitionedLocked(origin, p, sentAt):
		dir.dropLocked(DropPartition, data)
		return nil
	case p.closed:
		dir.dropLocked(DropClosed, data)
		return nil
	case len(p.rx)-p.rxHead >= p.rxLimit:
		dir.dropLocked(DropReceiveQueue, data)
		return nil
	}
	dir.deliveredLocked(data)
	p.rx = append(p.rx, data)
	p.cond.Broadcast()
	return p.onReceive
}

var (
	_ netio.Endpoint = (*Port)(nil)
	_ netio.Poller   = (*Port)(nil)
)
