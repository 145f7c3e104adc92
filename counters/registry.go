package counters

import (
	"sync"

	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/roce"
)

// MaxClosed is how many closed devices a Registry keeps the last counts of
// (the most recent): a process that opens and closes devices for ever keeps
// a bounded list.
const MaxClosed = 64

// Source returns a device's counters now (Collect's).
type Source func() Device

// Registry is the devices a process has open, each by its Source, and the
// last counts of those it closed (up to MaxClosed), in the order they were
// registered. It is safe for concurrent use.
type Registry struct {
	mu     sync.Mutex
	seq    uint64
	live   []entry
	closed []closedEntry
}

type entry struct {
	seq uint64
	src Source
}

type closedEntry struct {
	seq uint64
	dev Device
}

// Default is the Registry device.Open registers every device with, and the
// one softrdma's --metrics and the verbs libraries' SOFTRDMA_METRICS serve.
var Default = &Registry{}

// Register adds the device src reports on. The returned function, called
// when the device closes (once; more calls do nothing), takes its last
// counts (State "closed") and keeps them.
func (r *Registry) Register(src Source) (closed func()) {
	r.mu.Lock()
	r.seq++
	seq := r.seq
	r.live = append(r.live, entry{seq, src})
	r.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			d := src() // outside the lock: src takes the engine's
			d.State = "closed"
			r.mu.Lock()
			defer r.mu.Unlock()
			for i, e := range r.live {
				if e.seq == seq {
					r.live = append(r.live[:i], r.live[i+1:]...)
					break
				}
			}
			r.closed = append(r.closed, closedEntry{seq, d})
			if n := len(r.closed) - MaxClosed; n > 0 {
				r.closed = append(r.closed[:0], r.closed[n:]...)
			}
		})
	}
}

// Mark returns a mark for Since: the devices registered after it.
func (r *Registry) Mark() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seq
}

// Snapshot returns the counters of every device, open or closed, in the
// order they were registered.
func (r *Registry) Snapshot() Snapshot { return r.Since(0) }

// Since returns Snapshot's devices registered after mark (Mark): those
// of one command, in a process that runs several.
func (r *Registry) Since(mark uint64) Snapshot {
	r.mu.Lock()
	live := append([]entry(nil), r.live...)
	closed := append([]closedEntry(nil), r.closed...)
	r.mu.Unlock()
	s := Snapshot{Devices: []Device{}}
	for len(live) > 0 || len(closed) > 0 {
		// Merge the two lists, each in registration order.
		if len(closed) == 0 || (len(live) > 0 && live[0].seq < closed[0].seq) {
			if live[0].seq > mark {
				s.Devices = append(s.Devices, live[0].src())
			}
			live = live[1:]
			continue
		}
		if closed[0].seq > mark {
			s.Devices = append(s.Devices, closed[0].dev)
		}
		closed = closed[1:]
	}
	return s
}

// RegisterRoCE registers a RoCE device opened with roce.Open in Default,
// named name, on its first address: the engine's counts and the device's.
// Call the returned function when it closes.
func RegisterRoCE(name string, d *roce.Device) (closed func()) {
	info := Info{Name: name, Transport: "roce"}
	if as := d.Addrs(); len(as) > 0 {
		info.Address = as[0]
	}
	return Default.Register(func() Device {
		c := d.Counters()
		return Collect(info, d.Context(), &c)
	})
}

// RegisterEngine registers the engine of a device with no counts of its
// own (iWARP: a TCP connection per QP) in Default. Call the returned
// function when it closes.
func RegisterEngine(info Info, ctx *ibtransport.Context) (closed func()) {
	return Default.Register(func() Device { return Collect(info, ctx, nil) })
}
