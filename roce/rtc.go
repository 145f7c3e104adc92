package roce

import (
	"math"
	"sync/atomic"
	"time"
)

// Run's reader runs a short batch of received frames to completion: it
// holds the engine's wake-ups over the batch's Input (ibtransport
// Context.HoldWake) and then sends what the batch produced (ACKs, READ
// responses, requests an ACK let into the window) itself, or, if the batch
// completed work an application goroutine waits for, leaves it to that
// goroutine's next post or, after outputDefer, the loop (inputDone). Before,
// every batch kicked the loop, and every ACK queued, window opened or completion readied a goroutine in the middle of Input: the
// loop, on another thread, ran Output for what the reader could have sent,
// and the order of the wake-ups decided which goroutine Go ran first (go tool
// trace of softrdma bench's 64 B rows: 63% of the goroutines' scheduling
// delay was Input's signalWake). softrdma bench, RoCE udp, 64 B one-way
// latency (min / median): SEND 8.3 / 10.7 -> 7.5 / 9.3 us, WRITE_IMM
// 8.4 / 10.8 -> 7.5 / 9.4, READ round trip 13.2 / 14.9 -> 11.7 / 14.2.
//
// The loop still sleeps until the engine's next deadline, and the reader's
// Output may arm a timer earlier than the one the loop planned for (a
// request sent after the QP was idle starts its transport timer), as may its
// Input (an RNR NAK's wait). So the loop publishes its plan (loopPlan) and
// the reader kicks it when the deadline after the batch is earlier, or while
// the loop is between its NextDeadline and its sleep (planNow: it may have
// read the deadlines before the batch changed them).

// Values of the loop's plan besides a deadline in Unix nanoseconds.
const (
	planNow  = math.MinInt64 // the loop is planning: kick it
	planNone = math.MaxInt64 // no deadline: the loop sleeps until kicked
)

// loopPlan is when Run's loop will next look at the timers on its own.
type loopPlan struct{ at atomic.Int64 }

// planning marks the loop as about to read the deadlines.
func (p *loopPlan) planning() { p.at.Store(planNow) }

// planned records the deadline the loop sleeps until (ok false: none).
func (p *loopPlan) planned(t time.Time, ok bool) {
	if !ok {
		p.at.Store(planNone)
		return
	}
	p.at.Store(t.UnixNano())
}

// late reports whether a deadline t (ok: there is one) comes before the
// loop would look.
func (p *loopPlan) late(t time.Time, ok bool) bool {
	at := p.at.Load()
	return at == planNow || (ok && t.UnixNano() < at)
}

// tryFlush is Flush if no one else is flushing: it reports false, having
// sent nothing, when d.mu is held (by the loop, or a poster flushing), and
// whether frames wait for their next hop afterwards (their deadline is the
// loop's to keep: Run's reader does not take d.mu to read it, see inputDone).
func (d *Device) tryFlush(now time.Time) (ok, pending bool, err error) {
	if !d.mu.TryLock() {
		return false, false, nil
	}
	defer d.mu.Unlock()
	_, err = d.flushLocked(now)
	return true, len(d.pending) > 0, err
}

// nextDeadline is NextDeadline without the frames waiting for their next
// hop, which needs d.mu, held by a Flush through its system call: Run's
// reader that took it to plan waited for the loop's sends (go tool trace,
// softrdma bench's 64 B rates: 0.51 s blocked in NextDeadline's Lock).
func (d *Device) nextDeadline() (time.Time, bool) {
	t, ok := d.ctx.NextDeadline()
	if d.proto != nil {
		if u, have := d.proto.NextDeadline(); have && (!ok || u.Before(t)) {
			t, ok = u, true
		}
	}
	return t, ok
}

// rtcBatch is the longest batch the reader runs to completion.
const rtcBatch = 4

// beginBatch decides whether the reader runs a batch of n frames to
// completion, and if so holds the engine's wake-ups (HoldWake). It does for
// short batches, a request or a response and the ACK before it that a peer
// or the application waits for (a ping-pong, a READ), not for the long
// batches of a stream, whose ACKs the loop sends on the other CPU while the
// reader goes on reading (softrdma bench, 2 CPUs, three alternations: WRITE
// 4 KiB 265 MiB/s with this bound, 143 without; the other rows alike).
func (d *Device) beginBatch(n int) bool {
	if n > rtcBatch {
		return false
	}
	d.ctx.HoldWake()
	return true
}

// inputDone ends the reader's batch that began with HoldWake, and kicks the
// loop if it must run. A batch that queued output and woke no
// application goroutine sends the output here; one that woke an application
// goroutine leaves its output (an ACK) to that goroutine's next post, whose
// flush (postFlush) sends it with the post's request, or to its next CQ.Wait
// (waitFlush), or, if neither comes within outputDefer, to the loop (later). Sending here would delay the
// application by the system call (on a veth pair the kernel delivers the
// frames to the peer inside it): softrdma bench's SEND ping-pong took 1.3 and
// 1.0 us more per one-way trip so. Kicking the loop at once (as before)
// readied it on the other CPU beside the application, whose post could find
// d.mu held by the loop's send of the ACK and kick it again for its request;
// deferred, a ping-pong's ACK leaves in the sendmmsg of the answer (softrdma
// bench, 64 B, six alternations: WRITE_IMM and SEND minimum one-way latency
// 13.9 and 13.8 us -> 13.4 and 13.2). The loop must also run when someone
// else was flushing (it may have taken its output before the batch
// queued more), the flush failed (the loop reports the error) or left frames
// waiting for their next hop, or a deadline is now earlier than the loop's
// plan.
func (d *Device) inputDone(now time.Time, plan *loopPlan, kick, later func()) {
	d.ctx.ReleaseWake(func(output, woke bool) {
		switch {
		case output && woke:
			d.deferred.Store(true)
			later()
			if plan.late(d.nextDeadline()) {
				kick()
			}
			return
		case output || d.proto != nil:
			if ok, pending, err := d.tryFlush(now); !ok || pending || err != nil {
				kick()
				return
			}
		}
		if plan.late(d.nextDeadline()) {
			kick()
		}
	})
}

// outputDefer is how long output that a batch which woke an application
// goroutine left (inputDone) waits for that goroutine's post before the
// loop sends it: longer than a ping-pong's round trip (softrdma bench, 64 B:
// 25-35 us), so that in a steady ping-pong each exchange moves the deadline
// on before it passes and the loop never wakes for it; short against the
// transport timer (4.096 us x 2^14 in the bench).
const outputDefer = 50 * time.Microsecond

// waitFlush is Run's Context wait hook (ibtransport SetWaitHook): a
// goroutine about to block in CQ.Wait sends the output a batch that woke an
// application goroutine left (inputDone), if it is still there: a receiver
// that only reposts receives sends the ACK of what it received as it goes
// back to waiting, not outputDefer later.
func (d *Device) waitFlush(now time.Time, plan *loopPlan, kick func()) {
	if d.deferred.Load() {
		d.postFlush(now, plan, kick)
	}
}

// postFlush is Run's Context post hook (ibtransport SetPostHook): a post to
// an idle QP is sent from the posting goroutine, not by the loop readied
// for it, a hop per message of a ping-pong. The loop is kicked if someone
// else is flushing (it may have taken its output before the post), the flush
// failed or left frames waiting for their next hop, or it started a timer
// earlier than the loop's plan (the post's request on a QP that was idle
// when the loop planned: at most once per plan, since later posts' timers
// start later).
func (d *Device) postFlush(now time.Time, plan *loopPlan, kick func()) {
	d.deferred.Store(false) // the flush below takes what inputDone left, or the loop's does
	if ok, pending, err := d.tryFlush(now); !ok || pending || err != nil {
		kick()
		return
	}
	if plan.late(d.nextDeadline()) {
		kick()
	}
}
