package ibtransport

import "fmt"

// Resize changes the SRQ's depth to maxWR (ibv_modify_srq with IBV_SRQ_MAX_WR,
// which a device offering IBV_DEVICE_SRQ_RESIZE accepts, as rxe does). The
// WRs already posted stay, in order. As rxe (rxe_srq_chk_attr,
// rxe_queue_resize), it refuses a depth of 0 or beyond MaxSRQWR, one below
// the number of WRs posted, and one below the armed limit: ErrInvalidArgument.
func (s *SRQ) Resize(maxWR int) error {
	c := s.ctx
	c.mu.Lock()
	defer c.mu.Unlock()
	switch n := s.rq.count(); {
	case s.dead:
		return fmt.Errorf("resize srq: %w", ErrDestroyed)
	case maxWR <= 0:
		return fmt.Errorf("resize srq: MaxWR %d not in 1..%d: %w", maxWR, c.cfg.MaxSRQWR, ErrInvalidArgument)
	case maxWR > c.cfg.MaxSRQWR:
		return fmt.Errorf("resize srq: %w", tooLargeError("SRQ depth", "MaxSRQWR", uint64(maxWR), uint64(c.cfg.MaxSRQWR)))
	case maxWR < n:
		return fmt.Errorf("resize srq: MaxWR %d below the %d WRs posted: %w", maxWR, n, ErrInvalidArgument)
	case maxWR < s.limit:
		return fmt.Errorf("resize srq: MaxWR %d below the armed limit %d: %w", maxWR, s.limit, ErrInvalidArgument)
	}
	q := newRecvQueue(maxWR, s.maxSGE)
	for s.rq.count() > 0 {
		s.rq.pop(&q.slots[q.tail])
		q.tail++
	}
	s.rq = q
	return nil
}

// Depth returns the SRQ's depth: the most WRs it holds.
func (s *SRQ) Depth() int {
	s.ctx.mu.Lock()
	defer s.ctx.mu.Unlock()
	return len(s.rq.slots)
}
