package iwarp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

const captureDir = "../testdata/captures"

var siwCaptures = []string{
	"siw-rping.pcap", "siw-write-bw.pcap", "siw-read-bw.pcap", "siw-send-bw.pcap",
	"siw-crc-rping.pcap", "siw-crc-write-bw.pcap",
}

// segment is a piece of one direction of a TCP connection, in capture order, after
// reassembly (retransmitted octets removed, out-of-order segments held back).
type segment struct {
	conn string // "a:p-b:q" with the SYN sender first
	dir  int    // 0: sent by the SYN sender, 1: by the other end
	data []byte
}

type tcpDir struct {
	next    uint32
	synced  bool
	pending map[uint32][]byte
}

// readTCPSegments does a minimal TCP reassembly of a capture: per direction, octets in
// sequence order, each exactly once, emitted in the order the capture completes them.
func readTCPSegments(t testing.TB, name string) []segment {
	t.Helper()
	f, err := os.Open(filepath.Join(captureDir, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	dirs := map[string]*tcpDir{} // by "src-dst"
	conns := map[string]string{} // "src-dst" -> conn key
	var out []segment
	for {
		data, _, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		pkt := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.NoCopy)
		ip, _ := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		tcp, _ := pkt.Layer(layers.LayerTypeTCP).(*layers.TCP)
		if ip == nil || tcp == nil {
			continue
		}
		src := fmt.Sprintf("%v:%d", ip.SrcIP, tcp.SrcPort)
		dst := fmt.Sprintf("%v:%d", ip.DstIP, tcp.DstPort)
		fwd, rev := src+"-"+dst, dst+"-"+src
		if _, ok := conns[fwd]; !ok {
			// The first packet seen of a connection is its SYN in these captures.
			conns[fwd], conns[rev] = fwd, fwd
		}
		conn := conns[fwd]
		dir := 0
		if conn != fwd {
			dir = 1
		}
		d := dirs[fwd]
		if d == nil {
			d = &tcpDir{pending: map[uint32][]byte{}}
			dirs[fwd] = d
		}
		if tcp.SYN {
			d.next, d.synced = tcp.Seq+1, true
			continue
		}
		if !d.synced {
			d.next, d.synced = tcp.Seq, true
		}
		payload := append([]byte(nil), tcp.Payload...)
		if len(payload) == 0 {
			continue
		}
		d.pending[tcp.Seq] = payload
		for progressed := true; progressed; {
			progressed = false
			for seq, p := range d.pending {
				off := int32(d.next - seq)
				if off < 0 {
					continue // a hole before it
				}
				delete(d.pending, seq)
				progressed = true
				if int(off) >= len(p) {
					continue // retransmitted
				}
				p = p[off:]
				d.next += uint32(len(p))
				out = append(out, segment{conn: conn, dir: dir, data: p})
			}
		}
	}
	for k, d := range dirs {
		if len(d.pending) > 0 {
			t.Errorf("%s %s: %d segments never fitted", name, k, len(d.pending))
		}
	}
	return out
}

// decoded is what the tests keep of a record (the record's slices do not outlive the
// callback).
type decoded struct {
	conn       string
	dir        int
	kind       RecordKind
	offset     uint64
	length     int
	mpa        []byte
	fpdu       []byte
	opcode     Opcode
	crcChecked bool
	err        error
}

func keep(conn string, dir int, r *Record) decoded {
	k := decoded{conn: conn, dir: dir, kind: r.Kind, offset: r.Offset, length: r.Len,
		crcChecked: r.CRCChecked, err: r.Err}
	switch r.Kind {
	case RecordMPAFrame:
		k.mpa = append([]byte(nil), r.MPA...)
	case RecordFPDU:
		k.fpdu = append([]byte(nil), r.FPDU...)
		if r.RDMAP != nil {
			k.opcode = r.RDMAP.Opcode()
		}
	}
	return k
}

// decodeSegments feeds each connection's two directions to a pair of decoders sharing
// a Negotiation, in capture order, and returns all records.
func decodeSegments(segs []segment) []decoded {
	type pair struct{ d [2]*StreamDecoder }
	pairs := map[string]*pair{}
	var order []string
	var out []decoded
	for _, s := range segs {
		p := pairs[s.conn]
		if p == nil {
			p = &pair{}
			neg := new(Negotiation)
			for dir := range 2 {
				conn, dir := s.conn, dir
				p.d[dir] = NewStreamDecoder(neg, func(r *Record) {
					out = append(out, keep(conn, dir, r))
				})
			}
			pairs[s.conn] = p
			order = append(order, s.conn)
		}
		p.d[s.dir].Write(s.data)
	}
	for _, c := range order {
		for _, d := range pairs[c].d {
			d.Close()
		}
	}
	return out
}

// tsharkCounts is what logs/analyze.txt says tshark decoded in one capture.
type tsharkCounts struct {
	mpaFrames int            // start frames + FPDUs
	opcodes   map[string]int // "Send (0x3)" -> count
	crcGood   int
	crcBad    int
	crcZero   int
}

func readAnalyze(t *testing.T) map[string]*tsharkCounts {
	t.Helper()
	f, err := os.Open(filepath.Join(captureDir, "logs", "analyze.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	head := regexp.MustCompile(`^=== (\S+):`)
	mpa := regexp.MustCompile(`^\s+MPA frames: (\d+)`)
	crc := regexp.MustCompile(`CRC check: good=(\d+) bad=(\d+) \(FPDU CRC fields of 0: (\d+)\)`)
	op := regexp.MustCompile(`^\s+(\d+) (.+ \(0x[0-9a-f]+\))$`)
	m := map[string]*tsharkCounts{}
	var cur *tsharkCounts
	inOps := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if g := head.FindStringSubmatch(line); g != nil {
			cur = &tsharkCounts{opcodes: map[string]int{}}
			m[g[1]] = cur
			inOps = false
			continue
		}
		if cur == nil {
			continue
		}
		if g := mpa.FindStringSubmatch(line); g != nil {
			cur.mpaFrames, _ = strconv.Atoi(g[1])
		}
		if g := crc.FindStringSubmatch(line); g != nil {
			cur.crcGood, _ = strconv.Atoi(g[1])
			cur.crcBad, _ = strconv.Atoi(g[2])
			cur.crcZero, _ = strconv.Atoi(g[3])
		}
		if strings.TrimSpace(line) == "RDMAP opcodes:" {
			inOps = true
			continue
		}
		if inOps {
			g := op.FindStringSubmatch(line)
			if g == nil {
				inOps = false
				continue
			}
			n, _ := strconv.Atoi(g[1])
			cur.opcodes[g[2]] = n
		}
	}
	return m
}

func TestCapturesDecode(t *testing.T) {
	want := readAnalyze(t)
	for _, name := range siwCaptures {
		t.Run(name, func(t *testing.T) {
			w := want[name]
			if w == nil {
				t.Fatalf("%s not in analyze.txt", name)
			}
			recs := decodeSegments(readTCPSegments(t, name))
			ops := map[string]int{}
			var frames, fpdus, good, zero int
			for _, r := range recs {
				if r.err != nil {
					t.Errorf("%s dir %d offset %d: %v", r.conn, r.dir, r.offset, r.err)
				}
				switch r.kind {
				case RecordMPAFrame:
					frames++
				case RecordFPDU:
					fpdus++
					ops[fmt.Sprintf("%s (%#x)", r.opcode, uint8(r.opcode))]++
					if r.crcChecked && r.err == nil {
						good++
					}
					if FPDU(r.fpdu).CRC() == 0 {
						zero++
					}
				default:
					t.Errorf("unexpected %v record", r.kind)
				}
			}
			if frames%2 != 0 || frames == 0 {
				t.Errorf("%d MPA start frames, want a Request and a Reply per connection", frames)
			}
			if frames+fpdus != w.mpaFrames {
				t.Errorf("%d frames + %d FPDUs, tshark counts %d MPA PDUs", frames, fpdus, w.mpaFrames)
			}
			if fmt.Sprint(ops) != fmt.Sprint(w.opcodes) {
				t.Errorf("opcodes %v, tshark %v", ops, w.opcodes)
			}
			if good != w.crcGood || zero != w.crcZero || w.crcBad != 0 {
				t.Errorf("CRC good %d, zero %d; tshark good %d bad %d zero %d",
					good, zero, w.crcGood, w.crcBad, w.crcZero)
			}
		})
	}
}

// TestCapturesSplit checks that the records do not depend on how the stream is cut into
// writes: all at once, one octet at a time, and in chunks of awkward sizes.
func TestCapturesSplit(t *testing.T) {
	for _, name := range siwCaptures {
		segs := readTCPSegments(t, name)
		ref := decodeSegments(segs)
		for _, size := range []int{0, 1, 2, 3, 5, 7, 13, 64, 511, 1500, 4096} {
			// size 0: each direction in a single write, directions in order.
			var cut []segment
			for _, s := range segs {
				if size == 0 {
					if n := len(cut); n > 0 && cut[n-1].conn == s.conn && cut[n-1].dir == s.dir {
						cut[n-1].data = append(cut[n-1].data[:len(cut[n-1].data):len(cut[n-1].data)], s.data...)
						continue
					}
					cut = append(cut, s)
					continue
				}
				for b := s.data; len(b) > 0; {
					k := min(size, len(b))
					cut = append(cut, segment{conn: s.conn, dir: s.dir, data: b[:k]})
					b = b[k:]
				}
			}
			got := decodeSegments(cut)
			if !sameRecords(got, ref) {
				t.Errorf("%s in writes of %d: %d records, want %d (or different)", name, size,
					len(got), len(ref))
			}
		}
	}
}

func sameRecords(a, b []decoded) bool {
	key := func(r decoded) string {
		return fmt.Sprintf("%s/%d/%d/%v/%d/%x/%x/%v/%v", r.conn, r.dir, r.offset, r.kind,
			r.length, r.mpa, r.fpdu, r.crcChecked, r.err)
	}
	ka, kb := make([]string, len(a)), make([]string, len(b))
	for i := range a {
		ka[i] = key(a[i])
	}
	for i := range b {
		kb[i] = key(b[i])
	}
	// Records of the two directions may interleave differently; each direction's
	// sequence must be the same.
	sort.Strings(ka)
	sort.Strings(kb)
	return strings.Join(ka, "\n") == strings.Join(kb, "\n")
}
