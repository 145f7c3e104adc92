package sim

import (
	"context"
	"errors"
	"net"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/netio"
)

// faultyConfig turns on every random fault at once.
var faultyConfig = LinkConfig{
	Latency:      2 * time.Millisecond,
	Jitter:       500 * time.Microsecond,
	Bandwidth:    100_000_000,
	QueueLimit:   50,
	Loss:         0.05,
	Burst:        GilbertElliott{P: 0.01, R: 0.3},
	Reorder:      0.05,
	ReorderDelay: 3 * time.Millisecond,
	Duplicate:    0.05,
	Corrupt:      0.05,
}

// traceRun drives a two-node exchange under faultyConfig: each side sends a
// burst of frames every millisecond from timers, for 200ms.
func traceRun(t *testing.T, seed uint64) ([]arrival, [2]LinkStats) {
	n, a, b, l := pair(seed, faultyConfig)
	rec := newRecorder(t, n, a, b)
	var seq uint32
	var tick func()
	tick = func() {
		sendN(t, a, b.MAC(), seq, 3, 200+int(seq%900))
		sendN(t, b, a.MAC(), seq+1_000_000, 2, 64)
		seq += 3
		if n.Now().Sub(Epoch) < 200*time.Millisecond {
			n.AfterFunc(time.Millisecond, tick)
		}
	}
	n.AddTimer(Epoch, tick)
	runAll(n)
	return rec.got, [2]LinkStats{l.Stats(AtoB), l.Stats(BtoA)}
}

func TestSameSeedSameTrace(t *testing.T) {
	t1, s1 := traceRun(t, 42)
	t2, s2 := traceRun(t, 42)
	if len(t1) == 0 {
		t.Fatal("nothing delivered")
	}
	if !reflect.DeepEqual(t1, t2) {
		t.Fatalf("same seed, different traces (%d vs %d arrivals)", len(t1), len(t2))
	}
	if s1 != s2 {
		t.Fatalf("same seed, different stats:\n%+v\n%+v", s1, s2)
	}
	// Every fault actually happened, so the comparison meant something.
	st := s1[AtoB]
	for name, v := range map[string]uint64{
		"loss": st.Dropped[DropLoss], "burst": st.Dropped[DropBurst], "reordered": st.Reordered,
		"duplicated": st.Duplicated, "corrupted": st.Corrupted,
	} {
		if v == 0 {
			t.Errorf("fault %s never happened in the trace run: %+v", name, st)
		}
	}
	t3, _ := traceRun(t, 43)
	if reflect.DeepEqual(t1, t3) {
		t.Fatal("different seeds gave identical traces")
	}
}

func TestStatsBalance(t *testing.T) {
	_, stats := traceRun(t, 7)
	for d, s := range stats {
		if s.Delivered != s.Sent+s.Duplicated-s.TotalDropped() {
			t.Errorf("%v: delivered %d != sent %d + dup %d - dropped %d", Direction(d), s.Delivered, s.Sent, s.Duplicated, s.TotalDropped())
		}
	}
}

func TestClockJumpsToEvents(t *testing.T) {
	n, a, b, _ := pair(1, LinkConfig{Latency: 10 * time.Second})
	if got := n.Now(); !got.Equal(Epoch) {
		t.Fatalf("new network reads %v, want Epoch", got)
	}
	if _, ok := n.NextEventTime(); ok {
		t.Fatal("NextEventTime reports an event on an idle network")
	}
	sendN(t, a, b.MAC(), 0, 1, 64)
	next, ok := n.NextEventTime()
	if !ok || !next.Equal(Epoch.Add(10*time.Second)) {
		t.Fatalf("NextEventTime = %v, %v; want Epoch+10s", next, ok)
	}
	if !n.Step() {
		t.Fatal("Step found no event")
	}
	if got := n.Clock().Now(); !got.Equal(next) {
		t.Fatalf("after Step the clock reads %v, want %v", got, next)
	}
	if b.Queued() != 1 {
		t.Fatalf("b has %d frames queued, want 1", b.Queued())
	}
	if n.Step() {
		t.Fatal("Step fired an event on an idle network")
	}
}

func TestTimers(t *testing.T) {
	n := New(1)
	var fired []string
	at := func(d time.Duration, name string) *Timer {
		return n.AddTimer(Epoch.Add(d), func() { fired = append(fired, name) })
	}
	at(3*time.Millisecond, "c")
	at(time.Millisecond, "a1")
	at(time.Millisecond, "a2") // same time: in order of scheduling
	stopped := at(2*time.Millisecond, "stopped")
	at(2*time.Millisecond, "b")
	if !stopped.Stop() {
		t.Fatal("Stop of a pending timer returned false")
	}
	if stopped.Stop() {
		t.Fatal("second Stop returned true")
	}
	// A timer added from a callback in the past fires at the current time.
	at(4*time.Millisecond, "d").When()
	n.AddTimer(Epoch.Add(4*time.Millisecond), func() {
		n.AddTimer(Epoch, func() {
			fired = append(fired, "late@"+n.Now().Sub(Epoch).String())
		})
	})
	if k := n.RunUntil(Epoch.Add(10 * time.Millisecond)); k != 7 {
		t.Errorf("RunUntil fired %d events, want 7", k)
	}
	want := []string{"a1", "a2", "b", "c", "d", "late@4ms"}
	if !reflect.DeepEqual(fired, want) {
		t.Fatalf("fired %v, want %v", fired, want)
	}
	if got := n.Now(); !got.Equal(Epoch.Add(10 * time.Millisecond)) {
		t.Fatalf("RunUntil left the clock at %v, want Epoch+10ms", got)
	}
}

func TestRunUntilStopsAtDeadline(t *testing.T) {
	n := New(1)
	var fired []time.Duration
	for _, d := range []time.Duration{1, 5, 10} {
		n.AddTimer(Epoch.Add(d*time.Millisecond), func() { fired = append(fired, n.Now().Sub(Epoch)) })
	}
	n.RunUntil(Epoch.Add(5 * time.Millisecond)) // inclusive
	if !reflect.DeepEqual(fired, []time.Duration{time.Millisecond, 5 * time.Millisecond}) {
		t.Fatalf("fired at %v", fired)
	}
	n.RunFor(4 * time.Millisecond)
	if len(fired) != 2 || !n.Now().Equal(Epoch.Add(9*time.Millisecond)) {
		t.Fatalf("RunFor: fired %v, now %v", fired, n.Now())
	}
	if n.Pending() != 1 {
		t.Fatalf("Pending = %d, want 1", n.Pending())
	}
}

func TestWriteCopiesFrames(t *testing.T) {
	n, a, b, _ := pair(1, LinkConfig{Latency: time.Millisecond})
	rec := newRecorder(t, n, b)
	buf := testFrame(b.MAC(), a.MAC(), 1, 100)
	orig := string(buf)
	a.Write([][]byte{buf}, 0)
	for i := range buf {
		buf[i] = 0
	}
	runAll(n)
	if len(rec.got) != 1 || rec.got[0].data != orig {
		t.Fatal("the sender reusing its buffer changed the delivered frame")
	}
}

func TestWriteOffsetAndErrors(t *testing.T) {
	n := New(1)
	a := n.AddNode("a", testMAC(1))
	if _, err := a.Write([][]byte{make([]byte, 64)}, 0); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("Write before Connect: %v, want ErrNotConnected", err)
	}
	b := n.AddNode("b", testMAC(2))
	n.Connect(a, b, LinkConfig{})
	rec := newRecorder(t, n, b)
	const off = 10
	frame := append(make([]byte, off), testFrame(b.MAC(), a.MAC(), 5, 60)...)
	if k, err := a.Write([][]byte{frame, make([]byte, 4)}, off); k != 1 || err == nil {
		t.Fatalf("Write with a buffer shorter than offset = %d, %v; want 1 and an error", k, err)
	}
	runAll(n)
	if len(rec.got) != 1 || rec.got[0].data != string(frame[off:]) {
		t.Fatalf("headroom leaked into the frame or frame lost: %d arrivals", len(rec.got))
	}
}

func TestShortReadBuffer(t *testing.T) {
	n, a, b, _ := pair(1, LinkConfig{})
	sendN(t, a, b.MAC(), 0, 1, 200)
	sendN(t, a, b.MAC(), 1, 1, 60)
	runAll(n)
	bufs := [][]byte{make([]byte, 100), make([]byte, 100)}
	sizes := make([]int, 2)
	k, err := b.TryRead(bufs, sizes, 0)
	if k != 0 || !errors.Is(err, netio.ErrShortBuffer) {
		t.Fatalf("TryRead = %d, %v; want 0 and ErrShortBuffer", k, err)
	}
	if k, err := b.TryRead(bufs, sizes, 0); k != 1 || err != nil || frameSeq(bufs[0]) != 1 {
		t.Fatalf("next TryRead = %d, %v; want frame 1", k, err)
	}
}

func TestCloseUnblocksRead(t *testing.T) {
	n, _, b, _ := pair(1, LinkConfig{})
	done := make(chan error)
	go func() {
		_, err := b.Read([][]byte{make([]byte, 100)}, []int{0}, 0)
		done <- err
	}()
	b.Close()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read after Close: %v, want net.ErrClosed", err)
	}
	if _, err := b.Write([][]byte{make([]byte, 60)}, 0); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Write after Close: %v, want net.ErrClosed", err)
	}
	n.Close()
}

func TestClosedPortDropsArrivals(t *testing.T) {
	n, a, b, l := pair(1, LinkConfig{Latency: time.Millisecond})
	sendN(t, a, b.MAC(), 0, 3, 60)
	b.Close()
	runAll(n)
	if s := l.Stats(AtoB); s.Dropped[DropClosed] != 3 || s.Delivered != 0 {
		t.Fatalf("stats %+v; want 3 DropClosed", s)
	}
}

// TestBlockingReadWithSteppingDriver has a device goroutine block in Read
// while the test goroutine steps the network.
func TestBlockingReadWithSteppingDriver(t *testing.T) {
	n, a, b, _ := pair(1, LinkConfig{Latency: time.Millisecond})
	const total = 200
	got := make(chan uint32, total)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		bufs := [][]byte{make([]byte, 2000), make([]byte, 2000)}
		sizes := make([]int, 2)
		for {
			k, err := b.Read(bufs, sizes, 0)
			if err != nil {
				return
			}
			for i := 0; i < k; i++ {
				got <- frameSeq(bufs[i])
			}
		}
	}()
	sendN(t, a, b.MAC(), 0, total, 100)
	runAll(n)
	for i := uint32(0); i < total; i++ {
		if s := <-got; s != i {
			t.Fatalf("frame %d arrived as %d", i, s)
		}
	}
	b.Close()
	wg.Wait()
}

// TestRunRealtime drives two goroutine devices with RunRealtime. It waits on
// the wall clock but asserts nothing about timing.
func TestRunRealtime(t *testing.T) {
	n, a, b, _ := pair(1, LinkConfig{Latency: 2 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runDone := make(chan error, 1)
	go func() { runDone <- n.RunRealtime(ctx) }()

	// b echoes every frame back to a.
	go func() {
		bufs := [][]byte{make([]byte, 2000)}
		sizes := make([]int, 1)
		for {
			k, err := b.Read(bufs, sizes, 0)
			if err != nil {
				return
			}
			f := bufs[0][:sizes[0]]
			copy(f[0:6], f[6:12])
			copy(f[6:12], b.HardwareAddr())
			b.Write([][]byte{f}, 0)
			_ = k
		}
	}()
	start := n.Now()
	bufs := [][]byte{make([]byte, 2000)}
	sizes := make([]int, 1)
	for i := uint32(0); i < 5; i++ {
		sendN(t, a, b.MAC(), i, 1, 80)
		if _, err := a.Read(bufs, sizes, 0); err != nil {
			t.Fatal(err)
		}
		if s := frameSeq(bufs[0]); s != i {
			t.Fatalf("echo %d came back as %d", i, s)
		}
	}
	if elapsed := n.Now().Sub(start); elapsed < 5*4*time.Millisecond {
		t.Fatalf("virtual time advanced %v over 5 round trips of 4ms", elapsed)
	}
	cancel()
	if err := <-runDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("RunRealtime returned %v", err)
	}
	n.Close()
}

// TestSimulatedMinute runs a minute of virtual traffic and logs the wall
// time it took; it asserts only on the traffic.
func TestSimulatedMinute(t *testing.T) {
	n, a, b, l := pair(9, LinkConfig{Latency: 5 * time.Millisecond, Jitter: time.Millisecond, Bandwidth: 1e9, Loss: 0.01})
	var count [2]int
	a.OnReceive(func() { count[0] += drainCount(a) })
	b.OnReceive(func() { count[1] += drainCount(b) })
	frameAB := testFrame(b.MAC(), a.MAC(), 0, 1000)
	frameBA := testFrame(a.MAC(), b.MAC(), 0, 100)
	var tick func()
	tick = func() { // 1000 frames per second each way
		a.Write([][]byte{frameAB}, 0)
		b.Write([][]byte{frameBA}, 0)
		n.AfterFunc(time.Millisecond, tick)
	}
	n.AddTimer(Epoch, tick)
	wall := time.Now()
	events := n.RunUntil(Epoch.Add(time.Minute))
	t.Logf("simulated 1 minute (%d events, %d+%d frames delivered) in %v of wall time",
		events, count[0], count[1], time.Since(wall))
	sAB := l.Stats(AtoB)
	if sAB.Sent < 60000 || count[1] != int(sAB.Delivered) {
		t.Fatalf("a->b: %+v, counted %d", sAB, count[1])
	}
}

func drainCount(p *Port) int {
	bufs := [][]byte{make([]byte, 2000), make([]byte, 2000), make([]byte, 2000), make([]byte, 2000)}
	sizes := make([]int, len(bufs))
	total := 0
	for {
		k, _ := p.TryRead(bufs, sizes, 0)
		if k == 0 {
			return total
		}
		total += k
	}
}

func TestConnectPanicsOnMisuse(t *testing.T) {
	tests := []struct {
		name string
		f    func(n *Network, a, b, c *Port)
	}{
		{"already connected", func(n *Network, a, b, c *Port) { n.Connect(a, b, LinkConfig{}); n.Connect(a, c, LinkConfig{}) }},
		{"self", func(n *Network, a, b, c *Port) { n.Connect(a, a, LinkConfig{}) }},
		{"other network", func(n *Network, a, b, c *Port) { n.Connect(a, New(1).AddNode("x", testMAC(9)), LinkConfig{}) }},
		{"invalid config", func(n *Network, a, b, c *Port) { n.Connect(a, b, LinkConfig{Loss: 1.5}) }},
		{"switch twice", func(n *Network, a, b, c *Port) {
			sw := n.AddSwitch("sw")
			n.ConnectSwitch(a, sw, LinkConfig{})
			n.ConnectSwitch(a, sw, LinkConfig{})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := New(1)
			a, b, c := n.AddNode("a", testMAC(1)), n.AddNode("b", testMAC(2)), n.AddNode("c", testMAC(3))
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			tt.f(n, a, b, c)
		})
	}
}

func TestPortAccessors(t *testing.T) {
	n := New(5)
	a := n.AddNode("alpha", testMAC(1))
	if a.MTU() != netio.DefaultMTU || a.BatchSize() != DefaultBatchSize || a.Link() != nil {
		t.Fatal("unconnected port accessors wrong")
	}
	b := n.AddNode("beta", testMAC(2))
	l := n.Connect(a, b, LinkConfig{MTU: 9000})
	if a.MTU() != 9000 || a.Link() != l || l.String() != "alpha<->beta" || n.Seed() != 5 {
		t.Fatalf("accessors: MTU %d link %v", a.MTU(), l)
	}
	if a.HardwareAddr().String() != "02:00:00:00:00:01" {
		t.Fatalf("HardwareAddr = %v", a.HardwareAddr())
	}
	if len(n.Ports()) != 2 || len(n.Links()) != 1 {
		t.Fatal("Ports/Links")
	}
}
