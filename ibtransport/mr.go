package ibtransport

import (
	"fmt"
	"io"
)

// mrState is the state of a memory region's keys (IBTA 10.6.2, 11.2.8).
type mrState uint8

const (
	mrValid   mrState = iota // the keys may be used
	mrInvalid                // fast-register MR not (or no longer) registered
	mrFreed                  // deregistered
)

// MR is a registered memory region (ibv_mr): a byte slice of the application's
// memory, a virtual address range that stands for it on the wire, and the L_Key and
// R_Key that name it. All access checks are exact to the byte.
type MR struct {
	ctx    *Context
	pd     *PD
	buf    []byte // registered memory; len(buf) is the region's length
	addr   uint64 // I/O virtual address of buf[0]
	access Access
	lkey   uint32
	rkey   uint32
	state  mrState
	fast   bool   // allocated with AllocMR, registered by a REG_MR work request
	maxLen int    // fast-register MRs: the largest region a REG_MR may map
	mws    int    // memory windows bound to it
	regs   uint32 // times Rereg changed it: a placement begun before is stale
}

// RegMR registers buf for access (ibv_reg_mr). The region gets an address in the
// Context's virtual address space (or 0 with AccessZeroBased) and an L_Key; it gets
// an R_Key usable by peers if access grants a remote right. As in verbs, remote
// write or atomic access needs local write too.
func (pd *PD) RegMR(buf []byte, access Access) (*MR, error) {
	return pd.regMR(buf, 0, false, access)
}

// RegMRAt registers buf like RegMR but at the I/O virtual address iova the
// caller chooses (ibv_reg_mr_iova2): a C program's region sits at its own
// virtual address, which is what it puts in its work requests and sends to its
// peer. Regions may overlap in this address space: keys tell them apart. The
// range [iova, iova+len(buf)) must not wrap, and iova must be 0 with
// AccessZeroBased.
func (pd *PD) RegMRAt(buf []byte, iova uint64, access Access) (*MR, error) {
	if iova+uint64(len(buf)) < iova {
		return nil, fmt.Errorf("reg mr: iova 0x%x length %d wraps the address space: %w", iova, len(buf), ErrInvalidArgument)
	}
	if access&AccessZeroBased != 0 && iova != 0 {
		return nil, fmt.Errorf("reg mr: iova 0x%x with ZeroBased access: %w", iova, ErrInvalidArgument)
	}
	return pd.regMR(buf, iova, true, access)
}

// regMR registers buf at iova if at is set, else at an address allocVA picks.
func (pd *PD) regMR(buf []byte, iova uint64, at bool, access Access) (*MR, error) {
	c := pd.ctx
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := checkMRAccess(access); err != nil {
		return nil, fmt.Errorf("reg mr: %w", err)
	}
	if pd.dead {
		return nil, fmt.Errorf("reg mr: pd: %w", ErrDestroyed)
	}
	mr := &MR{ctx: c, pd: pd, buf: buf, access: access, state: mrValid}
	key, err := c.allocKey(keyEntry{mr: mr})
	if err != nil {
		return nil, fmt.Errorf("reg mr: %w", err)
	}
	mr.lkey, mr.rkey = key, key
	switch {
	case at:
		mr.addr = iova
	case access&AccessZeroBased == 0:
		mr.addr = c.allocVA(len(buf))
	}
	pd.refs++
	return mr, nil
}

// AllocMR allocates a fast-register memory region of at most maxLen bytes
// (ib_alloc_mr with IB_MR_TYPE_MEM_REG). It has keys but maps nothing until a
// WRRegMR work request registers memory into it; WRLocalInv or a SEND with
// invalidate make it invalid again.
func (pd *PD) AllocMR(maxLen int) (*MR, error) {
	c := pd.ctx
	c.mu.Lock()
	defer c.mu.Unlock()
	if maxLen <= 0 {
		return nil, fmt.Errorf("alloc mr: max length %d: %w", maxLen, ErrInvalidArgument)
	}
	if pd.dead {
		return nil, fmt.Errorf("alloc mr: pd: %w", ErrDestroyed)
	}
	mr := &MR{ctx: c, pd: pd, state: mrInvalid, fast: true, maxLen: maxLen}
	key, err := c.allocKey(keyEntry{mr: mr})
	if err != nil {
		return nil, fmt.Errorf("alloc mr: %w", err)
	}
	mr.lkey, mr.rkey = key, key
	pd.refs++
	return mr, nil
}

// checkMRAccess applies ibv_reg_mr's rule (IBTA 11.2.8.2): remote write and remote
// atomic access need local write; libibverbs fails with EINVAL otherwise.
func checkMRAccess(a Access) error {
	if a&^accessAll != 0 {
		return fmt.Errorf("access %s has unknown bits: %w", a, ErrInvalidArgument)
	}
	if a&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && a&AccessLocalWrite == 0 {
		return fmt.Errorf("access %s: remote write or atomic needs LocalWrite: %w", a, ErrInvalidArgument)
	}
	return nil
}

// Dereg deregisters the region (ibv_dereg_mr). It fails with ErrBusy while memory
// windows are bound to it. Afterwards its keys are refused by local and remote
// accesses alike.
func (mr *MR) Dereg() error {
	c := mr.ctx
	c.mu.Lock()
	defer c.mu.Unlock()
	if mr.state == mrFreed {
		return fmt.Errorf("dereg mr: %w", ErrDestroyed)
	}
	if mr.mws > 0 {
		return fmt.Errorf("dereg mr 0x%x: %d memory windows bound: %w", mr.lkey, mr.mws, ErrBusy)
	}
	mr.state = mrFreed
	c.freeKey(mr.lkey)
	mr.pd.refs--
	c.settlePlacements() // nothing writes into the region once Dereg returns
	return nil
}

// LKey returns the local key.
func (mr *MR) LKey() uint32 {
	mr.ctx.mu.Lock()
	defer mr.ctx.mu.Unlock()
	return mr.lkey
}

// RKey returns the remote key (equal to the local key, as in rxe).
func (mr *MR) RKey() uint32 {
	mr.ctx.mu.Lock()
	defer mr.ctx.mu.Unlock()
	return mr.rkey
}

// Addr returns the I/O virtual address of the region's first byte: what a peer puts
// in a RETH to reach it.
func (mr *MR) Addr() uint64 {
	mr.ctx.mu.Lock()
	defer mr.ctx.mu.Unlock()
	return mr.addr
}

// Len returns the region's length in bytes.
func (mr *MR) Len() int {
	mr.ctx.mu.Lock()
	defer mr.ctx.mu.Unlock()
	return len(mr.buf)
}

// Access returns the region's access rights.
func (mr *MR) Access() Access {
	mr.ctx.mu.Lock()
	defer mr.ctx.mu.Unlock()
	return mr.access
}

// Buf returns the registered memory.
func (mr *MR) Buf() []byte {
	mr.ctx.mu.Lock()
	defer mr.ctx.mu.Unlock()
	return mr.buf
}

// ReadAt copies the region's bytes from offset off into p (io.ReaderAt)
// under the Context's lock: how an application reads memory that a peer's
// RDMA WRITE may be changing (perftest polls a message's last byte or the
// receiver's credit word) without racing the transport, which writes under
// the same lock (RoCE: all of a WRITE; iWARP: the last bytes of each segment,
// Wire.WriteRemote).
func (mr *MR) ReadAt(p []byte, off int64) (int, error) {
	mr.ctx.mu.Lock()
	defer mr.ctx.mu.Unlock()
	if off < 0 {
		return 0, fmt.Errorf("mr 0x%x: read at offset %d: %w", mr.lkey, off, ErrInvalidArgument)
	}
	if off >= int64(len(mr.buf)) {
		return 0, io.EOF
	}
	n := copy(p, mr.buf[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// SGE returns a scatter/gather element for n bytes at offset off of the region.
func (mr *MR) SGE(off, n int) SGE {
	mr.ctx.mu.Lock()
	defer mr.ctx.mu.Unlock()
	return SGE{Addr: mr.addr + uint64(off), Length: uint32(n), LKey: mr.lkey}
}

// slice returns the bytes [va, va+n) of the region, or false if any of them is
// outside it. The arithmetic cannot overflow.
func (mr *MR) slice(va uint64, n uint64) ([]byte, bool) {
	if va < mr.addr {
		return nil, false
	}
	off := va - mr.addr
	size := uint64(len(mr.buf))
	if off > size || n > size-off {
		return nil, false
	}
	return mr.buf[off : off+n], true
}

// MWType is the type of a memory window (IBTA 10.6.7).
type MWType uint8

// Memory window types.
const (
	// MWType1 windows belong to a PD and are bound with QP.BindMW.
	MWType1 MWType = 1
	// MWType2 windows (type 2B) belong to a QP once bound with a WRBindMW work
	// request, and are invalidated by WRLocalInv or a SEND with invalidate.
	MWType2 MWType = 2
)

// MW is a memory window (ibv_mw): a remote-access view onto part of a memory region,
// with its own R_Key and rights.
type MW struct {
	ctx    *Context
	pd     *PD
	typ    MWType
	rkey   uint32
	state  mrState // mrValid = bound, mrInvalid = unbound/invalidated, mrFreed
	mr     *MR
	addr   uint64
	length uint64
	access Access
	qp     *QP // type 2: the QP it is bound through
}

// AllocMW allocates an unbound memory window (ibv_alloc_mw).
func (pd *PD) AllocMW(t MWType) (*MW, error) {
	c := pd.ctx
	c.mu.Lock()
	defer c.mu.Unlock()
	if t != MWType1 && t != MWType2 {
		return nil, fmt.Errorf("alloc mw: type %d: %w", t, ErrInvalidArgument)
	}
	if pd.dead {
		return nil, fmt.Errorf("alloc mw: pd: %w", ErrDestroyed)
	}
	mw := &MW{ctx: c, pd: pd, typ: t, state: mrInvalid}
	key, err := c.allocKey(keyEntry{mw: mw})
	if err != nil {
		return nil, fmt.Errorf("alloc mw: %w", err)
	}
	mw.rkey = key
	pd.refs++
	return mw, nil
}

// RKey returns the window's current remote key.
func (mw *MW) RKey() uint32 {
	mw.ctx.mu.Lock()
	defer mw.ctx.mu.Unlock()
	return mw.rkey
}

// Type returns the window's type.
func (mw *MW) Type() MWType { return mw.typ }

// Dealloc frees the window (ibv_dealloc_mw), unbinding it.
func (mw *MW) Dealloc() error {
	c := mw.ctx
	c.mu.Lock()
	defer c.mu.Unlock()
	if mw.state == mrFreed {
		return fmt.Errorf("dealloc mw: %w", ErrDestroyed)
	}
	mw.unbind()
	mw.state = mrFreed
	c.freeKey(mw.rkey)
	mw.pd.refs--
	c.settlePlacements()
	return nil
}

// unbind detaches the window from its region.
func (mw *MW) unbind() {
	if mw.mr != nil {
		mw.mr.mws--
		mw.mr = nil
	}
	mw.qp = nil
	mw.addr, mw.length, mw.access = 0, 0, 0
	if mw.state == mrValid {
		mw.state = mrInvalid
	}
}

// accessFault says why a memory key check failed.
type accessFault uint8

const (
	faultNone    accessFault = iota
	faultBadKey              // no such key, or its key byte differs
	faultInvalid             // the key's object is invalid (unregistered, invalidated, unbound)
	faultPD                  // the object belongs to another PD
	faultAccess              // the right is not granted
	faultBounds              // the range is outside the object
	faultQP                  // a type 2 window bound to another QP
)

var faultNames = [...]string{"none", "bad key", "invalid key", "other PD", "access right missing", "out of bounds", "window bound to another QP"}

func (f accessFault) String() string { return faultNames[f] }

// lookupRemote checks an R_Key for a remote access of n bytes at va needing want
// (IBTA 9.7.5.1 and 10.6.3 R_Key checks, 10.6.7 windows) and returns the memory.
// A zero-length access checks nothing (IBTA 9.7.5.1: the R_Key of a zero-length RDMA
// request is not validated).
func (c *Context) lookupRemote(qp *QP, rkey uint32, va uint64, n uint64, want Access) ([]byte, accessFault) {
	if n == 0 {
		return nil, faultNone
	}
	e, ok := c.keys[rkey>>8]
	if !ok {
		return nil, faultBadKey
	}
	switch {
	case e.mr != nil:
		mr := e.mr
		if mr.rkey != rkey {
			return nil, faultBadKey
		}
		if mr.state != mrValid {
			return nil, faultInvalid
		}
		if mr.pd != qp.pd {
			return nil, faultPD
		}
		if mr.access&want != want {
			return nil, faultAccess
		}
		mem, ok := mr.slice(va, n)
		if !ok {
			return nil, faultBounds
		}
		return mem, faultNone
	case e.mw != nil:
		mw := e.mw
		if mw.rkey != rkey {
			return nil, faultBadKey
		}
		if mw.state != mrValid || mw.mr == nil || mw.mr.state != mrValid {
			return nil, faultInvalid
		}
		if mw.pd != qp.pd {
			return nil, faultPD
		}
		if mw.typ == MWType2 && mw.qp != qp {
			return nil, faultQP
		}
		if mw.access&want != want {
			return nil, faultAccess
		}
		if va < mw.addr || va-mw.addr > mw.length || n > mw.length-(va-mw.addr) {
			return nil, faultBounds
		}
		mem, ok := mw.mr.slice(va, n)
		if !ok {
			return nil, faultBounds
		}
		return mem, faultNone
	}
	return nil, faultBadKey
}

// lookupLocal checks an L_Key for a local access of n bytes at addr by qp and
// returns the memory. write asks for local write access (IBTA 10.6.3.2: receive
// buffers and RDMA READ/atomic targets need it).
func (c *Context) lookupLocal(pd *PD, lkey uint32, addr uint64, n uint64, write bool) ([]byte, accessFault) {
	e, ok := c.keys[lkey>>8]
	if !ok || e.mr == nil {
		return nil, faultBadKey
	}
	mr := e.mr
	if mr.lkey != lkey {
		return nil, faultBadKey
	}
	if mr.state != mrValid {
		return nil, faultInvalid
	}
	if mr.pd != pd {
		return nil, faultPD
	}
	if write && mr.access&AccessLocalWrite == 0 {
		return nil, faultAccess
	}
	if n == 0 {
		return nil, faultNone
	}
	mem, ok := mr.slice(addr, n)
	if !ok {
		return nil, faultBounds
	}
	return mem, faultNone
}

// invalidateRemoteKey invalidates the object named by rkey on behalf of a SEND with
// invalidate received on qp (IBTA 9.4.1, 10.6.7): a fast-register MR or a
// type 2 window of qp's PD. Regular MRs and type 1 windows cannot be invalidated
// remotely.
func (c *Context) invalidateRemoteKey(qp *QP, rkey uint32) accessFault {
	e, ok := c.keys[rkey>>8]
	if !ok {
		return faultBadKey
	}
	switch {
	case e.mr != nil:
		mr := e.mr
		if mr.rkey != rkey {
			return faultBadKey
		}
		if !mr.fast || mr.state != mrValid {
			return faultInvalid
		}
		if mr.pd != qp.pd {
			return faultPD
		}
		if mr.mws > 0 {
			return faultInvalid
		}
		mr.state = mrInvalid
		return faultNone
	case e.mw != nil:
		mw := e.mw
		if mw.rkey != rkey {
			return faultBadKey
		}
		if mw.typ != MWType2 || mw.state != mrValid {
			return faultInvalid
		}
		if mw.pd != qp.pd {
			return faultPD
		}
		if mw.qp != qp {
			return faultQP
		}
		mw.unbind()
		return faultNone
	}
	return faultBadKey
}

// lookupRemoteKey checks an R_Key and rights without a range (FLUSH of a whole
// region, IBTA Annex A19 selectivity level 1).
func (c *Context) lookupRemoteKey(qp *QP, rkey uint32, want Access) (struct{}, accessFault) {
	e, ok := c.keys[rkey>>8]
	switch {
	case !ok:
		return struct{}{}, faultBadKey
	case e.mr != nil:
		mr := e.mr
		switch {
		case mr.rkey != rkey:
			return struct{}{}, faultBadKey
		case mr.state != mrValid:
			return struct{}{}, faultInvalid
		case mr.pd != qp.pd:
			return struct{}{}, faultPD
		case mr.access&want != want:
			return struct{}{}, faultAccess
		}
	case e.mw != nil:
		mw := e.mw
		switch {
		case mw.rkey != rkey:
			return struct{}{}, faultBadKey
		case mw.state != mrValid || mw.mr == nil:
			return struct{}{}, faultInvalid
		case mw.pd != qp.pd:
			return struct{}{}, faultPD
		case mw.typ == MWType2 && mw.qp != qp:
			return struct{}{}, faultQP
		case mw.access&want != want:
			return struct{}{}, faultAccess
		}
	}
	return struct{}{}, faultNone
}
