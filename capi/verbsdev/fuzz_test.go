package verbsdev_test

import (
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fuzzEnv carries the library and the driver FuzzCAPI built, from the fuzz
// coordinator to its workers (which inherit its environment), so that they
// do not build them again.
const fuzzEnv = "SOFTRDMA_FUZZCAPI"

// FuzzCAPI (testdata/fuzzcalls.c) runs the byte string as a sequence of verb
// and rdma_cm calls with argument values drawn from it (edge values, invalid
// enums, huge counts, out-of-order destroys), on one RoCE or iWARP device
// on a loopback address. Whatever the arguments, the library must answer
// every call: the program must run them all and exit 0, within the bound,
// without a Go panic. The seeds cover each call kind (issue 20).
func FuzzCAPI(f *testing.F) {
	lib, prog, ok := strings.Cut(os.Getenv(fuzzEnv), string(os.PathListSeparator))
	if !ok {
		lib = buildLib(f)
		prog = compileCM(f, lib, "fuzzcalls")
		f.Setenv(fuzzEnv, lib+string(os.PathListSeparator)+prog)
	}
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		tr := "roce"
		if len(data) > 0 && data[0]&0x80 != 0 {
			tr = "iwarp"
		}
		in := filepath.Join(t.TempDir(), "input")
		if err := os.WriteFile(in, data, 0o600); err != nil {
			t.Fatal(err)
		}
		addr := randomNet() + "1"
		out, errOut, err := runBounded(t, lib, tr+":"+addr, 30*time.Second, prog, addr, in)
		if err != nil || !strings.Contains(out, "\ndone ") && !strings.HasPrefix(out, "done ") ||
			strings.Contains(errOut, "panic") || strings.Contains(errOut, "fatal error") {
			t.Fatalf("fuzzcalls on %s: %v\nstdout (tail):\n%s\nstderr (tail):\n%s", tr, err, tail(out), tail(errOut))
		}
	})
}

// tail returns the last 40 lines of s.
func tail(s string) string {
	l := strings.Split(s, "\n")
	if len(l) > 40 {
		l = l[len(l)-40:]
	}
	return strings.Join(l, "\n")
}

// Call encodings of testdata/fuzzcalls.c, for the seeds: each returns the
// bytes one call consumes.
func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

func le16(v uint16) []byte { return binary.LittleEndian.AppendUint16(nil, v) }
func le32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

// v32 is val() giving v (its "any 32 bits" case).
func v32(v uint32) []byte { return cat([]byte{7}, le32(v)) }

var (
	allocPD = []byte{0}
	// createCQ: cqe as val() (its case 0), no channel, vector 0.
	createCQ = func(cqe uint32) []byte { return cat([]byte{2, 0}, v32(cqe), []byte{1, 1}) }
	// createQP on PD 0 with CQs scq and rcq (4+ is an empty slot), small caps.
	createQP = func(typ, scq, rcq byte) []byte {
		return []byte{4, 0, scq, rcq, 1, typ, 1, 8, 8, 2, 2, 16, 1, 1}
	}
	// createQPHuge: caps given as val().
	createQPHuge = func(typ byte, c uint32) []byte {
		return cat([]byte{4, 0, 0, 0, 1, typ, 0}, v32(c), v32(c), v32(c), v32(c), v32(c), []byte{1, 0})
	}
	// moveQP moves QP q to state (1 INIT, 2 RTR, 3 RTS) towards QP dest.
	moveQP = func(q, state, dest byte) []byte {
		return cat([]byte{6, q, 0, state - 1, 0xf, 4, dest}, le16(100), []byte{1, 1, 14, 7}, le32(0x11111111), []byte{0})
	}
	// modifyRaw: the attributes all b, state st, mask m.
	modifyRaw = func(q, b, st byte, m uint32) []byte {
		return cat([]byte{6, q, 1}, []byte(strings.Repeat(string([]byte{b}), 144)), []byte{1, st, 0, 2}, []byte{0}, v32(m))
	}
	// regMR on PD 0: len bytes at off in the buffer, access flags.
	regMR = func(off uint32, n uint16, access byte) []byte {
		return cat([]byte{11, 0, 1}, le16(n), []byte{1}, le32(off), []byte{1, access})
	}
	// sge of n bytes at off, lkey of MR mr; sgeInline the same in an
	// inline WR (no length selector).
	sge = func(off uint32, n uint16, mr byte) []byte {
		return cat([]byte{1}, le16(n), []byte{1}, le32(off), []byte{mr, 0})
	}
	sgeInline = func(off uint32, n uint16) []byte {
		return cat(le16(n), []byte{1}, le32(off), []byte{0, 0})
	}
	// postSend: one WR on QP q of opcode op, flags, num_sge count given by
	// sel (3: the next byte % 5; 0: -1; 1: 40; 2: 1<<28), its SGEs, remote
	// address at off in the buffer and rkey of MR 0.
	postSend = func(q, op, flags, sel, n byte, sges ...[]byte) []byte {
		b := []byte{7, q, 0, 2, op, 1, flags, sel}
		if sel == 3 {
			b = append(b, n)
			if n%5 == 0 {
				b = append(b, 0)
			}
		}
		b = cat(b, cat(sges...), le32(0x1234))
		switch op {
		case 5, 6: // atomics: remote address in the buffer, compare, swap, rkey
			return cat(b, []byte{1, 1}, le32(0), le32(1), le32(0), le32(2), le32(0), []byte{0, 1})
		case 8: // bind of MW 0 to MR 0
			return cat(b, []byte{0}, le32(0x77), []byte{0}, le16(64), []byte{1}, le32(0), v32(0xf))
		case 10: // TSO: header size and MSS after the remote address
			return cat(b, []byte{1, 1}, le32(0), []byte{0, 1, 40}, le16(1000))
		}
		return cat(b, []byte{1, 1}, le32(0), []byte{0, 1})
	}
	// postRecv: one WR of len(sges) (< 5) SGEs on QP q.
	postRecv = func(q byte, sges ...[]byte) []byte {
		return cat([]byte{8, 0, 3, byte(len(sges))}, cat(sges...), []byte{q})
	}
	pollCQ = func(c, n byte) []byte { return []byte{9, c, n} }
	notify = []byte{10, 0, 1, 1}
)

// fuzzSeeds returns the seed inputs: a connected RC pair and, after it, each
// call kind with edge values; then a few pseudo-random strings.
func fuzzSeeds() [][]byte {
	sges40 := make([][]byte, 40)
	for i := range sges40 {
		sges40[i] = sge(uint32(i)*64, 64, 0)
	}
	setup := cat(allocPD, createCQ(16), createQP(0, 0, 0), createQP(0, 0, 0), regMR(0, 8192, 0xf),
		moveQP(0, 1, 1), moveQP(1, 1, 0), moveQP(0, 2, 1), moveQP(1, 2, 0), moveQP(0, 3, 1), moveQP(1, 3, 0))
	seeds := [][]byte{
		// Traffic: a receive, a send, a write, a read, atomics, polls.
		cat(setup, postRecv(1, sge(4096, 64, 0)), postSend(0, 2, 2, 3, 1, sge(0, 64, 0)),
			postSend(0, 0, 2, 3, 1, sge(0, 64, 0)), postSend(0, 4, 2, 3, 1, sge(0, 64, 0)),
			postSend(0, 5, 2, 3, 1, sge(0, 8, 0)), postSend(0, 6, 2, 3, 1, sge(0, 8, 0)),
			pollCQ(0, 34), notify, pollCQ(0, 0), pollCQ(0, 1)),
		// Every opcode, invalid ones, inline, num_sge -1, 40, 1<<28, bad keys.
		cat(setup, postSend(0, 1, 2, 3, 1, sge(0, 64, 0)), postSend(0, 3, 2, 3, 1, sge(0, 64, 0)),
			postSend(0, 7, 2, 3, 1, sge(0, 64, 0)), postSend(0, 8, 2, 3, 1, sge(0, 64, 0)),
			postSend(0, 9, 2, 3, 1, sge(0, 64, 0)), postSend(0, 10, 2, 3, 1, sge(0, 64, 0)),
			postSend(0, 11, 2, 3, 1, sge(0, 64, 0)), postSend(0, 200, 2, 3, 1, sge(0, 64, 0)),
			postSend(0, 2, 10, 3, 2, sgeInline(0, 64), sgeInline(100, 4000)), postSend(0, 2, 2, 0, 0),
			postSend(0, 2, 2, 1, 0, sges40...), postSend(0, 2, 2, 2, 0), postSend(0, 2, 2, 3, 0),
			postSend(0, 2, 2, 3, 1, sge(60000, 8192, 0)), pollCQ(0, 34), pollCQ(0, 34)),
		// CQs: cqe 0, -1, huge; resize; destroying one in use (EBUSY).
		cat(setup, createCQ(0), createCQ(0xffffffff), createCQ(0x7fffffff), createCQ(1<<20),
			[]byte{27, 0, 1, 0}, []byte{27, 0, 0, 7}, le32(1<<30), []byte{3, 0}, []byte{1, 0}),
		// QPs: each type, invalid types, huge caps, NULL CQs, destroy out of order.
		cat(allocPD, createCQ(16), createQP(1, 0, 0), createQP(2, 0, 0), createQP(3, 0, 0), createQP(4, 0, 0),
			createQP(5, 0, 0), createQP(6, 0, 0), createQP(7, 0, 0), createQP(250, 0, 0), createQP(0, 5, 0),
			createQP(0, 0, 5), createQPHuge(0, 0xffffffff), createQPHuge(2, 1<<20), []byte{5, 0, 5, 1, 3, 0, 1, 0}),
		// modify_qp with raw attributes and masks, out of order transitions.
		cat(setup, modifyRaw(0, 0xff, 3, 0xffffffff), modifyRaw(1, 0x01, 2, 0x1fffff), modifyRaw(0, 0x80, 6, 1),
			moveQP(0, 3, 1), moveQP(0, 1, 0), modifyRaw(0, 0, 0, 1), moveQP(0, 2, 0)),
		// MRs: NULL, zero length, every access, rereg, dereg while in use.
		cat(setup, regMR(0, 0, 0), []byte{11, 0, 1, 0, 0x10, 0, 0, 0xff, 0x1f}, regMR(65000, 500, 0x1f),
			[]byte{28, 0, 0, 0x10, 1}, le32(4096), []byte{1, 7, 1, 1, 0}, []byte{12, 0, 12, 1}),
		// MWs: both types and invalid ones, bind, dealloc.
		cat(setup, []byte{13, 0, 1, 0, 13, 0, 1, 1, 13, 0, 0, 9, 15, 0, 0, 2, 0}, le16(64), []byte{1}, le32(0),
			[]byte{1, 0xf}, postSend(0, 8, 2, 3, 0), []byte{14, 0, 14, 1}),
		// AHs and a UD QP.
		cat(allocPD, createCQ(16), createQP(2, 0, 0), moveQP(0, 1, 0), moveQP(0, 2, 0), moveQP(0, 3, 0),
			[]byte{16, 0}, []byte(strings.Repeat("\x01", 32)), []byte{1, 1, 0}, []byte{16, 0},
			[]byte(strings.Repeat("\xff", 32)), []byte{0, 2}, regMR(0, 8192, 0xf),
			[]byte{7, 0, 0, 2, 2, 1, 2, 3, 1}, sge(0, 64, 0), le32(0), []byte{0, 0, 1}, le32(0x11111111)),
		// SRQs: create with edges, modify, post, a QP on it, destroy in use.
		cat(allocPD, createCQ(16), []byte{18, 0, 1, 16, 2, 1, 18, 0, 0}, v32(0xffffffff), v32(0), v32(1),
			[]byte{19, 0}, v32(8), v32(1), v32(2), v32(3), []byte{21, 0, 3, 1}, sge(0, 64, 0), []byte{0},
			[]byte{4, 0, 0, 0, 0, 0, 1, 8, 8, 2, 2, 0, 1, 1}, []byte{26, 0, 20, 0}),
		// Queries.
		cat(setup, []byte{24, 1, 1, 1, 1, 1, 1, 0, 24, 2, 2, 0, 7}, le32(0xffffffff), []byte{0, 1, 9},
			[]byte{25, 0, 2}, []byte{25, 1, 7}, le32(0xffffffff)),
		// Completion channels: a CQ on one, destroy in use.
		cat([]byte{22, 22, 2, 3, 16, 0, 1, 23, 0, 23, 1}),
		// rdma_cm: ids of each port space, bind, resolve, listen, events, destroy.
		// Each call: op, port (2), address selector (0: the device's), ID.
		cat([]byte{29, 0, 0, 0, 0, 0, 29, 0, 0, 0, 1, 1, 29, 0, 0, 0, 2, 2, 29, 0, 0, 0, 3, 250},
			[]byte{30, 0x20, 0x4e, 0, 0}, []byte{31, 0, 0, 0, 1, 5}, []byte{33, 0, 0, 0, 0, 3, 16},
			[]byte{34, 0, 0, 0, 0}, []byte{32, 0, 0, 0, 1, 5}, []byte{34, 0, 0, 0, 0},
			[]byte{35, 0, 0, 0, 0, 35, 0, 0, 0, 1}),
		// Teardown out of order: the PD, the CQ, then the QPs.
		cat(setup, []byte{1, 0, 3, 0, 12, 0, 5, 0, 5, 1, 3, 0, 12, 0, 1, 0}),
	}
	r := rand.New(rand.NewPCG(20, 1))
	for range 4 {
		b := make([]byte, 300+r.IntN(500))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		seeds = append(seeds, cat(setup, b))
	}
	for i := range 2 {
		seeds = append(seeds, cat([]byte{144}, seeds[i][1:])) // 144: alloc_pd (op 0 mod 36) on iWARP
	}
	return seeds
}
