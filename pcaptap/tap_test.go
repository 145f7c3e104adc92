package pcaptap

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/gopacket/pcapgo"

	"github.com/softrdma/softrdma/header"
	"github.com/softrdma/softrdma/internal/pcaptest"
	"github.com/softrdma/softrdma/netio"
	"github.com/softrdma/softrdma/roce"
)

// TestRecord: a device Record points at the tap records straight into the
// tap's file (roce.OpenConfig.CaptureWriter, no stream of its own), and for
// a UDP device its received frames get back the IPv4 ID the socket hid:
// rxe's frames, their IDs zeroed as a UDP endpoint delivers them, recorded
// through the capture Record sets up, are in the file with rxe's IDs and
// ICRCs that verify.
func TestRecord(t *testing.T) {
	var file bytes.Buffer
	tap, err := New(&file, netio.FormatPcap, 0)
	if err != nil {
		t.Fatal(err)
	}
	var oc roce.OpenConfig
	tap.Record(&oc, true)
	if oc.CaptureWriter == nil || oc.CaptureReceived == nil {
		t.Fatalf("Record left CaptureWriter %v, CaptureReceived set %v", oc.CaptureWriter, oc.CaptureReceived != nil)
	}
	frames := pcaptest.Frames(t, "rxe-rc-pingpong.pcap")
	var in [][]byte
	for _, f := range frames {
		var fr roce.Frame
		if fr.DecodeEthernet(f) != nil || fr.IPv6 {
			continue
		}
		z := bytes.Clone(f)
		ip := header.IPv4(z[len(fr.Ethernet):])
		ip.SetID(0)
		ip.SetChecksum(ip.CalculateChecksum())
		in = append(in, z)
	}
	if len(in) < 10 {
		t.Fatalf("%d IPv4 RoCE frames in the capture", len(in))
	}
	a, b := netio.NewPipe(len(in), netio.DefaultMTU)
	ep := netio.NewCaptureInto(b, oc.CaptureWriter, netio.NewManualClock(time.Unix(1, 0)), oc.CaptureReceived)
	if _, err := a.Write(in, 0); err != nil {
		t.Fatal(err)
	}
	bufs, sizes := make([][]byte, len(in)), make([]int, len(in))
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	if n, err := ep.Read(bufs, sizes, 0); n != len(in) || err != nil {
		t.Fatalf("Read = %d, %v", n, err)
	}
	if err := tap.Flush(); err != nil {
		t.Fatal(err)
	}
	r, err := pcapgo.NewReader(&file)
	if err != nil {
		t.Fatal(err)
	}
	restored := 0
	for i := 0; ; i++ {
		data, _, err := r.ReadPacketData()
		if err != nil {
			if i != len(in) {
				t.Fatalf("%d frames in the file, want %d", i, len(in))
			}
			break
		}
		var f roce.Frame
		if err := f.DecodeEthernet(data); err != nil {
			t.Fatal(err)
		}
		if err := roce.VerifyICRC(&f); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if header.IPv4(f.IP).ID() != 0 {
			restored++
		}
	}
	if restored == 0 {
		t.Error("no IPv4 ID restored: rxe numbers its datagrams")
	}
}
