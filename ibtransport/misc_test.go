package ibtransport_test

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/ibtransport/ibtest"
)

// TestRCWindow: with a window of 8 PSNs a 64-packet WRITE never has more than 8
// unacknowledged packets on the wire, and still completes (AckReq on the packet
// that fills the window).
func TestRCWindow(t *testing.T) {
	o := ibtest.DefaultConnOptions()
	p, err := ibtest.NewPair(ib.ContextConfig{Seed: 1, MaxUnackedPSNs: 8}, ib.QPTypeRC, o)
	if err != nil {
		t.Fatal(err)
	}
	p.Wire.Latency = 5 * time.Microsecond
	const n = 64 * 1024
	src := regMR(t, p.A.PD, pattern(n, 1), 0)
	dst := make([]byte, n)
	dmr := regMR(t, p.B.PD, dst, allAccess)
	var highest, acked uint32 = o.PSNA - 1, o.PSNA - 1
	maxGap := uint32(0)
	p.Wire.Tap = func(d ibtest.Direction, data []byte) {
		pk := decode(t, data)
		if d == ibtest.AToB {
			highest = pk.BTH.PSN()
			maxGap = max(maxGap, highest-acked)
		} else {
			acked = pk.BTH.PSN()
		}
	}
	post(t, p.A.QP, ib.SendWR{WRID: 1, Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{src.SGE(0, n)}, RemoteAddr: dmr.Addr(), RKey: dmr.RKey(), Signaled: true})
	wantWC(t, complete(t, p, p.A.CQ, 1)[0], 1, ib.WCRDMAWrite, ib.WCSuccess)
	if maxGap > 8 || !bytes.Equal(dst, pattern(n, 1)) {
		t.Fatalf("max unacknowledged %d", maxGap)
	}
	if c := p.A.QP.Counters(); c.Timeouts != 0 {
		t.Fatalf("%d timeouts", c.Timeouts)
	}
}

// TestRCAckCoalescing: requests that arrive together are answered by one ACK.
func TestRCAckCoalescing(t *testing.T) {
	p := newRC(t)
	src := regMR(t, p.A.PD, pattern(64, 1), 0)
	dst := regMR(t, p.B.PD, make([]byte, 64), allAccess)
	var wrs []ib.SendWR
	for i := range 10 {
		wrs = append(wrs, ib.SendWR{WRID: uint64(i), Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{src.SGE(0, 64)}, RemoteAddr: dst.Addr(), RKey: dst.RKey(), Signaled: true})
	}
	post(t, p.A.QP, wrs...)
	complete(t, p, p.A.CQ, 10)
	if c := p.B.QP.Counters(); c.AcksSent != 1 {
		t.Fatalf("%d ACKs for 10 requests delivered together", c.AcksSent)
	}
}

// TestGSI: the GSI QP is QP1 with the well-known Q_Key; GSI QPs talk to each other.
func TestGSI(t *testing.T) {
	p := udPair(t)
	gsis := make([]*ib.QP, 2)
	for i, ep := range []*ibtest.Endpoint{p.A, p.B} {
		gsi, err := ep.Ctx.CreateQP(ep.PD, ib.QPInitAttr{Type: ib.QPTypeGSI, SendCQ: ep.CQ, RecvCQ: ep.CQ,
			Cap: ib.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if gsi.QPN() != 1 {
			t.Fatalf("GSI QPN %d", gsi.QPN())
		}
		if _, err := ep.Ctx.CreateQP(ep.PD, ib.QPInitAttr{Type: ib.QPTypeGSI, SendCQ: ep.CQ, RecvCQ: ep.CQ, Cap: ib.QPCap{MaxSendWR: 1, MaxRecvWR: 1}}); err == nil {
			t.Fatal("second GSI QP")
		}
		for _, a := range []struct {
			attr ib.QPAttr
			mask ib.QPAttrMask
		}{
			{ib.QPAttr{QPState: ib.QPStateInit, QKey: ib.GSIQKey}, ib.QPAttrState | ib.QPAttrPKeyIndex | ib.QPAttrQKey},
			{ib.QPAttr{QPState: ib.QPStateRTR}, ib.QPAttrState},
			{ib.QPAttr{QPState: ib.QPStateRTS}, ib.QPAttrState | ib.QPAttrSQPSN},
		} {
			if err := gsi.Modify(&a.attr, a.mask); err != nil {
				t.Fatal(err)
			}
		}
		gsis[i] = gsi
	}
	buf := regMR(t, p.B.PD, make([]byte, 40+256), ib.AccessLocalWrite)
	postRecv(t, gsis[1], ib.RecvWR{WRID: 1, SGL: []ib.SGE{buf.SGE(0, 296)}})
	mad := regMR(t, p.A.PD, pattern(256, 1), 0)
	// A controlled Q_Key (high bit) in the WR means the QP's own: GSIQKey.
	post(t, gsis[0], ib.SendWR{WRID: 2, Opcode: ib.WRSend, SGL: []ib.SGE{mad.SGE(0, 256)}, AH: ibtest.AddressOf(ibtest.BToA), RemoteQPN: 1, RemoteQKey: ib.GSIQKey})
	wc := complete(t, p, p.B.CQ, 1)[0]
	if wc.WRID != 1 || wc.QPNum != 1 || wc.ByteLen != 296 || wc.SrcQP != 1 || !bytes.Equal(buf.Buf()[40:], pattern(256, 1)) {
		t.Fatalf("%v", wc)
	}
}

// TestConcurrentPosting posts and polls from application goroutines while a
// device loop goroutine moves the packets, sleeping on the Wake channels. Run
// with -race.
func TestConcurrentPosting(t *testing.T) {
	p := newRC(t)
	const n, per = 4, 200
	src := regMR(t, p.A.PD, pattern(4096, 1), 0)
	dst := regMR(t, p.B.PD, make([]byte, 4096*n), allAccess)
	var stop atomic.Bool
	loopDone := make(chan struct{})
	go func() { // the device loop
		defer close(loopDone)
		for !stop.Load() {
			if p.Wire.Pump() {
				continue
			}
			select {
			case <-p.A.Ctx.Wake():
			case <-p.B.Ctx.Wake():
			case <-time.After(time.Millisecond):
			}
		}
	}()
	var wg sync.WaitGroup
	var posted atomic.Int64
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				wr := ib.SendWR{WRID: uint64(g*per + i), Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{src.SGE(0, 4096)},
					RemoteAddr: dst.Addr() + uint64(4096*g), RKey: dst.RKey(), Signaled: true}
				for p.A.QP.PostSend(wr) != nil { // queue full: retry
					time.Sleep(10 * time.Microsecond)
				}
				posted.Add(1)
			}
		}()
	}
	got := 0
	var wc [32]ib.WC
	deadline := time.Now().Add(20 * time.Second)
	for got < n*per && time.Now().Before(deadline) {
		k := p.A.CQ.Poll(wc[:])
		for _, w := range wc[:k] {
			if w.Status != ib.WCSuccess {
				t.Errorf("%v", w)
			}
		}
		got += k
		if k == 0 {
			time.Sleep(50 * time.Microsecond)
		}
	}
	wg.Wait()
	stop.Store(true)
	<-loopDone
	if got != n*per {
		t.Fatalf("%d of %d completions", got, n*per)
	}
}
