package rdmacm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/softrdma/softrdma/ibcm"
	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/iwarp"
)

// The iWARP backend: rdma_cm over iwarp.Dial and iwarp.Listen, as the
// kernel's cma.c drives iw_cm. The private data travels in the MPA request
// and reply as it is (no CMA header); IRD and ORD are the responder
// resources and the initiator depth.

// IWARPConfig configures an iWARP device of a Manager.
type IWARPConfig struct {
	// Addrs are the local IP addresses the device connects from and listens
	// on (those of the host's interfaces it serves). Required.
	Addrs []netip.Addr
	// Params are the MPA policies of every connection (revision, CRC,
	// markers, peer-to-peer, observer...); the calls set PrivateData, IRD
	// and ORD.
	Params iwarp.ConnParams
	// ConnectTimeout bounds the TCP connect and the MPA exchange of Connect,
	// and the MPA reply of Accept (default 10 s).
	ConnectTimeout time.Duration
}

// iwarpState is the iWARP part of an ID. Guarded by Manager.mu.
type iwarpState struct {
	conn    *iwarp.Conn
	req     *iwarp.ConnRequest
	cancel  context.CancelFunc
	lns     []*iwarp.Listener
	closing bool
}

type iwarpTransport struct {
	m   *Manager
	dev *iwarp.Device
	cfg IWARPConfig
}

// AddIWARP adds an iWARP device serving cfg.Addrs.
func (m *Manager) AddIWARP(dev *iwarp.Device, cfg IWARPConfig) error {
	if len(cfg.Addrs) == 0 {
		return fmt.Errorf("rdmacm: an iWARP device needs its addresses: %w", ErrInvalid)
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	cfg.Addrs = append([]netip.Addr(nil), cfg.Addrs...)
	return m.addTransport(&iwarpTransport{m: m, dev: dev, cfg: cfg})
}

func (t *iwarpTransport) kind() Transport               { return TransportIWARP }
func (t *iwarpTransport) context() *ibtransport.Context { return t.dev.Context() }
func (t *iwarpTransport) addrs() []netip.Addr           { return t.cfg.Addrs }

// sources are the device's addresses: TCP sends from any of them (Dial
// leaves the choice to the kernel, and the ID takes the connection's own).
func (t *iwarpTransport) sources() []netip.Addr { return t.cfg.Addrs }

// resolveAddr needs no query: TCP finds the link address itself. m.mu is held.
func (t *iwarpTransport) resolveAddr(id *ID, dst netip.Addr, _ time.Duration) {
	t.m.addrResolved(id, id.resolveGen, nil)
}

func (t *iwarpTransport) resolveRoute(*ID) error { return nil }

func (t *iwarpTransport) initQP(id *ID, qp *ibtransport.QP) error {
	if qp.Type() != ibtransport.QPTypeRC {
		return fmt.Errorf("rdmacm: iWARP has RC QPs only: %w", ErrNotSupported)
	}
	// cma_iw_init_qp_attr: remote write and read from the start.
	return qp.Modify(&ibtransport.QPAttr{QPState: ibtransport.QPStateInit, Port: 1,
		AccessFlags: ibtransport.AccessRemoteWrite | ibtransport.AccessRemoteRead},
		ibtransport.QPAttrState|ibtransport.QPAttrPKeyIndex|ibtransport.QPAttrPort|ibtransport.QPAttrAccessFlags)
}

func (t *iwarpTransport) params(p *ConnParam) iwarp.ConnParams {
	cp := t.cfg.Params
	cp.PrivateData = append([]byte(nil), p.PrivateData...)
	cp.IRD, cp.ORD = int(p.ResponderResources), int(p.InitiatorDepth)
	// rdma_cm's 0 is none, as the kernel's cma passes it to iw_cm (package
	// iwarp reads 0 as its default and a negative value as none).
	if cp.IRD == 0 {
		cp.IRD = -1
	}
	if cp.ORD == 0 {
		cp.ORD = -1
	}
	return cp
}

// initiatorRTR makes an initiator ask for RFC 6581 peer-to-peer mode with
// the Read RTR alone, so that Dial returns only after the responder has
// answered its zero-length Read Request, proof that it reads the stream:
// Linux siw as the responder leaves data that arrives right after its MPA
// Reply unread (iwarp/rtrwait.go), and the application's first SEND hung
// there. siw picks the Write RTR when it is offered, which nobody answers, so
// Read alone is offered. A Read RTR needs an ORD of at least 1 (siw's
// siw_connect raises it to 1 in peer-to-peer mode in the same way).
func initiatorRTR(cp *iwarp.ConnParams) {
	cp.PeerToPeer, cp.RTR = true, iwarp.RTRRead
	if cp.ORD < 0 { // none; 0 is package iwarp's default, 16
		cp.ORD = 1
	}
}

func addrPortOf(a net.Addr) netip.AddrPort {
	if ta, ok := a.(*net.TCPAddr); ok {
		ap := ta.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap
}

func (t *iwarpTransport) connect(id *ID, p *ConnParam) error {
	if id.qpType != ibtransport.QPTypeRC {
		return fmt.Errorf("rdmacm: UD over iWARP: %w", ErrNotSupported)
	}
	m := t.m
	ctx, cancel := context.WithTimeout(context.Background(), t.cfg.ConnectTimeout)
	id.iwarp.cancel = cancel
	qp, cp, addr := id.qp, t.params(p), id.remote.String()
	if qp == nil { // the program's own QP, by number (checkQP found it)
		var err error
		if qp, err = t.userQP(p.QPNum); err != nil {
			cancel()
			return err
		}
	}
	initiatorRTR(&cp)
	cp.LocalAddr = id.local.Addr() // the resolved source, the device's address
	go func() {
		conn, err := iwarp.Dial(ctx, qp, addr, cp)
		cancel()
		m.mu.Lock()
		defer m.mu.Unlock()
		if id.state != stateConnect {
			if conn != nil {
				go conn.Abort()
			}
			return
		}
		if err != nil {
			id.state = stateDisconnect
			m.push(id, dialEvent(err))
			return
		}
		// The connection's real TCP port replaces the one ResolveAddr reserved.
		m.unbind(id)
		la := addrPortOf(conn.LocalAddr())
		if m.bind(id, la.Addr(), la.Port()) != nil {
			id.local = la
		}
		t.established(id, conn)
	}()
	return nil
}

// dialEvent maps a failed Dial to the event rdma_cm reports for iw_cm's
// connect reply status (cma_iw_handler): refused or reset → REJECTED, timed
// out → UNREACHABLE, anything else → CONNECT_ERROR.
func dialEvent(err error) Event {
	var re *iwarp.RejectError
	var ne net.Error
	switch {
	case errors.As(err, &re) && re.ByPeer:
		return Event{Type: EventRejected, Status: StatusConnRefused, Param: ConnParam{PrivateData: re.PrivateData}, Err: err}
	case errors.Is(err, syscall.ECONNREFUSED):
		return Event{Type: EventRejected, Status: StatusConnRefused, Err: err}
	case errors.Is(err, syscall.ECONNRESET):
		return Event{Type: EventRejected, Status: StatusConnReset, Err: err}
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return Event{Type: EventUnreachable, Status: StatusTimedOut, Err: err}
	}
	return Event{Type: EventConnectError, Status: StatusIO, Err: err}
}

// established records a running connection and reports it. m.mu is held.
func (t *iwarpTransport) established(id *ID, conn *iwarp.Conn) {
	id.iwarp.conn = conn
	id.state = stateEstablished
	neg := conn.Negotiated()
	t.m.push(id, Event{Type: EventEstablished, Param: ConnParam{
		PrivateData:        conn.PeerPrivateData(),
		ResponderResources: uint8(min(neg.IRD, 255)), InitiatorDepth: uint8(min(neg.ORD, 255)),
	}})
	go func() {
		<-conn.Done()
		t.m.mu.Lock()
		defer t.m.mu.Unlock()
		if id.state != stateDestroyed {
			t.m.disconnected(id, 0)
		}
	}()
}

func (t *iwarpTransport) listen(id *ID) error {
	host := "" // no address: every address of both families
	if a := id.local.Addr(); a.IsValid() {
		host = a.String()
	}
	ln, err := iwarp.Listen(net.JoinHostPort(host, fmt.Sprint(id.local.Port())), t.cfg.Params)
	if err != nil {
		return err
	}
	id.iwarp.lns = append(id.iwarp.lns, ln)
	go t.serve(id, ln)
	return nil
}

// serve hands the connection requests of ln to the listening ID.
func (t *iwarpTransport) serve(l *ID, ln *iwarp.Listener) {
	m := t.m
	for {
		req, err := ln.Next(context.Background())
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue // one connection's failed MPA exchange
		}
		remote := addrPortOf(req.RemoteAddr())
		m.mu.Lock()
		local := l.local
		if l.state != stateListen {
			m.mu.Unlock()
			req.Reject(nil)
			return
		}
		if wildcard(local.Addr()) {
			for _, a := range t.cfg.Addrs {
				if a.Unmap().Is4() == remote.Addr().Is4() {
					local = netip.AddrPortFrom(a.Unmap(), local.Port())
					break
				}
			}
		}
		c := m.newConn(l, t, local, remote)
		c.iwarp.req = req
		param := ConnParam{PrivateData: req.PrivateData()}
		if w, enhanced := req.Request().IRDORD(); enhanced {
			// iw_conn_req_handler: the initiator depth is the peer's IRD, the
			// responder resources its ORD.
			param.InitiatorDepth, param.ResponderResources = uint8(min(w.IRD(), 255)), uint8(min(w.ORD(), 255))
		}
		ok := m.deliverRequest(l, c, Event{Param: param})
		m.mu.Unlock()
		if !ok {
			req.Reject(nil)
		}
	}
}

func (t *iwarpTransport) unlisten(id *ID) {
	for _, ln := range id.iwarp.lns {
		ln.Close()
	}
	id.iwarp.lns = nil
}

func (t *iwarpTransport) accept(id *ID, p *ConnParam) error {
	m := t.m
	req, qp, cp := id.iwarp.req, id.qp, t.params(p)
	if qp == nil { // the program's own QP, by number (checkQP found it)
		var err error
		if qp, err = t.userQP(p.QPNum); err != nil {
			return err
		}
	}
	relaxIRD(req, &cp, qp.Context().Config().MaxRdAtomic)
	id.iwarp.req = nil
	id.state = stateAccepted
	ctx, cancel := context.WithTimeout(context.Background(), t.cfg.ConnectTimeout)
	id.iwarp.cancel = cancel
	go func() {
		conn, err := req.Accept(ctx, qp, &cp)
		cancel()
		m.mu.Lock()
		defer m.mu.Unlock()
		if id.state != stateAccepted {
			if conn != nil {
				go conn.Abort()
			}
			return
		}
		if err != nil {
			id.state = stateDisconnect
			m.push(id, Event{Type: EventConnectError, Status: StatusIO, Err: err})
			return
		}
		t.established(id, conn)
	}()
	return nil
}

func (t *iwarpTransport) reject(id *ID, pd []byte, _ ibcm.RejectReason) error {
	req := id.iwarp.req
	id.iwarp.req = nil
	pd = append([]byte(nil), pd...)
	go req.Reject(pd)
	return nil
}

func (t *iwarpTransport) disconnect(id *ID) error {
	s := &id.iwarp
	if s.cancel != nil {
		s.cancel()
	}
	conn := s.conn
	if conn == nil || s.closing {
		return nil
	}
	s.closing = true
	go func() {
		conn.Close() // the QP moves to ERR; waits (bounded) for the peer's FIN
		t.m.mu.Lock()
		defer t.m.mu.Unlock()
		if id.state != stateDestroyed {
			t.m.disconnected(id, 0)
		}
	}()
	return nil
}

func (t *iwarpTransport) destroy(id *ID) {
	s := &id.iwarp
	if s.cancel != nil {
		s.cancel()
	}
	t.unlisten(id)
	if s.req != nil {
		go s.req.Reject(nil)
		s.req = nil
	}
	if s.conn != nil {
		s.conn.Abort() // before the QP is destroyed under it
		s.conn = nil
	}
}
