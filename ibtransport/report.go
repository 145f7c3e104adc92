package ibtransport

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// StateReport describes every QP of the Context, one line each in QPN order,
// for a person finding out why a program waits: the state and peer, the send
// queue (posted, not yet sent), the receive queue (posted receives: none while
// the peer is answered with RNR NAKs), the PSNs, the retry budget, whether
// the retransmission timer is armed (relative to now) or an RNR wait runs, and
// the counters that tell a lost packet from a missing receive (timeouts,
// tail-loss probes, retransmissions, RNR NAKs, NAKs), then, indented, the
// packets it dropped by reason, those that were. It changes nothing.
func (c *Context) StateReport(now time.Time) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	qpns := make([]uint32, 0, len(c.qps))
	for n := range c.qps {
		qpns = append(qpns, n)
	}
	slices.Sort(qpns)
	var b strings.Builder
	fmt.Fprintf(&b, "context: %d QPs; packets in %d (unknown QP %d, malformed %d), out %d\n",
		len(qpns), c.counters.PacketsIn, c.counters.UnknownQP, c.counters.Malformed, c.counters.PacketsOut)
	for _, n := range qpns {
		qp := c.qps[n]
		r, k := &qp.req, &qp.counters
		timer := "off"
		if !r.timer.IsZero() {
			timer = r.timer.Sub(now).Round(time.Microsecond).String()
		}
		rq := fmt.Sprint(qp.rq.count())
		if qp.srq != nil {
			rq = fmt.Sprintf("SRQ %d", qp.srq.rq.count())
		}
		fmt.Fprintf(&b, "qp 0x%06x %s %s dest 0x%06x: sq %d posted %d unsent, rq %s; psn %d unacked %d epsn %d; "+
			"retries left %d rnr %d, timer %s, rnr wait %v; pkts out %d in %d, timeouts %d, probes %d, retransmitted %d, "+
			"RNR NAKs sent %d received %d, NAKs sent %v received %v, duplicates %d\n",
			n, qp.typ, qp.state, qp.attr.DestQPN, qp.sq.count(), qp.sq.tail-qp.sq.next, rq,
			r.psn, r.unacked, qp.resp.epsn, r.retries, r.rnrRetries, timer, r.rnrWait,
			k.PacketsOut, k.PacketsIn, k.Timeouts, k.Probes, k.Retransmissions,
			k.RNRNAKsSent, k.RNRNAKsReceived, k.NAKsSent, k.NAKsReceived, k.DuplicateRequests)
		for r, n := range k.Drops {
			if n > 0 {
				fmt.Fprintf(&b, "  dropped (%v): %d\n", DropReason(r), n)
			}
		}
	}
	return b.String()
}
