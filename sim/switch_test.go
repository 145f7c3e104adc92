package sim

import (
	"reflect"
	"testing"
	"time"
)

// star returns a network with k nodes n0..n(k-1) on one switch.
func star(t *testing.T, k int, cfg LinkConfig) (*Network, *Switch, []*Port, []*Link, *recorder) {
	n := New(3)
	sw := n.AddSwitch("sw")
	var ports []*Port
	var links []*Link
	for i := 0; i < k; i++ {
		p := n.AddNode("n"+string(rune('0'+i)), testMAC(i+1))
		ports = append(ports, p)
		links = append(links, n.ConnectSwitch(p, sw, cfg))
	}
	return n, sw, ports, links, newRecorder(t, n, ports...)
}

func receivers(r *recorder) []string {
	var names []string
	for _, a := range r.got {
		names = append(names, a.port)
	}
	return names
}

func TestSwitchForwarding(t *testing.T) {
	tests := []struct {
		name string
		dst  func(ports []*Port) [6]byte
		want []string
	}{
		{"unicast", func(p []*Port) [6]byte { return p[2].MAC() }, []string{"n2"}},
		{"broadcast", func([]*Port) [6]byte { return broadcastMAC }, []string{"n1", "n2", "n3"}},
		{"multicast", func([]*Port) [6]byte { return [6]byte{0x01, 0x00, 0x5e, 0, 0, 1} }, []string{"n1", "n2", "n3"}},
		{"unknown unicast floods", func([]*Port) [6]byte { return testMAC(99) }, []string{"n1", "n2", "n3"}},
		{"to self filtered", func(p []*Port) [6]byte { return p[0].MAC() }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n, _, ports, _, rec := star(t, 4, LinkConfig{Latency: time.Millisecond})
			ports[0].Write([][]byte{testFrame(tt.dst(ports), ports[0].MAC(), 1, 64)}, 0)
			runAll(n)
			if got := receivers(rec); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("delivered to %v, want %v", got, tt.want)
			}
			for _, a := range rec.got {
				if a.at != 2*time.Millisecond { // two links of 1ms
					t.Fatalf("arrived at %v, want 2ms", a.at)
				}
			}
		})
	}
}

func TestSwitchLearns(t *testing.T) {
	n, sw, ports, _, rec := star(t, 3, LinkConfig{})
	roaming := testMAC(77) // a MAC the switch has not seen
	ports[1].Write([][]byte{testFrame(roaming, ports[0].MAC(), 1, 64)}, 0)
	runAll(n)
	if got := receivers(rec); !reflect.DeepEqual(got, []string{"n0", "n2"}) {
		t.Fatalf("unknown destination went to %v, want a flood", got)
	}
	// n2 sends from the roaming MAC; the switch learns where it is.
	ports[2].Write([][]byte{testFrame(ports[0].MAC(), roaming, 2, 64)}, 0)
	runAll(n)
	rec.got = nil
	ports[1].Write([][]byte{testFrame(roaming, ports[1].MAC(), 3, 64)}, 0)
	runAll(n)
	if got := receivers(rec); !reflect.DeepEqual(got, []string{"n2"}) {
		t.Fatalf("learned destination went to %v, want [n2]", got)
	}
	if st := sw.Stats(); st.Flooded != 1 || st.Forwarded != 2 {
		t.Fatalf("switch stats %+v", st)
	}
	if sw.Name() != "sw" {
		t.Fatal("Name")
	}
}

func TestSwitchRunt(t *testing.T) {
	n, sw, ports, _, rec := star(t, 2, LinkConfig{})
	ports[0].Write([][]byte{make([]byte, 11)}, 0)
	runAll(n)
	if len(rec.got) != 0 || sw.Stats().Runts != 1 {
		t.Fatalf("runt forwarded: %v %+v", rec.got, sw.Stats())
	}
}

func TestSwitchPerLinkFaults(t *testing.T) {
	// Only n2's link loses frames; n1 gets every broadcast.
	n, _, ports, links, rec := star(t, 3, LinkConfig{})
	links[2].SetConfig(BtoA, LinkConfig{Loss: 0.5})
	for i := 0; i < 1000; i++ {
		ports[0].Write([][]byte{testFrame(broadcastMAC, ports[0].MAC(), uint32(i), 64)}, 0)
	}
	runAll(n)
	if got := len(rec.seqs("n1")); got != 1000 {
		t.Fatalf("n1 got %d of 1000", got)
	}
	got2 := len(rec.seqs("n2"))
	if got2 < 400 || got2 > 600 {
		t.Fatalf("n2 got %d of 1000 at 50%% loss", got2)
	}
	if st := links[2].Stats(BtoA); st.Dropped[DropLoss] != uint64(1000-got2) {
		t.Fatalf("n2 link stats %+v", st)
	}
}

func TestSwitchPartition(t *testing.T) {
	n, _, ports, links, rec := star(t, 3, LinkConfig{Latency: time.Millisecond})
	a, b, c := ports[0], ports[1], ports[2]
	n.Partition(a, b, Epoch.Add(10*time.Millisecond), Epoch.Add(20*time.Millisecond))
	for i := 0; i < 30; i++ {
		a.Write([][]byte{testFrame(broadcastMAC, a.MAC(), uint32(i), 64)}, 0)
		b.Write([][]byte{testFrame(a.MAC(), b.MAC(), uint32(i), 64)}, 0)
		n.RunFor(time.Millisecond)
	}
	runAll(n)
	if got := len(rec.seqs("n2")); got != 30 {
		t.Fatalf("c (not partitioned) got %d of 30", got)
	}
	for _, p := range []*Port{a, b} {
		got := rec.seqs(p.Name())
		if len(got) != 20 {
			t.Fatalf("%s got %d frames, want 20 (10 sent in the partition lost)", p.Name(), len(got))
		}
		for _, s := range got {
			if s >= 10 && s < 20 {
				t.Fatalf("%s got frame %d sent during the partition", p.Name(), s)
			}
		}
	}
	if st := links[1].Stats(BtoA); st.Dropped[DropPartition] != 10 {
		t.Fatalf("b's downlink: %+v", st)
	}
	_ = c
}
