package iwarp

import (
	"bytes"
	"errors"
	"testing"
)

func TestDDPGolden(t *testing.T) {
	send := FPDU(mustHex(t, goldenSendFPDU)).ULPDU()
	rr := FPDU(mustHex(t, goldenReadRequestFPDU)).ULPDU()
	write := FPDU(mustHex(t, goldenWriteFPDU)).ULPDU()
	tests := []struct {
		name         string
		b            []byte
		tagged, last bool
		hdr          int
		qn, msn, mo  uint32
		stag         uint32
		to           uint64
		op           Opcode
	}{
		{"send", send, false, true, 18, 0, 1, 0, 0, 0, OpSend},
		{"read request", rr, false, true, 18, 1, 1, 0, 0, 0, OpReadRequest},
		{"write", write, true, true, 14, 0, 0, 0, 0xd17eca00, 0x55d4befa9170, OpWrite},
	}
	for _, tc := range tests {
		d, err := ParseDDP(tc.b)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if d.Tagged() != tc.tagged || d.Last() != tc.last || d.Version() != 1 || d.Reserved() != 0 ||
			d.HeaderLen() != tc.hdr || len(d.Header()) != tc.hdr || len(d.Payload()) != len(tc.b)-tc.hdr {
			t.Errorf("%s: control %#x header %d", tc.name, d.Control(), d.HeaderLen())
		}
		if tc.tagged {
			if d.STag() != tc.stag || d.TO() != tc.to || len(d.RsvdULP()) != 1 {
				t.Errorf("%s: STag %#x TO %#x", tc.name, d.STag(), d.TO())
			}
		} else if d.QN() != tc.qn || d.MSN() != tc.msn || d.MO() != tc.mo || len(d.RsvdULP()) != 5 {
			t.Errorf("%s: QN %d MSN %d MO %d", tc.name, d.QN(), d.MSN(), d.MO())
		}
		r, err := ParseRDMAP(d)
		if err != nil || r.Opcode() != tc.op || r.Version() != 1 || r.Reserved() != 0 {
			t.Errorf("%s: %v opcode %v", tc.name, err, r.Opcode())
		}
		// Re-encoding from the fields gives the captured header, both ways.
		f := d.Fields()
		out := make([]byte, f.Len())
		if n, err := f.Encode(out); err != nil || n != tc.hdr || !bytes.Equal(out, d.Header()) {
			t.Errorf("%s: DDPFields %x, want %x", tc.name, out, d.Header())
		}
		rf := RDMAPFields{Opcode: r.Opcode(), Last: d.Last()}
		if tc.tagged {
			rf.STag, rf.TO = d.STag(), d.TO()
		} else {
			rf.MSN, rf.MO = d.MSN(), d.MO()
		}
		if n, err := rf.Encode(out); err != nil || n != tc.hdr || !bytes.Equal(out, d.Header()) {
			t.Errorf("%s: RDMAPFields %x, want %x", tc.name, out, d.Header())
		}
	}
}

func TestDDPSetters(t *testing.T) {
	b := make([]byte, DDPUntaggedHeaderLen)
	d := DDP(b)
	d.SetVersion(DDPVersion)
	d.SetLast(true)
	d.SetReserved(0xf)
	if d.Control() != 0x7d || d.Reserved() != 0xf {
		t.Errorf("control %#x", d.Control())
	}
	d.SetReserved(0)
	d.SetQN(1)
	d.SetMSN(0xdeadbeef)
	d.SetMO(0x1234)
	RDMAP(d).SetControl(RDMAPControl(OpSendInvalidate))
	RDMAP(d).SetInvalidateSTag(0xabcd)
	want := mustHex(t, "4144"+"0000abcd"+"00000001"+"deadbeef"+"00001234")
	if !bytes.Equal(b, want) {
		t.Errorf("%x, want %x", b, want)
	}
	d.SetQN(0)
	if r, err := ParseRDMAP(d); err != nil || r.InvalidateSTag() != 0xabcd || !r.Opcode().Invalidates() {
		t.Errorf("%v", err)
	}
	f := d.Fields()
	if f.RsvdULP1 != 0xabcd || f.MSN != 0xdeadbeef {
		t.Errorf("fields %+v", f)
	}
	d.SetLast(false)
	d.SetTagged(true)
	d.SetSTag(0x11223344)
	d.SetTO(0x0102030405060708)
	want = mustHex(t, "81441122334401020304050607080000")
	if !bytes.Equal(b[:16], want) || d.HeaderLen() != 14 {
		t.Errorf("%x, want %x", b[:16], want)
	}
	r := RDMAP(d)
	r.SetVersion(2)
	r.SetReserved(3)
	r.SetOpcode(OpWrite)
	if r.Control() != 0xb0 || r.Version() != 2 || r.Reserved() != 3 {
		t.Errorf("RDMAP control %#x", r.Control())
	}
}

func TestDDPRDMAPErrors(t *testing.T) {
	send := FPDU(mustHex(t, goldenSendFPDU)).ULPDU()
	mod := func(f func(b []byte)) []byte {
		b := append([]byte(nil), send...)
		f(b)
		return b
	}
	tests := []struct {
		name  string
		b     []byte
		want  error
		text  string
		rdmap bool // the error comes from ParseRDMAP
	}{
		{"empty", nil, ErrTruncated, "ddp: segment length 0 < 2", false},
		{"untagged cut", send[:17], ErrTruncated, "ddp: segment length 17 < 18", false},
		{"tagged cut", mod(func(b []byte) { b[0] |= 0x80 })[:13], ErrTruncated, "ddp: segment length 13 < 14", false},
		{"DDP version 2", mod(func(b []byte) { b[0] = 0x42 }), ErrBadVersion, "ddp: version 2 != 1", false},
		{"DDP version 0", mod(func(b []byte) { b[0] = 0x40 }), ErrBadVersion, "ddp: version 0 != 1", false},
		{"RDMAP version 0", mod(func(b []byte) { b[1] = 0x03 }), ErrBadVersion, "rdmap: version 0 != 1", true},
		{"RDMAP version 3", mod(func(b []byte) { b[1] = 0xc3 }), ErrBadVersion, "rdmap: version 3 != 1", true},
		{"reserved opcode", mod(func(b []byte) { b[1] = 0x4c }), ErrBadOpcode, "rdmap: opcode 12: reserved", true},
		{"tagged send", mod(func(b []byte) { b[0] |= 0x80 }), ErrBadOpcode, "rdmap: opcode 3: Send needs the untagged buffer model", true},
		{"untagged write", mod(func(b []byte) { b[1] = 0x40 }), ErrBadOpcode, "rdmap: opcode 0: Write needs the tagged buffer model", true},
		{"send on queue 1", mod(func(b []byte) { b[9] = 1 }), ErrBadOpcode, "rdmap: queue number 1 != 0: for Send", true},
		{"terminate on queue 0", mod(func(b []byte) { b[1] = 0x47 }), ErrBadOpcode, "rdmap: queue number 0 != 2: for Terminate", true},
	}
	for _, tc := range tests {
		d, err := ParseDDP(tc.b)
		if tc.rdmap {
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			_, err = ParseRDMAP(d)
		}
		if !errors.Is(err, tc.want) || err.Error() != tc.text {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.text)
		}
	}
}

func TestOpcodes(t *testing.T) {
	// Names as tshark 4.0 shows iwarp_rdma.opcode (tshark -G values).
	tests := []struct {
		op      Opcode
		name    string
		tagged  bool
		queue   uint32
		se, inv bool
	}{
		{OpWrite, "Write", true, 0, false, false},
		{OpReadRequest, "Read Request", false, 1, false, false},
		{OpReadResponse, "Read Response", true, 0, false, false},
		{OpSend, "Send", false, 0, false, false},
		{OpSendInvalidate, "Send with Invalidate", false, 0, false, true},
		{OpSendSE, "Send with SE", false, 0, true, false},
		{OpSendSEInvalidate, "Send with SE and Invalidate", false, 0, true, true},
		{OpTerminate, "Terminate", false, 2, false, false},
		{OpImmediateData, "Immediate Data", false, 0, false, false},
		{OpImmediateDataSE, "Immediate Data with SE", false, 0, true, false},
		{OpAtomicRequest, "Atomic Request", false, 1, false, false},
		{OpAtomicResponse, "Atomic Response", false, 3, false, false},
	}
	for _, tc := range tests {
		if tc.op.String() != tc.name || !tc.op.Valid() || tc.op.Tagged() != tc.tagged ||
			tc.op.Solicited() != tc.se || tc.op.Invalidates() != tc.inv ||
			(!tc.tagged && tc.op.QueueNumber() != tc.queue) {
			t.Errorf("%d: %q tagged %v queue %d", tc.op, tc.op, tc.op.Tagged(), tc.op.QueueNumber())
		}
		// Every opcode encodes into a header ParseRDMAP accepts.
		f := RDMAPFields{Opcode: tc.op, Last: true, InvalidateSTag: 7, STag: 1, TO: 2, MSN: 3, MO: 4}
		b := make([]byte, 18)
		n, _ := f.Encode(b)
		d, err := ParseDDP(b[:n])
		if err != nil {
			t.Fatal(err)
		}
		r, err := ParseRDMAP(d)
		if err != nil || r.Opcode() != tc.op || (tc.inv && r.InvalidateSTag() != 7) ||
			(!tc.inv && !tc.tagged && r.InvalidateSTag() != 0) {
			t.Errorf("%v: %v", tc.op, err)
		}
	}
	if s := Opcode(12).String(); s != "Unknown 12" || Opcode(12).Valid() {
		t.Errorf("opcode 12: %q", s)
	}
	if !OpSend.IsSend() || OpWrite.IsSend() || OpTerminate.IsSend() {
		t.Error("IsSend")
	}
}

func TestReadRequest(t *testing.T) {
	d := DDP(FPDU(mustHex(t, goldenReadRequestFPDU)).ULPDU())
	q, err := ParseReadRequest(d.Payload())
	if err != nil {
		t.Fatal(err)
	}
	want := ReadRequestFields{SinkSTag: 0x1ee95d00, SinkTO: 0x55ab5ab7e170, Size: 64,
		SourceSTag: 0x795c9b00, SourceTO: 0x55d4befac470}
	if q.Fields() != want {
		t.Errorf("%+v, want %+v", q.Fields(), want)
	}
	out := make([]byte, ReadRequestLen)
	if _, err := want.Encode(out); err != nil || !bytes.Equal(out, q) {
		t.Errorf("%x, want %x", out, []byte(q))
	}
	if _, err := ParseReadRequest(out[:27]); !errors.Is(err, ErrTruncated) ||
		err.Error() != "rdmap: read request length 27 < 28" {
		t.Errorf("%v", err)
	}
	if _, err := want.Encode(out[:27]); !errors.Is(err, ErrTruncated) {
		t.Errorf("%v", err)
	}
}

func TestAtomics(t *testing.T) {
	b := make([]byte, AtomicRequestLen)
	a := AtomicRequest(b)
	a.SetOpcode(AtomicCompareSwap)
	a.SetRequestID(0x01020304)
	a.SetRemoteSTag(0x0a0b0c0d)
	a.SetRemoteTO(0x1111111111111111)
	a.SetAddSwapData(0x2222222222222222)
	a.SetAddSwapMask(0x3333333333333333)
	a.SetCompareData(0x4444444444444444)
	a.SetCompareMask(0x5555555555555555)
	want := mustHex(t, "00000002"+"01020304"+"0a0b0c0d"+"1111111111111111"+"2222222222222222"+
		"3333333333333333"+"4444444444444444"+"5555555555555555")
	if !bytes.Equal(b, want) {
		t.Errorf("%x, want %x", b, want)
	}
	p, err := ParseAtomicRequest(append(b, 9))
	if err != nil || len(p) != AtomicRequestLen || p.Opcode() != AtomicCompareSwap || p.Reserved() != 0 ||
		p.RequestID() != 0x01020304 || p.RemoteSTag() != 0x0a0b0c0d || p.RemoteTO() != 0x1111111111111111 ||
		p.AddSwapData() != 0x2222222222222222 || p.AddSwapMask() != 0x3333333333333333 ||
		p.CompareData() != 0x4444444444444444 || p.CompareMask() != 0x5555555555555555 {
		t.Errorf("%v %x", err, []byte(p))
	}
	if p.Opcode().String() != "CmpSwap" || AtomicFetchAdd.String() != "FetchAdd" ||
		AtomicSwap.String() != "Swap" || AtomicOpcode(9).String() != "Unknown 9" {
		t.Error("atomic opcode names")
	}
	r := AtomicResponse(make([]byte, AtomicResponseLen))
	r.SetRequestID(7)
	r.SetOriginalValue(0x8877665544332211)
	if !bytes.Equal(r, mustHex(t, "00000007"+"8877665544332211")) || r.RequestID() != 7 ||
		r.OriginalValue() != 0x8877665544332211 {
		t.Errorf("%x", []byte(r))
	}
	im := ImmediateData(make([]byte, 8))
	im.SetValue(0xfeedface)
	if im.Value() != 0xfeedface {
		t.Error("immediate data")
	}
	for _, err := range []error{
		func() error { _, e := ParseAtomicRequest(b[:51]); return e }(),
		func() error { _, e := ParseAtomicResponse(r[:11]); return e }(),
		func() error { _, e := ParseImmediateData(im[:7]); return e }(),
	} {
		if !errors.Is(err, ErrTruncated) {
			t.Errorf("%v", err)
		}
	}
}
