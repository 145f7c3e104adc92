package ibtransport

import "fmt"

// PD is a protection domain (IBTA Vol1 10.2.3): QPs, MRs, MWs and SRQs of one PD
// work together; an R_Key or L_Key of another PD is refused.
type PD struct {
	ctx  *Context
	refs int // objects created in it
	dead bool
}

// AllocPD allocates a protection domain (ibv_alloc_pd).
func (c *Context) AllocPD() *PD {
	return &PD{ctx: c}
}

// Context returns the Context the PD belongs to.
func (pd *PD) Context() *Context { return pd.ctx }

// Dealloc frees the PD (ibv_dealloc_pd). It fails with ErrBusy while MRs, MWs,
// SRQs or QPs of the PD exist.
func (pd *PD) Dealloc() error {
	c := pd.ctx
	c.mu.Lock()
	defer c.mu.Unlock()
	if pd.dead {
		return fmt.Errorf("dealloc pd: %w", ErrDestroyed)
	}
	if pd.refs > 0 {
		return fmt.Errorf("dealloc pd: %d objects still use it: %w", pd.refs, ErrBusy)
	}
	pd.dead = true
	return nil
}
