package perf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/softrdma/softrdma/device"
	"github.com/softrdma/softrdma/devspec"
	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/oob"
	"github.com/softrdma/softrdma/oob/perftest"
	"github.com/softrdma/softrdma/rdmacm"
)

// perf -R is perftest's rdma_cm mode (create_comm_struct, establish_connection
// and create_rdma_cm_connection in perftest_communication.c): no TCP at all.
//
//   - The parameters travel on a "comm" connection of their own: an RC QP
//     that rdma_cm connects to the server's port (-p, 18515), one SEND of each
//     message's own size (a 56-byte pingpong_dest for the keys), one receive
//     of 56 bytes kept posted on each side (posted before rdma_connect and
//     rdma_accept). The server accepts one request and destroys its listening
//     ID, which frees the port for the test connections.
//   - Between the two all-zero handshakes (perftest.StepConnectCM), each test
//     QP is connected by rdma_cm to the same port: the server listens with a
//     backlog of -q, accepts each request with retry and RNR retry counts 7
//     (and -o's READ depth, clamped to the peer's), then destroys the
//     listener; the client connects each QP in turn (the next once the last
//     is ESTABLISHED: both sides pair them in that order), retrying the
//     whole series up to 10 times 100 ms apart (a REJ for a port nobody
//     listens on yet is the usual reason: both sides leave the first
//     handshake at once).
//   - After the closing handshake each side disconnects its test connections
//     and waits for their DISCONNECTED events (rdma_cm_disconnect_nodes).
//
// The same runs over iWARP (--transport iwarp): see iwarp.go.

// cmMsgSize is sizeof(struct pingpong_dest): the receive buffer of the
// comm QP, and the largest message.
const cmMsgSize = perftest.DestBinarySize

// cmSide is one side's rdma_cm: the manager over the device's CM agent.
type cmSide struct {
	cm    *device.CM
	m     *rdmacm.Manager
	iwarp bool // the device is iWARP's
	// retry is --retry_count: the retry count of every connection's
	// rdma_connect and rdma_accept (perftest's conn_param.retry_count).
	retry uint8

	comm    *rdmacm.ID
	carrier *qpCarrier
	tests   []*rdmacm.ID
	// listen is the server's listener, kept after the comm connection so that
	// it already listens when the client connects the test QPs right after
	// the first all-zero handshake (a fresh listener there races the client:
	// seen in CI as the kernel's REQ answered with REJ 8, invalid service ID).
	listen *rdmacm.ID
}

// startCM starts perf's rdma_cm on d: a CM agent on RoCE's QP1, the
// manager over TCP on iWARP.
func startCM(d device.Device) (*cmSide, error) {
	cm, err := d.StartCM(device.CMConfig{})
	if err != nil {
		return nil, err
	}
	return &cmSide{cm: cm, m: cm.Manager, iwarp: d.Spec().Transport == devspec.IWARP}, nil
}

// close disconnects what is still connected (briefly waiting for the peer),
// destroys the IDs and stops the agent.
func (c *cmSide) close() {
	if c.comm != nil {
		device.CMDisconnect([]*rdmacm.ID{c.comm}, time.Second)
		c.comm.Destroy()
		c.comm = nil
	}
	for _, id := range c.tests {
		id.Destroy()
	}
	c.tests = nil
	if c.listen != nil {
		c.listen.Destroy()
		c.listen = nil
	}
	c.cm.Close()
}

// qpCarrier is perftest's message carrier over the comm QP: each message
// one signalled SEND (rdma_write_data), each receive the completion of the
// one receive kept posted, reposted after it is read (rdma_read_data).
type qpCarrier struct {
	qp             *ibtransport.QP
	sendCQ, recvCQ *ibtransport.CQ
	mr             *ibtransport.MR
	mem            []byte // [0, 56): receive buffer; [56, 112): send buffer

	sendMu, recvMu sync.Mutex
}

// newPerfQPCarrier makes the comm QP's resources on id's device and its QP on
// id, and posts the first receive.
func newPerfQPCarrier(id *rdmacm.ID) (*qpCarrier, error) {
	c := id.Context()
	pd := c.AllocPD()
	q := &qpCarrier{mem: make([]byte, 2*cmMsgSize)}
	var err error
	if q.sendCQ, err = c.CreateCQ(4); err != nil {
		return nil, err
	}
	if q.recvCQ, err = c.CreateCQ(4); err != nil {
		return nil, err
	}
	if q.mr, err = pd.RegMR(q.mem, ibtransport.AccessLocalWrite); err != nil {
		return nil, err
	}
	if q.qp, err = id.CreateQP(pd, ibtransport.QPInitAttr{SendCQ: q.sendCQ, RecvCQ: q.recvCQ,
		Cap: ibtransport.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, err
	}
	if err := q.postRecv(); err != nil {
		return nil, err
	}
	return q, nil
}

func (q *qpCarrier) postRecv() error {
	return q.qp.PostRecv(ibtransport.RecvWR{WRID: 1, SGL: []ibtransport.SGE{q.mr.SGE(0, cmMsgSize)}})
}

// poll waits for cq's next completion.
func (q *qpCarrier) poll(ctx context.Context, cq *ibtransport.CQ, what string) (ibtransport.WC, error) {
	wc := make([]ibtransport.WC, 1)
	for {
		if cq.Poll(wc) == 1 {
			if wc[0].Status != ibtransport.WCSuccess {
				return wc[0], fmt.Errorf("perftest message %s: completion %s (status %d)", what, wc[0].Status, int(wc[0].Status))
			}
			return wc[0], nil
		}
		if err := device.WaitCQ(ctx, cq, time.Time{}); err != nil {
			return ibtransport.WC{}, fmt.Errorf("perftest message %s: %w", what, err)
		}
	}
}

// Send sends msg as one SEND and waits for its completion.
func (q *qpCarrier) Send(ctx context.Context, msg []byte) error {
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	if len(msg) > cmMsgSize {
		return &oob.Error{Message: "perftest message", Field: "length", Value: strconv.Itoa(len(msg)),
			Reason: fmt.Sprintf("> %d", cmMsgSize), Err: oob.ErrRange}
	}
	n := copy(q.mem[cmMsgSize:], msg)
	if err := q.qp.PostSend(ibtransport.SendWR{WRID: 2, Opcode: ibtransport.WRSend, Signaled: true,
		SGL: []ibtransport.SGE{q.mr.SGE(cmMsgSize, n)}}); err != nil {
		return err
	}
	_, err := q.poll(ctx, q.sendCQ, "send")
	return err
}

// Receive waits for the next SEND, copies it into buf and posts the receive
// again.
func (q *qpCarrier) Receive(ctx context.Context, buf []byte) (int, error) {
	q.recvMu.Lock()
	defer q.recvMu.Unlock()
	wc, err := q.poll(ctx, q.recvCQ, "receive")
	if err != nil {
		return 0, err
	}
	n := int(wc.ByteLen)
	copy(buf, q.mem[:n])
	if err := q.postRecv(); err != nil {
		return 0, err
	}
	if n > len(buf) {
		return len(buf), &oob.Error{Message: "perftest message", Field: "length", Value: strconv.Itoa(n),
			Reason: fmt.Sprintf("> the %d expected", len(buf)), Err: oob.ErrRange}
	}
	return n, nil
}

var _ perftest.Carrier = (*qpCarrier)(nil)

// cmServeComm listens on port for perftest's comm connection and accepts
// one (rdma_server_connect).
// It returns the port (port 0 binds an ephemeral one, which the test
// connections then use too).
func (c *cmSide) serveComm(ctx context.Context, port int, listening func(net.Addr), stdout io.Writer) (int, error) {
	l, err := c.m.CreateID(rdmacm.PortSpaceTCP)
	if err != nil {
		return 0, err
	}
	c.listen = l // destroyed by close
	if err := l.BindAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(port))); err != nil {
		return 0, fmt.Errorf(" rdma_bind_addr failed: %w", err)
	}
	if err := l.Listen(16); err != nil {
		return 0, fmt.Errorf("rdma_listen failed: %w", err)
	}
	port = int(l.LocalAddr().Port())
	if listening != nil {
		listening(&net.TCPAddr{IP: net.IPv4zero, Port: port})
	}
	io.WriteString(stdout, waitingBanner)
	var ev rdmacm.Event
	select {
	case ev = <-l.Events():
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	if ev.Type != rdmacm.EventConnectRequest {
		return 0, fmt.Errorf("bad event waiting for connect request %v", ev.Type)
	}
	id := ev.ID
	q, err := newPerfQPCarrier(id)
	if err != nil {
		id.Reject(nil)
		id.Destroy()
		return 0, err
	}
	if err := id.Accept(rdmacm.ConnParam{RetryCount: c.retry, RNRRetryCount: 7}); err != nil {
		id.Destroy()
		return 0, fmt.Errorf("Function rdma_accept failed: %w", err)
	}
	c.comm, c.carrier = id, q
	return port, nil
}

// dialComm connects the comm QP to the server (rdma_client_connect),
// retrying a server that is not listening yet for wait.
func (c *cmSide) dialComm(ctx context.Context, src netip.Addr, dst netip.AddrPort, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		err := c.dialCommOnce(ctx, src, dst)
		if err == nil {
			return nil
		}
		var ee *device.CMEventError
		if !errors.As(err, &ee) || time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("Unable to perform rdma_client function: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *cmSide) dialCommOnce(ctx context.Context, src netip.Addr, dst netip.AddrPort) error {
	id, err := c.m.CreateID(rdmacm.PortSpaceTCP)
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			id.Destroy()
		}
	}()
	if err := device.CMResolve(ctx, id, src, dst); err != nil {
		return err
	}
	q, err := newPerfQPCarrier(id)
	if err != nil {
		return err
	}
	if err := id.Connect(rdmacm.ConnParam{RetryCount: c.retry, RNRRetryCount: 7}); err != nil {
		return fmt.Errorf("Function rdma_connect failed: %w", err)
	}
	if _, err := device.CMWait(ctx, id, device.CMStep, rdmacm.EventEstablished); err != nil {
		return err
	}
	ok = true
	c.comm, c.carrier = id, q
	c.settle() // iWARP: before the first SEND
	return nil
}

// cmConnParam is what perftest offers for a test connection.
func (s *session) cmConnParam(peer *rdmacm.ConnParam) rdmacm.ConnParam {
	cp := rdmacm.ConnParam{RetryCount: s.p.retry, RNRRetryCount: 7}
	if s.p.verb == verbRead || s.p.verb == verbAtomic {
		rr, id := uint8(s.outReads), uint8(s.outReads)
		if peer != nil {
			rr, id = min(rr, peer.InitiatorDepth), min(id, peer.ResponderResources)
		}
		cp.ResponderResources, cp.InitiatorDepth = rr, id
	}
	return cp
}

// connectCM is the ConnectCM hook: the CQs and one rdma_cm connection per
// test QP (create_rdma_cm_connection between its two handshakes).
func (s *session) connectCM(ctx context.Context) error {
	p := s.p
	c := s.ctx
	s.pd = c.AllocPD()
	var err error
	if s.sendCQ, err = c.CreateCQ(max(p.txDepth*p.qps, 1) + 16); err != nil {
		return err
	}
	if s.recvCQ, err = c.CreateCQ(max(p.rxDepth*p.qps, 1) + 16); err != nil {
		return err
	}
	attr := ibtransport.QPInitAttr{SendCQ: s.sendCQ, RecvCQ: s.recvCQ,
		Cap: ibtransport.QPCap{MaxSendWR: max(p.txDepth, 1), MaxRecvWR: max(p.rxDepth, 1), MaxSendSGE: 1, MaxRecvSGE: 1}}
	if p.server {
		return s.acceptTests(ctx, attr)
	}
	for try := 0; ; try++ {
		err := s.dialTests(ctx, attr)
		if err == nil {
			return nil
		}
		for _, id := range s.cm.tests {
			id.Destroy()
		}
		s.cm.tests, s.qps = nil, nil
		var ee *device.CMEventError
		if try == 9 || !errors.As(err, &ee) {
			return fmt.Errorf("Failed to connect RDMA CM client, tried %d times: %w", try+1, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *session) acceptTests(ctx context.Context, attr ibtransport.QPInitAttr) error {
	l := s.cm.listen
	if s.p.conn == "UD" {
		l = nil // UD's test QPs are rdma_cm's UDP port space (conn.go)
	}
	if l == nil {
		var err error
		if l, err = s.cm.m.CreateID(s.testPortSpace()); err != nil {
			return err
		}
		defer l.Destroy()
		if err := l.BindAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(s.cmPort))); err != nil {
			return fmt.Errorf("Failed to bind RDMA CM address on the server: %w", err)
		}
		if err := l.Listen(s.p.qps); err != nil {
			return fmt.Errorf("Failed to listen on RDMA CM server listen ID: %w", err)
		}
	}
	for len(s.qps) < s.p.qps {
		ev, err := device.CMWait(ctx, l, noProgress, rdmacm.EventConnectRequest)
		if err != nil {
			return err
		}
		qp, err := ev.ID.CreateQP(s.pd, attr)
		if err != nil {
			ev.ID.Reject(nil)
			return fmt.Errorf("Failed to create QP: %w", err)
		}
		s.cm.tests = append(s.cm.tests, ev.ID)
		if s.p.udParams() { // conn.go
			if err := s.postUDParamsRecv(qp); err != nil {
				return fmt.Errorf("Failed to post receive for RDMA CM UD request connection parameters: %w", err)
			}
		}
		if err := ev.ID.Accept(s.cmConnParam(&ev.Param)); err != nil {
			return fmt.Errorf("Failed to accept RDMA CM connection: %w", err)
		}
		s.qps = append(s.qps, qp)
		if s.p.conn == "UD" {
			s.ah = append(s.ah, ev.UD.AH) // the client, for the server's sends (send_lat)
		}
	}
	if s.p.udParams() {
		return s.takeUDParams(ctx, s.recvCQ, len(s.qps))
	}
	return nil
}

// dialTests connects the test QPs one at a time: each connection is
// ESTABLISHED before the next is asked for. The server (acceptTests, and
// perftest's) pairs connections with test QPs in the order the requests
// arrive, the client in the order it dials; with every request in flight at
// once (iWARP's TCP connections, each with its own goroutine on the server)
// they arrived out of order now and then, so that QP i's SENDs went to the
// server's QP j with QP i's receive credit and the server's credit WRITEs to
// the wrong word: a Terminate for a SEND without a receive, or a sender
// waiting for credit forever (issue 19).
func (s *session) dialTests(ctx context.Context, attr ibtransport.QPInitAttr) error {
	dst := netip.AddrPortFrom(s.cmPeer, uint16(s.cmPort))
	for range s.p.qps {
		id, err := s.cm.m.CreateID(s.testPortSpace())
		if err != nil {
			return err
		}
		s.cm.tests = append(s.cm.tests, id)
		src := s.dev.Local()
		if s.dev.Spec().Transport == devspec.IWARP {
			src = netip.Addr{} // the kernel picks a TCP connection's source
		}
		if err := device.CMResolve(ctx, id, src, dst); err != nil {
			return err
		}
		qp, err := id.CreateQP(s.pd, attr)
		if err != nil {
			return fmt.Errorf("Failed to create QP: %w", err)
		}
		s.qps = append(s.qps, qp)
		if err := id.Connect(s.cmConnParam(nil)); err != nil {
			return fmt.Errorf("Failed to connect through RDMA CM: %w", err)
		}
		ev, err := device.CMWait(ctx, id, device.CMStep, rdmacm.EventEstablished)
		if err != nil {
			return err
		}
		if s.p.conn == "UD" {
			s.ah = append(s.ah, ev.UD.AH) // the SIDR reply's path to the server's QP
			if s.p.udParams() {
				if err := s.sendUDParams(ctx, qp, ev.UD); err != nil {
					return err
				}
			}
		}
	}
	s.cm.settle()
	return nil
}

// runCM is run with -R or -z: the exchange over the comm QP, the test
// QPs connected by rdma_cm (-R) or by their keys (-z).
func runCM(o *Options, p *params, res *result, stdout, stderr io.Writer) (err error) {
	ctx := o.context()
	var peer netip.Addr
	if !p.server {
		ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip4", o.Host)
		if err != nil || len(ips) == 0 {
			return fmt.Errorf("Problem in resolving basic address and port: %s: %v", o.Host, err)
		}
		peer = ips[0].Unmap()
	}
	dev, err := openDevice(o, p, peer)
	if err != nil {
		return err
	}
	if err := checkInline(dev, p); err != nil {
		dev.Close()
		return err
	}
	cm, err := startCM(dev)
	if err != nil {
		dev.Close()
		return err
	}
	cm.retry = p.retry
	defer func() {
		cm.close()
		if cerr := dev.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("closing the device: %w", cerr)
		}
	}()
	s := &session{p: p, dev: dev, stdout: stdout, stderr: stderr, res: res, cm: cm, cmPort: o.Port, cmPeer: peer, outJSON: newOutJSON(o, stderr)}
	if dev.Spec().Transport != devspec.IWARP {
		if err := s.init(); err != nil {
			return err
		}
		res.Device = s.devName
	}
	if p.server {
		s.cmPort, err = cm.serveComm(ctx, o.Port, o.Listening, stdout)
	} else {
		err = cm.dialComm(ctx, dev.Local(), netip.AddrPortFrom(peer, uint16(o.Port)), o.Wait)
	}
	if err != nil {
		return err
	}
	if dev.Spec().Transport == devspec.IWARP {
		// iWARP's device is the interface the comm connection runs on.
		if err := dev.Attach(cm.commLocal(p.server)); err != nil {
			return err
		}
		if err := s.init(); err != nil {
			return err
		}
		res.Device = s.devName
	}

	cfg := s.perftestConfig() // -z's UD messages are at most the MTU too
	cfg.Role, cfg.UseRDMACM, cfg.WorkRDMACM = perftest.RoleClient, true, o.RDMACM
	if p.server {
		cfg.Role = perftest.RoleServer
	}
	keys := func() {
		if !s.keysPrinted && s.cmResult != nil {
			s.remote = s.cmResult.Remote
			s.printKeys(s.cmResult.Local, s.cmResult.Remote)
		}
	}
	hooks := perftest.Hooks{
		Setup: func(ctx context.Context, r *perftest.Result) ([]perftest.Dest, error) {
			s.cmResult = r
			return s.setup(ctx, r)
		},
		PostReceives: func(ctx context.Context, size uint64) error { keys(); return s.postReceives(ctx, size) },
		Run:          func(ctx context.Context, size uint64) (perftest.BWReport, error) { keys(); return s.run(ctx, size) },
	}
	if o.RDMACM {
		hooks.ConnectCM = s.connectCM
	} else {
		hooks.Connect = s.connect
	}
	r, err := perftest.Run(ctx, cm.carrier, cfg, hooks)
	if err != nil {
		return err
	}
	keys()
	s.finish(r)
	// rdma_cm_disconnect_nodes: both sides disconnect every test connection
	// and wait for their DISCONNECTED events.
	if len(cm.tests) > 0 && p.conn != "UD" { // a UD ID has no connection to end
		if err := device.CMDisconnect(cm.tests, device.CMStep); err != nil {
			fmt.Fprintf(stderr, "softrdma perf: disconnecting: %v\n", err)
		}
	}
	return nil
}
