package ibcm

import (
	"testing"
	"time"

	"github.com/softrdma/softrdma/sim"
)

// TestAgentScansArmedTimersOnly: the agent's timer scans (NextDeadline,
// runTimers, at every MAD and wake-up of Run) look at the IDs with a timer
// armed, not at every connection it holds: with n connections established
// and nothing in flight, the set they scan is empty and there is no
// deadline. (They ranged over every ID: softrdma bench's rdma_cm connect rate
// fell from 21k to 2k pairs/s between 256 and 4096 connections, issue 22.)
// A connection being set up is in the set while it waits for an answer.
func TestAgentScansArmedTimersOnly(t *testing.T) {
	p := newCMPair(t, sim.LinkConfig{Latency: 100 * time.Microsecond})
	p.listen(t)
	qpn := uint32(0x300)
	p.b.react = func(ev *Event) { // acceptAll, each with a QPN of its own
		if ev.Type == EventREQ {
			qpn++
			if err := ev.ID.Accept(&ReplyParams{QPN: qpn, StartingPSN: 0x123456, ResponderResources: 4, InitiatorDepth: 4,
				RNRRetryCount: 7}); err != nil {
				t.Error(err)
			}
		}
	}
	p.a.rtuAll(t)
	const n = 8
	for i := range n {
		cp := p.connectParams(nil)
		cp.QPN += uint32(i)
		if _, err := p.a.agent.Connect(cp, p.a.handle); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if _, ok := p.a.agent.NextDeadline(); !ok || len(p.a.agent.timed) != 1 {
				t.Fatalf("a REQ waiting for its REP: deadline %v, %d IDs scanned; want one", ok, len(p.a.agent.timed))
			}
		}
	}
	rtus := func() int {
		k := 0
		for _, ev := range p.b.events {
			if ev.Type == EventRTU {
				k++
			}
		}
		return k
	}
	p.drive(time.Second, func() bool { return rtus() == n })
	for _, node := range []*cmNode{p.a, p.b} {
		a := node.agent
		if c := a.Counters(); c.IDs != n {
			t.Fatalf("%s holds %d IDs, want %d", node.port.Name(), c.IDs, n)
		}
		if d, ok := a.NextDeadline(); ok {
			t.Errorf("%s: deadline %v with every connection established", node.port.Name(), d)
		}
		a.mu.Lock()
		scanned := len(a.timed)
		a.mu.Unlock()
		if scanned != 0 {
			t.Errorf("%s: the timer scans look at %d IDs with no timer armed, want 0", node.port.Name(), scanned)
		}
	}
}
