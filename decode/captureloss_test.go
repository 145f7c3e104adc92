package decode

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/softrdma/softrdma/iwarp"
)

// readResponseFPDUs returns n READ responses of 4096 octets as siw sends them with MPA
// CRCs and markers off: three tagged FPDUs each, of 1428, 1428 and 1240 payload octets.
func readResponseFPDUs(t *testing.T, n int) [][]byte {
	t.Helper()
	var fpdus [][]byte
	for i := 0; i < n; i++ {
		to := uint64(0x561a26a21000)
		for j, size := range []int{1428, 1428, 1240} {
			f := iwarp.RDMAPFields{Opcode: iwarp.OpReadResponse, Last: j == 2, STag: 0x0c4b99c8, TO: to}
			hdr := make([]byte, iwarp.DDPUntaggedHeaderLen)
			h, err := f.Encode(hdr)
			if err != nil {
				t.Fatal(err)
			}
			b, err := iwarp.AppendFPDU(nil, false, hdr[:h], bytes.Repeat([]byte{byte(i)}, size))
			if err != nil {
				t.Fatal(err)
			}
			fpdus = append(fpdus, b)
			to += uint64(size)
		}
	}
	return fpdus
}

// TestCaptureLossAtTheEnd is CI run 29's TestLibsSiw failure: tcpdump's ring (32 frames
// with the tap's offloads) overflowed while siw sent READ responses, and the capture lost
// the segment with the last 4 octets of an FPDU (siw had sent its first 1256 in one
// segment) and every later data segment of the direction, but kept the host's ACKs of
// them and siw's FIN. Those prove the octets were sent and received: the capture missed
// them, which decode reports as lost bytes and a note, not as an FPDU the sender cut
// short (an error). A stream that really ends inside an FPDU, its FIN right after the
// last octet, stays an error.
func TestCaptureLossAtTheEnd(t *testing.T) {
	var req, rep mpaStream
	req.t, rep.t = t, t
	ird := []byte{0x80, 1, 0, 1}
	req.start(iwarp.MPAFrameFields{Request: true, Revision: iwarp.MPARevision2, Enhanced: true, PrivateData: ird})
	rep.start(iwarp.MPAFrameFields{Revision: iwarp.MPARevision2, Enhanced: true, PrivateData: ird})
	segs := []synthSeg{{0, req.b}, {1, rep.b}}
	// One segment per FPDU, but the second response's last FPDU in two: its first 1256
	// octets, then its CRC field.
	fpdus := readResponseFPDUs(t, 3)
	const split = 5
	for i, f := range fpdus {
		if i == split {
			segs = append(segs, synthSeg{1, f[:1256]}, synthSeg{1, f[1256:]})
			continue
		}
		segs = append(segs, synthSeg{1, f})
	}
	first := 2 + split // segs index of the split FPDU's first part
	lastData := len(segs) - 1
	lostOctets := 0
	for _, s := range segs[first+1:] {
		lostOctets += len(s.payload)
	}
	// synthCapture's frames (1-based): SYN, SYN-ACK, ACK, then each segment's data
	// (frame 4+2i) and its ACK, then the two FINs (siw's last).
	capture := synthCapture(t, segs)
	frames := readFrames(t, capture)
	keep := func(keep func(frame int) bool) []byte {
		var out []frameOut
		for i, f := range frames {
			if keep(i + 1) {
				out = append(out, f)
			}
		}
		return writeCapture(t, out, layers.LinkTypeEthernet, false)
	}
	tailLost := func(f int) bool { return f < 4+2*(first+1) || f > 4+2*lastData || f%2 == 1 }
	tests := []struct {
		name    string
		capture []byte
		errors  int
		lost    uint64
		note    string
	}{
		{"whole", capture, 0, 0, ""},
		{"tail lost, its ACKs and the FIN captured", keep(tailLost), 0, uint64(lostOctets),
			"not captured (the FIN at frame"},
		{"tail and the FIN lost, the ACKs captured", keep(func(f int) bool { return tailLost(f) && f != len(frames) }), 0,
			uint64(lostOctets), "not captured (the peer's ACK at frame"},
		{"the stream ends inside the FPDU", synthCapture(t, segs[:first+1]), 1, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, out, err := decodeBytes(t, tt.capture, allOn)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Errors) != tt.errors || len(res.Flows) != 1 || res.Flows[0].LostBytes != tt.lost {
				t.Fatalf("errors %v, flows %+v; want %d errors, %d bytes lost\n%s", res.Errors, res.Flows, tt.errors, tt.lost, out)
			}
			if tt.note == "" {
				return
			}
			found := false
			for _, n := range res.Notes {
				found = found || strings.Contains(n.Reason, tt.note)
			}
			if !found {
				t.Errorf("no note %q: %v\n%s", tt.note, res.Notes, out)
			}
		})
	}
}
