package roce_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/softrdma/softrdma/ibtransport"
)

// completionWait waits for the next completion of cq and fails the test unless
// it is a success of the opcode want.
type completionWait func(cq *ibtransport.CQ, want ibtransport.WCOpcode) ibtransport.WC

// completionWaiter returns a completionWait that waits until ctx ends; more, if
// not nil, says more in the failure of a wait that ran out.
func completionWaiter(t *testing.T, ctx context.Context, more func() string) completionWait {
	return func(cq *ibtransport.CQ, want ibtransport.WCOpcode) ibtransport.WC {
		t.Helper()
		wc := make([]ibtransport.WC, 1)
		for {
			if cq.Poll(wc) == 1 {
				if wc[0].Status != ibtransport.WCSuccess || wc[0].Opcode != want {
					t.Fatalf("completion %v, want %v success", wc[0], want)
				}
				return wc[0]
			}
			if err := cq.Wait(ctx); err != nil {
				if more != nil {
					t.Fatalf("waiting for %v: %v; %s", want, err, more())
				}
				t.Fatalf("waiting for %v: %v", want, err)
			}
		}
	}
}

// writeReadSend runs traffic over the connected RC QPs qa and qb (completing on
// cqa and cqb, with the regions mra and mrb), checking every byte: rounds RDMA
// WRITEs of 12000 bytes (12 packets at IB MTU 1024) from mra to the same offsets
// of mrb, a READ of mrb's first 12000 bytes into mra at readOff, and a SEND of
// 3000 bytes from b to a. It returns mra's bytes, which it fills with a pattern
// first.
func writeReadSend(t *testing.T, wait completionWait, qa, qb *ibtransport.QP, cqa, cqb *ibtransport.CQ,
	mra, mrb *ibtransport.MR, rounds, readOff int) []byte {
	t.Helper()
	src := mra.Buf()
	for i := range src {
		src[i] = byte(i*31 + 5)
	}
	const size = 12000
	for round := range rounds {
		off := round * size
		if err := qa.PostSend(ibtransport.SendWR{WRID: uint64(round), Opcode: ibtransport.WRRDMAWrite, Signaled: true,
			SGL: []ibtransport.SGE{mra.SGE(off, size)}, RemoteAddr: mrb.Addr() + uint64(off), RKey: mrb.RKey()}); err != nil {
			t.Fatal(err)
		}
		wait(cqa, ibtransport.WCRDMAWrite)
		if !bytes.Equal(mrb.Buf()[off:off+size], src[off:off+size]) {
			t.Fatalf("round %d: WRITE landed wrong bytes", round)
		}
	}
	if err := qa.PostSend(ibtransport.SendWR{WRID: 10, Opcode: ibtransport.WRRDMARead, Signaled: true,
		SGL: []ibtransport.SGE{mra.SGE(readOff, size)}, RemoteAddr: mrb.Addr(), RKey: mrb.RKey()}); err != nil {
		t.Fatal(err)
	}
	wait(cqa, ibtransport.WCRDMARead)
	if !bytes.Equal(mra.Buf()[readOff:readOff+size], src[:size]) {
		t.Fatal("READ returned wrong bytes")
	}
	if err := qa.PostRecv(ibtransport.RecvWR{WRID: 20, SGL: []ibtransport.SGE{mra.SGE(0, 4096)}}); err != nil {
		t.Fatal(err)
	}
	copy(mrb.Buf()[:3000], bytes.Repeat([]byte("softrdma"), 375))
	if err := qb.PostSend(ibtransport.SendWR{WRID: 21, Opcode: ibtransport.WRSend, Signaled: true, SGL: []ibtransport.SGE{mrb.SGE(0, 3000)}}); err != nil {
		t.Fatal(err)
	}
	wait(cqb, ibtransport.WCSend)
	if wc := wait(cqa, ibtransport.WCRecv); wc.ByteLen != 3000 || !bytes.Equal(mra.Buf()[:3000], mrb.Buf()[:3000]) {
		t.Fatalf("SEND: %v", wc)
	}
	return src
}
