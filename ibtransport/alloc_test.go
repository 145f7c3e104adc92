package ibtransport_test

import (
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/ibtransport/ibtest"
)

// TestMessagePathAllocs: in steady state a 64-byte SEND (receive posted, SEND
// posted, packets carried, both completions polled) and a 64 KiB RDMA WRITE of
// 16 packets allocate nothing: the engine's per-message and per-packet work reuses
// its buffers. The benchmarks report allocs/op; this makes a regression fail.
func TestMessagePathAllocs(t *testing.T) {
	t.Run("send 64", func(t *testing.T) {
		p := newRC(t)
		src := regMR(t, p.A.PD, pattern(64, 1), 0)
		dst := regMR(t, p.B.PD, make([]byte, 64), ib.AccessLocalWrite)
		wr := ib.SendWR{Opcode: ib.WRSend, SGL: []ib.SGE{src.SGE(0, 64)}, Signaled: true}
		rwr := ib.RecvWR{WRID: 7, SGL: []ib.SGE{dst.SGE(0, 64)}}
		wc := make([]ib.WC, 1)
		step := func() {
			if err := p.B.QP.PostRecv(rwr); err != nil {
				t.Fatal(err)
			}
			if err := p.A.QP.PostSend(wr); err != nil {
				t.Fatal(err)
			}
			pumpUntil(t, p.Wire, p.B.CQ, wc)
			pumpUntil(t, p.Wire, p.A.CQ, wc)
		}
		for range 8 { // warm up
			step()
		}
		if n := testing.AllocsPerRun(200, step); n != 0 {
			t.Errorf("%v allocations per SEND", n)
		}
	})
	t.Run("write 64K", func(t *testing.T) {
		const n = 64 << 10
		o := ibtest.DefaultConnOptions()
		o.PathMTU = 4096
		p := newPair(t, ib.QPTypeRC, o)
		src := regMR(t, p.A.PD, pattern(n, 1), 0)
		dst := regMR(t, p.B.PD, make([]byte, n), allAccess)
		wr := ib.SendWR{Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{src.SGE(0, n)}, RemoteAddr: dst.Addr(), RKey: dst.RKey(), Signaled: true}
		wc := make([]ib.WC, 1)
		step := func() {
			if err := p.A.QP.PostSend(wr); err != nil {
				t.Fatal(err)
			}
			pumpUntil(t, p.Wire, p.A.CQ, wc)
		}
		for range 8 {
			step()
		}
		if n := testing.AllocsPerRun(100, step); n != 0 {
			t.Errorf("%v allocations per 64 KiB WRITE", n)
		}
	})
}
