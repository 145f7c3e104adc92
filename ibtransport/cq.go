package ibtransport

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// ErrCQOverrun means a completion queue overflowed: a completion was lost, the CQ is
// in error and every QP that uses it was moved to the error state (IBTA 11.4.2.1).
var ErrCQOverrun = errors.New("completion queue overrun")

// CQ is a completion queue (ibv_cq).
type CQ struct {
	ctx     *Context
	ring    []WC
	head    int // index of the oldest entry
	count   int
	armed   bool
	solOnly bool
	err     error
	dead    bool
	refs    int // QPs and SRQs using it

	events chan struct{} // completion events (armed notifications)
	// waitq holds a channel of each parked Wait, all signalled when a
	// completion is added or the CQ fails or is destroyed: a broadcast that,
	// unlike closing and replacing one channel, allocates nothing once the
	// channels (kept in waitFree between Waits) exist. A Wait's own channel
	// cannot have its wake taken by another Wait.
	waitq, waitFree []chan struct{}
	qps             []*QP
}

// CreateCQ creates a completion queue with room for depth completions (ibv_create_cq).
func (c *Context) CreateCQ(depth int) (*CQ, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if depth <= 0 {
		return nil, fmt.Errorf("create cq: depth %d not in 1..%d: %w", depth, c.cfg.MaxCQE, ErrInvalidArgument)
	}
	if depth > c.cfg.MaxCQE {
		return nil, fmt.Errorf("create cq: %w", tooLargeError("CQ depth", "MaxCQE", uint64(depth), uint64(c.cfg.MaxCQE)))
	}
	if c.numCQ >= c.cfg.MaxCQ {
		return nil, fmt.Errorf("create cq: %d CQs exist: %w", c.numCQ, fullError("CQ table", "MaxCQ", c.cfg.MaxCQ, ErrNoResources))
	}
	c.numCQ++
	return &CQ{
		ctx:    c,
		ring:   make([]WC, depth),
		events: make(chan struct{}, 1),
	}, nil
}

// Depth returns the number of completions the CQ holds (Resize changes it).
func (cq *CQ) Depth() int {
	cq.ctx.mu.Lock()
	defer cq.ctx.mu.Unlock()
	return len(cq.ring)
}

// Poll moves up to len(wc) completions into wc, oldest first, and returns how many
// (ibv_poll_cq). After an overrun it still returns the completions it holds; Err
// reports the overrun.
func (cq *CQ) Poll(wc []WC) int {
	c := cq.ctx
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for n < len(wc) && cq.count > 0 {
		wc[n] = cq.ring[cq.head]
		cq.head++
		if cq.head == len(cq.ring) {
			cq.head = 0
		}
		cq.count--
		n++
	}
	return n
}

// drop removes the completions of QP qpn not yet polled, keeping the others
// in order: a QP moved to RESET takes its completions with it, as rdma-core's
// hardware providers do (mlx5_modify_qp and mlx4's clean the QP's CQEs from
// both CQs), so that a QP brought back to RTS after an error does not hand
// the program the flushes of its previous life (rdma-core's tests/test_mr.py
// restates QPs this way). mu is held.
func (cq *CQ) drop(qpn uint32) {
	if cq == nil {
		return
	}
	kept := 0
	for i := 0; i < cq.count; i++ {
		w := cq.ring[(cq.head+i)%len(cq.ring)]
		if w.QPNum == qpn {
			continue
		}
		cq.ring[(cq.head+kept)%len(cq.ring)] = w
		kept++
	}
	for i := kept; i < cq.count; i++ {
		cq.ring[(cq.head+i)%len(cq.ring)] = WC{}
	}
	cq.count = kept
}

// Len returns the number of completions waiting to be polled.
func (cq *CQ) Len() int {
	cq.ctx.mu.Lock()
	defer cq.ctx.mu.Unlock()
	return cq.count
}

// Err returns ErrCQOverrun (wrapped) once the CQ has overflowed, else nil.
func (cq *CQ) Err() error {
	cq.ctx.mu.Lock()
	defer cq.ctx.mu.Unlock()
	return cq.err
}

// Wait blocks until the CQ holds a completion, the CQ is in error or destroyed,
// or ctx ends. It does not take the completion: every waiter returns when one
// arrives.
func (cq *CQ) Wait(ctx context.Context) error {
	cq.ctx.mu.Lock()
	for {
		switch {
		case cq.count > 0:
			cq.ctx.mu.Unlock()
			return nil
		case cq.err != nil:
			err := cq.err
			cq.ctx.mu.Unlock()
			return err
		case cq.dead:
			cq.ctx.mu.Unlock()
			return fmt.Errorf("cq wait: %w", ErrDestroyed)
		}
		var ch chan struct{}
		if k := len(cq.waitFree); k > 0 {
			ch, cq.waitFree = cq.waitFree[k-1], cq.waitFree[:k-1]
		} else {
			ch = make(chan struct{}, 1)
		}
		cq.waitq = append(cq.waitq, ch)
		hook := cq.ctx.waitHookFn
		cq.ctx.mu.Unlock()
		if hook != nil {
			hook()
		}
		select {
		case <-ch:
			cq.ctx.mu.Lock()
			cq.waitFree = append(cq.waitFree, ch)
		case <-ctx.Done():
			cq.ctx.mu.Lock()
			if i := slices.Index(cq.waitq, ch); i >= 0 {
				cq.waitq = slices.Delete(cq.waitq, i, i+1)
			} else if i := slices.Index(cq.ctx.heldWaiters, ch); i >= 0 {
				cq.ctx.heldWaiters[i] = nil // woken, the wake held (HoldWake)
			} else {
				<-ch // woken meanwhile (under mu, so the signal is in ch)
			}
			cq.waitFree = append(cq.waitFree, ch)
			cq.ctx.mu.Unlock()
			return ctx.Err()
		}
	}
}

// wakeWaiters wakes every Wait. mu is held.
func (cq *CQ) wakeWaiters() {
	for i, ch := range cq.waitq {
		cq.ctx.wakeWaiter(ch)
		cq.waitq[i] = nil
	}
	cq.waitq = cq.waitq[:0]
}

// Notify arms the CQ (ibv_req_notify_cq): the next completion added — or, with
// solicitedOnly, the next solicited receive completion or error completion — sends
// one value on Events and disarms it.
func (cq *CQ) Notify(solicitedOnly bool) {
	cq.ctx.mu.Lock()
	defer cq.ctx.mu.Unlock()
	if cq.armed && !solicitedOnly {
		cq.solOnly = false // arming for all completions widens a solicited-only arm
		return
	}
	cq.armed = true
	cq.solOnly = solicitedOnly
}

// Events returns the CQ's completion event channel (a completion channel of one
// CQ). It has capacity one.
func (cq *CQ) Events() <-chan struct{} { return cq.events }

// Destroy destroys the CQ (ibv_destroy_cq). It fails with ErrBusy while QPs use it.
func (cq *CQ) Destroy() error {
	c := cq.ctx
	c.mu.Lock()
	defer c.mu.Unlock()
	if cq.dead {
		return fmt.Errorf("destroy cq: %w", ErrDestroyed)
	}
	if cq.refs > 0 {
		return fmt.Errorf("destroy cq: %d QPs use it: %w", cq.refs, ErrBusy)
	}
	cq.dead = true
	c.numCQ--
	cq.wakeWaiters()
	return nil
}

// push adds a completion. solicited marks a receive completion of a message with
// the SE bit. mu is held. On overflow the completion is lost, the CQ goes to error,
// an EventCQErr is posted and the QPs using the CQ go to the error state.
func (cq *CQ) push(w WC, solicited bool) {
	if cq.err != nil || cq.dead {
		return
	}
	if cq.count == len(cq.ring) {
		cq.err = fmt.Errorf("cq: a completion was lost: %w", fullError("completion queue", "depth", len(cq.ring), ErrCQOverrun))
		cq.ctx.postEvent(AsyncEvent{Type: EventCQErr, CQ: cq})
		cq.wakeWaiters()
		cq.ctx.completed()
		for _, qp := range cq.qps {
			qp.fatal(EventQPFatal)
		}
		return
	}
	i := cq.head + cq.count
	if i >= len(cq.ring) {
		i -= len(cq.ring)
	}
	cq.ring[i] = w
	cq.count++
	cq.wakeWaiters()
	cq.ctx.completed()
	if cq.armed && (!cq.solOnly || solicited || w.Status != WCSuccess) {
		cq.armed = false
		cq.ctx.wakeWaiter(cq.events)
	}
}

// attach and detach record which QPs use the CQ (for overrun handling).
func (cq *CQ) attach(qp *QP) {
	cq.refs++
	cq.qps = append(cq.qps, qp)
}

func (cq *CQ) detach(qp *QP) {
	cq.refs--
	for i, q := range cq.qps {
		if q == qp {
			cq.qps = append(cq.qps[:i], cq.qps[i+1:]...)
			break
		}
	}
}

// signal does a non-blocking send on a capacity-one channel.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
