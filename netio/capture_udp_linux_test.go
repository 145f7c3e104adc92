//go:build linux

package netio

import (
	"bytes"
	"testing"
	"time"
)

// TestCaptureUDPDatagrams: a capture of a UDP endpoint keeps its zero-copy
// paths (DatagramReader, VectorWriter), and the frame it records for a datagram
// read where the kernel put it is the frame Read returns for the same datagram.
func TestCaptureUDPDatagrams(t *testing.T) {
	for _, c := range []udpCase{{name: "ipv4", noGRO: true}, {name: "ipv6", ipv6: true, noGRO: true}} {
		t.Run(c.name, func(t *testing.T) {
			a, b, macA, macB := udpPair(t, c)
			var out bytes.Buffer
			capB, err := NewCapture(b, &out, FormatPcap, NewManualClock(time.Unix(1, 0)))
			if err != nil {
				t.Fatal(err)
			}
			dr, ok := capB.(DatagramReader)
			if !ok {
				t.Fatal("capture of a UDP endpoint is no DatagramReader")
			}
			if _, ok := capB.(VectorWriter); !ok {
				t.Fatal("capture of a UDP endpoint is no VectorWriter")
			}
			if _, ok := capB.(FrameReader); ok {
				t.Fatal("capture of a UDP endpoint claims FrameReader")
			}
			frame := ipFrame{
				dstMAC: macB, srcMAC: macA, src: a.LocalAddr(), dst: b.LocalAddr(),
				tos: 0x68, ttl: 64, flags: ipv4FlagDF, payload: []byte("a RoCE packet, BTH to ICRC"),
			}.build()
			// The same datagram twice: once read through the capture's fast
			// path, once with Read on the endpoint itself.
			if n, err := a.Write([][]byte{frame, frame}, 0); n != 2 || err != nil {
				t.Fatalf("Write = %d, %v", n, err)
			}
			d := make([]Datagram, 1)
			for n := 0; n == 0; {
				if n, err = dr.ReadDatagrams(d); err != nil {
					t.Fatal(err)
				}
			}
			recordedAsRead(t, capB, &out, b)
		})
	}
}

// TestCaptureUDPWriteDatagrams: a capture of a UDP endpoint is a
// DatagramWriter, and the frame it records for a datagram written through it
// is the frame the receiver's Read returns for that datagram (same MACs,
// addresses, ports, TOS, TTL; IPv4 ID 0 and DF).
func TestCaptureUDPWriteDatagrams(t *testing.T) {
	for _, c := range []udpCase{{name: "ipv4", noGRO: true}, {name: "ipv6", ipv6: true, noGRO: true}} {
		t.Run(c.name, func(t *testing.T) {
			a, b, _, _ := udpPair(t, c)
			var out bytes.Buffer
			capA, err := NewCapture(a, &out, FormatPcap, NewManualClock(time.Unix(1, 0)))
			if err != nil {
				t.Fatal(err)
			}
			dw, ok := capA.(DatagramWriter)
			if !ok {
				t.Fatal("capture of a UDP endpoint is no DatagramWriter")
			}
			d := OutDatagram{Payload: [][]byte{[]byte("a RoCE packet, "), []byte("BTH to ICRC")}, SrcPort: 0xc0d0,
				Dst: b.LocalAddr(), TOS: 0x68, TTL: 61}
			if n, err := dw.WriteDatagrams([]OutDatagram{d}); n != 1 || err != nil {
				t.Fatalf("WriteDatagrams = %d, %v", n, err)
			}
			recordedAsRead(t, capA, &out, b)
		})
	}
}

// recordedAsRead reads one frame from b with Read and checks that c, whose
// capture file is out, recorded exactly one frame, and that frame.
func recordedAsRead(t *testing.T, c CaptureEndpoint, out *bytes.Buffer, b Endpoint) {
	t.Helper()
	read, err := readFrames(b, 1, 2048, 0, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	got := readCapture(t, FormatPcap, out.Bytes())
	if len(got) != 1 {
		t.Fatalf("recorded %d frames, want 1", len(got))
	}
	if !bytes.Equal(got[0].data, read[0]) {
		t.Fatalf("recorded % x\nRead gave % x", got[0].data, read[0])
	}
}
