package ibtransport

import "time"

// This file holds the RC requester's tail-loss probe and its round-trip
// estimate. When the last packets of a burst are lost, nothing after them
// reaches the responder, so no PSN sequence NAK comes back and go-back-N waits
// for the transport timer (IBTA 9.7.6): 4.096 µs × 2^Timeout, 67 ms at
// perftest's Timeout 14, for a loss that a link with a round trip of a few
// milliseconds could repair in two of them. Seen between two emulated guests
// (softrdma perf write_bw, 500 WRITEs of 4 KiB): 248 of 2360 packets lost,
// not one sequence NAK, 4 timeouts. So when an RC requester has sent what it
// may, has PSNs outstanding, and has had no ACK for two smoothed round trips
// (probeMin at least), it sends its last packet again with AckReq set, once
// per ACK (TCP's tail loss probe, RFC 8985 section 7.3): if that packet had
// arrived, the responder ACKs the duplicate (IBTA 9.7.5.1.1: C9-105) and the
// requester learns how far it got; if packets before it were lost, the
// responder sees a PSN gap and NAKs from the first missing one, and go-back-N
// resends from there. READ and atomic requests are not probed: a duplicate
// READ makes the responder send its data again.

// probeMin is the shortest probe timeout, Linux TCP's (tcp_schedule_loss_probe):
// on a loaded machine an ACK is now and then a few milliseconds late behind
// a busy receiver (1 ms here cost 7 spurious probes in 100 ping-pongs while
// the test suite ran), and 10 ms is still a seventh of perftest's 67 ms timer.
const probeMin = 10 * time.Millisecond

// rttSample starts timing psn, sent now for the first time, if nothing is
// being timed; its ACK may wait for a later AckReq, which only lengthens the
// probe timeout. Resent packets are not timed (Karn's algorithm: their ACK may
// answer the first copy).
func (qp *QP) rttSample(now time.Time, psn uint32) {
	if qp.req.rttSent.IsZero() {
		qp.req.rttSent, qp.req.rttPSN = now, psn
	}
}

// rttAcked ends the timing if the PSNs before unacked, just acknowledged,
// include the timed one, and folds the sample into the smoothed round trip
// (RFC 6298: gain 1/8).
func (qp *QP) rttAcked(now time.Time, unacked uint32) {
	r := &qp.req
	if r.rttSent.IsZero() || !PSNLess(r.rttPSN, unacked) {
		return
	}
	s := max(now.Sub(r.rttSent), 0)
	r.rttSent = time.Time{}
	if r.srtt == 0 {
		r.srtt = s
	} else {
		r.srtt += (s - r.srtt) / 8
	}
}

// probeTimeout returns how long the requester waits without an ACK before it
// probes, or 0 if it does not probe: no round trip measured yet, or the
// transport timer would fire first.
func (qp *QP) probeTimeout() time.Duration {
	if qp.req.srtt == 0 {
		return 0
	}
	pto := max(2*qp.req.srtt, probeMin)
	if t := qp.timeout(); t != 0 && pto >= t {
		return 0
	}
	return pto
}

// probeDeadline returns when the requester probes if nothing changes.
func (qp *QP) probeDeadline() (time.Time, bool) {
	r := &qp.req
	if qp.typ != QPTypeRC || r.probed || r.rnrWait || !qp.outstanding() || r.lastActive.IsZero() ||
		(qp.state != QPStateRTS && qp.state != QPStateSQD) {
		return time.Time{}, false
	}
	pto := qp.probeTimeout()
	if pto == 0 {
		return time.Time{}, false
	}
	return r.lastActive.Add(pto), true
}

// fireProbe sends the tail-loss probe if its time has come and the requester
// is where a probe helps: every PSN it has ever sent is out (no rewind under
// way) and the last of them is a SEND's or WRITE's.
func (qp *QP) fireProbe(now time.Time) {
	t, ok := qp.probeDeadline()
	if !ok || now.Before(t) {
		return
	}
	r := &qp.req
	r.probed = true // one probe per ACK: after it, the transport timer
	last := PSNAdd(r.sentHigh, -1)
	if r.psn != r.sentHigh {
		return
	}
	w := qp.findStarted(last)
	if w == nil || w.wr.Opcode.readLike() {
		return
	}
	qp.counters.Probes++
	r.probing = true
	qp.seek(last)
	qp.schedule()
}

// isProbe reports whether psn, about to be sent, is the probe: the last PSN
// sent so far, sent again while probing.
func (qp *QP) isProbe(psn uint32) bool {
	return qp.req.probing && psn == PSNAdd(qp.req.sentHigh, -1)
}
