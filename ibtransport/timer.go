package ibtransport

import "time"

// This file holds the transport timers (IBTA Vol1 9.7.6: the requester's
// transport timer; 9.7.5.2: the RNR wait). The engine never reads a clock: the
// device loop passes the time to Output and asks NextDeadline when to call again.

// armTimer (re)starts the retransmission timer at now + timeout, unless the
// timeout is infinite. mu is held.
func (qp *QP) armTimer(now time.Time) {
	d := qp.timeout()
	if d == 0 || qp.typ != QPTypeRC {
		qp.req.timer = time.Time{}
		return
	}
	qp.req.timer = now.Add(d)
	qp.addTimered()
}

// addTimered puts the QP on the Context's timer list.
func (qp *QP) addTimered() {
	if !qp.inTimered {
		qp.inTimered = true
		qp.ctx.timered = append(qp.ctx.timered, qp)
	}
}

// deadline returns the QP's earliest timer. An RC QP whose poster flushes
// (SetPosterFlushes) and has no timer running has one a timeout after the
// last Output: its posts do not wake the device loop, and the Output of a
// post, on the poster's thread, may start the retransmission timer after
// the loop has asked NextDeadline and gone to sleep. Waking by then, the
// loop finds that timer (which ends no earlier: it started later, with the
// same timeout), so no retransmission is late, and an idle QP costs a
// wake-up per timeout.
func (qp *QP) deadline() (time.Time, bool) {
	if qp.dead {
		return time.Time{}, false
	}
	var t time.Time
	ok := false
	if !qp.req.timer.IsZero() {
		t, ok = qp.req.timer, true
	} else if d := qp.timeout(); qp.posterFlushes && qp.typ == QPTypeRC && d > 0 {
		t, ok = qp.ctx.lastOutput.Add(d), true
	}
	if qp.req.rnrWait && (!ok || qp.req.rnrUntil.Before(t)) {
		t, ok = qp.req.rnrUntil, true
	}
	if p, have := qp.probeDeadline(); have && (!ok || p.Before(t)) {
		t, ok = p, true
	}
	return t, ok
}

// NextDeadline returns the earliest time at which Output has timer work to do
// (a retransmission timeout or the end of an RNR wait), and false if no timer is
// armed.
func (c *Context) NextDeadline() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var best time.Time
	found := false
	keep := c.timered[:0]
	for _, qp := range c.timered {
		t, ok := qp.deadline()
		if !ok && (qp.dead || !qp.posterFlushes) {
			qp.inTimered = false
			continue
		}
		if !ok {
			keep = append(keep, qp) // a quiet poster before its timeout is set (deadline)
			continue
		}
		keep = append(keep, qp)
		if !found || t.Before(best) {
			best, found = t, true
		}
	}
	clear(c.timered[len(keep):])
	c.timered = keep
	return best, found
}

// runTimers fires the timers that expired by now. mu is held.
func (c *Context) runTimers(now time.Time) {
	keep := c.timered[:0]
	for _, qp := range c.timered {
		qp.fireTimers(now)
		if _, ok := qp.deadline(); ok || (qp.posterFlushes && !qp.dead) {
			keep = append(keep, qp)
		} else {
			qp.inTimered = false
		}
	}
	clear(c.timered[len(keep):])
	c.timered = keep
}

// fireTimers runs the QP's expired timers.
func (qp *QP) fireTimers(now time.Time) {
	if qp.dead {
		return
	}
	if qp.req.rnrWait && !now.Before(qp.req.rnrUntil) {
		qp.req.rnrWait = false
		qp.schedule()
	}
	if t := qp.req.timer; !t.IsZero() && !now.Before(t) {
		qp.req.timer = time.Time{}
		qp.onTimeout(now)
	}
	qp.fireProbe(now)
}

// onTimeout handles the expiry of the retransmission timer (IBTA 9.7.6):
// resend from the oldest unacknowledged PSN, or after RetryCnt retries complete
// the oldest outstanding WQE with IBV_WC_RETRY_EXC_ERR.
func (qp *QP) onTimeout(now time.Time) {
	if !qp.outstanding() || (qp.state != QPStateRTS && qp.state != QPStateSQD) {
		return
	}
	qp.counters.Timeouts++
	if qp.req.retries == 0 {
		qp.failAt(qp.req.unacked, WCRetryExcErr)
		return
	}
	qp.req.retries--
	qp.rewind(qp.req.unacked)
}
