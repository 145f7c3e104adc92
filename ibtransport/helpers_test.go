package ibtransport_test

import (
	"bytes"
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/ibtransport/ibtest"
)

// pattern returns n bytes of a recognizable pattern.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed + byte(i>>8)
	}
	return b
}

func newPair(t testing.TB, typ ib.QPType, o ibtest.ConnOptions) *ibtest.Pair {
	t.Helper()
	p, err := ibtest.NewPair(ib.ContextConfig{Seed: 1}, typ, o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newRC(t testing.TB) *ibtest.Pair { return newPair(t, ib.QPTypeRC, ibtest.DefaultConnOptions()) }

func regMR(t testing.TB, pd *ib.PD, buf []byte, a ib.Access) *ib.MR {
	t.Helper()
	mr, err := pd.RegMR(buf, a)
	if err != nil {
		t.Fatal(err)
	}
	return mr
}

// connectToSRQ creates an RC QP on p.B that takes its receive WRs from srq and an RC
// QP on p.A with the capacities aCap, and connects them with o.
func connectToSRQ(t testing.TB, p *ibtest.Pair, srq *ib.SRQ, aCap ib.QPCap, o ibtest.ConnOptions) (aq, bq *ib.QP) {
	t.Helper()
	bq, err := p.B.Ctx.CreateQP(p.B.PD, ib.QPInitAttr{Type: ib.QPTypeRC, SendCQ: p.B.CQ, RecvCQ: p.B.CQ, SRQ: srq,
		Cap: ib.QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	aq, err = p.A.Ctx.CreateQP(p.A.PD, ib.QPInitAttr{Type: ib.QPTypeRC, SendCQ: p.A.CQ, RecvCQ: p.A.CQ, Cap: aCap})
	if err != nil {
		t.Fatal(err)
	}
	if err := ibtest.Connect(aq, bq, o); err != nil {
		t.Fatal(err)
	}
	return aq, bq
}

const allAccess = ib.AccessLocalWrite | ib.AccessRemoteWrite | ib.AccessRemoteRead | ib.AccessRemoteAtomic

func wantWC(t testing.TB, wc ib.WC, wrid uint64, op ib.WCOpcode, st ib.WCStatus) {
	t.Helper()
	if wc.WRID != wrid || wc.Status != st || (st == ib.WCSuccess && wc.Opcode != op) {
		t.Fatalf("completion %v, want wr %d %s %s", wc, wrid, op, st)
	}
}

// post posts WRs on qp or fails the test.
func post(t testing.TB, qp *ib.QP, wrs ...ib.SendWR) {
	t.Helper()
	if err := qp.PostSend(wrs...); err != nil {
		t.Fatal(err)
	}
}

func postRecv(t testing.TB, qp *ib.QP, wrs ...ib.RecvWR) {
	t.Helper()
	if err := qp.PostRecv(wrs...); err != nil {
		t.Fatal(err)
	}
}

// complete runs the wire until cq has n completions.
func complete(t testing.TB, p *ibtest.Pair, cq *ib.CQ, n int) []ib.WC {
	t.Helper()
	wcs, err := p.Completions(cq, n)
	if err != nil {
		t.Fatalf("%v; got %v", err, wcs)
	}
	return wcs
}

// noMore runs the wire until it is idle and fails if cq has completions.
func noMore(t testing.TB, p *ibtest.Pair, cq *ib.CQ) {
	t.Helper()
	_ = p.Wire.Run(nil, 100000)
	var wc [4]ib.WC
	if n := cq.Poll(wc[:]); n > 0 {
		t.Fatalf("unexpected completions %v", wc[:n])
	}
}

// guarded is a registered buffer with guard bytes on both sides that no access
// may touch.
type guarded struct {
	all   []byte
	buf   []byte
	mr    *ib.MR
	guard int
}

const guardByte = 0xA5

func newGuarded(t testing.TB, pd *ib.PD, n int, a ib.Access) *guarded {
	t.Helper()
	const g = 64
	all := bytes.Repeat([]byte{guardByte}, n+2*g)
	buf := all[g : g+n]
	clear(buf)
	return &guarded{all: all, buf: buf, mr: regMR(t, pd, buf, a), guard: g}
}

func (g *guarded) check(t testing.TB) {
	t.Helper()
	for i, b := range g.all[:g.guard] {
		if b != guardByte {
			t.Fatalf("guard byte %d before the region changed to %#x", g.guard-i, b)
		}
	}
	for i, b := range g.all[g.guard+len(g.buf):] {
		if b != guardByte {
			t.Fatalf("guard byte %d after the region changed to %#x", i, b)
		}
	}
}

func decode(t testing.TB, b []byte) *ib.Packet {
	t.Helper()
	var p ib.Packet
	if err := p.Decode(b); err != nil {
		t.Fatalf("decode: %v", err)
	}
	return &p
}
