package ibtransport_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/ibtransport/ibtest"
)

// fuzzRig is a connected RC pair with guarded memory on both sides and WRs in
// flight, into which the fuzzer injects packets.
type fuzzRig struct {
	p        *ibtest.Pair
	mems     []*guarded
	sendWRs  map[uint64]bool // WRIDs posted on A's send queue
	recvWRs  map[uint64]bool // WRIDs posted on B's receive queue
	aRecvWRs map[uint64]bool // WRIDs posted on A's receive queue
	seen     map[[2]uint64]bool
	// ro is B's region with remote read access only: no packet, however forged,
	// may change a byte of it (roWant).
	ro     *guarded
	roWant []byte
}

func newFuzzRig(t testing.TB) *fuzzRig {
	o := ibtest.DefaultConnOptions()
	o.Timeout = 10
	o.RetryCnt = 2
	o.RNRRetry = 2
	p := newPair(t, ib.QPTypeRC, o)
	r := &fuzzRig{p: p, sendWRs: map[uint64]bool{}, recvWRs: map[uint64]bool{}, aRecvWRs: map[uint64]bool{}, seen: map[[2]uint64]bool{}}
	aMem := newGuarded(t, p.A.PD, 8192, allAccess)
	bMem := newGuarded(t, p.B.PD, 8192, allAccess|ib.AccessFlushGlobal)
	bRO := newGuarded(t, p.B.PD, 256, ib.AccessRemoteRead)
	r.mems = []*guarded{aMem, bMem, bRO}
	copy(aMem.buf, pattern(8192, 1))
	copy(bMem.buf, pattern(8192, 2))
	copy(bRO.buf, pattern(256, 3))
	r.ro, r.roWant = bRO, pattern(256, 3)
	for i := range 4 {
		id := uint64(1000 + i)
		r.recvWRs[id] = true
		postRecv(t, p.B.QP, ib.RecvWR{WRID: id, SGL: []ib.SGE{bMem.mr.SGE(4096+1024*i, 1024)}})
		id = uint64(2000 + i)
		r.aRecvWRs[id] = true
		postRecv(t, p.A.QP, ib.RecvWR{WRID: id, SGL: []ib.SGE{aMem.mr.SGE(6144+512*i, 512)}})
	}
	wrs := []ib.SendWR{
		{Opcode: ib.WRSend, SGL: []ib.SGE{aMem.mr.SGE(0, 1500)}},
		{Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{aMem.mr.SGE(0, 2048)}, RemoteAddr: bMem.mr.Addr(), RKey: bMem.mr.RKey()},
		{Opcode: ib.WRRDMARead, SGL: []ib.SGE{aMem.mr.SGE(2048, 2048)}, RemoteAddr: bMem.mr.Addr() + 2048, RKey: bMem.mr.RKey()},
		{Opcode: ib.WRAtomicFetchAdd, SGL: []ib.SGE{aMem.mr.SGE(4096, 8)}, RemoteAddr: bMem.mr.Addr() + 4000, RKey: bMem.mr.RKey(), CompareAdd: 3},
		{Opcode: ib.WRAtomicCmpAndSwp, SGL: []ib.SGE{aMem.mr.SGE(4104, 8)}, RemoteAddr: bMem.mr.Addr() + 4008, RKey: bMem.mr.RKey(), Swap: 1},
		{Opcode: ib.WRSendWithImm, Imm: 1, SGL: []ib.SGE{aMem.mr.SGE(0, 10)}},
		{Opcode: ib.WRRDMAWriteWithImm, Imm: 2, SGL: []ib.SGE{aMem.mr.SGE(0, 100)}, RemoteAddr: bMem.mr.Addr(), RKey: bMem.mr.RKey()},
		{Opcode: ib.WRFlush, RemoteAddr: bMem.mr.Addr(), RKey: bMem.mr.RKey(), Flush: ib.FlushInfo{Len: 64, Type: 1}},
		{Opcode: ib.WRRDMARead, SGL: []ib.SGE{aMem.mr.SGE(5000, 100)}, RemoteAddr: bRO.mr.Addr(), RKey: bRO.mr.RKey()},
	}
	for i := range wrs {
		wrs[i].WRID = uint64(i + 1)
		wrs[i].Signaled = i%2 == 0
		r.sendWRs[wrs[i].WRID] = true
	}
	post(t, p.A.QP, wrs...)
	bsrc := regMR(t, p.B.PD, pattern(700, 5), 0)
	post(t, p.B.QP, ib.SendWR{WRID: 3000, Opcode: ib.WRSend, SGL: []ib.SGE{bsrc.SGE(0, 700)}, Signaled: true})
	return r
}

// check polls every completion and checks the invariants: no completion for a WR
// that was not posted, none twice, no guard byte touched, and the read-only region
// unchanged.
func (r *fuzzRig) check(t testing.TB) {
	var wc [64]ib.WC
	for _, side := range []struct {
		cq   *ib.CQ
		name uint64
	}{{r.p.A.CQ, 0}, {r.p.B.CQ, 1}} {
		for {
			n := side.cq.Poll(wc[:])
			if n == 0 {
				break
			}
			for _, w := range wc[:n] {
				ok := false
				if side.name == 0 {
					ok = r.sendWRs[w.WRID] || r.aRecvWRs[w.WRID]
				} else {
					ok = r.recvWRs[w.WRID] || w.WRID == 3000
				}
				if !ok {
					t.Fatalf("completion for a WR never posted: %v", w)
				}
				k := [2]uint64{side.name, w.WRID}
				if r.seen[k] {
					t.Fatalf("second completion for %v", w)
				}
				r.seen[k] = true
			}
		}
	}
	for _, m := range r.mems {
		m.check(t)
	}
	if !bytes.Equal(r.ro.buf, r.roWant) {
		t.Fatal("a region without remote write access was written")
	}
}

// seedPackets returns the packets a clean run of the rig puts on the wire, each
// encoded as a fuzz record.
func seedPackets(t testing.TB) [][]byte {
	r := newFuzzRig(t)
	var seeds [][]byte
	r.p.Wire.Tap = func(d ibtest.Direction, data []byte) {
		seeds = append(seeds, record(nil, d, data))
	}
	_ = r.p.Wire.Run(nil, 100000)
	return seeds
}

// record appends one fuzz record: direction byte, 2-byte length, packet.
func record(dst []byte, d ibtest.Direction, pkt []byte) []byte {
	dst = append(dst, byte(d))
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(pkt)))
	return append(dst, pkt...)
}

// inject feeds the records of data into the rig part-way through its traffic.
func (r *fuzzRig) inject(data []byte) {
	w := r.p.Wire
	w.Pump() // requests out, some answers back: the QPs are mid-conversation
	now := w.Clock.Now()
	for len(data) >= 3 {
		d := ibtest.Direction(data[0] & 1)
		n := int(binary.BigEndian.Uint16(data[1:]))
		data = data[3:]
		n = min(n, len(data))
		pkt := append([]byte(nil), data[:n]...)
		data = data[n:]
		dst := w.B
		if d == ibtest.BToA {
			dst = w.A
		}
		// The sender's GID as source: a connected QP drops anything else.
		meta := ib.InputMeta{HasGRH: true, SGID: ibtest.GID(d), DGID: ibtest.GID(1 - d), HopLimit: 64}
		_ = dst.Input(now, pkt, meta)
	}
	_ = w.Run(nil, 20000)
	w.RunFor(time.Second, 20000) // let every timer fire
}

// FuzzRCInput feeds random and mutated packets (seeded with the packets a clean
// exchange produces) into a connected RC pair in the middle of traffic, and checks
// that nothing panics, no byte outside a registered region changes, and no
// completion appears for a WR that was not posted (or twice).
func FuzzRCInput(f *testing.F) {
	seeds := seedPackets(f)
	for _, s := range seeds {
		f.Add(s)
	}
	for i := 0; i+1 < len(seeds); i += 3 {
		f.Add(append(append([]byte(nil), seeds[i]...), seeds[i+1]...))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		wd := time.AfterFunc(10*time.Second, func() { panic(fmt.Sprintf("HANG %x", data)) })
		defer wd.Stop()
		r := newFuzzRig(t)
		r.inject(data)
		r.check(t)
	})
}

// TestRCInputMutations runs seeded random mutations of valid packets (bit flips,
// truncation, field rewrites) through the fuzz rig on every test run.
func TestRCInputMutations(t *testing.T) {
	seeds := seedPackets(t)
	rng := rand.New(rand.NewPCG(7, 7))
	iters := 1500
	if testing.Short() {
		iters = 200
	}
	for i := range iters {
		s := append([]byte(nil), seeds[rng.IntN(len(seeds))]...)
		pkt := s[3:]
		switch rng.IntN(5) {
		case 0: // flip bits
			for range 1 + rng.IntN(4) {
				pkt[rng.IntN(len(pkt))] ^= 1 << rng.IntN(8)
			}
		case 1: // truncate
			s = s[:3+rng.IntN(len(pkt)+1)]
		case 2: // new PSN near the current ones
			if len(pkt) >= 12 {
				binary.BigEndian.PutUint16(pkt[10:], uint16(rng.IntN(1<<16)))
			}
		case 3: // another opcode
			pkt[0] = byte(rng.IntN(0x20))
		case 4: // random R_Key/VA bytes in the extension headers
			for j := 12; j < min(len(pkt), 40); j++ {
				if rng.IntN(3) == 0 {
					pkt[j] = byte(rng.Uint32())
				}
			}
		}
		if rng.IntN(2) == 0 {
			s[0] ^= 1 // the other direction
		}
		r := newFuzzRig(t)
		r.inject(s)
		r.check(t)
		if t.Failed() {
			t.Fatalf("iteration %d, input %x", i, s)
		}
	}
}
