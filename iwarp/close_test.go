package iwarp_test

import (
	"errors"
	"net"
	"sync"
	"syscall"
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/iwarp"
)

// TestCloseAbortAndError: the ways a connection ends. Orderly close (FIN both
// ways): Close returns nil and the peer sees ErrPeerClosed. Abort (RST): the peer
// sees a lost connection. The application moving the QP to ERR ends its
// connection with ErrQPError. In every case both QPs end in ERR with their
// outstanding WRs flushed.
func TestCloseAbortAndError(t *testing.T) {
	for _, c := range []struct {
		name     string
		end      func(a *side)
		localErr func(error) bool
		peerErr  func(error) bool
	}{
		{"close", func(a *side) { a.conn.Close() },
			func(err error) bool { return err == nil },
			func(err error) bool { return err == iwarp.ErrPeerClosed }},
		{"abort", func(a *side) { a.conn.Abort() },
			func(err error) bool { return err == nil },
			func(err error) bool {
				return errors.Is(err, iwarp.ErrConnectionLost) && errors.Is(err, syscall.ECONNRESET)
			}},
		{"QP to ERR", func(a *side) { a.qp.Modify(&ib.QPAttr{QPState: ib.QPStateErr}, ib.QPAttrState) },
			func(err error) bool { return err == iwarp.ErrQPError },
			func(err error) bool { return err == iwarp.ErrPeerClosed }},
		{"QP destroyed", func(a *side) { a.qp.Destroy() },
			func(err error) bool { return err == iwarp.ErrQPError },
			func(err error) bool { return err == iwarp.ErrPeerClosed }},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := pair(t, 4096, iwarp.ConnParams{}, iwarp.ConnParams{})
			for _, s := range []*side{a, b} {
				s.qp.PostRecv(ib.RecvWR{WRID: 1, SGL: []ib.SGE{s.mr.SGE(0, 64)}})
			}
			// Traffic first, then one receive WR outstanding on each side.
			a.qp.PostSend(ib.SendWR{WRID: 2, Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{a.mr.SGE(0, 64)},
				RKey: b.mr.RKey(), RemoteAddr: b.mr.Addr(), Signaled: true})
			wantOK(t, wait(t, a.scq, 1)[0], 2, ib.WCRDMAWrite)
			c.end(a)
			waitDone(t, a.conn)
			waitDone(t, b.conn)
			if err := a.conn.Err(); !c.localErr(err) {
				t.Fatalf("local error %v", err)
			}
			if err := b.conn.Err(); !c.peerErr(err) {
				t.Fatalf("peer error %v", err)
			}
			for i, s := range []*side{a, b} {
				if c.name == "QP destroyed" && i == 0 {
					continue // a destroyed QP generates no completions
				}
				if st := s.qp.State(); st != ib.QPStateErr {
					t.Fatalf("side %d QP in %s", i, st)
				}
				if wc := wait(t, s.rcq, 1)[0]; wc.Status != ib.WCWRFlushErr {
					t.Fatalf("side %d receive %v, want flushed", i, wc)
				}
				// Posting on the ended connection's QP flushes at once.
				if err := s.qp.PostSend(ib.SendWR{WRID: 9, Opcode: ib.WRSend, Signaled: true}); err != nil {
					t.Fatal(err)
				}
				if wc := wait(t, s.scq, 1)[0]; wc.WRID != 9 || wc.Status != ib.WCWRFlushErr {
					t.Fatalf("side %d post after the end: %v", i, wc)
				}
			}
			// The QP can be reset and connected again.
			if c.name != "QP destroyed" {
				if err := a.qp.Modify(&ib.QPAttr{QPState: ib.QPStateReset}, ib.QPAttrState); err != nil {
					t.Fatal(err)
				}
				b2 := newSide(t, 64)
				ca, cb, err := connect(t, a.qp, b2.qp, iwarp.ConnParams{}, iwarp.ConnParams{})
				if err != nil {
					t.Fatalf("reconnecting a reset QP: %v", err)
				}
				ca.Close()
				cb.Close()
			}
		})
	}
}

// holdingObserver holds the writer of the connection it observes just before
// its next write, once armed: the test then knows that a Terminate is queued and
// not yet written.
type holdingObserver struct {
	armed   chan struct{} // closed to arm
	held    chan struct{} // closed when the writer is held
	release chan struct{} // closed to let it write
	once    sync.Once
}

func (o *holdingObserver) Received([]byte) {}

func (o *holdingObserver) Sent([]byte) {
	select {
	case <-o.armed:
	default:
		return
	}
	o.once.Do(func() {
		close(o.held)
		<-o.release
	})
}

// TestAbortSendsQueuedTerminate: an application that aborts as soon as its QP
// has failed (rping does on a bad completion) still gets the Terminate for the
// error to the peer before the reset. A raw peer sends a bad FPDU; the writer is
// held just before it writes the Terminate, and Abort is called. Without the
// wait, Abort reset the connection at once and the Terminate was lost (seen as
// 2 of 8 rping runs whose peer saw only a reset): the writer is released when
// Abort waits for it (a hook), or when the peer has seen the reset.
func TestAbortSendsQueuedTerminate(t *testing.T) {
	o := &holdingObserver{armed: make(chan struct{}), held: make(chan struct{}), release: make(chan struct{})}
	waiting := make(chan struct{})
	iwarp.SetAbortWaitHook(func() { close(waiting) })
	t.Cleanup(func() { iwarp.SetAbortWaitHook(nil) })
	s, ln, accepted := listening(t, iwarp.ConnParams{Observe: func(net.Addr, net.Addr) iwarp.StreamObserver { return o }})
	r := dialRaw(t, ln.Addr().String(), request(false, false, 4, 4))
	conn := <-accepted
	if conn == nil {
		t.FailNow()
	}
	s.qp.PostRecv(ib.RecvWR{WRID: 1, SGL: []ib.SGE{s.mr.SGE(0, 64)}})
	close(o.armed)
	b, _ := iwarp.AppendFPDU(nil, false, tagged(iwarp.OpWrite, 0xdeadbe00, 0x1000, true), []byte("payload"))
	r.write(b)
	<-o.held // the Terminate is queued, and not written
	if wc := wait(t, s.rcq, 1)[0]; wc.Status != ib.WCWRFlushErr {
		t.Fatalf("receive completion %v, want flushed", wc)
	}
	done := make(chan struct{})
	go func() {
		conn.Abort()
		close(done)
	}()
	select {
	case <-waiting:
	case <-r.eof:
	}
	close(o.release)
	r.waitEOF()
	<-done
	var sawTerm bool
	var neg iwarp.Negotiation
	neg.SetRequest(r.req.Flags(), r.req.Revision())
	d := iwarp.NewStreamDecoder(&neg, func(rec *iwarp.Record) {
		if rec.Kind == iwarp.RecordFPDU && rec.RDMAP.Opcode() == iwarp.OpTerminate {
			sawTerm = true
		}
	})
	d.Write(r.rep)
	r.mu.Lock()
	d.Write(r.in)
	got := len(r.in)
	r.mu.Unlock()
	if !sawTerm {
		t.Fatalf("the peer read %d octets and then %v, and no Terminate", got, r.inErr)
	}
	if !errors.Is(r.inErr, syscall.ECONNRESET) {
		t.Fatalf("the stream ended with %v after the Terminate, want a reset (Abort)", r.inErr)
	}
}
