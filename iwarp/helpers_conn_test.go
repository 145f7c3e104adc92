package iwarp_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/iwarp"
)

// side is one end of a test connection: a device with a PD, CQs, a QP and a
// registered buffer.
type side struct {
	dev  *iwarp.Device
	ctx  *ib.Context
	pd   *ib.PD
	scq  *ib.CQ
	rcq  *ib.CQ
	qp   *ib.QP
	buf  []byte
	mr   *ib.MR
	conn *iwarp.Conn
}

const testAccess = ib.AccessLocalWrite | ib.AccessRemoteWrite | ib.AccessRemoteRead | ib.AccessRemoteAtomic

func newSide(t testing.TB, size int) *side {
	t.Helper()
	dev, err := iwarp.Open(iwarp.DeviceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	s := &side{dev: dev, ctx: dev.Context()}
	s.pd = s.ctx.AllocPD()
	s.scq, _ = s.ctx.CreateCQ(1024)
	s.rcq, _ = s.ctx.CreateCQ(1024)
	s.qp, err = s.ctx.CreateQP(s.pd, ib.QPInitAttr{Type: ib.QPTypeRC, SendCQ: s.scq, RecvCQ: s.rcq,
		Cap: ib.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 256}})
	if err != nil {
		t.Fatal(err)
	}
	s.buf = make([]byte, size)
	s.mr, err = s.pd.RegMR(s.buf, testAccess)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// pair dials a from b's listener with the given parameters.
func pair(t testing.TB, size int, dp, lp iwarp.ConnParams) (a, b *side) {
	t.Helper()
	a, b = newSide(t, size), newSide(t, size)
	ca, cb, err := connect(t, a.qp, b.qp, dp, lp)
	if err != nil {
		t.Fatal(err)
	}
	a.conn, b.conn = ca, cb
	t.Cleanup(func() {
		ca.Close()
		cb.Close()
	})
	return a, b
}

// connect runs Dial and Accept against each other over loopback TCP.
func connect(t testing.TB, dq, lq *ib.QP, dp, lp iwarp.ConnParams) (*iwarp.Conn, *iwarp.Conn, error) {
	t.Helper()
	ln, err := iwarp.Listen("127.0.0.1:0", lp)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type res struct {
		c   *iwarp.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.Accept(ctx, lq)
		ch <- res{c, err}
	}()
	ca, derr := iwarp.Dial(ctx, dq, ln.Addr().String(), dp)
	r := <-ch
	if derr != nil || r.err != nil {
		if ca != nil {
			ca.Close()
		}
		if r.c != nil {
			r.c.Close()
		}
		return nil, nil, errors.Join(derr, r.err)
	}
	return ca, r.c, nil
}

// wait polls n completions from cq within a bounded time.
func wait(t testing.TB, cq *ib.CQ, n int) []ib.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []ib.WC
	buf := make([]ib.WC, 16)
	for len(out) < n {
		if err := cq.Wait(ctx); err != nil {
			t.Fatalf("waiting for %d completions, have %v: %v", n, out, err)
		}
		k := cq.Poll(buf[:min(len(buf), n-len(out))])
		out = append(out, buf[:k]...)
	}
	return out
}

func wantOK(t testing.TB, wc ib.WC, wrid uint64, op ib.WCOpcode) {
	t.Helper()
	if wc.Status != ib.WCSuccess || wc.WRID != wrid || wc.Opcode != op {
		t.Fatalf("completion %v, want wr %d %s success", wc, wrid, op)
	}
}

// waitDone waits for a connection to end.
func waitDone(t testing.TB, c *iwarp.Conn) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("connection did not end")
	}
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*31) ^ seed ^ byte(i>>9)
	}
}

// recorder keeps both directions of a connection in the order the octets were
// seen, for StreamDecoder.
type recorder struct {
	mu     sync.Mutex
	chunks []chunk
}

type chunk struct {
	sent bool
	b    []byte
}

func (r *recorder) Sent(b []byte) {
	r.mu.Lock()
	r.chunks = append(r.chunks, chunk{true, append([]byte(nil), b...)})
	r.mu.Unlock()
}

func (r *recorder) Received(b []byte) {
	r.mu.Lock()
	r.chunks = append(r.chunks, chunk{false, append([]byte(nil), b...)})
	r.mu.Unlock()
}

// decode runs a StreamDecoder over each direction and returns the records' count
// per kind and opcode, failing on any error record.
func (r *recorder) decode(t testing.TB) map[string]int {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	counts := map[string]int{}
	r.replayLocked(func(sent bool) func(*iwarp.Record) {
		dir := "received"
		if sent {
			dir = "sent"
		}
		return func(rec *iwarp.Record) {
			switch rec.Kind {
			case iwarp.RecordMPAFrame:
				counts[dir+" mpa"]++
			case iwarp.RecordFPDU:
				if rec.CRCChecked {
					counts["crc checked"]++
				}
				if rec.RDMAP != nil {
					counts[dir+" "+rec.RDMAP.Opcode().String()]++
				}
			}
			if rec.Err != nil || rec.Kind == iwarp.RecordError {
				t.Errorf("%s record at %d (%s): %v", dir, rec.Offset, rec.Kind, rec.Err)
			}
		}
	})
	return counts
}

// replayLocked runs a StreamDecoder over each direction, in the order the
// octets were seen, emitting to emit(true) for the sent one and emit(false)
// for the received one. r.mu is held.
func (r *recorder) replayLocked(emit func(sent bool) func(*iwarp.Record)) {
	var neg iwarp.Negotiation
	out := iwarp.NewStreamDecoder(&neg, emit(true))
	in := iwarp.NewStreamDecoder(&neg, emit(false))
	for _, c := range r.chunks {
		if c.sent {
			out.Write(c.b)
		} else {
			in.Write(c.b)
		}
	}
	out.Close()
	in.Close()
}

func (r *recorder) observe(net.Addr, net.Addr) iwarp.StreamObserver { return r }
