package bench

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/perf"
)

// qpPair is one connected RC QP pair with its CQs and memory: A's region
// is the target (WRITE), the source (READ) and the receive buffer (SEND); B's
// is where B's requests take their data from or put it.
type qpPair struct {
	qa, qb           *ibtransport.QP
	scqA, rcqA       *ibtransport.CQ
	scqB, rcqB       *ibtransport.CQ
	mrA, mrB         *ibtransport.MR
	pdA, pdB         *ibtransport.PD
	disconnect       func()
	recvSlots, slotN int // receive buffers of A: slots of slotN bytes
	recvOut          int // A's receives posted and not completed (SEND streams)
	recvNext         int // the slot of A's next receive
	// recvDone counts A's receive completions: the credits a SEND stream's
	// sender waits for (iWARP has no RNR NAK: a SEND without a posted
	// receive ends the connection, and SENDs complete before the peer has
	// seen them, so a sender must not outrun the receives posted).
	recvDone    atomic.Uint64
	sendsPosted uint64 // B's SENDs posted: sendsPosted-recvDone are in flight
	// credited holds a token once the reposter has counted receive
	// completions (or stopped) since the sender last took it: a sender out
	// of credits sleeps on it instead of spinning (on iWARP, SENDs complete
	// as they are written, so it may have no completion to wait for).
	credited chan struct{}
	// completions counts the completions B's loops polled: with recvDone,
	// the progress the stall watchdog (watch) looks for.
	completions atomic.Uint64
	reposterErr atomic.Pointer[error] // why the reposter stopped early
}

// txDepth and rxDepth are perftest's _bw defaults: WRs in flight
// on the sender, receives posted on a SEND receiver.
const (
	txDepth = 128
	rxDepth = 512
)

// newQPs creates and connects a QP pair whose regions hold n bytes (and, on
// A, slots receive buffers of n bytes each for SENDs).
func (e *env) newQPs(n, slots int) (*qpPair, error) {
	q := &qpPair{pdA: e.a.AllocPD(), pdB: e.b.AllocPD(), recvSlots: slots, slotN: n, credited: make(chan struct{}, 1)}
	var err error
	mk := func(c *ibtransport.Context, depth int) *ibtransport.CQ {
		if err != nil {
			return nil
		}
		var cq *ibtransport.CQ
		cq, err = c.CreateCQ(depth)
		return cq
	}
	q.scqA, q.rcqA = mk(e.a, txDepth+16), mk(e.a, rxDepth+16)
	q.scqB, q.rcqB = mk(e.b, txDepth+16), mk(e.b, rxDepth+16)
	if err != nil {
		q.destroy()
		return nil, err
	}
	const access = ibtransport.AccessLocalWrite | ibtransport.AccessRemoteWrite | ibtransport.AccessRemoteRead
	bufA := make([]byte, n*max(slots, 1))
	bufB := make([]byte, n)
	for i := range bufB {
		bufB[i] = byte(i)
	}
	if q.mrA, err = q.pdA.RegMR(bufA, access); err != nil {
		q.destroy()
		return nil, err
	}
	if q.mrB, err = q.pdB.RegMR(bufB, access); err != nil {
		q.destroy()
		return nil, err
	}
	qcap := ibtransport.QPCap{MaxSendWR: txDepth + 1, MaxRecvWR: rxDepth, MaxSendSGE: 1, MaxRecvSGE: 1}
	if q.qa, err = e.a.CreateQP(q.pdA, ibtransport.QPInitAttr{Type: ibtransport.QPTypeRC, SendCQ: q.scqA, RecvCQ: q.rcqA, Cap: qcap}); err != nil {
		q.destroy()
		return nil, err
	}
	if q.qb, err = e.b.CreateQP(q.pdB, ibtransport.QPInitAttr{Type: ibtransport.QPTypeRC, SendCQ: q.scqB, RecvCQ: q.rcqB, Cap: qcap}); err != nil {
		q.destroy()
		return nil, err
	}
	if q.disconnect, err = e.connect(q.qa, q.qb); err != nil {
		q.destroy()
		return nil, err
	}
	return q, nil
}

func (q *qpPair) destroy() {
	if q.disconnect != nil {
		q.disconnect()
	}
	for _, qp := range []*ibtransport.QP{q.qa, q.qb} {
		if qp != nil {
			qp.Destroy()
		}
	}
	for _, mr := range []*ibtransport.MR{q.mrA, q.mrB} {
		if mr != nil {
			mr.Dereg()
		}
	}
	for _, cq := range []*ibtransport.CQ{q.scqA, q.rcqA, q.scqB, q.rcqB} {
		if cq != nil {
			cq.Destroy()
		}
	}
}

// wait waits for a completion on cq. ctx is a measurement's context
// (watch), which ends when the QPs stop making progress: a peer that stopped
// answering fails the measurement instead of hanging it (a context per wait
// would allocate in the loop being measured).
func wait(ctx context.Context, cq *ibtransport.CQ) error {
	if err := cq.Wait(ctx); err != nil {
		if c := context.Cause(ctx); c != nil && c != err {
			return c
		}
		return fmt.Errorf("%w: %v", errStall, err)
	}
	return nil
}

// watch returns the context of a measurement of warm+measure. It ends when
// stallTimeout passes without a completion (the watchdog looks once per
// stallTimeout), or drainLimit after the measurement should have
// ended: a slow machine (an emulated guest moved 16 MiB/s) takes seconds to
// drain txDepth 1 MiB WRITEs after the window, which a fixed deadline of
// warm+measure+3s turned into a false "no progress".
func (q *qpPair) watch(warm, measure time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(context.Background())
	hard := time.Now().Add(warm + measure + drainLimit)
	progress := func() uint64 { return q.completions.Load() + q.recvDone.Load() }
	// Read here, not in the goroutine: a watchdog that starts late (after its
	// run was cancelled) must not read the variable a later test sets.
	stall := stallTimeout
	go func() {
		t := time.NewTicker(stall)
		defer t.Stop()
		last := progress()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				n := progress()
				switch {
				case n == last:
					cancel(errStall)
					return
				case now.After(hard):
					cancel(fmt.Errorf("still not drained %v after the measurement", drainLimit))
					return
				}
				last = n
			}
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// reposter keeps A's receive queue full while a SEND test runs: each
// receive completion is answered by a new receive on the same slot.
func (q *qpPair) startReposter(ctx context.Context) (stop func() error, err error) {
	// Top the queue up: receives that completed after the last round's
	// reposter stopped were not posted again. Slots are reused in turn.
	for q.recvOut < q.recvSlots {
		i := q.recvNext % q.recvSlots
		if err := q.qa.PostRecv(ibtransport.RecvWR{WRID: uint64(i), SGL: []ibtransport.SGE{q.mrA.SGE(i*q.slotN, q.slotN)}}); err != nil {
			return nil, err
		}
		q.recvOut++
		q.recvNext++
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	q.reposterErr.Store(nil)
	go func() {
		defer func() {
			if len(done) > 0 {
				err := <-done
				q.reposterErr.Store(&err)
				done <- err
			}
			q.credit() // a starved sender looks at reposterErr
		}()
		wc := make([]ibtransport.WC, 32)
		sge := make([]ibtransport.SGE, 1)
		wr := ibtransport.RecvWR{SGL: sge}
		for {
			n := q.rcqA.Poll(wc)
			if n == 0 {
				if err := q.rcqA.Wait(ctx); err != nil {
					if ctx.Err() != nil {
						err = nil
					}
					done <- err
					return
				}
				continue
			}
			for _, w := range wc[:n] {
				q.recvOut--
				q.recvDone.Add(1)
				if w.Status != ibtransport.WCSuccess {
					done <- fmt.Errorf("receive completion: %v", w.Status)
					return
				}
				slot := int(w.WRID)
				wr.WRID, sge[0] = w.WRID, q.mrA.SGE(slot*q.slotN, q.slotN)
				if err := q.qa.PostRecv(wr); err != nil {
					done <- err
					return
				}
				q.recvOut++
			}
			q.credit()
		}
	}()
	return func() error { cancel(); return <-done }, nil
}

// awaitCredit sleeps until the reposter has counted receives (or stopped)
// since the last call, or ctx ends. A token left from before the caller's
// credit check only costs it one more look.
func (q *qpPair) awaitCredit(ctx context.Context) error {
	select {
	case <-q.credited:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w waiting for the receiver (%d of %d SENDs received)", context.Cause(ctx),
			q.recvDone.Load(), q.sendsPosted)
	}
}

// credit wakes a sender waiting for credits (credited), if one is.
func (q *qpPair) credit() {
	select {
	case q.credited <- struct{}{}:
	default:
	}
}

// stream is the result of a streaming measurement.
type stream struct {
	msgs   int           // messages completed in the measured window
	secs   float64       // its length
	allocs float64       // heap allocations per message during it
	cpu    time.Duration // the process's CPU time during it
}

// processCPU returns the CPU time (user and system) the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// streamOps keeps txDepth work requests of op and size in flight on B
// for warm+measure, then drains, and counts the messages that completed in
// the measured part. Small messages are signalled one in sigEvery (perftest's
// CQ moderation); each completion's WRID says how many WRs it stands for.
func (q *qpPair) streamOps(op ibtransport.WROpcode, size int, warm, measure time.Duration) (stream, error) {
	ctx, cancel := q.watch(warm, measure)
	defer cancel()
	sigEvery := 1
	if size <= perf.CQModLimit {
		sigEvery = 32
	}
	sge := []ibtransport.SGE{q.mrB.SGE(0, size)}
	wr := ibtransport.SendWR{Opcode: op, SGL: sge, RemoteAddr: q.mrA.Addr(), RKey: q.mrA.RKey()}
	if op == ibtransport.WRSend {
		wr.RemoteAddr, wr.RKey = 0, 0
		stop, err := q.startReposter(ctx)
		if err != nil {
			return stream{}, err
		}
		defer stop()
	}
	wc := make([]ibtransport.WC, 32)
	list := make([]ibtransport.SendWR, 0, txDepth) // the WRs of one post
	w := newWindow(warm, measure)
	var res stream
	// SENDs keep within half the receives posted (credits, see recvDone).
	// Counted over the QPs' life, not per round: SENDs of the last round may
	// complete at A during this one (seen: a per-round count went below zero,
	// which in uint64 starved the sender for good).
	credit := func() bool { return true }
	if op == ibtransport.WRSend {
		credit = func() bool {
			if q.sendsPosted-q.recvDone.Load() >= uint64(q.recvSlots/2) {
				return false
			}
			q.sendsPosted++
			return true
		}
	}
	var ms runtime.MemStats
	var mallocs uint64
	var cpu0 time.Duration
	started, ended := false, false
	outstanding, since, signaled := 0, 0, 0 // WRs in flight, unsignalled ones since the last signalled, signalled ones
	for {
		now := time.Now()
		stopping := !now.Before(w.to)
		if !started && w.in(now) {
			started = true
			runtime.ReadMemStats(&ms)
			mallocs = ms.Mallocs
			cpu0 = processCPU()
		}
		if stopping && started && !ended {
			ended = true
			res.cpu = processCPU() - cpu0
			runtime.ReadMemStats(&ms)
			if res.msgs > 0 {
				res.allocs = float64(ms.Mallocs-mallocs) / float64(res.msgs)
			}
		}
		starved := false
		list = list[:0]
		for outstanding+len(list) < txDepth && (!stopping || since > 0) {
			if !credit() {
				starved = true // the receiver has not caught up
				break
			}
			since++
			wr.Signaled = since == sigEvery || stopping
			wr.WRID = uint64(since)
			list = append(list, wr)
			if wr.Signaled {
				since = 0
				signaled++
			}
		}
		if len(list) > 0 {
			if err := q.qb.PostSend(list...); err != nil {
				return res, err
			}
			outstanding += len(list)
		}
		if stopping && outstanding == 0 {
			break
		}
		n := q.scqB.Poll(wc)
		q.completions.Add(uint64(n))
		if n == 0 && starved && signaled == 0 {
			// Waiting for credits, perhaps with only unsignalled WRs out:
			// nothing may complete on this CQ until more are posted.
			if p := q.reposterErr.Load(); p != nil && *p != nil {
				return res, fmt.Errorf("receiver: %w", *p)
			}
			if err := q.awaitCredit(ctx); err != nil {
				return res, err
			}
			continue
		}
		if n == 0 {
			if err := wait(ctx, q.scqB); err != nil {
				return res, fmt.Errorf("%w (%d WRs outstanding, %d receives done, %d posted)", err, outstanding, q.recvDone.Load(), q.recvOut)
			}
			continue
		}
		t := time.Now()
		for _, c := range wc[:n] {
			if c.Status != ibtransport.WCSuccess {
				return res, fmt.Errorf("%v completion: %v", op, c.Status)
			}
			k := int(c.WRID)
			outstanding -= k
			signaled--
			if w.in(t) {
				res.msgs += k
			}
		}
	}
	res.secs = measure.Seconds()
	return res, nil
}

// latency is a latency measurement: one sample per exchange.
type latency struct {
	samples []time.Duration
	allocs  float64
}

// pingPong measures SEND or WRITE-with-immediate ping-pongs of size bytes:
// B sends, A answers when its receive completes, B's receive completion ends
// the round trip. The samples are one-way times (half the round trip), as
// ib_send_lat and ib_write_lat report them.
func (q *qpPair) pingPong(op ibtransport.WROpcode, size int, warm, measure time.Duration) (latency, error) {
	ctx, cancelAll := q.watch(warm, measure)
	defer cancelAll()
	post := func(qp *ibtransport.QP, mr *ibtransport.MR) error {
		return qp.PostRecv(ibtransport.RecvWR{SGL: []ibtransport.SGE{mr.SGE(0, size)}})
	}
	for i := 0; i < 4; i++ {
		if err := post(q.qa, q.mrA); err != nil {
			return latency{}, err
		}
		if err := post(q.qb, q.mrB); err != nil {
			return latency{}, err
		}
	}
	wrFor := func(local, remote *ibtransport.MR) ibtransport.SendWR {
		wr := ibtransport.SendWR{Opcode: op, SGL: []ibtransport.SGE{local.SGE(0, size)}, Signaled: true}
		if op != ibtransport.WRSend {
			wr.RemoteAddr, wr.RKey = remote.Addr(), remote.RKey()
		}
		return wr
	}
	wrA, wrB := wrFor(q.mrA, q.mrB), wrFor(q.mrB, q.mrA)
	rctx, cancel := context.WithCancel(ctx)
	echo := make(chan error, 1)
	go func() {
		wc := make([]ibtransport.WC, 4)
		for {
			if q.rcqA.Poll(wc[:1]) == 0 {
				if err := q.rcqA.Wait(rctx); err != nil {
					if rctx.Err() != nil {
						err = nil
					}
					echo <- err
					return
				}
				continue
			}
			if wc[0].Status != ibtransport.WCSuccess {
				echo <- fmt.Errorf("A's receive: %v", wc[0].Status)
				return
			}
			if err := post(q.qa, q.mrA); err != nil {
				echo <- err
				return
			}
			if err := q.qa.PostSend(wrA); err != nil {
				echo <- err
				return
			}
			q.scqA.Poll(wc) // reap A's send completions as they come
		}
	}()
	res, err := q.clientLoop(ctx, warm, measure, func(wc []ibtransport.WC) error {
		if err := q.qb.PostSend(wrB); err != nil {
			return err
		}
		if err := q.waitOne(ctx, q.rcqB, wc); err != nil {
			return err
		}
		if err := post(q.qb, q.mrB); err != nil {
			return err
		}
		q.scqB.Poll(wc)
		return nil
	})
	cancel()
	if e := <-echo; err == nil {
		err = e
	}
	for i := range res.samples {
		res.samples[i] /= 2
	}
	return res, err
}

// readLatency measures READs of size bytes, one at a time: post to
// completion (ib_read_lat reports the whole round trip).
func (q *qpPair) readLatency(size int, warm, measure time.Duration) (latency, error) {
	ctx, cancel := q.watch(warm, measure)
	defer cancel()
	wr := ibtransport.SendWR{Opcode: ibtransport.WRRDMARead, SGL: []ibtransport.SGE{q.mrB.SGE(0, size)},
		RemoteAddr: q.mrA.Addr(), RKey: q.mrA.RKey(), Signaled: true}
	return q.clientLoop(ctx, warm, measure, func(wc []ibtransport.WC) error {
		if err := q.qb.PostSend(wr); err != nil {
			return err
		}
		return q.waitOne(ctx, q.scqB, wc)
	})
}

// waitOne waits for one successful completion on cq.
func (q *qpPair) waitOne(ctx context.Context, cq *ibtransport.CQ, wc []ibtransport.WC) error {
	for {
		if cq.Poll(wc[:1]) == 1 {
			q.completions.Add(1)
			if wc[0].Status != ibtransport.WCSuccess {
				return fmt.Errorf("completion: %v", wc[0].Status)
			}
			return nil
		}
		if err := wait(ctx, cq); err != nil {
			return err
		}
	}
}

// clientLoop runs one exchange after another for warm+measure and keeps the
// durations of those that started in the measured part.
func (q *qpPair) clientLoop(ctx context.Context, warm, measure time.Duration, exchange func([]ibtransport.WC) error) (latency, error) {
	w := newWindow(warm, measure)
	wc := make([]ibtransport.WC, 16)
	res := latency{samples: make([]time.Duration, 0, 1<<16)}
	var ms runtime.MemStats
	var mallocs uint64
	started := false
	for {
		t := time.Now()
		if !t.Before(w.to) {
			break
		}
		if !started && w.in(t) {
			started = true
			runtime.ReadMemStats(&ms)
			mallocs = ms.Mallocs
		}
		if err := exchange(wc); err != nil {
			return res, err
		}
		if w.in(t) {
			res.samples = append(res.samples, time.Since(t))
		}
	}
	if started && len(res.samples) > 0 {
		runtime.ReadMemStats(&ms)
		res.allocs = float64(ms.Mallocs-mallocs) / float64(len(res.samples))
	}
	return res, nil
}

// percentiles returns the minimum, median and 99th percentile, in
// microseconds.
func percentiles(d []time.Duration) (minUS, medUS, p99US float64) {
	if len(d) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	us := func(x time.Duration) float64 { return float64(x) / 1e3 }
	return us(s[0]), us(s[len(s)/2]), us(s[min(len(s)-1, len(s)*99/100)])
}
