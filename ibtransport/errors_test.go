package ibtransport_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/ibtransport/ibtest"
)

// TestRCRNR checks RNR NAKs: a SEND without a posted receive is NAKed with the
// responder's RNR timer and retried until a receive is posted.
func TestRCRNR(t *testing.T) {
	o := ibtest.DefaultConnOptions()
	o.MinRNRTimer = 14 // 1.28 ms
	p := newPair(t, ib.QPTypeRC, o)
	src := regMR(t, p.A.PD, pattern(2500, 1), 0)
	dst := newGuarded(t, p.B.PD, 2500, ib.AccessLocalWrite)
	var rnrAt []time.Duration
	p.Wire.Tap = func(d ibtest.Direction, data []byte) {
		pk := decode(t, data)
		if d == ibtest.BToA && pk.AETH.Syndrome().Kind() == ib.AETHKindRNRNAK {
			if pk.AETH.Syndrome().RNRTimer() != 14 {
				t.Errorf("RNR timer code %d", pk.AETH.Syndrome().RNRTimer())
			}
			rnrAt = append(rnrAt, p.Wire.Clock.Now().Sub(ibtest.Epoch))
		}
	}
	post(t, p.A.QP, ib.SendWR{WRID: 1, Opcode: ib.WRSend, SGL: []ib.SGE{src.SGE(0, 2500)}, Signaled: true})
	p.Wire.RunFor(5*time.Millisecond, 100000)
	if len(rnrAt) != 4 || rnrAt[1]-rnrAt[0] != 1280*time.Microsecond {
		t.Fatalf("RNR NAKs at %v, want 4, 1.28 ms apart", rnrAt)
	}
	postRecv(t, p.B.QP, ib.RecvWR{WRID: 2, SGL: []ib.SGE{dst.mr.SGE(0, 2500)}})
	wantWC(t, complete(t, p, p.A.CQ, 1)[0], 1, ib.WCSend, ib.WCSuccess)
	wantWC(t, complete(t, p, p.B.CQ, 1)[0], 2, ib.WCRecv, ib.WCSuccess)
	if !bytes.Equal(dst.buf, pattern(2500, 1)) {
		t.Fatal("data differs")
	}
	a, b := p.A.QP.Counters(), p.B.QP.Counters()
	if a.RNRNAKsReceived != 4 || b.RNRNAKsSent != 4 {
		t.Fatalf("RNR NAKs received %d sent %d", a.RNRNAKsReceived, b.RNRNAKsSent)
	}
}

// TestRCRNRRetryExceeded: with RNRRetry 2 the third RNR NAK fails the WR.
func TestRCRNRRetryExceeded(t *testing.T) {
	o := ibtest.DefaultConnOptions()
	o.RNRRetry = 2
	p := newPair(t, ib.QPTypeRC, o)
	src := regMR(t, p.A.PD, pattern(100, 1), 0)
	post(t, p.A.QP,
		ib.SendWR{WRID: 1, Opcode: ib.WRSend, SGL: []ib.SGE{src.SGE(0, 100)}, Signaled: true},
		ib.SendWR{WRID: 2, Opcode: ib.WRSend, SGL: []ib.SGE{src.SGE(0, 100)}})
	wcs := complete(t, p, p.A.CQ, 2)
	wantWC(t, wcs[0], 1, ib.WCSend, ib.WCRNRRetryExcErr)
	wantWC(t, wcs[1], 2, ib.WCSend, ib.WCWRFlushErr)
	if c := p.A.QP.Counters(); c.RNRNAKsReceived != 3 {
		t.Fatalf("%d RNR NAKs", c.RNRNAKsReceived)
	}
	if s := p.A.QP.State(); s != ib.QPStateErr {
		t.Fatalf("requester state %s", s)
	}
	if s := p.B.QP.State(); s != ib.QPStateRTS {
		t.Fatalf("responder state %s (RNR is not an error there)", s)
	}
}

// TestRCRetryExceeded partitions the link: after RetryCnt retries the oldest WR
// fails with IBV_WC_RETRY_EXC_ERR and every other WR, send and receive, is flushed.
func TestRCRetryExceeded(t *testing.T) {
	o := ibtest.DefaultConnOptions()
	o.RetryCnt = 3
	o.Timeout = 8 // 1.05 ms
	p := newPair(t, ib.QPTypeRC, o)
	src := regMR(t, p.A.PD, pattern(4096, 1), ib.AccessLocalWrite)
	dst := regMR(t, p.B.PD, make([]byte, 4096), allAccess)
	postRecv(t, p.A.QP, ib.RecvWR{WRID: 50}, ib.RecvWR{WRID: 51})
	var sentAt []time.Duration
	p.Wire.Filter = func(f *ibtest.Frame) ibtest.Action {
		if f.Dir == ibtest.AToB && f.Index%16 == 0 { // 4 WRs of 4 packets per round
			sentAt = append(sentAt, f.Time.Sub(ibtest.Epoch))
		}
		return ibtest.Action{Drop: true}
	}
	var wrs []ib.SendWR
	for i := range 4 {
		wrs = append(wrs, ib.SendWR{WRID: uint64(i), Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{src.SGE(0, 4096)},
			RemoteAddr: dst.Addr(), RKey: dst.RKey(), Signaled: i == 0})
	}
	post(t, p.A.QP, wrs...)
	wcs := complete(t, p, p.A.CQ, 6)
	wantWC(t, wcs[0], 0, ib.WCRDMAWrite, ib.WCRetryExcErr)
	for i, wc := range wcs[1:4] {
		wantWC(t, wc, uint64(i+1), ib.WCRDMAWrite, ib.WCWRFlushErr)
	}
	wantWC(t, wcs[4], 50, ib.WCRecv, ib.WCWRFlushErr)
	wantWC(t, wcs[5], 51, ib.WCRecv, ib.WCWRFlushErr)
	if c := p.A.QP.Counters(); c.Timeouts != 4 {
		t.Fatalf("%d timeouts, want 4 (3 retries)", c.Timeouts)
	}
	// first transmission and 3 retries, each one timeout (4.096 µs × 2^8) apart
	period := 4096 * 256 * time.Nanosecond
	want := []time.Duration{0, period, 2 * period, 3 * period}
	for i := range want {
		if i >= len(sentAt) || sentAt[i] != want[i] {
			t.Fatalf("first packets of the retries sent at %v, want %v", sentAt, want)
		}
	}
	if s := p.A.QP.State(); s != ib.QPStateErr {
		t.Fatalf("state %s", s)
	}
	// Posting in the error state flushes at once.
	post(t, p.A.QP, ib.SendWR{WRID: 9, Opcode: ib.WRSend})
	postRecv(t, p.A.QP, ib.RecvWR{WRID: 52})
	wcs = complete(t, p, p.A.CQ, 2)
	wantWC(t, wcs[0], 9, ib.WCSend, ib.WCWRFlushErr)
	wantWC(t, wcs[1], 52, ib.WCRecv, ib.WCWRFlushErr)
}

// TestRCRemoteAccessErrors checks every R_Key violation: the requester gets
// IBV_WC_REM_ACCESS_ERR, the responder goes to the error state, and no byte of
// the responder's memory (or around it) changes.
func TestRCRemoteAccessErrors(t *testing.T) {
	type env struct {
		p      *ibtest.Pair
		remote *guarded
	}
	cases := []struct {
		name string
		op   ib.WROpcode
		// target returns the R_Key, address and length to use
		target func(t *testing.T, e *env) (rkey uint32, addr uint64, n int)
	}{
		{"bad key", ib.WRRDMAWrite, func(t *testing.T, e *env) (uint32, uint64, int) {
			return e.remote.mr.RKey() ^ 0x100, e.remote.mr.Addr(), 64
		}},
		{"bad key byte", ib.WRRDMAWrite, func(t *testing.T, e *env) (uint32, uint64, int) {
			return e.remote.mr.RKey() ^ 1, e.remote.mr.Addr(), 64
		}},
		{"one byte before", ib.WRRDMAWrite, func(t *testing.T, e *env) (uint32, uint64, int) {
			return e.remote.mr.RKey(), e.remote.mr.Addr() - 1, 64
		}},
		{"one byte past the end", ib.WRRDMAWrite, func(t *testing.T, e *env) (uint32, uint64, int) {
			return e.remote.mr.RKey(), e.remote.mr.Addr() + 4096 - 63, 64
		}},
		{"past the end in a later packet", ib.WRRDMAWrite, func(t *testing.T, e *env) (uint32, uint64, int) {
			return e.remote.mr.RKey(), e.remote.mr.Addr() + 1, 4096
		}},
		{"read past the end", ib.WRRDMARead, func(t *testing.T, e *env) (uint32, uint64, int) {
			return e.remote.mr.RKey(), e.remote.mr.Addr() + 1, 4096
		}},
		{"address overflow", ib.WRRDMARead, func(t *testing.T, e *env) (uint32, uint64, int) {
			return e.remote.mr.RKey(), ^uint64(0) - 10, 64
		}},
		{"write to a read-only region", ib.WRRDMAWrite, func(t *testing.T, e *env) (uint32, uint64, int) {
			mr := regMR(t, e.p.B.PD, e.remote.buf, ib.AccessRemoteRead)
			return mr.RKey(), mr.Addr(), 64
		}},
		{"read from a write-only region", ib.WRRDMARead, func(t *testing.T, e *env) (uint32, uint64, int) {
			mr := regMR(t, e.p.B.PD, e.remote.buf, ib.AccessLocalWrite|ib.AccessRemoteWrite)
			return mr.RKey(), mr.Addr(), 64
		}},
		{"atomic without atomic right", ib.WRAtomicFetchAdd, func(t *testing.T, e *env) (uint32, uint64, int) {
			mr := regMR(t, e.p.B.PD, e.remote.buf, ib.AccessLocalWrite|ib.AccessRemoteWrite|ib.AccessRemoteRead)
			return mr.RKey(), mr.Addr(), 8
		}},
		{"region of another PD", ib.WRRDMAWrite, func(t *testing.T, e *env) (uint32, uint64, int) {
			mr := regMR(t, e.p.B.Ctx.AllocPD(), e.remote.buf, allAccess)
			return mr.RKey(), mr.Addr(), 64
		}},
		{"deregistered region", ib.WRRDMAWrite, func(t *testing.T, e *env) (uint32, uint64, int) {
			mr := regMR(t, e.p.B.PD, e.remote.buf, allAccess)
			rkey, addr := mr.RKey(), mr.Addr()
			if err := mr.Dereg(); err != nil {
				t.Fatal(err)
			}
			return rkey, addr, 64
		}},
		{"local-only region", ib.WRRDMARead, func(t *testing.T, e *env) (uint32, uint64, int) {
			mr := regMR(t, e.p.B.PD, e.remote.buf, ib.AccessLocalWrite)
			return mr.RKey(), mr.Addr(), 64
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newRC(t)
			e := &env{p: p, remote: newGuarded(t, p.B.PD, 4096, allAccess)}
			copy(e.remote.buf, pattern(4096, 2))
			local := newGuarded(t, p.A.PD, 4096, ib.AccessLocalWrite)
			copy(local.buf, pattern(4096, 200))
			rkey, addr, n := c.target(t, e)
			wr := ib.SendWR{WRID: 1, Opcode: c.op, SGL: []ib.SGE{local.mr.SGE(0, n)}, RemoteAddr: addr, RKey: rkey, Signaled: true, CompareAdd: 1}
			post(t, p.A.QP, wr, ib.SendWR{WRID: 2, Opcode: ib.WRSend})
			postRecv(t, p.B.QP, ib.RecvWR{WRID: 70})
			wcs := complete(t, p, p.A.CQ, 2)
			wantWC(t, wcs[0], 1, c.op.WCOpcode(), ib.WCRemAccessErr)
			wantWC(t, wcs[1], 2, ib.WCSend, ib.WCWRFlushErr)
			if s := p.B.QP.State(); s != ib.QPStateErr {
				t.Fatalf("responder state %s, want ERR", s)
			}
			wantWC(t, complete(t, p, p.B.CQ, 1)[0], 70, ib.WCRecv, ib.WCWRFlushErr)
			if !bytes.Equal(e.remote.buf, pattern(4096, 2)) {
				t.Fatal("responder memory changed")
			}
			e.remote.check(t)
			local.check(t)
			wantResponderNAK(t, p, ib.NAKRemoteAccessError, ib.EventQPAccessErr)
		})
	}
}

// wantResponderNAK fails the test unless p.B's QP sent one NAK with code and
// its first asynchronous event after COMM_EST is ev, about that QP.
func wantResponderNAK(t *testing.T, p *ibtest.Pair, code ib.NAKCode, ev ib.AsyncEventType) {
	t.Helper()
	if c := p.B.QP.Counters(); c.NAKsSent[code] != 1 {
		t.Fatalf("NAKs %v", c.NAKsSent)
	}
	got := <-p.B.Ctx.AsyncEvents()
	for got.Type == ib.EventCommEst {
		got = <-p.B.Ctx.AsyncEvents()
	}
	if got.Type != ev || got.QP != p.B.QP {
		t.Fatalf("async event %s, want %s", got.Type, ev)
	}
}

// TestRCRemoteOperationalError: a SEND whose receive WQE names a memory region
// that was deregistered after the receive was posted cannot be placed. The
// responder NAKs it as a remote operational error (IBTA 9.7.5.2.4) and completes
// the receive with LOC_PROT_ERR; the requester completes the SEND with REM_OP_ERR
// and flushes the rest; both QPs end in ERR and the responder reports a fatal QP
// event.
func TestRCRemoteOperationalError(t *testing.T) {
	p := newRC(t)
	recvBuf := make([]byte, 4096)
	mr := regMR(t, p.B.PD, recvBuf, ib.AccessLocalWrite)
	postRecv(t, p.B.QP, ib.RecvWR{WRID: 70, SGL: []ib.SGE{mr.SGE(0, 4096)}})
	if err := mr.Dereg(); err != nil {
		t.Fatal(err)
	}
	local := newGuarded(t, p.A.PD, 4096, ib.AccessLocalWrite)
	copy(local.buf, pattern(4096, 9))
	post(t, p.A.QP, ib.SendWR{WRID: 1, Opcode: ib.WRSend, SGL: []ib.SGE{local.mr.SGE(0, 64)}, Signaled: true},
		ib.SendWR{WRID: 2, Opcode: ib.WRSend})
	wcs := complete(t, p, p.A.CQ, 2)
	wantWC(t, wcs[0], 1, ib.WCSend, ib.WCRemOpErr)
	wantWC(t, wcs[1], 2, ib.WCSend, ib.WCWRFlushErr)
	wantWC(t, complete(t, p, p.B.CQ, 1)[0], 70, ib.WCRecv, ib.WCLocProtErr)
	if a, b := p.A.QP.State(), p.B.QP.State(); a != ib.QPStateErr || b != ib.QPStateErr {
		t.Fatalf("states %s, %s; want ERR, ERR", a, b)
	}
	if !bytes.Equal(recvBuf, make([]byte, 4096)) {
		t.Fatal("the deregistered region was written")
	}
	wantResponderNAK(t, p, ib.NAKRemoteOperationalError, ib.EventQPFatal)
}

// TestRCInvalidRequests checks requests the responder refuses as invalid.
func TestRCInvalidRequests(t *testing.T) {
	cases := []struct {
		name   string
		access ib.Access // the responder QP's access flags
		wr     func(local, remote *ib.MR) ib.SendWR
		want   ib.WCStatus
		recv   ib.WCStatus // status of the responder's receive WQE, 0 if none
	}{
		{"misaligned atomic", ib.AccessRemoteAtomic, func(l, r *ib.MR) ib.SendWR {
			return ib.SendWR{Opcode: ib.WRAtomicFetchAdd, SGL: []ib.SGE{l.SGE(0, 8)}, RemoteAddr: r.Addr() + 4, RKey: r.RKey()}
		}, ib.WCRemInvReqErr, 0},
		{"write on a QP without remote write", ib.AccessRemoteRead, func(l, r *ib.MR) ib.SendWR {
			return ib.SendWR{Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{l.SGE(0, 8)}, RemoteAddr: r.Addr(), RKey: r.RKey()}
		}, ib.WCRemInvReqErr, 0},
		{"read on a QP without remote read", ib.AccessRemoteWrite, func(l, r *ib.MR) ib.SendWR {
			return ib.SendWR{Opcode: ib.WRRDMARead, SGL: []ib.SGE{l.SGE(0, 8)}, RemoteAddr: r.Addr(), RKey: r.RKey()}
		}, ib.WCRemInvReqErr, 0},
		{"send longer than the receive buffer", 0, func(l, r *ib.MR) ib.SendWR {
			return ib.SendWR{Opcode: ib.WRSend, SGL: []ib.SGE{l.SGE(0, 2000)}}
		}, ib.WCRemInvReqErr, ib.WCLocLenErr},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := ibtest.DefaultConnOptions()
			o.Access = c.access
			p := newPair(t, ib.QPTypeRC, o)
			local := regMR(t, p.A.PD, make([]byte, 4096), ib.AccessLocalWrite)
			remote := newGuarded(t, p.B.PD, 4096, allAccess)
			postRecv(t, p.B.QP, ib.RecvWR{WRID: 9, SGL: []ib.SGE{remote.mr.SGE(0, 1000)}})
			wr := c.wr(local, remote.mr)
			wr.WRID, wr.Signaled = 1, true
			post(t, p.A.QP, wr)
			wantWC(t, complete(t, p, p.A.CQ, 1)[0], 1, wr.Opcode.WCOpcode(), c.want)
			if s := p.B.QP.State(); s != ib.QPStateErr {
				t.Fatalf("responder state %s", s)
			}
			st := c.recv
			if st == 0 {
				st = ib.WCWRFlushErr
			}
			wantWC(t, complete(t, p, p.B.CQ, 1)[0], 9, ib.WCRecv, st)
			remote.check(t)
		})
	}
}

// TestPostErrors checks what PostSend and PostRecv refuse synchronously.
func TestPostErrors(t *testing.T) {
	ep, err := ibtest.NewEndpoint(ib.ContextConfig{}, ib.QPTypeRC)
	if err != nil {
		t.Fatal(err)
	}
	qp := ep.QP
	err = qp.PostSend(ib.SendWR{Opcode: ib.WRSend})
	if !errors.Is(err, ib.ErrBadState) {
		t.Fatalf("post in RESET: %v", err)
	}
	if err := qp.PostRecv(ib.RecvWR{}); !errors.Is(err, ib.ErrBadState) {
		t.Fatalf("post recv in RESET: %v", err)
	}
	other, _ := ibtest.NewEndpoint(ib.ContextConfig{Seed: 2}, ib.QPTypeRC)
	if err := ibtest.Connect(qp, other.QP, ibtest.DefaultConnOptions()); err != nil {
		t.Fatal(err)
	}
	var pe *ib.PostError
	err = qp.PostSend(ib.SendWR{WRID: 5, Opcode: ib.WRSend}, ib.SendWR{WRID: 6, Opcode: ib.WRSend, SGL: make([]ib.SGE, 5)})
	if !errors.As(err, &pe) || pe.Index != 1 || pe.WRID != 6 || !errors.Is(err, ib.ErrInvalidArgument) {
		t.Fatalf("too many SGEs: %v", err)
	}
	for range 255 {
		if err := qp.PostSend(ib.SendWR{Opcode: ib.WRSend}); err != nil {
			t.Fatal(err)
		}
	}
	if err := qp.PostSend(ib.SendWR{Opcode: ib.WRSend}); !errors.Is(err, ib.ErrQueueFull) {
		t.Fatalf("full queue: %v", err)
	}
	if err := qp.PostSend(ib.SendWR{Opcode: ib.WRAtomicFetchAdd}); !errors.Is(err, ib.ErrQueueFull) && !errors.Is(err, ib.ErrInvalidArgument) {
		t.Fatalf("atomic without result buffer: %v", err)
	}
}
