package ibtransport_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/ibtransport/ibtest"
)

// closed reports whether ch is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestHoldWake: while a Context holds its wake-ups (a device's reader over a
// batch of Input), a post queues its work without signalling Wake, and
// ReleaseWake reports it (output) so that the holder sends it; once
// released, a post signals again.
func TestHoldWake(t *testing.T) {
	p := newRC(t)
	src := regMR(t, p.A.PD, pattern(64, 1), 0)
	dst := regMR(t, p.B.PD, make([]byte, 64), ib.AccessLocalWrite)
	_ = p.Wire.Run(nil, 100000)
	woken(p.A.Ctx)
	postRecv(t, p.B.QP, ib.RecvWR{WRID: 1, SGL: []ib.SGE{dst.SGE(0, 64)}}, ib.RecvWR{WRID: 3, SGL: []ib.SGE{dst.SGE(0, 64)}})
	p.A.Ctx.HoldWake()
	post(t, p.A.QP, ib.SendWR{WRID: 2, Opcode: ib.WRSend, Signaled: true, SGL: []ib.SGE{src.SGE(0, 64)}})
	if woken(p.A.Ctx) {
		t.Fatal("a post signalled Wake while the Context held it")
	}
	calls := 0
	p.A.Ctx.ReleaseWake(func(output, woke bool) {
		calls++
		if !output || woke {
			t.Errorf("ReleaseWake after a post: output %v woke %v, want true false", output, woke)
		}
	})
	if calls != 1 {
		t.Fatalf("ReleaseWake called its function %d times, want 1", calls)
	}
	wantWC(t, complete(t, p, p.B.CQ, 1)[0], 1, ib.WCRecv, ib.WCSuccess)
	wantWC(t, complete(t, p, p.A.CQ, 1)[0], 2, ib.WCSend, ib.WCSuccess)
	post(t, p.A.QP, ib.SendWR{WRID: 4, Opcode: ib.WRSend, Signaled: true, SGL: []ib.SGE{src.SGE(0, 64)}})
	if !woken(p.A.Ctx) {
		t.Fatal("a post after ReleaseWake did not signal Wake")
	}
}

// TestHoldWakeWaiters: a completion for a CQ.Wait (or an armed CQ's Events)
// while the Context holds its wake-ups readies the waiter only after the
// function ReleaseWake calls first: the holder readies its device loop there,
// so that Go runs the application's goroutine, readied last, next on the
// holder's thread (not after the loop's send).
func TestHoldWakeWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newRC(t)
		src := regMR(t, p.A.PD, pattern(64, 1), 0)
		dst := regMR(t, p.B.PD, make([]byte, 64), ib.AccessLocalWrite)
		_ = p.Wire.Run(nil, 100000)
		postRecv(t, p.B.QP, ib.RecvWR{WRID: 1, SGL: []ib.SGE{dst.SGE(0, 64)}})
		p.B.CQ.Notify(false)
		waited := make(chan struct{})
		go func() {
			if err := p.B.CQ.Wait(context.Background()); err != nil {
				t.Error(err)
			}
			close(waited)
		}()
		synctest.Wait() // the waiter is parked
		p.B.Ctx.HoldWake()
		post(t, p.A.QP, ib.SendWR{WRID: 2, Opcode: ib.WRSend, Signaled: true, SGL: []ib.SGE{src.SGE(0, 64)}})
		_ = p.Wire.Run(nil, 100000) // B's Input completes the receive
		synctest.Wait()
		if closed(waited) || len(p.B.CQ.Events()) > 0 {
			t.Fatal("a completion readied the CQ's waiter while the Context held its wake-ups")
		}
		calls := 0
		p.B.Ctx.ReleaseWake(func(output, woke bool) {
			calls++
			synctest.Wait()
			if closed(waited) || len(p.B.CQ.Events()) > 0 {
				t.Error("the waiter was readied before ReleaseWake's function ran")
			}
			if !woke {
				t.Error("ReleaseWake's function: woke false after a completion for a waiter")
			}
		})
		synctest.Wait()
		if calls != 1 || !closed(waited) || len(p.B.CQ.Events()) != 1 {
			t.Fatalf("after ReleaseWake: %d calls, waiter readied %v, %d events; want 1, true, 1", calls, closed(waited), len(p.B.CQ.Events()))
		}
	})
}

// TestHoldWakeCancelledWaiter: a CQ.Wait whose context ends after a
// completion readied it, its wake-up held (HoldWake), returns at once. It
// used to take the signal it was sent from its channel, under the Context's
// lock, and would have waited there for ReleaseWake, which takes that lock:
// forever.
func TestHoldWakeCancelledWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newRC(t)
		src := regMR(t, p.A.PD, pattern(64, 1), 0)
		dst := regMR(t, p.B.PD, make([]byte, 64), ib.AccessLocalWrite)
		_ = p.Wire.Run(nil, 100000)
		postRecv(t, p.B.QP, ib.RecvWR{WRID: 1, SGL: []ib.SGE{dst.SGE(0, 64)}})
		ctx, cancel := context.WithCancel(context.Background())
		waited := make(chan error, 1)
		go func() { waited <- p.B.CQ.Wait(ctx) }()
		synctest.Wait()
		p.B.Ctx.HoldWake()
		post(t, p.A.QP, ib.SendWR{WRID: 2, Opcode: ib.WRSend, Signaled: true, SGL: []ib.SGE{src.SGE(0, 64)}})
		_ = p.Wire.Run(nil, 100000)
		cancel()
		synctest.Wait()
		select {
		case err := <-waited:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Wait: %v, want context.Canceled", err)
			}
		default:
			t.Fatal("a cancelled Wait whose wake-up was held did not return")
		}
		p.B.Ctx.ReleaseWake(nil)
		wantWC(t, complete(t, p, p.B.CQ, 1)[0], 1, ib.WCRecv, ib.WCSuccess)
	})
}

// TestHoldWakeLetsWindowThrough: an ACK that lets waiting requests into the
// window signals Wake even while the Context holds its wake-ups: a stream's
// packets are the device loop's to send, on its own thread, while the
// holder (a reader) goes on reading ACKs.
func TestHoldWakeLetsWindowThrough(t *testing.T) {
	p, err := ibtest.NewPair(ib.ContextConfig{Seed: 1, MaxUnackedPSNs: 4}, ib.QPTypeRC, ibtest.DefaultConnOptions())
	if err != nil {
		t.Fatal(err)
	}
	src := regMR(t, p.A.PD, pattern(8<<10, 1), 0)
	dst := regMR(t, p.B.PD, make([]byte, 8<<10), allAccess)
	_ = p.Wire.Run(nil, 100000)
	post(t, p.A.QP, ib.SendWR{WRID: 1, Opcode: ib.WRRDMAWrite, Signaled: true, SGL: []ib.SGE{src.SGE(0, 8<<10)},
		RemoteAddr: dst.Addr(), RKey: dst.RKey()})
	now := p.Wire.Clock.Now()
	batch := ib.NewOutputBatch(32, 0, 0)
	if n := p.A.Ctx.Output(now, batch); n != 4 {
		t.Fatalf("A sent %d packets of 8, want its window's 4", n)
	}
	for _, pkt := range batch.Packets {
		if err := p.B.Ctx.Input(now, pkt.Packet(), ib.InputMeta{}); err != nil {
			t.Fatal(err)
		}
	}
	batch.Reset()
	if n := p.B.Ctx.Output(now, batch); n != 1 {
		t.Fatalf("B sent %d packets, want an ACK", n)
	}
	woken(p.A.Ctx)
	p.A.Ctx.HoldWake()
	if err := p.A.Ctx.Input(now, batch.Packets[0].Packet(), ib.InputMeta{}); err != nil {
		t.Fatal(err)
	}
	if !woken(p.A.Ctx) {
		t.Error("the ACK that opened the window for a waiting WRITE did not signal Wake while held")
	}
	p.A.Ctx.ReleaseWake(nil)
	wantWC(t, complete(t, p, p.A.CQ, 1)[0], 1, ib.WCRDMAWrite, ib.WCSuccess)
}
