package netio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

type capturedFrame struct {
	ts     time.Time
	data   []byte
	length int
}

// readCapture decodes a pcap or pcapng stream with gopacket's readers.
func readCapture(t *testing.T, format CaptureFormat, data []byte) []capturedFrame {
	t.Helper()
	type packetReader interface {
		ReadPacketData() ([]byte, gopacket.CaptureInfo, error)
	}
	var r packetReader
	switch format {
	case FormatPcap:
		pr, err := pcapgo.NewReader(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("pcapgo.NewReader: %v", err)
		}
		if pr.LinkType() != layers.LinkTypeEthernet {
			t.Fatalf("link type %v, want Ethernet", pr.LinkType())
		}
		// pcapgo v1.1.19's Reader.Resolution has its answer inverted, so
		// check the magic for nanosecond timestamps directly.
		if magic := binary.LittleEndian.Uint32(data); magic != 0xa1b23c4d {
			t.Fatalf("pcap magic %#x, want 0xa1b23c4d (nanoseconds)", magic)
		}
		r = pr
	case FormatPcapNG:
		nr, err := pcapgo.NewNgReader(bytes.NewReader(data), pcapgo.DefaultNgReaderOptions)
		if err != nil {
			t.Fatalf("pcapgo.NewNgReader: %v", err)
		}
		if nr.LinkType() != layers.LinkTypeEthernet {
			t.Fatalf("link type %v, want Ethernet", nr.LinkType())
		}
		r = nr
	}
	var out []capturedFrame
	for {
		d, ci, err := r.ReadPacketData()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("reading capture: %v", err)
		}
		out = append(out, capturedFrame{ci.Timestamp, append([]byte(nil), d...), ci.Length})
	}
}

var formats = []CaptureFormat{FormatPcap, FormatPcapNG}

func TestCaptureWriterRoundTrip(t *testing.T) {
	base := time.Date(2025, 3, 4, 5, 6, 7, 123456789, time.UTC)
	frames := []capturedFrame{
		{base, testFrame(0, 60), 60},
		{base.Add(1), testFrame(1, 61), 61}, // 1 ns later: nanosecond resolution
		{base.Add(time.Second + 999), testFrame(2, 1514), 1514},
		{base.Add(time.Hour), testFrame(3, 9014), 9014},
		{time.Time{}, testFrame(4, 14), 14}, // zero time → Unix epoch
	}
	for _, format := range formats {
		t.Run(format.String(), func(t *testing.T) {
			var out bytes.Buffer
			cw, err := NewCaptureWriter(&out, format)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range frames {
				if err := cw.WriteFrame(f.ts, f.data); err != nil {
					t.Fatal(err)
				}
			}
			if err := cw.Flush(); err != nil {
				t.Fatal(err)
			}
			if cw.Frames() != uint64(len(frames)) {
				t.Fatalf("Frames() = %d, want %d", cw.Frames(), len(frames))
			}
			got := readCapture(t, format, out.Bytes())
			if len(got) != len(frames) {
				t.Fatalf("read %d frames, want %d", len(got), len(frames))
			}
			for i, f := range frames {
				wantTS := f.ts
				if wantTS.IsZero() {
					wantTS = time.Unix(0, 0)
				}
				if !got[i].ts.Equal(wantTS) {
					t.Errorf("frame %d: timestamp %v, want %v", i, got[i].ts, wantTS)
				}
				if !bytes.Equal(got[i].data, f.data) || got[i].length != f.length {
					t.Errorf("frame %d: data/length differ (%d bytes, length %d)", i, len(got[i].data), got[i].length)
				}
			}
		})
	}
}

func TestCaptureWriterTruncatesAtSnapLen(t *testing.T) {
	for _, format := range formats {
		t.Run(format.String(), func(t *testing.T) {
			var out bytes.Buffer
			cw, _ := NewCaptureWriter(&out, format)
			big := testFrame(9, CaptureSnapLen+100)
			cw.WriteFrame(time.Unix(1, 0), big)
			cw.Flush()
			got := readCapture(t, format, out.Bytes())
			if len(got) != 1 || len(got[0].data) != CaptureSnapLen || got[0].length != len(big) {
				t.Fatalf("got %d frames; want one truncated to %d with length %d", len(got), CaptureSnapLen, len(big))
			}
		})
	}
}

func TestCaptureWriterUnknownFormat(t *testing.T) {
	if _, err := NewCaptureWriter(io.Discard, CaptureFormat(7)); err == nil {
		t.Fatal("NewCaptureWriter accepted an unknown format")
	}
}

type failingWriter struct{ after int }

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.after <= 0 {
		return 0, errors.New("disk full")
	}
	w.after--
	return len(p), nil
}

func TestCaptureWriterStickyError(t *testing.T) {
	// pcapgo's NgWriter writes its headers through its own buffer, so the
	// failure appears at Flush for both formats.
	for _, format := range formats {
		t.Run(format.String(), func(t *testing.T) {
			cw, err := NewCaptureWriter(&failingWriter{after: 0}, format)
			if err != nil {
				t.Fatal(err) // headers are buffered
			}
			cw.WriteFrame(time.Unix(1, 0), testFrame(0, 60))
			if err := cw.Flush(); err == nil {
				t.Fatal("Flush succeeded on a failing writer")
			}
			if err := cw.WriteFrame(time.Unix(2, 0), testFrame(1, 60)); err == nil {
				t.Fatal("WriteFrame after a failed Flush succeeded; error must be sticky")
			}
		})
	}
}

func TestCaptureRecordsReadsAndWrites(t *testing.T) {
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, format := range formats {
		t.Run(format.String(), func(t *testing.T) {
			clock := NewManualClock(start)
			a, b := NewPipe(8, DefaultMTU)
			var out bytes.Buffer
			capA, err := NewCapture(a, &out, format, clock)
			if err != nil {
				t.Fatal(err)
			}
			// Write two frames with headroom at t0.
			const off = 8
			w := [][]byte{
				append(make([]byte, off), testFrame(0, 60)...),
				append(make([]byte, off), testFrame(1, 70)...),
			}
			if n, err := capA.Write(w, off); n != 2 || err != nil {
				t.Fatalf("Write = %d, %v", n, err)
			}
			// The peer answers; capture reads it at t0+5ms.
			clock.Advance(5 * time.Millisecond)
			b.Write([][]byte{testFrame(2, 80)}, 0)
			bufs, sizes := makeBufs(4, 200)
			if n, err := capA.Read(bufs, sizes, 4); n != 1 || err != nil {
				t.Fatalf("Read = %d, %v", n, err)
			}
			// And once more through TryRead at t0+7ms.
			clock.Advance(2 * time.Millisecond)
			b.Write([][]byte{testFrame(3, 90)}, 0)
			if n, err := capA.TryRead(bufs, sizes, 0); n != 1 || err != nil {
				t.Fatalf("TryRead = %d, %v", n, err)
			}
			// An empty TryRead records nothing.
			if n, err := capA.TryRead(bufs, sizes, 0); n != 0 || err != nil {
				t.Fatalf("empty TryRead = %d, %v", n, err)
			}
			if err := capA.Close(); err != nil {
				t.Fatal(err)
			}
			want := []capturedFrame{
				{start, testFrame(0, 60), 60},
				{start, testFrame(1, 70), 70},
				{start.Add(5 * time.Millisecond), testFrame(2, 80), 80},
				{start.Add(7 * time.Millisecond), testFrame(3, 90), 90},
			}
			got := readCapture(t, format, out.Bytes())
			if len(got) != len(want) {
				t.Fatalf("captured %d frames, want %d", len(got), len(want))
			}
			for i := range want {
				if !got[i].ts.Equal(want[i].ts) || !bytes.Equal(got[i].data, want[i].data) {
					t.Errorf("frame %d: ts %v len %d; want ts %v len %d", i, got[i].ts, len(got[i].data), want[i].ts, len(want[i].data))
				}
			}
		})
	}
}

// onlyEndpoint hides PipeEnd's TryRead.
type onlyEndpoint struct{ Endpoint }

func TestCaptureTryReadNotPollable(t *testing.T) {
	a, _ := NewPipe(1, DefaultMTU)
	c, _ := NewCapture(onlyEndpoint{a}, io.Discard, FormatPcap, nil)
	if _, err := c.TryRead(nil, nil, 0); !errors.Is(err, ErrNotPollable) {
		t.Fatalf("TryRead on a non-Poller: %v, want ErrNotPollable", err)
	}
	if c.MTU() != DefaultMTU || c.BatchSize() != 1 || c.Unwrap() != (onlyEndpoint{a}) {
		t.Fatal("Capture does not forward MTU/BatchSize/Unwrap")
	}
}

// TestCaptureConcurrent reads and writes through one Capture from two
// goroutines; run with -race. Every frame must appear exactly once.
func TestCaptureConcurrent(t *testing.T) {
	const total = 2000
	for _, format := range formats {
		t.Run(format.String(), func(t *testing.T) {
			a, b := NewPipeQueue(8, DefaultMTU, total)
			var out bytes.Buffer
			c, _ := NewCapture(a, &out, format, NewManualClock(time.Unix(100, 0)))
			var wg sync.WaitGroup
			wg.Add(3)
			go func() { // frames into a through the peer
				defer wg.Done()
				for i := 0; i < total; i++ {
					b.Write([][]byte{testFrame(i, 64)}, 0)
				}
			}()
			go func() { // frames out of a through the capture
				defer wg.Done()
				for i := 0; i < total; i++ {
					c.Write([][]byte{testFrame(total+i, 64)}, 0)
				}
			}()
			go func() {
				defer wg.Done()
				bufs, sizes := makeBufs(8, 100)
				for got := 0; got < total; {
					n, err := c.Read(bufs, sizes, 0)
					if err != nil {
						t.Error(err)
						return
					}
					got += n
				}
			}()
			wg.Wait()
			c.Flush()
			if got := len(readCapture(t, format, out.Bytes())); got != 2*total {
				t.Fatalf("captured %d frames, want %d", got, 2*total)
			}
		})
	}
}
