package iwarp_test

import (
	"context"
	"net"
	"net/netip"
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/iwarp"
)

// TestDialHook: ConnParams.Dial makes Dial's TCP connection, with the dialer
// Dial would have used (LocalAddr set from ConnParams.LocalAddr), and the
// connection it returns carries the QP's traffic; an error it returns is
// Dial's. (softrdma bench dials through rdma_cm from one network namespace
// to another with it.)
func TestDialHook(t *testing.T) {
	calls := 0
	var local net.Addr
	dp := iwarp.ConnParams{LocalAddr: netip.MustParseAddr("127.0.0.1"),
		Dial: func(ctx context.Context, d *net.Dialer, addr string) (net.Conn, error) {
			calls++
			local = d.LocalAddr
			return d.DialContext(ctx, "tcp", addr)
		}}
	a, b := pair(t, 64, dp, iwarp.ConnParams{})
	if calls != 1 || local == nil || local.String() != "127.0.0.1:0" {
		t.Fatalf("Dial hook: %d calls, dialer's LocalAddr %v; want 1 call from 127.0.0.1:0", calls, local)
	}
	fill(a.buf, 7)
	if err := b.qp.PostRecv(ib.RecvWR{WRID: 2, SGL: []ib.SGE{b.mr.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(ib.SendWR{WRID: 1, Opcode: ib.WRSend, Signaled: true, SGL: []ib.SGE{a.mr.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	wantOK(t, wait(t, b.rcq, 1)[0], 2, ib.WCRecv)
	if string(a.buf) != string(b.buf) {
		t.Fatal("SEND over the hooked connection: received bytes differ")
	}

	refused := &net.OpError{Op: "dial", Net: "tcp", Err: net.UnknownNetworkError("test")}
	c := newSide(t, 64)
	_, err := iwarp.Dial(context.Background(), c.qp, "127.0.0.1:9", iwarp.ConnParams{
		Dial: func(context.Context, *net.Dialer, string) (net.Conn, error) { return nil, refused }})
	if err != refused {
		t.Fatalf("Dial with a failing hook: %v, want the hook's error", err)
	}
}
