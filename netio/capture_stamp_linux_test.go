//go:build linux

package netio

import (
	"bytes"
	"io"
	"testing"
	"time"
)

// TestCaptureUDPKernelStamps: a capture on the wall clock asks the UDP
// endpoint for the kernel's receive time of each datagram (SO_TIMESTAMPNS),
// so that datagrams read in one batch are recorded each at its own time:
// distinct (each was sent by a system call of its own), non-decreasing, the
// times ReadDatagrams returned in Stamp, none after the batch was read. An
// endpoint with no capture, or a capture on another clock, gets no stamps
// (Stamp 0: the socket option is not set). The capture's receive path
// allocates nothing per batch (not checked under -race, whose
// instrumentation allocates).
func TestCaptureUDPKernelStamps(t *testing.T) {
	const n = 8
	for _, c := range []udpCase{{name: "ipv4", noGRO: true}, {name: "ipv6", ipv6: true, noGRO: true}} {
		t.Run(c.name, func(t *testing.T) {
			a, b, macA, macB := udpPair(t, c)
			if b.BatchSize() < n {
				t.Fatalf("batch size %d, want at least %d", b.BatchSize(), n)
			}
			frame := ipFrame{
				dstMAC: macB, srcMAC: macA, src: a.LocalAddr(), dst: b.LocalAddr(),
				ttl: 64, flags: ipv4FlagDF, payload: []byte("a RoCE packet, BTH to ICRC"),
			}.build()
			// send writes n datagrams, one system call each; loopback
			// queues each on b's socket before the call returns.
			send := func() {
				t.Helper()
				for i := 0; i < n; i++ {
					if k, err := a.Write([][]byte{frame}, 0); k != 1 || err != nil {
						t.Fatalf("Write = %d, %v", k, err)
					}
				}
			}
			d := make([]Datagram, n)
			readBatch := func(dr DatagramReader) {
				t.Helper()
				if k, err := dr.ReadDatagrams(d); k != n || err != nil {
					t.Fatalf("ReadDatagrams = %d, %v; want the %d queued datagrams in one batch", k, err, n)
				}
			}

			// No capture: no stamps.
			send()
			readBatch(b)
			for i := range d {
				if d[i].Stamp != 0 {
					t.Fatalf("without a capture datagram %d has Stamp %d, want 0", i, d[i].Stamp)
				}
			}
			// A capture on a manual clock keeps that clock's times: no stamps.
			if _, err := NewCapture(b, io.Discard, FormatPcapNG, NewManualClock(time.Unix(1, 0))); err != nil {
				t.Fatal(err)
			}
			send()
			readBatch(b)
			if d[0].Stamp != 0 {
				t.Fatalf("under a manual-clock capture Stamp %d, want 0", d[0].Stamp)
			}

			var out bytes.Buffer
			capB, err := NewCapture(b, &out, FormatPcapNG, nil)
			if err != nil {
				t.Fatal(err)
			}
			dr := capB.(DatagramReader)
			send()
			readBatch(dr)
			read := time.Now()
			if err := capB.Flush(); err != nil {
				t.Fatal(err)
			}
			got := readCapture(t, FormatPcapNG, out.Bytes())
			if len(got) != n {
				t.Fatalf("recorded %d frames, want %d", len(got), n)
			}
			for i, f := range got {
				if d[i].Stamp == 0 || f.ts.UnixNano() != d[i].Stamp {
					t.Errorf("frame %d recorded at %v, its datagram's kernel Stamp %d", i, f.ts, d[i].Stamp)
				}
				if f.ts.After(read) {
					t.Errorf("frame %d recorded at %v, after the batch was read (%v)", i, f.ts, read)
				}
				if i > 0 && !f.ts.After(got[i-1].ts) {
					t.Errorf("frame %d at %v, frame %d at %v: want distinct, increasing kernel times", i-1, got[i-1].ts, i, f.ts)
				}
			}

			// The receive path under the capture allocates nothing.
			discard, err := NewCapture(b, io.Discard, FormatPcapNG, nil)
			if err != nil {
				t.Fatal(err)
			}
			ddr := discard.(DatagramReader)
			// AllocsPerRun(1) reads twice (a warm-up, then the run
			// measured): two batches are queued first.
			send()
			send()
			if allocs := testing.AllocsPerRun(1, func() { readBatch(ddr) }); allocs != 0 && !raceEnabled {
				t.Errorf("captured read of %d datagrams: %v allocations, want 0", n, allocs)
			}
		})
	}
}
