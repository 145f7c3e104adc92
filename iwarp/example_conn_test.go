package iwarp_test

import (
	"context"
	"fmt"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/iwarp"
)

// endpoint is what an application sets up on a device: the same verbs objects as
// on a RoCE device (roce.Device.Context()).
type endpoint struct {
	qp  *ib.QP
	cq  *ib.CQ
	buf []byte
	mr  *ib.MR
}

func setupEndpoint(d *iwarp.Device) endpoint {
	ctx := d.Context()
	pd := ctx.AllocPD()
	cq, _ := ctx.CreateCQ(16)
	qp, _ := ctx.CreateQP(pd, ib.QPInitAttr{Type: ib.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: ib.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	buf := make([]byte, 64)
	mr, _ := pd.RegMR(buf, ib.AccessLocalWrite|ib.AccessRemoteWrite|ib.AccessRemoteRead)
	return endpoint{qp, cq, buf, mr}
}

func (e endpoint) next(ctx context.Context) ib.WC {
	var wc [1]ib.WC
	for e.cq.Poll(wc[:]) == 0 {
		e.cq.Wait(ctx)
	}
	return wc[0]
}

// Example connects two QPs over TCP (rdma_cm style: listen, connect, private data
// both ways), WRITEs into the server's memory, and tells it with a SEND.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	serverDev, _ := iwarp.Open(iwarp.DeviceConfig{})
	clientDev, _ := iwarp.Open(iwarp.DeviceConfig{})
	server, client := setupEndpoint(serverDev), setupEndpoint(clientDev)

	ln, _ := iwarp.Listen("127.0.0.1:0", iwarp.ConnParams{PrivateData: []byte("welcome")})
	defer ln.Close()
	accepted := make(chan *iwarp.Conn)
	go func() {
		c, err := ln.Accept(ctx, server.qp)
		if err != nil {
			fmt.Println("accept:", err)
		}
		accepted <- c
	}()
	conn, err := iwarp.Dial(ctx, client.qp, ln.Addr().String(), iwarp.ConnParams{PrivateData: []byte("hello")})
	if err != nil {
		fmt.Println("dial:", err)
		return
	}
	sconn := <-accepted
	fmt.Printf("client got %q, server got %q\n", conn.PeerPrivateData(), sconn.PeerPrivateData())
	fmt.Println("MPA revision", conn.Negotiated().Revision, "state", client.qp.State())

	// The server's address and STag would travel in a message; here they are at hand.
	copy(client.buf, "written by RDMA")
	server.qp.PostRecv(ib.RecvWR{WRID: 1})
	client.qp.PostSend(
		ib.SendWR{WRID: 2, Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{client.mr.SGE(0, 15)},
			RKey: server.mr.RKey(), RemoteAddr: server.mr.Addr()},
		ib.SendWR{WRID: 3, Opcode: ib.WRSend, Signaled: true},
	)
	fmt.Println("client:", client.next(ctx).Status)
	wc := server.next(ctx)
	fmt.Println("server:", wc.Opcode, wc.Status, string(server.buf[:15]))

	conn.Close()
	<-sconn.Done()
	fmt.Println("server connection:", sconn.Err())
	// Output:
	// client got "welcome", server got "hello"
	// MPA revision 2 state RTS
	// client: IBV_WC_SUCCESS
	// server: IBV_WC_RECV IBV_WC_SUCCESS written by RDMA
	// server connection: iwarp: peer closed the connection
}
