package ibtransport

// HoldWake holds back the wake-ups the Context gives until ReleaseWake: the
// Wake signal (work for Output: a packet to answer, a post, an ACK that opened
// the window) and the wake-ups of CQ waiters (CQ.Wait, an armed CQ's Events,
// the OnCompletion hook). The work and the completions are queued as always;
// only the goroutines are not readied yet.
//
// A device's reader holds them over a batch of Input to run the batch to
// completion: it sends the batch's output itself (ACKs, READ responses, the
// requests an ACK let into the window) instead of readying the device loop, a
// goroutine on another thread, per packet only to find the output gone. And
// it chooses the order of the wake-ups it cannot avoid: Go runs the goroutine
// readied last next on the readying thread, before any other, and that one
// should be the application's (a completion it waits for is what the peer's
// next request usually waits for), not the loop's.
//
// Holds do not nest; one goroutine (the reader) holds at a time, and every
// HoldWake is followed by ReleaseWake.
func (c *Context) HoldWake() {
	c.mu.Lock()
	c.wakeHeld = true
	c.mu.Unlock()
}

// ReleaseWake ends HoldWake. It calls before, without the Context's lock,
// with output set if a Wake signal was held back (Output has work: before
// must call Output or signal the loop) and woke set if a completion's
// wake-up was; then it gives the completions' wake-ups, so that the waiters
// are readied after whatever before readied. Work queued once before is
// called signals Wake as usual.
func (c *Context) ReleaseWake(before func(output, woke bool)) {
	c.mu.Lock()
	output, woke := c.wakeMissed, len(c.heldWaiters) > 0 || c.heldCompletion
	c.wakeHeld, c.wakeMissed = false, false
	c.mu.Unlock()
	if before != nil {
		before(output, woke)
	}
	if !woke {
		return
	}
	c.mu.Lock()
	for i, ch := range c.heldWaiters {
		if ch != nil {
			signal(ch)
		}
		c.heldWaiters[i] = nil
	}
	c.heldWaiters = c.heldWaiters[:0]
	if c.heldCompletion {
		c.heldCompletion = false
		c.completed()
	}
	c.mu.Unlock()
}

// wakeWaiter wakes a CQ waiter's or completion channel's goroutine, or holds
// the wake-up back (HoldWake). mu is held.
func (c *Context) wakeWaiter(ch chan struct{}) {
	if c.wakeHeld {
		c.heldWaiters = append(c.heldWaiters, ch)
		return
	}
	signal(ch)
}

// scheduleUnheld is schedule with a wake-up HoldWake does not hold: for
// requests an ACK let into the window, a stream's. The device loop sends
// them on its own thread while the holder, a reader, goes on reading the
// ACKs; sent by the reader itself, a window-bound stream's packets and its
// ACKs took turns on one thread (softrdma bench, RoCE SEND 64 KiB, 4 rounds:
// 661 MiB/s before run to completion, 344 with the reader sending them).
// mu is held.
func (qp *QP) scheduleUnheld() {
	held := qp.ctx.wakeHeld
	qp.ctx.wakeHeld = false
	qp.schedule()
	qp.ctx.wakeHeld = held
}
