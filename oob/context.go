package oob

import (
	"context"
	"errors"
	"net"
	"os"
	"time"
)

// longAgo is a deadline in the past: setting it makes blocked I/O return at once.
var longAgo = time.Unix(1, 0)

// Guard makes I/O on conn honour ctx until the returned release function is called:
// conn's deadline is set to ctx's deadline, if any, and to the past as soon as ctx is
// cancelled, so that a blocked Read or Write returns. Call release with the error of the
// guarded I/O; it clears the deadline again and returns that error, joined with ctx's
// error (context.Canceled or context.DeadlineExceeded) when ctx ended it.
//
// Guards must not overlap on one conn: each sets and clears the conn's whole deadline.
// GuardRead and GuardWrite guard one direction each and may overlap with each other.
func Guard(ctx context.Context, conn net.Conn) (release func(err error) error) {
	return guard(ctx, conn.SetDeadline)
}

// GuardRead is Guard for conn's read deadline only.
func GuardRead(ctx context.Context, conn net.Conn) (release func(err error) error) {
	return guard(ctx, conn.SetReadDeadline)
}

// GuardWrite is Guard for conn's write deadline only.
func GuardWrite(ctx context.Context, conn net.Conn) (release func(err error) error) {
	return guard(ctx, conn.SetWriteDeadline)
}

func guard(ctx context.Context, set func(time.Time) error) func(error) error {
	dl, hasDeadline := ctx.Deadline()
	if hasDeadline {
		_ = set(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = set(longAgo) })
	return func(err error) error {
		if stop() {
			// The AfterFunc never ran: ctx was not cancelled meanwhile.
			if hasDeadline {
				_ = set(time.Time{})
			}
			if err != nil && hasDeadline && errors.Is(err, os.ErrDeadlineExceeded) {
				// ctx's deadline, which the conn got, passed; ctx's own timer may not
				// have fired yet.
				return errors.Join(context.DeadlineExceeded, err)
			}
			return err
		}
		// ctx was cancelled: the AfterFunc set (or is setting) a past deadline, which
		// is left in place; the conn is not usable for further guarded I/O anyway.
		if err != nil {
			return errors.Join(ctx.Err(), err)
		}
		return nil
	}
}
