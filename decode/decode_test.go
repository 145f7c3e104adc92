package decode

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

const captureDir = "../testdata/captures"

// wantRDMAFrames is tshark's count of infiniband / iwarp_mpa frames per capture, from
// testdata/captures/logs/analyze.txt: the sum of the protocol stacks that contain
// "infiniband" or "iwarp_mpa".
var wantRDMAFrames = map[string]int{
	"rxe-atomic-cas.pcap":       10,
	"rxe-atomic-fadd.pcap":      10,
	"rxe-rc-pingpong-ipv6.pcap": 20 + 20,
	"rxe-rc-pingpong.pcap":      20 + 20,
	"rxe-rdma-cm-rping.pcap":    65 + 60,
	"rxe-read-bw.pcap":          20 + 5,
	"rxe-send-bw.pcap":          20 + 5,
	"rxe-send-lat.pcap":         20 + 20,
	"rxe-ud-pingpong.pcap":      20,
	"rxe-write-bw-rdma-cm.pcap": 48 + 31 + 16,
	"rxe-write-bw.pcap":         20 + 5,
	"rxe-write-lat.pcap":        20 + 20,
	"siw-crc-rping.pcap":        60 + 10 + 2,
	"siw-crc-write-bw.pcap":     27 + 16 + 4 + 4,
	"siw-read-bw.pcap":          27 + 16 + 5 + 4 + 2,
	"siw-rping.pcap":            60 + 10 + 2,
	"siw-send-bw.pcap":          19 + 14 + 6 + 4,
	"siw-write-bw.pcap":         27 + 16 + 4 + 4,
}

func captureFiles(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(captureDir, "*.pcap"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no captures in %s: %v", captureDir, err)
	}
	return files
}

func decodeBytes(t testing.TB, data []byte, opts Options) (Result, string, error) {
	t.Helper()
	var out bytes.Buffer
	res, err := Run(bytes.NewReader(data), &out, opts)
	return res, out.String(), err
}

func readFile(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var allOn = Options{Flows: true, Summary: true}

// TestCaptures: every capture decodes with zero errors, and the number of RDMA frames is
// tshark's.
func TestCaptures(t *testing.T) {
	files := captureFiles(t)
	if len(files) != len(wantRDMAFrames) {
		t.Errorf("%d captures, table has %d", len(files), len(wantRDMAFrames))
	}
	for _, file := range files {
		name := filepath.Base(file)
		t.Run(name, func(t *testing.T) {
			res, out, err := decodeBytes(t, readFile(t, file), allOn)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Errors) != 0 || res.ExitCode() != 0 {
				t.Errorf("errors: %v", res.Errors)
			}
			if len(res.Notes) != 0 {
				t.Errorf("notes: %v", res.Notes)
			}
			want, ok := wantRDMAFrames[name]
			if !ok {
				t.Fatalf("no tshark count for %s", name)
			}
			if res.RDMAFrames != want || len(res.RDMAFrameNumbers) != want {
				t.Errorf("%d RDMA frames, tshark counts %d", res.RDMAFrames, want)
			}
			if res.Format != "pcap" || res.Frames == 0 || len(res.Flows) == 0 {
				t.Errorf("format %q, %d frames, %d flows", res.Format, res.Frames, len(res.Flows))
			}
			if lines := strings.Count(out, "\n"); lines < res.Packets {
				t.Errorf("%d output lines for %d packets", lines, res.Packets)
			}
			for _, f := range res.Flows {
				if f.Errors != 0 || f.PSNGaps != 0 || f.Duplicates != 0 || f.LostBytes != 0 {
					t.Errorf("flow %s ↔ %s: errors %d, PSN gaps %d, duplicates %d, lost %d", f.A, f.B, f.Errors, f.PSNGaps, f.Duplicates, f.LostBytes)
				}
				if strings.HasPrefix(name, "rxe-") && (f.A.QP == nil || f.B.QP == nil) {
					t.Errorf("flow %s ↔ %s: QP pair not found", f.A, f.B)
				}
			}
		})
	}
}

// TestCaptureDetails checks what the decoder says about particular captures against
// the captures' logs and analyze.txt.
func TestCaptureDetails(t *testing.T) {
	decode := func(name string) (Result, string) {
		res, out, err := decodeBytes(t, readFile(t, filepath.Join(captureDir, name)), allOn)
		if err != nil {
			t.Fatal(err)
		}
		return res, out
	}
	// rdma_cm over RoCE: the five CM messages on QP1, and the REQ's private data.
	_, out := decode("rxe-rdma-cm-rping.pcap")
	for _, want := range []string{" CM REQ ", " CM REP ", " CM RTU ", " CM DREQ ", " CM DREP ",
		"rdma_cm 10.77.0.22:", " → 10.77.0.21:7174", "ServiceID=0x0000000001061c06"} {
		if !strings.Contains(out, want) {
			t.Errorf("rxe-rdma-cm-rping: output lacks %q", want)
		}
	}
	res, _ := decode("rxe-write-bw-rdma-cm.pcap")
	cm := 0
	for _, f := range res.Flows {
		if f.Service == "UD" && f.A.QP != nil && *f.A.QP == 1 {
			cm += f.Packets
		}
	}
	if cm != 10 {
		t.Errorf("rxe-write-bw-rdma-cm: %d CM MADs, analyze.txt has 10", cm)
	}
	// Opcode counts per capture, as analyze.txt's "BTH opcodes" and "RDMAP opcodes".
	for _, tc := range []struct {
		file string
		ops  map[string]int
	}{
		{"rxe-read-bw.pcap", map[string]int{"RC RDMA READ Request": 5, "RC RDMA READ response First": 5, "RC RDMA READ response Middle": 10, "RC RDMA READ response Last": 5}},
		{"rxe-atomic-fadd.pcap", map[string]int{"RC FetchAdd": 5, "RC ATOMIC Acknowledge": 5}},
		{"rxe-ud-pingpong.pcap", map[string]int{"UD SEND only": 20}},
		{"rxe-rdma-cm-rping.pcap", map[string]int{"RC Acknowledge": 50, "RC SEND Only": 40, "RC RDMA WRITE Only": 10, "RC RDMA READ response Only": 10, "RC RDMA READ Request": 10, "UD SEND only": 5}},
		{"siw-read-bw.pcap", map[string]int{"Send": 32, "Read Response": 15, "Read Request": 5}},
		{"siw-crc-rping.pcap", map[string]int{"Send": 40, "Write": 10, "Read Response": 10, "Read Request": 10}},
	} {
		res, _ := decode(tc.file)
		got := map[string]int{}
		for _, f := range res.Flows {
			for op, n := range f.Opcodes {
				got[op] += n
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.ops) {
			t.Errorf("%s: opcodes %v, want %v", tc.file, got, tc.ops)
		}
	}
	// siw-crc: every FPDU carries a CRC32c that verifies (analyze.txt: good=70 bad=0).
	res, out = decode("siw-crc-rping.pcap")
	if n := strings.Count(out, " CRC ok"); n != 70 {
		t.Errorf("siw-crc-rping: %d FPDUs with a good CRC, tshark finds 70", n)
	}
	if f := res.Flows[0]; f.MPA == nil || !f.MPA.CRC || f.MPA.Revision != 2 || f.FPDUs != 70 {
		t.Errorf("siw-crc-rping: flow %+v", f)
	}
	// siw-read-bw: two FPDUs end in one segment twice, and a Read Response FPDU is split
	// over two segments (frames 35 and 36: it is reported at 36, where it ends).
	res, out = decode("siw-read-bw.pcap")
	if res.Packets != res.RDMAFrames+2 {
		t.Errorf("siw-read-bw: %d MPA frames in %d RDMA frames, want 2 more", res.Packets, res.RDMAFrames)
	}
	if !strings.Contains(out, "\n    36 ") || strings.Contains(out, "\n    35 ") {
		t.Errorf("siw-read-bw: the FPDU split over frames 35-36 is not reported at frame 36")
	}
}

// TestTsharkFrameNumbers compares the RDMA frame numbers with tshark's, frame by frame:
// of every capture, of three as tcpdump -i any would write them (LINUX_SLL and
// LINUX_SLL2), and of one holding a UDP GSO super-datagram (one frame for both).
func TestTsharkFrameNumbers(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not on PATH")
	}
	dir := t.TempDir()
	type variant struct {
		name string
		data []byte
	}
	var variants []variant
	for _, file := range captureFiles(t) {
		b := readFile(t, file)
		base := filepath.Base(file)
		variants = append(variants, variant{base, b})
		frames := readFrames(t, b)
		if base == "rxe-write-bw.pcap" {
			gso := append(append(append([]frameOut(nil), frames[:20]...), superDatagram(t, frames[20:23])), frames[23:]...)
			variants = append(variants, variant{base + " with a GSO datagram", writeCapture(t, gso, layers.LinkTypeEthernet, false)})
		}
		switch base {
		case "rxe-rdma-cm-rping.pcap", "rxe-rc-pingpong-ipv6.pcap", "siw-crc-rping.pcap":
		default:
			continue // tshark takes a second a run: cooked captures of three
		}
		for _, link := range []linkType{linkLinuxSLL, linkLinuxSLL2} {
			variants = append(variants, variant{fmt.Sprintf("%s as %v", base, link), withLinkType(t, cook(t, frames, link), link, false)})
		}
	}
	for i, v := range variants {
		file := filepath.Join(dir, fmt.Sprintf("%d.pcap", i))
		if err := os.WriteFile(file, v.data, 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(tshark, "-r", file, "-Y", "infiniband or iwarp_mpa", "-T", "fields", "-e", "frame.number")
		cmd.Stderr = io.Discard
		b, err := cmd.Output()
		if err != nil {
			t.Fatalf("tshark %s: %v", v.name, err)
		}
		var want []int
		for _, f := range strings.Fields(string(b)) {
			n, err := strconv.Atoi(f)
			if err != nil {
				t.Fatalf("tshark output %q", f)
			}
			want = append(want, n)
		}
		res, _, err := decodeBytes(t, v.data, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(res.RDMAFrameNumbers) != fmt.Sprint(want) || len(want) == 0 {
			t.Errorf("%s: RDMA frames\n %v\ntshark\n %v", v.name, res.RDMAFrameNumbers, want)
		}
	}
}

// frameRecord is one record of a classic pcap file: its place in the file.
type frameRecord struct {
	hdr  int // offset of the 16-byte record header
	data int // offset of the frame
	n    int // captured length
}

// pcapRecords lists the records of a little-endian classic pcap file.
func pcapRecords(t testing.TB, b []byte) []frameRecord {
	t.Helper()
	var out []frameRecord
	for off := 24; off+16 <= len(b); {
		n := int(uint32(b[off+8]) | uint32(b[off+9])<<8 | uint32(b[off+10])<<16 | uint32(b[off+11])<<24)
		out = append(out, frameRecord{hdr: off, data: off + 16, n: n})
		off += 16 + n
	}
	return out
}

// TestCorruptCRC flips one byte under the ICRC of a RoCE frame, and under the CRC32c of
// an FPDU: the frame is named as bad, the exit status is 1.
func TestCorruptCRC(t *testing.T) {
	for _, tc := range []struct {
		file  string
		frame int // 1-based
		want  string
	}{
		{"rxe-write-bw.pcap", 21, "icrc"},         // RDMA WRITE Middle, payload byte
		{"rxe-rc-pingpong-ipv6.pcap", 20, "icrc"}, // IPv6
		{"rxe-rdma-cm-rping.pcap", 1, "icrc"},     // the CM REQ
		{"siw-crc-rping.pcap", 8, "CRC"},          // a Send FPDU
		{"siw-crc-write-bw.pcap", 30, "CRC"},
	} {
		b := readFile(t, filepath.Join(captureDir, tc.file))
		recs := pcapRecords(t, b)
		r := recs[tc.frame-1]
		b[r.data+r.n-6] ^= 0x20 // a payload byte near the end of the frame
		res, _, err := decodeBytes(t, b, allOn)
		if err != nil {
			t.Fatal(err)
		}
		if res.ExitCode() != 1 || len(res.Errors) != 1 {
			t.Fatalf("%s frame %d corrupted: exit %d, errors %v", tc.file, tc.frame, res.ExitCode(), res.Errors)
		}
		e := res.Errors[0]
		if e.Frame != tc.frame || !strings.Contains(e.Reason, tc.want) {
			t.Errorf("%s: error %q, want frame %d and %q", tc.file, e.Error(), tc.frame, tc.want)
		}
	}
}

// TestGarbageAndTruncation: not a capture is ErrNotCapture; a capture cut at any byte
// decodes what there is and reports the damage; nothing panics.
func TestGarbageAndTruncation(t *testing.T) {
	for _, junk := range [][]byte{nil, {0xd4}, []byte("hello world, this is not a pcap file at all"),
		bytes.Repeat([]byte{0xff}, 100), {0x0a, 0x0d, 0x0d, 0x0a, 1, 2, 3}} {
		_, _, err := decodeBytes(t, junk, allOn)
		if !errors.Is(err, ErrNotCapture) {
			t.Errorf("%q: err %v, want ErrNotCapture", junk, err)
		}
	}
	for _, name := range []string{"rxe-rdma-cm-rping.pcap", "siw-crc-rping.pcap"} {
		b := readFile(t, filepath.Join(captureDir, name))
		recs := pcapRecords(t, b)
		full, _, _ := decodeBytes(t, b, allOn)
		for n := 0; n < len(b); n += 1 + n/64 {
			res, _, err := decodeBytes(t, b[:n], allOn)
			if n < 24 {
				if !errors.Is(err, ErrNotCapture) {
					t.Errorf("%s cut to %d bytes: err %v", name, n, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s cut to %d bytes: %v", name, n, err)
			}
			onBoundary := n == 24
			for _, r := range recs {
				if n == r.data+r.n {
					onBoundary = true
				}
			}
			if onBoundary != (res.ExitCode() == 0) {
				t.Errorf("%s cut to %d bytes (record boundary %v): errors %v", name, n, onBoundary, res.Errors)
			}
			if !onBoundary && (res.Errors[len(res.Errors)-1].Frame != 0 || !strings.Contains(res.Errors[len(res.Errors)-1].Reason, "truncated")) {
				t.Errorf("%s cut to %d bytes: errors %v", name, n, res.Errors)
			}
			if res.RDMAFrames > full.RDMAFrames {
				t.Errorf("%s cut to %d bytes: %d RDMA frames > %d", name, n, res.RDMAFrames, full.RDMAFrames)
			}
		}
	}
}

// frameOut is one frame of a capture.
type frameOut struct {
	ci   gopacket.CaptureInfo
	data []byte
}

// readFrames returns the frames of a classic pcap file.
func readFrames(t testing.TB, b []byte) []frameOut {
	t.Helper()
	r, err := pcapgo.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	var out []frameOut
	for {
		data, ci, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, frameOut{ci, data})
	}
}

// writeCapture writes frames as a pcap file, or as pcapng with ng.
func writeCapture(t testing.TB, frames []frameOut, link layers.LinkType, ng bool) []byte {
	t.Helper()
	var out bytes.Buffer
	if ng {
		w, err := pcapgo.NewNgWriter(&out, link)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range frames {
			if err := w.WritePacket(f.ci, f.data); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		return out.Bytes()
	}
	w := pcapgo.NewWriter(&out)
	if err := w.WriteFileHeader(65536, link); err != nil {
		t.Fatal(err)
	}
	for _, f := range frames {
		if err := w.WritePacket(f.ci, f.data); err != nil {
			t.Fatal(err)
		}
	}
	return out.Bytes()
}

// TestUnreadableInput: an input that fails to read (a directory gives EISDIR) is reported
// with its read error, not as an empty file, and not as ErrNotCapture.
func TestUnreadableInput(t *testing.T) {
	dir, err := os.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	_, err = Run(dir, io.Discard, Options{})
	if err == nil || errors.Is(err, ErrNotCapture) || strings.Contains(err.Error(), "empty") || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("Run(directory): %v", err)
	}
}
