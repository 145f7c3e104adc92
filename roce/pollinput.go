package roce

import (
	"time"

	"github.com/softrdma/softrdma/netio"
)

// outsideHooks are what PollInput needs of Run's loop: its plan and its kick.
type outsideHooks struct {
	plan *loopPlan
	kick func()
}

// PollInput hands the frames waiting on a DatagramReader endpoint to the
// engine, from a thread other than Run's reader (the C library's thread that
// waits for a completion reads the device's socket itself: netio
// LendReads), and reports whether it read any. It does not send what they
// call for (their ACKs): the caller flushes (it quiets the engine's wake-ups
// around it: ibtransport SetQuietWakes). If the input moved a timer before
// the deadline Run's loop sleeps until (an RNR NAK's wait), it kicks the
// loop, as Run's reader does (inputDone). Calls must not overlap (the
// buffers are the device's, Poll's).
func (d *Device) PollInput(now time.Time) (bool, error) {
	dr, ok := d.cfg.Endpoint.(netio.DatagramReader)
	if !ok || d.dgrams == nil {
		return false, netio.ErrNotPollable
	}
	moved := false
	for {
		n, err := dr.TryReadDatagrams(d.dgrams)
		if n > 0 {
			moved = true
			d.inputDatagrams(now, d.dgrams[:n], &d.dghdr)
		}
		if err != nil || n < len(d.dgrams) {
			if h := d.outside.Load(); moved && h != nil && h.plan.late(d.nextDeadline()) {
				h.kick()
			}
			return moved, err
		}
	}
}
