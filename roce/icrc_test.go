package roce

import (
	"bytes"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/softrdma/softrdma/header"
)

// TestICRCSeed pins the constant: the CRC state after eight 0xFF bytes is 0xdebb20e3
// in rxe's (uninverted) convention.
func TestICRCSeed(t *testing.T) {
	ff := bytes.Repeat([]byte{0xFF}, 8)
	if got := crc32.ChecksumIEEE(ff); got != icrcSeed || ^got != 0xdebb20e3 {
		t.Fatalf("CRC-32 of eight 0xFF = %#x, seed %#x", got, uint32(icrcSeed))
	}
}

// TestICRCCaptures verifies the ICRC of every RoCE frame of every capture (IPv4 and
// IPv6), and that a plain CRC-32 over a masked copy of the frame gives the same.
func TestICRCCaptures(t *testing.T) {
	total := 0
	for _, name := range captureNames(t, "rxe-") {
		for i, f := range roceFrames(t, name) {
			if err := VerifyICRC(&f); err != nil {
				t.Errorf("%s RoCE frame %d: %v", name, i, err)
			}
			if got, want := f.ComputeICRC(), referenceICRC(f); got != want {
				t.Errorf("%s RoCE frame %d: ICRC %#x, reference %#x", name, i, got, want)
			}
			total++
		}
	}
	if total != 495 {
		t.Errorf("%d RoCE frames checked, want 495", total)
	}
}

// referenceICRC is the ICRC computed the slow, obvious way: copy everything it
// covers into one buffer, mask it there, CRC-32 it.
func referenceICRC(f Frame) uint32 {
	var b []byte
	b = append(b, bytes.Repeat([]byte{0xFF}, 8)...)
	switch {
	case f.Version == RoCEv1:
		g := append([]byte(nil), f.GRH...)
		g[0] |= 0x0F
		g[1], g[2], g[3], g[7] = 0xFF, 0xFF, 0xFF, 0xFF
		b = append(b, g...)
	case f.IPv6:
		ip := append([]byte(nil), f.IP...)
		ip[0] |= 0x0F
		ip[1], ip[2], ip[3], ip[7] = 0xFF, 0xFF, 0xFF, 0xFF
		b = append(b, ip...)
	default:
		ip := append([]byte(nil), f.IP...)
		ip[1], ip[8], ip[10], ip[11] = 0xFF, 0xFF, 0xFF, 0xFF
		b = append(b, ip...)
	}
	if f.Version == RoCEv2 {
		udp := append([]byte(nil), f.UDP...)
		udp[6], udp[7] = 0xFF, 0xFF
		b = append(b, udp...)
	}
	ib := append([]byte(nil), f.IB...)
	ib[4] = 0xFF
	b = append(b, ib...)
	return crc32.ChecksumIEEE(b)
}

// TestICRCPieces checks that splitting the IB packet anywhere (the BTH included)
// gives the same ICRC as the fast path.
func TestICRCPieces(t *testing.T) {
	frames := roceFrames(t, "rxe-rc-pingpong.pcap")
	frames = append(frames, roceFrames(t, "rxe-rc-pingpong-ipv6.pcap")[:2]...)
	for _, f := range frames[:4] {
		want := f.ComputeICRC()
		for cut := 0; cut <= len(f.IB); cut++ {
			if got := ComputeICRC(f.IP, f.UDP, f.IB[:cut], f.IB[cut:]); got != want {
				t.Fatalf("cut at %d: %#x, want %#x", cut, got, want)
			}
		}
		// One byte per piece.
		pieces := make([][]byte, len(f.IB))
		for i := range f.IB {
			pieces[i] = f.IB[i : i+1]
		}
		if got := ComputeICRC(f.IP, f.UDP, pieces...); got != want {
			t.Fatalf("byte pieces: %#x, want %#x", got, want)
		}
		// The UDP header given in two calls' worth: an odd UDP slice takes the general path too.
		if got := ComputeICRC(f.IP, f.UDP[:8], f.IB); got != want {
			t.Fatal("udp")
		}
	}
	// RoCEv1 pieces.
	f := builtV1(t, 64)
	want := f.ComputeICRC()
	for cut := 0; cut <= len(f.IB); cut++ {
		if got := ComputeICRCv1(f.GRH, f.IB[:cut], f.IB[cut:]); got != want {
			t.Fatalf("v1 cut at %d: %#x, want %#x", cut, got, want)
		}
	}
	if got, ref := want, referenceICRC(f); got != ref {
		t.Fatalf("v1 ICRC %#x, reference %#x", got, ref)
	}
}

// builtV1 builds and decodes a RoCEv1 frame with n payload bytes.
func builtV1(t *testing.T, n int) Frame {
	t.Helper()
	h := FrameHeaders{
		Version: RoCEv1, Src: netip.MustParseAddr("fe80::2"), Dst: netip.MustParseAddr("fe80::1"),
		TrafficClass: 0x10, FlowLabel: 0xABCDE, HopLimit: 9,
	}
	ib := makeIB(n)
	buf := make([]byte, h.Len()+len(ib)+ICRCLen)
	copy(buf[h.Len():], ib)
	if _, err := h.EncodeFrame(buf, len(ib)); err != nil {
		t.Fatal(err)
	}
	var f Frame
	if err := f.DecodeEthernet(buf); err != nil {
		t.Fatal(err)
	}
	return f
}

// coverage reports whether bit (byte i, mask m) of a frame's buffer is one of the
// ICRC's variant (masked) bits, or lies outside what the ICRC covers (Ethernet).
func coverage(f *Frame, i int, m byte) (covered, masked bool) {
	eth := len(f.Ethernet)
	if i < eth {
		return false, false
	}
	i -= eth
	switch {
	case f.Version == RoCEv1:
		if i < GRHLen {
			return true, i == 0 && m&0x0F != 0 || i == 1 || i == 2 || i == 3 || i == 7
		}
		i -= GRHLen
	case f.IPv6:
		if i < IPv6Len {
			return true, i == 0 && m&0x0F != 0 || i == 1 || i == 2 || i == 3 || i == 7
		}
		i -= IPv6Len
	default:
		if i < len(f.IP) {
			return true, i == 1 || i == 8 || i == 10 || i == 11
		}
		i -= len(f.IP)
	}
	if f.Version == RoCEv2 {
		if i < UDPLen {
			return true, i == 6 || i == 7
		}
		i -= UDPLen
	}
	return true, i == 4 // BTH byte 4; past the IB packet is the ICRC itself
}

// TestICRCBitFlips flips every bit of a set of frames one at a time: a flip in a
// covered, unmasked bit must make the frame fail (decode or ICRC), a flip in a
// masked bit or in the Ethernet addresses must leave the ICRC valid.
func TestICRCBitFlips(t *testing.T) {
	var frames [][]byte
	for _, name := range []string{"rxe-rdma-cm-rping.pcap", "rxe-rc-pingpong-ipv6.pcap", "rxe-ud-pingpong.pcap", "rxe-atomic-cas.pcap"} {
		n := 0
		for _, b := range readCapture(t, name) {
			var f Frame
			if f.DecodeEthernet(b) == nil && n < 6 {
				frames = append(frames, b)
				n++
			}
		}
	}
	v1 := builtV1(t, 40)
	frames = append(frames, append(append(append([]byte(nil), v1.Ethernet...), v1.GRH...), append(append([]byte(nil), v1.IB...), v1.icrc...)...))
	for fi, orig := range frames {
		var f0 Frame
		if err := f0.DecodeEthernet(orig); err != nil {
			t.Fatal(err)
		}
		end := f0.HeaderLen() + len(f0.IB) + ICRCLen
		b := bytes.Clone(orig)
		var f Frame
		for i := 0; i < end; i++ {
			for bit := 0; bit < 8; bit++ {
				m := byte(1) << bit
				covered, masked := coverage(&f0, i, m)
				b[i] ^= m
				err := f.DecodeEthernet(b)
				if err == nil {
					err = VerifyICRC(&f)
				}
				b[i] ^= m
				switch {
				case !covered && i < 12: // MAC addresses
					if err != nil {
						t.Fatalf("frame %d: flipping MAC byte %d bit %d: %v", fi, i, bit, err)
					}
				case !covered: // Ethertype / VLAN: the frame is no longer RoCE, or still is
				case masked:
					if err != nil {
						t.Fatalf("frame %d: flipping masked byte %d bit %d: %v", fi, i, bit, err)
					}
				default:
					if err == nil {
						t.Fatalf("frame %d: flipping covered byte %d bit %d went unnoticed", fi, i, bit)
					}
				}
			}
		}
	}
}

func TestVerifyICRCErrors(t *testing.T) {
	f := roceFrames(t, "rxe-send-lat.pcap")[0]
	f.ICRC ^= 1
	err := VerifyICRC(&f)
	var he *header.Error
	if !errors.Is(err, ErrBadICRC) || !errors.As(err, &he) || he.Limit != uint64(f.ComputeICRC()) {
		t.Fatalf("%v", err)
	}
	var zero Frame
	if err := VerifyICRC(&zero); !errors.Is(err, ErrTruncated) {
		t.Fatalf("zero Frame: %v", err)
	}
	SetICRC(&zero) // must not panic
}

// TestSetICRC edits a decoded frame in place and fixes its ICRC.
func TestSetICRC(t *testing.T) {
	for _, name := range []string{"rxe-write-bw.pcap", "rxe-rc-pingpong-ipv6.pcap"} {
		var raw []byte
		for _, b := range readCapture(t, name) {
			var f Frame
			if f.DecodeEthernet(b) == nil {
				raw = bytes.Clone(b)
				break
			}
		}
		var f Frame
		if err := f.DecodeEthernet(raw); err != nil {
			t.Fatal(err)
		}
		want := f.ICRC
		f.IB[len(f.IB)-1] ^= 0x5A // change the payload
		if VerifyICRC(&f) == nil {
			t.Fatal("changed payload still verifies")
		}
		SetICRC(&f)
		var g Frame
		if err := g.DecodeEthernet(raw); err != nil || VerifyICRC(&g) != nil || g.ICRC == want {
			t.Fatalf("%s: after SetICRC: %v %#x", name, err, g.ICRC)
		}
		f.IB[len(f.IB)-1] ^= 0x5A
		SetICRC(&f)
		if f.ICRC != want {
			t.Fatalf("%s: restored ICRC %#x, want %#x", name, f.ICRC, want)
		}
	}
}

// BenchmarkICRC measures ICRC verification (masked header copy, then the payload
// in place) and, in the same run over the same number of bytes, plain
// hash/crc32: it reports both rates and their ratio (icrc/crc32).
func BenchmarkICRC(b *testing.B) {
	for _, n := range []int{64, 1024, 4096} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			frame := benchFrame(b, n)
			var f Frame
			if err := f.DecodeEthernet(frame); err != nil {
				b.Fatal(err)
			}
			size := len(f.IP) + len(f.UDP) + len(f.IB)
			flat := append(append(append([]byte(nil), f.IP...), f.UDP...), f.IB...)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			start := time.Now()
			for range b.N {
				if err := VerifyICRC(&f); err != nil {
					b.Fatal(err)
				}
			}
			icrc := time.Since(start)
			start = time.Now()
			var sink uint32
			for range b.N {
				sink += crc32.ChecksumIEEE(flat)
			}
			base := time.Since(start)
			_ = sink
			gb := float64(size) * float64(b.N) / 1e9
			b.ReportMetric(gb/icrc.Seconds(), "icrc-GB/s")
			b.ReportMetric(gb/base.Seconds(), "crc32-GB/s")
			b.ReportMetric(base.Seconds()/icrc.Seconds(), "ratio")
		})
	}
}

// TestUpdateStack checks the header CRC helper against crc32.Update at every length
// and a few starting states.
func TestUpdateStack(t *testing.T) {
	b := make([]byte, 200)
	for i := range b {
		b[i] = byte(i*131 + 7)
	}
	for _, seed := range []uint32{0, icrcSeed, 0x12345678} {
		for n := range len(b) {
			if got, want := updateStack(seed, b[:n]), crc32.Update(seed, crc32.IEEETable, b[:n]); got != want {
				t.Fatalf("seed %#x length %d: %#x, want %#x", seed, n, got, want)
			}
			if got, want := updatePiece(seed, b[:n]), crc32.Update(seed, crc32.IEEETable, b[:n]); got != want {
				t.Fatalf("updatePiece: seed %#x length %d: %#x, want %#x", seed, n, got, want)
			}
		}
	}
}

// TestICRCRandomPieces compares ComputeICRC with the slow reference on random
// RoCEv2 packets (IPv4 and IPv6, random header bytes and lengths) split into
// random pieces: empty ones, and ones just below, at and above the length at
// which hash/crc32 switches kernels (clmulMin), where updatePiece switches too.
func TestICRCRandomPieces(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	sizes := []int{0, 1, clmulMin - 1, clmulMin, clmulMin + 1, 2*clmulMin - 1, 2 * clmulMin}
	for trial := range 3000 {
		h := FrameHeaders{
			Src: netip.AddrFrom4([4]byte{10, 0, 0, byte(rng.IntN(256))}), Dst: netip.AddrFrom4([4]byte{10, 0, 1, byte(rng.IntN(256))}),
			TrafficClass: uint8(rng.IntN(256)), HopLimit: uint8(rng.IntN(256)), IPID: uint16(rng.IntN(1 << 16)),
			SrcPort: uint16(rng.IntN(1 << 16)),
		}
		if trial%2 == 1 {
			h.Src, h.Dst = netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")
			h.FlowLabel = uint32(rng.IntN(1 << 20))
		}
		n := rng.IntN(300)
		if trial%3 == 0 {
			n = sizes[rng.IntN(len(sizes))]
		}
		ib := make([]byte, minIBLen+n)
		for i := range ib {
			ib[i] = byte(rng.IntN(256))
		}
		buf := make([]byte, h.Len()+len(ib)+ICRCLen)
		copy(buf[h.Len():], ib)
		if _, err := h.EncodeFrame(buf, len(ib)); err != nil {
			t.Fatal(err)
		}
		var f Frame
		if err := f.DecodeEthernet(buf); err != nil {
			t.Fatalf("trial %d: %v", trial, err)
		}
		want := referenceICRC(f)
		if f.ICRC != want {
			t.Fatalf("trial %d: EncodeFrame wrote ICRC %#x, reference %#x", trial, f.ICRC, want)
		}
		// Split the IB packet: the BTH whole first (the fast path) or cut
		// anywhere (the general path), then pieces of the sizes above.
		var pieces [][]byte
		rest := f.IB
		if trial%4 != 0 {
			pieces = append(pieces, rest[:minIBLen])
			rest = rest[minIBLen:]
		}
		for len(rest) > 0 {
			k := min(len(rest), sizes[rng.IntN(len(sizes))])
			if rng.IntN(3) == 0 {
				k = min(len(rest), rng.IntN(len(rest)+1))
			}
			pieces = append(pieces, rest[:k])
			rest = rest[k:]
		}
		pieces = append(pieces, nil)
		if got := ComputeICRC(f.IP, f.UDP, pieces...); got != want {
			t.Fatalf("trial %d (%d-byte IB in %d pieces): ICRC %#x, reference %#x", trial, len(f.IB), len(pieces), got, want)
		}
	}
}
