package rdmacm_test

import (
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
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
		port := freePort(t)
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
