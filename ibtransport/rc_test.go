package ibtransport_test

import (
	"bytes"
	"fmt"
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/ibtransport/ibtest"
)

// TestRCOperations runs every RC operation over sizes around the MTU and checks
// the data and the completions on both sides.
func TestRCOperations(t *testing.T) {
	sizes := []int{0, 1, 3, 1023, 1024, 1025, 4096, 5000, 65536}
	for _, n := range sizes {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			p := newRC(t)
			src := newGuarded(t, p.A.PD, n, ib.AccessLocalWrite)
			dst := newGuarded(t, p.B.PD, n, allAccess)
			copy(src.buf, pattern(n, 1))

			// SEND with immediate
			postRecv(t, p.B.QP, ib.RecvWR{WRID: 100, SGL: []ib.SGE{dst.mr.SGE(0, n)}})
			post(t, p.A.QP, ib.SendWR{WRID: 1, Opcode: ib.WRSendWithImm, Imm: 0xdeadbeef, SGL: []ib.SGE{src.mr.SGE(0, n)}, Signaled: true})
			wantWC(t, complete(t, p, p.A.CQ, 1)[0], 1, ib.WCSend, ib.WCSuccess)
			wc := complete(t, p, p.B.CQ, 1)[0]
			wantWC(t, wc, 100, ib.WCRecv, ib.WCSuccess)
			if wc.ByteLen != uint32(n) || wc.Imm != 0xdeadbeef || wc.Flags&ib.WCFlagWithImm == 0 || !bytes.Equal(dst.buf, src.buf) {
				t.Fatalf("SEND: %v, data equal %v", wc, bytes.Equal(dst.buf, src.buf))
			}

			// WRITE
			copy(src.buf, pattern(n, 9))
			post(t, p.A.QP, ib.SendWR{WRID: 2, Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{src.mr.SGE(0, n)},
				RemoteAddr: dst.mr.Addr(), RKey: dst.mr.RKey(), Signaled: true})
			wc = complete(t, p, p.A.CQ, 1)[0]
			wantWC(t, wc, 2, ib.WCRDMAWrite, ib.WCSuccess)
			if wc.ByteLen != uint32(n) || !bytes.Equal(dst.buf, src.buf) {
				t.Fatal("WRITE data differs")
			}

			// WRITE with immediate consumes a receive WQE
			copy(src.buf, pattern(n, 17))
			postRecv(t, p.B.QP, ib.RecvWR{WRID: 101})
			post(t, p.A.QP, ib.SendWR{WRID: 3, Opcode: ib.WRRDMAWriteWithImm, Imm: 7, SGL: []ib.SGE{src.mr.SGE(0, n)},
				RemoteAddr: dst.mr.Addr(), RKey: dst.mr.RKey(), Signaled: true})
			wantWC(t, complete(t, p, p.A.CQ, 1)[0], 3, ib.WCRDMAWrite, ib.WCSuccess)
			wc = complete(t, p, p.B.CQ, 1)[0]
			wantWC(t, wc, 101, ib.WCRecvRDMAWithImm, ib.WCSuccess)
			if wc.Imm != 7 || wc.ByteLen != uint32(n) || !bytes.Equal(dst.buf, src.buf) {
				t.Fatalf("WRITE with imm: %v", wc)
			}

			// READ
			copy(dst.buf, pattern(n, 33))
			clear(src.buf)
			post(t, p.A.QP, ib.SendWR{WRID: 4, Opcode: ib.WRRDMARead, SGL: []ib.SGE{src.mr.SGE(0, n)},
				RemoteAddr: dst.mr.Addr(), RKey: dst.mr.RKey(), Signaled: true})
			wc = complete(t, p, p.A.CQ, 1)[0]
			wantWC(t, wc, 4, ib.WCRDMARead, ib.WCSuccess)
			if wc.ByteLen != uint32(n) || !bytes.Equal(src.buf, dst.buf) {
				t.Fatal("READ data differs")
			}
			src.check(t)
			dst.check(t)
			noMore(t, p, p.A.CQ)
			noMore(t, p, p.B.CQ)
		})
	}
}

// TestRCScatterGather sends from three SGEs into two.
func TestRCScatterGather(t *testing.T) {
	p := newRC(t)
	a := make([]byte, 3000)
	copy(a, pattern(3000, 5))
	amr := regMR(t, p.A.PD, a, ib.AccessLocalWrite)
	b := newGuarded(t, p.B.PD, 4000, allAccess)
	postRecv(t, p.B.QP, ib.RecvWR{WRID: 9, SGL: []ib.SGE{b.mr.SGE(0, 1500), b.mr.SGE(2000, 2000)}})
	post(t, p.A.QP, ib.SendWR{WRID: 1, Opcode: ib.WRSend, Signaled: true,
		SGL: []ib.SGE{amr.SGE(0, 100), amr.SGE(100, 1900), amr.SGE(2000, 1000)}})
	complete(t, p, p.A.CQ, 1)
	wc := complete(t, p, p.B.CQ, 1)[0]
	wantWC(t, wc, 9, ib.WCRecv, ib.WCSuccess)
	got := append(append([]byte(nil), b.buf[:1500]...), b.buf[2000:3500]...)
	if wc.ByteLen != 3000 || !bytes.Equal(got, a) {
		t.Fatal("scattered data differs")
	}
	if !bytes.Equal(b.buf[1500:2000], make([]byte, 500)) || !bytes.Equal(b.buf[3500:], make([]byte, 500)) {
		t.Fatal("bytes outside the receive SGEs changed")
	}
	b.check(t)
}

// TestRCInline sends inline data and reuses the buffer at once.
func TestRCInline(t *testing.T) {
	p := newRC(t)
	a := []byte("inline hello")
	amr := regMR(t, p.A.PD, a, 0)
	dst := make([]byte, 64)
	dmr := regMR(t, p.B.PD, dst, allAccess)
	postRecv(t, p.B.QP, ib.RecvWR{WRID: 1, SGL: []ib.SGE{dmr.SGE(0, 64)}})
	post(t, p.A.QP, ib.SendWR{WRID: 1, Opcode: ib.WRSend, Inline: true, Signaled: true, SGL: []ib.SGE{amr.SGE(0, len(a))}})
	copy(a, "XXXXXXXXXXXX") // the data was copied at post time
	complete(t, p, p.A.CQ, 1)
	wc := complete(t, p, p.B.CQ, 1)[0]
	if string(dst[:wc.ByteLen]) != "inline hello" {
		t.Fatalf("got %q", dst[:wc.ByteLen])
	}
	postRecv(t, p.B.QP, ib.RecvWR{WRID: 2, SGL: []ib.SGE{dmr.SGE(0, 64)}})
	data := []byte("no region needed")
	post(t, p.A.QP, ib.SendWR{WRID: 2, Opcode: ib.WRSend, Inline: true, InlineData: data, Signaled: true})
	data[0] = 'X'
	complete(t, p, p.A.CQ, 1)
	wc = complete(t, p, p.B.CQ, 1)[0]
	if string(dst[:wc.ByteLen]) != "no region needed" {
		t.Fatalf("got %q", dst[:wc.ByteLen])
	}
	if err := p.A.QP.PostSend(ib.SendWR{Opcode: ib.WRSend, Inline: true, SGL: []ib.SGE{{Length: 300}}}); err == nil {
		t.Fatal("inline data beyond MaxInlineData accepted")
	}
}

// TestRCUnsignaled checks that unsignaled WRs retire silently and in order.
func TestRCUnsignaled(t *testing.T) {
	p := newRC(t)
	buf := make([]byte, 4096)
	mr := regMR(t, p.A.PD, buf, ib.AccessLocalWrite)
	dst := make([]byte, 4096)
	dmr := regMR(t, p.B.PD, dst, allAccess)
	var wrs []ib.SendWR
	for i := range 10 {
		wrs = append(wrs, ib.SendWR{WRID: uint64(i), Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{mr.SGE(0, 4096)},
			RemoteAddr: dmr.Addr(), RKey: dmr.RKey(), Signaled: i%3 == 2})
	}
	post(t, p.A.QP, wrs...)
	wcs := complete(t, p, p.A.CQ, 3)
	for i, wc := range wcs {
		wantWC(t, wc, uint64(3*i+2), ib.WCRDMAWrite, ib.WCSuccess)
	}
	noMore(t, p, p.A.CQ)
}

// TestRCWireFormat checks the packets against what rxe sends in the captures
// (rxe-write-bw.pcap, rxe-read-bw.pcap): a 4096-byte WRITE at MTU 1024 is
// First/Middle/Middle/Last with AckReq only on Last; the ACK carries syndrome 0x1F
// (credits invalid) and MSN 1; a READ request has AckReq and its responses carry
// an AETH in First and Last only.
func TestRCWireFormat(t *testing.T) {
	p := newRC(t)
	buf := make([]byte, 4096)
	mr := regMR(t, p.A.PD, buf, ib.AccessLocalWrite)
	dmr := regMR(t, p.B.PD, make([]byte, 4096), allAccess)
	type rec struct {
		dir     ibtest.Direction
		op      ib.Opcode
		ackReq  bool
		psn     uint32
		syn     int
		msn     uint32
		payload int
	}
	var got []rec
	p.Wire.Tap = func(d ibtest.Direction, data []byte) {
		pk := decode(t, data)
		r := rec{dir: d, op: pk.Opcode(), ackReq: pk.BTH.AckReq(), psn: pk.BTH.PSN(), syn: -1, payload: len(pk.Payload)}
		if pk.AETH != nil {
			r.syn, r.msn = int(pk.AETH.Syndrome()), pk.AETH.MSN()
		}
		if pk.BTH.PKey() != 0xFFFF || pk.BTH.PadCount() != 0 {
			t.Errorf("packet %v: pkey %#x pad %d", r, pk.BTH.PKey(), pk.BTH.PadCount())
		}
		got = append(got, r)
	}
	post(t, p.A.QP, ib.SendWR{WRID: 1, Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{mr.SGE(0, 4096)}, RemoteAddr: dmr.Addr(), RKey: dmr.RKey(), Signaled: true},
		ib.SendWR{WRID: 2, Opcode: ib.WRRDMARead, SGL: []ib.SGE{mr.SGE(0, 4096)}, RemoteAddr: dmr.Addr(), RKey: dmr.RKey(), Signaled: true})
	complete(t, p, p.A.CQ, 2)
	A, B := ibtest.AToB, ibtest.BToA
	want := []rec{
		{A, ib.OpcodeRCRDMAWriteFirst, false, 0x1000, -1, 0, 1024},
		{A, ib.OpcodeRCRDMAWriteMiddle, false, 0x1001, -1, 0, 1024},
		{A, ib.OpcodeRCRDMAWriteMiddle, false, 0x1002, -1, 0, 1024},
		{A, ib.OpcodeRCRDMAWriteLast, true, 0x1003, -1, 0, 1024},
		{A, ib.OpcodeRCRDMAReadRequest, true, 0x1004, -1, 0, 0},
		{B, ib.OpcodeRCAcknowledge, false, 0x1003, 0x1f, 1, 0},
		{B, ib.OpcodeRCRDMAReadResponseFirst, false, 0x1004, 0x1f, 2, 1024},
		{B, ib.OpcodeRCRDMAReadResponseMiddle, false, 0x1005, -1, 0, 1024},
		{B, ib.OpcodeRCRDMAReadResponseMiddle, false, 0x1006, -1, 0, 1024},
		{B, ib.OpcodeRCRDMAReadResponseLast, false, 0x1007, 0x1f, 2, 1024},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("packets:\n got %v\nwant %v", got, want)
	}
}
