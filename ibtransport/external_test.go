package ibtransport_test

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
)

// extQP is an external RC QP in RTS with its CQs.
type extQP struct {
	ctx    *ib.Context
	pd     *ib.PD
	scq    *ib.CQ
	rcq    *ib.CQ
	qp     *ib.QP
	w      *ib.Wire
	access ib.Access
}

func newExtQP(t testing.TB, ord int, init func(*ib.QPInitAttr)) *extQP {
	t.Helper()
	ctx := ib.NewContext(ib.ContextConfig{Seed: 7, ExternalQPs: true})
	pd := ctx.AllocPD()
	scq, _ := ctx.CreateCQ(64)
	rcq, _ := ctx.CreateCQ(64)
	a := ib.QPInitAttr{Type: ib.QPTypeRC, SendCQ: scq, RecvCQ: rcq,
		Cap: ib.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}}
	if init != nil {
		init(&a)
	}
	qp, err := ctx.CreateQP(pd, a)
	if err != nil {
		t.Fatal(err)
	}
	e := &extQP{ctx: ctx, pd: pd, scq: scq, rcq: rcq, qp: qp, w: qp.Wire(), access: allAccess &^ ib.AccessLocalWrite}
	if e.w == nil || !qp.External() {
		t.Fatal("QP of an ExternalQPs context is not external")
	}
	steps := []struct {
		attr ib.QPAttr
		mask ib.QPAttrMask
	}{
		{ib.QPAttr{QPState: ib.QPStateInit, Port: 1, AccessFlags: e.access},
			ib.QPAttrState | ib.QPAttrPKeyIndex | ib.QPAttrPort | ib.QPAttrAccessFlags},
		{ib.QPAttr{QPState: ib.QPStateRTR, PathMTU: 4096, MaxDestRdAtomic: 4},
			ib.QPAttrState | ib.QPAttrAH | ib.QPAttrPathMTU | ib.QPAttrDestQPN | ib.QPAttrRQPSN |
				ib.QPAttrMaxDestRdAtomic | ib.QPAttrMinRNRTimer},
		{ib.QPAttr{QPState: ib.QPStateRTS, MaxRdAtomic: ord},
			ib.QPAttrState | ib.QPAttrSQPSN | ib.QPAttrTimeout | ib.QPAttrRetryCnt | ib.QPAttrRNRRetry | ib.QPAttrMaxRdAtomic},
	}
	for _, s := range steps {
		if err := qp.Modify(&s.attr, s.mask); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func (e *extQP) next(t testing.TB) ib.SendWork {
	t.Helper()
	var sw ib.SendWork
	if !e.w.NextSend(&sw) {
		t.Fatal("NextSend: no WQE")
	}
	return sw
}

func (e *extQP) none(t testing.TB) {
	t.Helper()
	var sw ib.SendWork
	if e.w.NextSend(&sw) {
		t.Fatalf("NextSend handed out %s (wr %d), want nothing", sw.Opcode, sw.WRID)
	}
}

func pollN(t testing.TB, cq *ib.CQ, n int) []ib.WC {
	t.Helper()
	wcs := make([]ib.WC, n+1)
	got := cq.Poll(wcs)
	if got != n {
		t.Fatalf("got %d completions %v, want %d", got, wcs[:got], n)
	}
	return wcs[:n]
}

func drained(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestExternalQPNoIBPackets: an external QP is never scheduled for Output, and
// Input drops IB packets addressed to it; only RC can be external.
func TestExternalQPNoIBPackets(t *testing.T) {
	e := newExtQP(t, 1, nil)
	buf := make([]byte, 64)
	mr := regMR(t, e.pd, buf, allAccess)
	post(t, e.qp, ib.SendWR{WRID: 1, Opcode: ib.WRSend, SGL: []ib.SGE{mr.SGE(0, 64)}, Signaled: true})
	out := ib.NewOutputBatch(4, 0, 0)
	if n := e.ctx.Output(time.Time{}, out); n != 0 || e.ctx.HasOutput() {
		t.Fatalf("Output produced %d packets for an external QP", n)
	}
	if !drained(e.w.Wake()) {
		t.Fatal("PostSend did not wake the transport")
	}
	var f ib.PacketFields
	f.BTH = ib.BTHFields{Opcode: ib.OpcodeRCSendOnly, PKey: 0xffff, DestQP: e.qp.QPN()}
	pkt := make([]byte, 64)
	n := f.EncodeHeaders(pkt)
	if err := e.ctx.Input(time.Time{}, pkt[:n], ib.InputMeta{}); !errors.Is(err, ib.ErrDropped) {
		t.Fatalf("Input to an external QP: %v, want a drop", err)
	}
	for _, typ := range []ib.QPType{ib.QPTypeUC, ib.QPTypeUD} {
		_, err := e.ctx.CreateQP(e.pd, ib.QPInitAttr{Type: typ, SendCQ: e.scq, RecvCQ: e.rcq,
			Cap: ib.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
		if !errors.Is(err, ib.ErrInvalidArgument) {
			t.Errorf("external %s QP: %v, want ErrInvalidArgument", typ, err)
		}
	}
	plain := ib.NewContext(ib.ContextConfig{})
	pd := plain.AllocPD()
	cq, _ := plain.CreateCQ(4)
	qp, err := plain.CreateQP(pd, ib.QPInitAttr{Type: ib.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: ib.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	if err != nil || qp.Wire() != nil || qp.External() {
		t.Fatalf("a plain QP is external: %v", err)
	}
	one, err := plain.CreateQP(pd, ib.QPInitAttr{Type: ib.QPTypeRC, SendCQ: cq, RecvCQ: cq, External: true,
		Cap: ib.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	if err != nil || one.Wire() == nil {
		t.Fatalf("QPInitAttr.External: %v", err)
	}
}

// TestExternalSendZeroCopyAndOrder: NextSend resolves the SGL to the registered
// bytes themselves (no copy), copies inline data, and completions come in posting
// order whatever order the transport completes them in.
func TestExternalSendZeroCopyAndOrder(t *testing.T) {
	e := newExtQP(t, 1, nil)
	buf := pattern(300, 1)
	mr := regMR(t, e.pd, buf, allAccess)
	post(t, e.qp,
		ib.SendWR{WRID: 1, Opcode: ib.WRSend, SGL: []ib.SGE{mr.SGE(10, 20), mr.SGE(100, 0), mr.SGE(200, 50)}, Signaled: true},
		ib.SendWR{WRID: 2, Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{mr.SGE(0, 5)}, RKey: 0x1234, RemoteAddr: 0x99},
		ib.SendWR{WRID: 3, Opcode: ib.WRSendWithInv, Inline: true, InlineData: []byte("inline!"), InvalidateRKey: 0xabcd, Signaled: true, Solicited: true},
	)
	a := e.next(t)
	if a.WRID != 1 || a.Opcode != ib.WRSend || a.Length != 70 || len(a.Data) != 2 {
		t.Fatalf("first WQE %+v", a)
	}
	if &a.Data[0][0] != &buf[10] || len(a.Data[0]) != 20 || &a.Data[1][0] != &buf[200] || len(a.Data[1]) != 50 {
		t.Fatal("SGL not resolved to the registered memory itself")
	}
	b := e.next(t)
	if b.Opcode != ib.WRRDMAWrite || b.RKey != 0x1234 || b.RemoteAddr != 0x99 || &b.Data[0][0] != &buf[0] {
		t.Fatalf("second WQE %+v", b)
	}
	c := e.next(t)
	if string(c.Data[0]) != "inline!" || c.InvalidateRKey != 0xabcd || !c.Solicited || c.Length != 7 {
		t.Fatalf("third WQE %+v", c)
	}
	e.none(t)
	// Complete out of order: nothing retires until the first is done.
	if !e.w.CompleteSend(c.ID, ib.WCSuccess) || !e.w.CompleteSend(b.ID, ib.WCSuccess) {
		t.Fatal("CompleteSend refused an outstanding WQE")
	}
	pollN(t, e.scq, 0)
	e.w.CompleteSend(a.ID, ib.WCSuccess)
	wcs := pollN(t, e.scq, 2) // WR 2 is unsignaled
	wantWC(t, wcs[0], 1, ib.WCSend, ib.WCSuccess)
	wantWC(t, wcs[1], 3, ib.WCSend, ib.WCSuccess)
	if wcs[0].ByteLen != 70 || wcs[1].ByteLen != 7 {
		t.Fatalf("byte lengths %d %d", wcs[0].ByteLen, wcs[1].ByteLen)
	}
	if e.w.CompleteSend(a.ID, ib.WCSuccess) {
		t.Fatal("CompleteSend of a retired WQE reported true")
	}
}

// TestExternalReadOrdAndFence: READs hold MaxRdAtomic slots, a fenced WR waits for
// every earlier one, local operations run at the head in order, and ReadSink is
// byte-exact over a multi-SGE sink.
func TestExternalReadOrdAndFence(t *testing.T) {
	e := newExtQP(t, 1, nil)
	sink := make([]byte, 100)
	smr := regMR(t, e.pd, sink, ib.AccessLocalWrite)
	fmr, err := e.pd.AllocMR(4096)
	if err != nil {
		t.Fatal(err)
	}
	post(t, e.qp,
		ib.SendWR{WRID: 1, Opcode: ib.WRRDMARead, SGL: []ib.SGE{smr.SGE(0, 10), smr.SGE(50, 30)}, RKey: 5, RemoteAddr: 8, Signaled: true},
		ib.SendWR{WRID: 2, Opcode: ib.WRRDMARead, SGL: []ib.SGE{smr.SGE(90, 10)}, Signaled: true},
		ib.SendWR{WRID: 3, Opcode: ib.WRRegMR, RegMR: ib.RegMRInfo{MR: fmr, Buf: make([]byte, 64), Access: ib.AccessLocalWrite | ib.AccessRemoteWrite, Key: 9}, Signaled: true},
		ib.SendWR{WRID: 4, Opcode: ib.WRSend, Fence: true, Signaled: true},
	)
	r1 := e.next(t)
	if r1.Opcode != ib.WRRDMARead || r1.Length != 40 || r1.Data != nil || r1.SinkKey != smr.LKey() || r1.SinkAddr != smr.Addr() {
		t.Fatalf("READ %+v", r1)
	}
	e.none(t) // ORD 1: the second READ waits
	bufs, f := e.w.ReadSink(r1.ID, 5, 20, nil)
	if f != ib.KeyOK || len(bufs) != 2 || &bufs[0][0] != &sink[5] || len(bufs[0]) != 5 || &bufs[1][0] != &sink[50] || len(bufs[1]) != 15 {
		t.Fatalf("ReadSink(5, 20) = %d slices, %v", len(bufs), f)
	}
	if _, f := e.w.ReadSink(r1.ID, 30, 11, nil); f != ib.KeyBounds {
		t.Fatalf("ReadSink beyond the READ's length: %v, want KeyBounds", f)
	}
	if _, f := e.w.ReadSink(r1.ID+1, 0, 1, nil); f != ib.KeyUnknown {
		t.Fatalf("ReadSink of a WQE not handed out: %v", f)
	}
	e.w.CompleteSend(r1.ID, ib.WCSuccess)
	r2 := e.next(t)
	if r2.WRID != 2 {
		t.Fatalf("second WQE is wr %d", r2.WRID)
	}
	e.none(t) // REG_MR waits for the READ (local operations are fenced)
	e.w.CompleteSend(r2.ID, ib.WCSuccess)
	s := e.next(t) // REG_MR ran on the way
	if s.WRID != 4 || s.Opcode != ib.WRSend {
		t.Fatalf("after REG_MR: wr %d %s", s.WRID, s.Opcode)
	}
	e.w.CompleteSend(s.ID, ib.WCSuccess)
	wcs := pollN(t, e.scq, 4)
	for i, op := range []ib.WCOpcode{ib.WCRDMARead, ib.WCRDMARead, ib.WCRegMR, ib.WCSend} {
		wantWC(t, wcs[i], uint64(i+1), op, ib.WCSuccess)
	}
	if fmr.RKey()&0xff != 9 {
		t.Fatalf("REG_MR did not set the key byte: %#x", fmr.RKey())
	}
}

// TestExternalReadWithInv: RDMA_READ_WITH_INV is refused on IB QPs; on an external
// QP its completion invalidates the key, and an invalid key fails it.
func TestExternalReadWithInv(t *testing.T) {
	plain := newRC(t)
	err := plain.A.QP.PostSend(ib.SendWR{WRID: 1, Opcode: ib.WRRDMAReadWithInv})
	if !errors.Is(err, ib.ErrInvalidArgument) {
		t.Fatalf("READ_WITH_INV on an IB QP: %v", err)
	}
	e := newExtQP(t, 2, nil)
	fmr, _ := e.pd.AllocMR(64)
	mem := make([]byte, 64)
	const va = 0x10000
	post(t, e.qp, ib.SendWR{WRID: 1, Opcode: ib.WRRegMR, RegMR: ib.RegMRInfo{MR: fmr, Buf: mem, Addr: va, Access: ib.AccessLocalWrite, Key: 3}})
	key := fmr.LKey()&^0xff | 3
	post(t, e.qp,
		ib.SendWR{WRID: 2, Opcode: ib.WRRDMAReadWithInv, SGL: []ib.SGE{{Addr: va, Length: 64, LKey: key}}, InvalidateRKey: key, Signaled: true},
		ib.SendWR{WRID: 3, Opcode: ib.WRRDMAReadWithInv, SGL: []ib.SGE{{Addr: va, Length: 64, LKey: key}}, InvalidateRKey: key, Signaled: true},
	)
	r := e.next(t)
	if r.WRID != 2 || r.Opcode != ib.WRRDMAReadWithInv {
		t.Fatalf("wr %d %s", r.WRID, r.Opcode)
	}
	r3 := e.next(t)
	e.w.CompleteSend(r.ID, ib.WCSuccess)
	wc := pollN(t, e.scq, 1)[0]
	wantWC(t, wc, 2, ib.WCRDMARead, ib.WCSuccess)
	if _, f := e.w.ReadSink(r3.ID, 0, 8, nil); f != ib.KeyInvalid {
		t.Fatalf("the sink is still valid after READ_WITH_INV: %v", f)
	}
	e.w.CompleteSend(r3.ID, ib.WCSuccess) // invalidating an invalid key fails
	wcs := pollN(t, e.scq, 1)
	wantWC(t, wcs[0], 3, 0, ib.WCLocQPOpErr)
	if e.qp.State() != ib.QPStateErr {
		t.Fatalf("state %s", e.qp.State())
	}
}

// TestExternalFailFlushes: an error completion moves the QP to ERR; every other
// outstanding send and receive WR is flushed, in posting order, and the transport
// is woken.
func TestExternalFailFlushes(t *testing.T) {
	for _, how := range []string{"FailSend", "CompleteSend", "FailOldest", "SetError", "FailRecv"} {
		t.Run(how, func(t *testing.T) {
			e := newExtQP(t, 4, nil)
			buf := make([]byte, 64)
			mr := regMR(t, e.pd, buf, allAccess)
			for i := 1; i <= 3; i++ {
				post(t, e.qp, ib.SendWR{WRID: uint64(i), Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{mr.SGE(0, 8)}})
			}
			postRecv(t, e.qp, ib.RecvWR{WRID: 10, SGL: []ib.SGE{mr.SGE(0, 64)}}, ib.RecvWR{WRID: 11, SGL: []ib.SGE{mr.SGE(0, 64)}})
			a, b := e.next(t), e.next(t)
			e.w.CompleteSend(a.ID, ib.WCSuccess)
			drained(e.w.Wake())
			wantSend := []ib.WCStatus{ib.WCRemAccessErr, ib.WCWRFlushErr}
			wantRecv := []ib.WCStatus{ib.WCWRFlushErr, ib.WCWRFlushErr}
			switch how {
			case "FailSend":
				e.w.FailSend(b.ID, ib.WCRemAccessErr)
			case "CompleteSend":
				e.w.CompleteSend(b.ID, ib.WCRemAccessErr)
			case "FailOldest":
				e.w.FailOldest(ib.WCRemAccessErr, ib.EventQPFatal, true)
			case "SetError":
				e.w.SetError(ib.EventQPFatal, true)
				wantSend[0] = ib.WCWRFlushErr
			case "FailRecv":
				if _, ok := e.w.BeginRecv(); !ok {
					t.Fatal("BeginRecv")
				}
				e.w.FailRecv(ib.WCLocLenErr, ib.EventQPReqErr, true)
				wantSend[0] = ib.WCWRFlushErr
				wantRecv[0] = ib.WCLocLenErr
			}
			if e.qp.State() != ib.QPStateErr || !drained(e.w.Wake()) {
				t.Fatalf("state %s or no wake", e.qp.State())
			}
			wcs := pollN(t, e.scq, 2)
			for i, st := range wantSend {
				wantWC(t, wcs[i], uint64(i+2), 0, st)
			}
			rwcs := pollN(t, e.rcq, 2)
			for i, st := range wantRecv {
				wantWC(t, rwcs[i], uint64(10+i), 0, st)
			}
			if e.w.CompleteSend(b.ID, ib.WCSuccess) {
				t.Fatal("a flushed WQE completed again")
			}
			e.none(t)
			// Posting in ERR flushes at once, as for IB QPs.
			post(t, e.qp, ib.SendWR{WRID: 9, Opcode: ib.WRSend})
			wantWC(t, pollN(t, e.scq, 1)[0], 9, 0, ib.WCWRFlushErr)
		})
	}
}

// TestExternalRecv: BeginRecv/RecvBuffers/EndRecv place a message byte-exact into
// the receive WQE (RQ or SRQ), refuse a message longer than it, and do the remote
// invalidation of a SEND with invalidate.
func TestExternalRecv(t *testing.T) {
	e := newExtQP(t, 1, nil)
	buf := make([]byte, 100)
	mr := regMR(t, e.pd, buf, ib.AccessLocalWrite)
	if _, ok := e.w.BeginRecv(); ok {
		t.Fatal("BeginRecv with nothing posted")
	}
	postRecv(t, e.qp, ib.RecvWR{WRID: 1, SGL: []ib.SGE{mr.SGE(0, 10), mr.SGE(40, 20)}})
	n, ok := e.w.BeginRecv()
	if !ok || n != 30 {
		t.Fatalf("BeginRecv = %d, %v", n, ok)
	}
	bufs, st := e.w.RecvBuffers(8, 4, nil)
	if st != ib.WCSuccess || len(bufs) != 2 || &bufs[0][0] != &buf[8] || &bufs[1][0] != &buf[40] || len(bufs[1]) != 2 {
		t.Fatalf("RecvBuffers(8, 4): %d slices, %s", len(bufs), st)
	}
	if _, st := e.w.RecvBuffers(20, 11, nil); st != ib.WCLocLenErr {
		t.Fatalf("RecvBuffers beyond the WQE: %s", st)
	}
	// A SEND with invalidate of a fast-register MR.
	fmr, _ := e.pd.AllocMR(64)
	post(t, e.qp, ib.SendWR{WRID: 5, Opcode: ib.WRRegMR, RegMR: ib.RegMRInfo{MR: fmr, Buf: make([]byte, 64), Access: ib.AccessLocalWrite | ib.AccessRemoteWrite, Key: 1}})
	e.none(t)
	key := fmr.RKey()
	if f := e.w.EndRecv(ib.RecvCompletion{ByteLen: 12, Invalidate: true, InvalidateRKey: key, Solicited: true}); f != ib.KeyOK {
		t.Fatalf("EndRecv: %v", f)
	}
	wc := pollN(t, e.rcq, 1)[0]
	wantWC(t, wc, 1, ib.WCRecv, ib.WCSuccess)
	if wc.ByteLen != 12 || wc.Flags&ib.WCFlagWithInv == 0 || wc.InvalidatedRKey != key {
		t.Fatalf("receive completion %v", wc)
	}
	if _, f := e.w.RemoteBuffer(key, fmr.Addr(), 1, ib.AccessRemoteWrite); f != ib.KeyInvalid {
		t.Fatalf("the invalidated key still works: %v", f)
	}
	// Invalidating it again fails and completes nothing.
	postRecv(t, e.qp, ib.RecvWR{WRID: 2})
	e.w.BeginRecv()
	if f := e.w.EndRecv(ib.RecvCompletion{Invalidate: true, InvalidateRKey: key}); f != ib.KeyInvalid {
		t.Fatalf("second invalidation: %v", f)
	}
	if f := e.w.EndRecv(ib.RecvCompletion{Invalidate: true, InvalidateRKey: mr.RKey()}); f != ib.KeyInvalid {
		t.Fatalf("invalidating a regular MR: %v", f)
	}
	pollN(t, e.rcq, 0)
	e.w.FailRecv(ib.WCRemInvReqErr, ib.EventQPReqErr, true)
	wantWC(t, pollN(t, e.rcq, 1)[0], 2, 0, ib.WCRemInvReqErr)

	// With an SRQ.
	s := newExtQP(t, 1, nil)
	srq, err := s.ctx.CreateSRQ(s.pd, ib.SRQInitAttr{MaxWR: 4, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	q, err := s.ctx.CreateQP(s.pd, ib.QPInitAttr{Type: ib.QPTypeRC, SendCQ: s.scq, RecvCQ: s.rcq, SRQ: srq, Cap: ib.QPCap{MaxSendWR: 1}})
	if err != nil {
		t.Fatal(err)
	}
	q.Modify(&ib.QPAttr{QPState: ib.QPStateInit, Port: 1}, ib.QPAttrState|ib.QPAttrPKeyIndex|ib.QPAttrPort|ib.QPAttrAccessFlags)
	q.Modify(&ib.QPAttr{QPState: ib.QPStateRTR, PathMTU: 1024}, ib.QPAttrState|ib.QPAttrAH|ib.QPAttrPathMTU|ib.QPAttrDestQPN|ib.QPAttrRQPSN|ib.QPAttrMaxDestRdAtomic|ib.QPAttrMinRNRTimer)
	sbuf := make([]byte, 8)
	smr := regMR(t, s.pd, sbuf, ib.AccessLocalWrite)
	srq.PostRecv(ib.RecvWR{WRID: 77, SGL: []ib.SGE{smr.SGE(0, 8)}})
	if n, ok := q.Wire().BeginRecv(); !ok || n != 8 {
		t.Fatalf("BeginRecv from the SRQ: %d %v", n, ok)
	}
	q.Wire().EndRecv(ib.RecvCompletion{ByteLen: 8, Opcode: ib.WCRecvRDMAWithImm, HasImm: true, Imm: 0x55})
	wc = pollN(t, s.rcq, 1)[0]
	if wc.WRID != 77 || wc.Opcode != ib.WCRecvRDMAWithImm || wc.Imm != 0x55 || wc.Flags&ib.WCFlagWithImm == 0 {
		t.Fatalf("SRQ completion %v", wc)
	}
}

// TestExternalRemoteBuffer: the STag/R_Key check is byte-exact and covers the
// region's and the QP's rights, the PD, and windows.
func TestExternalRemoteBuffer(t *testing.T) {
	e := newExtQP(t, 1, nil)
	buf := make([]byte, 4096)
	mr := regMR(t, e.pd, buf, ib.AccessLocalWrite|ib.AccessRemoteWrite)
	other := e.ctx.AllocPD()
	omr := regMR(t, other, make([]byte, 64), allAccess)
	va := mr.Addr()
	cases := []struct {
		name string
		key  uint32
		va   uint64
		n    uint64
		want ib.Access
		f    ib.KeyFault
	}{
		{"whole region", mr.RKey(), va, 4096, ib.AccessRemoteWrite, ib.KeyOK},
		{"last byte", mr.RKey(), va + 4095, 1, ib.AccessRemoteWrite, ib.KeyOK},
		{"one past the end", mr.RKey(), va + 4095, 2, ib.AccessRemoteWrite, ib.KeyBounds},
		{"before the start", mr.RKey(), va - 1, 1, ib.AccessRemoteWrite, ib.KeyBounds},
		{"overflowing length", mr.RKey(), va + 1, ^uint64(0), ib.AccessRemoteWrite, ib.KeyBounds},
		{"read not granted", mr.RKey(), va, 1, ib.AccessRemoteRead, ib.KeyNoAccess},
		{"key byte differs", mr.RKey() ^ 1, va, 1, ib.AccessRemoteWrite, ib.KeyUnknown},
		{"no such key", 0xfffffe00, va, 1, ib.AccessRemoteWrite, ib.KeyUnknown},
		{"other PD", omr.RKey(), omr.Addr(), 1, ib.AccessRemoteWrite, ib.KeyOtherPD},
		{"zero length checks nothing", 0, 0, 0, ib.AccessRemoteWrite, ib.KeyOK},
	}
	for _, c := range cases {
		mem, f := e.w.RemoteBuffer(c.key, c.va, c.n, c.want)
		if f != c.f {
			t.Errorf("%s: %v, want %v", c.name, f, c.f)
		}
		if f == ib.KeyOK && c.n > 0 && (uint64(len(mem)) != c.n || &mem[0] != &buf[c.va-va]) {
			t.Errorf("%s: wrong memory", c.name)
		}
	}
	// The QP's own access flags come first.
	e.qp.Modify(&ib.QPAttr{AccessFlags: ib.AccessRemoteRead}, ib.QPAttrAccessFlags)
	if _, f := e.w.RemoteBuffer(mr.RKey(), va, 1, ib.AccessRemoteWrite); f != ib.KeyQPAccess {
		t.Fatalf("write on a QP without remote write: %v", f)
	}
	// A QP in the error state accepts no remote access at all.
	e.qp.Modify(&ib.QPAttr{QPState: ib.QPStateErr}, ib.QPAttrState)
	if _, f := e.w.RemoteBuffer(mr.RKey(), va, 1, ib.AccessRemoteRead); f != ib.KeyQPAccess {
		t.Fatalf("read through a QP in ERR: %v", f)
	}
	if _, f := e.w.Atomic(ib.AtomicArgs{RKey: mr.RKey(), VA: va}); f != ib.KeyQPAccess {
		t.Fatalf("atomic through a QP in ERR: %v", f)
	}
	if ib.KeyQPAccess.String() == "" || ib.KeyBounds.String() != "out of bounds" {
		t.Fatal("KeyFault names")
	}
}

// TestExternalAtomic: fetch-add, masked add, swap and compare-swap on host-order
// memory, returning the original value; misaligned and unauthorized accesses fail.
func TestExternalAtomic(t *testing.T) {
	e := newExtQP(t, 1, nil)
	buf := make([]byte, 16)
	mr := regMR(t, e.pd, buf, allAccess)
	set := func(v uint64) { binary.NativeEndian.PutUint64(buf, v) }
	get := func() uint64 { return binary.NativeEndian.Uint64(buf) }
	cases := []struct {
		name      string
		init      uint64
		a         ib.AtomicArgs
		orig, now uint64
	}{
		{"add", 5, ib.AtomicArgs{Op: ib.AtomicOpFetchAdd, AddSwap: 7}, 5, 12},
		{"add wraps", ^uint64(0), ib.AtomicArgs{Op: ib.AtomicOpFetchAdd, AddSwap: 2}, ^uint64(0), 1},
		{"masked add: two 32-bit fields", 0x00000001_ffffffff, ib.AtomicArgs{Op: ib.AtomicOpFetchAdd, AddSwap: 0x00000001_00000001, AddMask: 0x80000000_80000000}, 0x00000001_ffffffff, 0x00000002_00000000},
		{"swap with mask", 0x1111, ib.AtomicArgs{Op: ib.AtomicOpSwap, AddSwap: 0xabcd, AddMask: 0xff}, 0x1111, 0x11cd},
		{"cmp-swap equal", 9, ib.AtomicArgs{Op: ib.AtomicOpCompareSwap, Compare: 9, CmpMask: ^uint64(0), AddSwap: 4, AddMask: ^uint64(0)}, 9, 4},
		{"cmp-swap differs", 9, ib.AtomicArgs{Op: ib.AtomicOpCompareSwap, Compare: 8, CmpMask: ^uint64(0), AddSwap: 4, AddMask: ^uint64(0)}, 9, 9},
	}
	for _, c := range cases {
		set(c.init)
		c.a.RKey, c.a.VA = mr.RKey(), mr.Addr()
		orig, f := e.w.Atomic(c.a)
		if f != ib.KeyOK || orig != c.orig || get() != c.now {
			t.Errorf("%s: orig %#x now %#x (%v), want %#x %#x", c.name, orig, get(), f, c.orig, c.now)
		}
	}
	if _, f := e.w.Atomic(ib.AtomicArgs{RKey: mr.RKey(), VA: mr.Addr() + 4}); f != ib.KeyBounds {
		t.Errorf("misaligned: %v", f)
	}
	if _, f := e.w.Atomic(ib.AtomicArgs{RKey: mr.RKey(), VA: mr.Addr() + 16}); f != ib.KeyBounds {
		t.Errorf("beyond the region: %v", f)
	}
	// The completion side: the original value lands in host order.
	post(t, e.qp, ib.SendWR{WRID: 1, Opcode: ib.WRAtomicFetchAdd, SGL: []ib.SGE{mr.SGE(8, 8)}, CompareAdd: 3, Signaled: true})
	sw := e.next(t)
	if sw.Opcode != ib.WRAtomicFetchAdd || sw.CompareAdd != 3 || sw.Length != 8 {
		t.Fatalf("atomic WQE %+v", sw)
	}
	e.w.CompleteAtomic(sw.ID, 0x0102030405060708)
	wantWC(t, pollN(t, e.scq, 1)[0], 1, ib.WCFetchAdd, ib.WCSuccess)
	if v := binary.NativeEndian.Uint64(buf[8:]); v != 0x0102030405060708 {
		t.Fatalf("result %#x", v)
	}
}

// TestExternalWakeAndPostCheck: the transport is woken by posts and state
// changes, may refuse WRs with a post check, and one QP has one owner at a time.
func TestExternalWakeAndPostCheck(t *testing.T) {
	e := newExtQP(t, 1, nil)
	drained(e.w.Wake())
	errNo := errors.New("not on this connection")
	e.w.SetPostCheck(func(wr *ib.SendWR) error {
		if wr.Opcode == ib.WRAtomicFetchAdd {
			return errNo
		}
		return nil
	})
	buf := make([]byte, 8)
	mr := regMR(t, e.pd, buf, allAccess)
	err := e.qp.PostSend(ib.SendWR{WRID: 1, Opcode: ib.WRAtomicFetchAdd, SGL: []ib.SGE{mr.SGE(0, 8)}})
	var pe *ib.PostError
	if !errors.As(err, &pe) || !errors.Is(err, errNo) {
		t.Fatalf("post check: %v", err)
	}
	if drained(e.w.Wake()) {
		t.Fatal("a refused post woke the transport")
	}
	if err := e.w.Attach("a"); err != nil {
		t.Fatal(err)
	}
	if err := e.w.Attach("b"); !errors.Is(err, ib.ErrBusy) {
		t.Fatalf("second owner: %v", err)
	}
	e.w.Detach("a")
	if err := e.w.Attach("b"); err != nil {
		t.Fatal(err)
	}
	if err := e.qp.PostSend(ib.SendWR{WRID: 1, Opcode: ib.WRAtomicFetchAdd, SGL: []ib.SGE{mr.SGE(0, 8)}}); err != nil {
		t.Fatalf("Detach kept the post check: %v", err)
	}
	drained(e.w.Wake())
	e.qp.Modify(&ib.QPAttr{QPState: ib.QPStateErr}, ib.QPAttrState)
	if !drained(e.w.Wake()) || e.w.State() != ib.QPStateErr {
		t.Fatal("modify to ERR did not wake the transport")
	}
	post(t, e.qp, ib.SendWR{WRID: 2, Opcode: ib.WRSend, Signaled: true})
	pollN(t, e.scq, 2) // the earlier atomic and this one, flushed: the QP is in ERR
	f := newExtQP(t, 1, nil)
	post(t, f.qp, ib.SendWR{WRID: 3, Opcode: ib.WRSend, Signaled: true})
	postRecv(t, f.qp, ib.RecvWR{WRID: 4})
	sw := f.next(t)
	f.w.BeginRecv()
	drained(f.w.Wake())
	f.qp.Destroy()
	if !drained(f.w.Wake()) {
		t.Fatal("Destroy did not wake the transport")
	}
	// A destroyed QP generates no completions, whatever its transport still does.
	if f.w.CompleteSend(sw.ID, ib.WCSuccess) || f.w.EndRecv(ib.RecvCompletion{}) != ib.KeyInvalid {
		t.Fatal("completion on a destroyed QP")
	}
	f.w.FailRecv(ib.WCLocLenErr, 0, false)
	pollN(t, f.scq, 0)
	pollN(t, f.rcq, 0)
	e = f
	if err := e.w.Attach("c"); !errors.Is(err, ib.ErrDestroyed) {
		t.Fatalf("attach to a destroyed QP: %v", err)
	}
}

// TestExternalLocalOpFailure: a failing local operation at the head moves the QP
// to ERR inside NextSend, and the rest is flushed.
func TestExternalLocalOpFailure(t *testing.T) {
	e := newExtQP(t, 1, nil)
	post(t, e.qp,
		ib.SendWR{WRID: 1, Opcode: ib.WRLocalInv, InvalidateRKey: 0x12345600},
		ib.SendWR{WRID: 2, Opcode: ib.WRSend},
	)
	e.none(t)
	if e.qp.State() != ib.QPStateErr {
		t.Fatalf("state %s", e.qp.State())
	}
	wcs := pollN(t, e.scq, 2)
	wantWC(t, wcs[0], 1, 0, ib.WCLocQPOpErr)
	wantWC(t, wcs[1], 2, 0, ib.WCWRFlushErr)
	// An SGL with a bad L_Key fails at NextSend with a local protection error.
	f := newExtQP(t, 1, nil)
	post(t, f.qp, ib.SendWR{WRID: 3, Opcode: ib.WRSend, SGL: []ib.SGE{{Addr: 1, Length: 4, LKey: 0x4242}}})
	f.none(t)
	wantWC(t, pollN(t, f.scq, 1)[0], 3, 0, ib.WCLocProtErr)
}

// TestExternalCompleteSends: CompleteSends completes a batch of handed-out
// WQEs as CompleteSend each would, in posting order, and counts only those
// still outstanding.
func TestExternalCompleteSends(t *testing.T) {
	e := newExtQP(t, 1, nil)
	buf := pattern(64, 3)
	mr := regMR(t, e.pd, buf, allAccess)
	post(t, e.qp,
		ib.SendWR{WRID: 1, Opcode: ib.WRSend, SGL: []ib.SGE{mr.SGE(0, 8)}, Signaled: true},
		ib.SendWR{WRID: 2, Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{mr.SGE(8, 8)}, RKey: 0x1234, RemoteAddr: 0x99},
		ib.SendWR{WRID: 3, Opcode: ib.WRSend, SGL: []ib.SGE{mr.SGE(16, 8)}, Signaled: true},
	)
	a, b, c := e.next(t), e.next(t), e.next(t)
	if n := e.w.CompleteSends(nil); n != 0 {
		t.Fatalf("CompleteSends(nil) = %d", n)
	}
	pollN(t, e.scq, 0)
	if n := e.w.CompleteSends([]uint64{a.ID, b.ID, c.ID}); n != 3 {
		t.Fatalf("CompleteSends = %d, want 3", n)
	}
	wcs := pollN(t, e.scq, 2) // WR 2 is unsignaled
	wantWC(t, wcs[0], 1, ib.WCSend, ib.WCSuccess)
	wantWC(t, wcs[1], 3, ib.WCSend, ib.WCSuccess)
	if n := e.w.CompleteSends([]uint64{a.ID, c.ID}); n != 0 {
		t.Fatalf("CompleteSends of retired WQEs = %d, want 0", n)
	}
}

// TestExternalNextSends: NextSends hands out as many WQEs as NextSend would
// one by one, in posting order, up to the room given, and stops where
// NextSend stops (here MaxRdAtomic 1 holds the second READ back).
func TestExternalNextSends(t *testing.T) {
	e := newExtQP(t, 1, nil)
	buf := pattern(64, 5)
	mr := regMR(t, e.pd, buf, allAccess)
	post(t, e.qp,
		ib.SendWR{WRID: 1, Opcode: ib.WRSend, SGL: []ib.SGE{mr.SGE(0, 8)}},
		ib.SendWR{WRID: 2, Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{mr.SGE(8, 8)}, RKey: 0x1234, RemoteAddr: 0x99},
		ib.SendWR{WRID: 3, Opcode: ib.WRRDMARead, SGL: []ib.SGE{mr.SGE(16, 8)}, RKey: 0x1234, RemoteAddr: 0x99},
		ib.SendWR{WRID: 4, Opcode: ib.WRRDMARead, SGL: []ib.SGE{mr.SGE(24, 8)}, RKey: 0x1234, RemoteAddr: 0x99},
	)
	dst := make([]ib.SendWork, 2)
	if n := e.w.NextSends(dst[:0]); n != 0 {
		t.Fatalf("NextSends with no room = %d", n)
	}
	if n := e.w.NextSends(dst); n != 2 || dst[0].WRID != 1 || dst[1].WRID != 2 {
		t.Fatalf("NextSends = %d (wr %d, %d), want wr 1, 2", n, dst[0].WRID, dst[1].WRID)
	}
	if &dst[1].Data[0][0] != &buf[8] || dst[1].RKey != 0x1234 {
		t.Fatalf("second WQE %+v", dst[1])
	}
	dst = make([]ib.SendWork, 8)
	if n := e.w.NextSends(dst); n != 1 || dst[0].WRID != 3 {
		t.Fatalf("NextSends = %d (wr %d), want the first READ only (ORD 1)", n, dst[0].WRID)
	}
	e.w.CompleteSend(dst[0].ID, ib.WCSuccess)
	if n := e.w.NextSends(dst); n != 1 || dst[0].WRID != 4 {
		t.Fatalf("NextSends after the READ = %d (wr %d)", n, dst[0].WRID)
	}
	e.none(t)
}

// TestExternalDeliverRecv: DeliverRecv places a whole message into the next
// receive WQE and completes it as BeginRecv, RecvBuffers and EndRecv would,
// and reports each of their failures with the WQE left held for FailRecv.
func TestExternalDeliverRecv(t *testing.T) {
	cases := []struct {
		name  string
		post  bool   // a receive WR is posted
		lkey  bool   // its SGE has a bad L_Key
		msg   int    // message length (the WR holds 30)
		inv   uint32 // SEND with invalidate of this key (1: a regular MR's)
		taken bool
		st    ib.WCStatus
		f     ib.KeyFault
	}{
		{name: "ok", post: true, msg: 30, taken: true},
		{name: "empty", post: true, msg: 0, taken: true},
		{name: "no WR", msg: 4},
		{name: "too long", post: true, msg: 31, taken: true, st: ib.WCLocLenErr},
		{name: "bad L_Key", post: true, lkey: true, msg: 4, taken: true, st: ib.WCLocProtErr},
		{name: "cannot invalidate", post: true, msg: 4, inv: 1, taken: true, f: ib.KeyInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newExtQP(t, 1, nil)
			buf := make([]byte, 100)
			mr := regMR(t, e.pd, buf, ib.AccessLocalWrite)
			if tc.post {
				sgl := []ib.SGE{mr.SGE(0, 10), mr.SGE(40, 20)}
				if tc.lkey {
					sgl[0].LKey ^= 0xff00
				}
				postRecv(t, e.qp, ib.RecvWR{WRID: 9, SGL: sgl})
			}
			msg := pattern(tc.msg, 11)
			rc := ib.RecvCompletion{ByteLen: uint32(tc.msg), Solicited: true}
			if tc.inv != 0 {
				rc.Invalidate, rc.InvalidateRKey = true, mr.RKey()
			}
			taken, st, f := e.w.DeliverRecv(msg, rc)
			if taken != tc.taken || st != tc.st || f != tc.f {
				t.Fatalf("DeliverRecv = %v, %s, %v; want %v, %s, %v", taken, st, f, tc.taken, tc.st, tc.f)
			}
			if !taken || st != ib.WCSuccess || f != ib.KeyOK {
				pollN(t, e.rcq, 0)
				if tc.taken {
					e.w.FailRecv(ib.WCLocLenErr, ib.EventQPReqErr, true)
					wantWC(t, pollN(t, e.rcq, 1)[0], 9, 0, ib.WCLocLenErr)
				}
				return
			}
			wc := pollN(t, e.rcq, 1)[0]
			wantWC(t, wc, 9, ib.WCRecv, ib.WCSuccess)
			if wc.ByteLen != uint32(tc.msg) {
				t.Fatalf("ByteLen %d, want %d", wc.ByteLen, tc.msg)
			}
			want := make([]byte, 100)
			copy(want[40:], msg[min(len(msg), 10):])
			copy(want, msg[:min(len(msg), 10)])
			if string(buf) != string(want) {
				t.Fatalf("placed %x, want %x", buf, want)
			}
		})
	}
}

// TestExternalPlaceReadResponse: PlaceReadResponse copies a response segment
// into a READ's multi-SGE sink byte-exact, completes the READ at its last
// segment only, and refuses a range outside the READ, a WQE that is not an
// outstanding READ, and a sink whose key is gone.
func TestExternalPlaceReadResponse(t *testing.T) {
	e := newExtQP(t, 2, nil)
	sink := make([]byte, 100)
	smr := regMR(t, e.pd, sink, ib.AccessLocalWrite)
	post(t, e.qp,
		ib.SendWR{WRID: 1, Opcode: ib.WRRDMARead, SGL: []ib.SGE{smr.SGE(0, 10), smr.SGE(50, 30)}, RKey: 5, RemoteAddr: 8, Signaled: true},
		ib.SendWR{WRID: 2, Opcode: ib.WRSend, SGL: []ib.SGE{smr.SGE(90, 4)}, Signaled: true},
	)
	r, s := e.next(t), e.next(t)
	data := pattern(41, 21)
	if f := e.w.PlaceReadResponse(r.ID, 0, data[:15], false); f != ib.KeyOK {
		t.Fatalf("first segment: %v", f)
	}
	pollN(t, e.scq, 0)
	if f := e.w.PlaceReadResponse(r.ID, 15, data[15:41], true); f != ib.KeyBounds {
		t.Fatalf("a segment past the READ's length: %v, want KeyBounds", f)
	}
	if f := e.w.PlaceReadResponse(s.ID, 0, data[:4], true); f != ib.KeyUnknown {
		t.Fatalf("a SEND's WQE: %v, want KeyUnknown", f)
	}
	if f := e.w.PlaceReadResponse(r.ID, 15, data[15:40], true); f != ib.KeyOK {
		t.Fatalf("last segment: %v", f)
	}
	if string(sink[:10]) != string(data[:10]) || string(sink[50:80]) != string(data[10:40]) {
		t.Fatalf("sink %x", sink)
	}
	wantWC(t, pollN(t, e.scq, 1)[0], 1, ib.WCRDMARead, ib.WCSuccess)
	if f := e.w.PlaceReadResponse(r.ID, 0, data[:1], true); f != ib.KeyUnknown {
		t.Fatalf("a completed READ: %v, want KeyUnknown", f)
	}

	post(t, e.qp, ib.SendWR{WRID: 3, Opcode: ib.WRRDMARead, SGL: []ib.SGE{smr.SGE(0, 10)}, RKey: 5, RemoteAddr: 8, Signaled: true})
	r3 := e.next(t)
	if err := smr.Dereg(); err != nil {
		t.Fatal(err)
	}
	// Its L_Key is gone (KeyUnknown, as ReadSink says): nothing completes.
	if f := e.w.PlaceReadResponse(r3.ID, 0, data[:10], true); f != ib.KeyUnknown {
		t.Fatalf("a deregistered sink: %v", f)
	}
	pollN(t, e.scq, 0)
}
