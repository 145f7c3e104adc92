package ibtransport_test

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/ibtransport/ibtest"
)

// stressSide is one direction's workload in the stress test.
type stressSide struct {
	local  *guarded // 64 slots of 8 KiB
	remote *guarded // the peer's memory, same layout
	wantL  []byte   // expected final contents
	wantR  []byte
	wrs    []ib.SendWR
	recvs  []ib.RecvWR
	fadds  int
}

const (
	slot     = 8192
	nslots   = 64
	faddSlot = nslots - 1 // the counter lives in the peer's last slot
)

func newStressSide(rng *rand.Rand, local, remote *guarded, nops int) *stressSide {
	s := &stressSide{local: local, remote: remote}
	s.wantL = append([]byte(nil), local.buf...)
	s.wantR = append([]byte(nil), remote.buf...)
	counter := uint64(faddSlot * slot)
	for i := range nops {
		off := i * slot
		n := []int{0, 1, 100, 1024, 1025, 3000, 8192}[rng.IntN(7)]
		sge := local.mr.SGE(off, n)
		wr := ib.SendWR{WRID: uint64(i), Signaled: rng.IntN(3) > 0 || i == nops-1}
		switch rng.IntN(5) {
		case 0:
			wr.Opcode, wr.SGL, wr.RemoteAddr, wr.RKey = ib.WRRDMAWrite, []ib.SGE{sge}, remote.mr.Addr()+uint64(off), remote.mr.RKey()
			copy(s.wantR[off:off+n], s.wantL[off:off+n])
		case 1:
			wr.Opcode, wr.SGL, wr.RemoteAddr, wr.RKey = ib.WRRDMARead, []ib.SGE{sge}, remote.mr.Addr()+uint64(off), remote.mr.RKey()
			copy(s.wantL[off:off+n], s.wantR[off:off+n])
		case 2:
			wr.Opcode, wr.SGL = ib.WRSend, []ib.SGE{sge}
			s.recvs = append(s.recvs, ib.RecvWR{WRID: uint64(i), SGL: []ib.SGE{remote.mr.SGE(off, slot)}})
			copy(s.wantR[off:off+n], s.wantL[off:off+n])
		case 3:
			wr.Opcode, wr.SGL = ib.WRSendWithImm, []ib.SGE{sge}
			wr.Imm = uint32(i)
			s.recvs = append(s.recvs, ib.RecvWR{WRID: uint64(i), SGL: []ib.SGE{remote.mr.SGE(off, slot)}})
			copy(s.wantR[off:off+n], s.wantL[off:off+n])
		case 4:
			wr.Opcode, wr.SGL = ib.WRAtomicFetchAdd, []ib.SGE{local.mr.SGE(off, 8)}
			wr.RemoteAddr, wr.RKey, wr.CompareAdd = remote.mr.Addr()+counter, remote.mr.RKey(), 1
			binary.NativeEndian.PutUint64(s.wantL[off:], uint64(s.fadds))
			s.fadds++
		}
		s.wrs = append(s.wrs, wr)
	}
	binary.NativeEndian.PutUint64(s.wantR[counter:], uint64(s.fadds))
	return s
}

// TestRCRandomStress runs random workloads in both directions at once over a link
// that drops, duplicates and reorders packets, with receives posted late (RNR),
// and checks every completion, every byte, and that each fetch-add ran exactly
// once and in order.
func TestRCRandomStress(t *testing.T) {
	seeds := 30
	if v := os.Getenv("STRESS_SEEDS"); v != "" {
		seeds, _ = strconv.Atoi(v)
	}
	if testing.Short() {
		seeds = 5
	}
	for seed := range uint64(seeds) {
		rng := rand.New(rand.NewPCG(seed, 1234))
		o := ibtest.DefaultConnOptions()
		o.Timeout = 9 // 2 ms
		o.MaxRdAtomic = 1 + rng.IntN(4)
		o.MinRNRTimer = 3
		o.PSNA = 0xFFFFFF - uint32(rng.IntN(40))
		p, err := ibtest.NewPair(ib.ContextConfig{Seed: seed, MaxUnackedPSNs: 8 + rng.IntN(120)}, ib.QPTypeRC, o)
		if err != nil {
			t.Fatal(err)
		}
		p.Wire.Latency = 20 * time.Microsecond
		loss := rng.IntN(10) // percent; STRESS_LOSS overrides (above ~12% RetryCnt 7 runs out)
		if v := os.Getenv("STRESS_LOSS"); v != "" {
			loss, _ = strconv.Atoi(v)
		}
		p.Wire.Filter = func(f *ibtest.Frame) ibtest.Action {
			var a ibtest.Action
			switch r := rng.IntN(100); {
			case r < loss:
				a.Drop = true
			case r < loss+3:
				a.Duplicates = 1
			case r < loss+8:
				a.Delay = time.Duration(rng.IntN(100)) * time.Microsecond
			case r < loss+9:
				a.Delay = 5 * time.Millisecond // later than a timeout
			}
			return a
		}
		memA := newGuarded(t, p.A.PD, slot*nslots, allAccess)
		memB := newGuarded(t, p.B.PD, slot*nslots, allAccess)
		copy(memA.buf, pattern(len(memA.buf), byte(seed)))
		copy(memB.buf, pattern(len(memB.buf), byte(seed+50)))
		// each side uses the lower half of the slots for its own operations
		binary.NativeEndian.PutUint64(memA.buf[faddSlot*slot:], 0)
		binary.NativeEndian.PutUint64(memB.buf[faddSlot*slot:], 0)
		ab := newStressSide(rng, memA, memB, 30)
		// B works on slots 31..61 of both memories, with WRITEs, READs and
		// fetch-adds on a counter in A's last slot.
		ba := &stressSide{}
		for i := range 30 {
			off := 31*slot + i*slot
			n := []int{0, 7, 1024, 2049, 8192}[rng.IntN(5)]
			wr := ib.SendWR{WRID: uint64(100 + i), Signaled: true}
			switch rng.IntN(3) {
			case 0:
				wr.Opcode, wr.SGL, wr.RemoteAddr, wr.RKey = ib.WRRDMAWrite, []ib.SGE{memB.mr.SGE(off, n)}, memA.mr.Addr()+uint64(off), memA.mr.RKey()
				copy(ab.wantL[off:off+n], ab.wantR[off:off+n])
			case 1:
				wr.Opcode, wr.SGL, wr.RemoteAddr, wr.RKey = ib.WRRDMARead, []ib.SGE{memB.mr.SGE(off, n)}, memA.mr.Addr()+uint64(off), memA.mr.RKey()
				copy(ab.wantR[off:off+n], ab.wantL[off:off+n])
			case 2:
				wr.Opcode, wr.SGL, wr.RemoteAddr, wr.RKey, wr.CompareAdd = ib.WRAtomicFetchAdd, []ib.SGE{memB.mr.SGE(off, 8)}, memA.mr.Addr()+uint64(faddSlot*slot), memA.mr.RKey(), 1
				binary.NativeEndian.PutUint64(ab.wantR[off:], uint64(ba.fadds))
				ba.fadds++
			}
			ba.wrs = append(ba.wrs, wr)
		}
		binary.NativeEndian.PutUint64(ab.wantL[faddSlot*slot:], uint64(ba.fadds))
		post(t, p.A.QP, ab.wrs...)
		post(t, p.B.QP, ba.wrs...)
		// Receives are posted late: the first SENDs meet RNR NAKs.
		p.Wire.RunFor(200*time.Microsecond, 100000)
		postRecv(t, p.B.QP, ab.recvs...)
		signaled := func(wrs []ib.SendWR) (n int) {
			for _, w := range wrs {
				if w.Signaled {
					n++
				}
			}
			return
		}
		nA, nB := signaled(ab.wrs), signaled(ba.wrs)
		got, err := p.Completions(p.A.CQ, nA)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		last := -1
		for _, w := range got {
			if w.Status != ib.WCSuccess || int(w.WRID) <= last {
				t.Fatalf("seed %d: A completion %v after %d", seed, w, last)
			}
			last = int(w.WRID)
		}
		gotB, err := p.Completions(p.B.CQ, nB+len(ab.recvs))
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		for _, w := range gotB {
			if w.Status != ib.WCSuccess {
				t.Fatalf("seed %d: B completion %v", seed, w)
			}
		}
		noMore(t, p, p.A.CQ)
		noMore(t, p, p.B.CQ)
		if !bytes.Equal(memA.buf, ab.wantL) {
			t.Fatalf("seed %d: A memory differs at %d", seed, firstDiff(memA.buf, ab.wantL))
		}
		if !bytes.Equal(memB.buf, ab.wantR) {
			t.Fatalf("seed %d: B memory differs at %d", seed, firstDiff(memB.buf, ab.wantR))
		}
		memA.check(t)
		memB.check(t)
	}
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}
