package iwarp_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/iwarp"
)

const (
	srcOff = 0       // each side's buffer: the source half ...
	dstOff = 1 << 20 // ... and the destination half
	half   = 1 << 20
	guardN = 64
)

// barrier orders everything before it on both directions (RDMAP delivers a Send
// after every earlier message of the stream is placed) and establishes the
// happens-before the race detector needs: a zero-length SEND each way.
func barrier(t testing.TB, a, b *side) {
	t.Helper()
	for _, d := range [][2]*side{{a, b}, {b, a}} {
		from, to := d[0], d[1]
		if err := to.qp.PostRecv(ib.RecvWR{WRID: 9000}); err != nil {
			t.Fatal(err)
		}
		if err := from.qp.PostSend(ib.SendWR{WRID: 9001, Opcode: ib.WRSend, Signaled: true}); err != nil {
			t.Fatal(err)
		}
		wantOK(t, wait(t, to.rcq, 1)[0], 9000, ib.WCRecv)
		wantOK(t, wait(t, from.scq, 1)[0], 9001, ib.WCSend)
	}
}

// prepare fills a's source with a pattern for case seed and b's destination
// (plus a guard after it) with 0xEE.
func prepare(a, b *side, n int, seed byte) {
	fill(a.buf[srcOff:srcOff+n], seed)
	for i := range b.buf[dstOff : dstOff+half+guardN] {
		b.buf[dstOff+i] = 0xEE
	}
}

// verify checks that dst holds src's n octets and that the guard after them is
// untouched.
func verify(t testing.TB, what string, dst, src []byte, n int) {
	t.Helper()
	if !bytes.Equal(dst[:n], src[:n]) {
		for i := range n {
			if dst[i] != src[i] {
				t.Fatalf("%s: octet %d is %#x, want %#x", what, i, dst[i], src[i])
			}
		}
	}
	for i, c := range dst[n : n+guardN] {
		if c != 0xEE {
			t.Fatalf("%s: octet %d after the %d placed was overwritten (%#x)", what, i, n, c)
		}
	}
}

// fastReg registers n octets of mem into a new fast-register MR through s's send
// queue (REG_MR) and returns the MR and its key.
func fastReg(t testing.TB, s *side, mem []byte, access ib.Access, keyByte uint8) (*ib.MR, uint32) {
	t.Helper()
	mr, err := s.pd.AllocMR(len(mem))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.qp.PostSend(ib.SendWR{WRID: 8000, Opcode: ib.WRRegMR, Signaled: true,
		RegMR: ib.RegMRInfo{MR: mr, Buf: mem, Access: access, Key: keyByte}}); err != nil {
		t.Fatal(err)
	}
	wantOK(t, wait(t, s.scq, 1)[0], 8000, ib.WCRegMR)
	return mr, mr.RKey()
}

type opCase struct {
	name string
	run  func(t *testing.T, a, b *side, n int, seed byte)
}

var sizedOps = []opCase{
	{"SEND", func(t *testing.T, a, b *side, n int, seed byte) {
		prepare(a, b, n, seed)
		b.qp.PostRecv(ib.RecvWR{WRID: 1, SGL: []ib.SGE{b.mr.SGE(dstOff, half)}})
		a.qp.PostSend(ib.SendWR{WRID: 2, Opcode: ib.WRSend, SGL: []ib.SGE{a.mr.SGE(srcOff, n)}, Signaled: true})
		wc := wait(t, b.rcq, 1)[0]
		wantOK(t, wc, 1, ib.WCRecv)
		if wc.ByteLen != uint32(n) || wc.Flags != 0 {
			t.Fatalf("receive %v, want %d octets, no flags", wc, n)
		}
		wantOK(t, wait(t, a.scq, 1)[0], 2, ib.WCSend)
		verify(t, "send", b.buf[dstOff:], a.buf[srcOff:], n)
	}},
	{"SEND_WITH_SE", func(t *testing.T, a, b *side, n int, seed byte) {
		prepare(a, b, n, seed)
		drainEvents(b.rcq)
		b.rcq.Notify(true)
		// A SEND without SE does not fire a solicited-only arm; one with SE does.
		b.qp.PostRecv(ib.RecvWR{WRID: 1, SGL: []ib.SGE{b.mr.SGE(dstOff, half)}}, ib.RecvWR{WRID: 2, SGL: []ib.SGE{b.mr.SGE(dstOff, half)}})
		a.qp.PostSend(ib.SendWR{WRID: 3, Opcode: ib.WRSend, SGL: []ib.SGE{a.mr.SGE(srcOff, n)}})
		wantOK(t, wait(t, b.rcq, 1)[0], 1, ib.WCRecv)
		select {
		case <-b.rcq.Events():
			t.Fatal("a SEND without SE fired a solicited-only arm")
		default:
		}
		a.qp.PostSend(ib.SendWR{WRID: 4, Opcode: ib.WRSend, Solicited: true, SGL: []ib.SGE{a.mr.SGE(srcOff, n)}, Signaled: true})
		wc := wait(t, b.rcq, 1)[0]
		wantOK(t, wc, 2, ib.WCRecv)
		select {
		case <-b.rcq.Events():
		case <-time.After(5 * time.Second):
			t.Fatal("SEND_WITH_SE did not fire the solicited-only arm")
		}
		wantOK(t, wait(t, a.scq, 1)[0], 4, ib.WCSend)
		verify(t, "send with SE", b.buf[dstOff:], a.buf[srcOff:], n)
	}},
	{"SEND_WITH_INV", func(t *testing.T, a, b *side, n int, seed byte) { sendInv(t, a, b, n, seed, false) }},
	{"SEND_WITH_SE_INV", func(t *testing.T, a, b *side, n int, seed byte) { sendInv(t, a, b, n, seed, true) }},
	{"WRITE", func(t *testing.T, a, b *side, n int, seed byte) {
		prepare(a, b, n, seed)
		a.qp.PostSend(ib.SendWR{WRID: 1, Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{a.mr.SGE(srcOff, n)},
			RKey: b.mr.RKey(), RemoteAddr: b.mr.Addr() + dstOff, Signaled: true})
		wc := wait(t, a.scq, 1)[0]
		wantOK(t, wc, 1, ib.WCRDMAWrite)
		if wc.ByteLen != uint32(n) {
			t.Fatalf("write completion %v", wc)
		}
		barrier(t, a, b)
		verify(t, "write", b.buf[dstOff:], a.buf[srcOff:], n)
	}},
	{"WRITE_3SGE", func(t *testing.T, a, b *side, n int, seed byte) {
		prepare(a, b, n, seed)
		k := n / 3
		a.qp.PostSend(ib.SendWR{WRID: 1, Opcode: ib.WRRDMAWrite,
			SGL:  []ib.SGE{a.mr.SGE(srcOff, k), a.mr.SGE(srcOff+k, 0), a.mr.SGE(srcOff+k, n-k)},
			RKey: b.mr.RKey(), RemoteAddr: b.mr.Addr() + dstOff, Signaled: true})
		wantOK(t, wait(t, a.scq, 1)[0], 1, ib.WCRDMAWrite)
		barrier(t, a, b)
		verify(t, "write with 3 SGEs", b.buf[dstOff:], a.buf[srcOff:], n)
	}},
	{"READ", func(t *testing.T, a, b *side, n int, seed byte) {
		prepare(b, a, n, seed) // b's source, a's destination
		a.qp.PostSend(ib.SendWR{WRID: 1, Opcode: ib.WRRDMARead, SGL: []ib.SGE{a.mr.SGE(dstOff, n)},
			RKey: b.mr.RKey(), RemoteAddr: b.mr.Addr() + srcOff, Signaled: true})
		wc := wait(t, a.scq, 1)[0]
		wantOK(t, wc, 1, ib.WCRDMARead)
		if wc.ByteLen != uint32(n) {
			t.Fatalf("read completion %v", wc)
		}
		verify(t, "read", a.buf[dstOff:], b.buf[srcOff:], n)
		barrier(t, a, b)
	}},
	{"READ_WITH_INV", func(t *testing.T, a, b *side, n int, seed byte) {
		prepare(b, a, n, seed)
		mem := a.buf[dstOff : dstOff+max(n, 1)]
		mr, key := fastReg(t, a, mem, ib.AccessLocalWrite, seed)
		a.qp.PostSend(ib.SendWR{WRID: 1, Opcode: ib.WRRDMAReadWithInv, SGL: []ib.SGE{{Addr: mr.Addr(), Length: uint32(n), LKey: key}},
			InvalidateRKey: key, RKey: b.mr.RKey(), RemoteAddr: b.mr.Addr() + srcOff, Signaled: true})
		wantOK(t, wait(t, a.scq, 1)[0], 1, ib.WCRDMARead)
		verify(t, "read with invalidate", a.buf[dstOff:], b.buf[srcOff:], n)
		if _, f := a.qp.Wire().RemoteBuffer(key, mr.Addr(), 1, ib.AccessRemoteWrite); f != ib.KeyInvalid {
			t.Fatalf("the sink's key is still valid after READ_WITH_INV: %v", f)
		}
		barrier(t, a, b)
	}},
	{"WRITE_WITH_IMM", func(t *testing.T, a, b *side, n int, seed byte) {
		prepare(a, b, n, seed)
		b.qp.PostRecv(ib.RecvWR{WRID: 1})
		imm := uint32(0xC0DE0000) | uint32(seed)
		a.qp.PostSend(ib.SendWR{WRID: 2, Opcode: ib.WRRDMAWriteWithImm, SGL: []ib.SGE{a.mr.SGE(srcOff, n)},
			RKey: b.mr.RKey(), RemoteAddr: b.mr.Addr() + dstOff, Imm: imm, Signaled: true})
		wc := wait(t, b.rcq, 1)[0]
		wantOK(t, wc, 1, ib.WCRecvRDMAWithImm)
		if wc.Imm != imm || wc.Flags&ib.WCFlagWithImm == 0 || wc.ByteLen != uint32(n) {
			t.Fatalf("receive %v, want imm %#x and %d octets", wc, imm, n)
		}
		wantOK(t, wait(t, a.scq, 1)[0], 2, ib.WCRDMAWrite)
		verify(t, "write with immediate", b.buf[dstOff:], a.buf[srcOff:], n)
	}},
}

func drainEvents(cq *ib.CQ) {
	for {
		select {
		case <-cq.Events():
		default:
			return
		}
	}
}

// sendInv sends with invalidate of a fast-register MR of the receiver.
func sendInv(t *testing.T, a, b *side, n int, seed byte, se bool) {
	prepare(a, b, n, seed)
	fmr, key := fastReg(t, b, make([]byte, 4096), ib.AccessLocalWrite|ib.AccessRemoteWrite, seed)
	b.qp.PostRecv(ib.RecvWR{WRID: 1, SGL: []ib.SGE{b.mr.SGE(dstOff, half)}})
	a.qp.PostSend(ib.SendWR{WRID: 2, Opcode: ib.WRSendWithInv, Solicited: se, SGL: []ib.SGE{a.mr.SGE(srcOff, n)},
		InvalidateRKey: key, Signaled: true})
	wc := wait(t, b.rcq, 1)[0]
	wantOK(t, wc, 1, ib.WCRecv)
	if wc.Flags&ib.WCFlagWithInv == 0 || wc.InvalidatedRKey != key || wc.ByteLen != uint32(n) {
		t.Fatalf("receive %v, want invalidated key %#x and %d octets", wc, key, n)
	}
	if _, f := b.qp.Wire().RemoteBuffer(key, fmr.Addr(), 1, ib.AccessRemoteWrite); f != ib.KeyInvalid {
		t.Fatalf("the key is still valid after SEND_WITH_INV: %v", f)
	}
	wantOK(t, wait(t, a.scq, 1)[0], 2, ib.WCSend)
	verify(t, "send with invalidate", b.buf[dstOff:], a.buf[srcOff:], n)
}

// once-per-connection operations: atomics and fast registration.
func atomicsAndFastReg(t *testing.T, a, b *side) {
	t.Run("FETCH_ADD", func(t *testing.T) {
		binary.NativeEndian.PutUint64(b.buf[dstOff:], 40)
		res := a.mr.SGE(dstOff, 8)
		a.qp.PostSend(ib.SendWR{WRID: 1, Opcode: ib.WRAtomicFetchAdd, SGL: []ib.SGE{res}, RKey: b.mr.RKey(),
			RemoteAddr: b.mr.Addr() + dstOff, CompareAdd: 2, Signaled: true})
		wc := wait(t, a.scq, 1)[0]
		wantOK(t, wc, 1, ib.WCFetchAdd)
		if got := binary.NativeEndian.Uint64(a.buf[dstOff:]); got != 40 || wc.ByteLen != 8 {
			t.Fatalf("fetch-add returned %d (%v), want 40", got, wc)
		}
		barrier(t, a, b)
		if got := binary.NativeEndian.Uint64(b.buf[dstOff:]); got != 42 {
			t.Fatalf("remote value %d, want 42", got)
		}
	})
	t.Run("CMP_SWAP", func(t *testing.T) {
		binary.NativeEndian.PutUint64(b.buf[dstOff+8:], 42)
		for i, c := range []struct{ cmp, swap, orig, now uint64 }{{41, 7, 42, 42}, {42, 7, 42, 7}} {
			a.qp.PostSend(ib.SendWR{WRID: uint64(i), Opcode: ib.WRAtomicCmpAndSwp, SGL: []ib.SGE{a.mr.SGE(dstOff, 8)},
				RKey: b.mr.RKey(), RemoteAddr: b.mr.Addr() + dstOff + 8, CompareAdd: c.cmp, Swap: c.swap, Signaled: true})
			wantOK(t, wait(t, a.scq, 1)[0], uint64(i), ib.WCCompSwap)
			if got := binary.NativeEndian.Uint64(a.buf[dstOff:]); got != c.orig {
				t.Fatalf("cmp-swap %d returned %d, want %d", i, got, c.orig)
			}
			barrier(t, a, b)
			if got := binary.NativeEndian.Uint64(b.buf[dstOff+8:]); got != c.now {
				t.Fatalf("cmp-swap %d left %d, want %d", i, got, c.now)
			}
		}
	})
	t.Run("FAST_REG_LOCAL_INV", func(t *testing.T) {
		mem := b.buf[dstOff : dstOff+4096]
		for i := range mem {
			mem[i] = 0xEE
		}
		fmr, key := fastReg(t, b, mem, ib.AccessLocalWrite|ib.AccessRemoteWrite, 0x5a)
		fill(a.buf[:100], 3)
		a.qp.PostSend(ib.SendWR{WRID: 1, Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{a.mr.SGE(0, 100)},
			RKey: key, RemoteAddr: fmr.Addr() + 50, Signaled: true})
		wantOK(t, wait(t, a.scq, 1)[0], 1, ib.WCRDMAWrite)
		barrier(t, a, b)
		verify(t, "write into a fast-registered MR", mem[50:], a.buf, 100)
		b.qp.PostSend(ib.SendWR{WRID: 2, Opcode: ib.WRLocalInv, InvalidateRKey: key, Signaled: true})
		wantOK(t, wait(t, b.scq, 1)[0], 2, ib.WCLocalInv)
		if _, f := b.qp.Wire().RemoteBuffer(key, fmr.Addr(), 1, ib.AccessRemoteWrite); f != ib.KeyInvalid {
			t.Fatalf("LOCAL_INV left the key valid: %v", f)
		}
	})
	t.Run("ORD_PIPELINE", func(t *testing.T) {
		// More READs than the ORD: they queue behind the limit and all complete in order.
		fill(b.buf[:64*100], 8)
		var wrs []ib.SendWR
		for i := range 64 {
			wrs = append(wrs, ib.SendWR{WRID: uint64(i), Opcode: ib.WRRDMARead, SGL: []ib.SGE{a.mr.SGE(dstOff+i*100, 100)},
				RKey: b.mr.RKey(), RemoteAddr: b.mr.Addr() + uint64(i*100), Signaled: true})
		}
		if err := a.qp.PostSend(wrs...); err != nil {
			t.Fatal(err)
		}
		for i, wc := range wait(t, a.scq, 64) {
			wantOK(t, wc, uint64(i), ib.WCRDMARead)
		}
		if !bytes.Equal(a.buf[dstOff:dstOff+6400], b.buf[:6400]) {
			t.Fatal("pipelined reads differ")
		}
		barrier(t, a, b)
	})
}

// TestOperations runs every operation softrdma↔softrdma over loopback TCP, with
// CRC on and off, markers on and off, MPA revision 1 and 2, at sizes 0, 1, 4095,
// 4096 and 1 MiB, checking every octet and the completions, and decodes both
// directions of each connection with StreamDecoder: zero error records.
func TestOperations(t *testing.T) {
	sizes := []int{0, 1, 4095, 4096, 1 << 20}
	for _, rev := range []uint8{1, 2} {
		for _, crc := range []bool{false, true} {
			for _, markers := range []bool{false, true} {
				name := fmt.Sprintf("rev%d/crc=%v/markers=%v", rev, crc, markers)
				t.Run(name, func(t *testing.T) {
					var rec recorder
					dp := iwarp.ConnParams{Revision: rev, Observe: rec.observe}
					lp := iwarp.ConnParams{Revision: 2}
					if crc {
						dp.CRC = iwarp.CRCRequest
					}
					if markers {
						// Markers both ways, and small FPDUs so that markers fall
						// everywhere in them.
						dp.Markers, lp.Markers = iwarp.MarkersRequest, iwarp.MarkersRequest
						dp.MaxULPDU, lp.MaxULPDU = 1001, 777
					}
					a, b := pair(t, 2<<20+4096, dp, lp)
					neg := a.conn.Negotiated()
					if neg.Revision != rev || neg.CRC != crc || neg.SendMarkers != markers || neg.RecvMarkers != markers {
						t.Fatalf("negotiated %+v", neg)
					}
					if rev == 1 && neg.Enhanced || rev == 2 && !neg.Enhanced {
						t.Fatalf("revision %d negotiated Enhanced=%v", rev, neg.Enhanced)
					}
					if !neg.Extensions {
						t.Fatal("two softrdma peers did not enable the RFC 7306 extensions")
					}
					seed := byte(1)
					for _, op := range sizedOps {
						for _, n := range sizes {
							seed++
							t.Run(fmt.Sprintf("%s/%d", op.name, n), func(t *testing.T) { op.run(t, a, b, n, seed) })
							if t.Failed() {
								return
							}
						}
					}
					atomicsAndFastReg(t, a, b)
					a.conn.Close()
					waitDone(t, b.conn)
					if err := b.conn.Err(); err != iwarp.ErrPeerClosed {
						t.Fatalf("the peer's connection ended with %v, want ErrPeerClosed", err)
					}
					if a.qp.State() != ib.QPStateErr || b.qp.State() != ib.QPStateErr {
						t.Fatalf("states after close: %s %s", a.qp.State(), b.qp.State())
					}
					counts := rec.decode(t)
					if counts["sent mpa"] != 1 || counts["received mpa"] != 1 || counts["sent Write"] == 0 ||
						counts["received Read Response"] == 0 || counts["sent Atomic Request"] != 3 ||
						counts["received Atomic Response"] != 3 || counts["sent Immediate Data"] != len(sizes) {
						t.Fatalf("decoded %v", counts)
					}
					if crc && counts["crc checked"] == 0 {
						t.Fatal("the decoder checked no CRC")
					}
					t.Logf("decoded: %v", counts)
				})
			}
		}
	}
}
