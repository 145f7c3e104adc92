package ibtransport_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/ibtransport/ibtest"
)

func TestUCSendWrite(t *testing.T) {
	p := newPair(t, ib.QPTypeUC, ibtest.DefaultConnOptions())
	src := regMR(t, p.A.PD, pattern(3000, 4), 0)
	dst := newGuarded(t, p.B.PD, 3000, allAccess)
	postRecv(t, p.B.QP, ib.RecvWR{WRID: 1, SGL: []ib.SGE{dst.mr.SGE(0, 3000)}})
	post(t, p.A.QP, ib.SendWR{WRID: 2, Opcode: ib.WRSendWithImm, Imm: 5, SGL: []ib.SGE{src.SGE(0, 3000)}, Signaled: true})
	wantWC(t, complete(t, p, p.A.CQ, 1)[0], 2, ib.WCSend, ib.WCSuccess)
	wc := complete(t, p, p.B.CQ, 1)[0]
	wantWC(t, wc, 1, ib.WCRecv, ib.WCSuccess)
	if wc.ByteLen != 3000 || wc.Imm != 5 || !bytes.Equal(dst.buf, pattern(3000, 4)) {
		t.Fatalf("UC SEND: %v", wc)
	}
	clear(dst.buf)
	post(t, p.A.QP, ib.SendWR{WRID: 3, Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{src.SGE(0, 3000)}, RemoteAddr: dst.mr.Addr(), RKey: dst.mr.RKey(), Signaled: true})
	wantWC(t, complete(t, p, p.A.CQ, 1)[0], 3, ib.WCRDMAWrite, ib.WCSuccess)
	if !bytes.Equal(dst.buf, pattern(3000, 4)) {
		t.Fatal("UC WRITE data differs")
	}
	if err := p.A.QP.PostSend(ib.SendWR{Opcode: ib.WRRDMARead}); err == nil {
		t.Fatal("UC accepted a READ")
	}
	for _, c := range []ib.QPCounters{p.A.QP.Counters(), p.B.QP.Counters()} {
		if c.AcksSent+c.AcksReceived != 0 {
			t.Fatal("UC sent ACKs")
		}
	}
}

// TestUCGap: losing a middle packet drops that message; its receive WQE takes the
// next message, and the sender never knows.
func TestUCGap(t *testing.T) {
	p := newPair(t, ib.QPTypeUC, ibtest.DefaultConnOptions())
	src := regMR(t, p.A.PD, pattern(6000, 4), 0)
	dst := newGuarded(t, p.B.PD, 6000, allAccess)
	postRecv(t, p.B.QP, ib.RecvWR{WRID: 1, SGL: []ib.SGE{dst.mr.SGE(0, 3000)}}, ib.RecvWR{WRID: 2, SGL: []ib.SGE{dst.mr.SGE(3000, 3000)}})
	p.Wire.Filter = filterDir(ibtest.AToB, func(i int, _ *ib.Packet) ibtest.Action { return ibtest.Action{Drop: i == 1} })
	post(t, p.A.QP,
		ib.SendWR{WRID: 10, Opcode: ib.WRSend, SGL: []ib.SGE{src.SGE(0, 3000)}, Signaled: true},
		ib.SendWR{WRID: 11, Opcode: ib.WRSend, SGL: []ib.SGE{src.SGE(3000, 3000)}, Signaled: true})
	wcs := complete(t, p, p.A.CQ, 2)
	wantWC(t, wcs[0], 10, ib.WCSend, ib.WCSuccess)
	wantWC(t, wcs[1], 11, ib.WCSend, ib.WCSuccess)
	wc := complete(t, p, p.B.CQ, 1)[0]
	wantWC(t, wc, 1, ib.WCRecv, ib.WCSuccess)
	if wc.ByteLen != 3000 || !bytes.Equal(dst.buf[:3000], pattern(6000, 4)[3000:]) {
		t.Fatal("the second message did not land in the first receive WQE")
	}
	noMore(t, p, p.B.CQ)
	if c := p.B.QP.Counters(); c.Drops[ib.DropOutOfSequence] != 1 {
		t.Fatalf("drops %v", c.Drops)
	}
}

func udPair(t *testing.T) *ibtest.Pair { return newPair(t, ib.QPTypeUD, ibtest.DefaultConnOptions()) }

func TestUDSend(t *testing.T) {
	p := udPair(t)
	src := regMR(t, p.A.PD, pattern(512, 6), 0)
	dst := newGuarded(t, p.B.PD, 40+512, ib.AccessLocalWrite)
	postRecv(t, p.B.QP, ib.RecvWR{WRID: 1, SGL: []ib.SGE{dst.mr.SGE(0, 40+512)}})
	var qkeys []uint32
	p.Wire.Tap = func(d ibtest.Direction, data []byte) {
		pk := decode(t, data)
		qkeys = append(qkeys, pk.DETH.QKey())
		if (len(qkeys) == 1 && pk.Opcode() != ib.OpcodeUDSendOnlyWithImm) || pk.DETH.SrcQP() != p.A.QP.QPN() || pk.BTH.AckReq() {
			t.Errorf("UD packet %s src %#x", pk.Opcode(), pk.DETH.SrcQP())
		}
	}
	post(t, p.A.QP, ib.SendWR{WRID: 2, Opcode: ib.WRSendWithImm, Imm: 3, SGL: []ib.SGE{src.SGE(0, 512)}, Signaled: true,
		AH: ibtest.AddressOf(ibtest.BToA), RemoteQPN: p.B.QP.QPN(), RemoteQKey: 0x80000000})
	wantWC(t, complete(t, p, p.A.CQ, 1)[0], 2, ib.WCSend, ib.WCSuccess)
	wc := complete(t, p, p.B.CQ, 1)[0]
	wantWC(t, wc, 1, ib.WCRecv, ib.WCSuccess)
	if wc.ByteLen != 552 || wc.SrcQP != p.A.QP.QPN() || wc.Flags != ib.WCFlagGRH|ib.WCFlagWithImm || wc.Imm != 3 {
		t.Fatalf("UD completion %v flags %s", wc, wc.Flags)
	}
	if qkeys[0] != 0x11111111 {
		t.Fatalf("controlled Q_Key sent as %#x", qkeys[0])
	}
	grh := dst.buf[:40]
	if grh[0]>>4 != 6 || grh[6] != 0x1B || [16]byte(grh[8:24]) != ibtest.GID(ibtest.AToB) || [16]byte(grh[24:40]) != ibtest.GID(ibtest.BToA) {
		t.Fatalf("GRH % x", grh)
	}
	if !bytes.Equal(dst.buf[40:], pattern(512, 6)) {
		t.Fatal("payload differs")
	}
	dst.check(t)

	// A wrong Q_Key is dropped silently.
	post(t, p.A.QP, ib.SendWR{WRID: 3, Opcode: ib.WRSend, SGL: []ib.SGE{src.SGE(0, 10)}, Signaled: true,
		AH: ibtest.AddressOf(ibtest.BToA), RemoteQPN: p.B.QP.QPN(), RemoteQKey: 0x1234})
	postRecv(t, p.B.QP, ib.RecvWR{WRID: 4, SGL: []ib.SGE{dst.mr.SGE(0, 552)}})
	wantWC(t, complete(t, p, p.A.CQ, 1)[0], 3, ib.WCSend, ib.WCSuccess)
	noMore(t, p, p.B.CQ)
	if c := p.B.QP.Counters(); c.Drops[ib.DropQKey] != 1 {
		t.Fatalf("drops %v", c.Drops)
	}
}

// TestUDTooLong: a UD send beyond the MTU emits no packet and is no error
// (IBTA C10-93.1.1; rxe completes it successfully): it completes with
// IBV_WC_SUCCESS, the QP stays in RTS, and the receiver's first receive gets
// the next message, the one that fits.
func TestUDTooLong(t *testing.T) {
	p := udPair(t)
	src := regMR(t, p.A.PD, make([]byte, 5000), 0)
	dst := regMR(t, p.B.PD, make([]byte, 4200), ib.AccessLocalWrite)
	postRecv(t, p.B.QP, ib.RecvWR{WRID: 5, SGL: []ib.SGE{dst.SGE(0, 4200)}})
	wr := ib.SendWR{WRID: 1, Opcode: ib.WRSend, SGL: []ib.SGE{src.SGE(0, 4097)}, Signaled: true,
		AH: ibtest.AddressOf(ibtest.BToA), RemoteQPN: p.B.QP.QPN(), RemoteQKey: 0x11111111}
	post(t, p.A.QP, wr)
	wantWC(t, complete(t, p, p.A.CQ, 1)[0], 1, ib.WCSend, ib.WCSuccess)
	if s := p.A.QP.State(); s != ib.QPStateRTS {
		t.Fatalf("state %s after a send beyond the MTU, want RTS", s)
	}
	wr.WRID, wr.SGL = 2, []ib.SGE{src.SGE(0, 4096)}
	post(t, p.A.QP, wr)
	wantWC(t, complete(t, p, p.A.CQ, 1)[0], 2, ib.WCSend, ib.WCSuccess)
	if wc := complete(t, p, p.B.CQ, 1)[0]; wc.WRID != 5 || wc.ByteLen != 4136 {
		t.Fatalf("%v, want wr 5 with the 4096 bytes (and the GRH's 40)", wc)
	}
	noMore(t, p, p.B.CQ)
}

func TestFlushAndAtomicWrite(t *testing.T) {
	p := newRC(t)
	remote := newGuarded(t, p.B.PD, 64, allAccess|ib.AccessFlushGlobal)
	val := make([]byte, 8)
	binary.NativeEndian.PutUint64(val, 0x1122334455667788)
	local := regMR(t, p.A.PD, val, ib.AccessLocalWrite)
	post(t, p.A.QP,
		ib.SendWR{WRID: 1, Opcode: ib.WRAtomicWrite, SGL: []ib.SGE{local.SGE(0, 8)}, RemoteAddr: remote.mr.Addr() + 8, RKey: remote.mr.RKey(), Signaled: true},
		ib.SendWR{WRID: 2, Opcode: ib.WRFlush, RemoteAddr: remote.mr.Addr(), RKey: remote.mr.RKey(), Signaled: true,
			Flush: ib.FlushInfo{Len: 64, Type: 1}},
		ib.SendWR{WRID: 3, Opcode: ib.WRFlush, RemoteAddr: remote.mr.Addr(), RKey: remote.mr.RKey(), Signaled: true,
			Flush: ib.FlushInfo{Type: 1, Level: 1}})
	wcs := complete(t, p, p.A.CQ, 3)
	wantWC(t, wcs[0], 1, ib.WCAtomicWrite, ib.WCSuccess)
	wantWC(t, wcs[1], 2, ib.WCFlush, ib.WCSuccess)
	wantWC(t, wcs[2], 3, ib.WCFlush, ib.WCSuccess)
	if !bytes.Equal(remote.buf[8:16], val) {
		t.Fatal("atomic write did not land")
	}
	remote.check(t)
	// Persistence was not granted: a remote access error.
	post(t, p.A.QP, ib.SendWR{WRID: 4, Opcode: ib.WRFlush, RemoteAddr: remote.mr.Addr(), RKey: remote.mr.RKey(), Signaled: true,
		Flush: ib.FlushInfo{Len: 8, Type: 2}})
	wantWC(t, complete(t, p, p.A.CQ, 1)[0], 4, ib.WCFlush, ib.WCRemAccessErr)
}
