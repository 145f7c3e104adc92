package ibtransport

import (
	"bytes"
	"testing"
	"time"
)

// wantHex fails the test unless b, in hex, is want; what names the step that wrote b.
func wantHex(t *testing.T, what string, b []byte, want string) {
	t.Helper()
	if got := hexOf(b); got != want {
		t.Errorf("%s: %s, want %s", what, got, want)
	}
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b := make([]byte, 0, len(s)/2)
	val := func(c byte) byte {
		switch {
		case c >= '0' && c <= '9':
			return c - '0'
		case c >= 'a' && c <= 'f':
			return c - 'a' + 10
		}
		t.Fatalf("bad hex %q", s)
		return 0
	}
	for i := 0; i+1 < len(s); i += 2 {
		b = append(b, val(s[i])<<4|val(s[i+1]))
	}
	return b
}

func TestRETH(t *testing.T) {
	// rxe-read-bw.pcap frame 20 (tshark: VA 0x00005642ed42a000, R_Key 0x628, len 4096).
	in := mustHex(t, "00005642ed42a0000000062800001000")
	h := RETH(in)
	if h.VA() != 0x00005642ed42a000 || h.RKey() != 0x628 || h.DMALen() != 4096 {
		t.Errorf("VA %#x RKey %#x DMALen %d", h.VA(), h.RKey(), h.DMALen())
	}
	out := make(RETH, RETHLen)
	out.Encode(&RETHFields{VA: 0x00005642ed42a000, RKey: 0x628, DMALen: 4096})
	if !bytes.Equal(out, in) {
		t.Errorf("Encode %x", []byte(out))
	}
	out.SetVA(0x0102030405060708)
	out.SetRKey(0x11223344)
	out.SetDMALen(0xaabbccdd)
	wantHex(t, "setters", out, "010203040506070811223344aabbccdd")
}

func TestAtomicETH(t *testing.T) {
	in := mustHex(t, "0102030405060708"+"a1a2a3a4"+"b1b2b3b4b5b6b7b8"+"c1c2c3c4c5c6c7c8")
	h := AtomicETH(in)
	if h.VA() != 0x0102030405060708 || h.RKey() != 0xa1a2a3a4 || h.SwapAdd() != 0xb1b2b3b4b5b6b7b8 || h.Compare() != 0xc1c2c3c4c5c6c7c8 {
		t.Errorf("%#x %#x %#x %#x", h.VA(), h.RKey(), h.SwapAdd(), h.Compare())
	}
	out := make(AtomicETH, AtomicETHLen)
	out.Encode(&AtomicETHFields{VA: h.VA(), RKey: h.RKey(), SwapAdd: h.SwapAdd(), Compare: h.Compare()})
	if !bytes.Equal(out, in) {
		t.Errorf("Encode %x", []byte(out))
	}
	z := make(AtomicETH, AtomicETHLen)
	z.SetCompare(1)
	z.SetSwapAdd(2)
	z.SetRKey(3)
	z.SetVA(4)
	wantHex(t, "setters", z, "0000000000000004"+"00000003"+"0000000000000002"+"0000000000000001")
}

func TestAETH(t *testing.T) {
	// rxe-atomic-fadd.pcap frame 23: syndrome 0x1f, MSN 1.
	h := AETH(mustHex(t, "1f000001"))
	if h.Syndrome() != 0x1f || h.MSN() != 1 || h.Syndrome().Kind() != AETHKindACK || h.Syndrome().Credits() != ACKCreditsInvalid {
		t.Errorf("syndrome %#x MSN %d", uint8(h.Syndrome()), h.MSN())
	}
	out := make(AETH, AETHLen)
	out.Encode(&AETHFields{Syndrome: NewNAKSyndrome(NAKRemoteAccessError), MSN: 0x1abcdef})
	wantHex(t, "Encode", out, "62abcdef")
	out.SetSyndrome(0x20)
	out.SetMSN(0xffffff)
	wantHex(t, "setters", out, "20ffffff")
}

func TestAtomicAckETHImmDtIETHAtomicWrite(t *testing.T) {
	// rxe-atomic-fadd.pcap frame 23 (tshark: 13126868764158509584).
	if v := AtomicAckETH(mustHex(t, "b62c019784d6c210")).OrigData(); v != 13126868764158509584 {
		t.Errorf("OrigData %d", v)
	}
	b := make([]byte, 8)
	AtomicAckETH(b).SetOrigData(0x0102030405060708)
	AtomicWriteData(b[:8]).SetValue(AtomicWriteData(b).Value() + 1)
	wantHex(t, "AtomicAckETH and AtomicWriteData setters", b, "0102030405060709")
	i := make([]byte, 4)
	ImmDt(i).SetImmediate(0xdeadbeef)
	if hexOf(i) != "deadbeef" || ImmDt(i).Immediate() != 0xdeadbeef {
		t.Errorf("ImmDt %x", i)
	}
	IETH(i).SetRKey(0x00c0ffee)
	if hexOf(i) != "00c0ffee" || IETH(i).RKey() != 0xc0ffee {
		t.Errorf("IETH %x", i)
	}
}

func TestDETH(t *testing.T) {
	// rxe-ud-pingpong.pcap frame 10: Q_Key 0x11111111, source QP 0x13.
	in := mustHex(t, "1111111100000013")
	h := DETH(in)
	if h.QKey() != 0x11111111 || h.SrcQP() != 0x13 {
		t.Errorf("QKey %#x SrcQP %#x", h.QKey(), h.SrcQP())
	}
	ones := DETH(bytes.Repeat([]byte{0xff}, DETHLen))
	if ones.SrcQP() != 0xffffff {
		t.Errorf("SrcQP of ones %#x (the reserved byte leaked in)", ones.SrcQP())
	}
	ones.Encode(&DETHFields{QKey: 0x80010000, SrcQP: 0xf1234567})
	wantHex(t, "Encode", ones, "8001000000234567")
	ones.SetQKey(1)
	ones.SetSrcQP(2)
	wantHex(t, "setters", ones, "0000000100000002")
}

func TestRDETHXRCETH(t *testing.T) {
	b := bytes.Repeat([]byte{0xff}, 4)
	if RDETH(b).EEContext() != 0xffffff || XRCETH(b).XRCSRQ() != 0xffffff {
		t.Error("24-bit fields of ones")
	}
	RDETH(b).SetEEContext(0x7abcdef)
	wantHex(t, "RDETH", b, "00abcdef")
	XRCETH(b).SetXRCSRQ(0x123456)
	if hexOf(b) != "00123456" || XRCETH(b).XRCSRQ() != 0x123456 {
		t.Errorf("XRCETH %x", b)
	}
}

func TestFETH(t *testing.T) {
	// Reserved bits 31-6 must not leak into the fields.
	h := FETH(mustHex(t, "ffffffe6")) // ...1110 0110: SEL 2, PLT 6
	if h.PlacementType() != 6 || h.SelectivityLevel() != 2 {
		t.Errorf("PLT %d SEL %d", h.PlacementType(), h.SelectivityLevel())
	}
	h.SetPlacementType(FlushPlacementGlobal | FlushPlacementPersistent)
	h.SetSelectivityLevel(FlushSelectMR)
	wantHex(t, "setters", h, "ffffffd3")
	h.Encode(&FETHFields{PlacementType: FlushPlacementPersistent, SelectivityLevel: FlushSelectRange})
	wantHex(t, "Encode", h, "00000002")
	h.Encode(&FETHFields{PlacementType: 0xff, SelectivityLevel: 0xff})
	wantHex(t, "Encode masks", h, "0000003f")
}

func TestAETHSyndrome(t *testing.T) {
	tests := []struct {
		s      AETHSyndrome
		kind   AETHKind
		value  uint8
		String string
	}{
		{0x00, AETHKindACK, 0, "ACK credits=0"},
		{0x03, AETHKindACK, 3, "ACK credits=3"},
		{0x1f, AETHKindACK, 31, "ACK credits=invalid"},
		{0x2e, AETHKindRNRNAK, 14, "RNR NAK timer=14 (1.28ms)"},
		{0x20, AETHKindRNRNAK, 0, "RNR NAK timer=0 (655.36ms)"},
		{0x21, AETHKindRNRNAK, 1, "RNR NAK timer=1 (10µs)"},
		{0x60, AETHKindNAK, 0, "NAK PSN sequence error"},
		{0x61, AETHKindNAK, 1, "NAK invalid request"},
		{0x62, AETHKindNAK, 2, "NAK remote access error"},
		{0x63, AETHKindNAK, 3, "NAK remote operational error"},
		{0x64, AETHKindNAK, 4, "NAK invalid RD request"},
		{0x65, AETHKindNAK, 5, "NAK reserved code 5"},
		{0x40, AETHKindReserved, 0, "reserved syndrome 0x40"},
		{0x9f, AETHKindACK, 31, "ACK credits=invalid"}, // bit 7 is reserved
		{0xe2, AETHKindNAK, 2, "NAK remote access error"},
	}
	for _, tt := range tests {
		if tt.s.Kind() != tt.kind || tt.s.Value() != tt.value || tt.s.String() != tt.String {
			t.Errorf("%#x: kind %v value %d %q; want %v %d %q", uint8(tt.s), tt.s.Kind(), tt.s.Value(), tt.s.String(),
				tt.kind, tt.value, tt.String)
		}
		switch tt.kind {
		case AETHKindACK:
			if tt.s.Credits() != tt.value {
				t.Errorf("%#x: Credits %d", uint8(tt.s), tt.s.Credits())
			}
		case AETHKindRNRNAK:
			if tt.s.RNRTimer() != tt.value {
				t.Errorf("%#x: RNRTimer %d", uint8(tt.s), tt.s.RNRTimer())
			}
		case AETHKindNAK:
			if tt.s.NAKCode() != NAKCode(tt.value) {
				t.Errorf("%#x: NAKCode %d", uint8(tt.s), tt.s.NAKCode())
			}
		}
	}
	for v := range uint8(32) {
		if s := NewACKSyndrome(v); s.Kind() != AETHKindACK || s.Credits() != v || uint8(s) != v {
			t.Errorf("NewACKSyndrome(%d) = %#x", v, uint8(s))
		}
		if s := NewRNRNAKSyndrome(v); s.Kind() != AETHKindRNRNAK || s.RNRTimer() != v || uint8(s) != 0x20|v {
			t.Errorf("NewRNRNAKSyndrome(%d) = %#x", v, uint8(s))
		}
		if s := NewNAKSyndrome(NAKCode(v)); s.Kind() != AETHKindNAK || s.NAKCode() != NAKCode(v) || uint8(s) != 0x60|v {
			t.Errorf("NewNAKSyndrome(%d) = %#x", v, uint8(s))
		}
	}
	if NewACKSyndrome(0xff) != 0x1f || NewRNRNAKSyndrome(0xff) != 0x3f {
		t.Error("constructors do not mask the value")
	}
	for k, want := range []string{"ACK", "RNR NAK", "reserved", "NAK"} {
		if AETHKind(k).String() != want {
			t.Errorf("AETHKind(%d) = %q", k, AETHKind(k).String())
		}
	}
}

// TestRNRTimerDuration checks all 32 entries of IBTA Vol1 Table 45, written out in
// milliseconds as the spec prints them. (rxe's rnrnak_usec has 61410 µs for code
// 25; the spec's 61.44 ms wins.)
func TestRNRTimerDuration(t *testing.T) {
	ms := []float64{
		655.36, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.12,
		0.16, 0.24, 0.32, 0.48, 0.64, 0.96, 1.28, 1.92,
		2.56, 3.84, 5.12, 7.68, 10.24, 15.36, 20.48, 30.72,
		40.96, 61.44, 81.92, 122.88, 163.84, 245.76, 327.68, 491.52,
	}
	for code, m := range ms {
		want := time.Duration(m*1000+0.5) * time.Microsecond
		if got := RNRTimerDuration(uint8(code)); got != want {
			t.Errorf("code %d: %v, want %v", code, got, want)
		}
	}
	if RNRTimerDuration(32+14) != RNRTimerDuration(14) {
		t.Error("code not masked to 5 bits")
	}
}

// TestACKCreditCount checks IBTA Vol1 Table 44.
func TestACKCreditCount(t *testing.T) {
	want := []int{0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768,
		1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768}
	for code, w := range want {
		if got, ok := ACKCreditCount(uint8(code)); !ok || got != w {
			t.Errorf("code %d: %d %v, want %d", code, got, ok, w)
		}
	}
	for _, code := range []uint8{31, 32, 255} {
		if _, ok := ACKCreditCount(code); ok {
			t.Errorf("code %d: ok", code)
		}
	}
}
