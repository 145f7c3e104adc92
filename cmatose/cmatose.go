// Package cmatose is softrdma cmatose: librdmacm's ucmatose (examples/cmatose.c) and, with
// --ud, its udaddy (examples/udaddy.c), over RoCE through rdma_cm (the IB CM
// on QP1 of a device on the UDP backend), one connection:
//
//   - RC (RDMA_PS_TCP, port 7471): both sides post -C receives of -S octets
//     before rdma_connect / rdma_accept (responder resources and initiator
//     depth 1; the client asks for retry count 5 and no RNR retries, so the
//     receives must be there); the server SENDs -C messages, waits for their
//     completions, then for the client's -C replies, and disconnects; the
//     client receives, replies, and answers the DREQ.
//   - UD (RDMA_PS_UDP, port 7174): the client's rdma_connect is a SIDR_REQ,
//     the server's rdma_accept the SIDR_REP naming its QP and Q_Key
//     (RDMA_UDP_QKEY); the client SENDs -C messages to it, the server
//     receives them (each with its 40-octet GRH) and replies to the sender's
//     QP; no disconnect.
//
// The lines printed are the tools' ("cmatose: starting server", "initiating
// data transfers", ..., "test complete", "return status 0"), without their
// timing statistics. Run runs one side; cmd/softrdma holds the flags.
package cmatose

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/softrdma/softrdma/device"
	"github.com/softrdma/softrdma/devspec"
	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/rdmacm"
)

// Options are softrdma cmatose's flags.
type Options struct {
	Server, Bind string
	Count, Size  int
	Port         int
	UD           bool
	Pcap         string
	Timeout      time.Duration
}

// node is one connection's resources (struct cmatest_node).
type node struct {
	id             *rdmacm.ID
	qp             *ib.QP
	sendCQ, recvCQ *ib.CQ
	mr             *ib.MR
	recvLen        int // -S, plus the GRH on UD
	ah             *ib.AddressHandle
	remoteQPN      uint32
	remoteQKey     uint32
}

// Run runs one side (o.Server names the server to connect to; empty, this is
// the server on o.Bind), printing as the tool called name (cmatose, udaddy)
// prints.
func Run(ctx context.Context, o *Options, name string, stdout io.Writer) (err error) {
	c := device.Choice{Backend: devspec.BackendUDP, GIDIndex: -1}
	var bind, dst netip.Addr
	if o.Bind != "" {
		if bind, err = device.ResolveHost(ctx, o.Bind); err != nil {
			return err
		}
		c.Name = bind.String()
	}
	if o.Server != "" {
		if dst, err = device.ResolveHost(ctx, o.Server); err != nil {
			return err
		}
		c.Peer = dst
	}
	spec, err := c.Spec()
	if err != nil {
		return err
	}
	d, err := device.Open(spec, device.Config{Pcap: o.Pcap, AddrFlag: "-b"})
	if err != nil {
		return err
	}
	dcm, err := d.StartCM(device.CMConfig{})
	if err != nil {
		d.Close()
		return err
	}
	cm := &cmSide{CM: dcm}
	defer func() {
		cm.close()
		if cerr := d.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("closing the device: %w", cerr)
		}
	}()
	ps := rdmacm.PortSpaceTCP
	if o.UD {
		ps = rdmacm.PortSpaceUDP
	}
	if o.Server == "" {
		fmt.Fprintf(stdout, "%s: starting server\n", name)
		return server(ctx, o, cm, ps, bind, stdout)
	}
	fmt.Fprintf(stdout, "%s: starting client\n", name)
	return client(ctx, o, cm, ps, bind, dst, stdout)
}

// init makes the node's QP and buffer and posts its receives (init_node,
// create_message, post_recvs).
func (n *node) init(o *Options) error {
	c := n.id.Context()
	pd := c.AllocPD()
	depth := max(o.Count, 1)
	var err error
	if n.sendCQ, err = c.CreateCQ(depth); err != nil {
		return err
	}
	if n.recvCQ, err = c.CreateCQ(depth); err != nil {
		return err
	}
	n.recvLen = o.Size
	if o.UD {
		n.recvLen += 40 // sizeof(struct ibv_grh)
	}
	if n.mr, err = pd.RegMR(make([]byte, n.recvLen), ib.AccessLocalWrite); err != nil {
		return err
	}
	if n.qp, err = n.id.CreateQP(pd, ib.QPInitAttr{SendCQ: n.sendCQ, RecvCQ: n.recvCQ,
		Cap: ib.QPCap{MaxSendWR: depth, MaxRecvWR: depth, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return err
	}
	for range o.Count {
		if err := n.qp.PostRecv(ib.RecvWR{WRID: 1, SGL: []ib.SGE{n.mr.SGE(0, n.recvLen)}}); err != nil {
			return fmt.Errorf("failed to post receives: %w", err)
		}
	}
	return nil
}

// postSends posts -C SENDs of -S octets, every one signalled (sq_sig_all);
// on UD each a SEND with immediate.
func (n *node) postSends(o *Options) error {
	off := 0
	if o.UD {
		off = 40 // udaddy sends from past its GRH area
	}
	for range o.Count {
		wr := ib.SendWR{WRID: 2, Opcode: ib.WRSend, Signaled: true, SGL: []ib.SGE{n.mr.SGE(off, o.Size)}}
		if o.UD {
			// udaddy's post_sends: SEND with immediate, the immediate the
			// sender's QPN, which the receiver replies to.
			wr.Opcode, wr.Imm = ib.WRSendWithImm, n.qp.QPN()
			wr.AH, wr.RemoteQPN, wr.RemoteQKey = n.ah, n.remoteQPN, n.remoteQKey
		}
		if err := n.qp.PostSend(wr); err != nil {
			return fmt.Errorf("failed to post sends: %w", err)
		}
	}
	return nil
}

// sendThenReceive is the transfer of the side that sends first (cmatose's
// server, udaddy's client): it posts o.Count sends and completes them, then
// receives o.Count messages, printing the C tools' progress lines. completing,
// if not empty, is printed between posting and completing the sends.
func (n *node) sendThenReceive(ctx context.Context, o *Options, stdout io.Writer, completing string) error {
	fmt.Fprintln(stdout, "initiating data transfers")
	if err := n.postSends(o); err != nil {
		return err
	}
	if completing != "" {
		fmt.Fprintln(stdout, completing)
	}
	if err := poll(ctx, n.sendCQ, o.Count, nil); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "receiving data transfers")
	if err := poll(ctx, n.recvCQ, o.Count, nil); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "data transfers complete")
	return nil
}

// receiveThenReply is the transfer of the side that receives first (cmatose's
// client, udaddy's server): it receives o.Count messages, calling each (if not
// nil) with every completion, then posts o.Count replies and completes them,
// printing the C tools' progress lines.
func (n *node) receiveThenReply(ctx context.Context, o *Options, stdout io.Writer, each func(ib.WC)) error {
	fmt.Fprintln(stdout, "receiving data transfers")
	if err := poll(ctx, n.recvCQ, o.Count, each); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "sending replies")
	if err := n.postSends(o); err != nil {
		return err
	}
	if err := poll(ctx, n.sendCQ, o.Count, nil); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "data transfers complete")
	return nil
}

// poll waits for count successful completions on cq, calling each (if not
// nil) with every one.
func poll(ctx context.Context, cq *ib.CQ, count int, each func(ib.WC)) error {
	wc := make([]ib.WC, 8)
	for done := 0; done < count; {
		n := cq.Poll(wc)
		for _, w := range wc[:n] {
			if w.Status != ib.WCSuccess {
				return fmt.Errorf("completion %v: %s", w.Opcode, w.Status)
			}
			if each != nil {
				each(w)
			}
		}
		done += n
		if n == 0 {
			if err := device.WaitCQ(ctx, cq, time.Time{}); err != nil {
				return err
			}
		}
	}
	return nil
}

func server(ctx context.Context, o *Options, cm *cmSide, ps rdmacm.PortSpace, bind netip.Addr, stdout io.Writer) error {
	l, err := cm.Manager.CreateID(ps)
	if err != nil {
		return err
	}
	defer l.Destroy()
	if err := l.BindAddr(netip.AddrPortFrom(bind, uint16(o.Port))); err != nil {
		return fmt.Errorf("bind address failed: %w", err)
	}
	if err := l.Listen(1); err != nil {
		return fmt.Errorf("failure trying to listen: %w", err)
	}
	ev, err := device.CMWait(ctx, l, o.Timeout, rdmacm.EventConnectRequest)
	if err != nil {
		return err
	}
	n := &node{id: ev.ID}
	cm.tests = append(cm.tests, n.id)
	if err := n.init(o); err != nil {
		n.id.Reject(nil)
		return err
	}
	if o.UD {
		n.ah = &ev.UD.AH
		if err := n.id.Accept(rdmacm.ConnParam{}); err != nil {
			return fmt.Errorf("failure accepting: %w", err)
		}
		if o.Count > 0 {
			// create_reply_ah: the reply goes to the QP the immediate
			// names (the sender's), with the Q_Key of the server's own QP.
			n.remoteQKey = rdmacm.UDPQKey
			return n.receiveThenReply(ctx, o, stdout, func(w ib.WC) {
				n.remoteQPN = w.SrcQP
				if w.Flags&ib.WCFlagWithImm != 0 {
					n.remoteQPN = w.Imm
				}
			})
		}
		return nil
	}
	if err := n.id.Accept(rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1}); err != nil {
		return fmt.Errorf("failure accepting: %w", err)
	}
	if _, err := device.CMWait(ctx, n.id, device.CMStep, rdmacm.EventEstablished); err != nil {
		return err
	}
	if o.Count > 0 {
		if err := n.sendThenReceive(ctx, o, stdout, "completing sends"); err != nil {
			return err
		}
	}
	fmt.Fprintln(stdout, "cmatose: disconnecting")
	if err := device.CMDisconnect([]*rdmacm.ID{n.id}, device.CMStep); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "disconnected")
	return nil
}

func client(ctx context.Context, o *Options, cm *cmSide, ps rdmacm.PortSpace, bind, dst netip.Addr, stdout io.Writer) error {
	id, err := cm.Manager.CreateID(ps)
	if err != nil {
		return err
	}
	cm.tests = append(cm.tests, id)
	if o.UD {
		fmt.Fprintln(stdout, "udaddy: connecting")
	} else {
		fmt.Fprintln(stdout, "cmatose: connecting")
	}
	if err := device.CMResolve(ctx, id, bind, netip.AddrPortFrom(dst, uint16(o.Port))); err != nil {
		return err
	}
	n := &node{id: id}
	if err := n.init(o); err != nil {
		return err
	}
	cp := rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 5}
	if o.UD {
		cp = rdmacm.ConnParam{}
	}
	if err := id.Connect(cp); err != nil {
		return fmt.Errorf("failure connecting: %w", err)
	}
	ev, err := device.CMWait(ctx, id, device.CMStep, rdmacm.EventEstablished)
	if err != nil {
		return err
	}
	if o.UD {
		n.ah, n.remoteQPN, n.remoteQKey = &ev.UD.AH, ev.UD.QPNum, ev.UD.QKey
		if o.Count > 0 {
			return n.sendThenReceive(ctx, o, stdout, "")
		}
		return nil
	}
	if o.Count > 0 {
		if err := n.receiveThenReply(ctx, o, stdout, nil); err != nil {
			return err
		}
	}
	// disconnect_events: the server disconnects; rdma_disconnect answers.
	if _, err := device.CMWait(ctx, id, o.Timeout, rdmacm.EventDisconnected); err != nil {
		return err
	}
	id.Disconnect()
	return nil
}

// cmSide is a run's rdma_cm and the connection IDs it destroys before it
// closes.
type cmSide struct {
	*device.CM
	tests []*rdmacm.ID
}

func (c *cmSide) close() {
	for _, id := range c.tests {
		id.Destroy()
	}
	c.Close()
}
