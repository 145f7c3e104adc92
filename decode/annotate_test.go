package decode

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/gopacket/layers"

	"github.com/softrdma/softrdma/ibtransport"
)

// ngOptComment is pcapng's opt_comment.
const ngOptComment = 1

// ngFrame is one enhanced packet block of a pcapng file as the test reads it back.
type ngFrame struct {
	link     uint16
	ts       uint64 // in the interface's units (netio.CaptureWriter: nanoseconds)
	caplen   int
	origlen  int
	data     []byte
	comments []string
}

// readNg parses a little-endian pcapng file written by netio.CaptureWriter: the section header's
// comments and the frames with their link types and comments.
func readNg(t *testing.T, b []byte) (shb []string, frames []ngFrame) {
	t.Helper()
	var links []uint16
	options := func(o []byte) (comments []string) {
		for len(o) >= 4 {
			code, n := binary.LittleEndian.Uint16(o), int(binary.LittleEndian.Uint16(o[2:]))
			if code == 0 {
				break
			}
			if 4+n > len(o) {
				t.Fatalf("option %d of length %d overruns its block", code, n)
			}
			if code == ngOptComment {
				comments = append(comments, string(o[4:4+n]))
			}
			o = o[4+(n+3)&^3:]
		}
		return comments
	}
	for off := 0; off < len(b); {
		if off+12 > len(b) {
			t.Fatalf("block at %d cut short", off)
		}
		typ, n := binary.LittleEndian.Uint32(b[off:]), int(binary.LittleEndian.Uint32(b[off+4:]))
		if n < 12 || n%4 != 0 || off+n > len(b) || int(binary.LittleEndian.Uint32(b[off+n-4:])) != n {
			t.Fatalf("block %#x at %d: length %d", typ, off, n)
		}
		body := b[off+8 : off+n-4]
		switch typ {
		case 0x0a0d0d0a:
			if binary.LittleEndian.Uint32(body) != ngByteOrderMagic {
				t.Fatal("section header: byte-order magic")
			}
			shb = options(body[16:])
		case ngBlockIDB:
			links = append(links, binary.LittleEndian.Uint16(body))
			if o := body[8:]; binary.LittleEndian.Uint16(o) != ngOptionTSResol || o[4] != 9 {
				t.Fatalf("interface %d: no if_tsresol 9 option", len(links)-1)
			}
		case ngBlockEPB:
			id := binary.LittleEndian.Uint32(body)
			if int(id) >= len(links) {
				t.Fatalf("packet of interface %d before its description", id)
			}
			caplen := int(binary.LittleEndian.Uint32(body[12:]))
			f := ngFrame{link: links[id], ts: uint64(binary.LittleEndian.Uint32(body[4:]))<<32 | uint64(binary.LittleEndian.Uint32(body[8:])),
				caplen: caplen, origlen: int(binary.LittleEndian.Uint32(body[16:])), data: body[20 : 20+caplen]}
			f.comments = options(body[20+(caplen+3)&^3:])
			frames = append(frames, f)
		default:
			t.Fatalf("unexpected block type %#x", typ)
		}
		off += n
	}
	return shb, frames
}

// annotate decodes capture with verdicts and writes it annotated.
func annotate(t *testing.T, capture []byte) (Result, []byte) {
	t.Helper()
	res, _, err := decodeBytes(t, capture, Options{Verdicts: true, Summary: true, Flows: true})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Annotate(bytes.NewReader(capture), &out, &res); err != nil {
		t.Fatal(err)
	}
	return res, out.Bytes()
}

// TestAnnotate: the annotated capture keeps every frame (data, lengths, timestamp to the
// nanosecond, link type) and gives each RDMA frame its verdict: for good captures ICRC
// ok or MPA CRC ok on every RDMA frame and nothing on the others; for captures made
// bad, the verdict of the frame made bad, and the file's own problems on the section
// header and the last frame.
func TestAnnotate(t *testing.T) {
	rd := func(name string) []frameOut { return readFrames(t, readFile(t, filepath.Join(captureDir, name))) }
	pcap := func(frames []frameOut) []byte { return writeCapture(t, frames, layers.LinkTypeEthernet, false) }
	flip := func(frames []frameOut, frame int) []frameOut {
		out := append([]frameOut(nil), frames...)
		f := out[frame-1]
		f.data = append([]byte(nil), f.data...)
		f.data[len(f.data)-6] ^= 0x20
		out[frame-1] = f
		return out
	}
	without := func(frames []frameOut, frame int) []frameOut {
		return append(append([]frameOut(nil), frames[:frame-1]...), frames[frame:]...)
	}
	write := rd("rxe-write-bw.pcap")
	nak := append([]frameOut(nil), write...)
	nak[27].data = rewriteRoCE(t, nak[27].data, func(p *ibtransport.Packet) {
		p.AETH.SetSyndrome(ibtransport.NewNAKSyndrome(ibtransport.NAKPSNSequenceError))
	})
	rnr := append([]frameOut(nil), write...)
	rnr[27].data = rewriteRoCE(t, rnr[27].data, func(p *ibtransport.Packet) {
		p.AETH.SetSyndrome(ibtransport.NewRNRNAKSyndrome(14))
	})
	dup := append(append(append([]frameOut(nil), write[:23]...), write[21]), write[23:]...)
	truncated := pcap(write)
	truncated = truncated[:len(truncated)-10]

	type want struct {
		frame int
		has   []string // each in the frame's comments
	}
	for _, tc := range []struct {
		name    string
		capture []byte
		// good: every RDMA frame's comment says this, and no other frame has one.
		good  string
		wants []want
		shb   string // in the section header's comments
	}{
		{name: "rxe good", capture: pcap(write), good: "; ICRC ok",
			wants: []want{{20, []string{"softrdma: 10.77.0.22 → 10.77.0.21 RoCEv2 RC RDMA WRITE First QP=0x000014 PSN=7564821 len=1024 RETH"}}}},
		{name: "siw-crc good", capture: readFile(t, filepath.Join(captureDir, "siw-crc-rping.pcap")), good: "; MPA CRC ok",
			wants: []want{{4, []string{"iWARP MPA Request rev=2 flags=-C-H"}}, {10, []string{"iWARP Read Request", "size=64", "MPA CRC ok"}}}},
		{name: "siw no CRC", capture: readFile(t, filepath.Join(captureDir, "siw-write-bw.pcap")), good: "; no MPA CRC (not negotiated)"},
		{name: "rxe ICRC corrupted", capture: pcap(flip(write, 21)),
			wants: []want{{21, []string{"PSN=7564822", "ICRC BAD", "ERROR: icrc"}}, {22, []string{"ICRC ok"}}}},
		{name: "siw MPA CRC corrupted", capture: pcap(flip(rd("siw-crc-rping.pcap"), 8)),
			wants: []want{{8, []string{"iWARP Send", "MPA CRC BAD", "ERROR:"}}}},
		{name: "rxe PSN gap", capture: pcap(without(without(write, 22), 21)),
			wants: []want{{21, []string{"PSN=7564824", "PSN GAP: 2 PSNs missing just before this packet"}}, {22, []string{"ICRC ok"}}}},
		{name: "rxe duplicate", capture: pcap(dup),
			wants: []want{{24, []string{"PSN=7564823", "DUPLICATE"}}}},
		{name: "rxe NAK", capture: pcap(nak),
			wants: []want{{28, []string{"AETH NAK PSN sequence error", "NAK PSN sequence error: the responder expected an earlier PSN"}}}},
		{name: "rxe RNR NAK", capture: pcap(rnr),
			wants: []want{{28, []string{"RNR NAK: the responder had no receive buffer posted", "sends the request again after"}}}},
		{name: "rxe snap 100", capture: pcap(snap(write, 100)),
			wants: []want{{21, []string{"PSN=7564822", "CUT by the snap length (100 of 1082 bytes captured)"}}}},
		{name: "rxe file truncated", capture: truncated, shb: "softrdma: file: ERROR: capture file truncated",
			wants: []want{{63, []string{"softrdma: file: ERROR: capture file truncated: the record after frame 63"}}}},
		{name: "rxe as LINUX_SLL2 pcapng", capture: withLinkType(t, cook(t, write, linkLinuxSLL2), linkLinuxSLL2, true), good: "; ICRC ok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, out := annotate(t, tc.capture)
			shb, got := readNg(t, out)
			src, err := openCapture(bytes.NewReader(tc.capture))
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; ; i++ {
				data, ci, link, err := src.next()
				if err != nil {
					if i != len(got) {
						t.Fatalf("%d frames in the input, %d written", i, len(got))
					}
					break
				}
				if i >= len(got) {
					t.Fatalf("only %d frames written", len(got))
				}
				g := got[i]
				if !bytes.Equal(g.data, data) || g.caplen != ci.CaptureLength || g.origlen != ci.Length ||
					g.ts != uint64(ci.Timestamp.UnixNano()) || g.link != uint16(link) {
					t.Fatalf("frame %d: written as link %d ts %d lengths %d/%d, was link %d ts %d lengths %d/%d (or its data differs)",
						i+1, g.link, g.ts, g.caplen, g.origlen, link, ci.Timestamp.UnixNano(), ci.CaptureLength, ci.Length)
				}
			}
			if tc.good != "" {
				if len(res.Errors) != 0 {
					t.Fatalf("errors %v", res.Errors)
				}
				rdma := map[int]bool{}
				for _, f := range res.RDMAFrameNumbers {
					rdma[f] = true
				}
				for i, f := range got {
					c := strings.Join(f.comments, " | ")
					switch {
					case rdma[i+1] && !strings.Contains(c, tc.good) && !strings.Contains(c, "MPA Re"):
						t.Errorf("frame %d: comments %q, want %q", i+1, c, tc.good)
					case !rdma[i+1] && len(f.comments) > 0:
						t.Errorf("frame %d (not RDMA): comments %q", i+1, c)
					}
				}
			}
			for _, w := range tc.wants {
				c := strings.Join(got[w.frame-1].comments, " | ")
				for _, s := range w.has {
					if !strings.Contains(c, s) {
						t.Errorf("frame %d: comments %q, want %q in them", w.frame, c, s)
					}
				}
			}
			if tc.shb != "" && !strings.Contains(strings.Join(shb, " | "), tc.shb) {
				t.Errorf("section header comments %q, want %q", shb, tc.shb)
			}
		})
	}
}

// TestAnnotateTshark: tshark reads the annotated capture, with the same frame numbers
// and count as the input, and shows softrdma's verdicts as the frames' comments.
func TestAnnotateTshark(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not on PATH")
	}
	dir := t.TempDir()
	for _, name := range []string{"rxe-write-bw.pcap", "siw-crc-rping.pcap", "rxe-rdma-cm-rping.pcap"} {
		capture := readFile(t, filepath.Join(captureDir, name))
		res, out := annotate(t, capture)
		file := filepath.Join(dir, name+"ng")
		if err := os.WriteFile(file, out, 0o644); err != nil {
			t.Fatal(err)
		}
		// tshark names the comment field frame.comment (Wireshark 3.6 and later) or
		// pkt_comment (before).
		var lines []string
		for _, field := range []string{"frame.comment", "pkt_comment"} {
			cmd := exec.Command(tshark, "-r", file, "-T", "fields", "-E", "separator=\t", "-e", "frame.number", "-e", field)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			b, err := cmd.Output()
			if err != nil {
				if strings.Contains(stderr.String(), "aren't valid") {
					continue
				}
				t.Fatalf("tshark %s: %v: %s", name, err, stderr.String())
			}
			lines = strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
			break
		}
		if len(lines) != res.Frames {
			t.Fatalf("%s: tshark reads %d frames, the input has %d", name, len(lines), res.Frames)
		}
		rdma := map[int]bool{}
		for _, f := range res.RDMAFrameNumbers {
			rdma[f] = true
		}
		for i, l := range lines {
			num, comment, _ := strings.Cut(l, "\t")
			if n, err := strconv.Atoi(num); err != nil || n != i+1 {
				t.Fatalf("%s: tshark line %d is frame %q", name, i+1, num)
			}
			if rdma[i+1] != strings.HasPrefix(comment, "softrdma: ") {
				t.Errorf("%s: frame %d (RDMA %v): tshark shows comment %q", name, i+1, rdma[i+1], comment)
			}
		}
		if want := fmt.Sprintf("%d\tsoftrdma: 10.77.0.22 → 10.77.0.21 RoCEv2 RC RDMA WRITE First QP=0x000014 PSN=7564821", 20); name == "rxe-write-bw.pcap" && !strings.HasPrefix(lines[19], want) {
			t.Errorf("%s: tshark frame 20: %q, want %q…", name, lines[19], want)
		}
	}
}
