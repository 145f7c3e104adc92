package ibtransport_test

import (
	"bytes"
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/ibtransport/ibtest"
)

// gatherRun runs one scenario — multi-SGE WRITEs and SENDs, inline data, a
// READ, unaligned lengths, a message whose payload spans more pieces than
// the batch gathers — over a wire whose Output batch gathers maxPieces
// payload pieces (0: copies), and returns every packet sent and both sides'
// memory afterwards.
func gatherRun(t *testing.T, maxPieces int) (pkts [][]byte, memA, memB []byte) {
	p := newRC(t)
	p.Wire.Gather = maxPieces
	p.Wire.Tap = func(_ ibtest.Direction, data []byte) { pkts = append(pkts, bytes.Clone(data)) }
	memA, memB = pattern(20000, 3), make([]byte, 20000)
	a := regMR(t, p.A.PD, memA, allAccess)
	b := regMR(t, p.B.PD, memB, allAccess)
	for i := 0; i < 4; i++ {
		postRecv(t, p.B.QP, ib.RecvWR{WRID: uint64(i), SGL: []ib.SGE{b.SGE(10000+i*2000, 2000)}})
	}
	sgl3 := []ib.SGE{a.SGE(0, 700), a.SGE(5000, 901), a.SGE(9000, 1500)} // 3 pieces, 3101 bytes
	post(t, p.A.QP,
		ib.SendWR{WRID: 1, Opcode: ib.WRRDMAWrite, SGL: sgl3, RemoteAddr: b.Addr(), RKey: b.RKey(), Signaled: true},
		ib.SendWR{WRID: 2, Opcode: ib.WRSend, SGL: []ib.SGE{a.SGE(100, 1999)}, Signaled: true},
		ib.SendWR{WRID: 3, Opcode: ib.WRSend, SGL: sgl3[:2], Signaled: true},
		ib.SendWR{WRID: 4, Opcode: ib.WRSend, Inline: true, InlineData: []byte("inline, not gathered from a region"), Signaled: true},
		ib.SendWR{WRID: 5, Opcode: ib.WRRDMAWriteWithImm, SGL: []ib.SGE{a.SGE(13, 5)}, RemoteAddr: b.Addr() + 5000, RKey: b.RKey(), Imm: 7, Signaled: true},
		ib.SendWR{WRID: 6, Opcode: ib.WRRDMARead, SGL: []ib.SGE{a.SGE(15000, 4099)}, RemoteAddr: b.Addr(), RKey: b.RKey(), Signaled: true},
	)
	if err := p.Wire.Run(func() bool { return p.A.CQ.Len() == 6 && p.B.CQ.Len() == 4 }, 100000); err != nil {
		t.Fatal(err)
	}
	wc := make([]ib.WC, 8)
	for _, c := range wc[:p.A.CQ.Poll(wc)] {
		if c.Status != ib.WCSuccess {
			t.Fatalf("%v", c)
		}
	}
	return pkts, memA, memB
}

// TestGatherSendsTheSamePackets runs the same transfers with payloads
// copied into the packet buffers and gathered in place (with room for all
// pieces, and for fewer, so that some are copied after all): the packets on
// the wire are the same byte for byte, and so is the memory afterwards.
func TestGatherSendsTheSamePackets(t *testing.T) {
	want, wantA, wantB := gatherRun(t, 0)
	for _, pieces := range []int{1, 2, 8} {
		got, gotA, gotB := gatherRun(t, pieces)
		if len(got) != len(want) {
			t.Fatalf("gather %d: %d packets, want %d", pieces, len(got), len(want))
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("gather %d: packet %d differs:\n%x\nwant\n%x", pieces, i, got[i], want[i])
			}
		}
		if !bytes.Equal(gotA, wantA) || !bytes.Equal(gotB, wantB) {
			t.Fatalf("gather %d: memory differs", pieces)
		}
	}
	if !bytes.Equal(wantB[:700], wantA[:700]) || !bytes.Equal(wantB[700:1601], wantA[5000:5901]) {
		t.Fatal("the WRITE did not land")
	}
}

// TestGatherPacketLen checks OutputPacket.Len and the byte counters of a
// gathered packet.
func TestGatherPacketLen(t *testing.T) {
	p := newRC(t)
	a := regMR(t, p.A.PD, pattern(5000, 1), allAccess)
	b := regMR(t, p.B.PD, make([]byte, 5000), allAccess)
	post(t, p.A.QP, ib.SendWR{WRID: 1, Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{a.SGE(0, 1000), a.SGE(2000, 1001)},
		RemoteAddr: b.Addr(), RKey: b.RKey()})
	out := ib.NewOutputBatch(8, 42, 4)
	out.Gather(4)
	if n := p.A.Ctx.Output(p.Wire.Clock.Now(), out); n != 2 {
		t.Fatalf("Output = %d packets, want 2 (MTU 1024)", n)
	}
	first, last := &out.Packets[0], &out.Packets[1]
	// Packet 0: the first SGE's 1000 bytes and 24 of the second; packet 1:
	// the other 977, and 3 bytes of pad.
	if len(first.Payload) != 2 || len(first.Payload[0]) != 1000 || len(first.Payload[1]) != 24 || first.Pad != 0 {
		t.Errorf("first: %d pieces, pad %d", len(first.Payload), first.Pad)
	}
	if len(last.Payload) != 1 || len(last.Payload[0]) != 977 || last.Pad != 3 {
		t.Errorf("last: %d pieces, pad %d", len(last.Payload), last.Pad)
	}
	if first.Len() != 12+16+1024 || last.Len() != 12+977+3 {
		t.Errorf("lengths %d and %d", first.Len(), last.Len())
	}
	if len(first.Packet()) != 12+16 || len(last.Packet()) != 12 {
		t.Errorf("header lengths %d and %d", len(first.Packet()), len(last.Packet()))
	}
	if c := p.A.QP.Counters(); c.BytesOut != uint64(first.Len()+last.Len()) {
		t.Errorf("BytesOut %d, want %d", c.BytesOut, first.Len()+last.Len())
	}
}
