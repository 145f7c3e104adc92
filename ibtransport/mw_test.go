package ibtransport_test

import (
	"bytes"
	"errors"
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
)

// TestMWType1: a type 1 window exposes part of a region with its own rights.
func TestMWType1(t *testing.T) {
	for _, c := range []struct {
		name string
		off  int
		n    int
		want ib.WCStatus
	}{
		{"inside", 100, 100, ib.WCSuccess},
		{"one byte before", 99, 10, ib.WCRemAccessErr},
		{"one byte past", 191, 10, ib.WCRemAccessErr},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newRC(t)
			region := newGuarded(t, p.B.PD, 1000, ib.AccessLocalWrite|ib.AccessMWBind)
			mw, err := p.B.PD.AllocMW(ib.MWType1)
			if err != nil {
				t.Fatal(err)
			}
			old := mw.RKey()
			rkey, err := p.B.QP.BindMW(mw, 7, true, ib.MWBindInfo{MR: region.mr, Addr: region.mr.Addr() + 100, Length: 100, Access: ib.AccessRemoteWrite})
			if err != nil {
				t.Fatal(err)
			}
			wantWC(t, complete(t, p, p.B.CQ, 1)[0], 7, ib.WCBindMW, ib.WCSuccess)
			if rkey == old || rkey>>8 != old>>8 || mw.RKey() != rkey {
				t.Fatalf("rkey %#x, old %#x, now %#x", rkey, old, mw.RKey())
			}
			src := regMR(t, p.A.PD, pattern(100, 1), 0)
			post(t, p.A.QP, ib.SendWR{WRID: 1, Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{src.SGE(0, c.n)},
				RemoteAddr: region.mr.Addr() + uint64(c.off), RKey: rkey, Signaled: true})
			wantWC(t, complete(t, p, p.A.CQ, 1)[0], 1, ib.WCRDMAWrite, c.want)
			region.check(t)
			if c.want != ib.WCSuccess {
				if !bytes.Equal(region.buf, make([]byte, 1000)) {
					t.Fatal("memory changed")
				}
				return
			}
			if !bytes.Equal(region.buf[100:200], pattern(100, 1)) {
				t.Fatal("data differs")
			}
			// The window has no read right, and the region cannot be deregistered.
			if err := region.mr.Dereg(); !errors.Is(err, ib.ErrBusy) {
				t.Fatalf("dereg with a bound window: %v", err)
			}
			lmr := regMR(t, p.A.PD, make([]byte, 10), ib.AccessLocalWrite)
			post(t, p.A.QP, ib.SendWR{WRID: 2, Opcode: ib.WRRDMARead, SGL: []ib.SGE{lmr.SGE(0, 10)}, RemoteAddr: region.mr.Addr() + 100, RKey: rkey, Signaled: true})
			wantWC(t, complete(t, p, p.A.CQ, 1)[0], 2, ib.WCRDMARead, ib.WCRemAccessErr)
		})
	}
}

// TestMWType2Invalidate: a type 2 window is bound by a work request and
// invalidated by the peer's SEND with invalidate: the receive reports the key,
// and the window, which cannot be bound again while valid, can be bound again
// after the invalidation, with a new key that works. Binding it once more while
// it is bound fails with IBV_WC_MW_BIND_ERR and moves the QP to ERR.
func TestMWType2Invalidate(t *testing.T) {
	p := newRC(t)
	region := newGuarded(t, p.B.PD, 1000, ib.AccessLocalWrite|ib.AccessMWBind)
	mw, err := p.B.PD.AllocMW(ib.MWType2)
	if err != nil {
		t.Fatal(err)
	}
	rkey := mw.RKey()&^0xff | 0x5a
	post(t, p.B.QP, ib.SendWR{WRID: 1, Opcode: ib.WRBindMW, Signaled: true, Bind: ib.MWBindInfo{
		MW: mw, RKey: rkey, MR: region.mr, Addr: region.mr.Addr(), Length: 500, Access: ib.AccessRemoteWrite | ib.AccessRemoteRead}})
	wantWC(t, complete(t, p, p.B.CQ, 1)[0], 1, ib.WCBindMW, ib.WCSuccess)
	src := regMR(t, p.A.PD, pattern(500, 3), 0)
	post(t, p.A.QP, ib.SendWR{WRID: 2, Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{src.SGE(0, 500)}, RemoteAddr: region.mr.Addr(), RKey: rkey, Signaled: true})
	wantWC(t, complete(t, p, p.A.CQ, 1)[0], 2, ib.WCRDMAWrite, ib.WCSuccess)
	// The peer invalidates the window.
	recv := regMR(t, p.B.PD, make([]byte, 16), ib.AccessLocalWrite)
	postRecv(t, p.B.QP, ib.RecvWR{WRID: 3, SGL: []ib.SGE{recv.SGE(0, 16)}})
	post(t, p.A.QP, ib.SendWR{WRID: 4, Opcode: ib.WRSendWithInv, InvalidateRKey: rkey, Signaled: true})
	wantWC(t, complete(t, p, p.A.CQ, 1)[0], 4, ib.WCSend, ib.WCSuccess)
	if wc := complete(t, p, p.B.CQ, 1)[0]; wc.WRID != 3 || wc.Status != ib.WCSuccess || wc.Flags&ib.WCFlagWithInv == 0 || wc.InvalidatedRKey != rkey {
		t.Fatalf("receive %v flags %s, want the invalidation of %#x", wc, wc.Flags, rkey)
	}
	// Invalidated, the window may be bound again (it could not be while valid).
	rkey2 := rkey&^0xff | 0x5b
	post(t, p.B.QP, ib.SendWR{WRID: 5, Opcode: ib.WRBindMW, Signaled: true, Bind: ib.MWBindInfo{
		MW: mw, RKey: rkey2, MR: region.mr, Addr: region.mr.Addr() + 500, Length: 500, Access: ib.AccessRemoteWrite}})
	wantWC(t, complete(t, p, p.B.CQ, 1)[0], 5, ib.WCBindMW, ib.WCSuccess)
	post(t, p.A.QP, ib.SendWR{WRID: 6, Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{src.SGE(0, 500)}, RemoteAddr: region.mr.Addr() + 500, RKey: rkey2, Signaled: true})
	wantWC(t, complete(t, p, p.A.CQ, 1)[0], 6, ib.WCRDMAWrite, ib.WCSuccess)
	// Binding a bound type 2 window again fails.
	post(t, p.B.QP, ib.SendWR{WRID: 9, Opcode: ib.WRBindMW, Signaled: true, Bind: ib.MWBindInfo{
		MW: mw, RKey: rkey2 + 1, MR: region.mr, Addr: region.mr.Addr(), Length: 10, Access: ib.AccessRemoteRead}})
	wantWC(t, complete(t, p, p.B.CQ, 1)[0], 9, ib.WCBindMW, ib.WCMWBindErr)
	if p.B.QP.State() != ib.QPStateErr {
		t.Fatal("bind error did not move the QP to ERR")
	}
	if !bytes.Equal(region.buf[:500], pattern(500, 3)) || !bytes.Equal(region.buf[500:], pattern(500, 3)) {
		t.Fatal("data differs")
	}
	region.check(t)
}

func TestSendWithInvalidate(t *testing.T) {
	p := newRC(t)
	region := newGuarded(t, p.B.PD, 1000, ib.AccessLocalWrite|ib.AccessMWBind)
	mw, _ := p.B.PD.AllocMW(ib.MWType2)
	rkey := mw.RKey()&^0xff | 0x11
	post(t, p.B.QP, ib.SendWR{WRID: 1, Opcode: ib.WRBindMW, Bind: ib.MWBindInfo{
		MW: mw, RKey: rkey, MR: region.mr, Addr: region.mr.Addr(), Length: 1000, Access: ib.AccessRemoteWrite}})
	recv := regMR(t, p.B.PD, make([]byte, 16), ib.AccessLocalWrite)
	postRecv(t, p.B.QP, ib.RecvWR{WRID: 2, SGL: []ib.SGE{recv.SGE(0, 16)}})
	src := regMR(t, p.A.PD, pattern(16, 0), 0)
	post(t, p.A.QP, ib.SendWR{WRID: 3, Opcode: ib.WRSendWithInv, InvalidateRKey: rkey, SGL: []ib.SGE{src.SGE(0, 16)}, Signaled: true})
	wantWC(t, complete(t, p, p.A.CQ, 1)[0], 3, ib.WCSend, ib.WCSuccess)
	wc := complete(t, p, p.B.CQ, 1)[0]
	wantWC(t, wc, 2, ib.WCRecv, ib.WCSuccess)
	if wc.Flags&ib.WCFlagWithInv == 0 || wc.InvalidatedRKey != rkey {
		t.Fatalf("%v flags %s", wc, wc.Flags)
	}
	// The window no longer admits writes.
	post(t, p.A.QP, ib.SendWR{WRID: 4, Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{src.SGE(0, 16)}, RemoteAddr: region.mr.Addr(), RKey: rkey, Signaled: true})
	wantWC(t, complete(t, p, p.A.CQ, 1)[0], 4, ib.WCRDMAWrite, ib.WCRemAccessErr)
	region.check(t)
}

// TestSendWithInvalidateRegularMR: a regular MR cannot be invalidated remotely.
func TestSendWithInvalidateRegularMR(t *testing.T) {
	p := newRC(t)
	region := regMR(t, p.B.PD, make([]byte, 100), allAccess)
	recv := regMR(t, p.B.PD, make([]byte, 16), ib.AccessLocalWrite)
	postRecv(t, p.B.QP, ib.RecvWR{WRID: 2, SGL: []ib.SGE{recv.SGE(0, 16)}})
	post(t, p.A.QP, ib.SendWR{WRID: 3, Opcode: ib.WRSendWithInv, InvalidateRKey: region.RKey(), Signaled: true})
	wantWC(t, complete(t, p, p.A.CQ, 1)[0], 3, ib.WCSend, ib.WCRemInvReqErr)
	wantWC(t, complete(t, p, p.B.CQ, 1)[0], 2, ib.WCRecv, ib.WCRemInvReqErr)
}

// TestFastRegister: REG_MR maps memory with a new key byte; LOCAL_INV revokes it.
func TestFastRegister(t *testing.T) {
	p := newRC(t)
	mr, err := p.B.PD.AllocMR(4096)
	if err != nil {
		t.Fatal(err)
	}
	mem := newGuarded(t, p.B.PD, 2000, 0)
	copy(mem.buf, pattern(2000, 8))
	post(t, p.B.QP, ib.SendWR{WRID: 1, Opcode: ib.WRRegMR, Signaled: true, RegMR: ib.RegMRInfo{
		MR: mr, Buf: mem.buf, Access: ib.AccessLocalWrite | ib.AccessRemoteRead, Key: 0x42}})
	wantWC(t, complete(t, p, p.B.CQ, 1)[0], 1, ib.WCRegMR, ib.WCSuccess)
	rkey := mr.RKey()
	if rkey&0xff != 0x42 || mr.Len() != 2000 {
		t.Fatalf("rkey %#x len %d", rkey, mr.Len())
	}
	local := newGuarded(t, p.A.PD, 2000, ib.AccessLocalWrite)
	post(t, p.A.QP, ib.SendWR{WRID: 2, Opcode: ib.WRRDMARead, SGL: []ib.SGE{local.mr.SGE(0, 2000)}, RemoteAddr: mr.Addr(), RKey: rkey, Signaled: true})
	wantWC(t, complete(t, p, p.A.CQ, 1)[0], 2, ib.WCRDMARead, ib.WCSuccess)
	if !bytes.Equal(local.buf, mem.buf) {
		t.Fatal("data differs")
	}
	// Registering again while valid fails; invalidate first.
	post(t, p.B.QP, ib.SendWR{WRID: 3, Opcode: ib.WRLocalInv, InvalidateRKey: rkey, Signaled: true})
	wantWC(t, complete(t, p, p.B.CQ, 1)[0], 3, ib.WCLocalInv, ib.WCSuccess)
	post(t, p.A.QP, ib.SendWR{WRID: 4, Opcode: ib.WRRDMARead, SGL: []ib.SGE{local.mr.SGE(0, 10)}, RemoteAddr: mr.Addr(), RKey: rkey, Signaled: true})
	wantWC(t, complete(t, p, p.A.CQ, 1)[0], 4, ib.WCRDMARead, ib.WCRemAccessErr)
	mem.check(t)
	local.check(t)
}

// TestLocalInvRegularMR: LOCAL_INV of a regular MR fails with LOC_QP_OP_ERR.
func TestLocalInvRegularMR(t *testing.T) {
	p := newRC(t)
	mr := regMR(t, p.A.PD, make([]byte, 10), allAccess)
	post(t, p.A.QP, ib.SendWR{WRID: 1, Opcode: ib.WRLocalInv, InvalidateRKey: mr.LKey()})
	wantWC(t, complete(t, p, p.A.CQ, 1)[0], 1, ib.WCLocalInv, ib.WCLocQPOpErr)
}

// TestLocalProtection: a bad L_Key fails the WR with IBV_WC_LOC_PROT_ERR.
func TestLocalProtection(t *testing.T) {
	p := newRC(t)
	mr := regMR(t, p.A.PD, make([]byte, 10), 0)
	dst := regMR(t, p.B.PD, make([]byte, 10), allAccess)
	post(t, p.A.QP,
		ib.SendWR{WRID: 1, Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{mr.SGE(0, 11)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()},
		ib.SendWR{WRID: 2, Opcode: ib.WRSend})
	wcs := complete(t, p, p.A.CQ, 2)
	wantWC(t, wcs[0], 1, ib.WCRDMAWrite, ib.WCLocProtErr)
	wantWC(t, wcs[1], 2, ib.WCSend, ib.WCWRFlushErr)
	// READ into memory without local write
	p = newRC(t)
	mr = regMR(t, p.A.PD, make([]byte, 10), 0)
	dst = regMR(t, p.B.PD, make([]byte, 10), allAccess)
	post(t, p.A.QP, ib.SendWR{WRID: 3, Opcode: ib.WRRDMARead, SGL: []ib.SGE{mr.SGE(0, 10)}, RemoteAddr: dst.Addr(), RKey: dst.RKey()})
	wantWC(t, complete(t, p, p.A.CQ, 1)[0], 3, ib.WCRDMARead, ib.WCLocProtErr)
}

func TestRegMRAccessRules(t *testing.T) {
	ctx := ib.NewContext(ib.ContextConfig{})
	pd := ctx.AllocPD()
	if _, err := pd.RegMR(make([]byte, 8), ib.AccessRemoteWrite); !errors.Is(err, ib.ErrInvalidArgument) {
		t.Fatalf("remote write without local write: %v", err)
	}
	mr, err := pd.RegMR(make([]byte, 8), ib.AccessZeroBased|ib.AccessLocalWrite)
	if err != nil || mr.Addr() != 0 {
		t.Fatalf("zero based: %v %#x", err, mr.Addr())
	}
	a, _ := pd.RegMR(make([]byte, 5000), 0)
	b, _ := pd.RegMR(make([]byte, 5000), 0)
	if a.Addr()%4096 != 0 || b.Addr() < a.Addr()+8192 || a.Addr() < 0x7f0000000000 {
		t.Fatalf("addresses %#x %#x", a.Addr(), b.Addr())
	}
	if err := pd.Dealloc(); !errors.Is(err, ib.ErrBusy) {
		t.Fatalf("dealloc busy pd: %v", err)
	}
}

// TestZeroBasedMRRemoteAccess: a peer reaches a zero-based MR by offsets from 0: an
// RDMA WRITE or READ at remote address 10 touches byte 10 of the registered buffer,
// and an access running one byte past the end is refused with a remote access error
// and touches nothing.
func TestZeroBasedMRRemoteAccess(t *testing.T) {
	const size = 64
	for _, c := range []struct {
		name string
		op   ib.WROpcode
		addr uint64
		n    int
		want ib.WCStatus
	}{
		{"write at 10", ib.WRRDMAWrite, 10, 20, ib.WCSuccess},
		{"read at 10", ib.WRRDMARead, 10, 20, ib.WCSuccess},
		{"write up to the end", ib.WRRDMAWrite, size - 8, 8, ib.WCSuccess},
		{"write one byte past", ib.WRRDMAWrite, size - 8, 9, ib.WCRemAccessErr},
		{"read one byte past", ib.WRRDMARead, size - 8, 9, ib.WCRemAccessErr},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newRC(t)
			region := newGuarded(t, p.B.PD, size, ib.AccessZeroBased|ib.AccessLocalWrite|ib.AccessRemoteWrite|ib.AccessRemoteRead)
			if region.mr.Addr() != 0 {
				t.Fatalf("zero-based MR at %#x", region.mr.Addr())
			}
			init := pattern(size, 3)
			copy(region.buf, init)
			local := regMR(t, p.A.PD, pattern(size, 9), ib.AccessLocalWrite)
			before := bytes.Clone(local.Buf())
			post(t, p.A.QP, ib.SendWR{WRID: 1, Opcode: c.op, SGL: []ib.SGE{local.SGE(0, c.n)},
				RemoteAddr: c.addr, RKey: region.mr.RKey(), Signaled: true})
			wcop := ib.WCRDMAWrite
			if c.op == ib.WRRDMARead {
				wcop = ib.WCRDMARead
			}
			wantWC(t, complete(t, p, p.A.CQ, 1)[0], 1, wcop, c.want)
			region.check(t)
			want := init
			if c.want == ib.WCSuccess && c.op == ib.WRRDMAWrite {
				want = bytes.Clone(init)
				copy(want[c.addr:], before[:c.n])
			}
			if !bytes.Equal(region.buf, want) {
				t.Fatalf("registered buffer %x, want %x", region.buf, want)
			}
			if c.want == ib.WCSuccess && c.op == ib.WRRDMARead {
				if got := local.Buf()[:c.n]; !bytes.Equal(got, init[c.addr:c.addr+uint64(c.n)]) {
					t.Fatalf("read %x, want bytes %d.. of the region %x", got, c.addr, init[c.addr:c.addr+uint64(c.n)])
				}
			}
		})
	}
}

// TestLocalInvWindow: LOCAL_INV revokes a type 2 window.
func TestLocalInvWindow(t *testing.T) {
	p := newRC(t)
	region := newGuarded(t, p.B.PD, 100, ib.AccessLocalWrite|ib.AccessMWBind)
	mw, _ := p.B.PD.AllocMW(ib.MWType2)
	rkey := mw.RKey()&^0xff | 0x33
	post(t, p.B.QP,
		ib.SendWR{WRID: 1, Opcode: ib.WRBindMW, Bind: ib.MWBindInfo{MW: mw, RKey: rkey, MR: region.mr, Addr: region.mr.Addr(), Length: 100, Access: ib.AccessRemoteWrite}},
		ib.SendWR{WRID: 2, Opcode: ib.WRLocalInv, InvalidateRKey: rkey, Signaled: true})
	wantWC(t, complete(t, p, p.B.CQ, 1)[0], 2, ib.WCLocalInv, ib.WCSuccess)
	src := regMR(t, p.A.PD, pattern(100, 1), 0)
	post(t, p.A.QP, ib.SendWR{WRID: 3, Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{src.SGE(0, 10)}, RemoteAddr: region.mr.Addr(), RKey: rkey, Signaled: true})
	wantWC(t, complete(t, p, p.A.CQ, 1)[0], 3, ib.WCRDMAWrite, ib.WCRemAccessErr)
	if !bytes.Equal(region.buf, make([]byte, 100)) {
		t.Fatal("memory changed")
	}
	region.check(t)
}

// TestSendWithInvalidateFastReg: SEND with invalidate revokes a fast-register MR.
func TestSendWithInvalidateFastReg(t *testing.T) {
	p := newRC(t)
	mem := newGuarded(t, p.B.PD, 100, 0)
	fr, _ := p.B.PD.AllocMR(100)
	post(t, p.B.QP, ib.SendWR{WRID: 1, Opcode: ib.WRRegMR, Signaled: true, RegMR: ib.RegMRInfo{MR: fr, Buf: mem.buf, Access: ib.AccessLocalWrite | ib.AccessRemoteWrite, Key: 9}})
	wantWC(t, complete(t, p, p.B.CQ, 1)[0], 1, ib.WCRegMR, ib.WCSuccess)
	key := fr.RKey()
	src := regMR(t, p.A.PD, pattern(100, 1), 0)
	recv := regMR(t, p.B.PD, make([]byte, 8), ib.AccessLocalWrite)
	postRecv(t, p.B.QP, ib.RecvWR{WRID: 2, SGL: []ib.SGE{recv.SGE(0, 8)}})
	post(t, p.A.QP,
		ib.SendWR{WRID: 3, Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{src.SGE(0, 100)}, RemoteAddr: fr.Addr(), RKey: key, Signaled: true},
		ib.SendWR{WRID: 4, Opcode: ib.WRSendWithInv, InvalidateRKey: key, Signaled: true},
		ib.SendWR{WRID: 5, Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{src.SGE(0, 10)}, RemoteAddr: fr.Addr(), RKey: key, Signaled: true})
	wcs := complete(t, p, p.A.CQ, 3)
	wantWC(t, wcs[0], 3, ib.WCRDMAWrite, ib.WCSuccess)
	wantWC(t, wcs[1], 4, ib.WCSend, ib.WCSuccess)
	wantWC(t, wcs[2], 5, ib.WCRDMAWrite, ib.WCRemAccessErr)
	if wc := complete(t, p, p.B.CQ, 1)[0]; wc.InvalidatedRKey != key || wc.Flags&ib.WCFlagWithInv == 0 {
		t.Fatalf("%v", wc)
	}
	if !bytes.Equal(mem.buf, pattern(100, 1)) {
		t.Fatal("data differs")
	}
	mem.check(t)
}

// TestMWType2ZeroLength: a type 2 window is unbound only by invalidation, so a
// bind without a region or with length 0 fails with IBV_WC_MW_BIND_ERR, as on
// rxe (o10-37.2.40); a type 1 window is unbound that way.
func TestMWType2ZeroLength(t *testing.T) {
	for _, c := range []struct {
		name  string
		noMR  bool
		typ   ib.MWType
		other ib.WCStatus
	}{
		{"type 2 length 0", false, ib.MWType2, ib.WCMWBindErr},
		{"type 2 without a region", true, ib.MWType2, ib.WCMWBindErr},
		{"type 1 length 0", false, ib.MWType1, ib.WCSuccess},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newRC(t)
			region := regMR(t, p.B.PD, make([]byte, 64), ib.AccessLocalWrite|ib.AccessMWBind)
			mw, err := p.B.PD.AllocMW(c.typ)
			if err != nil {
				t.Fatal(err)
			}
			b := ib.MWBindInfo{MW: mw, RKey: mw.RKey()&^0xff | (mw.RKey()+1)&0xff, MR: region, Addr: region.Addr(), Access: ib.AccessRemoteWrite}
			if c.noMR {
				b.MR, b.Addr = nil, 0
			}
			post(t, p.B.QP, ib.SendWR{WRID: 1, Opcode: ib.WRBindMW, Signaled: true, Bind: b})
			wantWC(t, complete(t, p, p.B.CQ, 1)[0], 1, ib.WCBindMW, c.other)
		})
	}
}
