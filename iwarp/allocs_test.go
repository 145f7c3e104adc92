package iwarp_test

import (
	"runtime"
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/iwarp"
)

// TestSteadyStateAllocs: once a connection is warm, its work requests allocate
// nothing on either side: the heap allocations counted over 256 operations
// of each kind, sender and receiver together, stay below one in four per
// operation (a closure or buffer per FPDU or per message would give one or
// more). Allocation counts, not times, so the bound holds on a loaded machine.
func TestSteadyStateAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: 1600 operations")
	}
	a, b := pair(t, 2<<20+4096, iwarp.ConnParams{}, iwarp.ConnParams{})
	const n = 64 << 10
	src := a.mr.SGE(srcOff, n)
	cases := []struct {
		name string
		wr   ib.SendWR
		recv bool // the op consumes a receive WR at b
	}{
		{"WRITE", ib.SendWR{Opcode: ib.WRRDMAWrite, RKey: b.mr.RKey(), RemoteAddr: b.mr.Addr() + dstOff}, false},
		{"READ", ib.SendWR{Opcode: ib.WRRDMARead, RKey: b.mr.RKey(), RemoteAddr: b.mr.Addr() + srcOff}, false},
		{"SEND", ib.SendWR{Opcode: ib.WRSend}, true},
		{"WRITE_WITH_IMM", ib.SendWR{Opcode: ib.WRRDMAWriteWithImm, RKey: b.mr.RKey(), RemoteAddr: b.mr.Addr() + dstOff, Imm: 7}, true},
		{"FETCH_ADD", ib.SendWR{Opcode: ib.WRAtomicFetchAdd, RKey: b.mr.RKey(), RemoteAddr: b.mr.Addr() + dstOff, CompareAdd: 1}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wr := tc.wr
			wr.SGL = []ib.SGE{src}
			if wr.Opcode == ib.WRRDMARead {
				wr.SGL[0] = a.mr.SGE(dstOff, n)
			}
			if wr.Opcode == ib.WRAtomicFetchAdd {
				wr.SGL[0] = a.mr.SGE(dstOff, 8)
			}
			recv := ib.RecvWR{SGL: []ib.SGE{b.mr.SGE(dstOff, half)}}
			wc := make([]ib.WC, 16)
			run := func(count int) {
				deadline := time.Now().Add(20 * time.Second)
				for done := 0; done < count; {
					k := min(16, count-done)
					for i := range k {
						if tc.recv {
							if err := b.qp.PostRecv(recv); err != nil {
								t.Fatal(err)
							}
						}
						wr.WRID, wr.Signaled = uint64(i), true
						if err := a.qp.PostSend(wr); err != nil {
							t.Fatal(err)
						}
					}
					for got, rgot := 0, 0; got < k || (tc.recv && rgot < k); {
						if time.Now().After(deadline) {
							t.Fatalf("%d of %d completions after 20s (%d received)", got, k, rgot)
						}
						m := a.scq.Poll(wc)
						for _, c := range wc[:m] {
							if c.Status != ib.WCSuccess {
								t.Fatalf("completion %v", c)
							}
						}
						got += m
						if tc.recv {
							r := b.rcq.Poll(wc)
							for _, c := range wc[:r] {
								if c.Status != ib.WCSuccess {
									t.Fatalf("receive completion %v", c)
								}
							}
							rgot += r
						}
						if m == 0 {
							runtime.Gosched()
						}
					}
					done += k
				}
			}
			run(64) // warm-up: queues, arenas and buffers reach their size
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			const ops = 256
			run(ops)
			runtime.ReadMemStats(&after)
			per := float64(after.Mallocs-before.Mallocs) / ops
			t.Logf("%s: %.3f allocations per operation", tc.name, per)
			if per >= 0.25 {
				t.Errorf("%s: %.2f heap allocations per operation in steady state, want 0", tc.name, per)
			}
		})
	}
}
