package perf

import (
	"context"
	"fmt"
	"time"

	"github.com/softrdma/softrdma/device"
	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/oob/perftest"
)

// --run_infinitely (perftest's RUN_INFINITELY, run_iter_bw_infinitely and
// run_iter_bw_infinitely_server in perftest_resources.c): the sender keeps tx
// depth WRs in flight on every QP for ever; the receiver of ib_send_bw keeps
// its receives posted for ever. Every -D seconds (default 5) each prints one
// row for the messages completed since the last row (print_bw_infinite_mode:
// print_report_bw with no peak, then the count and the start time reset).
// perftest prints from a thread that sleeps -D seconds between rows; here the
// loop looks at the clock and waits for completions no longer than the next
// row's time. The run ends only when it is stopped (Options.Context).

// intervalReport is print_report_bw's row for an interval of a
// --run_infinitely run: n messages completed between start and now
// (nanoseconds), no peak; -b's write, read and atomic rows count both
// directions (run_inf_bi_factor).
func (s *session) intervalReport(size, n uint64, start, now int64) perftest.BWReport {
	p := s.p
	factor := uint64(1)
	if p.duplex && p.verb != verbSend {
		factor = 2
	}
	r := perftest.BWReport{Size: size, Iters: n}
	elapsed := float64(now - start)
	if elapsed <= 0 {
		elapsed = 1
	}
	r.BWAvg = float64(factor*size) * float64(n) * 1e9 / (elapsed * formatFactor(p.gbits))
	r.MsgRateAvg = float64(n) * 1e9 * float64(factor) / (elapsed * 1e6)
	return r
}

// runBWInfinitely is run_iter_bw_infinitely: it returns only with an error,
// the context's when the run is stopped.
func (s *session) runBWInfinitely(ctx context.Context, size uint64) (perftest.BWReport, error) {
	p := s.p
	nqp := len(s.qps)
	cqMod := uint64(p.cqMod)
	scnt := make([]uint64, nqp)
	ccnt := make([]uint64, nqp)
	var totscnt, totccnt, iters uint64
	if s.credit != nil {
		s.credit.reset()
	}
	clock := newPerfClock()
	interval := int64(p.duration) * int64(time.Second)
	start := clock.now()
	next := start + interval
	progress := start
	for {
		if err := ctx.Err(); err != nil {
			return perftest.BWReport{}, err
		}
		now := clock.now()
		if now >= next {
			s.printBW(s.intervalReport(size, iters, start, now))
			iters, start, next = 0, now, now+interval
		}
		creditBlocked := false
		for q, qp := range s.qps {
			for scnt[q]-ccnt[q]+1 <= uint64(p.txDepth) {
				if s.credit != nil && !s.credit.mayPost(q, scnt[q]) {
					creditBlocked = true
					break
				}
				k := scnt[q]
				signaled := cqMod == 1 || k%cqMod == cqMod-1
				if err := qp.PostSend(s.sendWR(q, size, k, signaled)); err != nil {
					return perftest.BWReport{}, fmt.Errorf("Couldn't post send: %d scnt=%d: %w", q, k, err)
				}
				scnt[q]++
				totscnt++
				progress = now
			}
		}
		if totccnt >= totscnt {
			continue
		}
		n := s.sendCQ.Poll(s.wc)
		if n == 0 {
			deadline := clock.at(next)
			if creditBlocked {
				if err := s.creditStalled(time.Duration(now-progress), totscnt, totccnt); err != nil {
					return perftest.BWReport{}, err
				}
				if d := time.Now().Add(creditPoll); d.Before(deadline) {
					deadline = d
				}
			}
			if err := device.WaitCQ(ctx, s.sendCQ, deadline); err != nil {
				return perftest.BWReport{}, s.withReport(err)
			}
			continue
		}
		progress = clock.now()
		for _, wc := range s.wc[:n] {
			if wc.Status != ibtransport.WCSuccess {
				return perftest.BWReport{}, s.completionError(wc, "send", totscnt, totccnt)
			}
			q := int(wc.WRID)
			ccnt[q] += cqMod
			totccnt += cqMod
			iters += cqMod
		}
	}
}

// runBWReceiverInfinitely is run_iter_bw_infinitely_server: ib_send_bw's
// server counts and reposts receives for ever, a row every interval.
func (s *session) runBWReceiverInfinitely(ctx context.Context, size uint64) (perftest.BWReport, error) {
	p := s.p
	posted := make([]uint64, len(s.qps))
	for i := range posted {
		posted[i] = uint64(p.rxDepth)
	}
	wc := make([]ibtransport.WC, 16)
	if s.credit != nil {
		s.credit.start()
	}
	clock := newPerfClock()
	interval := int64(p.duration) * int64(time.Second)
	start := clock.now()
	next := start + interval
	var iters uint64
	for {
		if err := ctx.Err(); err != nil {
			return perftest.BWReport{}, err
		}
		if now := clock.now(); now >= next {
			s.printBW(s.intervalReport(size, iters, start, now))
			iters, start, next = 0, now, now+interval
		}
		n := s.recvCQ.Poll(wc)
		if n == 0 {
			// A sender that has gone leaves this side waiting until it is
			// stopped, as perftest's server does.
			if err := device.WaitCQ(ctx, s.recvCQ, clock.at(next)); err != nil {
				return perftest.BWReport{}, s.withReport(err)
			}
			continue
		}
		for _, w := range wc[:n] {
			if w.Status != ibtransport.WCSuccess {
				return perftest.BWReport{}, s.completionError(w, "receive", iters, iters)
			}
			q := int(w.WRID)
			iters++
			if err := s.postRecv(s.qps[q], q, size, posted[q]); err != nil {
				return perftest.BWReport{}, fmt.Errorf("Couldn't post recv Qp=%d: %w", q, err)
			}
			posted[q]++
			if s.credit != nil {
				if err := s.credit.received(ctx, s, q); err != nil {
					return perftest.BWReport{}, err
				}
			}
		}
	}
}
