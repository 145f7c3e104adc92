//go:build linux

package roce_test

import (
	"context"
	"fmt"
	"log"
	"net/netip"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/netio"
	"github.com/softrdma/softrdma/roce"
)

// Open two RoCEv2 devices on one host, over ordinary UDP sockets on two
// loopback addresses (Linux routes all of 127.0.0.0/8 to lo; no privileges
// needed), connect an RC QP on each to the other by hand, and SEND a message.
// Across two hosts only the addresses change. (rdmacm connects QPs by IP
// address instead: see its examples.)
func ExampleOpen() {
	open := func(addr string) *roce.Device {
		d, err := roce.Open(roce.OpenConfig{Backend: roce.BackendUDP, Addrs: []netip.Addr{netip.MustParseAddr(addr)}})
		if err != nil {
			log.Fatal(err) // e.g. the address's UDP port 4791 is taken
		}
		return d
	}
	a, b := open("127.77.1.1"), open("127.77.1.2")
	// The devices have no goroutine of their own: Run drives each until ctx
	// ends. Close them after, which sends what is still queued.
	ctx, cancel := context.WithCancel(context.Background())
	defer b.Close()
	defer a.Close()
	defer cancel()
	go a.Run(ctx, netio.SystemClock{})
	go b.Run(ctx, netio.SystemClock{})

	// Verbs, as with libibverbs: a PD, a CQ, an RC QP and a registered buffer
	// on each device.
	type side struct {
		d   *roce.Device
		cq  *ib.CQ
		qp  *ib.QP
		mr  *ib.MR
		psn uint32
	}
	newSide := func(d *roce.Device, psn uint32) *side {
		c := d.Context()
		pd := c.AllocPD()
		cq, err := c.CreateCQ(16)
		if err != nil {
			log.Fatal(err)
		}
		qp, err := c.CreateQP(pd, ib.QPInitAttr{Type: ib.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: ib.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			log.Fatal(err)
		}
		mr, err := pd.RegMR(make([]byte, 64), ib.AccessLocalWrite)
		if err != nil {
			log.Fatal(err)
		}
		return &side{d: d, cq: cq, qp: qp, mr: mr, psn: psn}
	}
	x, y := newSide(a, 100), newSide(b, 200)

	// INIT, RTR towards the peer's address, QPN and PSN, then RTS: what an
	// out-of-band exchange (ibv_rc_pingpong's TCP, perftest's) tells each side.
	connect := func(s, peer *side) {
		ah, err := s.d.AddressHandle(peer.d.Addrs()[0]) // the peer's GID, from its IP address
		if err != nil {
			log.Fatal(err)
		}
		steps := []struct {
			attr ib.QPAttr
			mask ib.QPAttrMask
		}{
			{ib.QPAttr{QPState: ib.QPStateInit, Port: 1}, ib.QPAttrState | ib.QPAttrPKeyIndex | ib.QPAttrPort | ib.QPAttrAccessFlags},
			{ib.QPAttr{QPState: ib.QPStateRTR, AH: ah, PathMTU: s.d.PathMTU(), DestQPN: peer.qp.QPN(), RQPSN: peer.psn,
				MaxDestRdAtomic: 1, MinRNRTimer: 12},
				ib.QPAttrState | ib.QPAttrAH | ib.QPAttrPathMTU | ib.QPAttrDestQPN | ib.QPAttrRQPSN | ib.QPAttrMaxDestRdAtomic | ib.QPAttrMinRNRTimer},
			{ib.QPAttr{QPState: ib.QPStateRTS, SQPSN: s.psn, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
				ib.QPAttrState | ib.QPAttrSQPSN | ib.QPAttrTimeout | ib.QPAttrRetryCnt | ib.QPAttrRNRRetry | ib.QPAttrMaxRdAtomic},
		}
		for _, st := range steps {
			if err := s.qp.Modify(&st.attr, st.mask); err != nil {
				log.Fatal(err)
			}
		}
	}
	connect(x, y)
	connect(y, x)

	// The receiver posts a receive first; the sender SENDs from its buffer.
	if err := y.qp.PostRecv(ib.RecvWR{WRID: 1, SGL: []ib.SGE{y.mr.SGE(0, 64)}}); err != nil {
		log.Fatal(err)
	}
	msg := "hello over RoCEv2"
	copy(x.mr.Buf(), msg)
	if err := x.qp.PostSend(ib.SendWR{WRID: 2, Opcode: ib.WRSend, Signaled: true, SGL: []ib.SGE{x.mr.SGE(0, len(msg))}}); err != nil {
		log.Fatal(err)
	}
	// Completions: wait on the CQ, then poll it.
	for _, s := range []*side{x, y} {
		var wc [1]ib.WC
		for s.cq.Poll(wc[:]) == 0 {
			if err := s.cq.Wait(ctx); err != nil {
				log.Fatal(err)
			}
		}
		fmt.Println(wc[0].Opcode, wc[0].Status)
		if wc[0].Opcode == ib.WCRecv {
			fmt.Printf("received %q\n", s.mr.Buf()[:wc[0].ByteLen])
		}
	}
	// Output:
	// IBV_WC_SEND IBV_WC_SUCCESS
	// IBV_WC_RECV IBV_WC_SUCCESS
	// received "hello over RoCEv2"
}
