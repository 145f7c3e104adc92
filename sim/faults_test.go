package sim

import (
	"math"
	"math/bits"
	"testing"
	"time"
)

// sendAndCollect sends count frames a→b at spacing apart and returns the
// sequence numbers b received, in arrival order, and the a→b stats.
func sendAndCollect(t *testing.T, seed uint64, cfg LinkConfig, count int, spacing time.Duration, size int) ([]arrival, LinkStats) {
	t.Helper()
	n, a, b, l := pair(seed, cfg)
	rec := newRecorder(t, n, b)
	for i := 0; i < count; i++ {
		sendN(t, a, b.MAC(), uint32(i), 1, size)
		if spacing > 0 {
			n.RunFor(spacing)
		}
	}
	runAll(n)
	return rec.got, l.Stats(AtoB)
}

func TestLossRate(t *testing.T) {
	const frames = 100_000
	for _, p := range []float64{0.01, 0.10, 0.30} {
		t.Run("", func(t *testing.T) {
			got, st := sendAndCollect(t, 1234, LinkConfig{Loss: p}, frames, 0, 60)
			lost := frames - len(got)
			// 5 standard deviations of the binomial: fails with probability
			// ~6e-7 for a correct implementation, surely for a wrong rate.
			sigma := math.Sqrt(frames * p * (1 - p))
			if diff := math.Abs(float64(lost) - frames*p); diff > 5*sigma {
				t.Fatalf("loss %v: lost %d of %d, expected %.0f ± %.0f", p, lost, frames, frames*p, 5*sigma)
			}
			if st.Dropped[DropLoss] != uint64(lost) || st.Delivered != uint64(len(got)) || st.Sent != frames {
				t.Fatalf("stats %+v disagree with %d observed arrivals", st, len(got))
			}
			t.Logf("loss %v: lost %d/%d (%.3f%%)", p, lost, frames, 100*float64(lost)/frames)
		})
	}
}

func TestGilbertElliottBursts(t *testing.T) {
	const frames = 100_000
	tests := []struct{ p, r float64 }{
		{0.01, 0.25}, // mean burst 4
		{0.005, 0.5}, // mean burst 2
		{0.02, 0.1},  // mean burst 10
	}
	for _, tt := range tests {
		t.Run("", func(t *testing.T) {
			got, st := sendAndCollect(t, 99, LinkConfig{Burst: GilbertElliott{P: tt.p, R: tt.r}}, frames, 0, 60)
			// Bursts are runs of consecutive missing sequence numbers.
			var bursts, lostInBursts int
			next := uint32(0)
			for _, a := range got {
				if a.seq != next {
					bursts++
					lostInBursts += int(a.seq - next)
				}
				next = a.seq + 1
			}
			if next != frames { // a trailing burst
				bursts++
				lostInBursts += int(frames - next)
			}
			if uint64(lostInBursts) != st.Dropped[DropBurst] || st.Dropped[DropLoss] != 0 {
				t.Fatalf("observed %d lost, stats %+v", lostInBursts, st)
			}
			mean := float64(lostInBursts) / float64(bursts)
			want := 1 / tt.r
			if math.Abs(mean-want) > 0.1*want {
				t.Fatalf("P=%v R=%v: mean burst %.2f over %d bursts, want %.2f ± 10%%", tt.p, tt.r, mean, bursts, want)
			}
			rate := float64(lostInBursts) / frames
			wantRate := tt.p / (tt.p + tt.r)
			if math.Abs(rate-wantRate) > 0.15*wantRate {
				t.Fatalf("loss rate %.4f, want %.4f (P/(P+R)) ± 15%%", rate, wantRate)
			}
			t.Logf("P=%v R=%v: %d bursts, mean length %.2f (1/R=%.2f), loss %.4f", tt.p, tt.r, bursts, mean, want, rate)
		})
	}
}

func TestGilbertElliottPartialLoss(t *testing.T) {
	// With LossBad 0.5 and LossGood 0.01 the long-run loss is
	// πbad·0.5 + πgood·0.01.
	const frames = 100_000
	ge := GilbertElliott{P: 0.05, R: 0.2, LossBad: 0.5, LossGood: 0.01}
	got, _ := sendAndCollect(t, 3, LinkConfig{Burst: ge}, frames, 0, 60)
	piBad := ge.P / (ge.P + ge.R)
	want := piBad*ge.LossBad + (1-piBad)*ge.LossGood
	rate := float64(frames-len(got)) / frames
	if math.Abs(rate-want) > 0.1*want {
		t.Fatalf("loss %.4f, want %.4f ± 10%%", rate, want)
	}
}

func TestBandwidthSerialisation(t *testing.T) {
	tests := []struct {
		name      string
		bandwidth int64
		size      int
		count     int
		latency   time.Duration
		perFrame  time.Duration
	}{
		{"1G 1000B", 1_000_000_000, 1000, 10, time.Millisecond, 8 * time.Microsecond},
		{"100M 1514B", 100_000_000, 1514, 20, 0, 121120 * time.Nanosecond},
		{"1M 125B", 1_000_000, 125, 5, 10 * time.Millisecond, time.Millisecond},
		{"rounds up", 7, 18, 2, 0, 20571428572}, // 144 bits at 7 b/s = 20.5714285714…s
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := LinkConfig{Bandwidth: tt.bandwidth, Latency: tt.latency}
			n, a, b, _ := pair(1, cfg)
			rec := newRecorder(t, n, b)
			// All frames are written at once: each waits for the ones before.
			sendN(t, a, b.MAC(), 0, tt.count, tt.size)
			runAll(n)
			if len(rec.got) != tt.count {
				t.Fatalf("%d frames arrived, want %d", len(rec.got), tt.count)
			}
			for i, got := range rec.got {
				want := tt.latency + time.Duration(i+1)*tt.perFrame
				if got.at != want || got.seq != uint32(i) {
					t.Fatalf("frame %d (seq %d) arrived at %v, want %v", i, got.seq, got.at, want)
				}
			}
			// After the link goes idle, a new frame is not delayed by the old
			// queue.
			idleAt := n.Now().Sub(Epoch) + time.Second
			n.RunUntil(Epoch.Add(idleAt))
			sendN(t, a, b.MAC(), 99, 1, tt.size)
			runAll(n)
			last := rec.got[len(rec.got)-1]
			if want := idleAt + tt.latency + tt.perFrame; last.at != want {
				t.Fatalf("frame after idle arrived at %v, want %v", last.at, want)
			}
		})
	}
}

func TestQueueLimit(t *testing.T) {
	tests := []struct {
		name       string
		limit      int
		burst      int
		wantQueued uint64
	}{
		{"all fit", 10, 10, 10},
		{"overflow", 5, 20, 5},
		{"limit one", 1, 3, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// 1000 bytes at 8 Mb/s: 1ms per frame.
			cfg := LinkConfig{Bandwidth: 8_000_000, QueueLimit: tt.limit}
			n, a, b, l := pair(1, cfg)
			sendN(t, a, b.MAC(), 0, tt.burst, 1000)
			// Half a millisecond after the queue drains, it takes a full
			// burst again.
			n.RunFor(time.Duration(tt.wantQueued)*time.Millisecond + 500*time.Microsecond)
			sendN(t, a, b.MAC(), 100, tt.limit, 1000)
			runAll(n)
			st := l.Stats(AtoB)
			if st.Delivered != tt.wantQueued+uint64(tt.limit) {
				t.Fatalf("delivered %d, want %d; %+v", st.Delivered, tt.wantQueued+uint64(tt.limit), st)
			}
			if st.Dropped[DropQueue] != uint64(tt.burst)-tt.wantQueued {
				t.Fatalf("queue drops %d, want %d", st.Dropped[DropQueue], uint64(tt.burst)-tt.wantQueued)
			}
		})
	}
}

func TestJitterKeepsOrder(t *testing.T) {
	got, _ := sendAndCollect(t, 5, LinkConfig{Latency: time.Millisecond, Jitter: 5 * time.Millisecond}, 2000, 10*time.Microsecond, 60)
	var spread bool
	for i, a := range got {
		if a.seq != uint32(i) {
			t.Fatalf("arrival %d is frame %d: jitter reordered", i, a.seq)
		}
		if i > 0 && a.at != got[i-1].at && a.at-got[i-1].at != 10*time.Microsecond {
			spread = true
		}
	}
	if !spread {
		t.Fatal("jitter had no effect on arrival times")
	}
}

func TestReorder(t *testing.T) {
	const count, tail = 2000, 100
	cfg := LinkConfig{Latency: time.Millisecond, Reorder: 0.1, ReorderDelay: 5 * time.Millisecond}
	got, st := sendAndCollect(t, 11, cfg, count, 100*time.Microsecond, 60)
	if len(got) != count {
		t.Fatalf("%d arrivals, want %d", len(got), count)
	}
	// A frame was reordered iff some later frame arrived before it. The last
	// frames may have nothing left to overtake them, so ignore them.
	overtaken := make(map[uint32]bool)
	maxSeen := uint32(0)
	for i, a := range got {
		if i > 0 && a.seq < maxSeen {
			overtaken[a.seq] = true
		}
		maxSeen = max(maxSeen, a.seq)
	}
	// Re-derive which frames were held back from their arrival times: a
	// held-back frame arrives 5ms late.
	held := 0
	for _, a := range got {
		late := a.at - (time.Duration(a.seq)*100*time.Microsecond + time.Millisecond)
		switch late {
		case 0:
			if overtaken[a.seq] {
				t.Fatalf("frame %d was on time yet overtaken", a.seq)
			}
		case 5 * time.Millisecond:
			held++
			if a.seq < count-tail && !overtaken[a.seq] {
				t.Fatalf("frame %d was held back but nothing overtook it", a.seq)
			}
		default:
			t.Fatalf("frame %d arrived %v late", a.seq, late)
		}
	}
	if uint64(held) != st.Reordered || held == 0 {
		t.Fatalf("held back %d frames, stats.Reordered %d", held, st.Reordered)
	}
	if math.Abs(float64(held)-0.1*count) > 5*math.Sqrt(count*0.1*0.9) {
		t.Fatalf("reordered %d of %d at probability 0.1", held, count)
	}
}

func TestDuplicate(t *testing.T) {
	const count = 5000
	got, st := sendAndCollect(t, 13, LinkConfig{Latency: time.Millisecond, Duplicate: 0.05}, count, 10*time.Microsecond, 60)
	seen := make(map[uint32]int)
	for i, a := range got {
		seen[a.seq]++
		if seen[a.seq] == 2 && (i == 0 || got[i-1].seq != a.seq || got[i-1].at != a.at) {
			t.Fatalf("duplicate of %d does not follow its original", a.seq)
		}
	}
	dups := 0
	for seq := uint32(0); seq < count; seq++ {
		switch seen[seq] {
		case 1:
		case 2:
			dups++
		default:
			t.Fatalf("frame %d delivered %d times", seq, seen[seq])
		}
	}
	if uint64(dups) != st.Duplicated || dups == 0 || st.Delivered != count+uint64(dups) {
		t.Fatalf("observed %d duplicates; stats %+v", dups, st)
	}
}

func TestCorruptFlipsExactlyOneBit(t *testing.T) {
	for _, p := range []float64{1, 0.2} {
		t.Run("", func(t *testing.T) {
			const count = 3000
			n, a, b, l := pair(17, LinkConfig{Corrupt: p})
			rec := newRecorder(t, n, b)
			sent := make(map[uint32][]byte)
			for i := 0; i < count; i++ {
				f := testFrame(b.MAC(), a.MAC(), uint32(i), 60+i%1400)
				sent[uint32(i)] = f
				a.Write([][]byte{f}, 0)
			}
			runAll(n)
			corrupted := 0
			for i, got := range rec.got {
				want := testFrame(b.MAC(), a.MAC(), uint32(i), 60+i%1400) // by position: the seq itself may be hit
				if len(got.data) != len(want) {
					t.Fatalf("frame %d changed length", i)
				}
				flipped := 0
				for j := range want {
					flipped += bits.OnesCount8(got.data[j] ^ want[j])
				}
				switch flipped {
				case 0:
				case 1:
					corrupted++
				default:
					t.Fatalf("frame %d has %d bits flipped", i, flipped)
				}
			}
			st := l.Stats(AtoB)
			if uint64(corrupted) != st.Corrupted || len(rec.got) != count {
				t.Fatalf("observed %d corrupted of %d, stats %+v", corrupted, len(rec.got), st)
			}
			if p == 1 && corrupted != count {
				t.Fatalf("Corrupt 1: %d of %d corrupted", corrupted, count)
			}
		})
	}
}

func TestCorruptHitsEveryBitPosition(t *testing.T) {
	// A 2-byte "frame" has 16 bits; 2000 corruptions must hit all of them.
	n, a, b, _ := pair(21, LinkConfig{Corrupt: 1})
	hit := uint16(0)
	b.OnReceive(func() {
		buf, sz := [][]byte{make([]byte, 10)}, []int{0}
		for {
			k, _ := b.TryRead(buf, sz, 0)
			if k == 0 {
				return
			}
			hit |= uint16(buf[0][0]) | uint16(buf[0][1])<<8
		}
	})
	for i := 0; i < 2000; i++ {
		a.Write([][]byte{{0, 0}}, 0)
	}
	runAll(n)
	if hit != 0xffff {
		t.Fatalf("bits hit %016b, want all 16", hit)
	}
}

func TestMTU(t *testing.T) {
	tests := []struct {
		mtu      int
		size     int
		delivers bool
	}{
		{0, 1514, true}, {0, 1515, false},
		{9000, 9014, true}, {9000, 9015, false},
		{100, 114, true}, {100, 115, false},
	}
	for _, tt := range tests {
		_, st := sendAndCollect(t, 1, LinkConfig{MTU: tt.mtu}, 1, 0, tt.size)
		if (st.Delivered == 1) != tt.delivers || (st.Dropped[DropMTU] == 1) == tt.delivers {
			t.Errorf("MTU %d, frame %d: %+v", tt.mtu, tt.size, st)
		}
	}
}

func TestPartitionPointToPoint(t *testing.T) {
	n, a, b, l := pair(1, LinkConfig{Latency: 3 * time.Millisecond})
	rec := newRecorder(t, n, a, b)
	from, until := Epoch.Add(30*time.Millisecond), Epoch.Add(60*time.Millisecond)
	n.Partition(a, b, from, until)
	for i := 0; i < 100; i++ { // one frame each way per millisecond
		sendN(t, a, b.MAC(), uint32(i), 1, 60)
		sendN(t, b, a.MAC(), uint32(i), 1, 60)
		n.RunFor(time.Millisecond)
	}
	runAll(n)
	for _, port := range []string{"a", "b"} {
		got := rec.seqs(port)
		var want []uint32
		for i := uint32(0); i < 100; i++ {
			if i < 30 || i >= 60 { // sent during [30ms, 60ms) → dropped
				want = append(want, i)
			}
		}
		if len(got) != len(want) {
			t.Fatalf("%s received %d frames, want %d", port, len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s: arrival %d is frame %d, want %d", port, i, got[i], want[i])
			}
		}
	}
	for _, d := range []Direction{AtoB, BtoA} {
		if st := l.Stats(d); st.Dropped[DropPartition] != 30 {
			t.Errorf("%v: %d partition drops, want 30", d, st.Dropped[DropPartition])
		}
	}
}

func TestPartitionForeverAndHeal(t *testing.T) {
	n, a, b, l := pair(1, LinkConfig{})
	n.Partition(a, b, Epoch, time.Time{})
	sendN(t, a, b.MAC(), 0, 1, 60)
	n.RunFor(time.Hour)
	sendN(t, a, b.MAC(), 1, 1, 60)
	runAll(n)
	n.Heal(b, a)
	sendN(t, a, b.MAC(), 2, 1, 60)
	runAll(n)
	if st := l.Stats(AtoB); st.Dropped[DropPartition] != 2 || st.Delivered != 1 {
		t.Fatalf("stats %+v; want 2 partition drops then 1 delivery after Heal", st)
	}
}

func TestSetDown(t *testing.T) {
	n, a, b, l := pair(1, LinkConfig{Latency: 5 * time.Millisecond})
	rec := newRecorder(t, n, b)
	sendN(t, a, b.MAC(), 0, 1, 60) // in flight when the link goes down: arrives
	n.AddTimer(Epoch.Add(time.Millisecond), func() { l.SetDown(true) })
	n.AddTimer(Epoch.Add(10*time.Millisecond), func() { l.SetDown(false) })
	for i := uint32(1); i < 20; i++ {
		n.RunFor(time.Millisecond)
		sendN(t, a, b.MAC(), i, 1, 60)
		sendN(t, b, a.MAC(), i, 1, 60)
	}
	runAll(n)
	got := rec.seqs("b")
	want := []uint32{0, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19}
	if len(got) != len(want) {
		t.Fatalf("b got %v, want %v", got, want)
	}
	if l.Stats(AtoB).Dropped[DropDown] != 9 || l.Stats(BtoA).Dropped[DropDown] != 9 || l.Down() {
		t.Fatalf("down drops %+v / %+v", l.Stats(AtoB), l.Stats(BtoA))
	}
}

func TestDropAndDelayFuncs(t *testing.T) {
	var dropDirs []Direction
	cfg := LinkConfig{
		Latency: time.Hour, // replaced by DelayFunc
		DropFunc: func(dir Direction, f []byte) bool {
			if frameSeq(f)%3 == 0 {
				dropDirs = append(dropDirs, dir)
				return true
			}
			return false
		},
		// Later frames arrive sooner: DelayFunc is exact and may reorder.
		DelayFunc: func(dir Direction, f []byte) time.Duration {
			return time.Duration(10-frameSeq(f)) * time.Millisecond
		},
	}
	got, st := sendAndCollect(t, 1, cfg, 10, 0, 60)
	wantSeqs := []uint32{8, 7, 5, 4, 2, 1}
	if len(got) != len(wantSeqs) {
		t.Fatalf("got %d frames, want %v", len(got), wantSeqs)
	}
	for i, a := range got {
		if a.seq != wantSeqs[i] || a.at != time.Duration(10-a.seq)*time.Millisecond {
			t.Fatalf("arrival %d: frame %d at %v", i, a.seq, a.at)
		}
	}
	if st.Dropped[DropFiltered] != 4 || len(dropDirs) != 4 || dropDirs[0] != AtoB {
		t.Fatalf("DropFunc drops: %+v, dirs %v", st, dropDirs)
	}
}

func TestSetConfigPerDirection(t *testing.T) {
	n, a, b, l := pair(1, LinkConfig{Latency: time.Millisecond})
	l.SetConfig(BtoA, LinkConfig{Latency: 7 * time.Millisecond})
	rec := newRecorder(t, n, a, b)
	sendN(t, a, b.MAC(), 0, 1, 60)
	sendN(t, b, a.MAC(), 1, 1, 60)
	runAll(n)
	if len(rec.got) != 2 || rec.got[0].at != time.Millisecond || rec.got[1].at != 7*time.Millisecond {
		t.Fatalf("arrivals %+v", rec.got)
	}
	if l.Config(BtoA).Latency != 7*time.Millisecond || l.Config(AtoB).Latency != time.Millisecond {
		t.Fatal("Config does not reflect SetConfig")
	}
}

func TestReceiveQueueLimit(t *testing.T) {
	n, a, b, l := pair(1, LinkConfig{})
	b.SetReceiveQueueLimit(5)
	sendN(t, a, b.MAC(), 0, 8, 60)
	runAll(n)
	if st := l.Stats(AtoB); st.Delivered != 5 || st.Dropped[DropReceiveQueue] != 3 || b.Queued() != 5 {
		t.Fatalf("stats %+v, queued %d", st, b.Queued())
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  LinkConfig
		ok   bool
	}{
		{"zero", LinkConfig{}, true},
		{"full", faultyConfig, true},
		{"loss > 1", LinkConfig{Loss: 1.01}, false},
		{"loss NaN", LinkConfig{Loss: math.NaN()}, false},
		{"negative corrupt", LinkConfig{Corrupt: -0.1}, false},
		{"burst without R", LinkConfig{Burst: GilbertElliott{P: 0.1}}, false},
		{"negative latency", LinkConfig{Latency: -1}, false},
		{"negative bandwidth", LinkConfig{Bandwidth: -1}, false},
		{"negative MTU", LinkConfig{MTU: -1}, false},
		{"negative queue", LinkConfig{QueueLimit: -1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.cfg.Validate(); (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestStringers(t *testing.T) {
	if AtoB.String() != "a->b" || BtoA.String() != "b->a" || Direction(5).String() != "Direction(5)" {
		t.Fatal("Direction.String")
	}
	if DropLoss.String() != "loss" || DropReason(99).String() != "DropReason(99)" || DropClosed.String() != "closed" {
		t.Fatal("DropReason.String")
	}
}
