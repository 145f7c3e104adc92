package roce_test

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/ibtransport/ibtest"
	"github.com/softrdma/softrdma/netio"
	"github.com/softrdma/softrdma/roce"
)

// vectorPipe is a pipe end that also takes frames in pieces (a VectorWriter,
// as a UDP endpoint is), so that a device gathers payloads from the memory
// regions in place. beforeWrite runs at the start of each WriteVectors: the
// moment the application may act between the engine's Output and the write.
type vectorPipe struct {
	*netio.PipeEnd
	beforeWrite func()
}

func (v *vectorPipe) WriteVectors(frames [][][]byte) (int, error) {
	if v.beforeWrite != nil {
		v.beforeWrite()
	}
	bufs := make([][]byte, len(frames))
	for i, f := range frames {
		bufs[i] = bytes.Join(f, nil)
	}
	return v.PipeEnd.Write(bufs, 0)
}

// TestDeviceGatherSendCompletion: once a UD or UC send's completion can be
// polled, the application owns the buffer again (ibv_poll_cq; rxe has copied
// the payload into its skb by then) and may overwrite it. The device gathers
// payloads in place on a VectorWriter endpoint, so a completion posted before
// the frame was written would let the application change the bytes in flight:
// the peer would get the new bytes, or (the ICRC being computed first) drop the
// frame for a bad ICRC. Here the application overwrites the buffer as soon as
// it sees the completion, between Output and the write: the peer must still
// receive what was posted.
func TestDeviceGatherSendCompletion(t *testing.T) {
	for _, typ := range []ibtransport.QPType{ibtransport.QPTypeUD, ibtransport.QPTypeUC, ibtransport.QPTypeRC} {
		t.Run(typ.String(), func(t *testing.T) {
			pa, pb := netio.NewPipe(16, 1500)
			ipA, ipB := netip.MustParseAddr("10.3.0.1"), netip.MustParseAddr("10.3.0.2")
			macA, macB := [6]byte{2, 0, 0, 0, 3, 1}, [6]byte{2, 0, 0, 0, 3, 2}
			nb := roce.StaticNeighbors{ipA: macA, ipB: macB}
			va := &vectorPipe{PipeEnd: pa}
			a, err := roce.NewDevice(roce.DeviceConfig{Endpoint: va, MAC: macA, Addrs: []netip.Addr{ipA}, Neighbors: nb, Engine: ibtransport.ContextConfig{Seed: 1}})
			if err != nil {
				t.Fatal(err)
			}
			b, err := roce.NewDevice(roce.DeviceConfig{Endpoint: pb, MAC: macB, Addrs: []netip.Addr{ipB}, Neighbors: nb, Engine: ibtransport.ContextConfig{Seed: 2}})
			if err != nil {
				t.Fatal(err)
			}
			const qkey = 0x1234
			mk := func(d *roce.Device) (*ibtransport.QP, *ibtransport.CQ, *ibtransport.MR) {
				ctx := d.Context()
				pd := ctx.AllocPD()
				cq, err := ctx.CreateCQ(16)
				if err != nil {
					t.Fatal(err)
				}
				qp, err := ctx.CreateQP(pd, ibtransport.QPInitAttr{Type: typ, SendCQ: cq, RecvCQ: cq,
					Cap: ibtransport.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
				if err != nil {
					t.Fatal(err)
				}
				mr, err := pd.RegMR(make([]byte, 4096), ibtransport.AccessLocalWrite)
				if err != nil {
					t.Fatal(err)
				}
				return qp, cq, mr
			}
			qa, cqa, mra := mk(a)
			qb, cqb, mrb := mk(b)
			var ahAB ibtransport.AddressHandle
			if typ == ibtransport.QPTypeUD {
				for _, q := range []*ibtransport.QP{qa, qb} {
					if err := ibtest.UDToRTS(q, qkey, 1); err != nil {
						t.Fatal(err)
					}
				}
				if ahAB, err = a.AddressHandle(ipB); err != nil {
					t.Fatal(err)
				}
			} else {
				connectUC := func(d *roce.Device, q, peer *ibtransport.QP, ip netip.Addr, sq, rq uint32) {
					ah, err := d.AddressHandle(ip)
					if err != nil {
						t.Fatal(err)
					}
					if typ == ibtransport.QPTypeRC {
						connectAH(t, q, peer, ah, d.PathMTU(), sq, rq, 14)
						return
					}
					for _, s := range []struct {
						a ibtransport.QPAttr
						m ibtransport.QPAttrMask
					}{
						{ibtransport.QPAttr{QPState: ibtransport.QPStateInit, Port: 1}, ibtransport.QPAttrState | ibtransport.QPAttrPKeyIndex | ibtransport.QPAttrPort | ibtransport.QPAttrAccessFlags},
						{ibtransport.QPAttr{QPState: ibtransport.QPStateRTR, AH: ah, PathMTU: d.PathMTU(), DestQPN: peer.QPN(), RQPSN: rq},
							ibtransport.QPAttrState | ibtransport.QPAttrAH | ibtransport.QPAttrPathMTU | ibtransport.QPAttrDestQPN | ibtransport.QPAttrRQPSN},
						{ibtransport.QPAttr{QPState: ibtransport.QPStateRTS, SQPSN: sq}, ibtransport.QPAttrState | ibtransport.QPAttrSQPSN},
					} {
						if err := q.Modify(&s.a, s.m); err != nil {
							t.Fatal(err)
						}
					}
				}
				connectUC(a, qa, qb, ipB, 10, 20)
				connectUC(b, qb, qa, ipA, 20, 10)
			}

			const n = 300
			want := bytes.Repeat([]byte("posted! "), n/8+1)[:n]
			copy(mra.Buf(), want)
			recvOff := 0
			if typ == ibtransport.QPTypeUD {
				recvOff = roce.GRHLen
			}
			if err := qb.PostRecv(ibtransport.RecvWR{WRID: 1, SGL: []ibtransport.SGE{mrb.SGE(0, recvOff+n)}}); err != nil {
				t.Fatal(err)
			}
			var sendWC []ibtransport.WC
			va.beforeWrite = func() {
				wc := make([]ibtransport.WC, 1)
				if cqa.Poll(wc) == 1 {
					sendWC = append(sendWC, wc[0])
					copy(mra.Buf(), bytes.Repeat([]byte{'X'}, n)) // the buffer is the application's again
				}
			}
			wr := ibtransport.SendWR{WRID: 2, Opcode: ibtransport.WRSend, Signaled: true, SGL: []ibtransport.SGE{mra.SGE(0, n)}}
			if typ == ibtransport.QPTypeUD {
				wr.AH, wr.RemoteQPN, wr.RemoteQKey = &ahAB, qb.QPN(), qkey
			}
			if err := qa.PostSend(wr); err != nil {
				t.Fatal(err)
			}
			now := time.Unix(1000, 0)
			var recvWC []ibtransport.WC
			for range 10 {
				if _, err := a.Poll(now); err != nil {
					t.Fatal(err)
				}
				if _, err := b.Poll(now); err != nil {
					t.Fatal(err)
				}
				wc := make([]ibtransport.WC, 1)
				if cqb.Poll(wc) == 1 {
					recvWC = append(recvWC, wc[0])
				}
				va.beforeWrite() // the application keeps polling
				now = now.Add(time.Millisecond)
			}
			if len(sendWC) != 1 || sendWC[0].Status != ibtransport.WCSuccess {
				t.Fatalf("send completions %v", sendWC)
			}
			if c := b.Counters(); c.BadICRC != 0 {
				t.Errorf("the peer dropped %d frames for a bad ICRC: the payload changed after the ICRC was computed", c.BadICRC)
			}
			if len(recvWC) != 1 || recvWC[0].Status != ibtransport.WCSuccess || recvWC[0].ByteLen != uint32(recvOff+n) && recvWC[0].ByteLen != n {
				t.Fatalf("receive completions %v", recvWC)
			}
			if got := mrb.Buf()[recvOff : recvOff+n]; !bytes.Equal(got, want) {
				t.Errorf("received %q..., want %q...: the bytes changed after the send completed", got[:16], want[:16])
			}
		})
	}
}
