package ibtransport_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/ibtransport/ibtest"
)

// wantLimit checks that err is a *LimitError for limit (with bound max, and
// full or not) wrapping sentinel, and that its text names the limit and its
// value.
func wantLimit(t *testing.T, err error, sentinel error, limit string, max uint64, full bool) {
	t.Helper()
	var le *ib.LimitError
	if !errors.As(err, &le) {
		t.Fatalf("%v: not a *LimitError", err)
	}
	if !errors.Is(err, sentinel) || le.Limit != limit || le.Max != max || le.Full != full {
		t.Fatalf("%v: got %+v, want %s %d full=%v wrapping %v", err, *le, limit, max, full, sentinel)
	}
	if want := limit + " "; !strings.Contains(err.Error(), want) {
		t.Fatalf("%q does not name %s", err, limit)
	}
}

// rtsQP returns an RC QP (with cp, sending and
// receiving on one CQ of depth cqDepth; on a Context from cfg unless nil) is connected to a peer and in RTS,
// and the wire between them (not run).
func rtsQP(t *testing.T, cfg *ib.ContextConfig, cp ib.QPCap, cqDepth int) (*ib.QP, *ib.CQ, *ibtest.Pair) {
	t.Helper()
	p := newRC(t)
	a := p.A
	if cfg != nil {
		a.Ctx = ib.NewContext(*cfg)
		a.PD = a.Ctx.AllocPD()
		p.Wire = ibtest.NewWire(a.Ctx, p.B.Ctx)
	}
	cq, err := a.Ctx.CreateCQ(cqDepth)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := a.Ctx.CreateQP(a.PD, ib.QPInitAttr{Type: ib.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: cp})
	if err != nil {
		t.Fatal(err)
	}
	peer, err := p.B.Ctx.CreateQP(p.B.PD, ib.QPInitAttr{Type: ib.QPTypeRC, SendCQ: p.B.CQ, RecvCQ: p.B.CQ,
		Cap: ib.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 4, MaxRecvSGE: 4}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ibtest.Connect(qp, peer, ibtest.DefaultConnOptions()); err != nil {
		t.Fatal(err)
	}
	return qp, cq, p
}

// TestContextLimits: each table of a Context (QPs, memory keys, CQs, SRQs)
// refuses the entry beyond its limit with ErrNoResources and a *LimitError
// naming the ContextConfig field, and takes an entry again once one is freed.
func TestContextLimits(t *testing.T) {
	cqAttr := func(ctx *ib.Context) ib.QPInitAttr {
		cq, err := ctx.CreateCQ(8)
		if err != nil {
			t.Fatal(err)
		}
		return ib.QPInitAttr{Type: ib.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: ib.QPCap{MaxSendWR: 1, MaxRecvWR: 1}}
	}
	for _, tc := range []struct {
		name  string
		cfg   ib.ContextConfig
		limit string
		max   int
		// alloc creates one entry, returning a function that frees it.
		alloc func(ctx *ib.Context, pd *ib.PD) (func() error, error)
	}{
		{"QPs", ib.ContextConfig{MaxQP: 3}, "MaxQP", 3, func(ctx *ib.Context, pd *ib.PD) (func() error, error) {
			qp, err := ctx.CreateQP(pd, cqAttr(ctx))
			if err != nil {
				return nil, err
			}
			return qp.Destroy, nil
		}},
		{"UD QPs count too", ib.ContextConfig{MaxQP: 2}, "MaxQP", 2, func(ctx *ib.Context, pd *ib.PD) (func() error, error) {
			a := cqAttr(ctx)
			a.Type = ib.QPTypeUD
			qp, err := ctx.CreateQP(pd, a)
			if err != nil {
				return nil, err
			}
			return qp.Destroy, nil
		}},
		{"MRs", ib.ContextConfig{MaxMR: 4}, "MaxMR", 4, func(_ *ib.Context, pd *ib.PD) (func() error, error) {
			mr, err := pd.RegMR(make([]byte, 64), ib.AccessLocalWrite)
			if err != nil {
				return nil, err
			}
			return mr.Dereg, nil
		}},
		{"fast-register MRs", ib.ContextConfig{MaxMR: 2}, "MaxMR", 2, func(_ *ib.Context, pd *ib.PD) (func() error, error) {
			mr, err := pd.AllocMR(4096)
			if err != nil {
				return nil, err
			}
			return mr.Dereg, nil
		}},
		{"memory windows share the MR table", ib.ContextConfig{MaxMR: 2}, "MaxMR", 2, func(_ *ib.Context, pd *ib.PD) (func() error, error) {
			mw, err := pd.AllocMW(ib.MWType2)
			if err != nil {
				return nil, err
			}
			return mw.Dealloc, nil
		}},
		{"CQs", ib.ContextConfig{MaxCQ: 3}, "MaxCQ", 3, func(ctx *ib.Context, _ *ib.PD) (func() error, error) {
			cq, err := ctx.CreateCQ(1)
			if err != nil {
				return nil, err
			}
			return cq.Destroy, nil
		}},
		{"SRQs", ib.ContextConfig{MaxSRQ: 2}, "MaxSRQ", 2, func(ctx *ib.Context, pd *ib.PD) (func() error, error) {
			srq, err := ctx.CreateSRQ(pd, ib.SRQInitAttr{MaxWR: 4, MaxSGE: 1})
			if err != nil {
				return nil, err
			}
			return srq.Destroy, nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ib.NewContext(tc.cfg)
			pd := ctx.AllocPD()
			var frees []func() error
			for i := 0; i < tc.max; i++ {
				free, err := tc.alloc(ctx, pd)
				if err != nil {
					t.Fatalf("entry %d of %d: %v", i+1, tc.max, err)
				}
				frees = append(frees, free)
			}
			_, err := tc.alloc(ctx, pd)
			wantLimit(t, err, ib.ErrNoResources, tc.limit, uint64(tc.max), true)
			if !strings.Contains(err.Error(), "full ("+tc.limit) {
				t.Errorf("%q", err)
			}
			t.Logf("%s: %v", tc.name, err)
			// A freed entry makes room for exactly one more.
			if err := frees[0](); err != nil {
				t.Fatal(err)
			}
			if _, err := tc.alloc(ctx, pd); err != nil {
				t.Fatalf("after a free: %v", err)
			}
			if _, err := tc.alloc(ctx, pd); !errors.Is(err, ib.ErrNoResources) {
				t.Fatalf("beyond the limit again: %v", err)
			}
		})
	}
}

// TestSizeLimits: a queue, SGL or inline size beyond the Context's limits is
// refused at creation with ErrInvalidArgument and a *LimitError naming both the
// attribute asked for and the limit; the limit itself is accepted.
func TestSizeLimits(t *testing.T) {
	cfg := ib.ContextConfig{MaxCQE: 64, MaxQPWR: 32, MaxSGE: 4, MaxInlineData: 128, MaxSRQWR: 16, MaxSRQSGE: 3}
	qpWith := func(f func(*ib.QPCap)) func(ctx *ib.Context, pd *ib.PD) error {
		return func(ctx *ib.Context, pd *ib.PD) error {
			cq, err := ctx.CreateCQ(8)
			if err != nil {
				return err
			}
			cp := ib.QPCap{MaxSendWR: 1, MaxRecvWR: 1}
			f(&cp)
			_, err = ctx.CreateQP(pd, ib.QPInitAttr{Type: ib.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: cp})
			return err
		}
	}
	for _, tc := range []struct {
		name     string
		limit    string
		max      int
		resource string
		create   func(ctx *ib.Context, pd *ib.PD, v int) error
	}{
		{"CQ depth", "MaxCQE", 64, "CQ depth", func(ctx *ib.Context, _ *ib.PD, v int) error {
			_, err := ctx.CreateCQ(v)
			return err
		}},
		{"send queue depth", "MaxQPWR", 32, "MaxSendWR", func(ctx *ib.Context, pd *ib.PD, v int) error {
			return qpWith(func(c *ib.QPCap) { c.MaxSendWR = v })(ctx, pd)
		}},
		{"receive queue depth", "MaxQPWR", 32, "MaxRecvWR", func(ctx *ib.Context, pd *ib.PD, v int) error {
			return qpWith(func(c *ib.QPCap) { c.MaxRecvWR = v })(ctx, pd)
		}},
		{"send SGL", "MaxSGE", 4, "MaxSendSGE", func(ctx *ib.Context, pd *ib.PD, v int) error {
			return qpWith(func(c *ib.QPCap) { c.MaxSendSGE = v })(ctx, pd)
		}},
		{"receive SGL", "MaxSGE", 4, "MaxRecvSGE", func(ctx *ib.Context, pd *ib.PD, v int) error {
			return qpWith(func(c *ib.QPCap) { c.MaxRecvSGE = v })(ctx, pd)
		}},
		{"inline data", "MaxInlineData", 128, "MaxInlineData", func(ctx *ib.Context, pd *ib.PD, v int) error {
			return qpWith(func(c *ib.QPCap) { c.MaxInlineData = v })(ctx, pd)
		}},
		{"SRQ depth", "MaxSRQWR", 16, "SRQ depth", func(ctx *ib.Context, pd *ib.PD, v int) error {
			_, err := ctx.CreateSRQ(pd, ib.SRQInitAttr{MaxWR: v, MaxSGE: 1})
			return err
		}},
		{"SRQ SGL", "MaxSRQSGE", 3, "SRQ SGL length", func(ctx *ib.Context, pd *ib.PD, v int) error {
			_, err := ctx.CreateSRQ(pd, ib.SRQInitAttr{MaxWR: 1, MaxSGE: v})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ib.NewContext(cfg)
			pd := ctx.AllocPD()
			if err := tc.create(ctx, pd, tc.max); err != nil {
				t.Fatalf("at the limit %d: %v", tc.max, err)
			}
			err := tc.create(ctx, pd, tc.max+1)
			wantLimit(t, err, ib.ErrInvalidArgument, tc.limit, uint64(tc.max), false)
			var le *ib.LimitError
			errors.As(err, &le)
			if le.Resource != tc.resource || le.Value != uint64(tc.max+1) {
				t.Fatalf("%v: resource %q value %d, want %q %d", err, le.Resource, le.Value, tc.resource, tc.max+1)
			}
			t.Logf("%s: %v", tc.name, err)
		})
	}
}

// TestQueueFull: a send, receive or shared receive queue takes exactly its
// depth of WRs; the next is refused with ErrQueueFull (ENOMEM from
// ibv_post_send/ibv_post_recv, as rxe returns) and a *PostError naming the WR,
// the earlier WRs of the same call stay posted, and a completed WR frees a
// slot.
func TestQueueFull(t *testing.T) {
	const depth = 4
	t.Run("send queue", func(t *testing.T) {
		qp, cq, p := rtsQP(t, nil, ib.QPCap{MaxSendWR: depth, MaxRecvWR: 1, MaxSendSGE: 1}, 64)
		dst := regMR(t, p.B.PD, make([]byte, 8), allAccess)
		w := func(id uint64) ib.SendWR {
			return ib.SendWR{WRID: id, Opcode: ib.WRRDMAWrite, RemoteAddr: dst.Addr(), RKey: dst.RKey(), Signaled: true}
		}
		post(t, qp, w(0), w(1))
		err := qp.PostSend(w(2), w(3), w(4), w(5))
		var pe *ib.PostError
		if !errors.As(err, &pe) || pe.Index != 2 || pe.WRID != 4 {
			t.Fatalf("post of 4 WRs into 2 free slots: %v, want the third refused", err)
		}
		wantLimit(t, err, ib.ErrQueueFull, "MaxSendWR", depth, true)
		if !strings.Contains(err.Error(), "send queue full (MaxSendWR 4)") {
			t.Fatalf("%q", err)
		}
		t.Logf("%v", err)
		wcs := complete(t, p, cq, depth)
		for i, wc := range wcs {
			wantWC(t, wc, uint64(i), ib.WCRDMAWrite, ib.WCSuccess)
		}
		post(t, qp, w(4), w(5), w(6), w(7)) // the queue drained: depth again
		if err := qp.PostSend(w(8)); !errors.Is(err, ib.ErrQueueFull) {
			t.Fatalf("fifth WR: %v", err)
		}
	})
	t.Run("unsignaled WRs hold their slots until a later completion", func(t *testing.T) {
		qp, cq, p := rtsQP(t, nil, ib.QPCap{MaxSendWR: depth, MaxRecvWR: 1, MaxSendSGE: 1}, 64)
		dst := regMR(t, p.B.PD, make([]byte, 8), allAccess)
		for i := range depth {
			post(t, qp, ib.SendWR{WRID: uint64(i), Opcode: ib.WRRDMAWrite, RemoteAddr: dst.Addr(), RKey: dst.RKey(), Signaled: i == depth-1})
		}
		if err := qp.PostSend(ib.SendWR{Opcode: ib.WRRDMAWrite}); !errors.Is(err, ib.ErrQueueFull) {
			t.Fatalf("fifth WR: %v", err)
		}
		wantWC(t, complete(t, p, cq, 1)[0], depth-1, ib.WCRDMAWrite, ib.WCSuccess)
		for i := range depth {
			post(t, qp, ib.SendWR{WRID: uint64(10 + i), Opcode: ib.WRRDMAWrite, RemoteAddr: dst.Addr(), RKey: dst.RKey()})
		}
	})
	t.Run("receive queue", func(t *testing.T) {
		qp, _, p := rtsQP(t, nil, ib.QPCap{MaxSendWR: 1, MaxRecvWR: depth, MaxRecvSGE: 1}, 64)
		buf := regMR(t, p.A.PD, make([]byte, 64), ib.AccessLocalWrite)
		_ = buf
		var wrs []ib.RecvWR
		for i := range depth + 2 {
			wrs = append(wrs, ib.RecvWR{WRID: uint64(i)})
		}
		err := qp.PostRecv(wrs...)
		var pe *ib.PostError
		if !errors.As(err, &pe) || pe.Index != depth || pe.WRID != depth {
			t.Fatalf("post of %d receives: %v", depth+2, err)
		}
		wantLimit(t, err, ib.ErrQueueFull, "MaxRecvWR", depth, true)
		if !strings.Contains(err.Error(), "receive queue full (MaxRecvWR 4)") {
			t.Fatalf("%q", err)
		}
	})
	t.Run("shared receive queue", func(t *testing.T) {
		ctx := ib.NewContext(ib.ContextConfig{})
		srq, err := ctx.CreateSRQ(ctx.AllocPD(), ib.SRQInitAttr{MaxWR: depth, MaxSGE: 1})
		if err != nil {
			t.Fatal(err)
		}
		for i := range depth {
			if err := srq.PostRecv(ib.RecvWR{WRID: uint64(i)}); err != nil {
				t.Fatal(err)
			}
		}
		err = srq.PostRecv(ib.RecvWR{WRID: 99})
		var pe *ib.PostError
		if !errors.As(err, &pe) || pe.WRID != 99 {
			t.Fatalf("%v", err)
		}
		wantLimit(t, err, ib.ErrQueueFull, "MaxWR", depth, true)
	})
}

// TestWRLimits: a WR beyond its QP's SGL, inline or message-size limits is
// refused at post time with ErrInvalidArgument, naming the limit; the limit
// itself is accepted.
func TestWRLimits(t *testing.T) {
	cp := ib.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 3, MaxInlineData: 64}
	qp, _, p := rtsQP(t, &ib.ContextConfig{MaxMsgSize: 4096, Seed: 7}, cp, 64)
	ctx := p.A.Ctx
	_ = ctx
	mr := regMR(t, p.A.PD, make([]byte, 8192), ib.AccessLocalWrite)
	dst := regMR(t, p.B.PD, make([]byte, 8192), allAccess)
	write := func(sgl ...ib.SGE) ib.SendWR {
		return ib.SendWR{Opcode: ib.WRRDMAWrite, SGL: sgl, RemoteAddr: dst.Addr(), RKey: dst.RKey()}
	}
	sges := func(n, each int) []ib.SGE {
		var s []ib.SGE
		for i := range n {
			s = append(s, mr.SGE(i*each, each))
		}
		return s
	}
	for _, tc := range []struct {
		name       string
		ok, tooBig ib.SendWR
		limit      string
		max        uint64
	}{
		{"send SGL", write(sges(2, 8)...), write(sges(3, 8)...), "MaxSendSGE", 2},
		{"inline data from the SGL", func() ib.SendWR { w := write(mr.SGE(0, 64)); w.Inline = true; return w }(),
			func() ib.SendWR { w := write(mr.SGE(0, 65)); w.Inline = true; return w }(), "MaxInlineData", 64},
		{"inline data given", func() ib.SendWR { w := write(); w.Inline, w.InlineData = true, make([]byte, 64); return w }(),
			func() ib.SendWR { w := write(); w.Inline, w.InlineData = true, make([]byte, 65); return w }(), "MaxInlineData", 64},
		{"message size", write(mr.SGE(0, 4096)), write(mr.SGE(0, 4096), mr.SGE(4096, 1)), "MaxMsgSize", 4096},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := qp.PostSend(tc.ok); err != nil {
				t.Fatalf("at the limit: %v", err)
			}
			err := qp.PostSend(tc.tooBig)
			wantLimit(t, err, ib.ErrInvalidArgument, tc.limit, tc.max, false)
			t.Logf("%v", err)
		})
	}
	t.Run("receive SGL", func(t *testing.T) {
		if err := qp.PostRecv(ib.RecvWR{SGL: sges(3, 8)}); err != nil {
			t.Fatal(err)
		}
		wantLimit(t, qp.PostRecv(ib.RecvWR{SGL: sges(4, 8)}), ib.ErrInvalidArgument, "MaxRecvSGE", 3, false)
	})
}

// TestCQOverrunLimit: more completions than a CQ's depth lose the one that
// does not fit; the CQ reports a *LimitError wrapping ErrCQOverrun, posts
// IBV_EVENT_CQ_ERR, and every QP using it (as send or receive CQ) goes to the
// error state with IBV_EVENT_QP_FATAL (IBTA 11.4.2.1, 11.6.2); a QP of another
// CQ on the same Context is untouched. The depth's completions stay pollable.
func TestCQOverrunLimit(t *testing.T) {
	const depth = 3
	qp, cq, p := rtsQP(t, nil, ib.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}, depth)
	// A second QP receives on the same CQ but sends on another: it breaks too.
	other, err := p.A.Ctx.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	shared, err := p.A.Ctx.CreateQP(p.A.PD, ib.QPInitAttr{Type: ib.QPTypeRC, SendCQ: other, RecvCQ: cq,
		Cap: ib.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	if err != nil {
		t.Fatal(err)
	}
	dst := regMR(t, p.B.PD, make([]byte, 8), allAccess)
	for i := range depth + 2 {
		post(t, qp, ib.SendWR{WRID: uint64(i), Opcode: ib.WRRDMAWrite, RemoteAddr: dst.Addr(), RKey: dst.RKey(), Signaled: true})
	}
	_ = p.Wire.Run(nil, 100000)
	err = cq.Err()
	wantLimit(t, err, ib.ErrCQOverrun, "depth", depth, true)
	t.Logf("%v", err)
	if qp.State() != ib.QPStateErr {
		t.Fatalf("QP of the CQ in %s, want ERR", qp.State())
	}
	events := map[ib.AsyncEventType]int{}
	fatal := map[*ib.QP]bool{}
	for len(p.A.Ctx.AsyncEvents()) > 0 {
		ev := <-p.A.Ctx.AsyncEvents()
		events[ev.Type]++
		if ev.Type == ib.EventQPFatal {
			fatal[ev.QP] = true
		}
		if ev.Type == ib.EventCQErr && ev.CQ != cq {
			t.Fatalf("CQ error event for another CQ")
		}
	}
	if events[ib.EventCQErr] != 1 || !fatal[qp] {
		t.Fatalf("events %v (fatal for the QP: %v), want one CQ_ERR and QP_FATAL", events, fatal[qp])
	}
	// The QP in RESET that shares the CQ is not moved (RESET stays RESET), but
	// every QP in a state that generates completions is.
	if shared.State() != ib.QPStateReset {
		t.Fatalf("shared QP in %s", shared.State())
	}
	var wc [8]ib.WC
	n := cq.Poll(wc[:])
	if n != depth {
		t.Fatalf("%d completions kept, want %d", n, depth)
	}
	for i := range n {
		wantWC(t, wc[i], uint64(i), ib.WCRDMAWrite, ib.WCSuccess)
	}
	// Nothing more arrives on the broken CQ, even flushes.
	post(t, qp, ib.SendWR{WRID: 50, Opcode: ib.WRSend, Signaled: true})
	if n := cq.Poll(wc[:]); n != 0 {
		t.Fatalf("%d completions after the overrun: %v", n, wc[:n])
	}
	// The peer's QP is unaffected by A's CQ.
	if st := p.B.QP.State(); st != ib.QPStateRTS {
		t.Fatalf("peer's own QP in %s", st)
	}
}

// TestRdAtomicLimits: the requester never has more READ/atomic requests
// outstanding than its MaxRdAtomic (ORD), whatever is posted; a responder
// that receives more than its MaxDestRdAtomic (IRD) answers with a NAK
// (invalid request, IBTA 9.7.5.1: responder resources exhausted) so the WR
// fails with IBV_WC_REM_INV_REQ_ERR instead of being executed; and
// MaxRdAtomic beyond the Context's limit is refused by Modify.
func TestRdAtomicLimits(t *testing.T) {
	t.Run("ORD", func(t *testing.T) {
		for _, ord := range []int{1, 2, 5} {
			o := ibtest.DefaultConnOptions()
			o.MaxRdAtomic = ord
			p := newPair(t, ib.QPTypeRC, o)
			p.Wire.Latency = 10 * time.Microsecond
			outstanding, most := 0, 0
			p.Wire.Tap = func(dir ibtest.Direction, data []byte) {
				switch op := ib.BTH(data).Opcode(); {
				case dir == ibtest.AToB && op == ib.OpcodeRCRDMAReadRequest:
					outstanding++
					most = max(most, outstanding)
				case dir == ibtest.BToA && op == ib.OpcodeRCRDMAReadResponseOnly:
					outstanding--
				}
			}
			src := regMR(t, p.B.PD, pattern(64, 1), allAccess)
			dst := regMR(t, p.A.PD, make([]byte, 64*8), ib.AccessLocalWrite)
			const n = 12
			for i := range n {
				post(t, p.A.QP, ib.SendWR{WRID: uint64(i), Opcode: ib.WRRDMARead, Signaled: true,
					SGL: []ib.SGE{dst.SGE(64*(i%8), 64)}, RemoteAddr: src.Addr(), RKey: src.RKey()})
			}
			for i, wc := range complete(t, p, p.A.CQ, n) {
				wantWC(t, wc, uint64(i), ib.WCRDMARead, ib.WCSuccess)
			}
			if most != ord {
				t.Errorf("MaxRdAtomic %d: %d READs outstanding at most", ord, most)
			}
		}
	})
	t.Run("IRD", func(t *testing.T) {
		o := ibtest.DefaultConnOptions()
		o.MaxRdAtomic = 1
		p := newPair(t, ib.QPTypeRC, o)
		p.Wire.Latency = 10 * time.Microsecond
		// A raises its ORD beyond B's IRD (through SQD), as a misconfigured
		// peer would.
		if err := modifyInSQD(p.A.QP, ib.QPAttr{MaxRdAtomic: 4}, ib.QPAttrMaxRdAtomic); err != nil {
			t.Fatal(err)
		}
		src := regMR(t, p.B.PD, pattern(8*4096, 1), allAccess)
		dst := regMR(t, p.A.PD, make([]byte, 8*4096), ib.AccessLocalWrite)
		for i := range 4 {
			post(t, p.A.QP, ib.SendWR{WRID: uint64(i), Opcode: ib.WRRDMARead, Signaled: true,
				SGL: []ib.SGE{dst.SGE(4096*i, 4096)}, RemoteAddr: src.Addr() + uint64(4096*i), RKey: src.RKey()})
		}
		wcs := complete(t, p, p.A.CQ, 4)
		wantWC(t, wcs[0], 0, ib.WCRDMARead, ib.WCSuccess)
		if wcs[1].Status != ib.WCRemInvReqErr {
			t.Fatalf("second READ beyond B's MaxDestRdAtomic 1: %v, want IBV_WC_REM_INV_REQ_ERR", wcs[1])
		}
		for _, wc := range wcs[2:] {
			wantWC(t, wc, wc.WRID, 0, ib.WCWRFlushErr)
		}
		if got := p.B.QP.Counters().NAKsSent[ib.NAKInvalidRequest]; got == 0 {
			t.Fatal("B sent no invalid request NAK")
		}
	})
	t.Run("beyond the Context", func(t *testing.T) {
		o := ibtest.DefaultConnOptions()
		o.MaxRdAtomic = 2
		p, err := ibtest.NewPair(ib.ContextConfig{MaxRdAtomic: 8, Seed: 3}, ib.QPTypeRC, o)
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			mask ib.QPAttrMask
			attr ib.QPAttr
		}{
			{ib.QPAttrMaxRdAtomic, ib.QPAttr{MaxRdAtomic: 9}},
			{ib.QPAttrMaxDestRdAtomic, ib.QPAttr{MaxDestRdAtomic: 9}},
		} {
			err := modifyInSQD(p.A.QP, tc.attr, tc.mask)
			if !errors.Is(err, ib.ErrModifyQP) || !strings.Contains(err.Error(), "9 not in 0..8") {
				t.Fatalf("%v: %v", tc.mask, err)
			}
			tc.attr.MaxRdAtomic, tc.attr.MaxDestRdAtomic = min(tc.attr.MaxRdAtomic, 8), min(tc.attr.MaxDestRdAtomic, 8)
			if err := modifyInSQD(p.A.QP, tc.attr, tc.mask); err != nil {
				t.Fatalf("%v at the limit: %v", tc.mask, err)
			}
		}
	})
}

// modifyInSQD applies attr (mask) to an idle QP in RTS the way IBTA allows for
// MaxRdAtomic and MaxDestRdAtomic: RTS→SQD, SQD→SQD with the attributes,
// SQD→RTS. The QP is back in RTS even if the middle step fails.
func modifyInSQD(qp *ib.QP, attr ib.QPAttr, mask ib.QPAttrMask) error {
	if err := qp.Modify(&ib.QPAttr{QPState: ib.QPStateSQD}, ib.QPAttrState); err != nil {
		return err
	}
	attr.QPState = ib.QPStateSQD
	err := qp.Modify(&attr, mask|ib.QPAttrState)
	if err2 := qp.Modify(&ib.QPAttr{QPState: ib.QPStateRTS}, ib.QPAttrState); err == nil {
		err = err2
	}
	return err
}
