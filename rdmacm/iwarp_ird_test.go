package rdmacm_test

import (
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/internal/tcploop"
	"github.com/softrdma/softrdma/iwarp"
	"github.com/softrdma/softrdma/rdmacm"
)

// TestIWARPAcceptNoResponderResources: rdma_xserver accepts with
// responder_resources 0 and its client connects with the device's initiator
// depth. As siw_accept does (relaxed IRD negotiation), the server's IRD is
// raised to the client's ORD: the client's Read RTR (peer-to-peer mode) is
// answered, ESTABLISHED comes at both ends, and the server's QP takes READs.
// (Without it the server answered the Read RTR with a Terminate and the
// client's connect failed.)
func TestIWARPAcceptNoResponderResources(t *testing.T) {
	for _, depth := range []uint8{1, 4} {
		a, b := newIWHost(t), newIWHost(t)
		port := uint16(tcploop.FreePort(t))
		l := iwListen(t, b, port)
		id := iwResolve(t, a, port)
		a.createQP(t, id)
		cp := rdmacm.DefaultConnParam()
		cp.InitiatorDepth, cp.ResponderResources = depth, depth
		must(t, id.Connect(cp))
		req := wait(t, l, rdmacm.EventConnectRequest)
		if req.Param.ResponderResources != depth {
			t.Errorf("CONNECT_REQUEST responder resources (the client's ORD) %d, want %d", req.Param.ResponderResources, depth)
		}
		qb := b.createQP(t, req.ID)
		must(t, req.ID.Accept(rdmacm.ConnParam{}))
		wait(t, id, rdmacm.EventEstablished)
		wait(t, req.ID, rdmacm.EventEstablished)
		if got := qb.Query().MaxDestRdAtomic; got != int(depth) {
			t.Errorf("depth %d: server IRD %d, want the client's ORD", depth, got)
		}
		if qb.State() != ib.QPStateRTS {
			t.Errorf("server QP %v", qb.State())
		}
		for _, x := range []*rdmacm.ID{id, req.ID, l} {
			x.Destroy()
		}
	}
}

// TestIWARPClientSourceAddress: the client's TCP connection leaves from its
// device's address, the one address resolution chose, as siw_connect binds
// it: the server sees the connection from 127.0.0.2, not from 127.0.0.1, the
// source the kernel picks for any 127/8 destination.
func TestIWARPClientSourceAddress(t *testing.T) {
	b := newIWHost(t)
	src := netip.MustParseAddr("127.0.0.2")
	dev, err := iwarp.Open(iwarp.DeviceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	a := &iwHost{m: rdmacm.NewManager(rdmacm.Config{}), dev: dev, pd: dev.Context().AllocPD()}
	must(t, a.m.AddIWARP(dev, rdmacm.IWARPConfig{Addrs: []netip.Addr{src}, ConnectTimeout: 5 * time.Second}))
	if a.cq, err = dev.Context().CreateCQ(64); err != nil {
		t.Fatal(err)
	}
	port := uint16(tcploop.FreePort(t))
	l := iwListen(t, b, port)
	id := iwResolve(t, a, port)
	if id.LocalAddr().Addr() != src {
		t.Fatalf("resolved source %v, want %v", id.LocalAddr(), src)
	}
	a.createQP(t, id)
	must(t, id.Connect(rdmacm.DefaultConnParam()))
	req := wait(t, l, rdmacm.EventConnectRequest)
	if got := req.ID.RemoteAddr().Addr(); got != src {
		t.Errorf("the server sees the connection from %v, want %v", got, src)
	}
	b.createQP(t, req.ID)
	must(t, req.ID.Accept(rdmacm.DefaultConnParam()))
	wait(t, id, rdmacm.EventEstablished)
	wait(t, req.ID, rdmacm.EventEstablished)
	if got := id.LocalAddr().Addr(); got != src {
		t.Errorf("client local address %v after connect, want %v", got, src)
	}
	for _, x := range []*rdmacm.ID{id, req.ID, l} {
		x.Destroy()
	}
}

// TestIWARPAcceptRequestWithoutIRDORD: an MPA Request without the RFC 6581
// IRD/ORD words (revision 1, or revision 2 without the Enhanced flag), as any
// TCP peer may send, is accepted (the reply in the request's revision): the
// relaxed IRD negotiation read the ORD word before asking whether the request
// had one, and the missing words were a slice bounds panic that took the
// whole process down (conform-ctl on softrdma's library, mpa.reply.rev1).
func TestIWARPAcceptRequestWithoutIRDORD(t *testing.T) {
	for _, f := range []iwarp.MPAFrameFields{
		{Request: true, Revision: iwarp.MPARevision1},
		{Request: true, Revision: iwarp.MPARevision2, PrivateData: []byte("no words")},
	} {
		b := newIWHost(t)
		port := uint16(tcploop.FreePort(t))
		l := iwListen(t, b, port)
		nc, err := net.Dial("tcp", netip.AddrPortFrom(loopback, port).String())
		if err != nil {
			t.Fatal(err)
		}
		req, err := f.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nc.Write(req); err != nil {
			t.Fatal(err)
		}
		ev := wait(t, l, rdmacm.EventConnectRequest)
		b.createQP(t, ev.ID)
		must(t, ev.ID.Accept(rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1}))
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		rep := make([]byte, iwarp.MPAFrameHeaderLen)
		if _, err := io.ReadFull(nc, rep); err != nil || string(rep[:iwarp.MPAKeyLen]) != iwarp.MPAKeyReply || iwarp.MPAFrame(rep).Reject() ||
			iwarp.MPAFrame(rep).Revision() != f.Revision {
			t.Errorf("revision %d request: reply %x, %v", f.Revision, rep, err)
		}
		nc.Close()
		for _, x := range []*rdmacm.ID{ev.ID, l} {
			x.Destroy()
		}
	}
}
