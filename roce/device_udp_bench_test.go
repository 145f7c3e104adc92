package roce_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/softrdma/softrdma/ibtransport"
)

// BenchmarkDeviceOverUDP moves RDMA WRITEs (4 KiB and 64 KiB, IB MTU 1024
// on a 1500-byte path) between two devices on UDP sockets on loopback,
// driven by Poll on one goroutine: the UDP backend's send and receive path
// (datagrams gathered from the MR, GSO runs, recvmmsg in place) without the
// scheduler's noise of Run's goroutines.
func BenchmarkDeviceOverUDP(b *testing.B) {
	for _, size := range []int{4 << 10, 64 << 10} {
		b.Run(map[int]string{4 << 10: "4K", 64 << 10: "64K"}[size], func(b *testing.B) {
			p := newUDPPollPair(b, netip.MustParseAddr("127.0.75.1"), netip.MustParseAddr("127.0.75.2"), 24793)
			a, d, qa, cqa, mra, mrb := p.a, p.b, p.qa, p.cqa, p.mra, p.mrb
			wr := ibtransport.SendWR{Opcode: ibtransport.WRRDMAWrite, Signaled: true,
				SGL: []ibtransport.SGE{mra.SGE(0, size)}, RemoteAddr: mrb.Addr(), RKey: mrb.RKey()}
			wc := make([]ibtransport.WC, 1)
			b.SetBytes(int64(size))
			for b.Loop() {
				if err := qa.PostSend(wr); err != nil {
					b.Fatal(err)
				}
				for cqa.Poll(wc) == 0 {
					now := time.Now()
					a.Poll(now)
					d.Poll(now)
				}
				if wc[0].Status != ibtransport.WCSuccess {
					b.Fatalf("completion %v", wc[0])
				}
			}
		})
	}
}
