package ibtransport

// OnCompletion sets f to be called at every completion added to a CQ of the
// Context (and when a CQ overruns), under the Context's lock, after the
// completion is in the CQ: a caller outside Go that sleeps until its CQs
// have something (capi/libibverbs: a C program's busy-poll loop, parked on a
// futex) is woken by it. f must be quick and must not call the Context. nil
// removes it.
func (c *Context) OnCompletion(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.onCompletion = f
}

// completed runs the OnCompletion hook. mu is held.
func (c *Context) completed() {
	if c.onCompletion != nil {
		if c.wakeHeld {
			c.heldCompletion = true
			return
		}
		c.onCompletion()
	}
}

// Context returns the Context the CQ belongs to.
func (cq *CQ) Context() *Context { return cq.ctx }
