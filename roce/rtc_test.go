package roce_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/netio"
	"github.com/softrdma/softrdma/roce"
	"github.com/softrdma/softrdma/sim"
)

// newIdlePair is newPair with what connecting left to send sent: each QP
// off the engines' lists of QPs to serve, as in a running device.
func newIdlePair(t *testing.T) *pair {
	t.Helper()
	p := newPair(t, sim.LinkConfig{Latency: 5 * time.Microsecond})
	for _, d := range []*roce.Device{p.a, p.b} {
		if _, err := d.Flush(p.net.Now()); err != nil {
			t.Fatal(err)
		}
	}
	p.net.RunFor(time.Millisecond)
	for _, d := range []*roce.Device{p.a, p.b} {
		if _, err := d.Poll(p.net.Now()); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// readerBatch is one step of Run's reader on d's sim port: it reads the
// frames delivered so far, hands them to the engine between BeginBatch and
// InputDone, and returns how often InputDone kicked the loop at once
// (kicks) and for later (laters: outputDefer).
func readerBatch(t *testing.T, d *roce.Device, now time.Time, plan *roce.LoopPlan) (frames, kicks, laters int) {
	t.Helper()
	bufs := [][]byte{make([]byte, 2048), make([]byte, 2048), make([]byte, 2048), make([]byte, 2048)}
	sizes := make([]int, len(bufs))
	n, err := d.Endpoint().(netio.Poller).TryRead(bufs, sizes, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !d.BeginBatch(max(n, 1)) {
		t.Fatalf("a batch of %d frames is not run to completion", n)
	}
	d.Input(now, bufs[:n], sizes[:n])
	d.InputDone(now, plan, func() { kicks++ }, func() { laters++ })
	return n, kicks, laters
}

// sendArmed posts receive recvID on b with b's CQ armed, and sends it a
// 64-byte SEND (sendID) from a: the frames are on the wire to b, not read yet.
func sendArmed(t *testing.T, p *pair, recvID, sendID uint64) {
	t.Helper()
	if err := p.qb.PostRecv(ibtransport.RecvWR{WRID: recvID, SGL: []ibtransport.SGE{p.mrb.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	p.cqb.Notify(false)
	if err := p.qa.PostSend(ibtransport.SendWR{WRID: sendID, Opcode: ibtransport.WRSend, Signaled: true,
		SGL: []ibtransport.SGE{p.mra.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.a.Flush(p.net.Now()); err != nil {
		t.Fatal(err)
	}
	p.net.RunFor(time.Millisecond)
}

// TestRunToCompletionAnswers: Run's reader sends what a short batch calls
// for (the READ response to a READ request) itself, without readying the
// loop; a batch that readies an application goroutine (a receive completion
// for a CQ.Wait, and the ACK it calls for) leaves its output to the loop,
// which it kicks.
func TestRunToCompletionAnswers(t *testing.T) {
	p := newIdlePair(t)
	var plan roce.LoopPlan
	plan.Planned(time.Time{}, false)
	if err := p.qa.PostSend(ibtransport.SendWR{WRID: 1, Opcode: ibtransport.WRRDMARead, Signaled: true,
		SGL: []ibtransport.SGE{p.mra.SGE(0, 64)}, RemoteAddr: p.mrb.Addr(), RKey: p.mrb.RKey()}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.a.Flush(p.net.Now()); err != nil {
		t.Fatal(err)
	}
	p.net.RunFor(time.Millisecond)
	out := p.b.Counters().FramesOut
	if n, kicks, laters := readerBatch(t, p.b, p.net.Now(), &plan); n != 1 || kicks != 0 || laters != 0 {
		t.Fatalf("READ request: %d frames read, %d kicks, %d for later; want 1 frame, no kick", n, kicks, laters)
	}
	if got := p.b.Counters().FramesOut - out; got != 1 {
		t.Fatalf("the reader sent %d frames for the READ request, want its response", got)
	}
	p.net.RunFor(time.Millisecond)
	if _, err := p.a.Poll(p.net.Now()); err != nil {
		t.Fatal(err)
	}
	wcs := make([]ibtransport.WC, 4)
	if n := p.cqa.Poll(wcs); n != 1 || wcs[0].Status != ibtransport.WCSuccess || wcs[0].Opcode != ibtransport.WCRDMARead {
		t.Fatalf("A's completions %v, want its READ's", wcs[:n])
	}

	// A SEND for a receive whose CQ is armed: its completion readies the
	// goroutine reading the CQ's events.
	sendArmed(t, p, 2, 3)
	out = p.b.Counters().FramesOut
	plan.Planned(p.net.Now().Add(time.Hour), true) // the loop's plan: not late
	if n, kicks, laters := readerBatch(t, p.b, p.net.Now(), &plan); n != 1 || kicks != 0 || laters != 1 {
		t.Fatalf("SEND for an armed CQ: %d frames read, %d kicks, %d for later; want 1 frame, a kick for later only", n, kicks, laters)
	}
	if got := p.b.Counters().FramesOut - out; got != 0 {
		t.Fatalf("the reader sent %d frames itself for a batch that readied the application, want 0 (the application's post or the loop sends)", got)
	}
	if len(p.cqb.Events()) != 1 {
		t.Fatal("the completion's event was not given")
	}
	if !p.b.Context().HasOutput() {
		t.Fatal("the SEND's ACK is not waiting")
	}
	// The application waits again without posting: the wait sends the ACK.
	kicks := 0
	p.b.SetRunWaitHook(&plan, func() { kicks++ })
	defer p.b.Context().SetWaitHook(nil)
	done, cancel := context.WithCancel(context.Background())
	cancel()
	p.cqb.Poll(make([]ibtransport.WC, 4))
	if err := p.cqb.Wait(done); err == nil {
		t.Fatal("Wait on an empty CQ with a cancelled context returned nil")
	}
	if got := p.b.Counters().FramesOut - out; got != 1 || kicks != 0 || p.b.Context().HasOutput() {
		t.Fatalf("the wait sent %d frames and kicked the loop %d times, want the ACK, no kick", got, kicks)
	}
	if err := p.cqb.Wait(done); err == nil || p.b.Counters().FramesOut-out != 1 {
		t.Fatal("a second wait with nothing left did not return or sent again")
	}

	// Another SEND; this time the application answers: its post sends the
	// ACK with its SEND.
	sendArmed(t, p, 6, 7)
	out = p.b.Counters().FramesOut
	if n, kicks, laters := readerBatch(t, p.b, p.net.Now(), &plan); n != 1 || kicks != 0 || laters != 1 {
		t.Fatalf("second SEND for an armed CQ: %d frames read, %d kicks, %d for later; want 1 frame, a kick for later only", n, kicks, laters)
	}
	p.b.SetRunPostHook(&plan, func() { kicks++ })
	defer p.b.Context().SetPostHook(nil)
	if err := p.qa.PostRecv(ibtransport.RecvWR{WRID: 4, SGL: []ibtransport.SGE{p.mra.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	if err := p.qb.PostSend(ibtransport.SendWR{WRID: 5, Opcode: ibtransport.WRSend, SGL: []ibtransport.SGE{p.mrb.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	if got := p.b.Counters().FramesOut - out; got != 2 || kicks != 0 {
		t.Fatalf("the answer's post sent %d frames and kicked the loop %d times, want the ACK and the SEND, no kick", got, kicks)
	}
	p.cqb.Poll(make([]ibtransport.WC, 4))
	if err := p.cqb.Wait(done); err == nil || p.b.Counters().FramesOut-out != 2 {
		t.Fatal("a wait after the post's flush did not return or sent again")
	}
}

// TestRunToCompletionKicksForDeadline: after a batch, Run's reader kicks
// the loop when the engine's next deadline comes before the one the loop
// sleeps until (the batch's output may have started a timer on a QP that
// was idle when the loop planned), or when the loop is planning (it may have
// read the deadlines before the batch changed them), and only then.
func TestRunToCompletionKicksForDeadline(t *testing.T) {
	p := newIdlePair(t)
	if err := p.qa.PostSend(ibtransport.SendWR{WRID: 1, Opcode: ibtransport.WRRDMAWrite, Signaled: true,
		SGL: []ibtransport.SGE{p.mra.SGE(0, 64)}, RemoteAddr: p.mrb.Addr(), RKey: p.mrb.RKey()}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.a.Flush(p.net.Now()); err != nil {
		t.Fatal(err)
	}
	timer, ok := p.a.NextDeadline()
	if !ok {
		t.Fatal("no deadline after a WRITE was sent")
	}
	for _, tc := range []struct {
		name string
		plan func(*roce.LoopPlan)
		kick bool
	}{
		{"no deadline planned", func(l *roce.LoopPlan) { l.Planned(time.Time{}, false) }, true},
		{"a later deadline planned", func(l *roce.LoopPlan) { l.Planned(timer.Add(time.Second), true) }, true},
		{"the loop planning", func(l *roce.LoopPlan) { l.Planning() }, true},
		{"that deadline planned", func(l *roce.LoopPlan) { l.Planned(timer, true) }, false},
		{"an earlier deadline planned", func(l *roce.LoopPlan) { l.Planned(timer.Add(-time.Millisecond), true) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var plan roce.LoopPlan
			tc.plan(&plan)
			if _, kicks, _ := readerBatch(t, p.a, p.net.Now(), &plan); (kicks > 0) != tc.kick {
				t.Fatalf("%d kicks, want a kick %v", kicks, tc.kick)
			}
		})
	}
}

// TestRunToCompletionBesideFlush: Run's reader does not wait for a Flush
// under way (the loop's, through its send system call) to end its batch: it
// kicks the loop if the batch has output (the Flush may have taken the
// engine's output before the batch queued it), and reads the deadlines
// without the device's lock. Reading them under it, the reader waited for
// every send of the loop (softrdma bench's 64 B rates: 0.51 s blocked in 3 s).
func TestRunToCompletionBesideFlush(t *testing.T) {
	p := newIdlePair(t)
	var plan roce.LoopPlan
	plan.Planned(time.Time{}, false)
	for _, output := range []bool{false, true} {
		p.a.LockFlush()
		done := make(chan int, 1)
		go func() {
			var kicks int
			p.a.BeginBatch(1)
			if output { // a post during the batch
				if err := p.qa.PostSend(ibtransport.SendWR{WRID: 1, Opcode: ibtransport.WRRDMAWrite,
					SGL: []ibtransport.SGE{p.mra.SGE(0, 64)}, RemoteAddr: p.mrb.Addr(), RKey: p.mrb.RKey()}); err != nil {
					t.Error(err)
				}
			}
			p.a.InputDone(p.net.Now(), &plan, func() { kicks++ }, func() { kicks++ })
			done <- kicks
		}()
		select {
		case kicks := <-done:
			if kicks == 0 && output {
				t.Error("output queued while another Flush held the device: the loop was not kicked")
			}
		case <-time.After(time.Minute): // a deadlock, not a measurement
			t.Fatalf("output %v: the reader waited for the Flush under way", output)
		}
		p.a.UnlockFlush()
	}
}

// TestRunPostFlush: under Run, a post to an idle QP is sent from the posting
// goroutine (the Context's post hook), with no hop to the loop; the loop is
// kicked only when the request's timer comes before the loop's plan, or
// when another Flush holds the device (the post then waits for the loop).
func TestRunPostFlush(t *testing.T) {
	p := newIdlePair(t)
	for _, tc := range []struct {
		name   string
		plan   func(*roce.LoopPlan)
		locked bool
		sent   bool
	}{
		{name: "no deadline planned", plan: func(l *roce.LoopPlan) { l.Planned(time.Time{}, false) }, sent: true},
		{name: "a deadline planned", plan: func(l *roce.LoopPlan) { l.Planned(time.Unix(0, 1), true) }, sent: true},
		{name: "another flush under way", plan: func(l *roce.LoopPlan) { l.Planned(time.Unix(0, 1), true) }, locked: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var plan roce.LoopPlan
			tc.plan(&plan)
			kicks := 0
			p.a.SetRunPostHook(&plan, func() { kicks++ })
			defer p.a.Context().SetPostHook(nil)
			out := p.a.Counters().FramesOut
			if tc.locked {
				p.a.LockFlush()
			}
			if err := p.qa.PostSend(ibtransport.SendWR{WRID: 1, Opcode: ibtransport.WRRDMAWrite, Signaled: true,
				SGL: []ibtransport.SGE{p.mra.SGE(0, 64)}, RemoteAddr: p.mrb.Addr(), RKey: p.mrb.RKey()}); err != nil {
				t.Fatal(err)
			}
			if tc.locked {
				p.a.UnlockFlush()
			}
			sent := p.a.Counters().FramesOut - out
			if (sent == 1) != tc.sent || sent > 1 {
				t.Fatalf("the post sent %d frames, want its WRITE sent by the poster %v", sent, tc.sent)
			}
			// The loop runs when it must: the timer the WRITE started comes
			// before "no deadline", not before an earlier plan; and a post
			// the poster could not send is the loop's.
			if wantKick := !tc.sent || tc.name == "no deadline planned"; (kicks > 0) != wantKick {
				t.Fatalf("%d kicks, want a kick %v", kicks, wantKick)
			}
			if _, err := p.a.Flush(p.net.Now()); err != nil {
				t.Fatal(err)
			}
			p.net.RunFor(time.Millisecond)
			p.b.Poll(p.net.Now())
			p.net.RunFor(time.Millisecond)
			p.a.Poll(p.net.Now())
			wcs := make([]ibtransport.WC, 4)
			if n := p.cqa.Poll(wcs); n != 1 || wcs[0].Status != ibtransport.WCSuccess {
				t.Fatalf("A's completions %v, want its WRITE's", wcs[:n])
			}
		})
	}
}

// TestRunDeferredOutput: under Run, the ACK of a SEND whose receive
// completion woke a goroutine waiting on the CQ is left for that goroutine's
// next post (inputDone); when none comes, the loop sends it after
// outputDefer. Here the receiver never posts and the sender's QP has no
// transport timer (Timeout 0, "infinite"): without the loop's deferred
// flush the SENDs would never complete.
func TestRunDeferredOutput(t *testing.T) {
	ipA, ipB := netip.MustParseAddr("127.0.77.5"), netip.MustParseAddr("127.0.77.6")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, b := runUDPDevice(t, ctx, ipA, 5), runUDPDevice(t, ctx, ipB, 6)
	qa, cqa, mra := setupQP(t, a)
	qb, cqb, mrb := setupQP(t, b)
	connectTimeout(t, a, qa, qb, ipB, 1, 2, 0)
	connectTimeout(t, b, qb, qa, ipA, 2, 1, 0)
	wait := completionWaiter(t, ctx, nil)
	for i := range 10 {
		if err := qb.PostRecv(ibtransport.RecvWR{WRID: uint64(i), SGL: []ibtransport.SGE{mrb.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
		got := make(chan ibtransport.WC, 1)
		go func() {
			wc := make([]ibtransport.WC, 1)
			for cqb.Poll(wc) == 0 {
				if cqb.Wait(ctx) != nil {
					close(got)
					return
				}
			}
			got <- wc[0]
		}()
		time.Sleep(time.Millisecond) // let the receiver block in Wait (else the reader sends the ACK itself)
		if err := qa.PostSend(ibtransport.SendWR{WRID: uint64(i), Opcode: ibtransport.WRSend, Signaled: true,
			SGL: []ibtransport.SGE{mra.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
		if wc, ok := <-got; !ok || wc.Status != ibtransport.WCSuccess {
			t.Fatalf("SEND %d: receive completion %v (ok %v)", i, wc, ok)
		}
		wait(cqa, ibtransport.WCSend)
	}
}
