package ibtransport_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/ibtransport/ibtest"
)

// requiredAttrs is IBTA Vol1 Table 91 (and the kernel's qp_state_table), written
// out independently of the engine's table.
func requiredAttrs(t ib.QPType, from, to ib.QPState) ib.QPAttrMask {
	switch {
	case from == ib.QPStateReset && to == ib.QPStateInit:
		if t == ib.QPTypeUD {
			return ib.QPAttrPKeyIndex | ib.QPAttrPort | ib.QPAttrQKey
		}
		return ib.QPAttrPKeyIndex | ib.QPAttrPort | ib.QPAttrAccessFlags
	case from == ib.QPStateInit && to == ib.QPStateRTR:
		switch t {
		case ib.QPTypeRC:
			return ib.QPAttrAH | ib.QPAttrPathMTU | ib.QPAttrDestQPN | ib.QPAttrRQPSN | ib.QPAttrMaxDestRdAtomic | ib.QPAttrMinRNRTimer
		case ib.QPTypeUC:
			return ib.QPAttrAH | ib.QPAttrPathMTU | ib.QPAttrDestQPN | ib.QPAttrRQPSN
		}
	case from == ib.QPStateRTR && to == ib.QPStateRTS:
		if t == ib.QPTypeRC {
			return ib.QPAttrSQPSN | ib.QPAttrTimeout | ib.QPAttrRetryCnt | ib.QPAttrRNRRetry | ib.QPAttrMaxRdAtomic
		}
		return ib.QPAttrSQPSN
	}
	return 0
}

var validEdges = map[[2]ib.QPState]bool{}

func init() {
	s := func(a, b ib.QPState) { validEdges[[2]ib.QPState{a, b}] = true }
	for st := ib.QPStateReset; st <= ib.QPStateErr; st++ {
		s(st, ib.QPStateReset)
		s(st, ib.QPStateErr)
	}
	s(ib.QPStateReset, ib.QPStateInit)
	s(ib.QPStateInit, ib.QPStateInit)
	s(ib.QPStateInit, ib.QPStateRTR)
	s(ib.QPStateRTR, ib.QPStateRTS)
	s(ib.QPStateRTS, ib.QPStateRTS)
	s(ib.QPStateRTS, ib.QPStateSQD)
	s(ib.QPStateSQD, ib.QPStateRTS)
	s(ib.QPStateSQD, ib.QPStateSQD)
}

func fullAttr() *ib.QPAttr {
	return &ib.QPAttr{Port: 1, PathMTU: 1024, DestQPN: 0x77, RQPSN: 5, SQPSN: 6, Timeout: 14, RetryCnt: 7,
		RNRRetry: 7, MaxRdAtomic: 4, MaxDestRdAtomic: 4, MinRNRTimer: 12, QKey: 0x1234,
		AccessFlags: ib.AccessRemoteWrite, AH: *ibtest.AddressOf(ibtest.BToA)}
}

// driveTo moves a fresh QP from RESET to state s along valid edges.
func driveTo(t *testing.T, qp *ib.QP, s ib.QPState) {
	t.Helper()
	path := map[ib.QPState][]ib.QPState{
		ib.QPStateReset: nil,
		ib.QPStateInit:  {ib.QPStateInit},
		ib.QPStateRTR:   {ib.QPStateInit, ib.QPStateRTR},
		ib.QPStateRTS:   {ib.QPStateInit, ib.QPStateRTR, ib.QPStateRTS},
		ib.QPStateSQD:   {ib.QPStateInit, ib.QPStateRTR, ib.QPStateRTS, ib.QPStateSQD},
		ib.QPStateErr:   {ib.QPStateErr},
	}[s]
	for i, st := range path {
		if st == qp.State() {
			path = path[i+1:]
			break
		}
	}
	for _, to := range path {
		from := qp.State()
		a := fullAttr()
		a.QPState = to
		if err := qp.Modify(a, ib.QPAttrState|requiredAttrs(qp.Type(), from, to)); err != nil {
			t.Fatalf("driving to %s: %v", s, err)
		}
	}
	if qp.State() != s {
		t.Fatalf("state %s, want %s", qp.State(), s)
	}
}

// TestModifyStateMachine tries every transition of every QP type with exactly the
// required attributes: valid edges succeed, others fail, and leaving out any one
// required attribute fails with an error naming it.
func TestModifyStateMachine(t *testing.T) {
	states := []ib.QPState{ib.QPStateReset, ib.QPStateInit, ib.QPStateRTR, ib.QPStateRTS, ib.QPStateSQD, ib.QPStateErr}
	for _, typ := range []ib.QPType{ib.QPTypeRC, ib.QPTypeUC, ib.QPTypeUD} {
		for _, from := range states {
			for _, to := range states {
				t.Run(fmt.Sprintf("%s/%s-%s", typ, from, to), func(t *testing.T) {
					ep, err := ibtest.NewEndpoint(ib.ContextConfig{}, typ)
					if err != nil {
						t.Fatal(err)
					}
					qp := ep.QP
					driveTo(t, qp, from)
					req := requiredAttrs(typ, from, to)
					for bit := ib.QPAttrMask(1); bit <= ib.QPAttrDestQPN; bit <<= 1 {
						if req&bit == 0 {
							continue
						}
						a := fullAttr()
						a.QPState = to
						err := qp.Modify(a, ib.QPAttrState|req&^bit)
						var me *ib.ModifyQPError
						if !errors.As(err, &me) || me.Missing&bit == 0 || !strings.Contains(err.Error(), "requires "+bit.String()) {
							t.Fatalf("without %s: %v", bit, err)
						}
						if qp.State() != from {
							t.Fatalf("failed modify changed the state to %s", qp.State())
						}
					}
					a := fullAttr()
					a.QPState = to
					err = qp.Modify(a, ib.QPAttrState|req)
					if validEdges[[2]ib.QPState{from, to}] {
						if err != nil {
							t.Fatal(err)
						}
						if qp.State() != to {
							t.Fatalf("state %s", qp.State())
						}
					} else {
						if !errors.Is(err, ib.ErrModifyQP) || !strings.Contains(err.Error(), "not a valid transition") {
							t.Fatalf("invalid edge: %v", err)
						}
						if qp.State() != from {
							t.Fatalf("state changed to %s", qp.State())
						}
					}
				})
			}
		}
	}
}

// toSQE moves the A side of a fresh UC or UD pair to SQE the way the engine does: a
// send that fails locally (a bad L_Key).
func toSQE(t *testing.T, typ ib.QPType) *ib.QP {
	t.Helper()
	p := newPair(t, typ, ibtest.DefaultConnOptions())
	src := regMR(t, p.A.PD, make([]byte, 5000), 0)
	sge := src.SGE(0, 10)
	sge.LKey ^= 0xff
	wr := ib.SendWR{WRID: 1, Opcode: ib.WRSend, Signaled: true, SGL: []ib.SGE{sge}}
	want := ib.WCLocProtErr
	if typ == ib.QPTypeUD {
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = ibtest.AddressOf(ibtest.BToA), p.B.QP.QPN(), 0x11111111
	}
	post(t, p.A.QP, wr)
	wantWC(t, complete(t, p, p.A.CQ, 1)[0], 1, ib.WCSend, want)
	if s := p.A.QP.State(); s != ib.QPStateSQE {
		t.Fatalf("state %s after a failed send, want SQE", s)
	}
	return p.A.QP
}

// TestModifyStateMachineSQE covers the edges out of SQE that TestModifyStateMachine
// cannot reach by Modify alone: on UC and UD, SQE→RTS, SQE→ERR and SQE→RESET
// succeed with no attributes, and every other target is refused with an error
// naming the transition, leaving the QP in SQE.
func TestModifyStateMachineSQE(t *testing.T) {
	valid := map[ib.QPState]bool{ib.QPStateRTS: true, ib.QPStateErr: true, ib.QPStateReset: true}
	for _, typ := range []ib.QPType{ib.QPTypeUC, ib.QPTypeUD} {
		for _, to := range []ib.QPState{ib.QPStateReset, ib.QPStateInit, ib.QPStateRTR, ib.QPStateRTS, ib.QPStateSQD, ib.QPStateSQE, ib.QPStateErr} {
			t.Run(fmt.Sprintf("%s/SQE-%s", typ, to), func(t *testing.T) {
				qp := toSQE(t, typ)
				err := qp.Modify(&ib.QPAttr{QPState: to}, ib.QPAttrState)
				if valid[to] {
					if err != nil {
						t.Fatal(err)
					}
					if qp.State() != to {
						t.Fatalf("state %s, want %s", qp.State(), to)
					}
					return
				}
				want := fmt.Sprintf("modify qp 0x%x: SQE→%s on %s is not a valid transition", qp.QPN(), to, typ)
				var me *ib.ModifyQPError
				if !errors.As(err, &me) || !errors.Is(err, ib.ErrModifyQP) || err.Error() != want {
					t.Fatalf("got  %v\nwant %s", err, want)
				}
				if qp.State() != ib.QPStateSQE {
					t.Fatalf("refused modify changed the state to %s", qp.State())
				}
			})
		}
	}
}

func TestModifyErrorMessages(t *testing.T) {
	ep, err := ibtest.NewEndpoint(ib.ContextConfig{Seed: 9}, ib.QPTypeRC)
	if err != nil {
		t.Fatal(err)
	}
	ud, err := ibtest.NewEndpoint(ib.ContextConfig{Seed: 10}, ib.QPTypeUD)
	if err != nil {
		t.Fatal(err)
	}
	qp := ep.QP
	n := qp.QPN()
	check := func(q *ib.QP, attr *ib.QPAttr, mask ib.QPAttrMask, want string) {
		t.Helper()
		err := q.Modify(attr, mask)
		if err == nil || err.Error() != want {
			t.Fatalf("got  %v\nwant %s", err, want)
		}
	}
	check(qp, &ib.QPAttr{QPState: ib.QPStateRTS}, ib.QPAttrState,
		fmt.Sprintf("modify qp 0x%x: RESET→RTS on RC is not a valid transition", n))
	check(qp, &ib.QPAttr{QPState: ib.QPStateInit}, ib.QPAttrState,
		fmt.Sprintf("modify qp 0x%x: RESET→INIT on RC requires AccessFlags, PKeyIndex, Port", n))
	check(qp, &ib.QPAttr{QPState: ib.QPStateInit, Port: 2}, ib.QPAttrState|ib.QPAttrAccessFlags|ib.QPAttrPKeyIndex|ib.QPAttrPort,
		fmt.Sprintf("modify qp 0x%x: Port 2: the only port is 1", n))
	driveTo(t, qp, ib.QPStateInit)
	check(qp, &ib.QPAttr{QPState: ib.QPStateRTR}, ib.QPAttrState,
		fmt.Sprintf("modify qp 0x%x: INIT→RTR on RC requires DestQPN, RQPSN, PathMTU, MaxDestRdAtomic, MinRNRTimer, AH", n))
	a := fullAttr()
	a.QPState, a.PathMTU = ib.QPStateRTR, 300
	check(qp, a, ib.QPAttrState|requiredAttrs(ib.QPTypeRC, ib.QPStateInit, ib.QPStateRTR),
		fmt.Sprintf("modify qp 0x%x: PathMTU 300 not one of 256, 512, 1024, 2048, 4096", n))
	a.PathMTU = 1024
	check(qp, a, ib.QPAttrState|requiredAttrs(ib.QPTypeRC, ib.QPStateInit, ib.QPStateRTR)|ib.QPAttrTimeout,
		fmt.Sprintf("modify qp 0x%x: INIT→RTR on RC does not accept Timeout", n))
	a.DestQPN = 1 << 24
	check(qp, a, ib.QPAttrState|requiredAttrs(ib.QPTypeRC, ib.QPStateInit, ib.QPStateRTR),
		fmt.Sprintf("modify qp 0x%x: DestQPN 0x1000000 is wider than 24 bits", n))
	driveTo(t, qp, ib.QPStateRTR)
	check(qp, &ib.QPAttr{QPState: ib.QPStateRTS}, ib.QPAttrState,
		fmt.Sprintf("modify qp 0x%x: RTR→RTS on RC requires SQPSN, Timeout, RetryCnt, RNRRetry, MaxRdAtomic", n))
	a = fullAttr()
	a.QPState, a.RetryCnt = ib.QPStateRTS, 8
	check(qp, a, ib.QPAttrState|requiredAttrs(ib.QPTypeRC, ib.QPStateRTR, ib.QPStateRTS),
		fmt.Sprintf("modify qp 0x%x: RetryCnt 8 > 7", n))
	a.RetryCnt, a.CurQPState = 7, ib.QPStateInit
	check(qp, a, ib.QPAttrState|ib.QPAttrCurState|requiredAttrs(ib.QPTypeRC, ib.QPStateRTR, ib.QPStateRTS),
		fmt.Sprintf("modify qp 0x%x: CurQPState INIT does not match the QP's state RTR", n))
	un := ud.QP.QPN()
	driveTo(t, ud.QP, ib.QPStateInit)
	check(ud.QP, &ib.QPAttr{QPState: ib.QPStateRTR, PathMTU: 1024}, ib.QPAttrState|ib.QPAttrPathMTU,
		fmt.Sprintf("modify qp 0x%x: INIT→RTR on UD does not accept PathMTU", un))

	// Query reflects what was set.
	driveTo(t, qp, ib.QPStateRTS)
	got := qp.Query()
	if got.QPState != ib.QPStateRTS || got.PathMTU != 1024 || got.DestQPN != 0x77 || got.MaxRdAtomic != 4 || got.AH.DGID != ibtest.GID(ibtest.BToA) {
		t.Fatalf("query: %+v", got)
	}
	// Attributes change without a state change; an invalid one changes nothing.
	if err := qp.Modify(&ib.QPAttr{MinRNRTimer: 3}, ib.QPAttrMinRNRTimer); err != nil {
		t.Fatal(err)
	}
	if qp.Query().MinRNRTimer != 3 {
		t.Fatal("MinRNRTimer not changed")
	}
}

// TestSQDrain: RTS→SQD stops starting new WRs and reports the drain; SQD→RTS
// resumes.
func TestSQDrain(t *testing.T) {
	p := newRC(t)
	src := regMR(t, p.A.PD, pattern(4096, 1), 0)
	dst := regMR(t, p.B.PD, make([]byte, 4096), allAccess)
	wr := ib.SendWR{WRID: 1, Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{src.SGE(0, 4096)}, RemoteAddr: dst.Addr(), RKey: dst.RKey(), Signaled: true}
	post(t, p.A.QP, wr)
	p.Wire.Pump() // WR 1 starts: SQD lets it finish
	if err := p.A.QP.Modify(&ib.QPAttr{QPState: ib.QPStateSQD, EnSQDAsyncNotify: true}, ib.QPAttrState|ib.QPAttrEnSQDAsyncNotify); err != nil {
		t.Fatal(err)
	}
	wr.WRID = 2
	post(t, p.A.QP, wr)
	wantWC(t, complete(t, p, p.A.CQ, 1)[0], 1, ib.WCRDMAWrite, ib.WCSuccess)
	noMore(t, p, p.A.CQ)
	found := false
	for len(p.A.Ctx.AsyncEvents()) > 0 {
		if ev := <-p.A.Ctx.AsyncEvents(); ev.Type == ib.EventSQDrained && ev.QP == p.A.QP {
			found = true
		}
	}
	if !found {
		t.Fatal("no SQ drained event")
	}
	if err := p.A.QP.Modify(&ib.QPAttr{QPState: ib.QPStateRTS}, ib.QPAttrState); err != nil {
		t.Fatal(err)
	}
	wantWC(t, complete(t, p, p.A.CQ, 1)[0], 2, ib.WCRDMAWrite, ib.WCSuccess)
}

// TestResetAndReuse: ERR → RESET → INIT → RTR → RTS works again with new PSNs.
func TestResetAndReuse(t *testing.T) {
	p := newRC(t)
	for _, qp := range []*ib.QP{p.A.QP, p.B.QP} {
		if err := qp.Modify(&ib.QPAttr{QPState: ib.QPStateErr}, ib.QPAttrState); err != nil {
			t.Fatal(err)
		}
		if err := qp.Modify(&ib.QPAttr{QPState: ib.QPStateReset}, ib.QPAttrState); err != nil {
			t.Fatal(err)
		}
	}
	o := ibtest.DefaultConnOptions()
	o.PSNA, o.PSNB = 77, 99
	if err := ibtest.Connect(p.A.QP, p.B.QP, o); err != nil {
		t.Fatal(err)
	}
	src := regMR(t, p.A.PD, pattern(100, 1), 0)
	dst := regMR(t, p.B.PD, make([]byte, 100), allAccess)
	postRecv(t, p.B.QP, ib.RecvWR{WRID: 1, SGL: []ib.SGE{dst.SGE(0, 100)}})
	post(t, p.A.QP, ib.SendWR{WRID: 2, Opcode: ib.WRSend, SGL: []ib.SGE{src.SGE(0, 100)}, Signaled: true})
	wantWC(t, complete(t, p, p.A.CQ, 1)[0], 2, ib.WCSend, ib.WCSuccess)
	wantWC(t, complete(t, p, p.B.CQ, 1)[0], 1, ib.WCRecv, ib.WCSuccess)
}

// TestResetDropsCompletions: a QP moved to RESET takes its completions not
// yet polled out of its CQs, as rdma-core's hardware providers do, and leaves
// those of another QP on the same CQ in order; a QP brought back to RTS does
// not hand over the flushes of its previous life.
func TestResetDropsCompletions(t *testing.T) {
	p := newRC(t)
	other, err := p.A.Ctx.CreateQP(p.A.PD, ib.QPInitAttr{Type: ib.QPTypeRC, SendCQ: p.A.CQ, RecvCQ: p.A.CQ,
		Cap: ib.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	buf := regMR(t, p.A.PD, make([]byte, 64), ib.AccessLocalWrite)
	if err := other.Modify(&ib.QPAttr{QPState: ib.QPStateInit, Port: 1}, ib.QPAttrState|ib.QPAttrPort|ib.QPAttrAccessFlags|ib.QPAttrPKeyIndex); err != nil {
		t.Fatal(err)
	}
	postRecv(t, other, ib.RecvWR{WRID: 50, SGL: []ib.SGE{buf.SGE(0, 16)}})
	postRecv(t, p.A.QP, ib.RecvWR{WRID: 1, SGL: []ib.SGE{buf.SGE(16, 16)}})
	postRecv(t, other, ib.RecvWR{WRID: 51, SGL: []ib.SGE{buf.SGE(32, 16)}})
	postRecv(t, p.A.QP, ib.RecvWR{WRID: 2, SGL: []ib.SGE{buf.SGE(48, 16)}})
	for _, qp := range []*ib.QP{other, p.A.QP} {
		if err := qp.Modify(&ib.QPAttr{QPState: ib.QPStateErr}, ib.QPAttrState); err != nil {
			t.Fatal(err)
		}
	}
	if n := p.A.CQ.Len(); n != 4 {
		t.Fatalf("%d completions after the QPs' errors, want 4 flushes", n)
	}
	if err := p.A.QP.Modify(&ib.QPAttr{QPState: ib.QPStateReset}, ib.QPAttrState); err != nil {
		t.Fatal(err)
	}
	wc := make([]ib.WC, 8)
	n := p.A.CQ.Poll(wc)
	if n != 2 || wc[0].WRID != 50 || wc[1].WRID != 51 {
		t.Fatalf("after RESET the CQ holds %v, want the other QP's flushes 50 and 51 only", wc[:n])
	}
}
