package decode

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// TestJSON: every line of --json output is a JSON object; the packets have frame,
// transport and opcode, the last line is the summary with the totals and the flows.
func TestJSON(t *testing.T) {
	for _, file := range captureFiles(t) {
		res, out, err := decodeBytes(t, readFile(t, file), Options{JSON: true, Flows: true, Summary: true})
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(strings.NewReader(out))
		sc.Buffer(nil, 1<<20)
		var lines []map[string]any
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Fatalf("%s: line %d: %v: %s", file, len(lines)+1, err, sc.Bytes())
			}
			lines = append(lines, m)
		}
		if len(lines) != res.Packets+1 {
			t.Fatalf("%s: %d lines for %d packets", file, len(lines), res.Packets)
		}
		for i, m := range lines[:len(lines)-1] {
			for _, k := range []string{"frame", "transport", "opcode"} {
				if _, ok := m[k]; !ok {
					t.Fatalf("%s: line %d has no %q: %v", file, i+1, k, m)
				}
			}
			if _, ok := m["error"]; ok {
				t.Errorf("%s: line %d has an error: %v", file, i+1, m)
			}
		}
		sum, ok := lines[len(lines)-1]["summary"].(map[string]any)
		if !ok {
			t.Fatalf("%s: last line is not the summary", file)
		}
		if sum["frames"] != float64(res.Frames) || sum["rdma_frames"] != float64(res.RDMAFrames) || sum["errors"] != float64(0) {
			t.Errorf("%s: summary %v", file, sum)
		}
		if flows, _ := sum["flows"].([]any); len(flows) != len(res.Flows) {
			t.Errorf("%s: %d flows in JSON, %d in the result", file, len(flows), len(res.Flows))
		}
	}
	// A bad frame has "error".
	b := readFile(t, filepath.Join(captureDir, "rxe-write-bw.pcap"))
	recs := pcapRecords(t, b)
	b[recs[20].data+100] ^= 1
	_, out, _ := decodeBytes(t, b, Options{JSON: true})
	var bad map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		if m["error"] != nil {
			bad = m
		}
	}
	if bad == nil || bad["frame"] != float64(21) || !strings.Contains(bad["error"].(string), "icrc") {
		t.Errorf("corrupt frame 21: JSON %v", bad)
	}
}

// TestFormats: the same captures as pcapng, as LINUX_SLL and as raw IP decode to the same
// packets.
func TestFormats(t *testing.T) {
	for _, name := range []string{"rxe-rdma-cm-rping.pcap", "rxe-rc-pingpong-ipv6.pcap", "siw-crc-rping.pcap", "siw-read-bw.pcap"} {
		b := readFile(t, filepath.Join(captureDir, name))
		want, wantOut, err := decodeBytes(t, b, Options{})
		if err != nil {
			t.Fatal(err)
		}
		frames := readFrames(t, b)
		sll := make([]frameOut, len(frames))
		raw := make([]frameOut, len(frames))
		for i, f := range frames {
			// LINUX_SLL: a 16-byte header with the protocol in its last two bytes.
			h := make([]byte, 16, 16+len(f.data))
			binary.BigEndian.PutUint16(h[2:], 1) // ARPHRD_ETHER
			binary.BigEndian.PutUint16(h[4:], 6)
			copy(h[6:], f.data[6:12])
			copy(h[14:], f.data[12:14])
			d := append(h, f.data[14:]...)
			ci := f.ci
			ci.CaptureLength, ci.Length = len(d), len(d)
			sll[i] = frameOut{ci, d}
			d = f.data[14:]
			ci.CaptureLength, ci.Length = len(d), len(d)
			raw[i] = frameOut{ci, d}
		}
		for _, tc := range []struct {
			kind string
			data []byte
			fmt  string
		}{
			{"pcapng", writeCapture(t, frames, layers.LinkTypeEthernet, true), "pcapng"},
			{"LINUX_SLL", writeCapture(t, sll, layers.LinkTypeLinuxSLL, false), "pcap"},
			{"raw IP", writeCapture(t, raw, layers.LinkTypeRaw, false), "pcap"},
		} {
			res, out, err := decodeBytes(t, tc.data, Options{})
			if err != nil {
				t.Fatalf("%s as %s: %v", name, tc.kind, err)
			}
			if res.Format != tc.fmt || len(res.Errors) != 0 || fmt.Sprint(res.RDMAFrameNumbers) != fmt.Sprint(want.RDMAFrameNumbers) {
				t.Errorf("%s as %s: format %s, errors %v, RDMA frames %v, want %v", name, tc.kind, res.Format, res.Errors, res.RDMAFrameNumbers, want.RDMAFrameNumbers)
			}
			if tc.kind == "pcapng" && out != wantOut {
				t.Errorf("%s as pcapng: output differs", name)
			}
		}
	}
}

// tcpFrame builds an Ethernet/IPv4/TCP frame like tmpl with another sequence number and
// payload.
func tcpFrame(t testing.TB, tmpl []byte, seq uint32, payload []byte) []byte {
	t.Helper()
	p := gopacket.NewPacket(tmpl, layers.LayerTypeEthernet, gopacket.Default)
	eth := *p.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	ip := *p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	tcp := *p.Layer(layers.LayerTypeTCP).(*layers.TCP)
	tcp.Seq = seq
	if err := tcp.SetNetworkLayerForChecksum(&ip); err != nil {
		t.Fatal(err)
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		&eth, &ip, &tcp, gopacket.Payload(payload)); err != nil {
		t.Fatal(err)
	}
	return append([]byte(nil), buf.Bytes()...)
}

// resegment rewrites the TCP data segments of an iWARP capture with fn, which returns the
// (sequence offset, length) pieces to send for a segment of n bytes, in order.
func resegment(t testing.TB, frames []frameOut, fn func(i, n int) [][2]int) []frameOut {
	var out []frameOut
	for i, f := range frames {
		p := gopacket.NewPacket(f.data, layers.LayerTypeEthernet, gopacket.NoCopy)
		tcp, _ := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
		if tcp == nil || len(tcp.Payload) == 0 {
			out = append(out, f)
			continue
		}
		for _, piece := range fn(i, len(tcp.Payload)) {
			d := tcpFrame(t, f.data, tcp.Seq+uint32(piece[0]), tcp.Payload[piece[0]:piece[0]+piece[1]])
			ci := f.ci
			ci.CaptureLength, ci.Length = len(d), len(d)
			out = append(out, frameOut{ci, d})
		}
	}
	return out
}

// packetLines returns the output lines without their frame numbers and times.
func packetLines(out string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) > 2 && strings.Contains(l, "iWARP") && f[0][0] >= '0' && f[0][0] <= '9' {
			lines = append(lines, strings.Join(f[2:], " "))
		}
	}
	return lines
}

// TestTCPReassembly rewrites iWARP captures into nasty segmentations: every FPDU split in
// pieces of a few bytes, segments sent twice and overlapping, pieces swapped out of
// order. The decoder must find the same MPA frames, with no error.
func TestTCPReassembly(t *testing.T) {
	for _, name := range []string{"siw-crc-rping.pcap", "siw-read-bw.pcap", "siw-crc-write-bw.pcap"} {
		frames := readFrames(t, readFile(t, filepath.Join(captureDir, name)))
		want, wantOut, err := decodeBytes(t, writeCapture(t, frames, layers.LinkTypeEthernet, false), allOn)
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			kind string
			fn   func(i, n int) [][2]int
		}{
			{"split in 7-byte pieces", func(i, n int) (p [][2]int) {
				for o := 0; o < n; o += 7 {
					p = append(p, [2]int{o, min(7, n-o)})
				}
				return p
			}},
			{"retransmitted and overlapping", func(i, n int) [][2]int {
				h := n / 2
				return [][2]int{{0, h}, {0, h}, {h / 2, n - h/2}, {0, n}}
			}},
			{"out of order", func(i, n int) [][2]int {
				if n < 3 {
					return [][2]int{{0, n}}
				}
				a, b := n/3, 2*n/3
				return [][2]int{{b, n - b}, {a, b - a}, {0, a}}
			}},
		} {
			data := writeCapture(t, resegment(t, frames, tc.fn), layers.LinkTypeEthernet, false)
			res, out, err := decodeBytes(t, data, allOn)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Errors) != 0 || len(res.Notes) != 0 {
				t.Errorf("%s %s: errors %v notes %v", name, tc.kind, res.Errors, res.Notes)
			}
			if a, b := strings.Join(packetLines(out), "\n"), strings.Join(packetLines(wantOut), "\n"); res.Packets != want.Packets || a != b {
				t.Logf("got:\n%s\nwant:\n%s", a, b)
				t.Errorf("%s %s: %d packets, want %d; output differs", name, tc.kind, res.Packets, want.Packets)
			}
			var retrans, ooo int
			for _, f := range res.Flows {
				retrans += f.Duplicates
				ooo += f.OutOfOrder
			}
			if tc.kind == "retransmitted and overlapping" && retrans == 0 || tc.kind == "out of order" && ooo == 0 {
				t.Errorf("%s %s: flows count %d retransmissions, %d out of order", name, tc.kind, retrans, ooo)
			}
		}
	}
}

// TestMidStream drops the start of iWARP captures (handshake, MPA frames, first FPDUs):
// the decoder says so, finds the FPDU framing and decodes the rest without errors.
func TestMidStream(t *testing.T) {
	for _, tc := range []struct {
		name string
		drop int // frames dropped
	}{{"siw-rping.pcap", 12}, {"siw-crc-rping.pcap", 20}, {"siw-read-bw.pcap", 36}} {
		frames := readFrames(t, readFile(t, filepath.Join(captureDir, tc.name)))
		_, fullOut, _ := decodeBytes(t, writeCapture(t, frames, layers.LinkTypeEthernet, false), allOn)
		res, out, err := decodeBytes(t, writeCapture(t, frames[tc.drop:], layers.LinkTypeEthernet, false), allOn)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Errors) != 0 {
			t.Errorf("%s from frame %d: errors %v", tc.name, tc.drop+1, res.Errors)
		}
		mid := false
		for _, f := range res.Flows {
			mid = mid || f.MidStream
		}
		if !mid || !strings.Contains(out, "mid-stream") {
			t.Errorf("%s from frame %d: not reported as mid-stream", tc.name, tc.drop+1)
		}
		// Every FPDU that ends after the cut is found, except those of a direction
		// whose first segment after the cut starts inside an FPDU.
		lines, fullLines := packetLines(out), packetLines(fullOut)
		if len(lines) == 0 || len(lines) > len(fullLines) {
			t.Errorf("%s from frame %d: %d packets of %d", tc.name, tc.drop+1, len(lines), len(fullLines))
		}
		tail := strings.Join(fullLines[len(fullLines)-10:], "\n")
		if !strings.Contains(strings.Join(lines, "\n"), tail) {
			t.Errorf("%s from frame %d: the last FPDUs differ", tc.name, tc.drop+1)
		}
	}
}

// TestLostSegment drops one data segment in the middle of an iWARP connection (the
// capture missed it): a note, the framing is found again after it, no error.
func TestLostSegment(t *testing.T) {
	frames := readFrames(t, readFile(t, filepath.Join(captureDir, "siw-crc-rping.pcap")))
	_, fullOut, _ := decodeBytes(t, writeCapture(t, frames, layers.LinkTypeEthernet, false), allOn)
	lost := 41 // a Send FPDU of the rping exchange
	cut := append(append([]frameOut(nil), frames[:lost-1]...), frames[lost:]...)
	res, out, err := decodeBytes(t, writeCapture(t, cut, layers.LinkTypeEthernet, false), allOn)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Errors) != 0 {
		t.Errorf("errors %v", res.Errors)
	}
	found := false
	for _, n := range res.Notes {
		found = found || strings.Contains(n.Reason, "missing from the capture")
	}
	if !found {
		t.Errorf("notes %v: no lost bytes", res.Notes)
	}
	if got, want := len(packetLines(out)), len(packetLines(fullOut))-1; got != want {
		t.Errorf("%d packets after losing one segment, want %d", got, want)
	}
	var lostBytes uint64
	for _, f := range res.Flows {
		lostBytes += f.LostBytes
	}
	if lostBytes == 0 {
		t.Errorf("flows count no lost bytes")
	}
}

// TestCoalescedSegments merges consecutive data segments of a direction into one segment:
// several FPDUs per segment.
func TestCoalescedSegments(t *testing.T) {
	frames := readFrames(t, readFile(t, filepath.Join(captureDir, "siw-crc-write-bw.pcap")))
	_, wantOut, _ := decodeBytes(t, writeCapture(t, frames, layers.LinkTypeEthernet, false), allOn)
	type pend struct {
		f       frameOut
		seq     uint32
		payload []byte
		key     string
	}
	var out []frameOut
	var cur *pend
	flush := func() {
		if cur != nil {
			d := tcpFrame(t, cur.f.data, cur.seq, cur.payload)
			ci := cur.f.ci
			ci.CaptureLength, ci.Length = len(d), len(d)
			out = append(out, frameOut{ci, d})
			cur = nil
		}
	}
	for _, f := range frames {
		p := gopacket.NewPacket(f.data, layers.LayerTypeEthernet, gopacket.NoCopy)
		tcp, _ := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
		if tcp == nil || len(tcp.Payload) == 0 {
			continue // pure ACKs and the handshake's flags do not matter to the decoder
		}
		key := fmt.Sprint(tcp.SrcPort, tcp.DstPort)
		if cur != nil && cur.key == key && cur.seq+uint32(len(cur.payload)) == tcp.Seq && len(cur.payload) < 8000 {
			cur.payload = append(cur.payload, tcp.Payload...)
			continue
		}
		flush()
		cur = &pend{f: f, seq: tcp.Seq, payload: append([]byte(nil), tcp.Payload...), key: key}
	}
	flush()
	res, got, err := decodeBytes(t, writeCapture(t, out, layers.LinkTypeEthernet, false), allOn)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Errors) != 0 || len(out) >= len(frames)/2 {
		t.Errorf("errors %v (%d segments from %d frames)", res.Errors, len(out), len(frames))
	}
	if res.Packets <= res.RDMAFrames {
		t.Errorf("%d MPA frames in %d segments: not coalesced", res.Packets, res.RDMAFrames)
	}
	// The streams start without the SYNs (they were dropped): only the flow notes differ.
	a, b := packetLines(got), packetLines(wantOut)
	if len(a) != len(b) {
		t.Errorf("%d packets, want %d", len(a), len(b))
	}
}

// cook replaces the Ethernet header of each frame by a Linux cooked capture header, as
// tcpdump -i any writes it: LINUX_SLL (16 bytes, the protocol last) or LINUX_SLL2
// (20 bytes, the protocol first), with packet type outgoing and ARPHRD_ETHER.
func cook(t testing.TB, frames []frameOut, link linkType) []frameOut {
	t.Helper()
	out := make([]frameOut, len(frames))
	for i, f := range frames {
		var h []byte
		switch link {
		case linkLinuxSLL:
			h = make([]byte, 16)
			binary.BigEndian.PutUint16(h[0:], 4) // outgoing
			binary.BigEndian.PutUint16(h[2:], 1) // ARPHRD_ETHER
			binary.BigEndian.PutUint16(h[4:], 6)
			copy(h[6:], f.data[6:12])
			copy(h[14:], f.data[12:14])
		case linkLinuxSLL2:
			h = make([]byte, 20)
			copy(h[0:], f.data[12:14])
			binary.BigEndian.PutUint32(h[4:], 1) // interface index
			binary.BigEndian.PutUint16(h[8:], 1) // ARPHRD_ETHER
			h[10], h[11] = 4, 6                  // outgoing, address length
			copy(h[12:], f.data[6:12])
		default:
			t.Fatalf("cook: link type %v", link)
		}
		d := append(h, f.data[14:]...)
		ci := f.ci
		ci.CaptureLength, ci.Length = ci.CaptureLength-14+len(h), ci.Length-14+len(h)
		out[i] = frameOut{ci, d}
	}
	return out
}

// withLinkType writes frames as pcap (or pcapng with ng) of link type link: pcapgo's
// writers take gopacket's 8-bit layers.LinkType, so the header's 16 bits are set after.
func withLinkType(t testing.TB, frames []frameOut, link linkType, ng bool) []byte {
	t.Helper()
	b := writeCapture(t, frames, layers.LinkTypeNull, ng)
	if !ng {
		binary.LittleEndian.PutUint32(b[20:24], uint32(link))
		return b
	}
	for off := 0; off+12 <= len(b); {
		typ, n := binary.LittleEndian.Uint32(b[off:]), int(binary.LittleEndian.Uint32(b[off+4:]))
		if typ == ngBlockIDB {
			binary.LittleEndian.PutUint16(b[off+8:], uint16(link))
		}
		if n < 12 {
			t.Fatalf("pcapng block %#x of length %d", typ, n)
		}
		off += n
	}
	return b
}

// TestCookedCaptures: captures of tcpdump -i any, LINUX_SLL (113) and LINUX_SLL2 (276),
// in pcap and pcapng, decode to the packets and flows of the Ethernet capture (but for
// the frames' byte counts), also when the snap length cuts them (the cooked header
// taking the place of Ethernet's). gopacket's 8-bit link type read 276 as 20, which the
// decoder refused.
func TestCookedCaptures(t *testing.T) {
	for _, name := range []string{"rxe-rdma-cm-rping.pcap", "rxe-rc-pingpong-ipv6.pcap", "rxe-read-bw.pcap", "siw-crc-rping.pcap", "siw-read-bw.pcap"} {
		frames := readFrames(t, readFile(t, filepath.Join(captureDir, name)))
		for _, snapLen := range []int{0, 72, 128} {
			eth := frames
			if snapLen > 0 {
				eth = snap(frames, snapLen)
			}
			want, wantOut, err := decodeBytes(t, writeCapture(t, eth, layers.LinkTypeEthernet, false), Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, link := range []linkType{linkLinuxSLL, linkLinuxSLL2} {
				cooked := cook(t, frames, link)
				if snapLen > 0 {
					hdrLen := len(cooked[0].data) - len(frames[0].data) + 14
					cooked = snap(cooked, snapLen-14+hdrLen)
				}
				for _, ng := range []bool{false, true} {
					what := fmt.Sprintf("%s as %v (pcapng %v, snap length %d)", name, link, ng, snapLen)
					res, out, err := decodeBytes(t, withLinkType(t, cooked, link, ng), Options{})
					if err != nil {
						t.Fatalf("%s: %v", what, err)
					}
					// A cut frame's lengths, which errors name, count its link header.
					delta := len(cooked[0].data) - len(eth[0].data)
					out = unshiftLengths(out, delta)
					for i := range res.Errors {
						res.Errors[i].Reason = unshiftLengths(res.Errors[i].Reason, delta)
					}
					if fmt.Sprint(res.Errors) != fmt.Sprint(want.Errors) || fmt.Sprint(res.RDMAFrameNumbers) != fmt.Sprint(want.RDMAFrameNumbers) {
						t.Errorf("%s: errors %v, RDMA frames %v; want %v, %v", what, res.Errors, res.RDMAFrameNumbers, want.Errors, want.RDMAFrameNumbers)
					}
					if out != wantOut {
						t.Errorf("%s: packet lines differ from Ethernet's:\n%.600s\nwant\n%.600s", what, out, wantOut)
					}
					if len(res.Flows) != len(want.Flows) {
						t.Fatalf("%s: %d flows, want %d", what, len(res.Flows), len(want.Flows))
					}
					for i := range res.Flows {
						got, w := res.Flows[i], want.Flows[i]
						if got.Transport != "iWARP" {
							got.Bytes, w.Bytes = 0, 0 // the link headers' lengths differ
						}
						if !reflect.DeepEqual(got, w) {
							t.Errorf("%s: flow %d:\n%+v\nwant\n%+v", what, i, got, w)
						}
					}
				}
			}
		}
	}
}

var cutLengthsRE = regexp.MustCompile(`\(([0-9]+) of ([0-9]+) bytes\)`)

// unshiftLengths takes delta from both lengths of every "(N of M bytes)" in s.
func unshiftLengths(s string, delta int) string {
	return cutLengthsRE.ReplaceAllStringFunc(s, func(m string) string {
		v := cutLengthsRE.FindStringSubmatch(m)
		a, _ := strconv.Atoi(v[1])
		b, _ := strconv.Atoi(v[2])
		return fmt.Sprintf("(%d of %d bytes)", a-delta, b-delta)
	})
}

// TestUnknownLinkType: frames of a link type the decoder does not read are an error
// that names the link type by its number, in pcap and pcapng.
func TestUnknownLinkType(t *testing.T) {
	frames := readFrames(t, readFile(t, filepath.Join(captureDir, "rxe-send-lat.pcap")))
	for _, link := range []linkType{147, 276 + 256, 0xfffe} {
		for _, ng := range []bool{false, true} {
			res, _, err := decodeBytes(t, withLinkType(t, frames, link, ng), allOn)
			if err != nil {
				t.Fatal(err)
			}
			want := fmt.Sprintf("frame 1: link type %d (LINKTYPE %d) not supported", link, link)
			if len(res.Errors) != 1 || !strings.HasPrefix(res.Errors[0].Error(), want) || res.ExitCode() != 1 || res.RDMAFrames != 0 {
				t.Errorf("link type %d (pcapng %v): errors %v, exit %d, %d RDMA frames; want one error %q", link, ng, res.Errors, res.ExitCode(), res.RDMAFrames, want)
			}
		}
	}
}

// TestGzip: gzip-compressed captures (pcap, whose link type is read from the
// decompressed header, and pcapng) decode as the uncompressed ones do.
func TestGzip(t *testing.T) {
	frames := readFrames(t, readFile(t, filepath.Join(captureDir, "rxe-rdma-cm-rping.pcap")))
	for _, ng := range []bool{false, true} {
		plain := withLinkType(t, cook(t, frames, linkLinuxSLL2), linkLinuxSLL2, ng)
		want, wantOut, err := decodeBytes(t, plain, allOn)
		if err != nil || want.Packets == 0 {
			t.Fatalf("pcapng %v: %v, %d packets", ng, err, want.Packets)
		}
		var gz bytes.Buffer
		w := gzip.NewWriter(&gz)
		w.Write(plain)
		w.Close()
		res, out, err := decodeBytes(t, gz.Bytes(), allOn)
		if err != nil || out != wantOut || res.Format != want.Format {
			t.Errorf("gzip (pcapng %v): %v, format %s\n%.400s", ng, err, res.Format, out)
		}
	}
}
