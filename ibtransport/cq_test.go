package ibtransport_test

import (
	"context"
	"errors"
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/ibtransport/ibtest"
)

// TestCQOverrun: a full CQ loses the completion, goes to error, posts
// IBV_EVENT_CQ_ERR and moves its QPs to the error state.
func TestCQOverrun(t *testing.T) {
	p := newRC(t)
	small, err := p.A.Ctx.CreateCQ(2)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := p.A.Ctx.CreateQP(p.A.PD, ib.QPInitAttr{Type: ib.QPTypeRC, SendCQ: small, RecvCQ: p.A.CQ,
		Cap: ib.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}, SignalAll: true})
	if err != nil {
		t.Fatal(err)
	}
	peer, err := p.B.Ctx.CreateQP(p.B.PD, ib.QPInitAttr{Type: ib.QPTypeRC, SendCQ: p.B.CQ, RecvCQ: p.B.CQ,
		Cap: ib.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ibtest.Connect(qp, peer, ibtest.DefaultConnOptions()); err != nil {
		t.Fatal(err)
	}
	dst := regMR(t, p.B.PD, make([]byte, 8), allAccess)
	for i := range 3 {
		post(t, qp, ib.SendWR{WRID: uint64(i), Opcode: ib.WRRDMAWrite, RemoteAddr: dst.Addr(), RKey: dst.RKey()})
	}
	_ = p.Wire.Run(nil, 10000)
	if err := small.Err(); !errors.Is(err, ib.ErrCQOverrun) {
		t.Fatalf("cq error %v", err)
	}
	if qp.State() != ib.QPStateErr {
		t.Fatalf("qp state %s", qp.State())
	}
	var sawCQErr bool
	for len(p.A.Ctx.AsyncEvents()) > 0 {
		if ev := <-p.A.Ctx.AsyncEvents(); ev.Type == ib.EventCQErr && ev.CQ == small {
			sawCQErr = true
		}
	}
	if !sawCQErr {
		t.Fatal("no CQ error event")
	}
	var wc [4]ib.WC
	if n := small.Poll(wc[:]); n != 2 {
		t.Fatalf("%d completions kept", n)
	}
	if err := small.Wait(context.Background()); !errors.Is(err, ib.ErrCQOverrun) {
		t.Fatalf("wait on a broken CQ: %v", err)
	}
}

// TestCQNotify: an armed CQ signals once; solicited-only ignores unsolicited
// receives.
func TestCQNotify(t *testing.T) {
	p := newRC(t)
	src := regMR(t, p.A.PD, make([]byte, 4), 0)
	dst := regMR(t, p.B.PD, make([]byte, 16), ib.AccessLocalWrite)
	send := func(id uint64, solicited bool) {
		postRecv(t, p.B.QP, ib.RecvWR{WRID: id, SGL: []ib.SGE{dst.SGE(0, 16)}})
		post(t, p.A.QP, ib.SendWR{WRID: id, Opcode: ib.WRSend, SGL: []ib.SGE{src.SGE(0, 4)}, Solicited: solicited})
		complete(t, p, p.B.CQ, 1)
	}
	events := func() int {
		n := 0
		for len(p.B.CQ.Events()) > 0 {
			<-p.B.CQ.Events()
			n++
		}
		return n
	}
	send(1, false)
	if events() != 0 {
		t.Fatal("event without arming")
	}
	p.B.CQ.Notify(false)
	send(2, false)
	send(3, false)
	if n := events(); n != 1 {
		t.Fatalf("%d events after arming once", n)
	}
	p.B.CQ.Notify(true)
	send(4, false)
	if events() != 0 {
		t.Fatal("solicited-only arm fired for an unsolicited receive")
	}
	send(5, true)
	if events() != 1 {
		t.Fatal("solicited receive did not fire")
	}
}

func TestCQWait(t *testing.T) {
	p := newRC(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.A.CQ.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait with a canceled context: %v", err)
	}
	done := make(chan error)
	go func() { done <- p.B.CQ.Wait(context.Background()) }()
	dst := regMR(t, p.B.PD, make([]byte, 16), ib.AccessLocalWrite)
	postRecv(t, p.B.QP, ib.RecvWR{WRID: 1, SGL: []ib.SGE{dst.SGE(0, 16)}})
	post(t, p.A.QP, ib.SendWR{WRID: 1, Opcode: ib.WRSend})
	_ = p.Wire.Run(func() bool { return p.B.CQ.Len() > 0 }, 10000)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return")
	}
}

// TestSRQ: two QPs share receive WRs; the limit event fires once when the SRQ
// falls below the armed limit.
func TestSRQ(t *testing.T) {
	p := newRC(t)
	srq, err := p.B.Ctx.CreateSRQ(p.B.PD, ib.SRQInitAttr{MaxWR: 8, MaxSGE: 1, Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	var bqps, aqps []*ib.QP
	for i := range 2 {
		o := ibtest.DefaultConnOptions()
		o.PSNA += uint32(i)
		aq, bq := connectToSRQ(t, p, srq, ib.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}, o)
		if err := bq.PostRecv(ib.RecvWR{}); err == nil {
			t.Fatal("PostRecv on a QP with an SRQ")
		}
		aqps, bqps = append(aqps, aq), append(bqps, bq)
	}
	dst := regMR(t, p.B.PD, make([]byte, 64), ib.AccessLocalWrite)
	for i := range 4 {
		if err := srq.PostRecv(ib.RecvWR{WRID: uint64(10 + i), SGL: []ib.SGE{dst.SGE(16*i, 16)}}); err != nil {
			t.Fatal(err)
		}
	}
	src := regMR(t, p.A.PD, []byte("hello"), 0)
	for i, aq := range aqps {
		post(t, aq, ib.SendWR{WRID: uint64(i), Opcode: ib.WRSend, SGL: []ib.SGE{src.SGE(0, 5)}})
	}
	wcs := complete(t, p, p.B.CQ, 2)
	if wcs[0].WRID != 10 || wcs[1].WRID != 11 || wcs[0].QPNum == wcs[1].QPNum ||
		wcs[0].QPNum != bqps[0].QPN() && wcs[0].QPNum != bqps[1].QPN() ||
		wcs[1].QPNum != bqps[0].QPN() && wcs[1].QPNum != bqps[1].QPN() {
		t.Fatalf("completions %v, want one on each of QPs 0x%x and 0x%x", wcs, bqps[0].QPN(), bqps[1].QPN())
	}
	if srq.Len() != 2 {
		t.Fatalf("srq holds %d", srq.Len())
	}
	n := 0
	for len(p.B.Ctx.AsyncEvents()) > 0 {
		if ev := <-p.B.Ctx.AsyncEvents(); ev.Type == ib.EventSRQLimitReached && ev.SRQ == srq {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d limit events", n)
	}
	if err := srq.Destroy(); !errors.Is(err, ib.ErrBusy) {
		t.Fatalf("destroy of a used SRQ: %v", err)
	}
}

// TestSRQLimitRearm: the SRQ limit event fires once per arming. After the first
// event, ArmLimit re-arms it and a second event comes exactly when the SRQ falls
// below the new limit; without re-arming, draining the SRQ further posts nothing.
func TestSRQLimitRearm(t *testing.T) {
	for _, c := range []struct {
		name  string
		rearm bool
	}{{"rearmed", true}, {"not rearmed", false}} {
		t.Run(c.name, func(t *testing.T) {
			p := newRC(t)
			srq, err := p.B.Ctx.CreateSRQ(p.B.PD, ib.SRQInitAttr{MaxWR: 8, MaxSGE: 1, Limit: 3})
			if err != nil {
				t.Fatal(err)
			}
			aq, _ := connectToSRQ(t, p, srq, ib.QPCap{MaxSendWR: 8, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}, ibtest.DefaultConnOptions())
			dst := regMR(t, p.B.PD, make([]byte, 8*16), ib.AccessLocalWrite)
			wrid := uint64(0)
			fill := func(n int) {
				t.Helper()
				for range n {
					if err := srq.PostRecv(ib.RecvWR{WRID: wrid, SGL: []ib.SGE{dst.SGE(int(wrid%8)*16, 16)}}); err != nil {
						t.Fatal(err)
					}
					wrid++
				}
			}
			src := regMR(t, p.A.PD, []byte("hello"), 0)
			// consume delivers n SENDs, each taking one WR from the SRQ.
			consume := func(n int) {
				t.Helper()
				for range n {
					post(t, aq, ib.SendWR{Opcode: ib.WRSend, SGL: []ib.SGE{src.SGE(0, 5)}})
				}
				for _, wc := range complete(t, p, p.B.CQ, n) {
					if wc.Status != ib.WCSuccess {
						t.Fatalf("receive %v", wc)
					}
				}
			}
			events := func() int {
				n := 0
				for len(p.B.Ctx.AsyncEvents()) > 0 {
					if ev := <-p.B.Ctx.AsyncEvents(); ev.Type == ib.EventSRQLimitReached && ev.SRQ == srq {
						n++
					}
				}
				return n
			}
			fill(4)
			consume(2) // 4 → 2, below the limit 3
			if n := events(); n != 1 {
				t.Fatalf("%d limit events after falling below the first limit, want 1", n)
			}
			fill(4) // 6
			if c.rearm {
				if err := srq.ArmLimit(4); err != nil {
					t.Fatal(err)
				}
			}
			consume(2) // 6 → 4: not below 4
			if n := events(); n != 0 {
				t.Fatalf("%d limit events with %d WRs left, above the limit", n, srq.Len())
			}
			consume(1) // 4 → 3, below 4
			want := 0
			if c.rearm {
				want = 1
			}
			if n := events(); n != want {
				t.Fatalf("%d limit events after falling below the re-armed limit, want %d", n, want)
			}
			consume(2) // 3 → 1: below every limit, but the event is disarmed
			if n := events(); n != 0 {
				t.Fatalf("%d limit events after the limit disarmed", n)
			}
			if srq.Len() != 1 {
				t.Fatalf("srq holds %d, want 1", srq.Len())
			}
		})
	}
}

// TestFenceAndRdAtomic: at most MaxRdAtomic READs are outstanding, and a fenced
// WRITE waits for the READs before it.
func TestFenceAndRdAtomic(t *testing.T) {
	o := ibtest.DefaultConnOptions()
	o.MaxRdAtomic = 2
	p := newPair(t, ib.QPTypeRC, o)
	remote := regMR(t, p.B.PD, make([]byte, 1024), allAccess)
	local := regMR(t, p.A.PD, make([]byte, 1024*5), ib.AccessLocalWrite)
	outstanding, maxOut := 0, 0
	writeAt, lastReadDone := -1, -1
	seq := 0
	p.Wire.Tap = func(d ibtest.Direction, data []byte) {
		pk := decode(t, data)
		seq++
		switch pk.Opcode() {
		case ib.OpcodeRCRDMAReadRequest:
			outstanding++
			maxOut = max(maxOut, outstanding)
		case ib.OpcodeRCRDMAReadResponseOnly:
			outstanding--
			lastReadDone = seq
		case ib.OpcodeRCRDMAWriteOnly:
			if writeAt < 0 {
				writeAt = seq
			}
		}
	}
	p.Wire.Latency = time.Microsecond
	var wrs []ib.SendWR
	for i := range 5 {
		wrs = append(wrs, ib.SendWR{WRID: uint64(i), Opcode: ib.WRRDMARead, SGL: []ib.SGE{local.SGE(1024*i, 1024)},
			RemoteAddr: remote.Addr(), RKey: remote.RKey(), Signaled: true})
	}
	wrs = append(wrs, ib.SendWR{WRID: 5, Opcode: ib.WRRDMAWrite, Fence: true, SGL: []ib.SGE{local.SGE(0, 8)},
		RemoteAddr: remote.Addr(), RKey: remote.RKey(), Signaled: true})
	post(t, p.A.QP, wrs...)
	complete(t, p, p.A.CQ, 6)
	if maxOut != 2 {
		t.Fatalf("%d READs outstanding at once, want 2", maxOut)
	}
	if writeAt < lastReadDone {
		t.Fatalf("fenced WRITE sent (packet %d) before the last READ response (%d)", writeAt, lastReadDone)
	}
}

// TestCQOverrunBySends: a send completion that overruns its CQ moves the QP to
// the error state while the send queue is being retired (UD retires each send
// as it leaves, rxe's and ours alike); the flush that follows retires the rest
// and the retirement stops there. It went on past the queue's tail and the
// device's output never returned (found with the CM's QP1 sending a
// thousand signaled MADs).
func TestCQOverrunBySends(t *testing.T) {
	for _, sends := range []int{3, 8} {
		p := udPair(t)
		small, err := p.A.Ctx.CreateCQ(2)
		if err != nil {
			t.Fatal(err)
		}
		qp, err := p.A.Ctx.CreateQP(p.A.PD, ib.QPInitAttr{Type: ib.QPTypeUD, SendCQ: small, RecvCQ: p.A.CQ,
			Cap: ib.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}, SignalAll: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []struct {
			attr ib.QPAttr
			mask ib.QPAttrMask
		}{
			{ib.QPAttr{QPState: ib.QPStateInit, QKey: 0x11111111, Port: 1}, ib.QPAttrState | ib.QPAttrQKey | ib.QPAttrPKeyIndex | ib.QPAttrPort},
			{ib.QPAttr{QPState: ib.QPStateRTR}, ib.QPAttrState},
			{ib.QPAttr{QPState: ib.QPStateRTS}, ib.QPAttrState | ib.QPAttrSQPSN},
		} {
			if err := qp.Modify(&s.attr, s.mask); err != nil {
				t.Fatal(err)
			}
		}
		for i := range sends {
			post(t, qp, ib.SendWR{WRID: uint64(i), Opcode: ib.WRSend, Inline: true, InlineData: []byte{byte(i)},
				AH: ibtest.AddressOf(ibtest.BToA), RemoteQPN: p.B.QP.QPN(), RemoteQKey: 0x11111111})
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = p.Wire.Run(nil, 10000)
		}()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatalf("%d sends: the wire still runs after a minute: the send queue's retirement does not stop", sends)
		}
		if err := small.Err(); !errors.Is(err, ib.ErrCQOverrun) {
			t.Fatalf("%d sends: cq error %v", sends, err)
		}
		if qp.State() != ib.QPStateErr {
			t.Fatalf("%d sends: qp state %s", sends, qp.State())
		}
		// The queue is empty again: a send posted in the error state
		// completes (flushed), as many as the queue holds.
		if err := qp.PostSend(ib.SendWR{WRID: 99, Opcode: ib.WRSend, Inline: true, InlineData: []byte{1},
			AH: ibtest.AddressOf(ibtest.BToA), RemoteQPN: p.B.QP.QPN(), RemoteQKey: 0x11111111}); err != nil {
			t.Fatalf("%d sends: post after the overrun: %v", sends, err)
		}
	}
}
