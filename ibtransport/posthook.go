package ibtransport

// SetPostHook sets f to be called by PostSend, on the posting goroutine
// after the Context's lock is released, for a post on an RC, UC or UD QP
// whose send queue was empty (no work request posted and not yet retired),
// instead of signalling Wake. f sends what the post queued (a device's
// Flush) or, if it cannot, readies the device loop. nil removes it.
//
// A post to an idle QP is a latency-bound one (a ping-pong's, a first
// request): the signal readied the device loop, a goroutine on another
// thread, to send it, a hop per message that the kernel's rxe does not make
// (it sends from the post's system call). A post behind work in flight is a
// stream's: it still signals, and the loop sends the posts of a batch
// together. QPs whose poster flushes (SetPosterFlushes) and external QPs
// (a Wire) are left as they are.
//
// f may start a transport timer earlier than any deadline a device loop
// sleeping on NextDeadline planned for: it must then wake the loop.
func (c *Context) SetPostHook(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.postHookFn = f
}

// postHook returns the hook a post on the QP calls, or nil. mu is held.
func (qp *QP) postHook() func() {
	f := qp.ctx.postHookFn
	if f == nil || qp.posterFlushes || qp.wire != nil || qp.sq.head != qp.sq.tail {
		return nil
	}
	return f
}

// SetWaitHook sets f to be called by CQ.Wait, on the waiting goroutine
// with the Context's lock released, each time it is about to block. A
// device whose reader left output for the application goroutine it woke
// (an ACK the goroutine's next post would send with its request) sends it
// there when the goroutine waits again without having posted. nil removes
// it.
func (c *Context) SetWaitHook(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.waitHookFn = f
}
