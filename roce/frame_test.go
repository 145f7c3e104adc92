package roce

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/header"
	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/internal/pcaptest"
)

// readCapture and captureNames read the reference captures (testdata/captures).
var (
	readCapture  = pcaptest.Frames
	captureNames = pcaptest.Names
)

// roceFrames returns the decoded RoCE frames of a capture.
func roceFrames(tb testing.TB, name string) []Frame {
	tb.Helper()
	var out []Frame
	for i, b := range readCapture(tb, name) {
		var f Frame
		err := f.DecodeEthernet(b)
		if errors.Is(err, ErrNotRoCE) {
			continue
		}
		if err != nil {
			tb.Fatalf("%s frame %d: %v", name, i+1, err)
		}
		out = append(out, f)
	}
	return out
}

// TestDecodeCaptures decodes every frame of every capture: the RoCE frames (as
// counted by tshark in logs/analyze.txt) decode, everything else is ErrNotRoCE.
func TestDecodeCaptures(t *testing.T) {
	wantRoCE := map[string]int{ // "eth:ethertype:ip[v6]:udp:infiniband" frames in analyze.txt
		"rxe-atomic-cas.pcap":       10,
		"rxe-atomic-fadd.pcap":      10,
		"rxe-rc-pingpong-ipv6.pcap": 40,
		"rxe-rc-pingpong.pcap":      40,
		"rxe-rdma-cm-rping.pcap":    125,
		"rxe-read-bw.pcap":          25,
		"rxe-send-bw.pcap":          25,
		"rxe-send-lat.pcap":         40,
		"rxe-ud-pingpong.pcap":      20,
		"rxe-write-bw-rdma-cm.pcap": 95,
		"rxe-write-bw.pcap":         25,
		"rxe-write-lat.pcap":        40,
		"siw-crc-rping.pcap":        0,
		"siw-crc-write-bw.pcap":     0,
		"siw-read-bw.pcap":          0,
		"siw-rping.pcap":            0,
		"siw-send-bw.pcap":          0,
		"siw-write-bw.pcap":         0,
	}
	for _, name := range captureNames(t, "") {
		t.Run(name, func(t *testing.T) {
			want, ok := wantRoCE[name]
			if !ok {
				t.Fatalf("capture %s is not in the table", name)
			}
			n := 0
			for i, b := range readCapture(t, name) {
				var f Frame
				err := f.DecodeEthernet(b)
				if errors.Is(err, ErrNotRoCE) {
					continue
				}
				if err != nil {
					t.Fatalf("frame %d: %v", i+1, err)
				}
				n++
				if f.Version != RoCEv2 || f.DstPort != UDPPort {
					t.Errorf("frame %d: version %v port %d", i+1, f.Version, f.DstPort)
				}
				if got := f.HeaderLen() + len(f.IB) + ICRCLen + len(f.Padding); got != len(b) {
					t.Errorf("frame %d: pieces add up to %d, frame has %d", i+1, got, len(b))
				}
				if f.IPv6 != strings.Contains(name, "ipv6") {
					t.Errorf("frame %d: IPv6 = %v", i+1, f.IPv6)
				}
				var p ibtransport.Packet
				if err := p.Decode(f.IB); err != nil {
					t.Errorf("frame %d: ibtransport: %v", i+1, err)
				}
			}
			if n != want {
				t.Errorf("%d RoCE frames, tshark counts %d", n, want)
			}
		})
	}
}

// TestDecodeGolden checks the decoded fields of a few frames against tshark's output.
func TestDecodeGolden(t *testing.T) {
	type golden struct {
		capture        string
		frame          int // 1-based, as tshark numbers them
		src, dst       string
		srcPort        uint16
		ibLen          int
		tsharkICRC     uint32 // infiniband.invariant.crc as tshark prints it
		srcMAC, dstMAC string
		ipv6           bool
	}
	tests := []golden{
		// ConnectRequest: 322-byte frame, 256-byte MAD + BTH + DETH.
		{"rxe-rdma-cm-rping.pcap", 1, "10.77.0.22", "10.77.0.21", 55410, 12 + 8 + 256, 0x669a60dd, "52:54:00:77:00:02", "52:54:00:77:00:01", false},
		{"rxe-rdma-cm-rping.pcap", 2, "10.77.0.21", "10.77.0.22", 55410, 12 + 8 + 256, 0xe31e2c54, "52:54:00:77:00:01", "52:54:00:77:00:02", false},
		{"rxe-rdma-cm-rping.pcap", 3, "10.77.0.22", "10.77.0.21", 55410, 12 + 8 + 256, 0x479952aa, "52:54:00:77:00:02", "52:54:00:77:00:01", false},
	}
	// The first IPv6 RoCE frame: RC SEND Only, 1024 bytes, 0xc144 = 49476.
	tests = append(tests, golden{"rxe-rc-pingpong-ipv6.pcap", 0, "fd77::22", "fd77::21", 49476, 12 + 1024, 0, "52:54:00:77:00:02", "52:54:00:77:00:01", true})
	for _, tc := range tests {
		frames := readCapture(t, tc.capture)
		var f Frame
		if tc.frame == 0 {
			for _, b := range frames {
				if f.DecodeEthernet(b) == nil {
					break
				}
			}
		} else if err := f.DecodeEthernet(frames[tc.frame-1]); err != nil {
			t.Fatalf("%s frame %d: %v", tc.capture, tc.frame, err)
		}
		name := tc.capture + "#" + strconv.Itoa(tc.frame)
		if f.Src != netip.MustParseAddr(tc.src) || f.Dst != netip.MustParseAddr(tc.dst) {
			t.Errorf("%s: %v -> %v, want %s -> %s", name, f.Src, f.Dst, tc.src, tc.dst)
		}
		if f.SrcPort != tc.srcPort || f.DstPort != 4791 {
			t.Errorf("%s: ports %d -> %d", name, f.SrcPort, f.DstPort)
		}
		if len(f.IB) != tc.ibLen {
			t.Errorf("%s: IB length %d, want %d", name, len(f.IB), tc.ibLen)
		}
		if f.IPv6 != tc.ipv6 {
			t.Errorf("%s: IPv6 %v", name, f.IPv6)
		}
		if tc.tsharkICRC != 0 {
			// tshark reads the four bytes big-endian; rxe stored them little-endian.
			if want := bswap32(tc.tsharkICRC); f.ICRC != want {
				t.Errorf("%s: ICRC %#08x, want %#08x (tshark %#08x byte-reversed)", name, f.ICRC, want, tc.tsharkICRC)
			}
		}
		if mac := macString(f.SrcMAC); mac != tc.srcMAC {
			t.Errorf("%s: source MAC %s", name, mac)
		}
		if mac := macString(f.DstMAC); mac != tc.dstMAC {
			t.Errorf("%s: destination MAC %s", name, mac)
		}
	}
}

func bswap32(v uint32) uint32 {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return binary.LittleEndian.Uint32(b[:])
}

func macString(m [6]byte) string {
	const hex = "0123456789abcdef"
	var s []byte
	for i, x := range m {
		if i > 0 {
			s = append(s, ':')
		}
		s = append(s, hex[x>>4], hex[x&15])
	}
	return string(s)
}

// TestReencodeCaptures rebuilds every captured RoCE frame from its decoded fields:
// the headers (IPv4 ID, flags, TTL and checksum included) and the ICRC must come out
// byte for byte as rxe sent them.
func TestReencodeCaptures(t *testing.T) {
	for _, name := range captureNames(t, "rxe-") {
		for i, f := range roceFrames(t, name) {
			h := f.Headers()
			if h.Len() != f.HeaderLen() {
				t.Fatalf("%s #%d: header length %d, decoded %d", name, i, h.Len(), f.HeaderLen())
			}
			orig := make([]byte, f.HeaderLen()+len(f.IB)+ICRCLen)
			copy(orig, f.Ethernet)
			copy(orig[len(f.Ethernet):], f.IP)
			copy(orig[len(f.Ethernet)+len(f.IP):], f.UDP)
			copy(orig[f.HeaderLen():], f.IB)
			PutICRC(orig[len(orig)-ICRCLen:], f.ICRC)

			buf := make([]byte, len(orig))
			copy(buf[h.Len():], f.IB)
			n, err := h.EncodeFrame(buf, len(f.IB))
			if err != nil {
				t.Fatalf("%s #%d: %v", name, i, err)
			}
			if !bytes.Equal(buf[:n], orig) {
				t.Fatalf("%s #%d: rebuilt frame differs\n got %x\nwant %x", name, i, buf[:h.Len()], orig[:h.Len()])
			}
			// The scatter-gather way: headers alone, ICRC over separate pieces.
			hdr := make([]byte, h.Len())
			if _, err := h.Encode(hdr, len(f.IB)); err != nil {
				t.Fatal(err)
			}
			cut := len(f.IB) / 3
			if got := h.ICRC(hdr, f.IB[:cut], f.IB[cut:]); got != f.ICRC {
				t.Fatalf("%s #%d: scatter-gather ICRC %#x, want %#x", name, i, got, f.ICRC)
			}
		}
	}
}

// TestVLAN inserts an 802.1Q tag into captured frames: they still decode, to the
// same IB packet, and the ICRC (which does not cover Ethernet) still holds.
func TestVLAN(t *testing.T) {
	for _, name := range []string{"rxe-rdma-cm-rping.pcap", "rxe-rc-pingpong-ipv6.pcap"} {
		for i, b := range readCapture(t, name) {
			var plain Frame
			if plain.DecodeEthernet(b) != nil {
				continue
			}
			tagged := make([]byte, 0, len(b)+4)
			tagged = append(tagged, b[:12]...)
			tagged = append(tagged, 0x81, 0x00, 0x60, 0x2a) // PCP 3, VID 42
			tagged = append(tagged, b[12:]...)
			var f Frame
			if err := f.DecodeEthernet(tagged); err != nil {
				t.Fatalf("%s frame %d tagged: %v", name, i+1, err)
			}
			if !f.HasVLAN || f.VLANTCI != 0x602a || len(f.Ethernet) != 18 || !bytes.Equal(f.IB, plain.IB) {
				t.Fatalf("%s frame %d: VLAN %v %#x eth %d", name, i+1, f.HasVLAN, f.VLANTCI, len(f.Ethernet))
			}
			if err := VerifyICRC(&f); err != nil {
				t.Fatal(err)
			}
			// Re-encoding reproduces the tagged headers.
			h := f.Headers()
			hdr := make([]byte, h.Len())
			if _, err := h.Encode(hdr, len(f.IB)); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(hdr, tagged[:h.Len()]) {
				t.Fatalf("%s frame %d: tagged headers differ", name, i+1)
			}
		}
	}
}

// TestDecodeIP decodes the captured frames from the IP header on.
func TestDecodeIP(t *testing.T) {
	for _, name := range []string{"rxe-write-bw.pcap", "rxe-rc-pingpong-ipv6.pcap"} {
		for i, b := range readCapture(t, name) {
			var eth, ip Frame
			errEth := eth.DecodeEthernet(b)
			errIP := ip.DecodeIP(b[EthernetLen:])
			if errors.Is(errEth, ErrNotRoCE) != errors.Is(errIP, ErrNotRoCE) {
				t.Fatalf("%s frame %d: %v vs %v", name, i+1, errEth, errIP)
			}
			if errEth != nil {
				continue
			}
			if errIP != nil {
				t.Fatal(errIP)
			}
			if ip.Ethernet != nil || ip.Src != eth.Src || ip.Dst != eth.Dst || !bytes.Equal(ip.IB, eth.IB) || ip.ICRC != eth.ICRC {
				t.Fatalf("%s frame %d: DecodeIP differs from DecodeEthernet", name, i+1)
			}
			if err := VerifyICRC(&ip); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestDecodeErrors feeds broken frames made from a good one.
func TestDecodeErrors(t *testing.T) {
	good4 := readCapture(t, "rxe-rdma-cm-rping.pcap")[0] // 322 bytes, IPv4
	var good6 []byte
	for _, b := range readCapture(t, "rxe-rc-pingpong-ipv6.pcap") {
		var f Frame
		if f.DecodeEthernet(b) == nil {
			good6 = b
			break
		}
	}
	edit := func(b []byte, fn func(b []byte)) []byte {
		c := bytes.Clone(b)
		fn(c)
		return c
	}
	put16 := func(off int, v uint16) func([]byte) {
		return func(b []byte) { binary.BigEndian.PutUint16(b[off:], v) }
	}
	const ip, udp6 = 14, 14 + 40
	udp4 := ip + 20
	tests := []struct {
		name string
		b    []byte
		kind error
		text string // substring of the error text
	}{
		{"empty", nil, ErrTruncated, "ethernet: length 0 < 14"},
		{"short ethernet", good4[:13], ErrTruncated, "ethernet"},
		{"arp", edit(good4, put16(12, 0x0806)), ErrNotRoCE, "ethertype"},
		{"short vlan", edit(good4[:16], put16(12, 0x8100)), ErrTruncated, "vlan"},
		{"short ipv4", good4[:ip+19], ErrTruncated, "ipv4: length 19 < 20"},
		{"ipv4 version", edit(good4, func(b []byte) { b[ip] = 0x55 }), ErrMalformed, "ipv4: version 5 != 4"},
		{"tcp", edit(good4, func(b []byte) { b[ip+9] = 6 }), ErrNotRoCE, "protocol"},
		{"ihl 4", edit(good4, func(b []byte) { b[ip] = 0x44 }), ErrMalformed, "ipv4: header length 16 < 20"},
		{"ihl beyond packet", edit(good4[:ip+40], func(b []byte) { b[ip] = 0x4f }), ErrTruncated, "ipv4: header length 60 > packet 40"},
		{"total length short", edit(good4, put16(ip+2, 27)), ErrMalformed, "ipv4: total length 27 < 28"},
		{"total length long", edit(good4, put16(ip+2, 309)), ErrTruncated, "ipv4: total length 309 > packet 308"},
		{"cut frame", good4[:300], ErrTruncated, "ipv4: total length 308 > packet 286"},
		{"later fragment", edit(good4, put16(ip+6, 0x0010)), ErrNotRoCE, "fragment"},
		{"first fragment", edit(good4, put16(ip+6, 0x2000)), ErrUnsupported, "more fragments"},
		{"other udp port", edit(good4, put16(udp4+2, 4790)), ErrNotRoCE, "port"},
		{"udp length short", edit(good4, put16(udp4+4, 287)), ErrMalformed, "udp: length 287 != ip payload 288"},
		{"udp length long", edit(good4, put16(udp4+4, 289)), ErrMalformed, "udp: length 289 != ip payload 288"},
		{"no room for bth", edit(good4[:ip+20+8+15], func(b []byte) {
			binary.BigEndian.PutUint16(b[ip+2:], 20+8+15)
			binary.BigEndian.PutUint16(b[udp4+4:], 8+15)
		}), ErrMalformed, "udp: length 23 < 24"},
		{"short ipv6", good6[:ip+39], ErrTruncated, "ipv6: length 39 < 40"},
		{"ipv6 version", edit(good6, func(b []byte) { b[ip] = 0x40 }), ErrMalformed, "ipv6: version 4 != 6"},
		{"ipv6 extension header", edit(good6, func(b []byte) { b[ip+6] = 0 }), ErrNotRoCE, "protocol"},
		{"ipv6 jumbogram", edit(good6, put16(ip+4, 0)), ErrMalformed, "ipv6: payload length 0 < 8"},
		{"ipv6 payload long", edit(good6, put16(ip+4, 2000)), ErrTruncated, "ipv6: payload length 2000 >"},
		{"ipv6 udp length", edit(good6, put16(udp6+4, 100)), ErrMalformed, "udp: length 100 != ip payload"},
		{"ipv6 other port", edit(good6, put16(udp6+2, 53)), ErrNotRoCE, "port"},
	}
	for _, tc := range tests {
		var f Frame
		err := f.DecodeEthernet(tc.b)
		if !errors.Is(err, tc.kind) {
			t.Errorf("%s: error %v, want %v", tc.name, err, tc.kind)
			continue
		}
		var he *header.Error
		if !errors.As(err, &he) {
			t.Errorf("%s: %T is not a *header.Error", tc.name, err)
		}
		if !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: error %q does not contain %q", tc.name, err, tc.text)
		}
		for _, other := range []error{ErrNotRoCE, ErrTruncated, ErrMalformed, ErrUnsupported, ErrBadICRC} {
			if other != tc.kind && errors.Is(err, other) {
				t.Errorf("%s: error %v also matches %v", tc.name, err, other)
			}
		}
		if f.IB != nil {
			// A failed decode must not leave a half-decoded packet behind.
			t.Errorf("%s: IB set after error", tc.name)
		}
	}
	// A frame longer than the IP packet (Ethernet padding) decodes; the rest is Padding.
	padded := append(bytes.Clone(good4), 0, 0, 0, 0, 0, 0)
	var f Frame
	if err := f.DecodeEthernet(padded); err != nil || len(f.Padding) != 6 || VerifyICRC(&f) != nil {
		t.Errorf("padded frame: %v, padding %d", err, len(f.Padding))
	}
}

// TestDecodeResets checks that decoding reuses a Frame without leaking old fields.
func TestDecodeResets(t *testing.T) {
	v6 := roceFrames(t, "rxe-rc-pingpong-ipv6.pcap")[0]
	v4raw := readCapture(t, "rxe-rdma-cm-rping.pcap")[0]
	f := v6
	if err := f.DecodeEthernet(v4raw); err != nil {
		t.Fatal(err)
	}
	if f.IPv6 || !f.Src.Is4() {
		t.Fatal("IPv6 fields survived a new decode")
	}
	if err := f.DecodeEthernet(v4raw[:20]); err == nil || f.IB != nil || f.Version != 0 {
		t.Fatalf("after a failed decode: %v %v %d", err, f.Version, len(f.IB))
	}
}

// TestRoCEv1 builds RoCEv1 frames (no capture holds one) and decodes them back.
func TestRoCEv1(t *testing.T) {
	ib := makeIB(100)
	h := FrameHeaders{
		Version:      RoCEv1,
		DstMAC:       [6]byte{2, 0, 0, 0, 0, 1},
		SrcMAC:       [6]byte{2, 0, 0, 0, 0, 2},
		Src:          netip.MustParseAddr("fe80::5054:ff:fe77:2"),
		Dst:          netip.MustParseAddr("fe80::5054:ff:fe77:1"),
		TrafficClass: 0x28,
		FlowLabel:    0x12345,
		HopLimit:     1,
	}
	if h.Len() != EthernetLen+GRHLen {
		t.Fatalf("Len %d", h.Len())
	}
	buf := make([]byte, h.Len()+len(ib)+ICRCLen)
	copy(buf[h.Len():], ib)
	n, err := h.EncodeFrame(buf, len(ib))
	if err != nil || n != len(buf) {
		t.Fatal(n, err)
	}
	if et := binary.BigEndian.Uint16(buf[12:]); et != EtherTypeRoCEv1 {
		t.Fatalf("ethertype %#x", et)
	}
	var f Frame
	if err := f.DecodeEthernet(buf); err != nil {
		t.Fatal(err)
	}
	if f.Version != RoCEv1 || f.Src != h.Src || f.Dst != h.Dst || !bytes.Equal(f.IB, ib) {
		t.Fatalf("decoded %+v", f)
	}
	g := f.GRH
	if g.IPVer() != 6 || g.TClass() != 0x28 || g.FlowLabel() != 0x12345 || g.HopLmt() != 1 ||
		g.NxtHdr() != NxtHdrBTH || int(g.PayLen()) != len(ib)+ICRCLen {
		t.Fatalf("GRH %+v", g.Fields())
	}
	if err := VerifyICRC(&f); err != nil {
		t.Fatal(err)
	}
	if f.Headers() != h {
		t.Fatalf("Headers() = %+v, want %+v", f.Headers(), h)
	}
	var f2 Frame
	if err := f2.DecodeGRH(buf[EthernetLen:]); err != nil || f2.ICRC != f.ICRC {
		t.Fatal(err)
	}
	// Broken GRHs.
	for _, tc := range []struct {
		name string
		fn   func(b []byte)
		kind error
	}{
		{"ipver", func(b []byte) { b[14] = 0x40 }, ErrMalformed},
		{"nxthdr", func(b []byte) { b[14+6] = 17 }, ErrUnsupported},
		{"paylen small", func(b []byte) { binary.BigEndian.PutUint16(b[14+4:], 15) }, ErrMalformed},
		{"paylen large", func(b []byte) { binary.BigEndian.PutUint16(b[14+4:], 200) }, ErrTruncated},
	} {
		c := bytes.Clone(buf)
		tc.fn(c)
		if err := f.DecodeEthernet(c); !errors.Is(err, tc.kind) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.kind)
		}
	}
	if err := f.DecodeEthernet(buf[:EthernetLen+GRHLen-1]); !errors.Is(err, ErrTruncated) {
		t.Errorf("short GRH: %v", err)
	}
}

// makeIB returns an IB packet: an RC SEND Only BTH and n payload bytes.
func makeIB(n int) []byte {
	ib := make([]byte, ibtransport.BTHLen+n)
	ibtransport.BTH(ib).Encode(&ibtransport.BTHFields{
		Opcode: ibtransport.OpcodeRCSendOnly,
		PKey:   0xFFFF,
		DestQP: 0x11,
		PSN:    0x123456,
	})
	for i := range n {
		ib[ibtransport.BTHLen+i] = byte(i*7 + 1)
	}
	return ib
}

// TestEncodeIPv4Fields checks the IPv4 header Encode writes field by field.
func TestEncodeIPv4Fields(t *testing.T) {
	h := FrameHeaders{
		Src:          netip.MustParseAddr("::ffff:10.0.0.1").Unmap(), // a RoCEv2 IPv4 GID, unmapped
		Dst:          netip.MustParseAddr("10.0.0.2"),
		TrafficClass: 0x02, // ECT(0)
		HopLimit:     7,
		IPID:         0xBEEF,
		SrcPort:      0xC123,
	}
	ib := makeIB(4)
	buf := make([]byte, h.Len()+len(ib)+ICRCLen)
	copy(buf[h.Len():], ib)
	if _, err := h.EncodeFrame(buf, len(ib)); err != nil {
		t.Fatal(err)
	}
	ip := buf[EthernetLen:]
	want := []byte{0x45, 0x02, 0, byte(20 + 8 + len(ib) + 4), 0xBE, 0xEF, 0x40, 0, 7, 17}
	if !bytes.Equal(ip[:10], want) {
		t.Fatalf("ipv4 header %x, want %x", ip[:10], want)
	}
	if !header.IPv4(ip[:20]).IsChecksumValid() {
		t.Fatal("bad checksum")
	}
	// A header with a correct checksum sums to 0xFFFF (RFC 1071).
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xFFFF {
		sum = sum>>16 + sum&0xFFFF
	}
	if sum != 0xFFFF {
		t.Fatalf("checksum does not verify: %#x", sum)
	}
	var f Frame
	if err := f.DecodeEthernet(buf); err != nil || !f.Src.Is4() || f.SrcPort != 0xC123 {
		t.Fatal(err, f.Src)
	}
	h.AllowFragmentation = true
	if _, err := h.Encode(buf, len(ib)); err != nil || ip[6] != 0 {
		t.Fatal("DF still set")
	}
	// IPv4-mapped addresses, literally, give IPv6 (with mapped addresses).
	h.Src = netip.AddrFrom16(h.Src.As16())
	h.Dst = netip.AddrFrom16(h.Dst.As16())
	buf = make([]byte, h.Len()+len(ib)+ICRCLen)
	copy(buf[h.Len():], ib)
	if _, err := h.EncodeFrame(buf, len(ib)); err != nil {
		t.Fatal(err)
	}
	if err := f.DecodeEthernet(buf); err != nil || !f.IPv6 || f.Src != h.Src || VerifyICRC(&f) != nil {
		t.Fatalf("mapped: %v %v", err, f.Src)
	}
	h.AllowFragmentation, h.IPID = false, 0 // IPv4-only fields are not decoded from IPv6
	h.Version, h.DstPort = RoCEv2, UDPPort  // the defaults, spelled out
	if f.Headers() != h {
		t.Fatalf("Headers() %+v, want %+v", f.Headers(), h)
	}
}

func TestEncodeErrors(t *testing.T) {
	v4 := FrameHeaders{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2")}
	v6 := FrameHeaders{Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2")}
	big := make([]byte, 100)
	tests := []struct {
		name  string
		h     FrameHeaders
		b     []byte
		ibLen int
	}{
		{"short buffer", v4, make([]byte, 41), 12},
		{"short ib", v4, big, 11},
		{"ipv4 too long", v4, big, 65535 - 20 - 8 - 4 + 1},
		{"mixed families", FrameHeaders{Src: v4.Src, Dst: v6.Dst}, big, 12},
		{"mixed families 6-4", FrameHeaders{Src: v6.Src, Dst: v4.Dst}, big, 12},
		{"ipv6 too long", v6, big, 65535},
		{"no addresses", FrameHeaders{}, big, 12},
		{"roce v1 no gids", FrameHeaders{Version: RoCEv1}, big, 12},
		{"bad version", FrameHeaders{Version: 3, Src: v4.Src, Dst: v4.Dst}, big, 12},
	}
	for _, tc := range tests {
		if _, err := tc.h.Encode(tc.b, tc.ibLen); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	if _, err := v4.EncodeFrame(make([]byte, 50), 12); !errors.Is(err, ErrTruncated) {
		t.Errorf("EncodeFrame short buffer: %v", err)
	}
}

// TestDecodeAllocs checks that decoding and verifying allocate nothing, for RoCE
// frames and for the non-RoCE frames a shared link carries.
func TestDecodeAllocs(t *testing.T) {
	var frames [][]byte
	frames = append(frames, readCapture(t, "rxe-rdma-cm-rping.pcap")[:3]...)
	frames = append(frames, readCapture(t, "rxe-rc-pingpong-ipv6.pcap")...) // IPv6 RoCE and IPv4 TCP
	v1 := builtV1(t, 32)
	frames = append(frames, append(append(append([]byte(nil), v1.Ethernet...), v1.GRH...), append(append([]byte(nil), v1.IB...), v1.icrc...)...))
	var f Frame
	for i, b := range frames {
		allocs := testing.AllocsPerRun(100, func() {
			if err := f.DecodeEthernet(b); err == nil {
				if VerifyICRC(&f) != nil {
					t.Fatal("bad ICRC")
				}
			} else if !errors.Is(err, ErrNotRoCE) {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("frame %d: %v allocations", i, allocs)
		}
	}
	// Building allocates nothing either.
	h := roceFrames(t, "rxe-write-bw.pcap")[0].Headers()
	buf := make([]byte, 2048)
	if allocs := testing.AllocsPerRun(100, func() {
		if _, err := h.EncodeFrame(buf, 1024); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Errorf("EncodeFrame: %v allocations", allocs)
	}
	ib := make([]byte, 1036)
	if allocs := testing.AllocsPerRun(100, func() {
		_ = ComputeICRC(f.IP, f.UDP, ib[:12], ib[12:500], ib[500:])
	}); allocs != 0 {
		t.Errorf("ComputeICRC with pieces: %v allocations", allocs)
	}
}

// asRoCEv1 rebuilds a captured RoCEv2 frame as RoCEv1 (Ethertype 0x8915, a GRH whose GIDs
// are the IP addresses, IPv4-mapped): no capture holds one, so the fuzz seeds make them.
// It returns nil for a frame that is not RoCE.
func asRoCEv1(b []byte) []byte {
	var fr Frame
	if fr.DecodeEthernet(b) != nil {
		return nil
	}
	h := fr.Headers()
	h.Version = RoCEv1
	h.Src, h.Dst = netip.AddrFrom16(fr.Src.As16()), netip.AddrFrom16(fr.Dst.As16())
	buf := make([]byte, h.Len()+len(fr.IB)+ICRCLen)
	copy(buf[h.Len():], fr.IB)
	n, err := h.EncodeFrame(buf, len(fr.IB))
	if err != nil {
		return nil
	}
	return buf[:n]
}

// FuzzFrameDecode decodes arbitrary frames (seeded with every frame of every
// capture). A decoded frame must account for every byte, rebuild from its decoded
// fields into a frame that decodes to the same packet with a valid ICRC, and keep a
// valid ICRC valid after SetICRC.
func FuzzFrameDecode(f *testing.F) {
	v1Seeds := 0
	for _, name := range captureNames(f, "") {
		for _, b := range readCapture(f, name) {
			f.Add(b)
			if v1 := asRoCEv1(b); v1 != nil {
				f.Add(v1)
				v1Seeds++
			}
		}
	}
	if v1Seeds == 0 {
		f.Fatal("no RoCEv1 seed could be built from the captures")
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var fr Frame
		err := fr.DecodeEthernet(b)
		if err != nil {
			n := 0
			for _, kind := range []error{ErrNotRoCE, ErrTruncated, ErrMalformed, ErrUnsupported} {
				if errors.Is(err, kind) {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("error %v matches %d kinds", err, n)
			}
			if fr.IB != nil {
				t.Fatal("IB set after an error")
			}
			return
		}
		if len(fr.IB) < ibtransport.BTHLen {
			t.Fatalf("IB packet of %d bytes", len(fr.IB))
		}
		if got := fr.HeaderLen() + len(fr.IB) + ICRCLen + len(fr.Padding); got != len(b) {
			t.Fatalf("pieces add up to %d of %d bytes", got, len(b))
		}
		valid := VerifyICRC(&fr) == nil

		h := fr.Headers()
		buf := make([]byte, h.Len()+len(fr.IB)+ICRCLen)
		copy(buf[h.Len():], fr.IB)
		n, err := h.EncodeFrame(buf, len(fr.IB))
		if err != nil {
			t.Fatalf("rebuilding %+v: %v", h, err)
		}
		var re Frame
		if err := re.DecodeEthernet(buf[:n]); err != nil {
			t.Fatalf("rebuilt frame does not decode: %v", err)
		}
		if re.Version != fr.Version || re.Src != fr.Src || re.Dst != fr.Dst || re.SrcPort != fr.SrcPort ||
			re.IPv6 != fr.IPv6 || re.Headers() != h || !bytes.Equal(re.IB, fr.IB) {
			t.Fatalf("rebuilt frame differs:\n%+v\n%+v", re.Headers(), h)
		}
		if err := VerifyICRC(&re); err != nil {
			t.Fatalf("rebuilt frame: %v", err)
		}
		if valid && len(fr.IP) == IPv4Len && binary.BigEndian.Uint16(fr.UDP[6:]) == 0 && fr.IP[6]&0xBF == 0 &&
			header.IPv4(fr.IP).IsChecksumValid() && !bytes.Equal(buf[:h.Len()], b[:h.Len()]) {
			t.Fatalf("rxe-shaped headers do not rebuild:\n got %x\nwant %x", buf[:h.Len()], b[:h.Len()])
		}
		c := bytes.Clone(b)
		var fc Frame
		if err := fc.DecodeEthernet(c); err != nil {
			t.Fatal(err)
		}
		SetICRC(&fc)
		if err := VerifyICRC(&fc); err != nil {
			t.Fatalf("after SetICRC: %v", err)
		}
	})
}

// benchFrame builds a RoCEv2/IPv4 RC SEND Only frame with n payload bytes.
func benchFrame(b *testing.B, n int) []byte {
	h := FrameHeaders{
		Src: netip.MustParseAddr("10.77.0.22"), Dst: netip.MustParseAddr("10.77.0.21"),
		SrcPort: UDPSourcePort(0x11), HopLimit: DefaultHopLimit,
	}
	ib := makeIB(n)
	buf := make([]byte, h.Len()+len(ib)+ICRCLen)
	copy(buf[h.Len():], ib)
	if _, err := h.EncodeFrame(buf, len(ib)); err != nil {
		b.Fatal(err)
	}
	return buf
}

func BenchmarkFrameDecode(b *testing.B) {
	for _, n := range []int{64, 1024, 4096} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			frame := benchFrame(b, n)
			var f Frame
			b.SetBytes(int64(len(frame)))
			b.ReportAllocs()
			for b.Loop() {
				if err := f.DecodeEthernet(frame); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestSnaplenCutNonRoCE: a UDP datagram to another port, cut short by the
// capture's snaplen, is not RoCE (not a truncated RoCE frame).
func TestSnaplenCutNonRoCE(t *testing.T) {
	for _, name := range captureNames(t, "rxe-") {
		for _, raw := range readCapture(t, name) {
			var f Frame
			if f.DecodeEthernet(raw) != nil || len(f.IB) < 40 {
				continue
			}
			b := append([]byte(nil), raw[:len(raw)-20]...)
			port := EthernetLen + len(f.IP) + 2
			if f.IPv6 {
				port = EthernetLen + IPv6Len + 2
			}
			b[port], b[port+1] = 0x12, 0x34
			if err := f.DecodeEthernet(b); !errors.Is(err, ErrNotRoCE) {
				t.Fatalf("%s: cut datagram to port 0x1234: %v, want ErrNotRoCE", name, err)
			}
			b[port], b[port+1] = UDPPort>>8, UDPPort&0xff
			if err := f.DecodeEthernet(b); !errors.Is(err, ErrTruncated) {
				t.Fatalf("%s: cut RoCE datagram: %v, want ErrTruncated", name, err)
			}
			break
		}
	}
}

// TestDecodeEthernetPort decodes RoCEv2 to another UDP port without writing to
// the frame: a frame to the device's port decodes, one to 4791 is not RoCE.
func TestDecodeEthernetPort(t *testing.T) {
	const port = 4792
	h := FrameHeaders{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"), SrcPort: 49152, DstPort: port, HopLimit: 64}
	ib := make([]byte, minIBLen)
	b := make([]byte, h.Len()+len(ib)+ICRCLen)
	copy(b[h.Len():], ib)
	n, err := h.EncodeFrame(b, len(ib))
	if err != nil {
		t.Fatal(err)
	}
	b = b[:n]
	orig := bytes.Clone(b)
	tests := []struct {
		name    string
		port    uint16
		wantErr error
	}{
		{"device port", port, nil},
		{"another port", UDPPort, ErrNotRoCE},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f Frame
			err := f.DecodeEthernetPort(b, tt.port)
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("DecodeEthernetPort(port %d) = %v, want %v", tt.port, err, tt.wantErr)
			}
			if err == nil && (f.DstPort != port || VerifyICRC(&f) != nil) {
				t.Errorf("DstPort %d, ICRC %v", f.DstPort, VerifyICRC(&f))
			}
			if !bytes.Equal(b, orig) {
				t.Error("decoding changed the frame")
			}
		})
	}
}
