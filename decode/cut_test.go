package decode

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/gopacket/layers"
)

// cutFrame returns the frames with frame (1-based) cut to its first n bytes, as a snap
// length would: the captured length shrinks, the original length stays.
func cutFrame(frames []frameOut, frame, n int) []frameOut {
	out := append([]frameOut(nil), frames...)
	f := out[frame-1]
	f.data = f.data[:min(n, len(f.data))]
	f.ci.CaptureLength = len(f.data)
	out[frame-1] = f
	return out
}

// snap cuts every frame to at most n bytes, as editcap -s n (or tcpdump -s n) does.
func snap(frames []frameOut, n int) []frameOut {
	out := make([]frameOut, len(frames))
	for i, f := range frames {
		f.data = f.data[:min(n, len(f.data))]
		f.ci.CaptureLength = len(f.data)
		out[i] = f
	}
	return out
}

func flowFPDUs(res Result) int {
	n := 0
	for _, f := range res.Flows {
		n += f.FPDUs
	}
	return n
}

// TestFrameCutShort cuts one RDMA frame short (as a small snap length would) at every
// length from the end of its IP header on: each cut is exactly one error, which names
// the frame and says it was cut short; the exit status is 1; and every other RDMA frame
// is still found (the RDMA frame numbers are those of the whole capture: the cut frame is
// one of them). Frames cut inside the UDP header whose destination port does not show are
// RoCE by their addresses; a TCP segment of an iWARP connection cut anywhere is named.
func TestFrameCutShort(t *testing.T) {
	for _, tc := range []struct {
		name  string
		frame int
		ipEnd int // Ethernet and IP headers
	}{
		{"rxe-write-bw.pcap", 20, 34},         // RC RDMA WRITE First
		{"rxe-rdma-cm-rping.pcap", 1, 34},     // the CM REQ
		{"rxe-rc-pingpong-ipv6.pcap", 21, 54}, // IPv6
		{"rxe-ud-pingpong.pcap", 10, 34},      // UD SEND
		{"siw-crc-rping.pcap", 8, 34},         // a Send FPDU
		{"siw-read-bw.pcap", 40, 34},          // an FPDU in a longer connection
	} {
		frames := readFrames(t, readFile(t, filepath.Join(captureDir, tc.name)))
		full, _, err := decodeBytes(t, writeCapture(t, frames, layers.LinkTypeEthernet, false), allOn)
		if err != nil {
			t.Fatal(err)
		}
		orig := frames[tc.frame-1]
		for n := 0; n < len(orig.data); n++ {
			res, _, err := decodeBytes(t, writeCapture(t, cutFrame(frames, tc.frame, n), layers.LinkTypeEthernet, false), allOn)
			if err != nil {
				t.Fatal(err)
			}
			if n < tc.ipEnd {
				continue // inside the Ethernet or IP header: only must not panic
			}
			if res.ExitCode() != 1 || len(res.Errors) != 1 || res.Errors[0].Frame != tc.frame || !strings.Contains(res.Errors[0].Reason, "cut short") {
				t.Errorf("%s frame %d cut to %d of %d bytes: exit %d, errors %v", tc.name, tc.frame, n, len(orig.data), res.ExitCode(), res.Errors)
				continue
			}
			if fmt.Sprint(res.RDMAFrameNumbers) != fmt.Sprint(full.RDMAFrameNumbers) {
				t.Errorf("%s frame %d cut to %d bytes: RDMA frames\n %v\nwant\n %v", tc.name, tc.frame, n, res.RDMAFrameNumbers, full.RDMAFrameNumbers)
			}
		}
	}
}

// TestMPAStartFrameCut cuts the MPA Request (frame 4) or the MPA Reply (frame 6) of the
// rping captures, with and without CRCs, at every length from the end of the IP header on.
// The cut frame is the one error (exit status 1), named as the start frame it was once
// the TCP header shows the segment; and the rest of the connection decodes as if nothing
// were cut: every FPDU is found (with its CRC verified), the other start frame is decoded,
// the RDMA frame numbers are the whole capture's. The decoder learns the connection is
// iWARP from the other start frame, or from the prefix of the key the cut frame holds, and
// finds the FPDU framing after the lost octets; the peer's decoder, which waits for the
// lost start frame, gets its flags from the octets kept or from the first FPDU.
func TestMPAStartFrameCut(t *testing.T) {
	for _, name := range []string{"siw-crc-rping.pcap", "siw-rping.pcap"} {
		frames := readFrames(t, readFile(t, filepath.Join(captureDir, name)))
		full, fullOut, err := decodeBytes(t, writeCapture(t, frames, layers.LinkTypeEthernet, false), allOn)
		if err != nil {
			t.Fatal(err)
		}
		wantCRC := strings.Count(fullOut, " CRC ok")
		for _, tc := range []struct {
			frame       int
			kind, other string
		}{{4, "MPA Request frame", "MPA Reply"}, {6, "MPA Reply frame", "MPA Request"}} {
			orig := frames[tc.frame-1]
			if !strings.Contains("\n"+fullOut, fmt.Sprintf("\n%6d ", tc.frame)) || len(orig.data) != 90 {
				t.Fatalf("%s: frame %d is not the %s", name, tc.frame, tc.kind)
			}
			for n := 14 + 20; n < len(orig.data); n++ {
				res, out, err := decodeBytes(t, writeCapture(t, cutFrame(frames, tc.frame, n), layers.LinkTypeEthernet, false), allOn)
				if err != nil {
					t.Fatal(err)
				}
				where := fmt.Sprintf("%s: %s (frame %d) cut to %d of 90 bytes", name, tc.kind, tc.frame, n)
				if res.ExitCode() != 1 || len(res.Errors) != 1 || res.Errors[0].Frame != tc.frame || !strings.Contains(res.Errors[0].Reason, "cut short") {
					t.Errorf("%s: exit %d, errors %v", where, res.ExitCode(), res.Errors)
					continue
				}
				// From 14 bytes of TCP header on (ports, sequence numbers, data offset,
				// flags) the segment is followed in its stream: the first of its
				// direction, it is the start frame.
				if n >= 14+20+minTCPHeader && !strings.Contains(res.Errors[0].Reason, tc.kind+" truncated") {
					t.Errorf("%s: error %q does not say %q", where, res.Errors[0].Reason, tc.kind+" truncated")
				}
				if len(res.Flows) != 1 || res.Flows[0].Transport != "iWARP" || flowFPDUs(res) != flowFPDUs(full) || res.Flows[0].Errors != 1 {
					t.Errorf("%s: flows %+v, want one iWARP connection with %d FPDUs and 1 error", where, res.Flows, flowFPDUs(full))
				}
				if got := strings.Count(out, " CRC ok"); got != wantCRC {
					t.Errorf("%s: %d FPDUs with a verified CRC, want %d", where, got, wantCRC)
				}
				if !strings.Contains(out, " iWARP "+tc.other+" ") {
					t.Errorf("%s: the %s is not decoded", where, tc.other)
				}
				if fmt.Sprint(res.RDMAFrameNumbers) != fmt.Sprint(full.RDMAFrameNumbers) {
					t.Errorf("%s: RDMA frames\n %v\nwant\n %v", where, res.RDMAFrameNumbers, full.RDMAFrameNumbers)
				}
			}
		}
	}
}

// TestSnapLength cuts every frame of a capture to a snap length (as editcap -s or
// tcpdump -s would), for every length from the end of the IP header to past the MPA
// start frames. The exit status is always 1. Once the frames show what makes them RDMA
// (the UDP destination port for RoCEv2, the first payload octet for iWARP: part of an
// MPA key), every RDMA frame of the whole capture is found, and every one the snap length
// cut is an error naming it; before that, the frames nothing identifies are one error
// saying they are not verified, so that a capture too short to show its RDMA never
// passes as good.
func TestSnapLength(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ipEnd    int
		identify int // the snap length from which every RDMA frame is found
	}{
		{"siw-crc-rping.pcap", 34, 34 + 32 + 1},
		{"siw-rping.pcap", 34, 34 + 32 + 1},
		{"rxe-write-bw.pcap", 34, 34 + 4},
		{"rxe-rdma-cm-rping.pcap", 34, 34 + 4},
		{"rxe-rc-pingpong-ipv6.pcap", 54, 54 + 4},
	} {
		frames := readFrames(t, readFile(t, filepath.Join(captureDir, tc.name)))
		full, _, err := decodeBytes(t, writeCapture(t, frames, layers.LinkTypeEthernet, false), allOn)
		if err != nil {
			t.Fatal(err)
		}
		isRDMA := map[int]bool{}
		for _, f := range full.RDMAFrameNumbers {
			isRDMA[f] = true
		}
		for s := tc.ipEnd; s <= 130; s++ {
			res, _, err := decodeBytes(t, writeCapture(t, snap(frames, s), layers.LinkTypeEthernet, false), allOn)
			if err != nil {
				t.Fatal(err)
			}
			where := fmt.Sprintf("%s with snap length %d", tc.name, s)
			if res.ExitCode() != 1 {
				t.Errorf("%s: exit %d, errors %v", where, res.ExitCode(), res.Errors)
				continue
			}
			named := map[int]bool{}
			unverified := 0
			for _, e := range res.Errors {
				switch {
				case strings.Contains(e.Reason, "not verified"):
					unverified++
				case !isRDMA[e.Frame] || !strings.Contains(e.Reason, "cut short"):
					t.Errorf("%s: error %v (not a cut RDMA frame)", where, e)
				}
				named[e.Frame] = true
			}
			if s < tc.identify {
				if unverified != 1 && fmt.Sprint(res.RDMAFrameNumbers) != fmt.Sprint(full.RDMAFrameNumbers) {
					t.Errorf("%s: errors %v: neither the RDMA frames nor one error for the frames not verified", where, res.Errors)
				}
				continue
			}
			if fmt.Sprint(res.RDMAFrameNumbers) != fmt.Sprint(full.RDMAFrameNumbers) {
				t.Errorf("%s: RDMA frames\n %v\nwant\n %v", where, res.RDMAFrameNumbers, full.RDMAFrameNumbers)
			}
			for _, f := range full.RDMAFrameNumbers {
				if cut := len(frames[f-1].data) > s; cut != named[f] {
					t.Errorf("%s: frame %d (%d bytes) cut %v, named in an error %v", where, f, len(frames[f-1].data), cut, named[f])
				}
			}
		}
	}
}

// TestNonRDMAFrameCutShort cuts frames that carry no RDMA, at every length from the end of
// their IP header on: the SYN and a bare ACK of an iWARP connection, and the first and a
// later data segment of perftest's TCP side channel in a RoCE capture (the other
// direction's data shows that connection is not MPA). None is an error: the exit status
// stays 0 and the RDMA frames are those of the whole capture.
func TestNonRDMAFrameCutShort(t *testing.T) {
	for _, tc := range []struct {
		name  string
		frame int
	}{
		{"siw-crc-rping.pcap", 1}, // SYN
		{"siw-crc-rping.pcap", 5}, // bare ACK
		{"rxe-write-bw.pcap", 3},  // bare ACK
		{"rxe-write-bw.pcap", 4},  // the side channel's first data segment
		{"rxe-write-bw.pcap", 14}, // a later one
	} {
		frames := readFrames(t, readFile(t, filepath.Join(captureDir, tc.name)))
		full, _, err := decodeBytes(t, writeCapture(t, frames, layers.LinkTypeEthernet, false), allOn)
		if err != nil {
			t.Fatal(err)
		}
		for n := 14 + 20; n < len(frames[tc.frame-1].data); n++ {
			res, _, err := decodeBytes(t, writeCapture(t, cutFrame(frames, tc.frame, n), layers.LinkTypeEthernet, false), allOn)
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode() != 0 || fmt.Sprint(res.RDMAFrameNumbers) != fmt.Sprint(full.RDMAFrameNumbers) {
				t.Errorf("%s frame %d cut to %d bytes: exit %d, errors %v, RDMA frames %v", tc.name, tc.frame, n, res.ExitCode(), res.Errors, res.RDMAFrameNumbers)
			}
		}
	}
}
