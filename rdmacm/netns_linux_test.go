//go:build linux

package rdmacm_test

import (
	"bytes"
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/ibcm"
	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/netio"
	"github.com/softrdma/softrdma/netio/netnstest"
	"github.com/softrdma/softrdma/rdmacm"
	"github.com/softrdma/softrdma/roce"
)

// TestRoCESourceOnSharedInterface: in a network namespace of its own, with
// 10.9.0.1/24, 10.9.0.2/24, fd09::1/64 and fd09::2/64 on lo, two RoCE
// devices opened as softrdma's tools open them (roce.Open on the UDP
// backend, each socket bound to one of the addresses, each GID table all of
// lo's addresses). A client that does not bind connects to the other
// device's address, each way and in both families: its source must be its
// own device's address, not the destination, which its GID table lists too
// (from the destination, the REQ never left: the client's socket dropped
// it, and the connect timed out). Both sides then move a WRITE and a SEND
// over the connection, past the QPs' source address check.
func TestRoCESourceOnSharedInterface(t *testing.T) {
	ns := netnstest.New(t)
	addrs := []netip.Prefix{
		netip.MustParsePrefix("10.9.0.1/24"), netip.MustParsePrefix("10.9.0.2/24"),
		netip.MustParsePrefix("fd09::1/64"), netip.MustParsePrefix("fd09::2/64"),
	}
	for _, p := range addrs {
		if err := ns.AddAddress("lo", p); err != nil {
			t.Fatalf("adding %v to lo in the namespace: %v", p, err)
		}
	}
	for _, tt := range []struct{ name, client, server string }{
		{"IPv4 .1 to .2", "10.9.0.1", "10.9.0.2"},
		{"IPv4 .2 to .1", "10.9.0.2", "10.9.0.1"},
		{"IPv6 ::1 to ::2", "fd09::1", "fd09::2"},
		{"IPv6 ::2 to ::1", "fd09::2", "fd09::1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ipC, ipS := netip.MustParseAddr(tt.client), netip.MustParseAddr(tt.server)
			c, s := openNSHost(t, ns, ipC, 1), openNSHost(t, ns, ipS, 2)
			if !containsAddr(c.dev.GIDs(), ipS) {
				t.Fatalf("the client's GID table %v lacks %v: the case tests nothing", c.dev.GIDs(), ipS)
			}
			const port = 7174
			l, err := s.m.CreateID(rdmacm.PortSpaceTCP)
			must(t, err)
			must(t, l.BindAddr(netip.AddrPortFrom(ipS, port)))
			must(t, l.Listen(1))
			id, err := c.m.CreateID(rdmacm.PortSpaceTCP)
			must(t, err)
			must(t, id.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(ipS, port), time.Second))
			if got := id.LocalAddr().Addr(); got != ipC {
				t.Fatalf("source %v for %v, want the client device's address %v", got, ipS, ipC)
			}
			nsWait(t, id, rdmacm.EventAddrResolved)
			must(t, id.ResolveRoute(time.Second))
			nsWait(t, id, rdmacm.EventRouteResolved)
			qc := c.createQP(t, id)
			must(t, id.Connect(rdmacm.ConnParam{RetryCount: 7, RNRRetryCount: 7}))
			req := nsWait(t, l, rdmacm.EventConnectRequest)
			if got := req.ID.RemoteAddr().Addr(); got != ipC {
				t.Errorf("the server sees the request from %v, want %v", got, ipC)
			}
			qs := s.createQP(t, req.ID)
			must(t, req.ID.Accept(rdmacm.ConnParam{RNRRetryCount: 7}))
			nsWait(t, id, rdmacm.EventEstablished)
			nsWait(t, req.ID, rdmacm.EventEstablished)

			// A WRITE with immediate client → server (the server's receive
			// completion orders its read of the buffer after the write) and
			// a SEND server → client.
			copy(c.buf, "written by the client")
			must(t, qs.PostRecv(ib.RecvWR{WRID: 4}))
			must(t, qc.PostSend(ib.SendWR{WRID: 1, Opcode: ib.WRRDMAWriteWithImm, Imm: 7, Signaled: true, SGL: []ib.SGE{c.mr.SGE(0, 21)},
				RemoteAddr: s.mr.Addr() + 100, RKey: s.mr.RKey()}))
			nsCompletion(t, c.cq, ib.WCRDMAWrite)
			nsCompletion(t, s.cq, ib.WCRecvRDMAWithImm)
			if !bytes.Equal(s.buf[100:121], c.buf[:21]) {
				t.Fatalf("the WRITE placed %q", s.buf[100:121])
			}
			must(t, qc.PostRecv(ib.RecvWR{WRID: 2, SGL: []ib.SGE{c.mr.SGE(1000, 64)}}))
			copy(s.buf, "sent by the server")
			must(t, qs.PostSend(ib.SendWR{WRID: 3, Opcode: ib.WRSend, Signaled: true, SGL: []ib.SGE{s.mr.SGE(0, 18)}}))
			nsCompletion(t, s.cq, ib.WCSend)
			nsCompletion(t, c.cq, ib.WCRecv)
			if !bytes.Equal(c.buf[1000:1018], s.buf[:18]) {
				t.Fatalf("the SEND placed %q", c.buf[1000:1018])
			}
			for _, h := range []*nsHost{c, s} {
				if d := h.dev.Context().Counters(); d.UnknownQP != 0 {
					t.Errorf("%v: %d packets for unknown QPs", h.ip, d.UnknownQP)
				}
			}
			must(t, id.Disconnect())
			nsWait(t, req.ID, rdmacm.EventDisconnected)
			for _, x := range []*rdmacm.ID{id, req.ID, l} {
				must(t, x.Destroy())
			}
		})
	}
}

// nsHost is a RoCE device on the UDP backend in a test's namespace, with its
// CM agent and Manager running, and a registered 64 KiB buffer.
type nsHost struct {
	ip    netip.Addr
	dev   *roce.Device
	m     *rdmacm.Manager
	pd    *ib.PD
	cq    *ib.CQ
	mr    *ib.MR
	buf   []byte
	agent *ibcm.Agent
}

// openNSHost opens the device inside ns, bound to ip, as softrdma's tools
// do; everything stops at the test's cleanup.
func openNSHost(t *testing.T, ns *netnstest.NS, ip netip.Addr, seed uint64) *nsHost {
	t.Helper()
	var dev *roce.Device
	ns.MustDo(t, func() error {
		var err error
		dev, err = roce.Open(roce.OpenConfig{Backend: roce.BackendUDP, Addrs: []netip.Addr{ip}, Engine: ib.ContextConfig{Seed: seed}})
		return err
	})
	agent, err := ibcm.NewAgent(ibcm.AgentConfig{Device: dev, Seed: seed})
	if err != nil {
		dev.Close()
		t.Fatal(err)
	}
	m := rdmacm.NewManager(rdmacm.Config{Seed: seed})
	if err := m.AddRoCE(agent); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); dev.Run(ctx, netio.SystemClock{}) }()
	go func() { defer wg.Done(); agent.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		dev.Close()
		agent.Close()
		wg.Wait()
	})
	h := &nsHost{ip: ip, dev: dev, m: m, agent: agent, pd: dev.Context().AllocPD(), buf: make([]byte, 64<<10)}
	if h.cq, err = dev.Context().CreateCQ(256); err != nil {
		t.Fatal(err)
	}
	if h.mr, err = h.pd.RegMR(h.buf, ib.AccessLocalWrite|ib.AccessRemoteWrite|ib.AccessRemoteRead); err != nil {
		t.Fatal(err)
	}
	return h
}

// createQP makes an RC QP on id with the host's PD and CQ.
func (h *nsHost) createQP(t *testing.T, id *rdmacm.ID) *ib.QP {
	t.Helper()
	return newQPOn(t, id, h.pd, h.cq, ib.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1})
}

// nsGuard bounds each wait of the namespace test: a hang guard, not a
// measure (the connect takes milliseconds; the REQ's retries, had it been
// lost, a minute).
const nsGuard = 30 * time.Second

// nsWait returns id's next event and fails the test unless it is of type want.
func nsWait(t *testing.T, id *rdmacm.ID, want rdmacm.EventType) rdmacm.Event {
	t.Helper()
	select {
	case ev := <-id.Events():
		if ev.Type != want {
			t.Fatalf("event %v (status %d, %v), want %v", ev.Type, ev.Status, ev.Err, want)
		}
		return ev
	case <-time.After(nsGuard):
		t.Fatalf("no %v in %v", want, nsGuard)
	}
	return rdmacm.Event{}
}

// nsCompletion waits for cq's next completion and fails the test unless it
// is a successful op.
func nsCompletion(t *testing.T, cq *ib.CQ, op ib.WCOpcode) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), nsGuard)
	defer cancel()
	wc := make([]ib.WC, 1)
	for cq.Poll(wc) == 0 {
		if err := cq.Wait(ctx); err != nil {
			t.Fatalf("waiting for %v: %v", op, err)
		}
	}
	if wc[0].Status != ib.WCSuccess || wc[0].Opcode != op {
		t.Fatalf("completion %v, want %v success", wc[0], op)
	}
}

func containsAddr(s []netip.Addr, a netip.Addr) bool {
	for _, x := range s {
		if x.Unmap() == a.Unmap() {
			return true
		}
	}
	return false
}
