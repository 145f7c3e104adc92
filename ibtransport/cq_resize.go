package ibtransport

import "fmt"

// Resize changes the number of completions the CQ holds (ibv_resize_cq), keeping
// the completions waiting, in order. It refuses what rxe refuses (rxe_cq_chk_attr):
// a depth out of 1..MaxCQE, or below the completions waiting.
func (cq *CQ) Resize(depth int) error {
	c := cq.ctx
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case cq.dead:
		return fmt.Errorf("resize cq: %w", ErrDestroyed)
	case depth <= 0:
		return fmt.Errorf("resize cq: depth %d not in 1..%d: %w", depth, c.cfg.MaxCQE, ErrInvalidArgument)
	case depth > c.cfg.MaxCQE:
		return fmt.Errorf("resize cq: %w", tooLargeError("CQ depth", "MaxCQE", uint64(depth), uint64(c.cfg.MaxCQE)))
	case depth < cq.count:
		return fmt.Errorf("resize cq: depth %d below the %d completions waiting: %w", depth, cq.count, ErrInvalidArgument)
	}
	ring := make([]WC, depth)
	for i := range cq.count {
		ring[i] = cq.ring[(cq.head+i)%len(cq.ring)]
	}
	cq.ring, cq.head = ring, 0
	return nil
}
