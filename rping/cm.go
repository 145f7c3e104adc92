package rping

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/softrdma/softrdma/device"
	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/rdmacm"
)

// rping's connection management, one body for both transports: the rdma_cm
// calls of rping.c (rping_bind_server and rping_run_server; rping_bind_client
// and rping_connect_client) on an rdmacm.Manager whose one device is an iWARP
// device or a RoCE one (device.go). The parameters are
// rping.c's: the client connects with responder resources and initiator depth
// 1, retry and RNR retry counts 7 (rping_connect); the server accepts with 1
// and 1 and no retry counts (rping_accept passes no conn_param, and librdmacm
// then takes the request's, 1 and 1 from rping's client), and no private data
// either way.
//
//   - On iWARP the Manager dials TCP and makes the MPA revision 2 exchange: the
//     1 and 1 are the RFC 6581 IRD/ORD words, which are all of the Request's and
//     Reply's private data, as in siw's testdata/captures/siw-rping.pcap
//     (rdma_cm adds no header of its own on iWARP).
//   - On RoCE the Manager speaks the IB CM on QP1: REQ (with rdma_cm's CMA
//     header), REP, RTU; DREQ and DREP at the end, as the kernel's rping does
//     over rxe.

// cmSide is one side's rdma_cm: the Manager, the verbs context of its one
// device, and what the transport needs besides.
type cmSide struct {
	m     *rdmacm.Manager
	verbs *ib.Context
	// settle is the client's wait after ESTABLISHED before its first SEND
	// (iWARP: see Settle).
	settle time.Duration
	// close stops the Manager and its device.
	close func() error
}

// cmConn is an established rdma_cm connection: Done closes on its
// DISCONNECTED event.
type cmConn struct {
	id   *rdmacm.ID
	done chan struct{}
	stop chan struct{}
	once sync.Once
	ev   rdmacm.Event // the DISCONNECTED event, once done is closed
}

func newCMConn(id *rdmacm.ID) *cmConn {
	c := &cmConn{id: id, done: make(chan struct{}), stop: make(chan struct{})}
	go func() {
		for {
			select {
			case ev, ok := <-id.Events():
				if !ok {
					return // destroyed
				}
				if ev.Type == rdmacm.EventDisconnected {
					c.ev = ev
					close(c.done)
					return
				}
			case <-c.stop:
				return
			}
		}
	}()
	return c
}

// Done is closed when the connection's DISCONNECTED event has come.
func (c *cmConn) Done() <-chan struct{} { return c.done }

// Close ends the connection in order (rdma_disconnect); DISCONNECTED follows.
func (c *cmConn) Close() error { return c.id.Disconnect() }

// Abort ends the connection at once (rdma_destroy_id: iWARP resets it).
func (c *cmConn) Abort() error {
	c.release()
	return nil
}

// disconnected returns the DISCONNECTED event, if it has come.
func (c *cmConn) disconnected() (rdmacm.Event, bool) {
	select {
	case <-c.done:
		return c.ev, true
	default:
		return rdmacm.Event{}, false
	}
}

// release stops the event reader and destroys the ID.
func (c *cmConn) release() {
	c.once.Do(func() { close(c.stop) })
	c.id.Destroy()
}

// cmEvent prints ev as rping.c's cma event handler does (a DEBUG_LOG).
func (r *session) cmEvent(ev rdmacm.Event) {
	rel := "child"
	if ev.ID == r.cmID {
		rel = "parent"
	}
	r.debugf("cma_event type %s cma_id %p (%s)\n", ev.Type, ev.ID, rel)
}

// cmWait is device.CMWait, printing the event that came (-d).
func (r *session) cmWait(ctx context.Context, id *rdmacm.ID, timeout time.Duration, want ...rdmacm.EventType) (rdmacm.Event, error) {
	ev, err := device.CMWait(ctx, id, timeout, want...)
	if ev.ID != nil {
		r.cmEvent(ev)
	}
	return ev, err
}

// run is rping.c's main after its options: the Manager and its device (open),
// the verbs objects rping_setup_buffers and rping_setup_qp make, then the
// server's or the client's run.
func (r *session) run(ctx context.Context, open func(addr netip.Addr) (*cmSide, error)) (err error) {
	o := r.o
	var addr netip.Addr // -a's, or invalid
	if o.Addr != "" {
		if addr, err = device.ResolveHost(ctx, o.Addr); err != nil {
			return err
		}
	}
	cm, err := open(addr)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := cm.close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	// rping_setup_buffers, and the CQ of rping_setup_qp; the QP comes with
	// the rdma_cm ID.
	c := cm.verbs
	pd := c.AllocPD()
	if r.cq, err = c.CreateCQ(32); err != nil {
		return err
	}
	if r.recvMR, err = pd.RegMR(make([]byte, infoLen), ib.AccessLocalWrite); err != nil {
		return err
	}
	if r.sendMR, err = pd.RegMR(make([]byte, infoLen), 0); err != nil {
		return err
	}
	rdmaAccess := ib.AccessLocalWrite | ib.AccessRemoteRead | ib.AccessRemoteWrite
	if r.rdmaMR, err = pd.RegMR(make([]byte, o.Size), rdmaAccess); err != nil {
		return err
	}
	if o.Client {
		if r.startMR, err = pd.RegMR(make([]byte, o.Size), rdmaAccess); err != nil {
			return err
		}
	}
	r.debugf("allocated & registered buffers...\n")
	attr := ib.QPInitAttr{Type: ib.QPTypeRC, SendCQ: r.cq, RecvCQ: r.cq,
		Cap: ib.QPCap{MaxSendWR: 16, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}}
	// rdma_create_qp, and the receive posted before rdma_connect and
	// rdma_accept (rping.c does too): iWARP has no RNR flow control, and the
	// peer's first SEND may follow the connection's establishment at once.
	newQP := func(id *rdmacm.ID) error {
		if r.qp, err = id.CreateQP(pd, attr); err != nil {
			return err
		}
		return r.postRecv()
	}
	if o.Server {
		if !addr.IsValid() {
			addr = netip.IPv4Unspecified()
		}
		return r.serve(ctx, cm, netip.AddrPortFrom(addr, uint16(o.Port)), newQP)
	}
	return r.dial(ctx, cm, netip.AddrPortFrom(addr, uint16(o.Port)), newQP)
}

// serve is rping_bind_server, rping_run_server and rping_test_server: one
// connection, pings until the client disconnects.
func (r *session) serve(ctx context.Context, cm *cmSide, bind netip.AddrPort, newQP func(*rdmacm.ID) error) error {
	l, err := cm.m.CreateID(rdmacm.PortSpaceTCP)
	if err != nil {
		return err
	}
	r.cmID = l
	defer l.Destroy()
	if err := l.BindAddr(bind); err != nil {
		return fmt.Errorf("rdma_bind_addr: %w", err)
	}
	if err := l.Listen(3); err != nil {
		return fmt.Errorf("rdma_listen: %w", err)
	}
	r.debugf("rdma_bind_addr successful\nrdma_listen\n")
	var ev rdmacm.Event
	select {
	case ev = <-l.Events():
	case <-ctx.Done():
		return ctx.Err()
	}
	if ev.ID == nil {
		return errors.New("the listening ID was destroyed")
	}
	r.cmEvent(ev)
	if ev.Type != rdmacm.EventConnectRequest {
		return fmt.Errorf("unexpected event %v", ev.Type)
	}
	id := ev.ID
	defer id.Destroy()
	r.debugf("child cma %p\n", id)
	if err := newQP(id); err != nil {
		id.Reject(nil)
		return err
	}
	r.debugf("accepting client connection request\n")
	if err := id.Accept(rdmacm.ConnParam{ResponderResources: irdOrd, InitiatorDepth: irdOrd}); err != nil {
		return fmt.Errorf("rdma_accept: %w", err)
	}
	if _, err := r.cmWait(ctx, id, device.CMStep, rdmacm.EventEstablished); err != nil {
		return fmt.Errorf("wait for CONNECTED state: %w", err)
	}
	r.debugf("ESTABLISHED\n")
	l.Destroy()
	conn := newCMConn(id)
	defer conn.release()
	r.conn = conn
	for {
		err := r.serverPing(ctx)
		if errors.Is(err, errDisconnected) {
			r.disconnectEvent()
			conn.Close()
			return nil
		}
		if err != nil {
			conn.Abort()
			return err
		}
	}
}

// dial is rping_bind_client and rping_connect_client, then the pings.
func (r *session) dial(ctx context.Context, cm *cmSide, peer netip.AddrPort, newQP func(*rdmacm.ID) error) error {
	id, err := cm.m.CreateID(rdmacm.PortSpaceTCP)
	if err != nil {
		return err
	}
	r.cmID = id
	defer id.Destroy()
	r.debugf("created cm_id %p\n", id)
	if err := id.ResolveAddr(netip.Addr{}, peer, 2*time.Second); err != nil {
		return fmt.Errorf("rdma_resolve_addr: %w", err)
	}
	if _, err := r.cmWait(ctx, id, device.CMStep, rdmacm.EventAddrResolved); err != nil {
		return fmt.Errorf("resolve: %w", err)
	}
	if err := id.ResolveRoute(2 * time.Second); err != nil {
		return fmt.Errorf("rdma_resolve_route: %w", err)
	}
	if _, err := r.cmWait(ctx, id, device.CMStep, rdmacm.EventRouteResolved); err != nil {
		return fmt.Errorf("resolve: %w", err)
	}
	r.debugf("rdma_resolve_addr - rdma_resolve_route successful\n")
	if err := newQP(id); err != nil {
		return err
	}
	if err := id.Connect(rdmacm.DefaultConnParam()); err != nil {
		return fmt.Errorf("rdma_connect: %w", err)
	}
	if _, err := r.cmWait(ctx, id, 15*time.Second, rdmacm.EventEstablished); err != nil {
		return fmt.Errorf("connect error: %w", err)
	}
	r.debugf("ESTABLISHED\nrdma_connect successful\n")
	conn := newCMConn(id)
	defer conn.release()
	r.conn = conn
	if cm.settle > 0 {
		select {
		case <-time.After(cm.settle):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return r.clientPings(ctx)
}
