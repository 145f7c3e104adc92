package ibtransport_test

import (
	"bytes"
	"errors"
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/ibtransport/ibtest"
)

// TestFastRegisterFailures: a REG_MR work request that cannot be executed
// completes with IBV_WC_LOC_QP_OP_ERR (rxe: rxe_reg_fast_mr returns -EINVAL and
// rxe_do_local_ops reports IB_WC_LOC_QP_OP_ERR), moves the RC QP to ERR (the
// WR posted after it is flushed), and leaves the region as it was: same keys,
// same length. A region still valid, a buffer over the region's maximum length
// and access rights ibv_reg_mr would refuse (remote write or atomic without local
// write, unknown bits) are refused, as are regions that are not fast-register
// regions of the QP's PD. A buffer of exactly the maximum length registers.
func TestFastRegisterFailures(t *testing.T) {
	const maxLen = 256
	type setup func(t *testing.T, p *ibtest.Pair) (*ib.MR, ib.RegMRInfo)
	fresh := func(access ib.Access, n int) setup {
		return func(t *testing.T, p *ibtest.Pair) (*ib.MR, ib.RegMRInfo) {
			mr, err := p.B.PD.AllocMR(maxLen)
			if err != nil {
				t.Fatal(err)
			}
			return mr, ib.RegMRInfo{MR: mr, Buf: make([]byte, n), Access: access, Key: 0x5c}
		}
	}
	cases := []struct {
		name  string
		setup setup
		ok    bool
	}{
		{"exactly the maximum length", fresh(ib.AccessLocalWrite|ib.AccessRemoteWrite, maxLen), true},
		{"one byte over the maximum length", fresh(ib.AccessLocalWrite, maxLen+1), false},
		{"remote write without local write", fresh(ib.AccessRemoteWrite, 64), false},
		{"remote atomic without local write", fresh(ib.AccessRemoteRead|ib.AccessRemoteAtomic, 64), false},
		{"unknown access bit", fresh(ib.AccessLocalWrite|1<<20, 64), false},
		{"region still valid", func(t *testing.T, p *ibtest.Pair) (*ib.MR, ib.RegMRInfo) {
			mr, err := p.B.PD.AllocMR(maxLen)
			if err != nil {
				t.Fatal(err)
			}
			post(t, p.B.QP, ib.SendWR{WRID: 100, Opcode: ib.WRRegMR, Signaled: true,
				RegMR: ib.RegMRInfo{MR: mr, Buf: make([]byte, 100), Access: ib.AccessLocalWrite, Key: 0x42}})
			wantWC(t, complete(t, p, p.B.CQ, 1)[0], 100, ib.WCRegMR, ib.WCSuccess)
			return mr, ib.RegMRInfo{MR: mr, Buf: make([]byte, 50), Access: ib.AccessLocalWrite, Key: 0x43}
		}, false},
		{"regular region", func(t *testing.T, p *ibtest.Pair) (*ib.MR, ib.RegMRInfo) {
			mr := regMR(t, p.B.PD, make([]byte, 64), ib.AccessLocalWrite)
			return mr, ib.RegMRInfo{MR: mr, Buf: make([]byte, 64), Access: ib.AccessLocalWrite, Key: 1}
		}, false},
		{"region of another PD", func(t *testing.T, p *ibtest.Pair) (*ib.MR, ib.RegMRInfo) {
			mr, err := p.B.Ctx.AllocPD().AllocMR(maxLen)
			if err != nil {
				t.Fatal(err)
			}
			return mr, ib.RegMRInfo{MR: mr, Buf: make([]byte, 64), Access: ib.AccessLocalWrite, Key: 1}
		}, false},
		{"region of another context", func(t *testing.T, p *ibtest.Pair) (*ib.MR, ib.RegMRInfo) {
			mr, err := p.A.PD.AllocMR(maxLen)
			if err != nil {
				t.Fatal(err)
			}
			return mr, ib.RegMRInfo{MR: mr, Buf: make([]byte, 64), Access: ib.AccessLocalWrite, Key: 1}
		}, false},
		{"deregistered region", func(t *testing.T, p *ibtest.Pair) (*ib.MR, ib.RegMRInfo) {
			mr, err := p.B.PD.AllocMR(maxLen)
			if err != nil {
				t.Fatal(err)
			}
			if err := mr.Dereg(); err != nil {
				t.Fatal(err)
			}
			return mr, ib.RegMRInfo{MR: mr, Buf: make([]byte, 64), Access: ib.AccessLocalWrite, Key: 1}
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newRC(t)
			mr, info := c.setup(t, p)
			key, n, access := mr.LKey(), mr.Len(), mr.Access()
			post(t, p.B.QP, ib.SendWR{WRID: 1, Opcode: ib.WRRegMR, Signaled: true, RegMR: info},
				ib.SendWR{WRID: 2, Opcode: ib.WRSend, Signaled: true})
			if c.ok {
				wantWC(t, complete(t, p, p.B.CQ, 1)[0], 1, ib.WCRegMR, ib.WCSuccess)
				if mr.RKey() != key&^0xff|0x5c || mr.Len() != len(info.Buf) || p.B.QP.State() != ib.QPStateRTS {
					t.Fatalf("registered: key %#x len %d state %s", mr.RKey(), mr.Len(), p.B.QP.State())
				}
				return
			}
			wcs := complete(t, p, p.B.CQ, 2)
			if wc := wcs[0]; wc.WRID != 1 || wc.Status != ib.WCLocQPOpErr || wc.Opcode != ib.WCRegMR {
				t.Fatalf("REG_MR completed %v, want IBV_WC_LOC_QP_OP_ERR", wc)
			}
			wantWC(t, wcs[1], 2, ib.WCSend, ib.WCWRFlushErr)
			if s := p.B.QP.State(); s != ib.QPStateErr {
				t.Fatalf("QP in %s after a failed REG_MR, want ERR", s)
			}
			if mr.LKey() != key || mr.RKey() != key || mr.Len() != n || mr.Access() != access {
				t.Fatalf("failed REG_MR changed the region: key %#x→%#x, len %d→%d, access %s→%s",
					key, mr.LKey(), n, mr.Len(), access, mr.Access())
			}
			noMore(t, p, p.B.CQ)
		})
	}
}

// extraRC creates one more RC QP on each side of p, with CQs of their own, in the
// given PDs (nil: the pair's), and connects them.
func extraRC(t *testing.T, p *ibtest.Pair, pdA, pdB *ib.PD) (a, b *ibtest.Endpoint) {
	t.Helper()
	mk := func(ep *ibtest.Endpoint, pd *ib.PD) *ibtest.Endpoint {
		if pd == nil {
			pd = ep.PD
		}
		cq, err := ep.Ctx.CreateCQ(256)
		if err != nil {
			t.Fatal(err)
		}
		qp, err := ep.Ctx.CreateQP(pd, ib.QPInitAttr{Type: ib.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: ib.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2}})
		if err != nil {
			t.Fatal(err)
		}
		return &ibtest.Endpoint{Ctx: ep.Ctx, PD: pd, CQ: cq, QP: qp}
	}
	a, b = mk(p.A, pdA), mk(p.B, pdB)
	if err := ibtest.Connect(a.QP, b.QP, ibtest.DefaultConnOptions()); err != nil {
		t.Fatal(err)
	}
	return a, b
}

// bindType2 binds a type 2 window through qp with key byte kb and waits for the
// completion on cq.
func bindType2(t *testing.T, p *ibtest.Pair, qp *ib.QP, cq *ib.CQ, mw *ib.MW, kb byte, mr *ib.MR, off, n int, a ib.Access) uint32 {
	t.Helper()
	rkey := mw.RKey()&^0xff | uint32(kb)
	post(t, qp, ib.SendWR{WRID: 77, Opcode: ib.WRBindMW, Signaled: true, Bind: ib.MWBindInfo{
		MW: mw, RKey: rkey, MR: mr, Addr: mr.Addr() + uint64(off), Length: uint64(n), Access: a}})
	wantWC(t, complete(t, p, cq, 1)[0], 77, ib.WCBindMW, ib.WCSuccess)
	return rkey
}

func write(t *testing.T, p *ibtest.Pair, from *ibtest.Endpoint, wrid uint64, src *ib.MR, n int, addr uint64, rkey uint32, want ib.WCStatus) {
	t.Helper()
	post(t, from.QP, ib.SendWR{WRID: wrid, Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{src.SGE(0, n)}, RemoteAddr: addr, RKey: rkey, Signaled: true})
	wantWC(t, complete(t, p, from.CQ, 1)[0], wrid, ib.WCRDMAWrite, want)
}

// TestMWType2OtherQP: a type 2 window bound through one QP admits remote access
// only through that QP (IBTA 10.6.7.2.2, type 2B: the window is associated with
// the QP). A WRITE through another QP of the same PD is a remote access error
// and touches nothing; the window stays bound and usable through its own QP.
func TestMWType2OtherQP(t *testing.T) {
	p := newRC(t)
	a2, b2 := extraRC(t, p, nil, nil)
	region := newGuarded(t, p.B.PD, 256, ib.AccessLocalWrite|ib.AccessMWBind)
	mw, err := p.B.PD.AllocMW(ib.MWType2)
	if err != nil {
		t.Fatal(err)
	}
	rkey := bindType2(t, p, b2.QP, b2.CQ, mw, 0x77, region.mr, 0, 256, ib.AccessRemoteWrite|ib.AccessRemoteRead)
	src1 := regMR(t, p.A.PD, pattern(64, 1), 0)
	src2 := regMR(t, p.A.PD, pattern(64, 2), 0)
	write(t, p, a2, 1, src1, 64, region.mr.Addr(), rkey, ib.WCSuccess)
	write(t, p, p.A, 2, src2, 64, region.mr.Addr(), rkey, ib.WCRemAccessErr)
	if !bytes.Equal(region.buf[:64], pattern(64, 1)) {
		t.Fatal("the WRITE through the other QP changed the memory")
	}
	if p.B.QP.State() != ib.QPStateErr || b2.QP.State() != ib.QPStateRTS {
		t.Fatalf("states %s (other QP) and %s (bound QP), want ERR and RTS", p.B.QP.State(), b2.QP.State())
	}
	// The bound QP still reaches the window.
	write(t, p, a2, 3, src2, 64, region.mr.Addr()+64, rkey, ib.WCSuccess)
	if !bytes.Equal(region.buf[64:128], pattern(64, 2)) {
		t.Fatal("data differs")
	}
	region.check(t)
}

// TestMWType2InvalidateOtherQP: a SEND with invalidate that arrives on a QP other
// than the one a type 2 window is bound through does not invalidate it: the
// requester gets IBV_WC_REM_INV_REQ_ERR, the receive IBV_WC_REM_INV_REQ_ERR, and
// the window still works through its QP, where the same invalidation succeeds.
func TestMWType2InvalidateOtherQP(t *testing.T) {
	p := newRC(t)
	a2, b2 := extraRC(t, p, nil, nil)
	region := newGuarded(t, p.B.PD, 128, ib.AccessLocalWrite|ib.AccessMWBind)
	mw, _ := p.B.PD.AllocMW(ib.MWType2)
	rkey := bindType2(t, p, b2.QP, b2.CQ, mw, 0x21, region.mr, 0, 128, ib.AccessRemoteWrite)
	recv := regMR(t, p.B.PD, make([]byte, 16), ib.AccessLocalWrite)
	postRecv(t, p.B.QP, ib.RecvWR{WRID: 10, SGL: []ib.SGE{recv.SGE(0, 16)}})
	post(t, p.A.QP, ib.SendWR{WRID: 1, Opcode: ib.WRSendWithInv, InvalidateRKey: rkey, Signaled: true})
	wantWC(t, complete(t, p, p.A.CQ, 1)[0], 1, ib.WCSend, ib.WCRemInvReqErr)
	wantWC(t, complete(t, p, p.B.CQ, 1)[0], 10, ib.WCRecv, ib.WCRemInvReqErr)
	src := regMR(t, p.A.PD, pattern(128, 4), 0)
	write(t, p, a2, 2, src, 128, region.mr.Addr(), rkey, ib.WCSuccess)
	// Through the bound QP the invalidation works, and the key is dead after it.
	postRecv(t, b2.QP, ib.RecvWR{WRID: 11, SGL: []ib.SGE{recv.SGE(0, 16)}})
	post(t, a2.QP, ib.SendWR{WRID: 3, Opcode: ib.WRSendWithInv, InvalidateRKey: rkey, Signaled: true})
	wantWC(t, complete(t, p, a2.CQ, 1)[0], 3, ib.WCSend, ib.WCSuccess)
	if wc := complete(t, p, b2.CQ, 1)[0]; wc.Flags&ib.WCFlagWithInv == 0 || wc.InvalidatedRKey != rkey {
		t.Fatalf("%v", wc)
	}
	write(t, p, a2, 4, src, 8, region.mr.Addr(), rkey, ib.WCRemAccessErr)
	if !bytes.Equal(region.buf, pattern(128, 4)) {
		t.Fatal("memory differs")
	}
	region.check(t)
}

// TestMWOtherPD: a window and a region must belong to the binding QP's PD
// (IBTA 10.6.7.3): a window or region of another PD fails the bind with
// IBV_WC_MW_BIND_ERR (QP to ERR); and a window bound in one PD is refused to a
// QP of another PD with a remote access error, while its own PD's QP uses it.
func TestMWOtherPD(t *testing.T) {
	for _, c := range []struct {
		name     string
		typ      ib.MWType
		otherMW  bool
		otherMR  bool
		noMWBind bool
	}{
		{"type 1 window of another PD", ib.MWType1, true, false, false},
		{"type 2 window of another PD", ib.MWType2, true, false, false},
		{"type 1 region of another PD", ib.MWType1, false, true, false},
		{"type 2 region of another PD", ib.MWType2, false, true, false},
		{"type 2 region without MW_BIND", ib.MWType2, false, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newRC(t)
			other := p.B.Ctx.AllocPD()
			mwPD, mrPD := p.B.PD, p.B.PD
			if c.otherMW {
				mwPD = other
			}
			if c.otherMR {
				mrPD = other
			}
			access := ib.AccessLocalWrite | ib.AccessMWBind
			if c.noMWBind {
				access = allAccess
			}
			region := regMR(t, mrPD, make([]byte, 64), access)
			mw, err := mwPD.AllocMW(c.typ)
			if err != nil {
				t.Fatal(err)
			}
			old := mw.RKey()
			b := ib.MWBindInfo{MR: region, Addr: region.Addr(), Length: 64, Access: ib.AccessRemoteWrite}
			if c.typ == ib.MWType1 {
				if _, err := p.B.QP.BindMW(mw, 1, true, b); err != nil {
					t.Fatal(err)
				}
			} else {
				b.MW, b.RKey = mw, old&^0xff|(old+1)&0xff
				post(t, p.B.QP, ib.SendWR{WRID: 1, Opcode: ib.WRBindMW, Signaled: true, Bind: b})
			}
			wantWC(t, complete(t, p, p.B.CQ, 1)[0], 1, ib.WCBindMW, ib.WCMWBindErr)
			if p.B.QP.State() != ib.QPStateErr || mw.RKey() != old {
				t.Fatalf("state %s, key %#x→%#x", p.B.QP.State(), old, mw.RKey())
			}
			if err := region.Dereg(); err != nil {
				t.Fatalf("a failed bind left the region busy: %v", err)
			}
		})
	}

	t.Run("remote access through another PD's QP", func(t *testing.T) {
		p := newRC(t)
		other := p.B.Ctx.AllocPD()
		a2, b2 := extraRC(t, p, nil, other)
		region := newGuarded(t, other, 64, ib.AccessLocalWrite|ib.AccessMWBind)
		mw, _ := other.AllocMW(ib.MWType1)
		rkey, err := b2.QP.BindMW(mw, 5, true, ib.MWBindInfo{MR: region.mr, Addr: region.mr.Addr(), Length: 64, Access: ib.AccessRemoteWrite})
		if err != nil {
			t.Fatal(err)
		}
		wantWC(t, complete(t, p, b2.CQ, 1)[0], 5, ib.WCBindMW, ib.WCSuccess)
		src := regMR(t, p.A.PD, pattern(64, 6), 0)
		write(t, p, p.A, 1, src, 64, region.mr.Addr(), rkey, ib.WCRemAccessErr)
		if !bytes.Equal(region.buf, make([]byte, 64)) {
			t.Fatal("memory changed")
		}
		write(t, p, a2, 2, src, 64, region.mr.Addr(), rkey, ib.WCSuccess)
		if !bytes.Equal(region.buf, pattern(64, 6)) {
			t.Fatal("data differs")
		}
		region.check(t)
	})
}

// TestMWType1ZeroLengthUnbind: binding a type 1 window with length 0 unbinds it
// (IBTA 10.6.7.3.1): the bind succeeds with a new key, the region is no longer
// busy, and neither the old nor the new key admits a WRITE.
func TestMWType1ZeroLengthUnbind(t *testing.T) {
	for _, key := range []string{"old key", "new key"} {
		t.Run(key, func(t *testing.T) {
			p := newRC(t)
			region := newGuarded(t, p.B.PD, 64, ib.AccessLocalWrite|ib.AccessMWBind)
			mw, _ := p.B.PD.AllocMW(ib.MWType1)
			k1, err := p.B.QP.BindMW(mw, 1, true, ib.MWBindInfo{MR: region.mr, Addr: region.mr.Addr(), Length: 64, Access: ib.AccessRemoteWrite})
			if err != nil {
				t.Fatal(err)
			}
			wantWC(t, complete(t, p, p.B.CQ, 1)[0], 1, ib.WCBindMW, ib.WCSuccess)
			src := regMR(t, p.A.PD, pattern(64, 7), 0)
			write(t, p, p.A, 1, src, 32, region.mr.Addr(), k1, ib.WCSuccess)
			if err := region.mr.Dereg(); !errors.Is(err, ib.ErrBusy) {
				t.Fatalf("dereg with a bound window: %v", err)
			}
			k2, err := p.B.QP.BindMW(mw, 2, true, ib.MWBindInfo{})
			if err != nil {
				t.Fatal(err)
			}
			wantWC(t, complete(t, p, p.B.CQ, 1)[0], 2, ib.WCBindMW, ib.WCSuccess)
			if k2 == k1 || k2>>8 != k1>>8 || mw.RKey() != k2 || p.B.QP.State() != ib.QPStateRTS {
				t.Fatalf("keys %#x→%#x (window %#x), state %s", k1, k2, mw.RKey(), p.B.QP.State())
			}
			use := k1
			if key == "new key" {
				use = k2
			}
			write(t, p, p.A, 2, src, 8, region.mr.Addr()+32, use, ib.WCRemAccessErr)
			if !bytes.Equal(region.buf[:32], pattern(32, 7)) || !bytes.Equal(region.buf[32:], make([]byte, 32)) {
				t.Fatal("the WRITE through the unbound window changed the memory")
			}
			region.check(t)
			if err := region.mr.Dereg(); err != nil {
				t.Fatalf("dereg after the unbind: %v", err)
			}
		})
	}
}

// TestMWType2DestroyQP: destroying the QP a type 2 window is bound through
// invalidates the window: its region is no longer busy, and the window (which a
// type 2 bind refuses while valid) can be bound again through another QP, whose
// peer then writes through it.
func TestMWType2DestroyQP(t *testing.T) {
	p := newRC(t)
	a2, b2 := extraRC(t, p, nil, nil)
	r1 := newGuarded(t, p.B.PD, 64, ib.AccessLocalWrite|ib.AccessMWBind)
	r2 := newGuarded(t, p.B.PD, 64, ib.AccessLocalWrite|ib.AccessMWBind)
	mw, _ := p.B.PD.AllocMW(ib.MWType2)
	k1 := bindType2(t, p, b2.QP, b2.CQ, mw, 0x31, r1.mr, 0, 64, ib.AccessRemoteWrite)
	src := regMR(t, p.A.PD, pattern(64, 9), 0)
	write(t, p, a2, 1, src, 64, r1.mr.Addr(), k1, ib.WCSuccess)
	if err := r1.mr.Dereg(); !errors.Is(err, ib.ErrBusy) {
		t.Fatalf("dereg with a bound window: %v", err)
	}
	if err := b2.QP.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := r1.mr.Dereg(); err != nil {
		t.Fatalf("dereg after the window's QP was destroyed: %v", err)
	}
	k2 := bindType2(t, p, p.B.QP, p.B.CQ, mw, 0x32, r2.mr, 0, 64, ib.AccessRemoteWrite)
	write(t, p, p.A, 2, src, 64, r2.mr.Addr(), k2, ib.WCSuccess)
	if !bytes.Equal(r2.buf, pattern(64, 9)) {
		t.Fatal("data differs")
	}
	r2.check(t)
}
