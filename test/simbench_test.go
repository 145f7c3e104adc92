package test

// The message path benchmarked end to end in one process: two RoCE devices
// on a simulated link with no latency and no bandwidth limit, so every
// request and response goes through the device's RoCEv2 framing (Ethernet,
// IPv4, UDP, BTH, ICRC computed and verified) and the simulator, as in the
// fault matrix, but nothing waits.

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/sim"
)

// simBenchLink is a zero-latency, unlimited-bandwidth link with an
// interface MTU of mtu bytes: 1500 gives the devices a path MTU of 1024
// (the fault matrix's), 9000 one of 4096.
func simBenchLink(mtu int) sim.LinkConfig { return sim.LinkConfig{MTU: mtu} }

// simBenchDepth is the number of WRs the benchmarks keep in flight (and of
// receives B keeps posted for SENDs).
const simBenchDepth = 16

// simBench streams one WR, posted again and again, from A to B over an RC
// connection, keeping simBenchDepth in flight: an RDMA WRITE of size bytes
// to the same place of B's region, or a SEND of size bytes into one of B's
// simBenchDepth receives (posted again as soon as it completes). Everything
// a message needs is built once, so that the loop itself allocates nothing.
type simBench struct {
	p   *simPair
	c   *rcConn
	op  ib.WROpcode
	src *ib.MR
	dst *ib.MR
	wr  ib.SendWR
	rwr []ib.RecvWR

	posted, completed, received, target int
	err                                 error
	done                                func() bool
	step                                func(time.Time) bool
}

func newSimBench(tb testing.TB, op ib.WROpcode, size, linkMTU int) *simBench {
	tb.Helper()
	p := newSimPair(tb, 77, simBenchLink(linkMTU))
	prm := defaultRC()
	prm.Depth = simBenchDepth
	s := &simBench{p: p, c: p.connectRC(prm), op: op}
	s.src = p.a.regMR(tb, size, ib.AccessLocalWrite, 0)
	content(s.src.Buf(), 77, 1)
	s.wr = ib.SendWR{Opcode: op, Signaled: true, SGL: []ib.SGE{s.src.SGE(0, size)}}
	switch op {
	case ib.WRRDMAWrite:
		s.dst = p.b.regMR(tb, size, ib.AccessLocalWrite|ib.AccessRemoteWrite, canary)
		s.wr.RemoteAddr, s.wr.RKey = s.dst.Addr(), s.dst.RKey()
	case ib.WRSend:
		s.dst = p.b.regMR(tb, size*simBenchDepth, ib.AccessLocalWrite, canary)
		for j := range simBenchDepth {
			s.rwr = append(s.rwr, ib.RecvWR{WRID: uint64(j), SGL: []ib.SGE{s.dst.SGE(j*size, size)}})
			if err := s.c.qb.PostRecv(s.rwr[j]); err != nil {
				tb.Fatal(err)
			}
		}
	default:
		tb.Fatalf("simBench: opcode %v", op)
	}
	s.done = func() bool {
		return s.err != nil || (s.completed == s.target && (s.op != ib.WRSend || s.received == s.target))
	}
	s.step = s.stepOnce
	return s
}

func (s *simBench) stepOnce(time.Time) bool {
	moved := false
	for s.posted < s.target && s.posted-s.completed < simBenchDepth {
		if err := s.c.qa.PostSend(s.wr); err != nil {
			s.err = err
			return true
		}
		s.posted++
		moved = true
	}
	for _, wc := range s.c.na.poll(s.c.aS) {
		if wc.Status != ib.WCSuccess {
			s.err = fmt.Errorf("send completion %v", wc)
		}
		s.completed++
		moved = true
	}
	if s.op == ib.WRSend {
		for _, wc := range s.c.nb.poll(s.c.bR) {
			if wc.Status != ib.WCSuccess || wc.ByteLen != uint32(len(s.src.Buf())) {
				s.err = fmt.Errorf("receive completion %v", wc)
				return true
			}
			s.received++
			if err := s.c.qb.PostRecv(s.rwr[wc.WRID]); err != nil {
				s.err = err
				return true
			}
			moved = true
		}
	}
	return moved
}

// run sends n more messages and drives until they have all completed.
func (s *simBench) run(n int) error {
	s.target += n
	if err := s.p.drive(time.Hour, s.done, s.step); err != nil {
		return err
	}
	return s.err
}

// check verifies that B holds the message (the WRITE's target, or every
// receive buffer used).
func (s *simBench) check() error {
	msg := s.src.Buf()
	for k := 0; k < len(s.dst.Buf()); k += len(msg) {
		if s.op == ib.WRSend && k/len(msg) >= s.received {
			break
		}
		if !bytes.Equal(s.dst.Buf()[k:k+len(msg)], msg) {
			return fmt.Errorf("B's bytes %d..%d differ from the message", k, k+len(msg))
		}
	}
	return nil
}

// benchSim measures b.N messages, then b.N plain copies of the same bytes in
// the same run, and reports both rates, their ratio, the message rate and
// the heap allocations per message unrounded (allocs/op, from -benchmem, is
// rounded down).
func benchSim(b *testing.B, op ib.WROpcode, size, linkMTU int) {
	s := newSimBench(b, op, size, linkMTU)
	if err := s.run(2 * simBenchDepth); err != nil { // warm up
		b.Fatal(err)
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	start := time.Now()
	if err := s.run(b.N); err != nil {
		b.Fatal(err)
	}
	el := time.Since(start)
	b.StopTimer()
	runtime.ReadMemStats(&after)
	if err := s.check(); err != nil {
		b.Fatal(err)
	}
	from, to := bytes.Clone(s.src.Buf()), make([]byte, size)
	start = time.Now()
	for range b.N {
		copy(to, from)
	}
	copyEl := time.Since(start)
	if !bytes.Equal(to, from) {
		b.Fatal("copy")
	}
	mb := float64(size) * float64(b.N) / 1e6
	b.ReportMetric(mb/el.Seconds(), "MB/s")
	b.ReportMetric(mb/copyEl.Seconds(), "copy-MB/s")
	b.ReportMetric(copyEl.Seconds()/el.Seconds(), "sim/copy")
	b.ReportMetric(float64(b.N)/el.Seconds(), "msgs/s")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(b.N), "allocs/msg")
}

// BenchmarkSimRCWrite measures RC RDMA WRITEs of 64 KiB and 1 MiB over the
// zero-delay simulated link, at path MTUs 1024 and 4096 (64 KiB is 64 or 16
// packets), against a plain copy of the same bytes. (At path MTU 4096 the
// simulator, not softrdma, allocates: its free list of frame buffers is a
// stack whose top is often a small ACK's, too short for the next 4 KiB
// frame.)
func BenchmarkSimRCWrite(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20} {
		for _, mtu := range []struct{ path, link int }{{1024, 1500}, {4096, 9000}} {
			b.Run(fmt.Sprintf("%dKiB/mtu%d", size>>10, mtu.path), func(b *testing.B) {
				benchSim(b, ib.WRRDMAWrite, size, mtu.link)
			})
		}
	}
}

// BenchmarkSimRCSend64 measures the message rate of 64-byte RC SENDs over the
// zero-delay simulated link.
func BenchmarkSimRCSend64(b *testing.B) { benchSim(b, ib.WRSend, 64, 1500) }

// TestSimPathAllocs: in steady state the whole simulated path (posting, the
// engines, RoCEv2 framing and ICRC, the simulated link, both CQs, the
// receives posted again) allocates nothing per 64-byte SEND nor per 64 KiB
// WRITE (64 packets at path MTU 1024): a few hundred messages after a
// warm-up make fewer than 0.25 heap allocations per message, so one
// allocation per message, let alone per packet, fails. (Not at path MTU 4096:
// see BenchmarkSimRCWrite.)
func TestSimPathAllocs(t *testing.T) {
	for _, tc := range []struct {
		name string
		op   ib.WROpcode
		size int
		n    int
		mtu  int // the link's
	}{
		{"send 64", ib.WRSend, 64, 400, 1500},
		{"write 64K", ib.WRRDMAWrite, 64 << 10, 200, 1500},
		// 4096-byte packets: the simulator's frame buffers must fit them
		// after ACK-sized ones were freed.
		{"write 64K mtu 4096", ib.WRRDMAWrite, 64 << 10, 200, 9000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSimBench(t, tc.op, tc.size, tc.mtu)
			if err := s.run(4 * simBenchDepth); err != nil { // warm up: every buffer and pool at its size
				t.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			err := s.run(tc.n)
			runtime.ReadMemStats(&after)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.check(); err != nil {
				t.Fatal(err)
			}
			allocs := after.Mallocs - before.Mallocs
			per := float64(allocs) / float64(tc.n)
			if per >= 0.25 {
				t.Errorf("%d heap allocations in %d messages (%.2f per message), want < 0.25", allocs, tc.n, per)
			}
			t.Logf("%d heap allocations in %d messages (%.3f per message), %d frames on the link",
				allocs, tc.n, per, s.p.link.Stats(sim.AtoB).Sent+s.p.link.Stats(sim.BtoA).Sent)
		})
	}
}
