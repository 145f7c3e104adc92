package iwarp

// SetAbortWaitHook sets a function that Abort calls when it starts waiting for
// a queued Terminate to be sent (nil: none). Tests only.
func SetAbortWaitHook(f func()) { abortWaitHook = f }
