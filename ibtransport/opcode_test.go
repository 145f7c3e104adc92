package ibtransport

import (
	"strings"
	"testing"
)

// wiresharkOpcodeNames is the opcode value_string of tshark 4.0.17 (libwireshark
// strings, in opcode order, "Reserved" dropped). It has no FLUSH, ATOMIC WRITE or
// CNP, and no RD FLUSH.
var wiresharkOpcodeNames = map[Opcode]string{
	0x00: "Reliable Connection (RC) - SEND First",
	0x01: "Reliable Connection (RC) - SEND Middle",
	0x02: "Reliable Connection (RC) - SEND Last",
	0x03: "Reliable Connection (RC) - SEND Last with Immediate",
	0x04: "Reliable Connection (RC) - SEND Only",
	0x05: "Reliable Connection (RC) - SEND Only with Immediate",
	0x06: "Reliable Connection (RC) - RDMA WRITE First",
	0x07: "Reliable Connection (RC) - RDMA WRITE Middle",
	0x08: "Reliable Connection (RC) - RDMA WRITE Last",
	0x09: "Reliable Connection (RC) - RDMA WRITE Last with Immediate",
	0x0A: "Reliable Connection (RC) - RDMA WRITE Only",
	0x0B: "Reliable Connection (RC) - RDMA WRITE Only with Immediate",
	0x0C: "Reliable Connection (RC) - RDMA READ Request",
	0x0D: "Reliable Connection (RC) - RDMA READ response First",
	0x0E: "Reliable Connection (RC) - RDMA READ response Middle",
	0x0F: "Reliable Connection (RC) - RDMA READ response Last",
	0x10: "Reliable Connection (RC) - RDMA READ response Only",
	0x11: "Reliable Connection (RC) - Acknowledge",
	0x12: "Reliable Connection (RC) - ATOMIC Acknowledge",
	0x13: "Reliable Connection (RC) - CmpSwap",
	0x14: "Reliable Connection (RC) - FetchAdd",
	0x16: "Reliable Connection (RC) - SEND Last with Invalidate",
	0x17: "Reliable Connection (RC) - SEND Only with Invalidate",
	0x20: "Unreliable Connection (UC) - SEND First",
	0x21: "Unreliable Connection (UC) - SEND Middle",
	0x22: "Unreliable Connection (UC) - SEND Last",
	0x23: "Unreliable Connection (UC) - SEND Last with Immediate",
	0x24: "Unreliable Connection (UC) - SEND Only",
	0x25: "Unreliable Connection (UC) - SEND Only with Immediate",
	0x26: "Unreliable Connection (UC) - RDMA WRITE First",
	0x27: "Unreliable Connection (UC) - RDMA WRITE Middle",
	0x28: "Unreliable Connection (UC) - RDMA WRITE Last",
	0x29: "Unreliable Connection (UC) - RDMA WRITE Last with Immediate",
	0x2A: "Unreliable Connection (UC) - RDMA WRITE Only",
	0x2B: "Unreliable Connection (UC) - RDMA WRITE Only with Immediate",
	0x40: "Reliable Datagram (RD) - SEND First",
	0x41: "Reliable Datagram (RD) - SEND Middle",
	0x42: "Reliable Datagram (RD) - SEND Last",
	0x43: "Reliable Datagram (RD) - SEND Last with Immediate",
	0x44: "Reliable Datagram (RD) - SEND Only",
	0x45: "Reliable Datagram (RD) - SEND Only with Immediate",
	0x46: "Reliable Datagram (RD) - RDMA WRITE First",
	0x47: "Reliable Datagram (RD) - RDMA WRITE Middle",
	0x48: "Reliable Datagram (RD) - RDMA WRITE Last",
	0x49: "Reliable Datagram (RD) - RDMA WRITE Last with Immediate",
	0x4A: "Reliable Datagram (RD) - RDMA WRITE Only",
	0x4B: "Reliable Datagram (RD) - RDMA WRITE Only with Immediate",
	0x4C: "Reliable Datagram (RD) - RDMA READ Request",
	0x4D: "Reliable Datagram (RD) - RDMA READ response First",
	0x4E: "Reliable Datagram (RD) - RDMA READ response Middle",
	0x4F: "Reliable Datagram (RD) - RDMA READ response Last",
	0x50: "Reliable Datagram (RD) - RDMA READ response Only",
	0x51: "Reliable Datagram (RD) - Acknowledge",
	0x52: "Reliable Datagram (RD) - ATOMIC Acknowledge",
	0x53: "Reliable Datagram (RD) - CmpSwap",
	0x54: "Reliable Datagram (RD) - FetchAdd",
	0x55: "Reliable Datagram (RD) - RESYNC",
	0x64: "Unreliable Datagram (UD) - SEND only",
	0x65: "Unreliable Datagram (UD) - SEND only with Immediate",
	0xA0: "Extended Reliable Connection (XRC) - SEND First",
	0xA1: "Extended Reliable Connection (XRC) - SEND Middle",
	0xA2: "Extended Reliable Connection (XRC) - SEND Last",
	0xA3: "Extended Reliable Connection (XRC) - SEND Last with Immediate",
	0xA4: "Extended Reliable Connection (XRC) - SEND Only",
	0xA5: "Extended Reliable Connection (XRC) - SEND Only with Immediate",
	0xA6: "Extended Reliable Connection (XRC) - RDMA WRITE First",
	0xA7: "Extended Reliable Connection (XRC) - RDMA WRITE Middle",
	0xA8: "Extended Reliable Connection (XRC) - RDMA WRITE Last",
	0xA9: "Extended Reliable Connection (XRC) - RDMA WRITE Last with Immediate",
	0xAA: "Extended Reliable Connection (XRC) - RDMA WRITE Only",
	0xAB: "Extended Reliable Connection (XRC) - RDMA WRITE Only with Immediate",
	0xAC: "Extended Reliable Connection (XRC) - RDMA READ Request",
	0xAD: "Extended Reliable Connection (XRC) - RDMA READ response First",
	0xAE: "Extended Reliable Connection (XRC) - RDMA READ response Middle",
	0xAF: "Extended Reliable Connection (XRC) - RDMA READ response Last",
	0xB0: "Extended Reliable Connection (XRC) - RDMA READ response Only",
	0xB1: "Extended Reliable Connection (XRC) - Acknowledge",
	0xB2: "Extended Reliable Connection (XRC) - ATOMIC Acknowledge",
	0xB3: "Extended Reliable Connection (XRC) - CmpSwap",
	0xB4: "Extended Reliable Connection (XRC) - FetchAdd",
	0xB6: "Extended Reliable Connection (XRC) - SEND Last with Invalidate",
	0xB7: "Extended Reliable Connection (XRC) - SEND Only with Invalidate",
}

func TestOpcodeWiresharkNames(t *testing.T) {
	for op, want := range wiresharkOpcodeNames {
		if got := op.WiresharkName(); got != want {
			t.Errorf("%v: WiresharkName %q, want %q", op, got, want)
		}
		if _, name, _ := strings.Cut(want, " - "); op.Name() != name {
			t.Errorf("%v: Name %q, want %q", op, op.Name(), name)
		}
	}
	// Every valid opcode is known to tshark 4.0, except these.
	ours := map[Opcode]string{
		OpcodeRCFlush:       "Reliable Connection (RC) - FLUSH",
		OpcodeRCAtomicWrite: "Reliable Connection (RC) - ATOMIC WRITE",
		OpcodeRDFlush:       "Reliable Datagram (RD) - FLUSH",
		OpcodeCNP:           "Congestion Notification (CNP) - CNP",
	}
	for o := range 256 {
		op := Opcode(o)
		_, ws := wiresharkOpcodeNames[op]
		name, own := ours[op]
		switch {
		case op.Valid() && !ws && !own:
			t.Errorf("%v: valid but unknown to tshark", op)
		case !op.Valid() && (ws || own):
			t.Errorf("%#x: invalid but tshark knows it", o)
		case own && op.WiresharkName() != name:
			t.Errorf("%v: WiresharkName %q, want %q", op, op.WiresharkName(), name)
		}
	}
}

// TestOpcodeTableRC spells out every RC opcode: IBTA Vol1 Table 35 and rxe_opcode.c.
func TestOpcodeTableRC(t *testing.T) {
	const (
		F = PositionFirst
		M = PositionMiddle
		L = PositionLast
		O = PositionOnly
	)
	tests := []struct {
		op      Opcode
		str     string
		ext     ExtHeaders
		hdrLen  int
		payload bool
		pos     Position
		kind    string // s(end) w(rite) r(ead) a(tomic) f(lush) x (atomic write) k (ack)
		req     bool
	}{
		{OpcodeRCSendFirst, "RC SEND_FIRST", 0, 12, true, F, "s", true},
		{OpcodeRCSendMiddle, "RC SEND_MIDDLE", 0, 12, true, M, "s", true},
		{OpcodeRCSendLast, "RC SEND_LAST", 0, 12, true, L, "s", true},
		{OpcodeRCSendLastWithImm, "RC SEND_LAST_WITH_IMMEDIATE", ExtImmDt, 16, true, L, "s", true},
		{OpcodeRCSendOnly, "RC SEND_ONLY", 0, 12, true, O, "s", true},
		{OpcodeRCSendOnlyWithImm, "RC SEND_ONLY_WITH_IMMEDIATE", ExtImmDt, 16, true, O, "s", true},
		{OpcodeRCRDMAWriteFirst, "RC RDMA_WRITE_FIRST", ExtRETH, 28, true, F, "w", true},
		{OpcodeRCRDMAWriteMiddle, "RC RDMA_WRITE_MIDDLE", 0, 12, true, M, "w", true},
		{OpcodeRCRDMAWriteLast, "RC RDMA_WRITE_LAST", 0, 12, true, L, "w", true},
		{OpcodeRCRDMAWriteLastWithImm, "RC RDMA_WRITE_LAST_WITH_IMMEDIATE", ExtImmDt, 16, true, L, "w", true},
		{OpcodeRCRDMAWriteOnly, "RC RDMA_WRITE_ONLY", ExtRETH, 28, true, O, "w", true},
		{OpcodeRCRDMAWriteOnlyWithImm, "RC RDMA_WRITE_ONLY_WITH_IMMEDIATE", ExtRETH | ExtImmDt, 32, true, O, "w", true},
		{OpcodeRCRDMAReadRequest, "RC RDMA_READ_REQUEST", ExtRETH, 28, false, O, "r", true},
		{OpcodeRCRDMAReadResponseFirst, "RC RDMA_READ_RESPONSE_FIRST", ExtAETH, 16, true, F, "r", false},
		{OpcodeRCRDMAReadResponseMiddle, "RC RDMA_READ_RESPONSE_MIDDLE", 0, 12, true, M, "r", false},
		{OpcodeRCRDMAReadResponseLast, "RC RDMA_READ_RESPONSE_LAST", ExtAETH, 16, true, L, "r", false},
		{OpcodeRCRDMAReadResponseOnly, "RC RDMA_READ_RESPONSE_ONLY", ExtAETH, 16, true, O, "r", false},
		{OpcodeRCAcknowledge, "RC ACKNOWLEDGE", ExtAETH, 16, false, O, "k", false},
		{OpcodeRCAtomicAcknowledge, "RC ATOMIC_ACKNOWLEDGE", ExtAETH | ExtAtomicAckETH, 24, false, O, "ak", false},
		{OpcodeRCCompareSwap, "RC COMPARE_SWAP", ExtAtomicETH, 40, false, O, "a", true},
		{OpcodeRCFetchAdd, "RC FETCH_ADD", ExtAtomicETH, 40, false, O, "a", true},
		{OpcodeRCSendLastWithInvalidate, "RC SEND_LAST_WITH_INVALIDATE", ExtIETH, 16, true, L, "s", true},
		{OpcodeRCSendOnlyWithInvalidate, "RC SEND_ONLY_WITH_INVALIDATE", ExtIETH, 16, true, O, "s", true},
		{OpcodeRCFlush, "RC FLUSH", ExtFETH | ExtRETH, 32, false, O, "f", true},
		{OpcodeRCAtomicWrite, "RC ATOMIC_WRITE", ExtRETH, 28, true, O, "x", true},
	}
	valid := map[Opcode]bool{}
	for _, tt := range tests {
		op := tt.op
		valid[op] = true
		if !op.Valid() || op.Service() != ServiceRC || op.String() != tt.str || op.ExtHeaders() != tt.ext ||
			op.HeaderLen() != tt.hdrLen || op.HasPayload() != tt.payload || op.Position() != tt.pos {
			t.Errorf("%#x: valid=%v %v %q ext=%v len=%d payload=%v pos=%v; want %q %v %d %v %v",
				uint8(op), op.Valid(), op.Service(), op.String(), op.ExtHeaders(), op.HeaderLen(), op.HasPayload(), op.Position(),
				tt.str, tt.ext, tt.hdrLen, tt.payload, tt.pos)
		}
		has := func(c string) bool { return strings.Contains(tt.kind, c) }
		if op.IsSend() != has("s") || op.IsWrite() != has("w") || op.IsRead() != has("r") || op.IsAtomic() != has("a") ||
			op.IsFlush() != has("f") || op.IsAtomicWrite() != has("x") || op.IsAck() != has("k") {
			t.Errorf("%v: kind flags send=%v write=%v read=%v atomic=%v flush=%v atomicwrite=%v ack=%v, want %q",
				op, op.IsSend(), op.IsWrite(), op.IsRead(), op.IsAtomic(), op.IsFlush(), op.IsAtomicWrite(), op.IsAck(), tt.kind)
		}
		if op.IsRequest() != tt.req || op.IsResponse() == tt.req {
			t.Errorf("%v: request=%v response=%v", op, op.IsRequest(), op.IsResponse())
		}
		if op.HasImmediate() != tt.ext.Has(ExtImmDt) || op.HasInvalidate() != tt.ext.Has(ExtIETH) {
			t.Errorf("%v: imm=%v inv=%v", op, op.HasImmediate(), op.HasInvalidate())
		}
		if op.IsFirst() != (tt.pos == F || tt.pos == O) || op.IsLast() != (tt.pos == L || tt.pos == O) {
			t.Errorf("%v: first=%v last=%v", op, op.IsFirst(), op.IsLast())
		}
	}
	for o := range 0x20 {
		if op := Opcode(o); op.Valid() != valid[op] {
			t.Errorf("%#x: Valid() = %v", o, op.Valid())
		}
	}
}

// TestOpcodeTableDerived checks the other services against RC: UC is RC's SEND and
// WRITE; RD adds an RDETH to everything and a DETH to requests; XRC adds an XRCETH
// to requests; UD has only SEND Only (+Imm) with a DETH.
func TestOpcodeTableDerived(t *testing.T) {
	for low := range 0x20 {
		rc := Opcode(low)
		uc, rd, xrc, ud := Opcode(0x20|low), Opcode(0x40|low), Opcode(0xA0|low), Opcode(0x60|low)
		same := func(a, b Opcode) bool {
			return a.Name() == b.Name() && a.HasPayload() == b.HasPayload() && a.Position() == b.Position() &&
				a.IsRequest() == b.IsRequest() && a.IsSend() == b.IsSend() && a.IsWrite() == b.IsWrite() &&
				a.IsRead() == b.IsRead() && a.IsAtomic() == b.IsAtomic() && a.IsFlush() == b.IsFlush()
		}
		if want := low <= 0x0B; uc.Valid() != want {
			t.Errorf("%#x: UC valid=%v", uint8(uc), uc.Valid())
		} else if want && (!same(uc, rc) || uc.ExtHeaders() != rc.ExtHeaders() || uc.Service() != ServiceUC) {
			t.Errorf("%v differs from %v", uc, rc)
		}
		if want := low <= 0x15 || low == 0x1C; rd.Valid() != want {
			t.Errorf("%#x: RD valid=%v", uint8(rd), rd.Valid())
		} else if want && low != 0x15 {
			extra := ExtRDETH
			if rc.IsRequest() {
				extra |= ExtDETH
			}
			if !same(rd, rc) || rd.ExtHeaders() != rc.ExtHeaders()|extra || rd.HeaderLen() != rc.HeaderLen()+extra.Len() {
				t.Errorf("%v: %v, want %v", rd, rd.ExtHeaders(), rc.ExtHeaders()|extra)
			}
		}
		if want := low <= 0x17 && low != 0x15; xrc.Valid() != want {
			t.Errorf("%#x: XRC valid=%v", uint8(xrc), xrc.Valid())
		} else if want {
			var extra ExtHeaders
			if rc.IsRequest() {
				extra = ExtXRCETH
			}
			if !same(xrc, rc) || xrc.ExtHeaders() != rc.ExtHeaders()|extra || xrc.Service() != ServiceXRC {
				t.Errorf("%v: %v, want %v", xrc, xrc.ExtHeaders(), rc.ExtHeaders()|extra)
			}
		}
		if want := low == 4 || low == 5; ud.Valid() != want {
			t.Errorf("%#x: UD valid=%v", uint8(ud), ud.Valid())
		} else if want && (ud.ExtHeaders() != rc.ExtHeaders()|ExtDETH || !ud.IsSend() || ud.Position() != PositionOnly) {
			t.Errorf("%v: %v", ud, ud.ExtHeaders())
		}
	}
	rs := OpcodeRDResync
	if rs.String() != "RD RESYNC" || rs.ExtHeaders() != ExtRDETH|ExtDETH || rs.HasPayload() || !rs.IsRequest() {
		t.Errorf("RD RESYNC: %v %v", rs, rs.ExtHeaders())
	}
	if cnp := OpcodeCNP; !cnp.Valid() || cnp.Service() != ServiceCNP || cnp.String() != "CNP CNP" ||
		cnp.ExtHeaders() != 0 || cnp.HeaderLen() != BTHLen+CNPReservedLen || cnp.HasPayload() {
		t.Errorf("CNP: %v %v %d", cnp, cnp.ExtHeaders(), cnp.HeaderLen())
	}
	n := 0
	for o := range 256 {
		if Opcode(o).Valid() {
			n++
		}
	}
	// RC 25, UC 12, RD 23, UD 2, CNP 1, XRC 23.
	if n != 86 {
		t.Errorf("%d valid opcodes, want 86", n)
	}
}

// TestOpcodeOffsets checks the wire order of extension headers, including FLUSH's
// FETH before RETH (rxe_opcode.c).
func TestOpcodeOffsets(t *testing.T) {
	tests := []struct {
		op   Opcode
		h    ExtHeaders
		want int
	}{
		{OpcodeRCFlush, ExtFETH, 12},
		{OpcodeRCFlush, ExtRETH, 16},
		{OpcodeRCRDMAWriteOnlyWithImm, ExtRETH, 12},
		{OpcodeRCRDMAWriteOnlyWithImm, ExtImmDt, 28},
		{OpcodeRCAtomicAcknowledge, ExtAETH, 12},
		{OpcodeRCAtomicAcknowledge, ExtAtomicAckETH, 16},
		{OpcodeUDSendOnlyWithImm, ExtDETH, 12},
		{OpcodeUDSendOnlyWithImm, ExtImmDt, 20},
		{OpcodeRDRDMAWriteOnlyWithImm, ExtRDETH, 12},
		{OpcodeRDRDMAWriteOnlyWithImm, ExtDETH, 16},
		{OpcodeRDRDMAWriteOnlyWithImm, ExtRETH, 24},
		{OpcodeRDRDMAWriteOnlyWithImm, ExtImmDt, 40},
		{OpcodeRDFlush, ExtFETH, 24},
		{OpcodeXRCRDMAWriteOnlyWithImm, ExtXRCETH, 12},
		{OpcodeXRCRDMAWriteOnlyWithImm, ExtRETH, 16},
		{OpcodeXRCRDMAWriteOnlyWithImm, ExtImmDt, 32},
		{OpcodeXRCSendOnlyWithInvalidate, ExtIETH, 16},
		{OpcodeCNP, extCNPReserved, 12},
		{OpcodeRCSendOnly, ExtRETH, 0},
		{OpcodeRCFlush, ExtFETH | ExtRETH, 0},
	}
	for _, tt := range tests {
		if got := tt.op.extOffset(tt.h); got != tt.want {
			t.Errorf("%v %v: offset %d, want %d", tt.op, tt.h, got, tt.want)
		}
	}
	if got := OpcodeRDRDMAWriteOnlyWithImm.HeaderLen(); got != 44 {
		t.Errorf("RD RDMA_WRITE_ONLY_WITH_IMMEDIATE header length %d, want 44", got)
	}
}

func TestOpcodeInvalid(t *testing.T) {
	for _, o := range []Opcode{0x15, 0x18, 0x1B, 0x1E, 0x1F, 0x2C, 0x56, 0x5B, 0x60, 0x63, 0x66, 0x80, 0x82, 0xB5, 0xBC, 0xC0, 0xFF} {
		if o.Valid() || o.Name() != "" || o.WiresharkName() != "" || o.ExtHeaders() != 0 || o.HasPayload() ||
			o.Position() != PositionNone || o.IsRequest() || o.IsResponse() || o.HeaderLen() != BTHLen {
			t.Errorf("%#x: %+v", uint8(o), o.Info())
		}
	}
	if s := Opcode(0x15).String(); s != "Opcode(0x15)" {
		t.Errorf("String %q", s)
	}
	if s := Opcode(0xfe).String(); s != "Opcode(0xfe)" {
		t.Errorf("String %q", s)
	}
}

func TestOpcodeInfo(t *testing.T) {
	i := OpcodeRCRDMAWriteOnlyWithImm.Info()
	want := OpcodeInfo{Opcode: 0x0B, Valid: true, Service: ServiceRC, Ident: "RDMA_WRITE_ONLY_WITH_IMMEDIATE",
		Name: "RDMA WRITE Only with Immediate", ExtHeaders: ExtRETH | ExtImmDt, HeaderLen: 32, HasPayload: true,
		Position: PositionOnly, IsRequest: true, IsWrite: true, HasImmediate: true}
	if i != want {
		t.Errorf("%+v\nwant %+v", i, want)
	}
}

func TestExtHeadersString(t *testing.T) {
	tests := []struct {
		h    ExtHeaders
		want string
	}{
		{0, "none"},
		{ExtImmDt | ExtRETH, "RETH+ImmDt"},
		{ExtRETH | ExtFETH, "FETH+RETH"},
		{ExtRDETH | ExtDETH | ExtAtomicETH, "RDETH+DETH+AtomicETH"},
		{ExtIETH | 1<<15, "IETH+0x8000"},
	}
	for _, tt := range tests {
		if got := tt.h.String(); got != tt.want {
			t.Errorf("%#x: %q, want %q", uint16(tt.h), got, tt.want)
		}
	}
	if (ExtRETH|ExtImmDt).Len() != 20 || ExtHeaders(0).Len() != 0 || (ExtAtomicETH|ExtAETH|ExtDETH).Len() != 40 {
		t.Error("Len")
	}
}

func TestServiceAndPositionStrings(t *testing.T) {
	for s, want := range []string{"RC", "UC", "RD", "UD", "CNP", "XRC", "VENDOR6", "VENDOR7"} {
		if ServiceType(s).String() != want {
			t.Errorf("%d: %q", s, ServiceType(s).String())
		}
	}
	if ServiceUD.LongName() != "Unreliable Datagram (UD)" {
		t.Error(ServiceUD.LongName())
	}
	for p, want := range []string{"None", "First", "Middle", "Last", "Only"} {
		if Position(p).String() != want {
			t.Errorf("%d: %q", p, Position(p).String())
		}
	}
}

func BenchmarkOpcodeLookup(b *testing.B) {
	var n int
	for i := 0; b.Loop(); i++ {
		op := Opcode(i)
		if op.Valid() && op.HasPayload() {
			n += op.HeaderLen()
		}
	}
	_ = n
}

// TestRCOpcodesTable: the table PostSend checks an RC WR's opcode in holds
// exactly the send opcodes with a name, for every byte value.
func TestRCOpcodesTable(t *testing.T) {
	for o := range 256 {
		_, named := wrOpcodeNames[WROpcode(o)]
		if got := opcodeAllowed(QPTypeRC, WROpcode(o)); got != named {
			t.Errorf("opcode %d on RC: allowed %v, named %v", o, got, named)
		}
	}
}
