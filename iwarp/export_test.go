package iwarp

// SetAbortWaitHook sets a function that Abort calls when it starts waiting for
// a queued Terminate to be sent (nil: none). Tests only.
func SetAbortWaitHook(f func()) { abortWaitHook = f }

// ReaderHoldsBuffer reports whether c's reader holds a pooled read-ahead
// buffer. Tests only.
func (c *Conn) ReaderHoldsBuffer() bool { return c.rx.held.Load() }

// ReaderReads returns how many read system calls of c's reader returned
// octets (Linux TCP). Tests only.
func (c *Conn) ReaderReads() uint64 { return c.rx.reads.Load() }

// ReaderBuffered returns how many FPDUs c's reader executed from its
// read-ahead buffer under one engine call (readBuffered). Tests only.
func (c *Conn) ReaderBuffered() uint64 { return c.rx.fast.Load() }
