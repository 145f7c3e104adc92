package sim

import (
	"testing"
	"time"
)

// FuzzSwitchedNetwork feeds arbitrary bytes as frames into a switched
// network with every fault on. It must never panic, and every link
// direction's counters must balance once the network is idle.
func FuzzSwitchedNetwork(f *testing.F) {
	f.Add([]byte{}, uint64(1))
	f.Add(testFrame(broadcastMAC, testMAC(1), 1, 64), uint64(2))
	f.Add(append(testFrame(testMAC(2), testMAC(1), 1, 64), testFrame(testMAC(99), testMAC(3), 2, 30)...), uint64(3))
	f.Add(make([]byte, 11), uint64(4))
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		cfg := faultyConfig
		cfg.MTU = 200
		n := New(seed)
		sw := n.AddSwitch("sw")
		var ports []*Port
		var links []*Link
		for i := 0; i < 3; i++ {
			p := n.AddNode("n", testMAC(i+1))
			ports = append(ports, p)
			links = append(links, n.ConnectSwitch(p, sw, cfg))
			p.OnReceive(func() { drainCount(p) })
		}
		// Split data into frames: each starts with a length byte and a port
		// index byte.
		for len(data) >= 2 {
			size, port := int(data[0]), int(data[1])%len(ports)
			data = data[2:]
			size = min(size, len(data))
			ports[port].Write([][]byte{data[:size]}, 0)
			data = data[size:]
			n.RunFor(time.Duration(size) * time.Microsecond)
		}
		runAll(n)
		for _, l := range links {
			for _, d := range []Direction{AtoB, BtoA} {
				s := l.Stats(d)
				if s.Delivered != s.Sent+s.Duplicated-s.TotalDropped() {
					t.Fatalf("%v %v: unbalanced %+v", l, d, s)
				}
			}
		}
	})
}
