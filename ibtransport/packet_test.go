package ibtransport

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/gopacket/pcapgo"

	"github.com/softrdma/softrdma/header"
)

const capturesDir = "../testdata/captures"

// captureFrame is one RoCEv2 frame of a capture, cut down to the IB transport
// packet: BTH through pad, ICRC removed.
type captureFrame struct {
	capture string // file name without .pcap
	frame   int    // 1-based, as tshark numbers frames
	ib      []byte // BTH .. end of pad
	udpLen  int    // UDP length field
}

var (
	captureOnce   sync.Once
	captureFrames []captureFrame
	captureErr    error
)

// loadCaptureFrames reads every RoCEv2 frame (UDP destination port 4791) of
// testdata/captures/rxe-*.pcap. It is not a RoCE parser: it skips Ethernet (14),
// IPv4 (IHL*4) or IPv6 (40) and UDP (8), and drops the 4-byte ICRC.
func loadCaptureFrames(tb testing.TB) []captureFrame {
	tb.Helper()
	captureOnce.Do(func() {
		files, err := filepath.Glob(filepath.Join(capturesDir, "rxe-*.pcap"))
		if err != nil || len(files) == 0 {
			captureErr = fmt.Errorf("no captures in %s: %v", capturesDir, err)
			return
		}
		for _, file := range files {
			if err := readCapture(file); err != nil {
				captureErr = err
				return
			}
		}
	})
	if captureErr != nil {
		tb.Fatal(captureErr)
	}
	return captureFrames
}

func readCapture(file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		return fmt.Errorf("%s: %v", file, err)
	}
	name := strings.TrimSuffix(filepath.Base(file), ".pcap")
	for n := 1; ; n++ {
		data, _, err := r.ReadPacketData()
		if err != nil {
			break
		}
		if len(data) < 14 {
			continue
		}
		var udp []byte
		switch binary.BigEndian.Uint16(data[12:]) {
		case 0x0800:
			ihl := int(data[14]&0x0f) * 4
			if len(data) < 14+ihl+8 || data[14+9] != 17 {
				continue
			}
			udp = data[14+ihl:]
		case 0x86dd:
			if len(data) < 14+40+8 || data[14+6] != 17 {
				continue
			}
			udp = data[14+40:]
		default:
			continue
		}
		if binary.BigEndian.Uint16(udp[2:]) != 4791 {
			continue
		}
		udpLen := int(binary.BigEndian.Uint16(udp[4:]))
		if udpLen > len(udp) || udpLen < 8+BTHLen+4 {
			return fmt.Errorf("%s frame %d: UDP length %d, %d bytes captured", name, n, udpLen, len(udp))
		}
		ib := bytes.Clone(udp[8 : udpLen-4])
		captureFrames = append(captureFrames, captureFrame{capture: name, frame: n, ib: ib, udpLen: udpLen})
	}
	return nil
}

// wantExt is the header set of every opcode the captures contain (IBTA Vol1
// Table 35).
var wantExt = map[Opcode]ExtHeaders{
	OpcodeRCSendFirst:              0,
	OpcodeRCSendMiddle:             0,
	OpcodeRCSendLast:               0,
	OpcodeRCSendOnly:               0,
	OpcodeRCRDMAWriteFirst:         ExtRETH,
	OpcodeRCRDMAWriteMiddle:        0,
	OpcodeRCRDMAWriteLast:          0,
	OpcodeRCRDMAWriteOnly:          ExtRETH,
	OpcodeRCRDMAReadRequest:        ExtRETH,
	OpcodeRCRDMAReadResponseFirst:  ExtAETH,
	OpcodeRCRDMAReadResponseMiddle: 0,
	OpcodeRCRDMAReadResponseLast:   ExtAETH,
	OpcodeRCRDMAReadResponseOnly:   ExtAETH,
	OpcodeRCAcknowledge:            ExtAETH,
	OpcodeRCAtomicAcknowledge:      ExtAETH | ExtAtomicAckETH,
	OpcodeRCCompareSwap:            ExtAtomicETH,
	OpcodeRCFetchAdd:               ExtAtomicETH,
	OpcodeUDSendOnly:               ExtDETH,
}

// presentHeaders returns the set of non-nil extension header views of p.
func presentHeaders(p *Packet) ExtHeaders {
	var h ExtHeaders
	for _, x := range []struct {
		bit ExtHeaders
		v   []byte
	}{
		{ExtRDETH, p.RDETH}, {ExtDETH, p.DETH}, {ExtXRCETH, p.XRCETH}, {ExtFETH, p.FETH},
		{ExtRETH, p.RETH}, {ExtAtomicETH, p.AtomicETH}, {ExtAETH, p.AETH},
		{ExtAtomicAckETH, p.AtomicAckETH}, {ExtImmDt, p.ImmDt}, {ExtIETH, p.IETH},
	} {
		if x.v != nil {
			h |= x.bit
		}
	}
	return h
}

func TestDecodeCaptures(t *testing.T) {
	frames := loadCaptureFrames(t)
	if len(frames) != 495 {
		t.Errorf("%d RoCE frames in the captures, want 495 (analyze.txt)", len(frames))
	}
	var p Packet
	var f PacketFields
	for _, cf := range frames {
		name := fmt.Sprintf("%s#%d", cf.capture, cf.frame)
		if err := p.Decode(cf.ib); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		op := p.Opcode()
		want, ok := wantExt[op]
		if !ok {
			t.Errorf("%s: unexpected opcode %v", name, op)
			continue
		}
		if got := presentHeaders(&p); got != want || op.ExtHeaders() != want {
			t.Errorf("%s %v: headers %v (table %v), want %v", name, op, got, op.ExtHeaders(), want)
		}
		if got, want := p.HeaderLen(), BTHLen+want.Len(); got != want {
			t.Errorf("%s: HeaderLen %d, want %d", name, got, want)
		}
		if got, want := len(p.Payload)+len(p.Pad)+p.HeaderLen(), len(cf.ib); got != want {
			t.Errorf("%s: payload %d + pad %d + headers %d != %d", name, len(p.Payload), len(p.Pad), p.HeaderLen(), want)
		}
		// Re-encoding the decoded fields reproduces the captured headers byte for byte.
		p.Fields(&f)
		if err := f.Validate(); err != nil {
			t.Errorf("%s: Validate: %v", name, err)
		}
		hdr := AppendHeaders(nil, &f)
		if !bytes.Equal(hdr, cf.ib[:p.HeaderLen()]) {
			t.Errorf("%s: re-encoded headers\n%x\nwant\n%x", name, hdr, cf.ib[:p.HeaderLen()])
		}
	}
}

// TestDecodeCapturesMatchesTshark compares every decoded field with what tshark
// shows for the same frame.
func TestDecodeCapturesMatchesTshark(t *testing.T) {
	byKey := map[string]captureFrame{}
	for _, cf := range loadCaptureFrames(t) {
		byKey[fmt.Sprintf("%s#%d", cf.capture, cf.frame)] = cf
	}
	lines := 0
	sc := bufio.NewScanner(strings.NewReader(tsharkGolden))
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) == 0 {
			continue
		}
		if len(fs) != 22 {
			t.Fatalf("golden line %q: %d fields", sc.Text(), len(fs))
		}
		lines++
		key := fs[0] + "#" + fs[1]
		cf, ok := byKey[key]
		if !ok {
			t.Errorf("%s: tshark decodes it, the test did not find it", key)
			continue
		}
		var p Packet
		if err := p.Decode(cf.ib); err != nil {
			t.Errorf("%s: %v", key, err)
			continue
		}
		num := func(i int) (uint64, bool) {
			if fs[i] == "-" {
				return 0, false
			}
			v, err := strconv.ParseUint(fs[i], 0, 64)
			if err != nil {
				t.Fatalf("%s: field %d %q: %v", key, i, fs[i], err)
			}
			return v, true
		}
		check := func(what string, i int, got uint64, present bool) {
			t.Helper()
			want, ok := num(i)
			if ok != present {
				t.Errorf("%s: %s present=%v, tshark %q", key, what, present, fs[i])
				return
			}
			if ok && got != want {
				t.Errorf("%s: %s = %#x, tshark %#x", key, what, got, want)
			}
		}
		b := func(v bool) uint64 {
			if v {
				return 1
			}
			return 0
		}
		h := p.BTH
		check("opcode", 2, uint64(h.Opcode()), true)
		check("SE", 3, b(h.SE()), true)
		check("MigReq", 4, b(h.MigReq()), true)
		check("PadCount", 5, uint64(h.PadCount()), true)
		check("TVer", 6, uint64(h.TVer()), true)
		check("PKey", 7, uint64(h.PKey()), true)
		check("DestQP", 8, uint64(h.DestQP()), true)
		check("AckReq", 9, b(h.AckReq()), true)
		check("PSN", 10, uint64(h.PSN()), true)
		switch {
		case p.RETH != nil:
			check("RETH.VA", 11, p.RETH.VA(), true)
			check("RETH.RKey", 12, uint64(p.RETH.RKey()), true)
			check("RETH.DMALen", 13, uint64(p.RETH.DMALen()), true)
		case p.AtomicETH != nil:
			check("AtomicETH.VA", 11, p.AtomicETH.VA(), true)
			check("AtomicETH.RKey", 12, uint64(p.AtomicETH.RKey()), true)
			check("AtomicETH.SwapAdd", 14, p.AtomicETH.SwapAdd(), true)
			check("AtomicETH.Compare", 15, p.AtomicETH.Compare(), true)
		default:
			check("VA", 11, 0, false)
		}
		check("AETH.Syndrome", 16, uint64(p.AETH.syndromeOrZero()), p.AETH != nil)
		check("AETH.MSN", 17, uint64(p.AETH.msnOrZero()), p.AETH != nil)
		if p.DETH != nil {
			check("DETH.QKey", 18, uint64(p.DETH.QKey()), true)
			check("DETH.SrcQP", 19, uint64(p.DETH.SrcQP()), true)
		} else {
			check("DETH.QKey", 18, 0, false)
		}
		if p.AtomicAckETH != nil {
			check("AtomicAckETH.OrigData", 20, p.AtomicAckETH.OrigData(), true)
		} else {
			check("AtomicAckETH.OrigData", 20, 0, false)
		}
		// UDP length = UDP header + headers + payload + pad + ICRC.
		check("UDP length", 21, uint64(8+p.HeaderLen()+len(p.Payload)+len(p.Pad)+4), true)
	}
	if lines != len(byKey) {
		t.Errorf("%d golden lines, %d RoCE frames", lines, len(byKey))
	}
}

func (h AETH) syndromeOrZero() AETHSyndrome {
	if h == nil {
		return 0
	}
	return h.Syndrome()
}

func (h AETH) msnOrZero() uint32 {
	if h == nil {
		return 0
	}
	return h.MSN()
}

// TestCaptureOpcodeCounts counts the opcodes of each capture and compares the counts
// and tshark's opcode names with logs/analyze.txt.
func TestCaptureOpcodeCounts(t *testing.T) {
	text, err := os.ReadFile(filepath.Join(capturesDir, "logs", "analyze.txt"))
	if err != nil {
		t.Fatal(err)
	}
	// "=== rxe-read-bw.pcap: ..." starts a section; "  N Reliable Connection (RC) -
	// RDMA READ Request (12)" lines follow "BTH opcodes:".
	section := regexp.MustCompile(`^=== (\S+)\.pcap:`)
	opLine := regexp.MustCompile(`^\s+(\d+) (.+) \((\d+)\)$`)
	want := map[string]map[Opcode]int{}
	var cur string
	inOps := false
	for _, line := range strings.Split(string(text), "\n") {
		if m := section.FindStringSubmatch(line); m != nil {
			cur, inOps = m[1], false
			continue
		}
		if strings.TrimSpace(line) == "BTH opcodes:" {
			inOps = true
			continue
		}
		if !inOps {
			continue
		}
		m := opLine.FindStringSubmatch(line)
		if m == nil {
			inOps = false
			continue
		}
		n, _ := strconv.Atoi(m[1])
		code, _ := strconv.Atoi(m[3])
		op := Opcode(code)
		if got := op.WiresharkName(); got != m[2] {
			t.Errorf("%s: opcode %d: WiresharkName %q, tshark %q", cur, code, got, m[2])
		}
		if want[cur] == nil {
			want[cur] = map[Opcode]int{}
		}
		want[cur][op] = n
	}
	if len(want) != 12 {
		t.Fatalf("analyze.txt: opcode counts for %d rxe captures, want 12", len(want))
	}
	got := map[string]map[Opcode]int{}
	var p Packet
	for _, cf := range loadCaptureFrames(t) {
		if err := p.Decode(cf.ib); err != nil {
			t.Fatalf("%s#%d: %v", cf.capture, cf.frame, err)
		}
		if got[cf.capture] == nil {
			got[cf.capture] = map[Opcode]int{}
		}
		got[cf.capture][p.Opcode()]++
	}
	for capture, w := range want {
		g := got[capture]
		for op, n := range w {
			if g[op] != n {
				t.Errorf("%s: %v: %d packets, analyze.txt %d", capture, op, g[op], n)
			}
		}
		for op, n := range g {
			if _, ok := w[op]; !ok {
				t.Errorf("%s: %v: %d packets, not in analyze.txt", capture, op, n)
			}
		}
	}
}

func TestDecodeAllocs(t *testing.T) {
	frames := loadCaptureFrames(t)
	var p Packet
	allocs := testing.AllocsPerRun(10, func() {
		for _, cf := range frames {
			if err := p.Decode(cf.ib); err != nil {
				panic(err)
			}
		}
	})
	if allocs != 0 {
		t.Errorf("Decode allocates %v times per run of %d packets", allocs, len(frames))
	}
}

// TestDecodeTruncated decodes every prefix of one captured packet per opcode:
// prefixes shorter than the headers fail with ErrTruncated; longer ones of an opcode
// with payload decode with a shorter payload unless the pad does not fit.
func TestDecodeTruncated(t *testing.T) {
	seen := map[Opcode]bool{}
	for _, cf := range loadCaptureFrames(t) {
		op := Opcode(cf.ib[0])
		if seen[op] {
			continue
		}
		seen[op] = true
		for n := 0; n < len(cf.ib); n++ {
			b := bytes.Clone(cf.ib[:n])
			var p Packet
			err := p.Decode(b)
			switch {
			case n < op.HeaderLen():
				if !errors.Is(err, ErrTruncated) {
					t.Errorf("%v: length %d: err %v, want ErrTruncated", op, n, err)
				}
				if p.BTH != nil || p.Payload != nil {
					t.Errorf("%v: length %d: failed Decode left fields set", op, n)
				}
			case op.HasPayload() && int(BTH(cf.ib).PadCount()) > n-op.HeaderLen():
				if !errors.Is(err, ErrInvalidField) {
					t.Errorf("%v: length %d: err %v, want ErrInvalidField (pad)", op, n, err)
				}
			case op.HasPayload() && !op.IsAtomicWrite():
				if err != nil {
					t.Errorf("%v: length %d: %v", op, n, err)
				} else if len(p.Payload) != n-op.HeaderLen() {
					t.Errorf("%v: length %d: payload %d", op, n, len(p.Payload))
				}
			default:
				t.Errorf("%v: length %d >= header length of an opcode without payload", op, n)
			}
		}
	}
	// Random truncation of random bytes never panics.
	r := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 64)
	var p Packet
	for range 20000 {
		for i := range buf {
			buf[i] = byte(r.Uint32())
		}
		buf[1] &^= bthTVerMask
		_ = p.Decode(buf[:r.IntN(len(buf)+1)])
	}
}

func TestDecodeErrors(t *testing.T) {
	bth := func(op Opcode, flags byte) []byte {
		return []byte{byte(op), flags, 0xff, 0xff, 0, 0, 0, 0x11, 0x80, 0, 0, 1}
	}
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	tests := []struct {
		name string
		in   []byte
		err  error
		text string
	}{
		{"empty", nil, ErrTruncated, "bth: packet length 0 < 12"},
		{"short BTH", bth(OpcodeRCSendOnly, 0)[:11], ErrTruncated, "bth: packet length 11 < 12"},
		{"reserved RC 0x15", bth(0x15, 0), ErrInvalidOpcode, "bth: opcode 0x15: reserved RC opcode"},
		{"reserved UC 0x2C", bth(0x2C, 0), ErrInvalidOpcode, "bth: opcode 0x2c: reserved UC opcode"},
		{"vendor 0xC0", bth(0xC0, 0), ErrInvalidOpcode, "bth: opcode 0xc0: reserved VENDOR6 opcode"},
		{"CNP 0x80", bth(0x80, 0), ErrInvalidOpcode, "bth: opcode 0x80: reserved CNP opcode"},
		{"tver 1", bth(OpcodeRCSendOnly, 0x01), ErrInvalidField, "bth: transport header version 1 != 0"},
		{"reth cut", cat(bth(OpcodeRCRDMAWriteFirst, 0), make([]byte, 8)), ErrTruncated,
			"reth: packet length 20 < 28: RC RDMA_WRITE_FIRST"},
		{"aeth cut", cat(bth(OpcodeRCAcknowledge, 0), make([]byte, 3)), ErrTruncated,
			"aeth: packet length 15 < 16: RC ACKNOWLEDGE"},
		{"atomic ack cut", cat(bth(OpcodeRCAtomicAcknowledge, 0), make([]byte, 10)), ErrTruncated,
			"atomicacketh: packet length 22 < 24: RC ATOMIC_ACKNOWLEDGE"},
		{"deth cut", cat(bth(OpcodeUDSendOnlyWithImm, 0), make([]byte, 6)), ErrTruncated,
			"deth: packet length 18 < 24: UD SEND_ONLY_WITH_IMMEDIATE"},
		{"immdt cut", cat(bth(OpcodeUDSendOnlyWithImm, 0), make([]byte, 9)), ErrTruncated,
			"immdt: packet length 21 < 24: UD SEND_ONLY_WITH_IMMEDIATE"},
		{"pad > payload", cat(bth(OpcodeRCSendOnly, 0x30), []byte{1, 2}), ErrInvalidField,
			"bth: pad count 3 > 2: bytes after the headers"},
		{"pad, no payload", bth(OpcodeRCSendOnly, 0x10), ErrInvalidField,
			"bth: pad count 1 > 0: bytes after the headers"},
		{"payload on ACK", cat(bth(OpcodeRCAcknowledge, 0), make([]byte, 4+4)), ErrUnexpectedPayload,
			"bth: payload length 4 != 0: RC ACKNOWLEDGE carries no payload"},
		{"payload on READ request", cat(bth(OpcodeRCRDMAReadRequest, 0), make([]byte, 16+1)), ErrUnexpectedPayload,
			"bth: payload length 1 != 0: RC RDMA_READ_REQUEST carries no payload"},
		{"CNP too long", cat(bth(OpcodeCNP, 0), make([]byte, 20)), ErrUnexpectedPayload,
			"bth: payload length 4 != 0: CNP CNP carries no payload"},
		{"CNP too short", cat(bth(OpcodeCNP, 0), make([]byte, 15)), ErrTruncated,
			"cnp: packet length 27 < 28: CNP CNP"},
		{"atomic write 4 bytes", cat(bth(OpcodeRCAtomicWrite, 0), make([]byte, 16+4)), ErrUnexpectedPayload,
			"atomic write: payload length 4 != 8"},
		{"atomic write 12 bytes", cat(bth(OpcodeRCAtomicWrite, 0), make([]byte, 16+12)), ErrUnexpectedPayload,
			"atomic write: payload length 12 != 8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p Packet
			p.Payload = []byte{1} // must be reset
			err := p.Decode(tt.in)
			if !errors.Is(err, tt.err) {
				t.Fatalf("err %v, want %v", err, tt.err)
			}
			var he *header.Error
			if !errors.As(err, &he) {
				t.Fatalf("err %T is not a *header.Error", err)
			}
			if err.Error() != tt.text {
				t.Errorf("text %q, want %q", err.Error(), tt.text)
			}
			if p.BTH != nil || p.Payload != nil {
				t.Errorf("failed Decode left p = %+v", p)
			}
		})
	}
}

// TestDecodeAccepts covers the edge cases Decode must let through.
func TestDecodeAccepts(t *testing.T) {
	hdr := func(op Opcode, pad uint8) []byte {
		f := PacketFields{BTH: BTHFields{Opcode: op, PadCount: pad, PSN: 7}}
		return AppendHeaders(nil, &f)
	}
	tests := []struct {
		name     string
		in       []byte
		payload  int
		pad      int
		nilPayld bool
	}{
		{"zero-length SEND Only", hdr(OpcodeRCSendOnly, 0), 0, 0, false},
		{"SEND Only of 1 byte, pad 3", append(hdr(OpcodeRCSendOnly, 3), 9, 0, 0, 0), 1, 3, false},
		{"unaligned payload accepted", append(hdr(OpcodeRCSendOnly, 0), 1, 2, 3), 3, 0, false},
		{"ACK with pad bytes only", append(hdr(OpcodeRCAcknowledge, 2), 0, 0), 0, 2, true},
		{"ATOMIC WRITE with 8 bytes", append(hdr(OpcodeRCAtomicWrite, 0), 1, 2, 3, 4, 5, 6, 7, 8), 8, 0, false},
		{"CNP", hdr(OpcodeCNP, 0), 0, 0, true},
		{"FLUSH", hdr(OpcodeRCFlush, 0), 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p Packet
			if err := p.Decode(tt.in); err != nil {
				t.Fatal(err)
			}
			if len(p.Payload) != tt.payload || len(p.Pad) != tt.pad || (p.Payload == nil) != tt.nilPayld {
				t.Errorf("payload %d (nil %v), pad %d; want %d (nil %v), %d",
					len(p.Payload), p.Payload == nil, len(p.Pad), tt.payload, tt.nilPayld, tt.pad)
			}
			if p.Opcode().IsAtomicWrite() && p.AtomicWrite.Value() != 0x0102030405060708 {
				t.Errorf("AtomicWrite value %#x", p.AtomicWrite.Value())
			}
		})
	}
}

// randomFields returns PacketFields for op with every field random but in range.
func randomFields(r *rand.Rand, op Opcode) PacketFields {
	return PacketFields{
		BTH: BTHFields{
			Opcode: op, SE: r.IntN(2) == 1, MigReq: r.IntN(2) == 1, PadCount: uint8(r.IntN(4)),
			PKey: uint16(r.Uint32()), FECN: r.IntN(2) == 1, BECN: r.IntN(2) == 1,
			DestQP: r.Uint32() & QPNMask, AckReq: r.IntN(2) == 1, PSN: r.Uint32() & PSNMask,
		},
		EEContext: r.Uint32() & QPNMask,
		DETH:      DETHFields{QKey: r.Uint32(), SrcQP: r.Uint32() & QPNMask},
		XRCSRQ:    r.Uint32() & QPNMask,
		FETH:      FETHFields{PlacementType: uint8(r.IntN(16)), SelectivityLevel: uint8(r.IntN(4))},
		RETH:      RETHFields{VA: r.Uint64(), RKey: r.Uint32(), DMALen: r.Uint32()},
		AtomicETH: AtomicETHFields{VA: r.Uint64(), RKey: r.Uint32(), SwapAdd: r.Uint64(), Compare: r.Uint64()},
		AETH:      AETHFields{Syndrome: AETHSyndrome(r.Uint32()), MSN: r.Uint32() & PSNMask},

		AtomicAckOrigData: r.Uint64(),
		Immediate:         r.Uint32(),
		InvalidateRKey:    r.Uint32(),
	}
}

// onlyPresent zeroes the fields of f that op does not carry, as Packet.Fields does.
func onlyPresent(f PacketFields) PacketFields {
	ext := f.BTH.Opcode.ExtHeaders()
	g := PacketFields{BTH: f.BTH}
	for _, h := range []struct {
		ext  ExtHeaders
		keep func()
	}{
		{ExtRDETH, func() { g.EEContext = f.EEContext }},
		{ExtDETH, func() { g.DETH = f.DETH }},
		{ExtXRCETH, func() { g.XRCSRQ = f.XRCSRQ }},
		{ExtFETH, func() { g.FETH = f.FETH }},
		{ExtRETH, func() { g.RETH = f.RETH }},
		{ExtAtomicETH, func() { g.AtomicETH = f.AtomicETH }},
		{ExtAETH, func() { g.AETH = f.AETH }},
		{ExtAtomicAckETH, func() { g.AtomicAckOrigData = f.AtomicAckOrigData }},
		{ExtImmDt, func() { g.Immediate = f.Immediate }},
		{ExtIETH, func() { g.InvalidateRKey = f.InvalidateRKey }},
	} {
		if ext.Has(h.ext) {
			h.keep()
		}
	}
	return g
}

// TestBuildDecodeRoundTrip encodes random headers for every valid opcode, appends a
// payload and pad, and decodes them again.
func TestBuildDecodeRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for o := range 256 {
		op := Opcode(o)
		if !op.Valid() {
			continue
		}
		for range 50 {
			f := randomFields(r, op)
			n := 0
			switch {
			case op.IsAtomicWrite():
				n = AtomicWriteDataLen
			case op.HasPayload():
				n = r.IntN(300)
			}
			f.BTH.PadCount = PadCountFor(n)
			if !op.HasPayload() {
				f.BTH.PadCount = 0
			}
			if err := f.Validate(); err != nil {
				t.Fatalf("%v: Validate: %v", op, err)
			}
			prefix := []byte("headroom")
			pkt := AppendHeaders(bytes.Clone(prefix), &f)
			if !bytes.Equal(pkt[:len(prefix)], prefix) || len(pkt) != len(prefix)+op.HeaderLen() {
				t.Fatalf("%v: AppendHeaders clobbered dst or wrote %d bytes", op, len(pkt)-len(prefix))
			}
			pkt = pkt[len(prefix):]
			payload := make([]byte, n)
			for i := range payload {
				payload[i] = byte(r.Uint32())
			}
			pkt = append(pkt, payload...)
			pkt = append(pkt, make([]byte, f.BTH.PadCount)...)
			var p Packet
			if err := p.Decode(pkt); err != nil {
				t.Fatalf("%v: %v", op, err)
			}
			var g PacketFields
			p.Fields(&g)
			if want := onlyPresent(f); g != want {
				t.Fatalf("%v: fields\n%+v\nwant\n%+v", op, g, want)
			}
			if !bytes.Equal(p.Payload, payload) {
				t.Fatalf("%v: payload mismatch", op)
			}
			if op.HasPayload() && len(pkt)%4 != 0 {
				t.Fatalf("%v: padded packet of %d bytes", op, len(pkt))
			}
			if got := presentHeaders(&p); got != op.ExtHeaders() {
				t.Fatalf("%v: headers %v, want %v", op, got, op.ExtHeaders())
			}
		}
	}
}

func TestEncodeHeadersShortBufferPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic")
		}
	}()
	f := PacketFields{BTH: BTHFields{Opcode: OpcodeRCRDMAWriteFirst}}
	f.EncodeHeaders(make([]byte, BTHLen+RETHLen-1))
}

func TestEncodeHeadersInvalidOpcodeWritesBTH(t *testing.T) {
	f := PacketFields{BTH: BTHFields{Opcode: 0x15, PSN: 0xabcdef}}
	b := AppendHeaders(nil, &f)
	want := []byte{0x15, 0, 0, 0, 0, 0, 0, 0, 0, 0xab, 0xcd, 0xef}
	if !bytes.Equal(b, want) {
		t.Errorf("got %x, want %x", b, want)
	}
	if err := f.Validate(); !errors.Is(err, ErrInvalidOpcode) {
		t.Errorf("Validate: %v", err)
	}
}

func TestEncodeHeadersCNPClearsReserved(t *testing.T) {
	b := bytes.Repeat([]byte{0xee}, 40)
	f := PacketFields{BTH: BTHFields{Opcode: OpcodeCNP, PKey: 0xffff, BECN: true, DestQP: 0xd2}}
	n := f.EncodeHeaders(b)
	// The CNP example of Annex A17.9.3 (NVIDIA's "RoCEv2 CNP Packet Format
	// Example"), without its ICRC.
	want := []byte{0x81, 0, 0xff, 0xff, 0x40, 0, 0, 0xd2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	if n != 28 || !bytes.Equal(b[:n], want) || b[n] != 0xee {
		t.Errorf("n=%d %x", n, b[:n+1])
	}
}

func TestPacketFieldsValidate(t *testing.T) {
	tests := []struct {
		name string
		f    PacketFields
		text string
	}{
		{"pad", PacketFields{BTH: BTHFields{Opcode: OpcodeRCSendOnly, PadCount: 5}}, "bth: pad count 5 > 3"},
		{"srcqp", PacketFields{BTH: BTHFields{Opcode: OpcodeUDSendOnly}, DETH: DETHFields{SrcQP: 1 << 24}},
			"deth: source QP 16777216 > 16777215"},
		{"msn", PacketFields{BTH: BTHFields{Opcode: OpcodeRCAcknowledge}, AETH: AETHFields{MSN: 1 << 25}},
			"aeth: MSN 33554432 > 16777215"},
		{"feth sel", PacketFields{BTH: BTHFields{Opcode: OpcodeRCFlush}, FETH: FETHFields{SelectivityLevel: 4}},
			"feth: selectivity level 4 > 3"},
		{"feth plt", PacketFields{BTH: BTHFields{Opcode: OpcodeRCFlush}, FETH: FETHFields{PlacementType: 16}},
			"feth: placement type 16 > 15"},
		{"rdeth", PacketFields{BTH: BTHFields{Opcode: OpcodeRDSendOnly}, EEContext: 1 << 24},
			"rdeth: EE context 16777216 > 16777215"},
		{"xrceth", PacketFields{BTH: BTHFields{Opcode: OpcodeXRCSendOnly}, XRCSRQ: 1 << 24},
			"xrceth: XRC SRQ 16777216 > 16777215"},
	}
	for _, tt := range tests {
		err := tt.f.Validate()
		if !errors.Is(err, ErrInvalidField) || err.Error() != tt.text {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.text)
		}
	}
	// A field of a header the opcode does not carry is not judged.
	f := PacketFields{BTH: BTHFields{Opcode: OpcodeRCSendOnly}, DETH: DETHFields{SrcQP: 1 << 30}}
	if err := f.Validate(); err != nil {
		t.Errorf("SrcQP of a SEND without DETH: %v", err)
	}
}

func TestPadCountFor(t *testing.T) {
	for n, want := range []uint8{0, 3, 2, 1, 0, 3, 2, 1, 0} {
		if got := PadCountFor(n); got != want {
			t.Errorf("PadCountFor(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestDecodeViewsAreSubslices(t *testing.T) {
	f := PacketFields{BTH: BTHFields{Opcode: OpcodeRCRDMAWriteOnlyWithImm}, RETH: RETHFields{VA: 1}, Immediate: 2}
	b := append(AppendHeaders(nil, &f), 1, 2, 3, 4)
	var p Packet
	if err := p.Decode(b); err != nil {
		t.Fatal(err)
	}
	p.RETH.SetRKey(0xdeadbeef)
	p.ImmDt.SetImmediate(0x01020304)
	p.Payload[0] = 9
	if binary.BigEndian.Uint32(b[BTHLen+8:]) != 0xdeadbeef || binary.BigEndian.Uint32(b[BTHLen+RETHLen:]) != 0x01020304 || b[BTHLen+RETHLen+ImmDtLen] != 9 {
		t.Error("views do not write through to the buffer")
	}
	// A view's capacity ends with its header: appending cannot overwrite the next.
	if cap(p.RETH) != RETHLen || cap(p.BTH) != BTHLen || cap(p.ImmDt) != ImmDtLen {
		t.Errorf("view capacities %d %d %d", cap(p.BTH), cap(p.RETH), cap(p.ImmDt))
	}
}

// maskReserved clears the reserved bits of the headers of op in hdr, the bits that
// PacketFields cannot express.
func maskReserved(hdr []byte) {
	op := Opcode(hdr[0])
	hdr[bthFECN] &^= bthResv6Mask
	hdr[bthAckReq] &^= bthResv7Mask
	if off := op.extOffset(ExtRDETH); off != 0 {
		hdr[off] = 0
	}
	if off := op.extOffset(ExtDETH); off != 0 {
		hdr[off+4] = 0
	}
	if off := op.extOffset(ExtXRCETH); off != 0 {
		hdr[off] = 0
	}
	if off := op.extOffset(ExtFETH); off != 0 {
		hdr[off], hdr[off+1], hdr[off+2] = 0, 0, 0
		hdr[off+3] &= fethPlacementMask | fethSelectMask
	}
	if off := op.extOffset(extCNPReserved); off != 0 {
		clear(hdr[off : off+CNPReservedLen])
	}
}

func FuzzPacketDecode(f *testing.F) {
	for _, cf := range loadCaptureFrames(f) {
		f.Add(cf.ib)
	}
	// One built packet per valid opcode, so that the RD, XRC, FLUSH, ATOMIC WRITE
	// and CNP layouts the captures lack are explored too.
	r := rand.New(rand.NewPCG(5, 6))
	for o := range 256 {
		op := Opcode(o)
		if !op.Valid() {
			continue
		}
		fields := randomFields(r, op)
		fields.BTH.PadCount = 0
		b := AppendHeaders(nil, &fields)
		if op.HasPayload() {
			b = append(b, 1, 2, 3, 4, 5, 6, 7, 8)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		orig := bytes.Clone(b)
		var p Packet
		err := p.Decode(b)
		if !bytes.Equal(b, orig) {
			t.Fatal("Decode modified its input")
		}
		if err != nil {
			var he *header.Error
			if !errors.As(err, &he) || he.Err == nil || he.Header == "" {
				t.Fatalf("error %v is not a complete *header.Error", err)
			}
			if p.BTH != nil || p.Payload != nil || p.Pad != nil {
				t.Fatal("failed Decode left fields set")
			}
			return
		}
		op := p.Opcode()
		hl := p.HeaderLen()
		if !op.Valid() || hl != op.HeaderLen() || hl > len(b) {
			t.Fatalf("%v: header length %d of %d bytes", op, hl, len(b))
		}
		if hl+len(p.Payload)+len(p.Pad) != len(b) || len(p.Pad) != int(p.BTH.PadCount()) {
			t.Fatalf("%v: %d + %d + %d != %d", op, hl, len(p.Payload), len(p.Pad), len(b))
		}
		if presentHeaders(&p) != op.ExtHeaders() {
			t.Fatalf("%v: headers %v, table %v", op, presentHeaders(&p), op.ExtHeaders())
		}
		// decode -> encode reproduces the headers up to reserved bits ...
		var fields PacketFields
		p.Fields(&fields)
		if err := fields.Validate(); err != nil {
			t.Fatalf("decoded fields do not validate: %v", err)
		}
		hdr := AppendHeaders(nil, &fields)
		want := bytes.Clone(b[:hl])
		maskReserved(want)
		if !bytes.Equal(hdr, want) {
			t.Fatalf("re-encoded %x, want %x", hdr, want)
		}
		// ... and decode -> encode -> decode is stable.
		b2 := append(append(hdr, p.Payload...), p.Pad...)
		var p2 Packet
		if err := p2.Decode(b2); err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		var fields2 PacketFields
		p2.Fields(&fields2)
		if fields2 != fields || !bytes.Equal(p2.Payload, p.Payload) {
			t.Fatalf("unstable: %+v != %+v", fields2, fields)
		}
	})
}

func BenchmarkPacketDecode(b *testing.B) {
	frames := loadCaptureFrames(b)
	var total int64
	for _, cf := range frames {
		total += int64(len(cf.ib))
	}
	b.SetBytes(total / int64(len(frames)))
	b.ReportAllocs()
	var p Packet
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if err := p.Decode(frames[i%len(frames)].ib); err != nil {
			b.Fatal(err)
		}
	}
}
