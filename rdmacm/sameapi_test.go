package rdmacm_test

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/rdmacm"
	"github.com/softrdma/softrdma/sim"
)

// cmEnd is what the transport-neutral test needs of one host.
type cmEnd struct {
	m    *rdmacm.Manager
	pd   *ib.PD
	cq   *ib.CQ
	mr   *ib.MR
	buf  []byte
	addr netip.Addr
}

// TestSameCodeBothTransports runs one body of application code, written once
// against the rdmacm API, over RoCE (IB CM on QP1, the devices and agents in
// their own goroutines) and over iWARP (MPA on loopback TCP): resolve,
// connect and accept with private data both ways, a SEND, disconnect.
func TestSameCodeBothTransports(t *testing.T) {
	t.Run("roce", func(t *testing.T) {
		w := newWorld(t, 11)
		a := w.host("a", macA, ipA, sim.LinkConfig{Latency: 100 * time.Microsecond})
		b := w.host("b", macB, ipB, sim.LinkConfig{})
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		run := func(f func(context.Context) error) {
			wg.Add(1)
			go func() { defer wg.Done(); f(ctx) }()
		}
		run(w.net.RunRealtime)
		for _, h := range []*host{a, b} {
			h := h
			run(func(ctx context.Context) error { return h.dev.Run(ctx, w.net.Clock()) })
			run(h.agent.Run)
		}
		defer func() {
			cancel()
			for _, h := range []*host{a, b} {
				h.dev.Close()
				h.agent.Close()
			}
			wg.Wait()
		}()
		connectSendDisconnect(t, cmEnd{a.m, a.pd, a.cq, a.mr, a.buf, a.ip}, cmEnd{b.m, b.pd, b.cq, b.mr, b.buf, b.ip}, rpingPort)
	})
	t.Run("iwarp", func(t *testing.T) {
		a, b := newIWHost(t), newIWHost(t)
		connectSendDisconnect(t, cmEnd{a.m, a.pd, a.cq, a.mr, a.buf, loopback}, cmEnd{b.m, b.pd, b.cq, b.mr, b.buf, loopback}, freePort(t))
	})
}

// connectSendDisconnect is the application: the same calls whatever the
// transport under the Manager.
func connectSendDisconnect(t *testing.T, a, b cmEnd, port uint16) {
	t.Helper()
	l, err := b.m.CreateID(rdmacm.PortSpaceTCP)
	must(t, err)
	must(t, l.BindAddr(netip.AddrPortFrom(b.addr, port)))
	must(t, l.Listen(1))
	id, err := a.m.CreateID(rdmacm.PortSpaceTCP)
	must(t, err)
	must(t, id.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(b.addr, port), time.Second))
	wait(t, id, rdmacm.EventAddrResolved)
	must(t, id.ResolveRoute(time.Second))
	wait(t, id, rdmacm.EventRouteResolved)
	attr := ib.QPInitAttr{SendCQ: a.cq, RecvCQ: a.cq, Cap: ib.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}}
	qa, err := id.CreateQP(a.pd, attr)
	must(t, err)
	cp := rdmacm.DefaultConnParam()
	cp.PrivateData = []byte("hello")
	must(t, id.Connect(cp))
	req := wait(t, l, rdmacm.EventConnectRequest)
	if got := string(req.Param.PrivateData[:5]); got != "hello" {
		t.Errorf("CONNECT_REQUEST private data %q", req.Param.PrivateData)
	}
	attr.SendCQ, attr.RecvCQ = b.cq, b.cq
	qb, err := req.ID.CreateQP(b.pd, attr)
	must(t, err)
	must(t, qb.PostRecv(ib.RecvWR{WRID: 1, SGL: []ib.SGE{b.mr.SGE(0, 64)}}))
	cp.PrivateData = []byte("welcome")
	must(t, req.ID.Accept(cp))
	if est := wait(t, id, rdmacm.EventEstablished); len(est.Param.PrivateData) < 7 || string(est.Param.PrivateData[:7]) != "welcome" {
		t.Errorf("ESTABLISHED private data %q", est.Param.PrivateData)
	}
	wait(t, req.ID, rdmacm.EventEstablished)
	copy(a.buf, "same code")
	must(t, qa.PostSend(ib.SendWR{WRID: 2, Opcode: ib.WRSend, SGL: []ib.SGE{a.mr.SGE(0, 9)}, Signaled: true}))
	for _, e := range []cmEnd{a, b} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var wc [1]ib.WC
		for e.cq.Poll(wc[:]) == 0 {
			must(t, e.cq.Wait(ctx))
		}
		cancel()
		if wc[0].Status != ib.WCSuccess {
			t.Fatalf("completion %v", wc[0])
		}
	}
	if string(b.buf[:9]) != "same code" {
		t.Errorf("received %q", b.buf[:9])
	}
	must(t, id.Disconnect())
	wait(t, req.ID, rdmacm.EventDisconnected)
	_ = req.ID.Disconnect() // RoCE: the passive side's DREP; iWARP: already closed
	wait(t, id, rdmacm.EventDisconnected)
	for _, x := range []*rdmacm.ID{id, req.ID, l} {
		must(t, x.Destroy())
	}
}
