package test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/sim"
)

// soakSize is how much one soak run does.
type soakSize struct {
	nodes  int // devices on the switch
	rounds int // rounds, the first a warm-up for the growth checks

	rc      int // RC connections that live through every round
	bidi    int // of them, how many carry a stream each way
	rcEph   int // RC connections created and destroyed in every round
	uc, ud  int // UC and UD streams per round, on QPs created and destroyed in it
	msgs    int // messages per RC and UC stream
	udMsgs  int // datagrams per UD stream
	maxSize int // largest RC/UC message (bytes)

	// wall caps the run: no round starts after it (but at least two run).
	wall time.Duration
}

// soakSizes returns the size of this run: the full soak, or smaller for
// -short and under the race detector (which slows the engine several times).
func soakSizes() soakSize {
	sz := soakSize{nodes: 3, rounds: 8, rc: 64, bidi: 16, rcEph: 6, uc: 8, ud: 6,
		msgs: 100, udMsgs: 120, maxSize: 3000, wall: 90 * time.Second}
	if testing.Short() {
		sz.rounds, sz.rc, sz.bidi, sz.rcEph, sz.uc, sz.ud, sz.msgs, sz.udMsgs = 3, 24, 6, 3, 4, 3, 20, 30
		sz.wall = 20 * time.Second
	}
	if raceEnabled {
		sz.rounds, sz.msgs, sz.udMsgs = min(sz.rounds, 4), min(sz.msgs, 20), min(sz.udMsgs, 30)
		sz.wall = min(sz.wall, 60*time.Second)
	}
	return sz
}

// soakRC is the RC connection of the soak: ibv_rc_pingpong's attributes with
// 8 WRs and 8 READ/atomics in flight.
func soakRC() rcParams {
	p := defaultRC()
	p.Depth, p.MaxRdAtomic = 8, 8
	return p
}

// soakVirtualLimit bounds the virtual time of one round: far more than a
// round needs (a few seconds of retransmission timeouts at most), so it
// only turns a livelock into a failure.
const soakVirtualLimit = 10 * time.Minute

// soakPair returns the k-th pair of distinct nodes, cycling through all of
// them in both orders.
func soakPair(sn *soakNet, k int) (*simNode, *simNode) {
	n := len(sn.nodes)
	x := k % n
	y := (x + 1 + (k/n)%(n-1)) % n
	return sn.nodes[x], sn.nodes[y]
}

// soakTotals sums what the rounds did.
type soakTotals struct {
	rounds                    int
	rcWRs, rcRecvs            int
	ucWRs, ucRecvs, ucFlushed int
	udWRs, udRecvs, udFlushed int
	again, early              int // UC/UD messages delivered again or out of order
	badIPHeader               int // UD deliveries whose IPv4 header checksum was wrong
	bytes                     int64
	qpsMade                   int
	registered                int64 // bytes of memory registered in the last round
}

// TestSoak runs many QPs at once between three devices on a switch, every
// cable of which loses, duplicates, reorders and corrupts frames: RC
// connections (SEND, SEND_IMM, WRITE, WRITE_IMM, READ, FETCH_ADD, CMP_SWAP,
// some streams both ways, some with inline and fenced WRs) that live through
// every round, more RC connections and UC and UD streams created and torn
// down in each round. In every round every send WR and every receive
// completes exactly once, in order (RC), or is delivered at most once, in
// order, and the rest flushed exactly once (UC, UD receives); every byte of
// every destination and source buffer is verified against the deterministic
// pattern; every atomic returns what the chain predicts; no QP leaves RTS
// and no async error event is raised. Across the rounds, neither the
// goroutine count nor the live heap may grow.
//
// The run is deterministic (seeded simulator, virtual time); it is bounded by
// the number of rounds and, as a guard for slow machines, by a wall-clock cap
// that only stops further rounds from starting. Nothing asserts a duration.
func TestSoak(t *testing.T) {
	sz := soakSizes()
	start := time.Now()
	sn := newSoakNet(t, 0x50a4, sz.nodes)
	defer sn.net.Close()
	var conns []*rcConn
	for k := range sz.rc {
		x, y := soakPair(sn, k)
		// First PSNs all over the space, some about to wrap.
		psnX, psnY := (0xffff00+uint32(k)*0x10101)&ib.PSNMask, uint32(k)*0x3a5c1&ib.PSNMask
		conns = append(conns, sn.connectRC(x, y, soakRC(), psnX, psnY))
	}
	var tot soakTotals
	tot.qpsMade = 2 * sz.rc
	var g0, gN int
	var h0, hN uint64
	for r := range sz.rounds {
		if r >= 2 && time.Since(start) > sz.wall {
			t.Logf("wall-clock cap %v reached: stopping after %d of %d rounds", sz.wall, r, sz.rounds)
			break
		}
		rs := time.Now()
		v0 := sn.net.Now()
		if err := soakRound(sn, r, sz, conns, &tot); err != nil {
			t.Fatalf("round %d: %v", r, err)
		}
		tot.rounds++
		g, h := soakMemory()
		if r == 0 {
			g0, h0 = g, h
		}
		gN, hN = g, h
		t.Logf("round %d: %.1f MiB registered, virtual %v, wall %v; then %d goroutines, heap in use %.1f MiB",
			r, float64(tot.registered)/(1<<20), sn.net.Now().Sub(v0).Round(time.Microsecond), time.Since(rs).Round(time.Millisecond),
			g, float64(h)/(1<<20))
	}
	var retrans, timeouts, dupReqs uint64
	for _, c := range conns {
		ca, cb := c.qa.Counters(), c.qb.Counters()
		retrans += ca.Retransmissions + cb.Retransmissions
		timeouts += ca.Timeouts + cb.Timeouts
		dupReqs += ca.DuplicateRequests + cb.DuplicateRequests
	}
	var ls sim.LinkStats
	for _, l := range sn.links {
		for _, d := range []sim.Direction{sim.AtoB, sim.BtoA} {
			s := l.Stats(d)
			ls.Sent += s.Sent
			ls.Duplicated += s.Duplicated
			ls.Corrupted += s.Corrupted
			ls.Reordered += s.Reordered
			ls.Dropped[sim.DropLoss] += s.TotalDropped()
		}
	}
	var badICRC uint64
	for _, n := range sn.nodes {
		badICRC += n.dev.Counters().BadICRC
	}
	t.Logf("%d rounds, %d QPs created: RC %d WRs + %d receives; UC %d WRs, %d receives consumed, %d flushed; "+
		"UD %d WRs, %d receives consumed, %d flushed; UC/UD %d messages delivered again, %d out of order; %d UD datagrams with a bad IPv4 header checksum delivered; %.1f MiB verified",
		tot.rounds, tot.qpsMade, tot.rcWRs, tot.rcRecvs, tot.ucWRs, tot.ucRecvs, tot.ucFlushed,
		tot.udWRs, tot.udRecvs, tot.udFlushed, tot.again, tot.early, tot.badIPHeader, float64(tot.bytes)/(1<<20))
	t.Logf("network: %d frames, %d dropped, %d duplicated, %d reordered, %d corrupted (%d ICRC rejections); "+
		"persistent RC: %d retransmissions, %d timeouts, %d duplicate requests; virtual %v, wall %v",
		ls.Sent, ls.Dropped[sim.DropLoss], ls.Duplicated, ls.Reordered, ls.Corrupted, badICRC,
		retrans, timeouts, dupReqs, sn.net.Now().Sub(sim.Epoch).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	if !testing.Short() && (retrans == 0 || ls.Duplicated == 0 || ls.Reordered == 0 || badICRC == 0) {
		t.Errorf("a fault never struck: %d retransmissions, %d duplicated, %d reordered, %d ICRC rejections",
			retrans, ls.Duplicated, ls.Reordered, badICRC)
	}

	// Growth. Every round creates and destroys its own QPs, CQs, MRs and
	// buffers (a round registers several MiB; see the log) and leaves the
	// persistent QPs in the state it found them, so the live heap after a
	// round is the persistent state plus noise: the simulator's and devices'
	// free lists and maps, sized by the peak traffic, which the warm-up round
	// has already reached. A leak of anything per round — WQEs, packets, key
	// or QP table entries, timers, the round's buffers held by a stale
	// reference — grows with every round. The bound is twice the warm-up heap
	// plus 8 MiB: generous enough for GC and free-list noise, far below what
	// keeping even one round's registered memory would add.
	if gN > g0+2 {
		t.Errorf("goroutines grew from %d after the warm-up round to %d after round %d", g0, gN, tot.rounds-1)
	}
	if limit := 2*h0 + 8<<20; hN > limit {
		t.Errorf("heap in use grew from %.1f MiB after the warm-up round to %.1f MiB after round %d (bound %.1f MiB)",
			float64(h0)/(1<<20), float64(hN)/(1<<20), tot.rounds-1, float64(limit)/(1<<20))
	}
}

// soakMemory returns the goroutine count and the heap in use after a full
// collection.
func soakMemory() (int, uint64) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return runtime.NumGoroutine(), ms.HeapInuse
}

// soakRound runs one round: new workloads on the persistent connections,
// new RC connections, new UC and UD streams, all at once; then it checks
// everything and takes down what the round created.
func soakRound(sn *soakNet, r int, sz soakSize, conns []*rcConn, tot *soakTotals) error {
	seed := uint64(r+1) * 7919
	mixed := opMixes[4].kinds
	var rcs []*rcStream
	addRC := func(c *rcConn, k int) {
		w := buildWorkloadOf(seed*1000+uint64(k), mixed, sz.msgs, sz.maxSize, (k+r)%4 == 0)
		rcs = append(rcs, newRCStream(sn.view(c.na, c.nb), c, w))
	}
	for k, c := range conns {
		addRC(c, 2*k)
		if k < sz.bidi {
			addRC(c.reverse(), 2*k+1)
		}
	}
	var eph []*rcConn
	for k := range sz.rcEph {
		x, y := soakPair(sn, k+r)
		c := sn.connectRC(x, y, soakRC(), uint32(seed*uint64(k+1))&ib.PSNMask, 0xfffffe)
		eph = append(eph, c)
		addRC(c, 2*len(conns)+k)
	}
	var ucs []*ucStream
	for k := range sz.uc {
		x, y := soakPair(sn, k+2*r)
		s, err := newUCStream(sn, x, y, seed*100+uint64(k), sz.msgs, sz.maxSize)
		if err != nil {
			return fmt.Errorf("uc stream %d: %w", k, err)
		}
		ucs = append(ucs, s)
	}
	var uds []*udStream
	for k := range sz.ud {
		x, y := soakPair(sn, k+3*r+1)
		s, err := newUDStream(sn, x, y, seed*100+50+uint64(k), sz.udMsgs)
		if err != nil {
			return fmt.Errorf("ud stream %d: %w", k, err)
		}
		uds = append(uds, s)
	}
	tot.qpsMade += 2 * (len(eph) + len(ucs) + len(uds))

	for _, s := range rcs {
		s.start()
	}
	done := func() bool {
		for _, s := range rcs {
			if s.err != nil {
				return true
			}
			if !s.done() {
				return false
			}
		}
		for _, s := range ucs {
			if !s.done() {
				return false
			}
		}
		for _, s := range uds {
			if !s.done() {
				return false
			}
		}
		return true
	}
	step := func(now time.Time) bool {
		moved := false
		for _, s := range rcs {
			moved = s.step(now) || moved
		}
		for _, s := range ucs {
			moved = s.step(now) || moved
		}
		for _, s := range uds {
			moved = s.step(now) || moved
		}
		return moved
	}
	err := sn.drive(soakVirtualLimit, done, step)
	for k, s := range rcs {
		if s.err != nil {
			return fmt.Errorf("rc stream %d (%s→%s qp %#x): %w", k, s.c.na.name, s.c.nb.name, s.c.qa.QPN(), s.err)
		}
	}
	for _, s := range ucs {
		if s.err != nil {
			return s.err
		}
	}
	for _, s := range uds {
		if s.err != nil {
			return s.err
		}
	}
	if err != nil {
		var left []string
		for k, s := range rcs {
			if !s.done() && len(left) < 4 {
				left = append(left, fmt.Sprintf("rc stream %d: %s", k, s.progress()))
			}
		}
		return fmt.Errorf("%w (%s)", err, strings.Join(left, "; "))
	}
	if err := sn.settle(soakVirtualLimit); err != nil {
		return fmt.Errorf("settle: %w", err)
	}

	// Every completion is in; check everything.
	for k, s := range rcs {
		if err := s.finish(soakVirtualLimit); err != nil {
			return fmt.Errorf("rc stream %d (%s→%s qp %#x): %w", k, s.c.na.name, s.c.nb.name, s.c.qa.QPN(), err)
		}
		tot.rcWRs += len(s.w.msgs)
		tot.rcRecvs += s.w.recvs
		tot.bytes += s.w.bytes
	}
	for _, s := range ucs {
		d, err := s.finish()
		if err != nil {
			return err
		}
		// Not a statistical test: a sanity check that UC got messages through
		// at all (most do; a lost packet costs one message).
		if s.w.recvs >= 8 && d < s.w.recvs/4 {
			return fmt.Errorf("uc %s→%s: %d of %d messages delivered", s.x.name, s.y.name, d, s.w.recvs)
		}
		tot.ucWRs += len(s.w.msgs)
		tot.ucRecvs += s.received
		tot.ucFlushed += s.w.recvs - s.received
		tot.again += s.again
		tot.early += s.early
		tot.bytes += s.w.bytes
	}
	for _, s := range uds {
		d, err := s.finish()
		if err != nil {
			return err
		}
		if d < len(s.msgs)/4 {
			return fmt.Errorf("ud %s→%s: %d of %d datagrams delivered", s.x.name, s.y.name, d, len(s.msgs))
		}
		tot.udWRs += len(s.msgs)
		tot.badIPHeader += s.badIPHeader
		tot.udRecvs += s.received
		tot.udFlushed += len(s.msgs) - s.received
		tot.again += s.again
		tot.early += s.early
		for i, g := range s.got {
			if g {
				tot.bytes += int64(s.msgs[i].size)
			}
		}
	}
	// No async event at all: no QP or CQ error, nothing dropped.
	for _, n := range sn.nodes {
		for len(n.ctx.AsyncEvents()) > 0 {
			ev := <-n.ctx.AsyncEvents()
			return fmt.Errorf("%s: async event %v", n.name, ev)
		}
		if d := n.ctx.Counters().AsyncEventsDropped; d > 0 {
			return fmt.Errorf("%s: %d async events dropped", n.name, d)
		}
	}

	// Take down what the round made.
	tot.registered = 0
	for _, s := range rcs {
		tot.registered += int64(len(s.data[0].Buf()) + len(s.data[1].Buf()) + len(s.recv.Buf()) + len(s.atom[0].Buf()) + len(s.atom[1].Buf()))
	}
	for _, s := range ucs {
		tot.registered += int64(len(s.src.Buf()) + len(s.dst.Buf()) + len(s.recv.Buf()))
	}
	for _, s := range uds {
		tot.registered += int64(len(s.src.Buf()) + len(s.recv.Buf()))
	}
	for _, s := range rcs {
		if err := deregAll(s.data[0], s.data[1], s.recv, s.atom[0], s.atom[1]); err != nil {
			return err
		}
	}
	for _, c := range eph {
		if err := c.destroy(); err != nil {
			return err
		}
	}
	for _, s := range ucs {
		if err := s.teardown(); err != nil {
			return err
		}
	}
	for _, s := range uds {
		if err := s.teardown(); err != nil {
			return err
		}
	}
	return nil
}
