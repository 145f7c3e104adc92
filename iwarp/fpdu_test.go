package iwarp

import (
	"bytes"
	"errors"
	"testing"
)

// FPDUs of siw-crc-rping.pcap: frame 8 (Send, 16 octets), frame 10 (Read Request) and
// frame 14 (RDMA Write of rping's 64-octet buffer).
const (
	goldenWriteFPDU = "004e" + "c140" + "d17eca00" + "000055d4befa9170" +
		"72646d612d70696e672d303a204142434445464748494a4b4c4d4e4f505152535455565758595a5b5c" +
		"5d5e5f606162636465666768696a6b6c6d6e6f707172" + "00" + "99b6714e"
	goldenSendFPDU = "0022" + "4143" + "00000000" + "00000000" + "00000001" + "00000000" +
		"000055d4befac470795c9b0000000040" + "6f528790"
	goldenReadRequestFPDU = "002e" + "4141" + "00000000" + "00000001" + "00000001" + "00000000" +
		"1ee95d00" + "000055ab5ab7e170" + "00000040" + "795c9b00" + "000055d4befac470" + "fb1261fe"
)

func TestPadLen(t *testing.T) {
	for _, tc := range []struct{ ulpdu, pad, fpdu int }{
		{0, 2, 8}, {1, 1, 8}, {2, 0, 8}, {3, 3, 12}, {14, 0, 20}, {16, 2, 24}, {18, 0, 24},
		{34, 0, 40}, {46, 0, 52}, {1442, 0, 1448}, {65535, 3, 65544},
	} {
		if PadLen(tc.ulpdu) != tc.pad || FPDULen(tc.ulpdu) != tc.fpdu {
			t.Errorf("ULPDU %d: pad %d FPDU %d, want %d %d", tc.ulpdu, PadLen(tc.ulpdu),
				FPDULen(tc.ulpdu), tc.pad, tc.fpdu)
		}
	}
}

func TestFPDUGolden(t *testing.T) {
	for _, h := range []string{goldenSendFPDU, goldenReadRequestFPDU, goldenWriteFPDU} {
		b := mustHex(t, h)
		f, err := ParseFPDU(append(b, 0, 1, 2)) // followed by the next FPDU
		if err != nil {
			t.Fatal(err)
		}
		if len(f) != len(b) || f.Len() != len(b) || int(f.ULPDULength()) != len(b)-6 {
			t.Errorf("length %d/%d ULPDU %d", len(f), f.Len(), f.ULPDULength())
		}
		if err := f.VerifyCRC(); err != nil {
			t.Error(err)
		}
		if f.CRC() != f.ComputeCRC() {
			t.Errorf("CRC %#x computed %#x", f.CRC(), f.ComputeCRC())
		}
		out, err := AppendFPDU(nil, true, f.ULPDU()[:5], f.ULPDU()[5:])
		if err != nil || !bytes.Equal(out, b) {
			t.Errorf("AppendFPDU %x, %v; want %x", out, err, b)
		}
		// Header and payload in separate pieces, as a writev would send them.
		hl := DDP(f.ULPDU()).HeaderLen()
		head := b[:2+hl]
		tail := AppendFPDUTrailer(nil, true, head, f.ULPDU()[hl:])
		if !bytes.Equal(tail, b[2+int(f.ULPDULength()):]) {
			t.Errorf("trailer %x", tail)
		}
		if FPDUCRC(head, f.ULPDU()[hl:]) != f.CRC() {
			t.Error("FPDUCRC over pieces differs")
		}
		// Every single-bit flip is caught.
		for i := range len(b) * 8 {
			c := append([]byte(nil), b...)
			c[i/8] ^= 1 << (i % 8)
			g, err := ParseFPDU(c)
			if err != nil {
				continue // the length changed
			}
			if err := g.VerifyCRC(); !errors.Is(err, ErrBadCRC) {
				t.Errorf("bit %d flipped: %v", i, err)
			}
		}
	}
}

func TestFPDUPadAndSetters(t *testing.T) {
	out, err := AppendFPDU(nil, false, []byte{1, 2, 3, 4, 5})
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{0, 5, 1, 2, 3, 4, 5, 0, 0, 0, 0, 0}
	if !bytes.Equal(out, want) {
		t.Errorf("%x, want %x", out, want)
	}
	f := FPDU(out)
	if !bytes.Equal(f.Pad(), []byte{0}) || f.CRC() != 0 {
		t.Errorf("pad %x crc %#x", f.Pad(), f.CRC())
	}
	f.SetCRC(f.ComputeCRC())
	if f.VerifyCRC() != nil {
		t.Error("SetCRC(ComputeCRC()) does not verify")
	}
	f.SetULPDULength(6)
	if f.Len() != 12 || len(f.Pad()) != 0 {
		t.Errorf("len %d pad %d", f.Len(), len(f.Pad()))
	}
	if tail := AppendFPDUTrailer(nil, false, []byte{0, 5}, []byte{1, 2, 3, 4, 5}); !bytes.Equal(tail, want[7:]) {
		t.Errorf("trailer %x", tail)
	}
}

func TestFPDUErrors(t *testing.T) {
	for _, tc := range []struct {
		b    []byte
		text string
	}{
		{nil, "fpdu: length 0 < 2"},
		{[]byte{0}, "fpdu: length 1 < 2"},
		{[]byte{0, 0x22, 0x41, 0x43}, "fpdu: length 4 < 40"},
	} {
		_, err := ParseFPDU(tc.b)
		if !errors.Is(err, ErrTruncated) || err.Error() != tc.text {
			t.Errorf("%x: %v, want %q", tc.b, err, tc.text)
		}
	}
	if _, err := AppendFPDU(nil, false, make([]byte, MaxULPDULen+1)); !errors.Is(err, ErrTooLong) ||
		err.Error() != "fpdu: ULPDU length 65536 > 65535" {
		t.Errorf("oversized ULPDU: %v", err)
	}
	b := mustHex(t, goldenSendFPDU)
	b[len(b)-1] ^= 0xff
	err := FPDU(b).VerifyCRC()
	if !errors.Is(err, ErrBadCRC) || err.Error() != "mpa: CRC 0x6f87526f != 0x9087526f" {
		t.Errorf("%v", err)
	}
}

func TestDecodeAllocations(t *testing.T) {
	send := mustHex(t, goldenSendFPDU)
	rr := mustHex(t, goldenReadRequestFPDU)
	var sink uint64
	n := testing.AllocsPerRun(100, func() {
		for _, b := range [][]byte{send, rr} {
			f, err := ParseFPDU(b)
			if err != nil || f.VerifyCRC() != nil {
				t.Fatal("bad golden FPDU")
			}
			d, err := ParseDDP(f.ULPDU())
			if err != nil {
				t.Fatal(err)
			}
			r, err := ParseRDMAP(d)
			if err != nil {
				t.Fatal(err)
			}
			sink += uint64(r.Opcode()) + uint64(d.MSN())
			if r.Opcode() == OpReadRequest {
				q, err := ParseReadRequest(d.Payload())
				if err != nil {
					t.Fatal(err)
				}
				sink += q.SourceTO()
			}
		}
		m, _ := ParseMPAFrame(mustHexNoAlloc)
		sink += uint64(m.PrivateDataLen())
	})
	if n != 0 {
		t.Errorf("%v allocations to decode an FPDU", n)
	}
	_ = sink
}

var mustHexNoAlloc = []byte("MPA ID Req Frame\x10\x02\x00\x04\x00\x01\x00\x01")

func BenchmarkCRC32c4K(b *testing.B) {
	f, err := AppendFPDU(nil, true, make([]byte, 4096-FPDUHeaderLen-CRCLen))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(f)))
	b.ResetTimer()
	for b.Loop() {
		if FPDU(f).VerifyCRC() != nil {
			b.Fatal("bad CRC")
		}
	}
}
