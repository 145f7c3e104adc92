package bench

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/softrdma/softrdma/device"
	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/iwarp"
	"github.com/softrdma/softrdma/netio/netns"
	"github.com/softrdma/softrdma/rdmacm"
)

// The rdma_cm scale row (issue 22): "cm setup n QPs", QP pairs connected per
// second through package rdmacm, as applications connect: B resolves A's
// address and route, creates its QP on the ID and connects; A's listener
// gets the request, creates its QP and accepts. RoCE runs the IB CM (REQ,
// REP, RTU on QP1 of each device, a ibcm.Agent each); iWARP a TCP connect
// and the MPA exchange. Beside the direct setup row ("setup n QPs": the QPs
// moved to RTS by hand, or an MPA dial without rdma_cm), it shows what the
// connection manager costs.

// cmPort is the rdma_cm port A listens on (RoCE: the service ID's port;
// iWARP: a TCP port, not the direct rows' iwarpPort).
const cmPort = 4794

// cmInFlight is how many connects B keeps going at once (each its own
// goroutine, as many application threads connecting): enough to overlap
// the round trips, few enough that A's backlog (cmBacklog) never refuses.
const cmInFlight = 16

// cmBacklog is A's listen backlog.
const cmBacklog = 4 * cmInFlight

// cmSides is rdma_cm on the two devices of an env, a Manager on each, as
// two hosts have.
type cmSides struct {
	a, b         *rdmacm.Manager
	addrA, addrB netip.Addr
	// inA runs f where A's sockets live (its namespace): iWARP's listen.
	inA   func(f func() error) error
	close func()
}

// cmConnParam is what both sides connect and accept with: rping's (one
// READ each way, 7 retries, infinite RNR retries).
var cmConnParam = rdmacm.DefaultConnParam()

// cmSetupRow connects n QP pairs through rdma_cm and reports the pairs
// connected per second, from B's first rdma_create_id to the last
// ESTABLISHED on B; then disconnects and destroys them (not measured).
func (e *env) cmSetupRow(n int) Row {
	r := e.row(fmt.Sprintf("cm setup %d QPs", n), 0, "QPs/s")
	r.Baseline = fmt.Sprintf("none: QP pairs connected through rdma_cm per second (%d connects at a time)", min(n, cmInFlight))
	if e.openCM == nil {
		r.Note = "not measured: no rdma_cm on this backend"
		return r
	}
	cm, err := e.openCM()
	if err != nil {
		return failed(r, "rdma_cm", err)
	}
	defer cm.close()
	secs, err := cm.connectPairs(e, n)
	if err != nil {
		return failed(r, "rdma_cm", err)
	}
	r.Value, r.Samples = float64(n)/secs, n
	return r
}

// connectPairs connects n pairs, cmInFlight at a time, and returns the
// seconds it took.
func (cm *cmSides) connectPairs(e *env, n int) (float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), drainLimit)
	defer cancel()
	pdA, pdB := e.a.AllocPD(), e.b.AllocPD()
	cqA, err := e.a.CreateCQ(64)
	if err != nil {
		return 0, err
	}
	defer cqA.Destroy()
	cqB, err := e.b.CreateCQ(64)
	if err != nil {
		return 0, err
	}
	defer cqB.Destroy()
	attr := func(cq *ibtransport.CQ) ibtransport.QPInitAttr {
		return ibtransport.QPInitAttr{Type: ibtransport.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: ibtransport.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}
	}

	l, err := cm.a.CreateID(rdmacm.PortSpaceTCP)
	if err != nil {
		return 0, err
	}
	defer l.Destroy()
	if err := l.BindAddr(netip.AddrPortFrom(cm.addrA, cmPort)); err != nil {
		return 0, err
	}
	if err := cm.inA(func() error { return l.Listen(cmBacklog) }); err != nil {
		return 0, err
	}

	// A: accept every request as it comes (one goroutine).
	var mu sync.Mutex
	var passive, active []*rdmacm.ID
	var acceptErr error
	stop := make(chan struct{})
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			select {
			case <-stop:
				return
			case ev, ok := <-l.Events():
				if !ok {
					return
				}
				if ev.Type != rdmacm.EventConnectRequest {
					continue
				}
				err := func() error {
					if _, err := ev.ID.CreateQP(pdA, attr(cqA)); err != nil {
						return err
					}
					return ev.ID.Accept(cmConnParam)
				}()
				mu.Lock()
				passive = append(passive, ev.ID)
				if err != nil && acceptErr == nil {
					acceptErr = fmt.Errorf("accepting: %w", err)
				}
				mu.Unlock()
			}
		}
	}()
	defer func() {
		// Not measured: the connections end as they began, cmInFlight at a
		// time (a burst of thousands of DREQs overflows QP1's receive
		// queue, and the IB CM's retries take seconds): B disconnects, A
		// answers with its own rdma_disconnect (the DREP), B sees
		// DISCONNECTED; then every ID is destroyed.
		close(stop)
		<-accepted
		byPeer := map[netip.AddrPort]*rdmacm.ID{}
		for _, id := range passive {
			byPeer[id.RemoteAddr()] = id
		}
		for i := 0; i < len(active); i += cmInFlight {
			chunk := active[i:min(i+cmInFlight, len(active))]
			var peers []*rdmacm.ID
			for _, id := range chunk {
				id.Disconnect()
				if p := byPeer[id.LocalAddr()]; p != nil {
					peers = append(peers, p)
				}
			}
			device.CMDisconnect(peers, 2*time.Second)
			for _, id := range chunk {
				device.CMWait(context.Background(), id, 2*time.Second, rdmacm.EventDisconnected)
			}
		}
		for _, id := range append(active, passive...) {
			id.Destroy()
		}
	}()

	// B: cmInFlight goroutines connect, each its share in turn.
	dst := netip.AddrPortFrom(cm.addrA, cmPort)
	connect := func() (*rdmacm.ID, error) {
		id, err := cm.b.CreateID(rdmacm.PortSpaceTCP)
		if err != nil {
			return nil, err
		}
		if err := device.CMResolve(ctx, id, cm.addrB, dst); err != nil {
			return id, err
		}
		if _, err := id.CreateQP(pdB, attr(cqB)); err != nil {
			return id, err
		}
		if err := id.Connect(cmConnParam); err != nil {
			return id, err
		}
		_, err = device.CMWait(ctx, id, device.CMStep, rdmacm.EventEstablished)
		return id, err
	}
	workers := min(n, cmInFlight)
	var firstErr error
	var wg sync.WaitGroup
	t0 := time.Now()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n && ctx.Err() == nil; i += workers {
				id, err := connect()
				mu.Lock()
				if id != nil {
					active = append(active, id)
				}
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("connect %d of %d: %w", i+1, n, err)
					cancel() // the others stop at their next step
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	secs := time.Since(t0).Seconds()
	mu.Lock()
	defer mu.Unlock()
	if firstErr != nil {
		return 0, firstErr
	}
	return secs, acceptErr
}

// openRoCECM puts rdma_cm on each device (device.RoCE.StartCM: a CM
// agent on QP1 and a Manager on it) until close.
func openRoCECM(da, db *device.RoCE, addrA, addrB netip.Addr) (*cmSides, error) {
	cmA, err := da.StartCM(device.CMConfig{})
	if err != nil {
		return nil, err
	}
	cmB, err := db.StartCM(device.CMConfig{})
	if err != nil {
		cmA.Close()
		return nil, err
	}
	return &cmSides{addrA: addrA, addrB: addrB, inA: func(f func() error) error { return f() },
		a: cmA.Manager, b: cmB.Manager, close: func() { cmB.Close(); cmA.Close() }}, nil
}

// openIWARPCM puts a Manager on each iWARP device: A listens in its
// namespace, B dials from its own (iwarp.ConnParams.Dial; rdmacm's Connect
// dials in a goroutine of its own). IRD and ORD are the rows' cmConnParam.
func openIWARPCM(da, db *iwarp.Device, pair *netns.Pair) (*cmSides, error) {
	cm := &cmSides{addrA: pair.A.IPv4.Addr(), addrB: pair.B.IPv4.Addr(), inA: pair.A.NS.Do,
		a: rdmacm.NewManager(rdmacm.Config{}), b: rdmacm.NewManager(rdmacm.Config{})}
	cm.close = func() {
		cm.a.Close()
		cm.b.Close()
	}
	dialB := func(ctx context.Context, d *net.Dialer, addr string) (c net.Conn, err error) {
		err = pair.B.NS.Do(func() error {
			c, err = d.DialContext(ctx, "tcp", addr)
			return err
		})
		return c, err
	}
	if err := cm.a.AddIWARP(da, rdmacm.IWARPConfig{Addrs: []netip.Addr{cm.addrA}}); err != nil {
		cm.close()
		return nil, err
	}
	if err := cm.b.AddIWARP(db, rdmacm.IWARPConfig{Addrs: []netip.Addr{cm.addrB}, Params: iwarp.ConnParams{Dial: dialB}}); err != nil {
		cm.close()
		return nil, err
	}
	return cm, nil
}
