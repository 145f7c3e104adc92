package ibtransport

import (
	"cmp"
	"slices"
)

// QPStat is one QP as QPStats shows it: what `rdma statistic show` and
// `rdma resource show qp` tell of a kernel QP.
type QPStat struct {
	QPN     uint32
	Type    QPType
	State   QPState
	DestQPN uint32
	// Counters are QP.Counters' (the transport's counts added, on an
	// external QP).
	Counters QPCounters
}

// NumDropReasons is the number of DropReasons: QPCounters.Drops' length.
const NumDropReasons = int(numDropReasons)

// Add adds o's counts to k's, field by field.
func (k *QPCounters) Add(o QPCounters) {
	k.PacketsOut += o.PacketsOut
	k.BytesOut += o.BytesOut
	k.PacketsIn += o.PacketsIn
	k.BytesIn += o.BytesIn
	k.TerminatesSent += o.TerminatesSent
	k.TerminatesReceived += o.TerminatesReceived
	k.Retransmissions += o.Retransmissions
	k.Timeouts += o.Timeouts
	k.Probes += o.Probes
	k.AcksSent += o.AcksSent
	k.AcksReceived += o.AcksReceived
	for i := range k.NAKsSent {
		k.NAKsSent[i] += o.NAKsSent[i]
		k.NAKsReceived[i] += o.NAKsReceived[i]
	}
	k.RNRNAKsSent += o.RNRNAKsSent
	k.RNRNAKsReceived += o.RNRNAKsReceived
	k.DuplicateRequests += o.DuplicateRequests
	k.DuplicateResponses += o.DuplicateResponses
	for i := range k.Drops {
		k.Drops[i] += o.Drops[i]
	}
}

// countersLocked is QP.Counters with the Context's lock held.
func (qp *QP) countersLocked() QPCounters {
	cnt := qp.counters
	if qp.wire != nil && qp.wire.counters != nil {
		qp.wire.counters(&cnt)
	}
	return cnt
}

// QPStats returns every live QP of the Context with its counters, in QPN
// order, and the sum of the counters of the QPs destroyed so far (taken at
// Destroy: what an external QP's transport counts after that is not in it),
// so that a device's totals (retired plus every live QP's) never go down
// while it runs, as a kernel device's counters do not. It changes nothing.
func (c *Context) QPStats() (live []QPStat, retired QPCounters) {
	c.mu.Lock()
	defer c.mu.Unlock()
	live = make([]QPStat, 0, len(c.qps))
	for n, qp := range c.qps {
		live = append(live, QPStat{QPN: n, Type: qp.typ, State: qp.state, DestQPN: qp.attr.DestQPN, Counters: qp.countersLocked()})
	}
	slices.SortFunc(live, func(a, b QPStat) int { return cmp.Compare(a.QPN, b.QPN) })
	return live, c.retired
}
