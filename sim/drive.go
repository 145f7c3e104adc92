package sim

import (
	"errors"
	"fmt"
	"time"
)

// Stepped is a sans-I/O device a Drive loop steps: Poll takes what was
// delivered to it and sends what it has, reporting whether anything moved;
// NextDeadline is its earliest timer.
type Stepped interface {
	Poll(now time.Time) (bool, error)
	NextDeadline() (time.Time, bool)
}

// ErrStalled is returned by Drive when nothing is in flight, no timer is
// pending and done still says no.
var ErrStalled = errors.New("sim: stalled: nothing in flight and no timer pending")

// Drive runs the network and devs deterministically until done returns true:
// it polls every device (and then calls step, if not nil, for the
// application's own work, which reports whether it did anything) until nothing
// moves, then fires the next network event or jumps the clock to the earliest
// device deadline. It fails when virtual time passes limit or nothing is left
// to happen.
func (n *Network) Drive(limit time.Duration, done func() bool, step func(now time.Time) bool, devs ...Stepped) error {
	end := n.Now().Add(limit)
	for !done() {
		now := n.Now()
		if now.After(end) {
			return fmt.Errorf("sim: drive: virtual time limit %v passed", limit)
		}
		moved := false
		for _, d := range devs {
			m, err := d.Poll(now)
			if err != nil {
				return err
			}
			moved = moved || m
		}
		if step != nil && step(now) {
			moved = true
		}
		if moved {
			continue
		}
		var deadline time.Time
		have := false
		for _, d := range devs {
			if t, ok := d.NextDeadline(); ok && (!have || t.Before(deadline)) {
				deadline, have = t, true
			}
		}
		next, pending := n.NextEventTime()
		switch {
		case pending && (!have || !deadline.Before(next)):
			n.Step()
		case have:
			if !deadline.After(now) {
				// Due now but the device did nothing: move time on by the
				// smallest step so a timer that fires "after" now can run.
				deadline = now.Add(time.Nanosecond)
			}
			n.RunUntil(deadline)
		default:
			return ErrStalled
		}
	}
	return nil
}
