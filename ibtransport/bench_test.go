package ibtransport_test

import (
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/ibtransport/ibtest"
)

// pumpUntil pumps the wire until cq yields a completion.
func pumpUntil(b testing.TB, w *ibtest.Wire, cq *ib.CQ, wc []ib.WC) {
	for {
		if cq.Poll(wc) > 0 {
			if wc[0].Status != ib.WCSuccess {
				b.Fatalf("%v", wc[0])
			}
			return
		}
		if !w.Pump() {
			b.Fatal("wire idle before the completion")
		}
	}
}

// BenchmarkRCWrite64K measures 64 KiB RDMA WRITEs (MTU 4096) through the
// in-memory wire against a plain copy of the same bytes measured in the same run.
// It reports both rates and their ratio.
func BenchmarkRCWrite64K(b *testing.B) {
	const n = 64 << 10
	o := ibtest.DefaultConnOptions()
	o.PathMTU = 4096
	p := newPair(b, ib.QPTypeRC, o)
	src := regMR(b, p.A.PD, pattern(n, 1), 0)
	dstBuf := make([]byte, n)
	dst := regMR(b, p.B.PD, dstBuf, allAccess)
	wr := ib.SendWR{Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{src.SGE(0, n)}, RemoteAddr: dst.Addr(), RKey: dst.RKey(), Signaled: true}
	wc := make([]ib.WC, 1)
	for range 4 { // warm up the buffers
		post(b, p.A.QP, wr)
		pumpUntil(b, p.Wire, p.A.CQ, wc)
	}
	b.SetBytes(n)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		// PostSend directly: post's t.Helper walks the stack every call.
		if err := p.A.QP.PostSend(wr); err != nil {
			b.Fatal(err)
		}
		pumpUntil(b, p.Wire, p.A.CQ, wc)
	}
	writeTime := time.Since(start)
	b.StopTimer()

	plain := pattern(n, 2)
	copyStart := time.Now()
	for range b.N {
		copy(dstBuf, plain)
	}
	copyTime := time.Since(copyStart)
	mb := float64(n) * float64(b.N) / 1e6
	b.ReportMetric(mb/writeTime.Seconds(), "write-MB/s")
	b.ReportMetric(mb/copyTime.Seconds(), "copy-MB/s")
	b.ReportMetric(copyTime.Seconds()/writeTime.Seconds(), "write/copy")
}

// BenchmarkRCSend64 measures the message rate of 64-byte SENDs, 16 in flight.
func BenchmarkRCSend64(b *testing.B) {
	p := newRC(b)
	src := regMR(b, p.A.PD, pattern(64, 1), 0)
	dst := regMR(b, p.B.PD, make([]byte, 64*16), ib.AccessLocalWrite)
	wc := make([]ib.WC, 16)
	const depth = 16
	for i := range depth {
		postRecv(b, p.B.QP, ib.RecvWR{WRID: uint64(i), SGL: []ib.SGE{dst.SGE(64*i, 64)}})
	}
	wr := ib.SendWR{Opcode: ib.WRSend, SGL: []ib.SGE{src.SGE(0, 64)}, Signaled: true}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	sent, done := 0, 0
	for done < b.N {
		for sent < b.N && sent-done < depth {
			if err := p.A.QP.PostSend(wr); err != nil {
				b.Fatal(err)
			}
			sent++
		}
		p.Wire.Pump()
		for {
			k := p.B.CQ.Poll(wc)
			if k == 0 {
				break
			}
			for _, w := range wc[:k] {
				if err := p.B.QP.PostRecv(ib.RecvWR{WRID: w.WRID, SGL: []ib.SGE{dst.SGE(64*int(w.WRID), 64)}}); err != nil {
					b.Fatal(err)
				}
			}
		}
		done += p.A.CQ.Poll(wc)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}
