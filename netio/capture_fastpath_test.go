package netio

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/softrdma/softrdma/header"
)

// fastEnd is an endpoint with every fast path: ReadDatagrams and ReadFrames
// hand out canned input, WriteVectors keeps what it was given joined,
// WriteDatagrams the datagrams.
type fastEnd struct {
	Endpoint
	dgs    []Datagram
	frames [][]byte
	wrote  [][]byte
	sent   []OutDatagram
	lent   bool
}

func (f *fastEnd) LendReads(active func() bool) (int, bool) {
	f.lent = active()
	return 42, true
}

func (f *fastEnd) WriteDatagrams(d []OutDatagram) (int, error) {
	f.sent = append(f.sent, d...)
	return len(d), nil
}
func (f *fastEnd) IPv4Run() (int, int) { return 64, 65507 }

func (f *fastEnd) ReadDatagrams(d []Datagram) (int, error)    { return copy(d, f.dgs), nil }
func (f *fastEnd) TryReadDatagrams(d []Datagram) (int, error) { return copy(d, f.dgs), nil }
func (f *fastEnd) ReadFrames(fr [][]byte) (int, error)        { return copy(fr, f.frames), nil }
func (f *fastEnd) TryReadFrames(fr [][]byte) (int, error)     { return copy(fr, f.frames), nil }
func (f *fastEnd) WriteVectors(frames [][][]byte) (int, error) {
	for _, p := range frames {
		f.wrote = append(f.wrote, bytes.Join(p, nil))
	}
	return len(frames), nil
}

// The endpoints below show fastEnd with only some of its fast paths, as the
// backends have them: a UDP socket (datagrams both ways and vectors), an AF_PACKET
// ring (frames and vectors), a plain endpoint (none).
type (
	epPlain struct{ Endpoint }
	epDR    struct {
		Endpoint
		DatagramReader
	}
	epFR struct {
		Endpoint
		FrameReader
	}
	epVW struct {
		Endpoint
		VectorWriter
	}
	epDRVW struct {
		Endpoint
		DatagramReader
		VectorWriter
	}
	epFRVW struct {
		Endpoint
		FrameReader
		VectorWriter
	}
	epDW struct {
		Endpoint
		DatagramWriter
	}
	epUDP struct {
		Endpoint
		DatagramReader
		VectorWriter
		DatagramWriter
	}
	epDRRL struct {
		Endpoint
		DatagramReader
		ReadLender
	}
	epSharedUDP struct {
		Endpoint
		DatagramReader
		ReadLender
		VectorWriter
		DatagramWriter
	}
	epAll struct {
		Endpoint
		DatagramReader
		ReadLender
		FrameReader
		VectorWriter
		DatagramWriter
	}
)

// TestCaptureForwardsFastPaths: a capture offers exactly the optional fast
// paths of the endpoint it wraps (before, it offered none, so --pcap turned
// the zero-copy paths off; then none but LendReads, so SOFTRDMA_PCAP turned
// the C library's shared reads off), and records what goes through each.
func TestCaptureForwardsFastPaths(t *testing.T) {
	dg := Datagram{
		Payload: []byte("ib packet and icrc"),
		Src:     netip.MustParseAddrPort("10.0.0.2:49152"),
		Dst:     netip.MustParseAddrPort("10.0.0.1:4791"),
		TOS:     0x2e,
		TTL:     64,
	}
	ringFrame := testFrame(7, 80)
	pieces := [][]byte{testFrame(8, 50), []byte("payload from the MR"), {0, 0, 0, 0}}
	od := OutDatagram{Payload: [][]byte{[]byte("bth"), []byte(" payload "), []byte("icrc")},
		Src: netip.MustParseAddr("10.0.0.1"), SrcPort: 0xc001, Dst: netip.MustParseAddrPort("10.0.0.2:4791"),
		TOS: 0x2e, TTL: 63, IPv4ID: 3}
	tests := []struct {
		name               string
		wrap               func(*fastEnd) Endpoint
		dr, rl, fr, vw, dw bool
	}{
		{"plain", func(f *fastEnd) Endpoint { return epPlain{f.Endpoint} }, false, false, false, false, false},
		{"datagrams", func(f *fastEnd) Endpoint { return epDR{f.Endpoint, f} }, true, false, false, false, false},
		{"frames", func(f *fastEnd) Endpoint { return epFR{f.Endpoint, f} }, false, false, true, false, false},
		{"vectors", func(f *fastEnd) Endpoint { return epVW{f.Endpoint, f} }, false, false, false, true, false},
		{"datagram writer", func(f *fastEnd) Endpoint { return epDW{f.Endpoint, f} }, false, false, false, false, true},
		{"datagrams+vectors", func(f *fastEnd) Endpoint { return epDRVW{f.Endpoint, f, f} }, true, false, false, true, false},
		{"datagrams+lender", func(f *fastEnd) Endpoint { return epDRRL{f.Endpoint, f, f} }, true, true, false, false, false},
		{"udp-like", func(f *fastEnd) Endpoint { return epUDP{f.Endpoint, f, f, f} }, true, false, false, true, true},
		{"udp-like, shared reads", func(f *fastEnd) Endpoint { return epSharedUDP{f.Endpoint, f, f, f, f} }, true, true, false, true, true},
		{"afpacket-like", func(f *fastEnd) Endpoint { return epFRVW{f.Endpoint, f, f} }, false, false, true, true, false},
		{"all", func(f *fastEnd) Endpoint { return epAll{f.Endpoint, f, f, f, f, f} }, true, true, true, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, _ := NewPipe(4, DefaultMTU)
			f := &fastEnd{Endpoint: a, dgs: []Datagram{dg}, frames: [][]byte{ringFrame}}
			var out bytes.Buffer
			c, err := NewCapture(tt.wrap(f), &out, FormatPcap, NewManualClock(time.Unix(1, 0)))
			if err != nil {
				t.Fatal(err)
			}
			dr, isDR := c.(DatagramReader)
			rl, isRL := c.(ReadLender)
			fr, isFR := c.(FrameReader)
			vw, isVW := c.(VectorWriter)
			dw, isDW := c.(DatagramWriter)
			if isDR != tt.dr || isRL != tt.rl || isFR != tt.fr || isVW != tt.vw || isDW != tt.dw {
				t.Fatalf("capture offers DatagramReader %v ReadLender %v FrameReader %v VectorWriter %v DatagramWriter %v, want %v %v %v %v %v",
					isDR, isRL, isFR, isVW, isDW, tt.dr, tt.rl, tt.fr, tt.vw, tt.dw)
			}
			if isRL {
				if sock, ok := rl.LendReads(func() bool { return true }); sock != 42 || !ok || !f.lent {
					t.Fatalf("LendReads = %d, %v (reached the wrapped endpoint: %v)", sock, ok, f.lent)
				}
			}
			var want [][]byte
			if isDR {
				d := make([]Datagram, 2)
				if n, err := dr.ReadDatagrams(d); n != 1 || err != nil || !bytes.Equal(d[0].Payload, dg.Payload) {
					t.Fatalf("ReadDatagrams = %d, %v", n, err)
				}
				want = append(want, datagramFrame(t, dg))
			}
			if isFR {
				fs := make([][]byte, 2)
				if n, err := fr.TryReadFrames(fs); n != 1 || err != nil || !bytes.Equal(fs[0], ringFrame) {
					t.Fatalf("TryReadFrames = %d, %v", n, err)
				}
				want = append(want, ringFrame)
			}
			if isVW {
				if n, err := vw.WriteVectors([][][]byte{pieces}); n != 1 || err != nil {
					t.Fatalf("WriteVectors = %d, %v", n, err)
				}
				joined := bytes.Join(pieces, nil)
				if len(f.wrote) != 1 || !bytes.Equal(f.wrote[0], joined) {
					t.Fatal("WriteVectors did not reach the wrapped endpoint")
				}
				want = append(want, joined)
			}
			if isDW {
				if n, err := dw.WriteDatagrams([]OutDatagram{od}); n != 1 || err != nil {
					t.Fatalf("WriteDatagrams = %d, %v", n, err)
				}
				if len(f.sent) != 1 || f.sent[0].SrcPort != od.SrcPort {
					t.Fatal("WriteDatagrams did not reach the wrapped endpoint")
				}
				if n, b := dw.IPv4Run(); n != 64 || b != 65507 {
					t.Fatalf("IPv4Run = %d, %d: not the wrapped endpoint's", n, b)
				}
				want = append(want, outDatagramFrame(od))
			}
			if err := c.Flush(); err != nil {
				t.Fatal(err)
			}
			got := readCapture(t, FormatPcap, out.Bytes())
			if len(got) != len(want) {
				t.Fatalf("captured %d frames, want %d", len(got), len(want))
			}
			for i := range want {
				if !bytes.Equal(got[i].data, want[i]) {
					t.Errorf("frame %d:\n got % x\nwant % x", i, got[i].data, want[i])
				}
			}
		})
	}
}

// outDatagramFrame is the frame a capture records for a datagram written to
// an endpoint that does not know its MAC addresses: zero MACs, IPv4 with
// the sender's ID and DF, UDP checksum 0.
func outDatagramFrame(d OutDatagram) []byte {
	payload := bytes.Join(d.Payload, nil)
	n := header.EthernetLen + header.IPv4MinLen + header.UDPLen
	b := make([]byte, n+len(payload))
	copy(b[n:], payload)
	header.Ethernet(b).Encode(&header.EthernetFields{Type: header.EtherTypeIPv4})
	header.IPv4(b[header.EthernetLen:]).Encode(&header.IPv4Fields{
		TOS: d.TOS, TotalLength: uint16(len(b) - header.EthernetLen), ID: d.IPv4ID, FlagsFragment: header.IPv4FlagDF,
		TTL: d.TTL, Protocol: header.IPProtocolUDP, Src: d.Src, Dst: d.Dst.Addr(),
	})
	header.UDP(b[header.EthernetLen+header.IPv4MinLen:]).Encode(&header.UDPFields{
		SrcPort: d.SrcPort, DstPort: d.Dst.Port(), Length: uint16(header.UDPLen + len(payload)),
	})
	return b
}

// datagramFrame is the frame a capture records for a datagram from an endpoint
// that does not know its MAC addresses: zero MACs, IPv4 with DF, UDP checksum 0.
func datagramFrame(t *testing.T, d Datagram) []byte {
	t.Helper()
	n := header.EthernetLen + header.IPv4MinLen + header.UDPLen
	b := make([]byte, n+len(d.Payload))
	copy(b[n:], d.Payload)
	header.Ethernet(b).Encode(&header.EthernetFields{Type: header.EtherTypeIPv4})
	header.IPv4(b[header.EthernetLen:]).Encode(&header.IPv4Fields{
		TOS: d.TOS, TotalLength: uint16(len(b) - header.EthernetLen), FlagsFragment: header.IPv4FlagDF,
		TTL: d.TTL, Protocol: header.IPProtocolUDP, Src: d.Src.Addr(), Dst: d.Dst.Addr(),
	})
	header.UDP(b[header.EthernetLen+header.IPv4MinLen:]).Encode(&header.UDPFields{
		SrcPort: d.Src.Port(), DstPort: d.Dst.Port(), Length: uint16(header.UDPLen + len(d.Payload)),
	})
	return b
}

// TestCaptureInto: two captures record into one CaptureWriter (a command's
// --pcap file, no stream of their own to parse back); received frames,
// through Read and the datagram fast path alike, are recorded as the
// received hook rewrote them, sent ones as they were written.
func TestCaptureInto(t *testing.T) {
	var out bytes.Buffer
	w, err := NewCaptureWriter(&out, FormatPcap)
	if err != nil {
		t.Fatal(err)
	}
	mark := func(f []byte) []byte { g := bytes.Clone(f); g[0] = 0xee; return g }
	a, b := NewPipe(4, DefaultMTU)
	clock := NewManualClock(time.Unix(1, 0))
	ca := NewCaptureInto(a, w, clock, mark)
	dg := Datagram{Payload: []byte("ib packet and icrc"), Src: netip.MustParseAddrPort("10.0.0.2:49152"),
		Dst: netip.MustParseAddrPort("10.0.0.1:4791"), TTL: 64}
	f := &fastEnd{Endpoint: b, dgs: []Datagram{dg}}
	cb := NewCaptureInto(epDR{b, f}, w, clock, mark)
	sent := testFrame(3, 80)
	if _, err := ca.Write([][]byte{sent}, 0); err != nil {
		t.Fatal(err)
	}
	bufs, sizes := [][]byte{make([]byte, 2048)}, []int{0}
	if n, err := cb.Read(bufs, sizes, 0); n != 1 || err != nil {
		t.Fatalf("Read = %d, %v", n, err)
	}
	if n, err := cb.(DatagramReader).ReadDatagrams(make([]Datagram, 1)); n != 1 || err != nil {
		t.Fatalf("ReadDatagrams = %d, %v", n, err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	got := readCapture(t, FormatPcap, out.Bytes())
	want := [][]byte{sent, mark(sent), mark(datagramFrame(t, dg))}
	if len(got) != len(want) {
		t.Fatalf("recorded %d frames, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i].data, want[i]) {
			t.Errorf("frame %d:\n got % x\nwant % x", i, got[i].data[:16], want[i][:16])
		}
	}
}
