package decode

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/softrdma/softrdma/ibtransport"
)

// decodedRun is one capture decoded twice, as text and as JSON (flows and summary on):
// the packet lines and the packet objects, in output order.
type decodedRun struct {
	res     Result
	text    string
	lines   []string
	pkts    []Packet
	summary jsonSummary
}

var packetLineRE = regexp.MustCompile(`^ *[0-9]+ +[0-9]+\.[0-9]{6} `)

func decodeRun(t *testing.T, capture []byte) decodedRun {
	t.Helper()
	var r decodedRun
	var err error
	if r.res, r.text, err = decodeBytes(t, capture, allOn); err != nil {
		t.Fatal(err)
	}
	_, js, err := decodeBytes(t, capture, Options{JSON: true, Flows: true, Summary: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(r.text, "\n") {
		if packetLineRE.MatchString(l) {
			r.lines = append(r.lines, l)
		}
	}
	for _, l := range strings.Split(js, "\n") {
		switch {
		case strings.HasPrefix(l, `{"summary":`):
			if err := json.Unmarshal([]byte(l), &r.summary); err != nil {
				t.Fatalf("summary %s: %v", l, err)
			}
		case strings.HasPrefix(l, `{"frame":`) && !strings.HasPrefix(l, `{"frame":0,`):
			var p Packet
			if err := json.Unmarshal([]byte(l), &p); err != nil {
				t.Fatalf("packet %s: %v", l, err)
			}
			r.pkts = append(r.pkts, p)
		}
	}
	if len(r.lines) != len(r.pkts) {
		t.Fatalf("%d packet lines, %d JSON packets", len(r.lines), len(r.pkts))
	}
	return r
}

// renderLine prints p as a text packet line.
func renderLine(p Packet) string {
	var b bytes.Buffer
	newOutput(&b, false).packet(&p)
	return strings.TrimSuffix(b.String(), "\n")
}

// roceHeaderLen returns the length of a RoCEv2 Ethernet frame's headers, Ethernet to the
// last extension header of its BTH opcode (0 if it is not RoCEv2, or too short to tell).
func roceHeaderLen(b []byte) int {
	if len(b) < 14 {
		return 0
	}
	n := 14
	switch binary.BigEndian.Uint16(b[12:]) {
	case 0x0800:
		if len(b) < n+20 || b[n+9] != 17 {
			return 0
		}
		n += int(b[n]&0x0f) * 4
	case 0x86dd:
		if len(b) < n+40 || b[n+6] != 17 {
			return 0
		}
		n += 40
	default:
		return 0
	}
	if len(b) < n+8+ibtransport.BTHLen || binary.BigEndian.Uint16(b[n+2:]) != 4791 {
		return 0
	}
	n += 8
	return n + ibtransport.Opcode(b[n]).HeaderLen()
}

// snapCheck is what checkSnapped found: the RoCE frames whose headers were cut, and the
// iWARP packets of the whole capture missing from the cut one.
type snapCheck struct {
	headersCut int
	missing    []Packet
}

// checkSnapped compares the decode of a capture whose frames were cut (cut; its frames
// are frames) with the decode of the whole capture (full). Every RoCE packet is there,
// in the same order: one whose headers were cut as today, with opcode "?" and the
// cut-short error; every other one with the whole capture's line and fields, but for
// the cut marker (the frame's error), "not verified" for its ICRC, and a QP1 MAD that
// the cut leaves out. So is every FPDU but those lost where an FPDU's headers were cut
// (the stream then resynchronises, as before this change: missing), for which the
// marker may be a note when the FPDU ends in a frame after the one cut. With flows, and
// nothing missing, the flows are the whole capture's but for their errors (the cut
// frames), their cut count (the same) and, for iWARP, the bytes lost.
// headersCutBefore reports whether a frame before frame had its headers cut.
func headersCutBefore(headersCut map[int]bool, frame int) bool {
	for f := range headersCut {
		if f < frame {
			return true
		}
	}
	return false
}

func checkSnapped(t *testing.T, where string, whole, frames []frameOut, full, cut decodedRun, flows bool) snapCheck {
	t.Helper()
	var sc snapCheck
	headersCut := map[int]bool{}
	wasCut := map[int]bool{}
	for i, f := range frames {
		if f.ci.CaptureLength < f.ci.Length {
			wasCut[i+1] = true
			if h := roceHeaderLen(whole[i].data); h > f.ci.CaptureLength {
				headersCut[i+1] = true
			}
		}
	}
	sc.headersCut = len(headersCut)
	cutPackets, j := 0, 0
	for i, c := range cut.pkts {
		for j < len(full.pkts) && (full.pkts[j].Frame != c.Frame || full.pkts[j].Opcode != c.Opcode && c.Opcode != "?") {
			sc.missing = append(sc.missing, full.pkts[j])
			j++
		}
		if j == len(full.pkts) {
			t.Errorf("%s: packet %d (frame %d) is not in the whole capture", where, i, c.Frame)
			break
		}
		f := full.pkts[j]
		line, fullLine := cut.lines[i], full.lines[j]
		j++
		if f.Error != "" || f.Cut {
			t.Errorf("%s: frame %d: whole, error %q", where, f.Frame, f.Error)
			continue
		}
		orig := whole[c.Frame-1].ci
		if c.PSNGap != nil && f.PSNGap == nil && headersCutBefore(headersCut, c.Frame) {
			// A frame whose headers the capture cut is in no statistic: the next
			// PSN of its direction shows the gap.
			line = strings.Replace(line, fmt.Sprintf(" [PSN gap: %d missing before]", *c.PSNGap), "", 1)
			c.PSNGap = nil
		}
		if headersCut[c.Frame] {
			// As before this change: no field but the addresses, and the error.
			want := fmt.Sprintf("%6d %11.6f %s → %s %s ? [ERROR: frame cut short by the capture (%d of %d bytes): ",
				f.Frame, f.Time, f.Src, f.Dst, f.Transport, frames[c.Frame-1].ci.CaptureLength, orig.Length)
			if c.Cut || c.Opcode != "?" || !strings.HasPrefix(line, want) || !strings.HasSuffix(line, "]") {
				t.Errorf("%s: frame %d, its headers cut:\n got %q\nwant %q…", where, c.Frame, line, want)
			}
			continue
		}
		if !c.Cut {
			if !reflect.DeepEqual(c, f) || line != fullLine {
				t.Errorf("%s: frame %d, not cut:\n got %q\nwant %q", where, c.Frame, line, fullLine)
			}
			continue
		}
		cutPackets++
		marker := " [ERROR: " + c.Error + "]"
		if c.Error == "" {
			marker = " [note: " + c.Note + "]"
			if !strings.Contains(c.Note, "cut short by the capture at frame") || c.Transport != "iWARP" {
				t.Errorf("%s: frame %d: cut packet without the cut error: %q", where, c.Frame, line)
			}
		} else if !strings.Contains(c.Error, "cut short by the capture (") || !strings.Contains(c.Error, "headers decoded") {
			t.Errorf("%s: frame %d: error %q does not say the frame was cut after its headers", where, c.Frame, c.Error)
		}
		if c.Transport != "iWARP" && (c.OrigLen != orig.Length || c.CapLen != frames[c.Frame-1].ci.CaptureLength || !wasCut[c.Frame]) {
			t.Errorf("%s: frame %d: orig_len %d cap_len %d, want %d and %d", where, c.Frame, c.OrigLen, c.CapLen, orig.Length, frames[c.Frame-1].ci.CaptureLength)
		}
		if !strings.Contains(line, marker) {
			t.Errorf("%s: frame %d: line %q lacks its marker %q", where, c.Frame, line, marker)
		}
		got := strings.Replace(line, marker, "", 1)
		want := f
		n := c
		n.Cut, n.OrigLen, n.CapLen, n.Error, n.Note = false, 0, 0, "", ""
		if n.ICRC == "not verified" {
			n.ICRC = "ok"
		}
		if n.CRC == "not verified" {
			got = strings.Replace(got, " CRC not verified", " CRC ok", 1)
			n.CRC = "ok"
		}
		wantLine := fullLine
		if f.MAD != nil && c.MAD == nil && strings.Contains(c.Error, "MAD not decoded") {
			want.MAD = nil
			wantLine = renderLine(want)
		}
		if !reflect.DeepEqual(n, want) || got != wantLine {
			gj, _ := json.Marshal(c)
			wj, _ := json.Marshal(f)
			t.Errorf("%s: frame %d:\n got %q\nwant %q\n got %s\nwant %s", where, c.Frame, line, fullLine, gj, wj)
		}
	}
	sc.missing = append(sc.missing, full.pkts[j:]...)
	for _, m := range sc.missing {
		if m.Transport != "iWARP" {
			t.Errorf("%s: frame %d (%s %s) missing", where, m.Frame, m.Transport, m.Opcode)
		}
	}

	// Errors: the frames cut after their headers are Cut; the others are RoCE frames
	// whose headers were cut, or TCP segments cut inside an FPDU's headers (as today).
	res := cut.res
	cutErrors, plain, rdma := 0, 0, map[int]bool{}
	for _, f := range full.res.RDMAFrameNumbers {
		rdma[f] = true
	}
	plainRE := regexp.MustCompile(`^tcp \S+ → \S+: frame cut short by the capture \([0-9]+ of [0-9]+ bytes\)$`)
	for _, e := range res.Errors {
		switch {
		case e.Cut:
			cutErrors++
			if !wasCut[e.Frame] || !strings.Contains(e.Reason, "cut short by the capture") {
				t.Errorf("%s: cut error %v", where, e)
			}
		case headersCut[e.Frame]:
		case plainRE.MatchString(e.Reason) && len(sc.missing) > 0:
			plain++
		default:
			t.Errorf("%s: error %v (not a frame cut inside its RoCE or FPDU headers)", where, e)
		}
		rdma[e.Frame] = true
	}
	if res.Cut != cutErrors || res.Cut < cutPackets-countNotes(cut.pkts) || res.Cut+len(headersCut)+plain != len(res.Errors) {
		t.Errorf("%s: Result.Cut %d, %d errors marked cut, %d cut packets, %d errors, %d frames with their headers cut",
			where, res.Cut, cutErrors, cutPackets, len(res.Errors), len(headersCut))
	}
	if res.Cut > 0 {
		if res.ExitCode() != 1 {
			t.Errorf("%s: exit %d with %d frames cut", where, res.ExitCode(), res.Cut)
		}
		head := fmt.Sprintf("%d errors (%d frames cut by the snap length, headers decoded; none bad otherwise)\n", len(res.Errors), res.Cut)
		if other := len(res.Errors) - res.Cut; other > 0 {
			head = fmt.Sprintf("%d errors (%d frames cut by the snap length, headers decoded; %d other errors)\n", len(res.Errors), res.Cut, other)
		}
		if !strings.Contains(cut.text, head) || !strings.Contains(cut.text, "cut short by the capture's snap length after their headers") {
			t.Errorf("%s: summary does not say %q:\n%s", where, head, cut.text[strings.LastIndex(cut.text, "\n\n"):])
		}
	}
	if cut.summary.Summary.Cut != res.Cut || cut.summary.Summary.Errors != len(res.Errors) {
		t.Errorf("%s: JSON summary cut %d errors %d, want %d and %d", where, cut.summary.Summary.Cut, cut.summary.Summary.Errors, res.Cut, len(res.Errors))
	}
	var wantRDMA []int
	for f := range rdma {
		wantRDMA = append(wantRDMA, f)
	}
	sort.Ints(wantRDMA)
	if fmt.Sprint(res.RDMAFrameNumbers) != fmt.Sprint(wantRDMA) {
		t.Errorf("%s: RDMA frames\n %v\nwant (the whole capture's and the frames in error)\n %v", where, res.RDMAFrameNumbers, wantRDMA)
	}
	if len(sc.missing) > 0 {
		// The stream lost an FPDU's headers: what follows is found again as before.
		resync := false
		for _, n := range res.Notes {
			resync = resync || strings.Contains(n.Reason, "FPDU framing resynchronised")
		}
		if !resync {
			t.Errorf("%s: %d packets missing but no resynchronisation: notes %v", where, len(sc.missing), res.Notes)
		}
		return sc
	}
	if fmt.Sprint(res.Notes) != fmt.Sprint(full.res.Notes) {
		t.Errorf("%s: notes %v, want %v", where, res.Notes, full.res.Notes)
	}
	if !flows {
		return sc
	}
	if len(res.Flows) != len(full.res.Flows) {
		t.Fatalf("%s: %d flows, want %d", where, len(res.Flows), len(full.res.Flows))
	}
	flowCut := 0
	for i, g := range res.Flows {
		w := full.res.Flows[i]
		if g.Cut != g.Errors || w.Errors != 0 {
			t.Errorf("%s: flow %d: %d errors, %d cut (whole: %d errors)", where, i, g.Errors, g.Cut, w.Errors)
		}
		flowCut += g.Cut
		g.Errors, g.Cut, g.LostBytes = 0, 0, 0
		if !reflect.DeepEqual(g, w) {
			gj, _ := json.Marshal(g)
			wj, _ := json.Marshal(w)
			t.Errorf("%s: flow %d:\n got %s\nwant %s", where, i, gj, wj)
		}
	}
	if flowCut != res.Cut {
		t.Errorf("%s: the flows count %d cut frames, the result %d", where, flowCut, res.Cut)
	}
	return sc
}

// countNotes counts the cut packets whose cut another frame's error reported.
func countNotes(pkts []Packet) int {
	n := 0
	for _, p := range pkts {
		if p.Cut && p.Error == "" {
			n++
		}
	}
	return n
}

// snapRun decodes a capture whole and with every frame cut to snapLen bytes.
func snapRun(t *testing.T, name string, snapLen int) (whole, frames []frameOut, full, cut decodedRun) {
	t.Helper()
	whole = readFrames(t, readFile(t, filepath.Join(captureDir, name)))
	full = decodeRun(t, writeCapture(t, whole, layers.LinkTypeEthernet, false))
	frames = snap(whole, snapLen)
	cut = decodeRun(t, writeCapture(t, frames, layers.LinkTypeEthernet, false))
	return whole, frames, full, cut
}

// TestSnapLengthHeadersDecoded cuts every frame of every capture to 128 bytes (tcpdump
// -s 128, softrdma bench's default --pcap-snaplen). Every RoCE frame's headers fit, and
// siw's FPDUs each end in one segment (some after a second, uncut, segment): every
// packet is decoded with the whole capture's line but for the cut marker, the flows are
// the whole capture's but for their errors, every error is a frame cut after its headers
// (counted in Result.Cut, the JSON summary's "cut" and the summary line), the exit
// status is 1 where a frame was cut, and nothing needed resynchronising (no notes). The
// exception is siw-read-bw: two of its segments hold two Read Request FPDUs, the second
// cut inside its headers; the stream resynchronises after each (as before this change),
// and the three Read Requests before the FPDU framing is found again are missing.
func TestSnapLengthHeadersDecoded(t *testing.T) {
	wantMissing := map[string]string{"siw-read-bw.pcap": "[34 45 45]"}
	for _, file := range captureFiles(t) {
		name := filepath.Base(file)
		whole, frames, full, cut := snapRun(t, name, 128)
		sc := checkSnapped(t, name+" snap 128", whole, frames, full, cut, true)
		var missing []int
		for _, m := range sc.missing {
			missing = append(missing, m.Frame)
		}
		if sc.headersCut != 0 || fmt.Sprint(missing) != wantMissing[name] && missing != nil {
			t.Errorf("%s: %d frames with their RoCE headers cut at 128 bytes, packets of frames %v missing", name, sc.headersCut, missing)
		}
		long := false
		for _, f := range full.res.RDMAFrameNumbers {
			long = long || len(whole[f-1].data) > 128
		}
		if long != (cut.res.Cut > 0) {
			t.Errorf("%s: %d frames cut after their headers; RDMA frames longer than 128 bytes: %v", name, cut.res.Cut, long)
		}
	}
}

// TestSnapLengthWriteFirstHeaders cuts every frame of the RDMA WRITE and READ captures to
// exactly the headers of a WRITE First (or READ Request) with its RETH: 14+20+8+12+16 =
// 70 bytes, where those are decoded like the others (DMALen and all); and one byte less,
// where they are as before this change (opcode "?", the cut-short error naming the IPv4
// total length, left out of the flows), while every other RoCE frame is still decoded.
func TestSnapLengthWriteFirstHeaders(t *testing.T) {
	const writeFirst = 14 + 20 + 8 + ibtransport.BTHLen + ibtransport.RETHLen
	for _, name := range []string{"rxe-write-bw.pcap", "rxe-read-bw.pcap"} {
		whole, frames, full, cut := snapRun(t, name, writeFirst)
		if sc := checkSnapped(t, fmt.Sprintf("%s snap %d", name, writeFirst), whole, frames, full, cut, true); sc.headersCut != 0 {
			t.Errorf("%s: %d frames with their headers cut at %d bytes", name, sc.headersCut, writeFirst)
		}
		if !strings.Contains(cut.text, " RETH VA=0x") || strings.Contains(cut.text, " ? ") {
			t.Errorf("%s snap %d: RETH not decoded", name, writeFirst)
		}
		whole, frames, full, cut = snapRun(t, name, writeFirst-1)
		n := checkSnapped(t, fmt.Sprintf("%s snap %d", name, writeFirst-1), whole, frames, full, cut, false).headersCut
		if n != 5 || cut.res.Cut == 0 || strings.Contains(cut.text, " RETH ") {
			t.Errorf("%s snap %d: %d frames with their headers cut (want the 5 with a RETH), %d cut after them", name, writeFirst-1, n, cut.res.Cut)
		}
		for _, e := range cut.res.Errors {
			if !e.Cut && !strings.Contains(e.Reason, "ipv4: total length") {
				t.Errorf("%s snap %d: error %v", name, writeFirst-1, e)
			}
		}
	}
}

// TestFPDUCutAtHeaders cuts one Write FPDU's segment (with and without CRCs) to exactly
// its headers, 14+20+32 (TCP with timestamps) + 2 (MPA length) + 14 (tagged DDP) = 82
// bytes: the FPDU is decoded with the whole capture's line but for its cut marker (and
// "CRC not verified" for "CRC ok"), the one error is Cut, nothing is lost after it. One
// byte less, as before this change: the FPDU is not decoded, its frame is a plain
// cut-short error, and the stream resynchronises at the next FPDU, which is decoded.
func TestFPDUCutAtHeaders(t *testing.T) {
	const headers = 14 + 20 + 32 + 2 + 14
	for _, tc := range []struct {
		name  string
		frame int
	}{{"siw-write-bw.pcap", 49}, {"siw-crc-write-bw.pcap", 49}} {
		whole := readFrames(t, readFile(t, filepath.Join(captureDir, tc.name)))
		full := decodeRun(t, writeCapture(t, whole, layers.LinkTypeEthernet, false))
		for _, n := range []int{headers, headers - 1} {
			frames := cutFrame(whole, tc.frame, n)
			cut := decodeRun(t, writeCapture(t, frames, layers.LinkTypeEthernet, false))
			where := fmt.Sprintf("%s frame %d cut to %d bytes", tc.name, tc.frame, n)
			sc := checkSnapped(t, where, whole, frames, full, cut, true)
			var missing []int
			for _, m := range sc.missing {
				missing = append(missing, m.Frame)
			}
			wantCut, wantMissing := 1, "[]"
			if n < headers {
				wantCut, wantMissing = 0, fmt.Sprint([]int{tc.frame})
			}
			if cut.res.Cut != wantCut || len(cut.res.Errors) != 1 || cut.res.Errors[0].Frame != tc.frame || fmt.Sprint(missing) != wantMissing {
				t.Errorf("%s: %d cut, errors %v, packets of frames %v missing (want %d cut, %s missing)", where, cut.res.Cut, cut.res.Errors, missing, wantCut, wantMissing)
			}
			if n == headers && tc.name == "siw-crc-write-bw.pcap" && !strings.Contains(cut.text, " CRC not verified [ERROR: ") {
				t.Errorf("%s: the FPDU's CRC is not said to be not verified", where)
			}
		}
	}
}

// TestCutJSON: a cut packet's JSON object says "cut", "orig_len" and "cap_len", its ICRC
// is "not verified", its error is in the summary's error list with "cut": true, and the
// summary counts it in "cut".
func TestCutJSON(t *testing.T) {
	whole := readFrames(t, readFile(t, filepath.Join(captureDir, "rxe-write-bw.pcap")))
	_, js, err := decodeBytes(t, writeCapture(t, cutFrame(whole, 20, 128), layers.LinkTypeEthernet, false), Options{JSON: true, Flows: true, Summary: true})
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"frame":20,"time":1.054616,"src":"10.77.0.22","dst":"10.77.0.21","transport":"RoCEv2","opcode":"RC RDMA WRITE First","dest_qp":20,"psn":7564821,"ack_req":false,"payload_len":1024,"reth":{"va":94372889407488,"rkey":1288,"dma_len":4096},"icrc":"not verified","cut":true,"orig_len":1098,"cap_len":128,"error":"frame cut short by the capture (128 of 1098 bytes) after its headers: headers decoded, ICRC not verified"}`
	if got := frameLine(js, 20, true); got != want {
		t.Errorf("frame 20:\n got %s\nwant %s", got, want)
	}
	for _, s := range []string{`"errors":1,"cut":1,`, `"error_list":[{"frame":20,"reason":"frame cut short by the capture (128 of 1098 bytes) after its headers: headers decoded, ICRC not verified","cut":true}]`, `"errors":1,"cut":1,"first"`} {
		if !strings.Contains(js, s) {
			t.Errorf("JSON summary lacks %s:\n%s", s, js[strings.LastIndex(js, `{"summary"`):])
		}
	}
}
