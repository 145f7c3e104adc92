package rdmacm_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/gopacket/pcapgo"

	"github.com/softrdma/softrdma/ibcm"
	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/roce"
	"github.com/softrdma/softrdma/sim"
)

// capturedFrame is one RoCE frame carrying a MAD, from a capture or the wire.
type capturedFrame struct {
	raw []byte
	mad ibcm.MAD
}

// decodeMADFrame decodes a frame carrying a MAD (ok false for anything else).
func decodeMADFrame(b []byte) (capturedFrame, bool) {
	var f roce.Frame
	if f.DecodeEthernet(b) != nil {
		return capturedFrame{}, false
	}
	var p ib.Packet
	if p.Decode(f.IB) != nil || p.BTH.DestQP() != ibcm.GSIQPN {
		return capturedFrame{}, false
	}
	m, err := ibcm.MADFromPacket(&p)
	if err != nil {
		return capturedFrame{}, false
	}
	return capturedFrame{raw: b, mad: ibcm.MAD(bytes.Clone(m))}, true
}

// captureFrames returns the MAD frames of a capture in testdata/captures.
func captureFrames(t *testing.T, name string) []capturedFrame {
	t.Helper()
	fh, err := os.Open(filepath.Join("..", "testdata", "captures", name))
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	r, err := pcapgo.NewReader(fh)
	if err != nil {
		t.Fatal(err)
	}
	var out []capturedFrame
	for {
		data, _, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if f, ok := decodeMADFrame(bytes.Clone(data)); ok {
			out = append(out, f)
		}
	}
}

// withIDs returns a copy of the frame with its MAD edited by fn and the ICRC
// computed again.
func (c capturedFrame) withIDs(t *testing.T, fn func(m ibcm.MAD)) []byte {
	t.Helper()
	b := bytes.Clone(c.raw)
	var f roce.Frame
	if err := f.DecodeEthernet(b); err != nil {
		t.Fatal(err)
	}
	var p ib.Packet
	if err := p.Decode(f.IB); err != nil {
		t.Fatal(err)
	}
	m, err := ibcm.MADFromPacket(&p)
	if err != nil {
		t.Fatal(err)
	}
	fn(m) // a view of b
	roce.SetICRC(&f)
	return b
}

// inject sends a frame from a raw port.
func inject(t *testing.T, p *sim.Port, frame []byte) {
	t.Helper()
	if _, err := p.Write([][]byte{frame}, 0); err != nil {
		t.Fatal(err)
	}
}

// readMADs returns the MAD frames waiting on a raw port.
func readMADs(t *testing.T, p *sim.Port) []capturedFrame {
	t.Helper()
	var out []capturedFrame
	bufs, sizes := [][]byte{make([]byte, 9000)}, []int{0}
	for {
		n, err := p.TryRead(bufs, sizes, 0)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return out
		}
		if f, ok := decodeMADFrame(bytes.Clone(bufs[0][:sizes[0]])); ok {
			out = append(out, f)
		}
	}
}
