package ibtransport

import "fmt"

// recvWQE is a posted receive work request.
type recvWQE struct {
	wrid   uint64
	sgl    []SGE // points into sgeBuf
	sgeBuf []SGE
	length uint64
}

// curRecv is the receive WQE a message is being placed into, taken from the RQ
// or the SRQ at the message's first packet (IB SEND First/Only) or segment
// (iWARP): verbs state shared by the IB responder and an external transport
// (docs/verbs-split.md, step 1).
type curRecv struct {
	have bool    // wqe holds a receive WQE
	wqe  recvWQE // its copy; wqe.sgeBuf is allocated once, at QP creation
	off  uint64  // octets placed so far
}

// recvQueue is a ring of receive WQEs: a QP's receive queue or an SRQ.
type recvQueue struct {
	slots []recvWQE
	head  uint64 // oldest posted
	tail  uint64 // next free
}

func newRecvQueue(depth, maxSGE int) recvQueue {
	q := recvQueue{slots: make([]recvWQE, depth)}
	for i := range q.slots {
		q.slots[i].sgeBuf = make([]SGE, maxSGE)
	}
	return q
}

func (q *recvQueue) count() int { return int(q.tail - q.head) }
func (q *recvQueue) full() bool { return q.count() == len(q.slots) }

// post copies wr into the next slot; the caller checked that the queue has room.
func (q *recvQueue) post(wr *RecvWR) {
	w := &q.slots[q.tail%uint64(len(q.slots))]
	w.wrid = wr.WRID
	w.sgl = w.sgeBuf[:copy(w.sgeBuf, wr.SGL)]
	w.length = sglLength(wr.SGL)
	q.tail++
}

// pop copies the oldest WQE into dst (which owns its SGE storage) and removes it.
func (q *recvQueue) pop(dst *recvWQE) bool {
	if q.head == q.tail {
		return false
	}
	w := &q.slots[q.head%uint64(len(q.slots))]
	copyRecvWQE(dst, w)
	q.head++
	return true
}

// clear drops every WQE without completing it (modify to RESET).
func (q *recvQueue) clear() { q.head = q.tail }

func copyRecvWQE(dst, src *recvWQE) {
	if cap(dst.sgeBuf) < len(src.sgl) {
		dst.sgeBuf = make([]SGE, len(src.sgl))
	}
	dst.wrid = src.wrid
	dst.sgl = dst.sgeBuf[:copy(dst.sgeBuf[:cap(dst.sgeBuf)], src.sgl)]
	dst.length = src.length
}

// SRQInitAttr sets up a shared receive queue (struct ibv_srq_init_attr).
type SRQInitAttr struct {
	// MaxWR is the number of receive WRs it holds.
	MaxWR int
	// MaxSGE is the longest SGL of its WRs.
	MaxSGE int
	// Limit arms the limit event: when fewer than Limit WRs remain, an
	// EventSRQLimitReached is posted and the limit disarms. 0 leaves it unarmed.
	Limit int
}

// SRQ is a shared receive queue (ibv_srq): receive WRs that any QP attached to it
// consumes.
type SRQ struct {
	ctx    *Context
	pd     *PD
	rq     recvQueue
	maxSGE int
	limit  int
	refs   int
	dead   bool
}

// CreateSRQ creates a shared receive queue in pd (ibv_create_srq).
func (c *Context) CreateSRQ(pd *PD, attr SRQInitAttr) (*SRQ, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if attr.MaxWR <= 0 {
		return nil, fmt.Errorf("create srq: MaxWR %d not in 1..%d: %w", attr.MaxWR, c.cfg.MaxSRQWR, ErrInvalidArgument)
	}
	if attr.MaxWR > c.cfg.MaxSRQWR {
		return nil, fmt.Errorf("create srq: %w", tooLargeError("SRQ depth", "MaxSRQWR", uint64(attr.MaxWR), uint64(c.cfg.MaxSRQWR)))
	}
	if attr.MaxSGE <= 0 {
		return nil, fmt.Errorf("create srq: MaxSGE %d not in 1..%d: %w", attr.MaxSGE, c.cfg.MaxSRQSGE, ErrInvalidArgument)
	}
	if attr.MaxSGE > c.cfg.MaxSRQSGE {
		return nil, fmt.Errorf("create srq: %w", tooLargeError("SRQ SGL length", "MaxSRQSGE", uint64(attr.MaxSGE), uint64(c.cfg.MaxSRQSGE)))
	}
	if attr.Limit < 0 || attr.Limit > attr.MaxWR {
		return nil, fmt.Errorf("create srq: Limit %d not in 0..%d: %w", attr.Limit, attr.MaxWR, ErrInvalidArgument)
	}
	if pd.dead {
		return nil, fmt.Errorf("create srq: pd: %w", ErrDestroyed)
	}
	if c.numSRQ >= c.cfg.MaxSRQ {
		return nil, fmt.Errorf("create srq: %d SRQs exist: %w", c.numSRQ, fullError("SRQ table", "MaxSRQ", c.cfg.MaxSRQ, ErrNoResources))
	}
	c.numSRQ++
	pd.refs++
	return &SRQ{ctx: c, pd: pd, rq: newRecvQueue(attr.MaxWR, attr.MaxSGE), maxSGE: attr.MaxSGE, limit: attr.Limit}, nil
}

// PostRecv posts receive WRs (ibv_post_srq_recv).
func (s *SRQ) PostRecv(wrs ...RecvWR) error {
	c := s.ctx
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range wrs {
		wr := &wrs[i]
		if s.dead {
			return &PostError{Index: i, WRID: wr.WRID, Err: fmt.Errorf("post srq recv: %w", ErrDestroyed)}
		}
		if err := checkRecvWR(wr, "MaxSGE", s.maxSGE); err != nil {
			return &PostError{Index: i, WRID: wr.WRID, Err: fmt.Errorf("post srq recv: %w", err)}
		}
		if s.rq.full() {
			return &PostError{Index: i, WRID: wr.WRID, Err: fmt.Errorf("post srq recv: %w", fullError("shared receive queue", "MaxWR", len(s.rq.slots), ErrQueueFull))}
		}
		s.rq.post(wr)
	}
	return nil
}

// ArmLimit sets the limit event threshold (ibv_modify_srq with IBV_SRQ_LIMIT).
func (s *SRQ) ArmLimit(limit int) error {
	c := s.ctx
	c.mu.Lock()
	defer c.mu.Unlock()
	if limit < 0 || limit > len(s.rq.slots) {
		return fmt.Errorf("modify srq: limit %d not in 0..%d: %w", limit, len(s.rq.slots), ErrInvalidArgument)
	}
	s.limit = limit
	return nil
}

// Len returns the number of posted receive WRs not yet consumed.
func (s *SRQ) Len() int {
	s.ctx.mu.Lock()
	defer s.ctx.mu.Unlock()
	return s.rq.count()
}

// Destroy destroys the SRQ (ibv_destroy_srq). It fails with ErrBusy while QPs use it.
func (s *SRQ) Destroy() error {
	c := s.ctx
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.dead {
		return fmt.Errorf("destroy srq: %w", ErrDestroyed)
	}
	if s.refs > 0 {
		return fmt.Errorf("destroy srq: %d QPs use it: %w", s.refs, ErrBusy)
	}
	s.dead = true
	c.numSRQ--
	s.pd.refs--
	return nil
}

// take pops the oldest WQE into dst, posting the limit event when the queue falls
// below the armed limit (IBTA 10.2.9: the event fires once per arming).
func (s *SRQ) take(dst *recvWQE) bool {
	if !s.rq.pop(dst) {
		return false
	}
	if s.limit > 0 && s.rq.count() < s.limit {
		s.limit = 0
		s.ctx.postEvent(AsyncEvent{Type: EventSRQLimitReached, SRQ: s})
	}
	return true
}
