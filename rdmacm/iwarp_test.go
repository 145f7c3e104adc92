package rdmacm_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/internal/tcploop"
	"github.com/softrdma/softrdma/iwarp"
	"github.com/softrdma/softrdma/rdmacm"
)

// The same calls over iWARP: two iwarp devices on loopback TCP, each in its
// own Manager (its own host), in real time.

var loopback = netip.MustParseAddr("127.0.0.1")

type iwHost struct {
	m   *rdmacm.Manager
	dev *iwarp.Device
	pd  *ib.PD
	cq  *ib.CQ
	mr  *ib.MR
	buf []byte
}

func newIWHost(t *testing.T) *iwHost { return newIWHostTimeout(t, 5*time.Second) }

// newIWHostTimeout is newIWHost with the Manager's iWARP ConnectTimeout.
func newIWHostTimeout(t *testing.T, connectTimeout time.Duration) *iwHost {
	t.Helper()
	dev, err := iwarp.Open(iwarp.DeviceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	m := rdmacm.NewManager(rdmacm.Config{})
	must(t, m.AddIWARP(dev, rdmacm.IWARPConfig{Addrs: []netip.Addr{loopback}, ConnectTimeout: connectTimeout}))
	h := &iwHost{m: m, dev: dev, pd: dev.Context().AllocPD(), buf: make([]byte, 4096)}
	h.cq, _ = dev.Context().CreateCQ(64)
	if h.mr, err = h.pd.RegMR(h.buf, ib.AccessLocalWrite|ib.AccessRemoteWrite|ib.AccessRemoteRead); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *iwHost) createQP(t *testing.T, id *rdmacm.ID) *ib.QP {
	t.Helper()
	return newQPOn(t, id, h.pd, h.cq, ib.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1})
}

// wait returns id's next event, which must be of type want.
func wait(t *testing.T, id *rdmacm.ID, want rdmacm.EventType) rdmacm.Event {
	t.Helper()
	select {
	case ev := <-id.Events():
		if ev.Type != want {
			t.Fatalf("event %v (status %d, %v), want %v", ev.Type, ev.Status, ev.Err, want)
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatalf("no %v", want)
	}
	return rdmacm.Event{}
}

func iwListen(t *testing.T, h *iwHost, port uint16) *rdmacm.ID {
	t.Helper()
	l, _ := h.m.CreateID(rdmacm.PortSpaceTCP)
	must(t, l.BindAddr(netip.AddrPortFrom(loopback, port)))
	must(t, l.Listen(4))
	return l
}

func iwResolve(t *testing.T, h *iwHost, port uint16) *rdmacm.ID {
	t.Helper()
	id, _ := h.m.CreateID(rdmacm.PortSpaceTCP)
	must(t, id.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(loopback, port), time.Second))
	wait(t, id, rdmacm.EventAddrResolved)
	must(t, id.ResolveRoute(time.Second))
	wait(t, id, rdmacm.EventRouteResolved)
	return id
}

// TestIWARPConnectTrafficDisconnect: the calls of the RoCE test, over iWARP.
func TestIWARPConnectTrafficDisconnect(t *testing.T) {
	a, b := newIWHost(t), newIWHost(t)
	port := uint16(tcploop.FreePort(t))
	l := iwListen(t, b, port)
	id := iwResolve(t, a, port)
	if id.Transport() != rdmacm.TransportIWARP || id.Context() != a.dev.Context() {
		t.Fatalf("transport %v", id.Transport())
	}
	qa := a.createQP(t, id)
	cp := rdmacm.DefaultConnParam()
	cp.PrivateData = []byte("hello over iwarp")
	must(t, id.Connect(cp))
	req := wait(t, l, rdmacm.EventConnectRequest)
	if string(req.Param.PrivateData) != "hello over iwarp" || req.ID.RemoteAddr().Addr() != loopback {
		t.Errorf("CONNECT_REQUEST %q from %v", req.Param.PrivateData, req.ID.RemoteAddr())
	}
	qb := b.createQP(t, req.ID)
	cp.PrivateData = []byte("welcome")
	must(t, req.ID.Accept(cp))
	est := wait(t, id, rdmacm.EventEstablished)
	if string(est.Param.PrivateData) != "welcome" {
		t.Errorf("ESTABLISHED private data %q", est.Param.PrivateData)
	}
	wait(t, req.ID, rdmacm.EventEstablished)
	if qa.State() != ib.QPStateRTS || qb.State() != ib.QPStateRTS {
		t.Fatalf("QPs %v %v", qa.State(), qb.State())
	}
	copy(a.buf, "ping")
	must(t, qb.PostRecv(ib.RecvWR{WRID: 1, SGL: []ib.SGE{b.mr.SGE(0, 64)}}))
	must(t, qa.PostSend(ib.SendWR{WRID: 2, Opcode: ib.WRSend, SGL: []ib.SGE{a.mr.SGE(0, 4)}, Signaled: true}))
	for _, h := range []*iwHost{a, b} {
		ctx, cancel := contextWithTimeout(10 * time.Second)
		must(t, h.cq.Wait(ctx))
		cancel()
		var wc [1]ib.WC
		if h.cq.Poll(wc[:]) != 1 || wc[0].Status != ib.WCSuccess {
			t.Fatalf("completion %v", wc[0])
		}
	}
	if string(b.buf[:4]) != "ping" {
		t.Errorf("received %q", b.buf[:4])
	}
	must(t, id.Disconnect())
	wait(t, id, rdmacm.EventDisconnected)
	wait(t, req.ID, rdmacm.EventDisconnected)
	for _, x := range []*rdmacm.ID{id, req.ID, l} {
		must(t, x.Destroy())
	}
	if err := a.mr.Dereg(); err != nil {
		t.Fatal(err)
	}
	if err := a.pd.Dealloc(); err != nil {
		t.Errorf("client PD: %v", err)
	}
}

// TestIWARPReject: rdma_reject's private data arrives in the MPA reply with
// the Reject bit: REJECTED with ECONNREFUSED, as rdma_cm reports it on iWARP.
// A port nobody listens on is refused by TCP: REJECTED too.
func TestIWARPReject(t *testing.T) {
	a, b := newIWHost(t), newIWHost(t)
	port := uint16(tcploop.FreePort(t))
	l := iwListen(t, b, port)
	id := iwResolve(t, a, port)
	a.createQP(t, id)
	must(t, id.Connect(rdmacm.ConnParam{PrivateData: []byte("may I?")}))
	req := wait(t, l, rdmacm.EventConnectRequest)
	must(t, req.ID.Reject([]byte("no")))
	ev := wait(t, id, rdmacm.EventRejected)
	if ev.Status != rdmacm.StatusConnRefused || string(ev.Param.PrivateData) != "no" {
		t.Errorf("REJECTED status %d %q", ev.Status, ev.Param.PrivateData)
	}
	must(t, l.Destroy())
	id2 := iwResolve(t, a, uint16(tcploop.FreePort(t)))
	a.createQP(t, id2)
	must(t, id2.Connect(rdmacm.ConnParam{}))
	if ev := wait(t, id2, rdmacm.EventRejected); ev.Status != rdmacm.StatusConnRefused {
		t.Errorf("no listener: status %d", ev.Status)
	}
	// UD has no iWARP form.
	u, _ := a.m.CreateID(rdmacm.PortSpaceUDP)
	must(t, u.ResolveAddr(netip.Addr{}, netip.AddrPortFrom(loopback, port), time.Second))
	wait(t, u, rdmacm.EventAddrResolved)
	if _, err := u.CreateQP(a.pd, ib.QPInitAttr{SendCQ: a.cq, RecvCQ: a.cq, Cap: ib.QPCap{MaxSendWR: 1, MaxRecvWR: 1}}); err == nil {
		t.Error("UD QP over iWARP")
	}
	for _, x := range []*rdmacm.ID{id, id2, req.ID, u} {
		must(t, x.Destroy())
	}
}

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// TestIWARPPeerVanishes: a peer that accepts the TCP connection but never sends the
// MPA Reply makes Connect end in UNREACHABLE with ETIMEDOUT (cma_iw_handler's
// -ETIMEDOUT); a peer that sends its MPA Request and resets the connection before
// the reply makes Accept end in CONNECT_ERROR. Either way the QP can be destroyed
// and the PD freed afterwards: nothing holds on to them.
func TestIWARPPeerVanishes(t *testing.T) {
	t.Run("silent responder", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		must(t, err)
		defer ln.Close()
		held := make(chan net.Conn, 1)
		go func() {
			if c, err := ln.Accept(); err == nil {
				held <- c // read nothing, answer nothing
			}
		}()
		h := newIWHostTimeout(t, 300*time.Millisecond)
		id, err := h.m.CreateID(rdmacm.PortSpaceTCP)
		must(t, err)
		must(t, id.ResolveAddr(netip.Addr{}, netip.MustParseAddrPort(ln.Addr().String()), time.Second))
		wait(t, id, rdmacm.EventAddrResolved)
		must(t, id.ResolveRoute(time.Second))
		wait(t, id, rdmacm.EventRouteResolved)
		h.createQP(t, id)
		must(t, id.Connect(rdmacm.DefaultConnParam()))
		if ev := wait(t, id, rdmacm.EventUnreachable); ev.Status != rdmacm.StatusTimedOut {
			t.Errorf("UNREACHABLE status %d, want %d", ev.Status, rdmacm.StatusTimedOut)
		}
		must(t, id.DestroyQP())
		must(t, id.Destroy())
		must(t, h.mr.Dereg())
		if err := h.pd.Dealloc(); err != nil {
			t.Errorf("PD after the timeout: %v", err)
		}
		select {
		case c := <-held:
			c.Close()
		default:
		}
	})
	t.Run("initiator resets", func(t *testing.T) {
		srv := newIWHost(t)
		port := uint16(tcploop.FreePort(t))
		l, err := srv.m.CreateID(rdmacm.PortSpaceTCP)
		must(t, err)
		must(t, l.BindAddr(netip.AddrPortFrom(loopback, port)))
		must(t, l.Listen(1))
		c, err := net.Dial("tcp", netip.AddrPortFrom(loopback, port).String())
		must(t, err)
		pd := make([]byte, iwarp.MPAv2IRDORDLen)
		w := iwarp.MPAv2IRDORD(pd)
		w.SetIRD(1)
		w.SetORD(1)
		f := iwarp.MPAFrameFields{Request: true, Revision: iwarp.MPARevision2, Enhanced: true, PrivateData: pd}
		frame, err := f.Append(nil)
		must(t, err)
		_, err = c.Write(frame)
		must(t, err)
		req := wait(t, l, rdmacm.EventConnectRequest)
		c.(*net.TCPConn).SetLinger(0) // close with a RST: the initiator is gone
		c.Close()
		time.Sleep(50 * time.Millisecond)
		srv.createQP(t, req.ID)
		must(t, req.ID.Accept(rdmacm.DefaultConnParam()))
		wait(t, req.ID, rdmacm.EventConnectError)
		must(t, req.ID.DestroyQP())
		must(t, req.ID.Destroy())
		must(t, l.Destroy())
		must(t, srv.mr.Dereg())
		if err := srv.pd.Dealloc(); err != nil {
			t.Errorf("PD after the failed accept: %v", err)
		}
	})
}

// TestListenEphemeralPortTaken: an ID bound to port 0 listens on iWARP even
// when the port picked for it has a TCP socket of the kernel's already (the
// kernel gives TCP connections their local ports from the same range): it
// moves to another port, as bind picks. It failed with EADDRINUSE. The same
// seed picks the same first port, which the test takes before listening.
func TestListenEphemeralPortTaken(t *testing.T) {
	bindZero := func(seed uint64) (*rdmacm.Manager, *rdmacm.ID) {
		dev, err := iwarp.Open(iwarp.DeviceConfig{})
		if err != nil {
			t.Fatal(err)
		}
		m := rdmacm.NewManager(rdmacm.Config{Seed: seed})
		must(t, m.AddIWARP(dev, rdmacm.IWARPConfig{Addrs: []netip.Addr{loopback}}))
		id, err := m.CreateID(rdmacm.PortSpaceTCP)
		must(t, err)
		must(t, id.BindAddr(netip.AddrPortFrom(loopback, 0)))
		return m, id
	}
	// The test takes the port a seed picks; another process (a parallel
	// package's test) may hold it already, so the first seed whose port this
	// test can take is used.
	var (
		seed   uint64
		picked uint16
		taken  net.Listener
	)
	for seed = 19; ; seed++ {
		m, id := bindZero(seed)
		picked = id.LocalAddr().Port()
		id.Destroy()
		m.Close()
		var err error
		taken, err = net.Listen("tcp", netip.AddrPortFrom(loopback, picked).String())
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EADDRINUSE) || seed == 19+50 {
			t.Fatalf("taking port %d (seed %d): %v", picked, seed, err)
		}
	}
	defer taken.Close()

	m, id := bindZero(seed)
	defer m.Close()
	defer id.Destroy()
	if got := id.LocalAddr().Port(); got != picked {
		t.Fatalf("seed %d picked port %d, then %d", seed, picked, got)
	}
	if err := id.Listen(1); err != nil {
		t.Fatalf("listen with port %d taken: %v", picked, err)
	}
	if got := id.LocalAddr().Port(); got == picked || got == 0 {
		t.Errorf("listening on port %d, with %d taken", got, picked)
	}
}
