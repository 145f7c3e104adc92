package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"sync"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/rdmacm"
)

// rping over RoCE (--transport roce): the same pings (rping.go) on an RC QP
// that rdma_cm connects through the IB CM on QP1 of a RoCE device on the UDP
// backend — REQ (with rdma_cm's CMA header), REP, RTU; DREQ and DREP at the
// end — as the kernel's rping does over rxe. The parameters are rping.c's:
// the client connects with responder resources and initiator depth 1, retry
// and RNR retry counts 7 (rping_connect); the server accepts with 1 and 1 and
// no retry counts (rping_accept's zeroed conn_param). --pcap records the RoCE
// frames (the MADs included).

// rpingConn is what the ping loops need of a connection: its end, an orderly
// close (rdma_disconnect) and an abortive one.
type rpingConn interface {
	Done() <-chan struct{}
	Close() error
	Abort() error
}

// rpingCMConn is an rdma_cm connection as an rpingConn: Done closes on its
// DISCONNECTED event.
type rpingCMConn struct {
	id   *rdmacm.ID
	done chan struct{}
	stop chan struct{}
	once sync.Once
}

func newRpingCMConn(id *rdmacm.ID) *rpingCMConn {
	c := &rpingCMConn{id: id, done: make(chan struct{}), stop: make(chan struct{})}
	go func() {
		for {
			select {
			case ev := <-id.Events():
				if ev.Type == rdmacm.EventDisconnected {
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

func (c *rpingCMConn) Done() <-chan struct{} { return c.done }
func (c *rpingCMConn) Close() error          { return c.id.Disconnect() }
func (c *rpingCMConn) Abort() error          { return c.id.Disconnect() }

// release stops the event reader and destroys the ID.
func (c *rpingCMConn) release() {
	c.once.Do(func() { close(c.stop) })
	c.id.Destroy()
}

// rpingRoCECmd runs rping with --transport roce.
func rpingRoCECmd(o rpingOptions, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	if o.server && o.addr == "" {
		fmt.Fprintln(stderr, "softrdma rping: --transport roce: the server needs -a ADDR (the RoCE device's address)")
		return 2
	}
	r := &rping{o: o, stdout: stdout, stderr: stderr}
	err := r.runRoCE(ctx)
	if err != nil {
		side := "client"
		if o.server {
			side = "server"
		}
		fmt.Fprintf(stderr, "rping %s failed: %v\n", side, err)
		return 1
	}
	return 0
}

// rpingResolve returns -a's address (a name resolves to its first IPv4 one).
func rpingResolve(ctx context.Context, s string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip4", s)
	if err != nil || len(ips) == 0 {
		return netip.Addr{}, fmt.Errorf("getaddrinfo %s: %v", s, err)
	}
	return ips[0].Unmap(), nil
}

func (r *rping) runRoCE(ctx context.Context) (err error) {
	o := r.o
	var addr, peer netip.Addr
	cfg := ppDeviceConfig{gidx: -1, backend: "udp", pcap: o.pcap, seed: rand.Uint64()}
	if o.addr != "" {
		if addr, err = rpingResolve(ctx, o.addr); err != nil {
			return err
		}
	}
	if o.server {
		if addr.IsValid() && !addr.IsUnspecified() {
			cfg.name = addr.String()
		}
	} else {
		peer, cfg.peer = addr, addr
	}
	d, err := ppOpenDevice(cfg)
	if err != nil {
		return err
	}
	cm, err := perfStartCM(d.dev)
	if err != nil {
		d.Close()
		return err
	}
	defer func() {
		cm.close()
		if cerr := d.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("closing the device: %w", cerr)
		}
	}()
	// rping_setup_buffers, and the CQ of rping_setup_qp; the QP comes with
	// the rdma_cm ID.
	c := d.dev.Context()
	pd := c.AllocPD()
	if r.cq, err = c.CreateCQ(32); err != nil {
		return err
	}
	if r.recvMR, err = pd.RegMR(make([]byte, rpingInfoLen), ib.AccessLocalWrite); err != nil {
		return err
	}
	if r.sendMR, err = pd.RegMR(make([]byte, rpingInfoLen), 0); err != nil {
		return err
	}
	rdmaAccess := ib.AccessLocalWrite | ib.AccessRemoteRead | ib.AccessRemoteWrite
	if r.rdmaMR, err = pd.RegMR(make([]byte, o.size), rdmaAccess); err != nil {
		return err
	}
	if o.client {
		if r.startMR, err = pd.RegMR(make([]byte, o.size), rdmaAccess); err != nil {
			return err
		}
	}
	r.debugf("allocated & registered buffers...\n")
	attr := ib.QPInitAttr{Type: ib.QPTypeRC, SendCQ: r.cq, RecvCQ: r.cq,
		Cap: ib.QPCap{MaxSendWR: 16, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1}}
	newQP := func(id *rdmacm.ID) error {
		if r.qp, err = id.CreateQP(pd, attr); err != nil {
			return err
		}
		return r.postRecv()
	}
	if o.server {
		return r.serveRoCE(ctx, cm, addr, newQP)
	}
	return r.dialRoCE(ctx, cm, peer, newQP)
}

func (r *rping) serveRoCE(ctx context.Context, cm *perfCM, addr netip.Addr, newQP func(*rdmacm.ID) error) error {
	l, err := cm.m.CreateID(rdmacm.PortSpaceTCP)
	if err != nil {
		return err
	}
	defer l.Destroy()
	if !addr.IsValid() {
		addr = netip.IPv4Unspecified()
	}
	if err := l.BindAddr(netip.AddrPortFrom(addr, uint16(r.o.port))); err != nil {
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
	if ev.Type != rdmacm.EventConnectRequest {
		return fmt.Errorf("unexpected event %v", ev.Type)
	}
	id := ev.ID
	if err := newQP(id); err != nil {
		id.Reject(nil)
		id.Destroy()
		return err
	}
	r.debugf("accepting client connection request\n")
	if err := id.Accept(rdmacm.ConnParam{ResponderResources: rpingIRDORD, InitiatorDepth: rpingIRDORD}); err != nil {
		id.Destroy()
		return fmt.Errorf("rdma_accept: %w", err)
	}
	if _, err := perfCMWait(ctx, id, perfCMStep, rdmacm.EventEstablished); err != nil {
		id.Destroy()
		return fmt.Errorf("wait for CONNECTED state: %w", err)
	}
	l.Destroy()
	r.debugf("ESTABLISHED\n")
	conn := newRpingCMConn(id)
	defer conn.release()
	r.conn = conn
	for {
		err := r.serverPing(ctx)
		if errors.Is(err, errRpingDisconnected) {
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

func (r *rping) dialRoCE(ctx context.Context, cm *perfCM, peer netip.Addr, newQP func(*rdmacm.ID) error) error {
	id, err := cm.m.CreateID(rdmacm.PortSpaceTCP)
	if err != nil {
		return err
	}
	if err := perfCMResolve(ctx, id, netip.Addr{}, netip.AddrPortFrom(peer, uint16(r.o.port))); err != nil {
		id.Destroy()
		return fmt.Errorf("resolve: %w", err)
	}
	if err := newQP(id); err != nil {
		id.Destroy()
		return err
	}
	if err := id.Connect(rdmacm.DefaultConnParam()); err != nil {
		id.Destroy()
		return fmt.Errorf("rdma_connect: %w", err)
	}
	if _, err := perfCMWait(ctx, id, 15*time.Second, rdmacm.EventEstablished); err != nil {
		id.Destroy()
		return fmt.Errorf("connect error: %w", err)
	}
	r.debugf("rdma_connect successful\n")
	conn := newRpingCMConn(id)
	defer conn.release()
	r.conn = conn
	return r.clientPings(ctx)
}
