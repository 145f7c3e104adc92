package ibtransport

import "sync"

// This file makes deregistration and invalidation final for memory that an
// external transport writes without the Context's lock.
//
// The zero-copy receive path of an external transport (package iwarp) checks a
// key under the lock (RemoteBuffer, ReadSink, RecvBuffers) and then reads the
// payload from its socket straight into the returned memory, without the lock. A
// peer that stalls in the middle of a segment would otherwise have its remaining
// bytes written into a region after Dereg (or LOCAL_INV, a SEND with invalidate,
// a window's invalidation or unbinding) has returned.
//
// A transport that calls SetPlacementInterrupt declares that it writes into the
// memory those three calls return: each call that returns memory records, under
// the lock, the regions and windows it came from in the Wire's open placement,
// which EndPlacement closes. Every verb that makes a key invalid then settles the
// placements: an open placement that touches a region or window no longer valid
// (or rebound) is marked revoked, its transport is interrupted (the interrupt
// function, called with the lock held, must not block or call the engine: iwarp
// sets a read deadline in the past), and the verb waits until every such
// placement has ended before it returns or completes. EndPlacement reports the
// revocation: the transport discards the rest of the segment and terminates.

// placeRef is one region or window an open placement writes into, with what its
// key named when the placement began.
type placeRef struct {
	mr       *MR
	mw       *MW
	key      uint32 // the MR's L_Key or the MW's R_Key
	regs     uint32 // MR: its Rereg count
	bound    *MR    // MW: the region it was bound to
	mwAddr   uint64 // MW: its bound range
	mwLength uint64
}

// stale reports whether the key no longer names the memory it named when the
// placement began. mu is held.
func (p *placeRef) stale() bool {
	if p.mw != nil {
		mw := p.mw
		return mw.state != mrValid || mw.rkey != p.key || mw.mr != p.bound || mw.addr != p.mwAddr ||
			mw.length != p.mwLength || mw.mr == nil || mw.mr.state != mrValid
	}
	return p.mr.state != mrValid || p.mr.lkey != p.key || p.mr.regs != p.regs
}

// placement is a Wire's open placement.
type placement struct {
	refs      []placeRef
	revoked   bool
	interrupt func()
}

// SetPlacementInterrupt makes the Wire record placements (see placement.go) and
// sets fn, which interrupts the transport's write into a region being
// invalidated. fn is called with the Context's lock held; it must not block or
// call into the engine. A nil fn stops the recording (and closes a placement
// left open).
func (w *Wire) SetPlacementInterrupt(fn func()) {
	c := w.qp.ctx
	c.mu.Lock()
	defer c.mu.Unlock()
	w.place.interrupt = fn
	if fn == nil {
		w.endPlacement()
	}
}

// EndPlacement closes the Wire's open placement: the transport has stopped
// writing into the memory RemoteBuffer, ReadSink and RecvBuffers returned since
// the last EndPlacement. It reports whether a key it used was invalidated in the
// meantime: the transport was interrupted (or is about to be), some of the
// segment may not have been placed, and the rest must be discarded.
func (w *Wire) EndPlacement() (revoked bool) {
	c := w.qp.ctx
	c.mu.Lock()
	defer c.mu.Unlock()
	return w.endPlacement()
}

// endPlacement is EndPlacement with mu held.
func (w *Wire) endPlacement() (revoked bool) {
	c := w.qp.ctx
	p := &w.place
	revoked = p.revoked
	if len(p.refs) == 0 {
		p.revoked = false
		return revoked
	}
	clear(p.refs)
	p.refs, p.revoked = p.refs[:0], false
	for i, o := range c.placing {
		if o == w {
			last := len(c.placing) - 1
			c.placing[i], c.placing[last] = c.placing[last], nil
			c.placing = c.placing[:last]
			break
		}
	}
	if c.placeDone != nil {
		c.placeDone.Broadcast()
	}
	return revoked
}

// recordMR adds a region to the Wire's open placement, if the Wire records
// placements. mu is held.
func (w *Wire) recordMR(mr *MR) {
	if w.place.interrupt == nil || mr == nil {
		return
	}
	w.record(placeRef{mr: mr, key: mr.lkey, regs: mr.regs})
}

// recordRemote adds the region or window rkey names (just checked by
// lookupRemote) to the Wire's open placement. mu is held.
func (w *Wire) recordRemote(rkey uint32) {
	if w.place.interrupt == nil {
		return
	}
	e := w.qp.ctx.keys[rkey>>8]
	switch {
	case e.mr != nil:
		w.record(placeRef{mr: e.mr, key: e.mr.lkey, regs: e.mr.regs})
	case e.mw != nil:
		mw := e.mw
		w.record(placeRef{mw: mw, key: mw.rkey, bound: mw.mr, mwAddr: mw.addr, mwLength: mw.length})
	}
}

func (w *Wire) record(r placeRef) {
	c := w.qp.ctx
	p := &w.place
	if len(p.refs) == 0 {
		c.placing = append(c.placing, w)
	}
	for _, o := range p.refs {
		if o == r {
			return
		}
	}
	p.refs = append(p.refs, r)
}

// settlePlacements is called (mu held) after a key may have become invalid: it
// marks every open placement into memory that its key no longer names as
// revoked, interrupts its transport, and waits until each has ended. The lock is
// released while waiting, so the caller must re-check any state it read before.
// It reports whether it waited. No caller holds an open placement of its own
// (a transport's receive path closes its placement before the effects of the
// segment run).
func (c *Context) settlePlacements() bool {
	waited := false
	for {
		stale := false
		for _, w := range c.placing {
			p := &w.place
			for i := range p.refs {
				if !p.refs[i].stale() {
					continue
				}
				stale = true
				if !p.revoked {
					p.revoked = true
					if p.interrupt != nil {
						p.interrupt()
					}
				}
				break
			}
		}
		if !stale {
			return waited
		}
		if c.placeDone == nil {
			c.placeDone = sync.NewCond(&c.mu)
		}
		c.placeDone.Wait()
		waited = true
	}
}
