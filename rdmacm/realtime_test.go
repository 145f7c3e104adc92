package rdmacm_test

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/rdmacm"
	"github.com/softrdma/softrdma/sim"
)

// TestRoCERealtime drives the devices and the CM agents with their Run
// methods (their own goroutines, blocking reads, wall-clock timers), as a
// program like softrdma rping does, with the API used by blocking on the
// event channels; the simulated network runs in step with the wall clock.
func TestRoCERealtime(t *testing.T) {
	w := newWorld(t, 7)
	a := w.host("a", macA, ipA, sim.LinkConfig{Latency: 100 * time.Microsecond})
	b := w.host("b", macB, ipB, sim.LinkConfig{})
	defer w.runRealtime(a, b)()

	l, _ := b.m.CreateID(rdmacm.PortSpaceTCP)
	must(t, l.BindAddr(netip.AddrPortFrom(ipB, rpingPort)))
	must(t, l.Listen(1))
	id, _ := a.m.CreateID(rdmacm.PortSpaceTCP)
	must(t, id.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(ipB, rpingPort), time.Second))
	wait(t, id, rdmacm.EventAddrResolved)
	must(t, id.ResolveRoute(time.Second))
	wait(t, id, rdmacm.EventRouteResolved)
	a.createQP(t, id)
	must(t, id.Connect(rdmacm.ConnParam{PrivateData: []byte("rt"), RetryCount: 7, RNRRetryCount: 7}))
	req := wait(t, l, rdmacm.EventConnectRequest)
	b.createQP(t, req.ID)
	must(t, req.ID.Accept(rdmacm.ConnParam{RNRRetryCount: 7}))
	wait(t, id, rdmacm.EventEstablished)
	wait(t, req.ID, rdmacm.EventEstablished)
	must(t, id.Disconnect())
	wait(t, req.ID, rdmacm.EventDisconnected)
	must(t, req.ID.Disconnect())
	wait(t, id, rdmacm.EventDisconnected)
	for _, x := range []*rdmacm.ID{id, req.ID, l} {
		must(t, x.Destroy())
	}
}

// runRealtime runs w's network in step with the wall clock, and each host's
// device and CM agent in goroutines of their own, as a program does; the
// returned function stops them, closes the devices and agents, and waits.
func (w *world) runRealtime(hosts ...*host) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	run := func(f func(context.Context) error) {
		wg.Add(1)
		go func() { defer wg.Done(); f(ctx) }()
	}
	run(w.net.RunRealtime)
	for _, h := range hosts {
		run(func(ctx context.Context) error { return h.dev.Run(ctx, w.net.Clock()) })
		run(h.agent.Run)
	}
	return func() {
		cancel()
		for _, h := range hosts {
			h.dev.Close()
			h.agent.Close()
		}
		wg.Wait()
	}
}
