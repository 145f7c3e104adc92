//go:build linux

package rdmacm_test

import (
	"fmt"
	"log"
	"net/netip"
	"time"

	"github.com/softrdma/softrdma/device"
	"github.com/softrdma/softrdma/devspec"
	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/rdmacm"
)

// waitEvent reads id's events until one of type want, as a program reads its
// rdma_cm event channel (here each ID has a channel of its own).
func waitEvent(id *rdmacm.ID, want rdmacm.EventType) rdmacm.Event {
	for {
		select {
		case ev := <-id.Events():
			if ev.Type == want {
				return ev
			}
			if ev.Err != nil {
				log.Fatalf("%v: %v", ev.Type, ev.Err)
			}
		case <-time.After(10 * time.Second):
			log.Fatalf("no %v", want)
		}
	}
}

// endpoint is one side's verbs objects for a connection: the CQ, and a
// buffer registered in the ID's device.
type endpoint struct {
	pd *ib.PD
	cq *ib.CQ
	mr *ib.MR
}

func newEndpoint(c *ib.Context) endpoint {
	pd := c.AllocPD()
	cq, err := c.CreateCQ(16)
	if err != nil {
		log.Fatal(err)
	}
	mr, err := pd.RegMR(make([]byte, 64), ib.AccessLocalWrite)
	if err != nil {
		log.Fatal(err)
	}
	return endpoint{pd: pd, cq: cq, mr: mr}
}

var qpAttr = func(cq *ib.CQ) ib.QPInitAttr {
	return ib.QPInitAttr{Type: ib.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: ib.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}
}

// A client and a server on one host, each with a RoCE device of its own
// (UDP on two loopback addresses; across hosts only the addresses change),
// connected by rdma_cm as librdmacm programs are: the server listens and
// accepts, the client resolves the server's address and route and connects;
// rdma_cm moves both QPs to RTS. The client SENDs one message and then
// disconnects.
//
// Who calls Disconnect: either side may end the connection with Disconnect.
// The other side then gets EventDisconnected and must call Disconnect too:
// over RoCE that answers the peer's DREQ with the DREP (until then the
// first side's DISCONNECTED waits for the DREP, or for its timeout). Both
// sides' QPs are in the error state by then (outstanding WRs flush), and
// each side Destroys its ID when done with it.
func Example() {
	open := func(addr string) (device.Device, *rdmacm.Manager) {
		d, err := device.Open(devspec.Spec{Transport: devspec.RoCE, Addr: netip.MustParseAddr(addr)}, device.Config{})
		if err != nil {
			log.Fatal(err)
		}
		cm, err := d.StartCM(device.CMConfig{}) // rdma_cm over the IB CM on the device's QP1
		if err != nil {
			log.Fatal(err)
		}
		return d, cm.Manager
	}
	srvDev, srvCM := open("127.77.4.1")
	defer srvDev.Close()
	cliDev, cliCM := open("127.77.4.2")
	defer cliDev.Close()

	// The server: rdma_create_id, rdma_bind_addr, rdma_listen.
	listener, err := srvCM.CreateID(rdmacm.PortSpaceTCP)
	if err != nil {
		log.Fatal(err)
	}
	defer listener.Destroy()
	if err := listener.BindAddr(netip.MustParseAddrPort("127.77.4.1:7471")); err != nil {
		log.Fatal(err)
	}
	if err := listener.Listen(8); err != nil {
		log.Fatal(err)
	}

	// The client: resolve the address and the route, create the QP on the
	// ID, connect.
	cli, err := cliCM.CreateID(rdmacm.PortSpaceTCP)
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Destroy()
	if err := cli.ResolveAddr(netip.Addr{}, netip.MustParseAddrPort("127.77.4.1:7471"), 2*time.Second); err != nil {
		log.Fatal(err)
	}
	waitEvent(cli, rdmacm.EventAddrResolved)
	if err := cli.ResolveRoute(2 * time.Second); err != nil {
		log.Fatal(err)
	}
	waitEvent(cli, rdmacm.EventRouteResolved)
	ce := newEndpoint(cli.Context())
	cliQP, err := cli.CreateQP(ce.pd, qpAttr(ce.cq))
	if err != nil {
		log.Fatal(err)
	}
	if err := cli.Connect(rdmacm.DefaultConnParam()); err != nil {
		log.Fatal(err)
	}

	// The server gets the request on its listener: a new ID for the
	// connection, with a QP of its own; a receive posted before accepting.
	req := waitEvent(listener, rdmacm.EventConnectRequest)
	conn := req.ID
	defer conn.Destroy()
	fmt.Println("server:", req.Type, "from", conn.RemoteAddr().Addr())
	se := newEndpoint(conn.Context())
	srvQP, err := conn.CreateQP(se.pd, qpAttr(se.cq))
	if err != nil {
		log.Fatal(err)
	}
	if err := srvQP.PostRecv(ib.RecvWR{WRID: 1, SGL: []ib.SGE{se.mr.SGE(0, 64)}}); err != nil {
		log.Fatal(err)
	}
	if err := conn.Accept(rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1}); err != nil {
		log.Fatal(err)
	}
	fmt.Println("client:", waitEvent(cli, rdmacm.EventEstablished).Type)
	fmt.Println("server:", waitEvent(conn, rdmacm.EventEstablished).Type)

	// Both QPs are in RTS: the client SENDs.
	msg := "hello through rdma_cm"
	copy(ce.mr.Buf(), msg)
	if err := cliQP.PostSend(ib.SendWR{WRID: 2, Opcode: ib.WRSend, Signaled: true, SGL: []ib.SGE{ce.mr.SGE(0, len(msg))}}); err != nil {
		log.Fatal(err)
	}
	var wc [1]ib.WC
	for se.cq.Poll(wc[:]) == 0 {
		time.Sleep(time.Millisecond)
	}
	fmt.Printf("server received %q\n", se.mr.Buf()[:wc[0].ByteLen])

	// The client ends the connection; the server, told so, answers with a
	// Disconnect of its own, which completes the client's.
	if err := cli.Disconnect(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("server:", waitEvent(conn, rdmacm.EventDisconnected).Type)
	if err := conn.Disconnect(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("client:", waitEvent(cli, rdmacm.EventDisconnected).Type)
	// Output:
	// server: RDMA_CM_EVENT_CONNECT_REQUEST from 127.77.4.2
	// client: RDMA_CM_EVENT_ESTABLISHED
	// server: RDMA_CM_EVENT_ESTABLISHED
	// server received "hello through rdma_cm"
	// server: RDMA_CM_EVENT_DISCONNECTED
	// client: RDMA_CM_EVENT_DISCONNECTED
}
