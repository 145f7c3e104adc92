package ibtransport

// SetQuietWakes says whether output the Context schedules from now on
// signals Wake. A caller that hands received packets to the engine and
// flushes the device right after (the C library's thread that reads the
// socket itself while it waits for a completion) sets it around its
// input: the signal would only wake the device loop, on another thread, to
// find the ACKs already sent by the caller's flush, and fight it for the
// device. Output scheduled while it is set goes out with the caller's flush,
// which must follow clearing it (the clearing and any scheduling are under
// the Context's lock, and the flush's Output takes it after).
func (c *Context) SetQuietWakes(v bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.quietWakes = v
}
