package ibtransport_test

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/ibtransport/ibtest"
)

// writeSetup returns a pair with an n-byte source on A and destination on B.
func writeSetup(t *testing.T, o ibtest.ConnOptions, n int) (*ibtest.Pair, *guarded, *guarded) {
	p := newPair(t, ib.QPTypeRC, o)
	src := newGuarded(t, p.A.PD, n, ib.AccessLocalWrite)
	copy(src.buf, pattern(n, 3))
	dst := newGuarded(t, p.B.PD, n, allAccess)
	return p, src, dst
}

func writeWR(id uint64, src, dst *guarded) ib.SendWR {
	return ib.SendWR{WRID: id, Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{src.mr.SGE(0, len(src.buf))},
		RemoteAddr: dst.mr.Addr(), RKey: dst.mr.RKey(), Signaled: true}
}

func readWR(id uint64, local, remote *guarded) ib.SendWR {
	return ib.SendWR{WRID: id, Opcode: ib.WRRDMARead, SGL: []ib.SGE{local.mr.SGE(0, len(local.buf))},
		RemoteAddr: remote.mr.Addr(), RKey: remote.mr.RKey(), Signaled: true}
}

// filterDir applies f to the packets of one direction only.
func filterDir(d ibtest.Direction, f func(i int, pk *ib.Packet) ibtest.Action) func(*ibtest.Frame) ibtest.Action {
	return func(fr *ibtest.Frame) ibtest.Action {
		if fr.Dir != d {
			return ibtest.Action{}
		}
		var pk ib.Packet
		if pk.Decode(fr.Data) != nil {
			return ibtest.Action{}
		}
		return f(fr.Index, &pk)
	}
}

func TestRCLoss(t *testing.T) {
	const n = 10 * 1024 // 10 packets
	A, B := ibtest.AToB, ibtest.BToA
	cases := []struct {
		name   string
		filter func(*ibtest.Frame) ibtest.Action
		check  func(t *testing.T, a, b ib.QPCounters)
	}{
		{"drop the 3rd packet", filterDir(A, func(i int, _ *ib.Packet) ibtest.Action { return ibtest.Action{Drop: i == 2} }),
			func(t *testing.T, a, b ib.QPCounters) {
				if b.NAKsSent[ib.NAKPSNSequenceError] != 1 || a.NAKsReceived[ib.NAKPSNSequenceError] != 1 || a.Retransmissions != 8 {
					t.Errorf("NAKs sent %d received %d, retransmissions %d; want 1, 1, 8",
						b.NAKsSent[0], a.NAKsReceived[0], a.Retransmissions)
				}
				if a.Timeouts != 0 {
					t.Errorf("%d timeouts", a.Timeouts)
				}
			}},
		{"drop the last packet", filterDir(A, func(i int, _ *ib.Packet) ibtest.Action { return ibtest.Action{Drop: i == 9} }),
			func(t *testing.T, a, b ib.QPCounters) {
				// Only the last packet asked for an ACK: go-back-N resends all ten.
				if a.Timeouts != 1 || a.Retransmissions != 10 {
					t.Errorf("timeouts %d retransmissions %d, want 1 and 10", a.Timeouts, a.Retransmissions)
				}
			}},
		{"drop the ACK", filterDir(B, func(i int, _ *ib.Packet) ibtest.Action { return ibtest.Action{Drop: i == 0} }),
			func(t *testing.T, a, b ib.QPCounters) {
				if a.Timeouts != 1 || b.DuplicateRequests == 0 {
					t.Errorf("timeouts %d duplicates %d", a.Timeouts, b.DuplicateRequests)
				}
			}},
		{"duplicate the ACK", filterDir(B, func(i int, _ *ib.Packet) ibtest.Action { return ibtest.Action{Duplicates: 1} }),
			func(t *testing.T, a, b ib.QPCounters) {
				if a.DuplicateResponses != 1 || a.Retransmissions != 0 {
					t.Errorf("duplicate responses %d retransmissions %d", a.DuplicateResponses, a.Retransmissions)
				}
			}},
		{"reorder two packets", filterDir(A, func(i int, _ *ib.Packet) ibtest.Action {
			if i == 4 {
				return ibtest.Action{Delay: time.Microsecond}
			}
			return ibtest.Action{}
		}), func(t *testing.T, a, b ib.QPCounters) {
			if b.NAKsSent[ib.NAKPSNSequenceError] != 1 {
				t.Errorf("NAKs sent %d", b.NAKsSent[0])
			}
		}},
		{"duplicate every packet", func(*ibtest.Frame) ibtest.Action { return ibtest.Action{Duplicates: 1} },
			func(t *testing.T, a, b ib.QPCounters) {
				if b.DuplicateRequests != 10 {
					t.Errorf("duplicate requests %d, want 10", b.DuplicateRequests)
				}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, src, dst := writeSetup(t, ibtest.DefaultConnOptions(), n)
			p.Wire.Filter = c.filter
			post(t, p.A.QP, writeWR(1, src, dst))
			wantWC(t, complete(t, p, p.A.CQ, 1)[0], 1, ib.WCRDMAWrite, ib.WCSuccess)
			if !bytes.Equal(dst.buf, src.buf) {
				t.Fatal("data differs")
			}
			dst.check(t)
			noMore(t, p, p.A.CQ)
			c.check(t, p.A.QP.Counters(), p.B.QP.Counters())
		})
	}
}

func TestRCReadLoss(t *testing.T) {
	const n = 8 * 1024
	A, B := ibtest.AToB, ibtest.BToA
	cases := []struct {
		name   string
		filter func(*ibtest.Frame) ibtest.Action
		dupReq uint64 // duplicate requests the responder must see
	}{
		{"drop the request", filterDir(A, func(i int, _ *ib.Packet) ibtest.Action { return ibtest.Action{Drop: i == 0} }), 0},
		{"drop a middle response", filterDir(B, func(i int, _ *ib.Packet) ibtest.Action { return ibtest.Action{Drop: i == 3} }), 1},
		{"drop the last response", filterDir(B, func(i int, _ *ib.Packet) ibtest.Action { return ibtest.Action{Drop: i == 7} }), 1},
		{"duplicate the request", filterDir(A, func(i int, _ *ib.Packet) ibtest.Action { return ibtest.Action{Duplicates: 1} }), 1},
		{"reorder responses", filterDir(B, func(i int, _ *ib.Packet) ibtest.Action {
			if i == 2 {
				return ibtest.Action{Delay: time.Microsecond}
			}
			return ibtest.Action{}
		}), 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newRC(t)
			remote := newGuarded(t, p.B.PD, n, allAccess)
			copy(remote.buf, pattern(n, 77))
			local := newGuarded(t, p.A.PD, n, ib.AccessLocalWrite)
			p.Wire.Filter = c.filter
			post(t, p.A.QP, readWR(1, local, remote))
			wantWC(t, complete(t, p, p.A.CQ, 1)[0], 1, ib.WCRDMARead, ib.WCSuccess)
			if !bytes.Equal(local.buf, remote.buf) {
				t.Fatal("data differs")
			}
			local.check(t)
			noMore(t, p, p.A.CQ)
			if got := p.B.QP.Counters().DuplicateRequests; got != c.dupReq {
				t.Errorf("responder saw %d duplicate requests, want %d", got, c.dupReq)
			}
		})
	}
}

// TestRCDuplicateReadRereads checks that a duplicate READ is executed again: it
// reads the memory as it is when the duplicate arrives.
func TestRCDuplicateReadRereads(t *testing.T) {
	p := newRC(t)
	remote := newGuarded(t, p.B.PD, 100, allAccess)
	copy(remote.buf, bytes.Repeat([]byte{1}, 100))
	local := newGuarded(t, p.A.PD, 100, ib.AccessLocalWrite)
	var req []byte
	p.Wire.Filter = func(f *ibtest.Frame) ibtest.Action {
		if f.Dir == ibtest.AToB && req == nil {
			req = append([]byte(nil), f.Data...)
		}
		if f.Dir == ibtest.BToA && f.Index == 0 {
			return ibtest.Action{Drop: true} // lose the first response
		}
		return ibtest.Action{}
	}
	post(t, p.A.QP, readWR(1, local, remote))
	p.Wire.RunFor(time.Microsecond, 1000) // the request is answered, the answer lost
	copy(remote.buf, bytes.Repeat([]byte{2}, 100))
	wantWC(t, complete(t, p, p.A.CQ, 1)[0], 1, ib.WCRDMARead, ib.WCSuccess)
	if !bytes.Equal(local.buf, remote.buf) {
		t.Fatalf("got %v, want the memory as re-read", local.buf[:4])
	}
	if c := p.B.QP.Counters(); c.DuplicateRequests != 1 {
		t.Fatalf("duplicates %d", c.DuplicateRequests)
	}
}

func TestRCAtomics(t *testing.T) {
	p := newRC(t)
	remote := newGuarded(t, p.B.PD, 16, allAccess)
	binary.NativeEndian.PutUint64(remote.buf, 100)
	res := newGuarded(t, p.A.PD, 16, ib.AccessLocalWrite)
	post(t, p.A.QP, ib.SendWR{WRID: 1, Opcode: ib.WRAtomicFetchAdd, SGL: []ib.SGE{res.mr.SGE(0, 8)},
		RemoteAddr: remote.mr.Addr(), RKey: remote.mr.RKey(), CompareAdd: 5, Signaled: true})
	wc := complete(t, p, p.A.CQ, 1)[0]
	wantWC(t, wc, 1, ib.WCFetchAdd, ib.WCSuccess)
	if got, mem := binary.NativeEndian.Uint64(res.buf), binary.NativeEndian.Uint64(remote.buf); got != 100 || mem != 105 || wc.ByteLen != 8 {
		t.Fatalf("fetch-add returned %d, memory %d", got, mem)
	}
	// compare and swap: a miss, then a hit
	post(t, p.A.QP, ib.SendWR{WRID: 2, Opcode: ib.WRAtomicCmpAndSwp, SGL: []ib.SGE{res.mr.SGE(8, 8)},
		RemoteAddr: remote.mr.Addr(), RKey: remote.mr.RKey(), CompareAdd: 1, Swap: 9, Signaled: true},
		ib.SendWR{WRID: 3, Opcode: ib.WRAtomicCmpAndSwp, SGL: []ib.SGE{res.mr.SGE(0, 8)},
			RemoteAddr: remote.mr.Addr(), RKey: remote.mr.RKey(), CompareAdd: 105, Swap: 9, Signaled: true})
	wcs := complete(t, p, p.A.CQ, 2)
	wantWC(t, wcs[0], 2, ib.WCCompSwap, ib.WCSuccess)
	wantWC(t, wcs[1], 3, ib.WCCompSwap, ib.WCSuccess)
	if a, b, mem := binary.NativeEndian.Uint64(res.buf[8:]), binary.NativeEndian.Uint64(res.buf), binary.NativeEndian.Uint64(remote.buf); a != 105 || b != 105 || mem != 9 {
		t.Fatalf("cmp-swap returned %d and %d, memory %d", a, b, mem)
	}
	remote.check(t)
	res.check(t)
}

// TestRCAtomicOnce checks that an atomic is never executed twice: neither a
// duplicated request nor a retransmission after a lost ACK adds again.
func TestRCAtomicOnce(t *testing.T) {
	cases := map[string]func(*ibtest.Frame) ibtest.Action{
		"duplicate request": filterDir(ibtest.AToB, func(int, *ib.Packet) ibtest.Action { return ibtest.Action{Duplicates: 3} }),
		"lost ack": filterDir(ibtest.BToA, func(i int, _ *ib.Packet) ibtest.Action {
			return ibtest.Action{Drop: i == 0}
		}),
		"lost ack and duplicates": func(f *ibtest.Frame) ibtest.Action {
			return ibtest.Action{Drop: f.Dir == ibtest.BToA && f.Index < 2, Duplicates: 1}
		},
	}
	for name, filter := range cases {
		t.Run(name, func(t *testing.T) {
			p := newRC(t)
			remote := newGuarded(t, p.B.PD, 8, allAccess)
			binary.NativeEndian.PutUint64(remote.buf, 1000)
			res := newGuarded(t, p.A.PD, 8, ib.AccessLocalWrite)
			p.Wire.Filter = filter
			post(t, p.A.QP, ib.SendWR{WRID: 1, Opcode: ib.WRAtomicFetchAdd, SGL: []ib.SGE{res.mr.SGE(0, 8)},
				RemoteAddr: remote.mr.Addr(), RKey: remote.mr.RKey(), CompareAdd: 1, Signaled: true})
			wantWC(t, complete(t, p, p.A.CQ, 1)[0], 1, ib.WCFetchAdd, ib.WCSuccess)
			noMore(t, p, p.A.CQ)
			if got, mem := binary.NativeEndian.Uint64(res.buf), binary.NativeEndian.Uint64(remote.buf); got != 1000 || mem != 1001 {
				t.Fatalf("returned %d, memory %d: want 1000 and 1001", got, mem)
			}
			if p.B.QP.Counters().DuplicateRequests == 0 {
				t.Fatal("no duplicate reached the responder")
			}
		})
	}
}

// TestRCPSNWrap runs traffic across the 24-bit PSN wrap, with a loss right at it.
func TestRCPSNWrap(t *testing.T) {
	o := ibtest.DefaultConnOptions()
	o.PSNA, o.PSNB = 0xFFFFFC, 0xFFFFFF
	const n = 8 * 1024
	p, src, dst := writeSetup(t, o, n)
	var psns []uint32
	p.Wire.Filter = filterDir(ibtest.AToB, func(i int, pk *ib.Packet) ibtest.Action {
		psns = append(psns, pk.BTH.PSN())
		return ibtest.Action{Drop: i == 4} // PSN 0x000000
	})
	post(t, p.A.QP, writeWR(1, src, dst))
	local := newGuarded(t, p.A.PD, n, ib.AccessLocalWrite)
	post(t, p.A.QP, readWR(2, local, dst))
	wcs := complete(t, p, p.A.CQ, 2)
	wantWC(t, wcs[0], 1, ib.WCRDMAWrite, ib.WCSuccess)
	wantWC(t, wcs[1], 2, ib.WCRDMARead, ib.WCSuccess)
	if !bytes.Equal(dst.buf, src.buf) || !bytes.Equal(local.buf, src.buf) {
		t.Fatal("data differs")
	}
	if psns[3] != 0xFFFFFF || psns[4] != 0 || psns[5] != 1 {
		t.Fatalf("PSNs %x", psns[:6])
	}
	// B's requester wraps on its first packet.
	postRecv(t, p.A.QP, ib.RecvWR{WRID: 7, SGL: []ib.SGE{local.mr.SGE(0, n)}})
	bsrc := regMR(t, p.B.PD, pattern(3000, 8), 0)
	post(t, p.B.QP, ib.SendWR{WRID: 8, Opcode: ib.WRSend, SGL: []ib.SGE{bsrc.SGE(0, 3000)}, Signaled: true})
	wantWC(t, complete(t, p, p.B.CQ, 1)[0], 8, ib.WCSend, ib.WCSuccess)
	wantWC(t, complete(t, p, p.A.CQ, 1)[0], 7, ib.WCRecv, ib.WCSuccess)
}

// TestRCRandomFaults runs a mix of operations over a link that drops, duplicates
// and reorders packets at random (seeded), and checks that every WR completes
// once, in order, with every byte right.
func TestRCRandomFaults(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		rng := rand.New(rand.NewPCG(seed, 99))
		o := ibtest.DefaultConnOptions()
		o.Timeout = 10 // ~4 ms
		o.RetryCnt = 7
		p := newPair(t, ib.QPTypeRC, o)
		p.Wire.Latency = 10 * time.Microsecond
		p.Wire.Filter = func(f *ibtest.Frame) ibtest.Action {
			var a ibtest.Action
			switch r := rng.IntN(100); {
			case r < 8:
				a.Drop = true
			case r < 12:
				a.Duplicates = 1
			case r < 18:
				a.Delay = time.Duration(rng.IntN(30)) * time.Microsecond
			}
			return a
		}
		const n = 6000
		aMem := newGuarded(t, p.A.PD, 8*n, allAccess)
		bMem := newGuarded(t, p.B.PD, 8*n, allAccess)
		copy(bMem.buf, pattern(8*n, byte(seed)))
		copy(aMem.buf, pattern(8*n, byte(seed+100)))
		counter := bMem.buf[8*n-8:]
		binary.NativeEndian.PutUint64(counter, 0)
		var wrs []ib.SendWR
		var recvs []ib.RecvWR
		for i := range 7 {
			off := i * n
			sge := aMem.mr.SGE(off, n)
			switch i % 4 {
			case 0:
				wrs = append(wrs, ib.SendWR{WRID: uint64(i), Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{sge}, RemoteAddr: bMem.mr.Addr() + uint64(off), RKey: bMem.mr.RKey()})
			case 1:
				wrs = append(wrs, ib.SendWR{WRID: uint64(i), Opcode: ib.WRRDMARead, SGL: []ib.SGE{sge}, RemoteAddr: bMem.mr.Addr() + uint64(off), RKey: bMem.mr.RKey()})
			case 2:
				wrs = append(wrs, ib.SendWR{WRID: uint64(i), Opcode: ib.WRSend, SGL: []ib.SGE{sge}})
				recvs = append(recvs, ib.RecvWR{WRID: uint64(i), SGL: []ib.SGE{bMem.mr.SGE(off, n)}})
			case 3:
				wrs = append(wrs, ib.SendWR{WRID: uint64(i), Opcode: ib.WRAtomicFetchAdd, SGL: []ib.SGE{aMem.mr.SGE(off, 8)},
					RemoteAddr: bMem.mr.Addr() + uint64(8*n-8), RKey: bMem.mr.RKey(), CompareAdd: 1})
			}
			wrs[len(wrs)-1].Signaled = true
		}
		want := append([]byte(nil), aMem.buf...)
		wantB := append([]byte(nil), bMem.buf...)
		for i := range 7 {
			off := i * n
			switch i % 4 {
			case 0, 2:
				copy(wantB[off:off+n], want[off:off+n])
			case 1:
				copy(want[off:off+n], wantB[off:off+n])
			}
		}
		postRecv(t, p.B.QP, recvs...)
		post(t, p.A.QP, wrs...)
		wcs := complete(t, p, p.A.CQ, 7)
		for i, wc := range wcs {
			if wc.WRID != uint64(i) || wc.Status != ib.WCSuccess {
				t.Fatalf("seed %d: completion %d is %v", seed, i, wc)
			}
		}
		complete(t, p, p.B.CQ, len(recvs))
		if got := binary.NativeEndian.Uint64(counter); got != 1 {
			t.Fatalf("seed %d: counter %d, want 1 (the atomic executed once)", seed, got)
		}
		binary.NativeEndian.PutUint64(wantB[8*n-8:], 1)
		binary.NativeEndian.PutUint64(want[3*n:], 0) // the fetch-add's result
		if !bytes.Equal(bMem.buf, wantB) {
			t.Fatalf("seed %d: B memory differs", seed)
		}
		if !bytes.Equal(aMem.buf, want) {
			t.Fatalf("seed %d: A memory differs", seed)
		}
		aMem.check(t)
		bMem.check(t)
	}
}
