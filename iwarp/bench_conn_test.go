package iwarp_test

import (
	"io"
	"net"
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/iwarp"
)

// BenchmarkWrite1MiB measures RDMA WRITEs of 1 MiB between two softrdma QPs over
// loopback TCP (4 in flight, as ib_write_bw keeps its queue full), and in the same
// run a plain TCP stream carrying the same octets between the same kind of sockets
// (1 MiB writes, io.ReadFull into a 1 MiB buffer). It reports both rates and
// their ratio, iwarp/tcp: the cost of MPA/DDP/RDMAP framing, the header reads and
// the placement, against the kernel's copy alone.
func BenchmarkWrite1MiB(b *testing.B) {
	for _, crc := range []bool{false, true} {
		name := "crc=off"
		if crc {
			name = "crc=on"
		}
		b.Run(name, func(b *testing.B) { benchWrite(b, crc, ib.WRRDMAWrite) })
	}
}

// BenchmarkRead1MiB is BenchmarkWrite1MiB with RDMA READs: the Read Responses'
// path (the requester's sink placement) against the same TCP stream.
func BenchmarkRead1MiB(b *testing.B) {
	b.Run("crc=off", func(b *testing.B) { benchWrite(b, false, ib.WRRDMARead) })
}

func benchWrite(b *testing.B, crc bool, op ib.WROpcode) {
	const size = 1 << 20
	const depth = 4
	p := iwarp.ConnParams{}
	if crc {
		p.CRC = iwarp.CRCRequest
	}
	x, y := pair(b, size, p, iwarp.ConnParams{})
	fill(x.buf, 5)
	wr := ib.SendWR{Opcode: op, SGL: []ib.SGE{x.mr.SGE(0, size)}, RKey: y.mr.RKey(),
		RemoteAddr: y.mr.Addr(), Signaled: true}
	b.SetBytes(size)
	b.ResetTimer()
	start := time.Now()
	posted, done := 0, 0
	var wcs [depth]ib.WC
	for done < b.N {
		for posted < b.N && posted-done < depth {
			wr.WRID = uint64(posted)
			if err := x.qp.PostSend(wr); err != nil {
				b.Fatal(err)
			}
			posted++
		}
		for _, wc := range wait(b, x.scq, 1) {
			if wc.Status != ib.WCSuccess {
				b.Fatal(wc)
			}
		}
		done++
		done += x.scq.Poll(wcs[:min(depth, posted-done)])
	}
	// The last WRITE is placed when a Send behind it arrives.
	barrier(b, x, y)
	iw := time.Since(start)
	b.StopTimer()

	tcp := rawTCP(b, size, b.N)
	mbps := func(d time.Duration) float64 { return float64(size) * float64(b.N) / d.Seconds() / 1e6 }
	b.ReportMetric(mbps(iw), "iwarp-MB/s")
	b.ReportMetric(mbps(tcp), "tcp-MB/s")
	b.ReportMetric(mbps(iw)/mbps(tcp), "iwarp/tcp")
}

// rawTCP times n transfers of size octets over a loopback TCP connection.
func rawTCP(b *testing.B, size, n int) time.Duration {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	got := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- err
			return
		}
		defer c.Close()
		buf := make([]byte, size)
		for range n {
			if _, err := io.ReadFull(c, buf); err != nil {
				got <- err
				return
			}
		}
		got <- nil
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, size)
	fill(buf, 5)
	start := time.Now()
	for range n {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-got; err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}
