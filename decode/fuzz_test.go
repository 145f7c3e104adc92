package decode

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/gopacket/layers"
)

// FuzzDecode runs the whole decoder over capture files: never a panic, never an error
// other than ErrNotCapture, a result consistent with itself, and JSON output that parses
// line by line.
func FuzzDecode(f *testing.F) {
	for _, file := range captureFiles(f) {
		b := readFile(f, file)
		f.Add(b)
		f.Add(b[:len(b)/2])
		f.Add(b[:len(b)-5])
	}
	b := readFile(f, captureDir+"/siw-crc-rping.pcap")
	frames := readFrames(f, b)
	f.Add(writeCapture(f, frames, layers.LinkTypeEthernet, true)[:3000])
	// Frames cut short: the MPA Request, and every frame (snap lengths).
	f.Add(writeCapture(f, cutFrame(frames, 4, 70), layers.LinkTypeEthernet, false))
	f.Add(writeCapture(f, snap(frames, 67), layers.LinkTypeEthernet, false))
	f.Add(writeCapture(f, snap(readFrames(f, readFile(f, captureDir+"/rxe-write-bw.pcap")), 37), layers.LinkTypeEthernet, false))
	// A wrong ICRC (a PSN) and a wrong FPDU CRC (a payload byte).
	for _, c := range []struct {
		file  string
		frame int
		off   int
	}{{"rxe-read-bw.pcap", 30, 14 + 20 + 8 + 9}, {"siw-crc-write-bw.pcap", 30, 100}} {
		fr := readFrames(f, readFile(f, captureDir+"/"+c.file))
		if c.frame <= len(fr) && c.off < len(fr[c.frame-1].data) {
			d := append([]byte(nil), fr[c.frame-1].data...)
			d[c.off] ^= 0x40
			fr[c.frame-1].data = d
			f.Add(writeCapture(f, fr, layers.LinkTypeEthernet, false))
		}
	}
	// A UDP GSO super-datagram (split), and the same cut by a snap length (not split).
	wbw := readFrames(f, readFile(f, captureDir+"/rxe-write-bw.pcap"))
	gso := append(append(append([]frameOut(nil), wbw[:20]...), superDatagram(f, wbw[20:23])), wbw[23:30]...)
	f.Add(writeCapture(f, gso, layers.LinkTypeEthernet, false))
	f.Add(writeCapture(f, snap(gso, 128), layers.LinkTypeEthernet, false))
	// Linux cooked captures (tcpdump -i any), whole and cut after the headers.
	for _, link := range []linkType{linkLinuxSLL, linkLinuxSLL2} {
		rxe := readFrames(f, readFile(f, captureDir+"/rxe-rdma-cm-rping.pcap"))
		f.Add(withLinkType(f, cook(f, rxe[:40], link), link, false))
		f.Add(withLinkType(f, snap(cook(f, frames[:30], link), 90), link, true))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// The annotated copy and the HTML report of whatever decodes: Annotate keeps
		// every frame, the report is a whole page; a filter by QP (two passes) too.
		if res, _, err := decodeBytes(t, data, Options{Flows: true, Summary: true, Verdicts: true, Report: true}); err == nil {
			var ng, page bytes.Buffer
			if err := Annotate(bytes.NewReader(data), &ng, &res); err != nil {
				t.Fatalf("Annotate: %v", err)
			}
			if _, frames := readNg(t, ng.Bytes()); len(frames) != res.Frames {
				t.Fatalf("annotated %d frames of %d", len(frames), res.Frames)
			}
			if err := WriteHTML(&page, &res, "fuzz"); err != nil || !strings.HasSuffix(page.String(), "</html>\n") {
				t.Fatalf("WriteHTML: %v", err)
			}
			filter := Filter{QPs: []uint32{1}, Opcodes: []string{"a"}, Start: 0.001, HasStart: true}
			if fres, _, err := decodeBytes(t, data, Options{Flows: true, Summary: true, Filter: &filter}); err != nil || fres.Packets > res.Packets || len(fres.Flows) > len(res.Flows) {
				t.Fatalf("filtered: %v, %d packets of %d, %d flows of %d", err, fres.Packets, res.Packets, len(fres.Flows), len(res.Flows))
			}
		}
		for _, opts := range []Options{{Flows: true, Summary: true}, {JSON: true, Flows: true, Summary: true}} {
			var out bytes.Buffer
			res, err := Run(bytes.NewReader(data), &out, opts)
			if err != nil {
				if !errors.Is(err, ErrNotCapture) {
					t.Fatalf("Run: %v", err)
				}
				continue
			}
			if res.RDMAFrames != len(res.RDMAFrameNumbers) || res.RDMAFrames > res.Frames {
				t.Fatalf("%d RDMA frames (%d listed) of %d", res.RDMAFrames, len(res.RDMAFrameNumbers), res.Frames)
			}
			for i, n := range res.RDMAFrameNumbers {
				if n < 1 || n > res.Frames || i > 0 && n <= res.RDMAFrameNumbers[i-1] {
					t.Fatalf("RDMA frame numbers %v", res.RDMAFrameNumbers)
				}
			}
			for _, e := range append(res.Errors, res.Notes...) {
				if e.Frame < 0 || e.Frame > res.Frames || e.Reason == "" {
					t.Fatalf("problem %+v of %d frames", e, res.Frames)
				}
			}
			if (len(res.Errors) > 0) != (res.ExitCode() == 1) {
				t.Fatalf("exit code %d with %d errors", res.ExitCode(), len(res.Errors))
			}
			if opts.JSON {
				sc := bufio.NewScanner(&out)
				sc.Buffer(nil, 1<<24)
				for sc.Scan() {
					if !json.Valid(sc.Bytes()) {
						t.Fatalf("invalid JSON line %q", sc.Bytes())
					}
				}
			}
		}
	})
}
