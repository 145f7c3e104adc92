package rdmacm_test

import (
	"errors"
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/internal/tcploop"
	"github.com/softrdma/softrdma/rdmacm"
)

// TestIWARPInitQPAttrEstablish: rdma_init_qp_attr on iWARP answers as the
// kernel's rdma_cm and iw_cm do (rping -q's server moves its QP with them
// before rdma_accept): before the ID connects, the state asked for with no
// access and the port; a listening ID, EINVAL; a connection's INIT and RTR,
// remote write and read with the port; its RTS, the port only; another
// state, EINVAL. Once established, rdma_establish on the active side (rping
// -q's client calls it after ESTABLISHED) succeeds and does nothing, and the
// passive side's is refused. Both were refused (EOPNOTSUPP; EINVAL).
func TestIWARPInitQPAttrEstablish(t *testing.T) {
	a, b := newIWHost(t), newIWHost(t)
	port := uint16(tcploop.FreePort(t))
	l := iwListen(t, b, port)
	id := iwResolve(t, a, port)

	const (
		stAccPort = ib.QPAttrState | ib.QPAttrAccessFlags | ib.QPAttrPort
		rw        = ib.AccessRemoteWrite | ib.AccessRemoteRead
	)
	type want struct {
		mask   ib.QPAttrMask
		access ib.Access
		err    error
	}
	check := func(who string, x *rdmacm.ID, state ib.QPState, w want) {
		t.Helper()
		at, m, err := x.InitQPAttr(state)
		switch {
		case w.err != nil:
			if !errors.Is(err, w.err) {
				t.Errorf("%s %v: %v, want %v", who, state, err, w.err)
			}
		case err != nil:
			t.Errorf("%s %v: %v", who, state, err)
		case m != w.mask || at.AccessFlags != w.access || at.QPState != state || (m&ib.QPAttrPort != 0 && at.Port != 1):
			t.Errorf("%s %v: mask %v, access %v, state %v, port %d; want mask %v, access %v", who, state,
				m, at.AccessFlags, at.QPState, at.Port, w.mask, w.access)
		}
	}
	for _, s := range []ib.QPState{ib.QPStateInit, ib.QPStateRTR, ib.QPStateRTS} {
		check("route resolved", id, s, want{mask: stAccPort})
	}
	check("listening", l, ib.QPStateInit, want{err: rdmacm.ErrInvalidState})

	qa := a.createQP(t, id)
	must(t, id.Connect(rdmacm.DefaultConnParam()))
	req := wait(t, l, rdmacm.EventConnectRequest)
	for _, c := range []struct {
		state ib.QPState
		want
	}{
		{ib.QPStateInit, want{mask: stAccPort, access: rw}},
		{ib.QPStateRTR, want{mask: stAccPort, access: rw}},
		{ib.QPStateRTS, want{mask: ib.QPAttrPort}},
		{ib.QPStateSQD, want{err: rdmacm.ErrInvalid}},
		{ib.QPStateErr, want{err: rdmacm.ErrInvalid}},
	} {
		check("request", req.ID, c.state, c.want)
	}
	if err := id.Establish(); !errors.Is(err, rdmacm.ErrInvalidState) {
		t.Errorf("establish while connecting: %v, want ErrInvalidState", err)
	}
	b.createQP(t, req.ID)
	must(t, req.ID.Accept(rdmacm.DefaultConnParam()))
	wait(t, id, rdmacm.EventEstablished)
	wait(t, req.ID, rdmacm.EventEstablished)
	check("established", id, ib.QPStateRTS, want{mask: ib.QPAttrPort})
	if err := id.Establish(); err != nil {
		t.Errorf("establish of the active side: %v", err)
	}
	if qa.State() != ib.QPStateRTS {
		t.Errorf("the active QP is %v after establish, want RTS", qa.State())
	}
	if err := req.ID.Establish(); !errors.Is(err, rdmacm.ErrInvalidState) {
		t.Errorf("establish of the passive side: %v, want ErrInvalidState", err)
	}
	for _, x := range []*rdmacm.ID{id, req.ID, l} {
		x.Destroy()
	}
}
