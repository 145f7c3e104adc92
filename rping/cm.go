package rping

import (
	"context"
	"errors"
	"fmt"
	"io"
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
func (r *session) run(ctx context.Context, open func(addr, src netip.Addr) (*cmSide, error)) (err error) {
	o := r.o
	var addr, src netip.Addr // -a's and -I's, or invalid
	if o.Addr != "" {
		if addr, err = device.ResolveHost(ctx, o.Addr); err != nil {
			return err
		}
	}
	if o.Source != "" {
		if src, err = device.ResolveHost(ctx, o.Source); err != nil {
			return fmt.Errorf("-I %s: %w", o.Source, err)
		}
	}
	cm, err := open(addr, src)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := cm.close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	r.verbs = cm.verbs
	r.pd = cm.verbs.AllocPD()
	if err := r.setupBuffers(); err != nil {
		return err
	}
	if o.Server {
		if !addr.IsValid() {
			addr = netip.IPv4Unspecified()
		}
		if o.Persistent {
			return r.servePersistent(ctx, cm, netip.AddrPortFrom(addr, uint16(o.Port)))
		}
		return r.serve(ctx, cm, netip.AddrPortFrom(addr, uint16(o.Port)))
	}
	return r.dial(ctx, cm, src, netip.AddrPortFrom(addr, uint16(o.Port)))
}

// setupBuffers is rping_setup_buffers, and the CQ of rping_setup_qp (the QP
// comes with the connection: newQP).
func (r *session) setupBuffers() (err error) {
	c, pd, size := r.verbs, r.pd, r.o.Size
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
	if r.rdmaMR, err = pd.RegMR(make([]byte, size), rdmaAccess); err != nil {
		return err
	}
	if r.o.Client {
		if r.startMR, err = pd.RegMR(make([]byte, size), rdmaAccess); err != nil {
			return err
		}
	}
	r.debugf("allocated & registered buffers...\n")
	return nil
}

// freeResources is rping_free_buffers and rping_free_qp: a persistent
// server's connection gives back what it had.
func (r *session) freeResources(id *rdmacm.ID) {
	if r.qp != nil {
		if r.o.SelfQP {
			r.qp.Destroy()
		} else {
			id.DestroyQP()
		}
	}
	for _, mr := range []*ib.MR{r.recvMR, r.sendMR, r.rdmaMR, r.startMR} {
		if mr != nil {
			mr.Dereg()
		}
	}
	if r.cq != nil {
		r.cq.Destroy()
	}
}

// newQP is rping_setup_qp for id's connection, and the receive posted before
// rdma_connect and rdma_accept (rping.c does too: iWARP has no RNR flow
// control, and the peer's first SEND may follow the connection's
// establishment at once). With -q the QP is the program's own, created with
// the verbs and moved to INIT (port 1, no remote access), as rping.c does.
func (r *session) newQP(id *rdmacm.ID) (err error) {
	attr := ib.QPInitAttr{Type: ib.QPTypeRC, SendCQ: r.cq, RecvCQ: r.cq,
		Cap: ib.QPCap{MaxSendWR: 16, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}}
	if r.o.SelfQP {
		if r.qp, err = r.verbs.CreateQP(r.pd, attr); err != nil {
			return fmt.Errorf("ibv_create_qp: %w", err)
		}
		if err := r.qp.Modify(&ib.QPAttr{QPState: ib.QPStateInit, Port: 1},
			ib.QPAttrState|ib.QPAttrPKeyIndex|ib.QPAttrPort|ib.QPAttrAccessFlags); err != nil {
			return fmt.Errorf("ibv_modify_qp: %w", err)
		}
	} else if r.qp, err = id.CreateQP(r.pd, attr); err != nil {
		return err
	}
	return r.postRecv()
}

// selfModifyQP is rping_self_modify_qp (-q): INIT, RTR and RTS with the
// attributes rdma_init_qp_attr gives for id's connection. On iWARP these are
// iw_cm's masks, which the IBTA table refuses and siw takes as no-ops but for
// the access flags (rdmacm.ModifyAsSiw): the server's QP stays in INIT until
// rdma_accept moves it to RTS, the client's, past ESTABLISHED, in RTS.
func (r *session) selfModifyQP(id *rdmacm.ID) error {
	for _, st := range []ib.QPState{ib.QPStateInit, ib.QPStateRTR, ib.QPStateRTS} {
		a, mask, err := id.InitQPAttr(st)
		if err != nil {
			return fmt.Errorf("rdma_init_qp_attr %v: %w", st, err)
		}
		if err := r.qp.Modify(&a, mask); err != nil {
			if err = rdmacm.ModifyAsSiw(r.qp, &a, mask, err); err != nil {
				return fmt.Errorf("ibv_modify_qp %v: %w", st, err)
			}
		}
	}
	return nil
}

// connParam is rping_init_conn_param: responder resources and initiator
// depth 1, retry and RNR retry counts 7, and with -q the QP's number.
func (r *session) connParam() rdmacm.ConnParam {
	p := rdmacm.DefaultConnParam()
	if r.o.SelfQP {
		p.QPNum = r.qp.QPN()
	}
	return p
}

// disconnect is rping_disconnect: with -q the QP goes to ERR first, then
// rdma_disconnect.
func (r *session) disconnect() error {
	if r.o.SelfQP {
		if err := r.qp.Modify(&ib.QPAttr{QPState: ib.QPStateErr}, ib.QPAttrState); err != nil {
			return err
		}
	}
	return r.conn.Close()
}

// listen is rping_bind_server: the listening ID on bind.
func (r *session) listen(cm *cmSide, bind netip.AddrPort) (*rdmacm.ID, error) {
	l, err := cm.m.CreateID(rdmacm.PortSpaceTCP)
	if err != nil {
		return nil, err
	}
	r.cmID = l
	if err := l.BindAddr(bind); err != nil {
		l.Destroy()
		return nil, fmt.Errorf("rdma_bind_addr: %w", err)
	}
	if err := l.Listen(3); err != nil {
		l.Destroy()
		return nil, fmt.Errorf("rdma_listen: %w", err)
	}
	r.debugf("rdma_bind_addr successful\nrdma_listen\n")
	return l, nil
}

// request waits for the listener's next CONNECT_REQUEST.
func (r *session) request(ctx context.Context, l *rdmacm.ID) (*rdmacm.ID, error) {
	var ev rdmacm.Event
	select {
	case ev = <-l.Events():
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if ev.ID == nil {
		return nil, errors.New("the listening ID was destroyed")
	}
	r.cmEvent(ev)
	if ev.Type != rdmacm.EventConnectRequest {
		return nil, fmt.Errorf("wait for CONNECT_REQUEST state: unexpected event %v", ev.Type)
	}
	return ev.ID, nil
}

// accept is the server's side of one connection up to ESTABLISHED: the QP,
// rping_accept (with -q: the QP moved to RTS first, and named in the
// accept's conn_param; else no conn_param, which takes the request's).
func (r *session) accept(ctx context.Context, id *rdmacm.ID) error {
	r.debugf("child cma %p\n", id)
	if err := r.newQP(id); err != nil {
		id.Reject(nil)
		return err
	}
	r.debugf("accepting client connection request\n")
	p := rdmacm.ConnParam{ResponderResources: irdOrd, InitiatorDepth: irdOrd}
	if r.o.SelfQP {
		if err := r.selfModifyQP(id); err != nil {
			id.Reject(nil)
			return err
		}
		p = r.connParam()
	}
	if err := id.Accept(p); err != nil {
		return fmt.Errorf("rdma_accept: %w", err)
	}
	if _, err := r.cmWait(ctx, id, device.CMStep, rdmacm.EventEstablished); err != nil {
		return fmt.Errorf("wait for CONNECTED state: %w", err)
	}
	r.debugf("ESTABLISHED\n")
	return nil
}

// pingsServed is rping_test_server on an established connection: pings
// until the client disconnects.
func (r *session) pingsServed(ctx context.Context, id *rdmacm.ID) error {
	conn := newCMConn(id)
	defer conn.release()
	r.conn = conn
	for {
		err := r.serverPing(ctx)
		if errors.Is(err, errDisconnected) {
			r.disconnectEvent()
			r.disconnect()
			return nil
		}
		if err != nil {
			conn.Abort()
			return err
		}
	}
}

// serve is rping_bind_server, rping_run_server and rping_test_server: one
// connection, pings until the client disconnects.
func (r *session) serve(ctx context.Context, cm *cmSide, bind netip.AddrPort) error {
	l, err := r.listen(cm, bind)
	if err != nil {
		return err
	}
	defer l.Destroy()
	id, err := r.request(ctx, l)
	if err != nil {
		return err
	}
	defer id.Destroy()
	if err := r.accept(ctx, id); err != nil {
		return err
	}
	l.Destroy()
	return r.pingsServed(ctx, id)
}

// servePersistent is rping_run_persistent_server (-P): every connection
// request gets a control block of its own (clone_cb: its QP, CQ and buffers)
// and is served at once beside the others (rping_persistent_server_thread);
// the server runs until it is stopped (ctx), which ends it with no error.
// A connection that fails says so on stderr and the server goes on.
func (r *session) servePersistent(ctx context.Context, cm *cmSide, bind netip.AddrPort) error {
	l, err := r.listen(cm, bind)
	if err != nil {
		return err
	}
	defer l.Destroy()
	// Connections print side by side: one line is one write.
	r.stdout, r.stderr = &lockedWriter{w: r.stdout}, &lockedWriter{w: r.stderr}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		id, err := r.request(ctx, l)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		c := &session{o: r.o, stdout: r.stdout, stderr: r.stderr, cmID: l, verbs: r.verbs, pd: r.pd}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer id.Destroy()
			err := c.setupBuffers()
			if err == nil {
				if err = c.accept(ctx, id); err == nil {
					err = c.pingsServed(ctx, id)
				}
			}
			c.freeResources(id)
			if err != nil && ctx.Err() == nil {
				fmt.Fprintf(c.stderr, "rping server: connection %v: %v\n", id.RemoteAddr(), err)
			}
		}()
	}
}

// lockedWriter serialises the writes of a persistent server's connections.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// dial is rping_bind_client and rping_connect_client, then the pings. src is
// -I's address (rdma_resolve_addr's source), or invalid. With -q, on RoCE the
// REP comes as CONNECT_RESPONSE (the ID has no QP to move): the QP goes to
// RTS and rdma_establish sends the RTU; on iWARP the MPA exchange has moved
// the QP already and ESTABLISHED comes, after which rping.c makes the same
// calls (its CONNECTED state follows either event): the modifies leave the
// QP in RTS and rdma_establish does nothing (rdmacm.ID.Establish).
func (r *session) dial(ctx context.Context, cm *cmSide, src netip.Addr, peer netip.AddrPort) error {
	id, err := cm.m.CreateID(rdmacm.PortSpaceTCP)
	if err != nil {
		return err
	}
	r.cmID = id
	defer id.Destroy()
	r.debugf("created cm_id %p\n", id)
	if err := id.ResolveAddr(src, peer, 2*time.Second); err != nil {
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
	if err := r.newQP(id); err != nil {
		return err
	}
	if r.o.SelfQP {
		defer r.qp.Destroy()
	}
	if err := id.Connect(r.connParam()); err != nil {
		return fmt.Errorf("rdma_connect: %w", err)
	}
	want := []rdmacm.EventType{rdmacm.EventEstablished}
	if r.o.SelfQP {
		want = append(want, rdmacm.EventConnectResponse)
	}
	if _, err := r.cmWait(ctx, id, 15*time.Second, want...); err != nil {
		return fmt.Errorf("connect error: %w", err)
	}
	if r.o.SelfQP {
		if err := r.selfModifyQP(id); err != nil {
			return fmt.Errorf("rping_modify_qp: %w", err)
		}
		if err := id.Establish(); err != nil {
			return fmt.Errorf("rdma_establish: %w", err)
		}
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
