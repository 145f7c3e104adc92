package rdmacm_test

// The harness of the RoCE tests: softrdma hosts (a roce.Device, its CM agent
// and an rdmacm.Manager) on one simulated switch, driven deterministically in
// virtual time by sim.Network.Drive, with the application's side written as
// reactions to the events of each ID.

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/softrdma/softrdma/ibcm"
	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/rdmacm"
	"github.com/softrdma/softrdma/roce"
	"github.com/softrdma/softrdma/sim"
)

type host struct {
	name  string
	ip    netip.Addr
	port  *sim.Port
	dev   *roce.Device
	agent *ibcm.Agent
	m     *rdmacm.Manager
	pd    *ib.PD
	cq    *ib.CQ
	mr    *ib.MR
	buf   []byte
}

type world struct {
	t     *testing.T
	net   *sim.Network
	sw    *sim.Switch
	nbr   roce.StaticNeighbors
	hosts []*host
}

func newWorld(t *testing.T, seed uint64) *world {
	n := sim.New(seed)
	return &world{t: t, net: n, sw: n.AddSwitch("sw"), nbr: roce.StaticNeighbors{}}
}

// raw adds a port with no device.
func (w *world) raw(name string, mac [6]byte, ip netip.Addr, cfg sim.LinkConfig) *sim.Port {
	p := w.net.AddNode(name, mac)
	w.net.ConnectSwitch(p, w.sw, cfg)
	w.nbr[ip] = mac
	return p
}

// host adds a softrdma host with a 64 KiB buffer registered for everything.
func (w *world) host(name string, mac [6]byte, ip netip.Addr, cfg sim.LinkConfig) *host {
	w.t.Helper()
	p := w.raw(name, mac, ip, cfg)
	seed := uint64(len(w.hosts) + 1)
	dev, err := roce.NewDevice(roce.DeviceConfig{Endpoint: p, MAC: mac, Addrs: []netip.Addr{ip}, Neighbors: w.nbr,
		Engine: ib.ContextConfig{Seed: seed}})
	if err != nil {
		w.t.Fatal(err)
	}
	agent, err := ibcm.NewAgent(ibcm.AgentConfig{Device: dev, Clock: w.net.Clock(), Seed: seed})
	if err != nil {
		w.t.Fatal(err)
	}
	m := rdmacm.NewManager(rdmacm.Config{Clock: w.net.Clock(), Seed: seed})
	if err := m.AddRoCE(agent); err != nil {
		w.t.Fatal(err)
	}
	h := &host{name: name, ip: ip, port: p, dev: dev, agent: agent, m: m, pd: dev.Context().AllocPD(), buf: make([]byte, 64<<10)}
	if h.cq, err = dev.Context().CreateCQ(256); err != nil {
		w.t.Fatal(err)
	}
	if h.mr, err = h.pd.RegMR(h.buf, ib.AccessLocalWrite|ib.AccessRemoteWrite|ib.AccessRemoteRead); err != nil {
		w.t.Fatal(err)
	}
	w.hosts = append(w.hosts, h)
	return h
}

func (w *world) stepped() []sim.Stepped {
	var s []sim.Stepped
	for _, h := range w.hosts {
		s = append(s, h.dev, h.agent)
	}
	return s
}

// drive runs everything until done.
func (w *world) drive(limit time.Duration, done func() bool) {
	w.t.Helper()
	if err := w.net.Drive(limit, done, nil, w.stepped()...); err != nil {
		w.t.Fatal(err)
	}
}

// settle runs until nothing is left to happen, or for limit of virtual time.
func (w *world) settle(limit time.Duration) {
	w.t.Helper()
	end := w.net.Now().Add(limit)
	stop := w.net.AddTimer(end, func() {}) // so that Drive does not jump past end
	defer stop.Stop()
	err := w.net.Drive(limit, func() bool { return !w.net.Now().Before(end) }, nil, w.stepped()...)
	if err != nil && !errors.Is(err, sim.ErrStalled) {
		w.t.Fatal(err)
	}
}

// next drives until id has an event and returns it; it fails the test if
// the event is not of type want.
func (w *world) next(id *rdmacm.ID, want rdmacm.EventType, limit time.Duration) rdmacm.Event {
	w.t.Helper()
	ch := id.Events()
	w.drive(limit, func() bool { return len(ch) > 0 })
	ev := <-ch
	if ev.Type != want {
		w.t.Fatalf("event %v (status %d, %v), want %v", ev.Type, ev.Status, ev.Err, want)
	}
	return ev
}

// noEvent checks that id has no event waiting.
func noEvent(t *testing.T, id *rdmacm.ID) {
	t.Helper()
	select {
	case ev := <-id.Events():
		t.Errorf("unexpected event %v (status %d)", ev.Type, ev.Status)
	default:
	}
}

// createQP makes an RC (or UD) QP on id with the host's PD and CQ.
func (h *host) createQP(t *testing.T, id *rdmacm.ID) *ib.QP {
	t.Helper()
	return newQPOn(t, id, h.pd, h.cq, ib.QPCap{MaxSendWR: 32, MaxRecvWR: 32, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64})
}

// newQPOn makes id's QP (of the type id's port space gives) with pd, cq
// for both queues, and caps: the createQP of each test host.
func newQPOn(t *testing.T, id *rdmacm.ID, pd *ib.PD, cq *ib.CQ, caps ib.QPCap) *ib.QP {
	t.Helper()
	qp, err := id.CreateQP(pd, ib.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: caps})
	if err != nil {
		t.Fatal(err)
	}
	return qp
}

// resolve creates an ID and resolves address and route to dst.
func (w *world) resolve(h *host, ps rdmacm.PortSpace, dst netip.AddrPort) *rdmacm.ID {
	w.t.Helper()
	id, err := h.m.CreateID(ps)
	if err != nil {
		w.t.Fatal(err)
	}
	if err := id.ResolveAddr(netip.Addr{}, dst, 2*time.Second); err != nil {
		w.t.Fatal(err)
	}
	w.next(id, rdmacm.EventAddrResolved, time.Second)
	if err := id.ResolveRoute(2 * time.Second); err != nil {
		w.t.Fatal(err)
	}
	w.next(id, rdmacm.EventRouteResolved, time.Second)
	return id
}

// listen makes a listening ID on every device at port.
func (w *world) listen(h *host, ps rdmacm.PortSpace, port uint16) *rdmacm.ID {
	w.t.Helper()
	l, err := h.m.CreateID(ps)
	if err != nil {
		w.t.Fatal(err)
	}
	if err := l.BindAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), port)); err != nil {
		w.t.Fatal(err)
	}
	if err := l.Listen(8); err != nil {
		w.t.Fatal(err)
	}
	return l
}

// completions drives until h's CQ has n completions and returns them, failing
// on an error status.
func (w *world) completions(h *host, n int) []ib.WC {
	w.t.Helper()
	var wcs []ib.WC
	buf := make([]ib.WC, 16)
	w.drive(time.Minute, func() bool {
		k := h.cq.Poll(buf)
		wcs = append(wcs, buf[:k]...)
		return len(wcs) >= n
	})
	for _, wc := range wcs {
		if wc.Status != ib.WCSuccess {
			w.t.Fatalf("%s: completion %v", h.name, wc)
		}
	}
	return wcs
}

// noLeak checks that a host has no QP but QP1 and no CM state left: the PD
// (whose MR is deregistered here) deallocates only without QPs.
func noLeak(t *testing.T, h *host, qps ...*ib.QP) {
	t.Helper()
	if c := h.agent.Counters(); c.IDs != 0 {
		t.Errorf("%s: %d CMIDs left", h.name, c.IDs)
	}
	for _, qp := range qps {
		if err := qp.Modify(&ib.QPAttr{QPState: ib.QPStateErr}, ib.QPAttrState); !errors.Is(err, ib.ErrDestroyed) {
			t.Errorf("%s: QP %#x not destroyed: %v", h.name, qp.QPN(), err)
		}
	}
	if err := h.mr.Dereg(); err != nil {
		t.Fatal(err)
	}
	if err := h.pd.Dealloc(); err != nil {
		t.Errorf("%s: PD: %v (a QP is left)", h.name, err)
	}
}

func prefix(b []byte, s string) error {
	if !bytes.HasPrefix(b, []byte(s)) {
		return fmt.Errorf("private data %q does not start with %q", b, s)
	}
	return nil
}
