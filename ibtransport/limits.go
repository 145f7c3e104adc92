package ibtransport

import "strconv"

// LimitError reports a verb refused, or a completion lost, because a limit was
// reached: a Context limit set by ContextConfig (MaxQP, MaxMR, MaxCQ, MaxCQE,
// MaxQPWR, MaxSGE, MaxInlineData, MaxSRQ, MaxSRQWR, MaxMsgSize) or a queue's own
// size (QPCap.MaxSendWR, MaxRecvWR, MaxSendSGE, MaxRecvSGE, MaxInlineData; an
// SRQ's MaxWR; a CQ's depth). Its text names the resource, the limit and its
// value, e.g. "send queue full (MaxSendWR 128): queue full" or
// "SGL length 5 > MaxSendSGE 4: invalid argument".
//
// It wraps the sentinel that says what a verbs user sees: ErrQueueFull for a
// full send or receive queue (ENOMEM from ibv_post_send and ibv_post_recv, as
// rxe returns), ErrNoResources for a Context table that is full (ENOMEM from
// ibv_create_qp, ibv_reg_mr, ibv_create_cq), ErrInvalidArgument for a size
// beyond a limit (EINVAL), ErrCQOverrun for a completion queue that
// overflowed. Use errors.Is for the class and errors.As for the details.
type LimitError struct {
	// Resource is what is full or too large: "send queue", "receive queue",
	// "shared receive queue", "completion queue", "QP table", "memory key
	// table", "CQ table", "SRQ table", "SGL length", "inline data", "message
	// length", "CQ depth", "send queue depth", ...
	Resource string
	// Limit names the attribute that sets the bound: "MaxSendWR" (QPCap),
	// "MaxQP" (ContextConfig), "depth" (a CQ's), ...
	Limit string
	// Value is the size asked for; unused when Full.
	Value uint64
	// Max is the bound.
	Max uint64
	// Full means all Max entries are in use (the queue or table is full);
	// otherwise Value > Max was asked for.
	Full bool
	// Err is the sentinel: ErrQueueFull, ErrNoResources, ErrInvalidArgument or
	// ErrCQOverrun.
	Err error
}

// Error reads "send queue full (MaxSendWR 128): queue full" or
// "CQ depth 40000 > MaxCQE 32768: invalid argument".
func (e *LimitError) Error() string {
	var s string
	if e.Full {
		s = e.Resource + " full (" + e.Limit + " " + strconv.FormatUint(e.Max, 10) + ")"
	} else {
		s = e.Resource + " " + strconv.FormatUint(e.Value, 10) + " > " + e.Limit + " " + strconv.FormatUint(e.Max, 10)
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the sentinel that classifies the error.
func (e *LimitError) Unwrap() error { return e.Err }

// fullError returns the error of a queue or table with all max entries in use.
func fullError(resource, limit string, max int, sentinel error) *LimitError {
	return &LimitError{Resource: resource, Limit: limit, Max: uint64(max), Full: true, Err: sentinel}
}

// tooLargeError returns the error of a size v asked for beyond max; it is
// always ErrInvalidArgument (EINVAL).
func tooLargeError(resource, limit string, v, max uint64) *LimitError {
	return &LimitError{Resource: resource, Limit: limit, Value: v, Max: max, Err: ErrInvalidArgument}
}
