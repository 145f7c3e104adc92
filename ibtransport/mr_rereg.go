package ibtransport

import "fmt"

// Rereg says what MR.Rereg changes; a field that is not flagged is kept.
type Rereg struct {
	// PD is the region's new protection domain (ChangePD).
	PD       *PD
	ChangePD bool
	// Buf is the region's new memory at the I/O virtual address IOVA
	// (ChangeTranslation).
	Buf               []byte
	IOVA              uint64
	ChangeTranslation bool
	// Access is the region's new access (ChangeAccess).
	Access       Access
	ChangeAccess bool
}

// Rereg changes the region in place (ibv_rereg_mr): its protection domain, its
// memory and address, its access. The L_Key and R_Key stay, as with rxe, so a
// peer that was given the R_Key goes on using it. Placements begun before
// (iWARP's direct writes) are settled first, as on Dereg. It fails, leaving
// the region as it was, with ErrBusy while memory windows are bound to it, and
// with ErrInvalidArgument for what RegMRAt refuses or a fast-register region.
func (mr *MR) Rereg(r Rereg) error {
	c := mr.ctx
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case mr.state == mrFreed:
		return fmt.Errorf("rereg mr: %w", ErrDestroyed)
	case mr.fast:
		return fmt.Errorf("rereg mr 0x%x: a fast-register region: %w", mr.lkey, ErrInvalidArgument)
	case mr.mws > 0:
		return fmt.Errorf("rereg mr 0x%x: %d memory windows bound: %w", mr.lkey, mr.mws, ErrBusy)
	}
	pd, access, buf, addr := mr.pd, mr.access, mr.buf, mr.addr
	if r.ChangePD {
		if r.PD == nil || r.PD.ctx != c {
			return fmt.Errorf("rereg mr 0x%x: pd of another context: %w", mr.lkey, ErrInvalidArgument)
		}
		if r.PD.dead {
			return fmt.Errorf("rereg mr 0x%x: pd: %w", mr.lkey, ErrDestroyed)
		}
		pd = r.PD
	}
	if r.ChangeAccess {
		if err := checkMRAccess(r.Access); err != nil {
			return fmt.Errorf("rereg mr 0x%x: %w", mr.lkey, err)
		}
		access = r.Access
	}
	if r.ChangeTranslation {
		buf, addr = r.Buf, r.IOVA
		if addr+uint64(len(buf)) < addr {
			return fmt.Errorf("rereg mr 0x%x: iova 0x%x length %d wraps the address space: %w", mr.lkey, addr, len(buf), ErrInvalidArgument)
		}
	}
	if access&AccessZeroBased != 0 && addr != 0 {
		return fmt.Errorf("rereg mr 0x%x: iova 0x%x with ZeroBased access: %w", mr.lkey, addr, ErrInvalidArgument)
	}
	mr.regs++
	c.settlePlacements() // nothing writes into the old memory once Rereg returns
	if mr.state == mrFreed || pd.dead {
		return fmt.Errorf("rereg mr 0x%x: %w", mr.lkey, ErrDestroyed) // destroyed while the placements settled
	}
	mr.pd.refs--
	pd.refs++
	mr.pd, mr.access, mr.buf, mr.addr = pd, access, buf, addr
	return nil
}
