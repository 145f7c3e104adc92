package ibtransport_test

import (
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
)

// TestOutputSealed: OutputSealed calls seal once with the index of the first
// packet it appended, before the Context's lock is released (a verb started
// meanwhile returns only after seal), and not at all when nothing is sent.
func TestOutputSealed(t *testing.T) {
	p := newRC(t)
	mr := regMR(t, p.A.PD, make([]byte, 64), ib.AccessLocalWrite)
	out := ib.NewOutputBatch(8, 64, 4)
	now := time.Unix(1000, 0)
	calls := 0
	seal := func(first int) {
		calls++
		if first != 0 || len(out.Packets) != 1 {
			t.Errorf("seal(%d) with %d packets, want seal(0) with 1", first, len(out.Packets))
		}
		done := make(chan struct{})
		go func() {
			p.A.Ctx.HasOutput() // takes the lock
			close(done)
		}()
		time.Sleep(20 * time.Millisecond)
		select {
		case <-done:
			t.Error("a verb ran while seal did: the lock was released")
		default:
		}
	}
	if n := p.A.Ctx.OutputSealed(now, out, seal); n != 0 || calls != 0 {
		t.Fatalf("nothing to send: %d packets, %d seal calls", n, calls)
	}
	if err := p.A.QP.PostSend(ib.SendWR{WRID: 1, Opcode: ib.WRSend, Signaled: true, SGL: []ib.SGE{mr.SGE(0, 16)}}); err != nil {
		t.Fatal(err)
	}
	if n := p.A.Ctx.OutputSealed(now, out, seal); n != 1 || calls != 1 {
		t.Fatalf("one SEND: %d packets, %d seal calls", n, calls)
	}
}
