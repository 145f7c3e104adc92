package sim

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"github.com/softrdma/softrdma/netio"
)

type packetSource interface {
	ReadPacketData() ([]byte, gopacket.CaptureInfo, error)
}

func readAll(t *testing.T, format netio.CaptureFormat, data []byte) (ts []time.Duration, frames []string) {
	t.Helper()
	var r packetSource
	var err error
	if format == netio.FormatPcap {
		var pr *pcapgo.Reader
		pr, err = pcapgo.NewReader(bytes.NewReader(data))
		if err == nil && pr.LinkType() != layers.LinkTypeEthernet {
			t.Fatalf("link type %v", pr.LinkType())
		}
		r = pr
	} else {
		r, err = pcapgo.NewNgReader(bytes.NewReader(data), pcapgo.DefaultNgReaderOptions)
	}
	if err != nil {
		t.Fatal(err)
	}
	for {
		d, ci, err := r.ReadPacketData()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		ts = append(ts, ci.Timestamp.Sub(Epoch))
		frames = append(frames, string(d))
	}
}

func TestCaptureLinkDelivered(t *testing.T) {
	for _, format := range []netio.CaptureFormat{netio.FormatPcap, netio.FormatPcapNG} {
		t.Run(format.String(), func(t *testing.T) {
			n, a, b, l := pair(8, LinkConfig{Latency: 3 * time.Millisecond, Jitter: time.Millisecond, Loss: 0.2, Corrupt: 0.2, Duplicate: 0.2})
			var out bytes.Buffer
			if _, err := n.CaptureLinkAt(l, &out, format, CaptureDelivered); err != nil {
				t.Fatal(err)
			}
			rec := newRecorder(t, n, a, b)
			for i := 0; i < 200; i++ {
				sendN(t, a, b.MAC(), uint32(i), 1, 60+i)
				sendN(t, b, a.MAC(), uint32(i), 1, 60)
				n.RunFor(100 * time.Microsecond)
			}
			runAll(n)
			if err := n.FlushCaptures(); err != nil {
				t.Fatal(err)
			}
			ts, frames := readAll(t, format, out.Bytes())
			// The capture is exactly what the two ports received, in order,
			// with the virtual delivery times.
			if len(frames) != len(rec.got) {
				t.Fatalf("captured %d frames, ports received %d", len(frames), len(rec.got))
			}
			for i, a := range rec.got {
				if frames[i] != a.data || ts[i] != a.at {
					t.Fatalf("capture frame %d: at %v, want %v (or data differs)", i, ts[i], a.at)
				}
			}
		})
	}
}

func TestCaptureLinkTransmitted(t *testing.T) {
	n, a, b, l := pair(8, LinkConfig{Latency: time.Millisecond, Loss: 0.5, MTU: 100})
	var tx, rx bytes.Buffer
	if _, err := n.CaptureLinkAt(l, &tx, netio.FormatPcap, CaptureTransmitted); err != nil {
		t.Fatal(err)
	}
	if _, err := n.CaptureLink(l, &rx); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		sendN(t, a, b.MAC(), uint32(i), 1, 60)
		n.RunFor(10 * time.Microsecond)
	}
	sendN(t, a, b.MAC(), 1000, 1, 200) // refused at the entrance: never on the wire
	runAll(n)
	n.FlushCaptures()
	txTS, txFrames := readAll(t, netio.FormatPcap, tx.Bytes())
	_, rxFrames := readAll(t, netio.FormatPcap, rx.Bytes())
	st := l.Stats(AtoB)
	if len(txFrames) != 100 || len(rxFrames) != int(st.Delivered) || st.Dropped[DropLoss] == 0 {
		t.Fatalf("transmitted capture %d frames (want 100), delivered capture %d, stats %+v", len(txFrames), len(rxFrames), st)
	}
	for i, at := range txTS {
		if at != time.Duration(i)*10*time.Microsecond {
			t.Fatalf("transmitted frame %d stamped %v", i, at)
		}
	}
}

func TestCaptureSameSeedSameBytes(t *testing.T) {
	run := func() []byte {
		n, a, b, l := pair(77, faultyConfig)
		var out bytes.Buffer
		n.CaptureLinkAt(l, &out, netio.FormatPcapNG, CaptureDelivered)
		newRecorder(t, n, a, b)
		for i := 0; i < 500; i++ {
			sendN(t, a, b.MAC(), uint32(i), 1, 100+i)
			n.RunFor(50 * time.Microsecond)
		}
		runAll(n)
		n.FlushCaptures()
		return out.Bytes()
	}
	if !bytes.Equal(run(), run()) {
		t.Fatal("two runs with the same seed wrote different captures")
	}
}
