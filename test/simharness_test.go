package test

// This file is the harness of the simulator integration tests: two softrdma
// RoCEv2 devices on a sim.Network link, RC and UD queue pairs between them, and
// a workload runner that posts a stream of operations, keeps a bounded number
// in flight, and checks every completion as it arrives: exactly once, in
// posting order, every byte verified against a CRC32 of what the message had to
// carry, every atomic's returned value as the chain predicts.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/roce"
	"github.com/softrdma/softrdma/sim"
)

// The two nodes of every test: A (the requester) and B (the responder).
var (
	macA = [6]byte{0x02, 0x53, 0x52, 0, 0, 1}
	macB = [6]byte{0x02, 0x53, 0x52, 0, 0, 2}
	ipA  = netip.MustParseAddr("10.0.0.1")
	ipB  = netip.MustParseAddr("10.0.0.2")
)

// allRemote is every remote right an MR or QP may grant for the tests.
const allRemote = ib.AccessRemoteWrite | ib.AccessRemoteRead | ib.AccessRemoteAtomic

// simNode is one side: a RoCE device on a simulated port with one PD, and a
// send CQ and a receive CQ for the UD tests (RC connections have their own).
type simNode struct {
	name string
	ip   netip.Addr
	dev  *roce.Device
	ctx  *ib.Context
	pd   *ib.PD
	scq  *ib.CQ // send completions
	rcq  *ib.CQ // receive completions
	wcs  []ib.WC
}

// simPair is two nodes joined by one simulated link.
type simPair struct {
	t      testing.TB
	net    *sim.Network
	link   *sim.Link
	pa, pb *sim.Port
	a, b   *simNode
}

// newSimPair builds the network, the link (cfg in both directions) and the two
// devices. The port MTU of cfg gives the devices' path MTU as rxe derives it.
func newSimPair(t testing.TB, seed uint64, cfg sim.LinkConfig) *simPair {
	t.Helper()
	n := sim.New(seed)
	p := &simPair{t: t, net: n}
	p.pa, p.pb = n.AddNode("a", macA), n.AddNode("b", macB)
	p.link = n.Connect(p.pa, p.pb, cfg)
	nbrs := roce.StaticNeighbors{ipA: macA, ipB: macB}
	p.a = newSimNode(t, "a", p.pa, macA, ipA, nbrs, seed*2+1)
	p.b = newSimNode(t, "b", p.pb, macB, ipB, nbrs, seed*2+2)
	return p
}

func newSimNode(t testing.TB, name string, port *sim.Port, mac [6]byte, ip netip.Addr, nbrs roce.StaticNeighbors, seed uint64) *simNode {
	t.Helper()
	dev, err := roce.NewDevice(roce.DeviceConfig{
		Endpoint: port, MAC: mac, Addrs: []netip.Addr{ip}, Neighbors: nbrs,
		Engine: ib.ContextConfig{Seed: seed},
	})
	if err != nil {
		t.Fatalf("%s: new device: %v", name, err)
	}
	ctx := dev.Context()
	nd := &simNode{name: name, ip: ip, dev: dev, ctx: ctx, pd: ctx.AllocPD(), wcs: make([]ib.WC, 256)}
	if nd.scq, err = ctx.CreateCQ(8192); err != nil {
		t.Fatal(err)
	}
	if nd.rcq, err = ctx.CreateCQ(8192); err != nil {
		t.Fatal(err)
	}
	return nd
}

// drive runs the network and both devices until done, failing the test if
// virtual time passes limit (a hang) or nothing is left to happen.
func (p *simPair) drive(limit time.Duration, done func() bool, step func(now time.Time) bool) error {
	return p.net.Drive(limit, done, step, p.a.dev, p.b.dev)
}

// quiet reports whether nothing is left to happen: no frame or timer in the
// network, no frame waiting in a port for its device, no engine timer armed,
// nothing to send.
func (p *simPair) quiet() bool {
	_, ev := p.net.NextEventTime()
	_, da := p.a.dev.NextDeadline()
	_, db := p.b.dev.NextDeadline()
	return !ev && !da && !db && p.pa.Queued() == 0 && p.pb.Queued() == 0 &&
		!p.a.ctx.HasOutput() && !p.b.ctx.HasOutput()
}

// settle drives until the network is quiet (every duplicate, retransmission and
// late ACK delivered and answered) or limit passes.
func (p *simPair) settle(limit time.Duration) error {
	err := p.drive(limit, p.quiet, nil)
	if err == sim.ErrStalled {
		return nil
	}
	return err
}

// poll returns the completions waiting on cq (valid until the next poll of n).
func (n *simNode) poll(cq *ib.CQ) []ib.WC {
	return n.wcs[:cq.Poll(n.wcs)]
}

// rcParams are the attributes of an RC connection and the depth of the stream
// run over it.
type rcParams struct {
	Depth       int   // send WRs in flight (and receives posted ahead)
	MaxRdAtomic int   // initiator depth and responder resources
	Timeout     uint8 // local ACK timeout: 4.096 µs × 2^Timeout
	RetryCnt    uint8
	RNRRetry    uint8
	MinRNRTimer uint8
	// Access are the responder QP's remote rights (default allRemote).
	Access ib.Access
}

// defaultRC is what the matrix uses unless a profile says otherwise: the
// attributes of ibv_rc_pingpong (timeout 14, 7 retries, RNR retry 7) with 16
// READ/atomics outstanding and 16 WRs in flight.
func defaultRC() rcParams {
	return rcParams{Depth: 16, MaxRdAtomic: 16, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MinRNRTimer: 12}
}

// retryBudget is how long a requester keeps retrying a PSN nobody answers
// before IBV_WC_RETRY_EXC_ERR: 4.096 µs × 2^Timeout per attempt, RetryCnt+1
// attempts (IBTA 9.7.6.1.3).
func retryBudget(timeout, retryCnt uint8) time.Duration {
	return time.Duration(4096) * (time.Duration(1) << timeout) * time.Duration(int(retryCnt)+1)
}

// rcConn is a connected pair of RC QPs, qa on node na and qb on node nb, each
// with its own send and receive CQ (aS, aR, bS, bR). A stream over it runs
// from qa (the requester) to qb (the responder); reverse gives the other way.
type rcConn struct {
	na, nb         *simNode
	qa, qb         *ib.QP
	aS, aR, bS, bR *ib.CQ
	prm            rcParams
}

// reverse returns the same connection seen from B: streams over it go from B
// to A.
func (c *rcConn) reverse() *rcConn {
	return &rcConn{na: c.nb, nb: c.na, qa: c.qb, qb: c.qa, aS: c.bS, aR: c.bR, bS: c.aS, bR: c.aR, prm: c.prm}
}

// newCQ creates a CQ on n.
func (n *simNode) newCQ(t testing.TB, depth int) *ib.CQ {
	t.Helper()
	cq, err := n.ctx.CreateCQ(depth)
	if err != nil {
		t.Fatalf("%s: create cq: %v", n.name, err)
	}
	return cq
}

// maxInline is the inline data capacity of the RC QPs.
const maxInline = 256

// newRCQP creates an RC QP on n with room for depth WRs each way.
func (n *simNode) newRCQP(t testing.TB, depth int, scq, rcq *ib.CQ) *ib.QP {
	t.Helper()
	qp, err := n.ctx.CreateQP(n.pd, ib.QPInitAttr{
		Type: ib.QPTypeRC, SendCQ: scq, RecvCQ: rcq,
		Cap: ib.QPCap{MaxSendWR: depth, MaxRecvWR: depth, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: maxInline},
	})
	if err != nil {
		t.Fatalf("%s: create qp: %v", n.name, err)
	}
	return qp
}

// connectRC creates and connects an RC QP on each node: RESET→INIT→RTR→RTS
// with the peer's QPN and PSN, as ibv_rc_pingpong does after its exchange.
func (p *simPair) connectRC(prm rcParams) *rcConn {
	p.t.Helper()
	if prm.Access == 0 {
		prm.Access = allRemote
	}
	cqDepth := 2*prm.Depth + 64
	c := &rcConn{na: p.a, nb: p.b, prm: prm,
		aS: p.a.newCQ(p.t, cqDepth), aR: p.a.newCQ(p.t, cqDepth), bS: p.b.newCQ(p.t, cqDepth), bR: p.b.newCQ(p.t, cqDepth)}
	c.qa, c.qb = p.a.newRCQP(p.t, prm.Depth, c.aS, c.aR), p.b.newRCQP(p.t, prm.Depth, c.bS, c.bR)
	psnA, psnB := uint32(0xfffff0), uint32(0x123456) // A's PSNs wrap at 2^24 soon
	p.bringUp(p.a, c.qa, ipB, c.qb.QPN(), psnB, psnA, prm)
	p.bringUp(p.b, c.qb, ipA, c.qa.QPN(), psnA, psnB, prm)
	return c
}

func (p *simPair) bringUp(n *simNode, qp *ib.QP, peer netip.Addr, dest, rqpsn, sqpsn uint32, prm rcParams) {
	p.t.Helper()
	ah, err := n.dev.AddressHandle(peer)
	if err != nil {
		p.t.Fatal(err)
	}
	steps := []struct {
		attr ib.QPAttr
		mask ib.QPAttrMask
	}{
		{ib.QPAttr{QPState: ib.QPStateInit, Port: 1, AccessFlags: prm.Access},
			ib.QPAttrState | ib.QPAttrPKeyIndex | ib.QPAttrPort | ib.QPAttrAccessFlags},
		{ib.QPAttr{QPState: ib.QPStateRTR, AH: ah, PathMTU: n.dev.PathMTU(), DestQPN: dest, RQPSN: rqpsn,
			MaxDestRdAtomic: prm.MaxRdAtomic, MinRNRTimer: prm.MinRNRTimer},
			ib.QPAttrState | ib.QPAttrAH | ib.QPAttrPathMTU | ib.QPAttrDestQPN | ib.QPAttrRQPSN |
				ib.QPAttrMaxDestRdAtomic | ib.QPAttrMinRNRTimer},
		{ib.QPAttr{QPState: ib.QPStateRTS, SQPSN: sqpsn, Timeout: prm.Timeout, RetryCnt: prm.RetryCnt,
			RNRRetry: prm.RNRRetry, MaxRdAtomic: prm.MaxRdAtomic},
			ib.QPAttrState | ib.QPAttrSQPSN | ib.QPAttrTimeout | ib.QPAttrRetryCnt | ib.QPAttrRNRRetry | ib.QPAttrMaxRdAtomic},
	}
	for _, s := range steps {
		if err := qp.Modify(&s.attr, s.mask); err != nil {
			p.t.Fatalf("%s: %v", n.name, err)
		}
	}
}

// regMR registers a fresh buffer of size bytes, each set to fill.
func (n *simNode) regMR(t testing.TB, size int, access ib.Access, fill byte) *ib.MR {
	t.Helper()
	buf := make([]byte, size)
	if size > 0 {
		// Doubling copies: one range access each under -race, not one per byte.
		buf[0] = fill
		for k := 1; k < size; k *= 2 {
			copy(buf[k:], buf[:k])
		}
	}
	mr, err := n.pd.RegMR(buf, access)
	if err != nil {
		t.Fatalf("%s: reg mr: %v", n.name, err)
	}
	return mr
}

// opKind is one operation of a workload.
type opKind uint8

const (
	opSend opKind = iota
	opSendImm
	opWrite
	opWriteImm
	opRead
	opFetchAdd
	opCmpSwap
	// opSendInv is a SEND_WITH_INV naming the key of one of B's fast-register
	// regions (see invRing).
	opSendInv
	// opAtomicWrite is an ATOMIC_WRITE of 8 bytes to an aligned area of B's
	// data region.
	opAtomicWrite
	// opFlush is a FLUSH of the area of the last WRITE before it (or, every
	// fourth one and while there is none, of B's whole data region).
	opFlush
	numOpKinds
)

var opNames = [numOpKinds]string{"SEND", "SEND_IMM", "WRITE", "WRITE_IMM", "READ", "FETCH_ADD", "CMP_SWAP",
	"SEND_INV", "ATOMIC_WRITE", "FLUSH"}

func (k opKind) String() string { return opNames[k] }

// wcOpcode is the opcode of the operation's requester completion.
func (k opKind) wcOpcode() ib.WCOpcode {
	return wcOpcodes[k]
}

var wcOpcodes = [numOpKinds]ib.WCOpcode{opSend: ib.WCSend, opSendImm: ib.WCSend, opWrite: ib.WCRDMAWrite,
	opWriteImm: ib.WCRDMAWrite, opRead: ib.WCRDMARead, opFetchAdd: ib.WCFetchAdd, opCmpSwap: ib.WCCompSwap,
	opSendInv: ib.WCSend, opAtomicWrite: ib.WCAtomicWrite, opFlush: ib.WCFlush}

// consumesRecv reports whether the operation completes a receive at B.
func (k opKind) consumesRecv() bool {
	return k == opSend || k == opSendImm || k == opWriteImm || k == opSendInv
}

// atomic reports whether the operation is an 8-byte atomic.
func (k opKind) atomic() bool { return k == opFetchAdd || k == opCmpSwap }

// message is one work request of a workload and everything needed to check it.
type message struct {
	kind opKind
	size int    // bytes moved (8 for atomics)
	off  int    // offset of the message's area in both data MRs
	crc  uint32 // CRC32 of the content it must deliver
	imm  uint32
	recv int // index of the receive it consumes, or -1

	// Atomics: the operands and the original value the responder must return.
	addend, compare, swap, wantOrig uint64

	// SEND_WITH_INV: the slot of B's region ring whose key it invalidates and
	// which registration of that region it is (0 for the first).
	invSlot, invGen int
	// FLUSH: what it asks for, and the message whose area it covers (-1 for
	// none).
	flush   ib.FlushInfo
	flushOf int
}

// Sizes and layout of a workload's memory.
const (
	canary  = 0xA5 // fill of every byte no message may write
	gapLen  = 16   // canary bytes between message areas
	faddOff = 0    // offset of the FETCH_ADD counter in B's atomic MR
	casOff  = 8    // offset of the CMP_SWAP counter

	// invRing is the number of fast-register regions B keeps for the
	// SEND_WITH_INVs of a stream: SEND_WITH_INV number k invalidates region
	// k mod invRing, which B registers again (with a new key byte) once the
	// receive of that SEND completes, for SEND_WITH_INV k+invRing. A
	// registration succeeds only on an invalid region, so each one proves
	// that the invalidation before it took effect. It is at least the depth
	// of any stream using them, so a SEND never waits for its key in
	// practice (the stream holds it back if it would).
	invRing = 32
	// invLen is the size of each of those regions.
	invLen = 64
)

// tombstone replaces the 8 bytes of an ATOMIC_WRITE at B as soon as they are
// seen there: if the write is executed again, its bytes come back.
var tombstone = [8]byte{0x3c, 0xc3, 0x3c, 0xc3, 0x3c, 0xc3, 0x3c, 0xc3}

// workload is a stream of messages with precomputed expectations.
type workload struct {
	seed     uint64
	msgs     []message
	dataLen  int // length of each node's data MR
	recvs    int // receives the stream consumes
	recvSlot int // size of one receive buffer (the largest message) plus a gap
	faddEnd  uint64
	casEnd   uint64
	counts   [numOpKinds]int
	bytes    int64
	invs     int // SEND_WITH_INVs

	// decorated WRs: SENDs and WRITEs of up to maxInline bytes go inline
	// (half of them from InlineData, half from their SGL), and every
	// seventh WR is fenced.
	decorated bool
}

// content writes message i's bytes into b (deterministic in seed and i).
func content(b []byte, seed uint64, i int) {
	x := uint32(i)*2654435761 ^ uint32(seed) ^ uint32(seed>>32)
	// Generated in a stack buffer and copied: under -race a store to b costs
	// a shadow-memory check per byte, a copy one per range.
	var tmp [512]byte
	for off := 0; off < len(b); off += len(tmp) {
		n := min(len(tmp), len(b)-off)
		for j := range n {
			x = x*1664525 + 1013904223
			tmp[j] = byte(x >> 24)
		}
		copy(b[off:off+n], tmp[:n])
	}
}

// buildWorkload draws n messages of the kinds in mix (uniformly) with sizes
// in [0, maxSize], 1 in 16 of them empty.
func buildWorkload(seed uint64, mix []opKind, n, maxSize int) *workload {
	return buildWorkloadOf(seed, mix, n, maxSize, false)
}

// buildWorkloadOf is buildWorkload, with inline and fenced WRs if decorated
// (see workload.decorated); one message in three is then short enough to go
// inline.
func buildWorkloadOf(seed uint64, mix []opKind, n, maxSize int, decorated bool) *workload {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	w := &workload{seed: seed, recvSlot: maxSize + gapLen, decorated: decorated}
	var fadd, cas uint64
	nCAS, nFlush, lastWrite := 0, 0, -1
	buf := make([]byte, maxSize)
	off := gapLen
	for i := 0; i < n; i++ {
		m := message{kind: mix[rng.IntN(len(mix))], recv: -1}
		switch {
		case m.kind.atomic():
			m.size = 8
		case m.kind == opAtomicWrite:
			m.size = 8
			off = (off + 7) &^ 7 // the target must be 8-byte aligned
		case m.kind == opFlush:
			m.size = 0 // moves no data
		case rng.IntN(16) == 0:
			m.size = 0
		case decorated && rng.IntN(3) == 0:
			m.size = 1 + rng.IntN(min(maxSize, maxInline))
		default:
			m.size = 1 + rng.IntN(maxSize)
		}
		m.off = off
		off += m.size + gapLen
		content(buf[:m.size], seed, i)
		m.crc = crc32.ChecksumIEEE(buf[:m.size])
		if m.kind.consumesRecv() {
			m.recv = w.recvs
			w.recvs++
		}
		switch m.kind {
		case opSendImm, opWriteImm:
			m.imm = uint32(i)*0x9e3779b9 | 1
		case opFetchAdd:
			// Each addend is distinct and the original value is the sum of the
			// earlier ones: an add executed twice shifts every later value.
			m.addend = uint64(i)<<20 | 1
			m.wantOrig = fadd
			fadd += m.addend
		case opCmpSwap:
			// A chain: each compare-and-swap finds the value the previous one
			// left; every fifth compares against a wrong value and must fail
			// (returning the current value, changing nothing).
			m.wantOrig = cas
			if nCAS%5 == 4 {
				m.compare, m.swap = cas^0xdead0000, 0xbad
			} else {
				m.compare, m.swap = cas, cas+uint64(i)+1
				cas = m.swap
			}
			nCAS++
		case opSendInv:
			m.invSlot, m.invGen = w.invs%invRing, w.invs/invRing
			w.invs++
		case opFlush:
			// Placement types 1, 2 and 3 in turn (global visibility,
			// persistence, both); selectivity level 1 (the whole region)
			// every fourth time.
			m.flushOf = lastWrite
			m.flush = ib.FlushInfo{Type: uint8(1 + nFlush%3)}
			if lastWrite < 0 || nFlush%4 == 3 {
				m.flush.Level = 1
			} else {
				m.flush.Len = uint32(w.msgs[lastWrite].size)
			}
			nFlush++
		}
		if m.kind == opWrite || m.kind == opWriteImm {
			lastWrite = i
		}
		w.counts[m.kind]++
		w.bytes += int64(m.size)
		w.msgs = append(w.msgs, m)
	}
	w.dataLen = off
	w.faddEnd, w.casEnd = fadd, cas
	return w
}

// rcStream runs a workload over an RC connection and checks it.
type rcStream struct {
	p    *simPair
	c    *rcConn
	w    *workload
	data [2]*ib.MR // A's and B's message areas
	recv *ib.MR    // B's receive buffers
	atom [2]*ib.MR // A's results (8 per message), B's two counters

	posted, completed    int // send WRs
	recvPosted, received int // receives
	err                  error

	// allowFail lets the stream end with an error completion: the first one
	// is recorded in failure (at failedAt); every later WR must then complete
	// with IBV_WC_WR_FLUSH_ERR (counted in flushed) and no more are posted.
	allowFail bool
	failure   *ib.WC
	failedAt  time.Time
	flushed   int
	now       time.Time

	// recvHeld, while set, stops the stream from posting receives at B.
	recvHeld  bool
	msgOfRecv []int // the message each receive is for
	// recvAhead, if not zero, is how many receives B keeps posted; a
	// completed receive is replaced recvDelay later (a slow receiver: with
	// fewer receives than WRs in flight, SENDs meet RNR NAKs).
	recvAhead int
	recvDelay time.Duration
	recvFreed int // completed receives whose replacement may be posted

	// SEND_WITH_INV: B's region ring (invRing), the index bits of each
	// region's keys, the registration of each that completed last (-1 for
	// none), the registrations to post on B's QP in order, and how many of
	// them were posted and completed. A stream with SEND_WITH_INVs polls B's
	// send CQ, so it must have that CQ to itself.
	inv                []*ib.MR
	invMem             [][]byte
	invKeyBase         []uint32
	invReady           []int
	regs               []invReg
	regPosted, regDone int
	// landed[i] says that ATOMIC_WRITE i's 8 bytes were seen at B (and
	// replaced by the tombstone).
	landed []bool
}

// invReg is one registration of a region of the ring: slot and generation.
type invReg struct{ slot, gen int }

// regWRID is the first WRID of B's registration WRs.
const regWRID = 1 << 40

// newRCStream registers the workload's memory on both nodes and fills it: the
// sources with the message contents, the destinations with canary bytes.
func newRCStream(p *simPair, c *rcConn, w *workload) *rcStream {
	s := &rcStream{p: p, c: c, w: w}
	acc := ib.AccessLocalWrite | allRemote
	s.data[0] = c.na.regMR(p.t, w.dataLen, acc, canary)
	accB := acc
	if w.counts[opFlush] > 0 {
		accB |= ib.AccessFlushGlobal | ib.AccessFlushPersistent
	}
	s.data[1] = c.nb.regMR(p.t, w.dataLen, accB, canary)
	s.recv = c.nb.regMR(p.t, max(1, w.recvs)*w.recvSlot, ib.AccessLocalWrite, canary)
	s.atom[0] = c.na.regMR(p.t, 8*max(1, len(w.msgs)), acc, canary)
	s.atom[1] = c.nb.regMR(p.t, 16, acc, 0)
	for i, m := range w.msgs {
		switch m.kind {
		case opRead:
			content(s.data[1].Buf()[m.off:m.off+m.size], w.seed, i)
		case opSend, opSendImm, opWrite, opWriteImm, opSendInv, opAtomicWrite:
			content(s.data[0].Buf()[m.off:m.off+m.size], w.seed, i)
		}
		if m.kind == opAtomicWrite && (s.data[1].Addr()+uint64(m.off))%8 != 0 {
			p.t.Fatalf("ATOMIC_WRITE %d: target %#x not 8-byte aligned", i, s.data[1].Addr()+uint64(m.off))
		}
	}
	if w.counts[opAtomicWrite] > 0 {
		s.landed = make([]bool, len(w.msgs))
	}
	if w.invs > 0 {
		if c.prm.Depth > invRing {
			p.t.Fatalf("depth %d > invRing %d: SEND_WITH_INVs would wait for their keys", c.prm.Depth, invRing)
		}
		mem := make([]byte, invRing*invLen)
		for k := range min(invRing, w.invs) {
			mr, err := c.nb.pd.AllocMR(invLen)
			if err != nil {
				p.t.Fatalf("%s: alloc mr: %v", c.nb.name, err)
			}
			s.inv = append(s.inv, mr)
			s.invMem = append(s.invMem, mem[k*invLen:(k+1)*invLen])
			s.invKeyBase = append(s.invKeyBase, mr.RKey()&^0xff)
			s.invReady = append(s.invReady, -1)
			s.regs = append(s.regs, invReg{k, 0})
		}
	}
	return s
}

// invKey is the R_Key of generation gen of ring region slot: the key byte
// counts registrations, so a key once invalidated is never valid again (for
// 256 registrations).
func (s *rcStream) invKey(slot, gen int) uint32 {
	return s.invKeyBase[slot] | uint32(uint8(gen+1))
}

// invUses returns the number of SEND_WITH_INVs of the stream naming region
// slot.
func (s *rcStream) invUses(slot int) int {
	return (s.w.invs - slot + invRing - 1) / invRing
}

// postRegs posts the queued registrations on B's QP, as many as fit in its
// send queue.
func (s *rcStream) postRegs() bool {
	moved := false
	for s.regPosted < len(s.regs) && s.regPosted-s.regDone < s.c.prm.Depth {
		r := s.regs[s.regPosted]
		wr := ib.SendWR{WRID: regWRID + uint64(s.regPosted), Opcode: ib.WRRegMR, Signaled: true,
			RegMR: ib.RegMRInfo{MR: s.inv[r.slot], Buf: s.invMem[r.slot], Key: uint8(r.gen + 1),
				Access: ib.AccessLocalWrite | ib.AccessRemoteWrite | ib.AccessRemoteRead}}
		if err := s.c.qb.PostSend(wr); err != nil {
			s.failf("post registration %d (region %d, generation %d): %v", s.regPosted, r.slot, r.gen, err)
			return true
		}
		s.regPosted++
		moved = true
	}
	return moved
}

// pollRegs checks B's registration completions: in order, successful (so
// the region was invalid: the SEND_WITH_INV before took effect), with the
// new key.
func (s *rcStream) pollRegs() bool {
	if len(s.inv) == 0 {
		return false
	}
	wcs := s.c.nb.poll(s.c.bS)
	for _, wc := range wcs {
		k := s.regDone
		if k >= s.regPosted || wc.WRID != regWRID+uint64(k) || wc.Status != ib.WCSuccess || wc.Opcode != ib.WCRegMR {
			s.failf("registration completion %v, want wr %#x IBV_WC_REG_MR success (a region not invalidated?)", wc, regWRID+uint64(k))
			return true
		}
		r := s.regs[k]
		if got := s.inv[r.slot].RKey(); got != s.invKey(r.slot, r.gen) {
			s.failf("region %d generation %d: rkey %#x, want %#x", r.slot, r.gen, got, s.invKey(r.slot, r.gen))
		}
		s.invReady[r.slot] = r.gen
		s.regDone++
	}
	return len(wcs) > 0
}

// watchAtomicWrite looks at the target of ATOMIC_WRITE i at B: once its 8
// bytes are there they are replaced by the tombstone, and if they come back
// the write was executed twice.
func (s *rcStream) watchAtomicWrite(i int) {
	m := &s.w.msgs[i]
	at := s.data[1].Buf()[m.off : m.off+8]
	val := s.data[0].Buf()[m.off : m.off+8]
	switch {
	case bytes.Equal(at, val):
		if s.landed[i] {
			s.failf("ATOMIC_WRITE wr %d: its 8 bytes landed twice", i)
			return
		}
		s.landed[i] = true
		copy(at, tombstone[:])
	case s.landed[i] && !bytes.Equal(at, tombstone[:]), !s.landed[i] && firstNotCanary(at) >= 0:
		s.failf("ATOMIC_WRITE wr %d: target holds % x (value % x, landed %v)", i, at, val, s.landed[i])
	}
}

func (s *rcStream) failf(format string, args ...any) {
	if s.err == nil {
		s.err = fmt.Errorf(format, args...)
	}
}

// sendWR returns the WR of message i.
func (s *rcStream) sendWR(i int) ib.SendWR {
	m := &s.w.msgs[i]
	a, b := s.data[0], s.data[1]
	wr := ib.SendWR{WRID: uint64(i), Signaled: true, Imm: m.imm}
	local := []ib.SGE{a.SGE(m.off, m.size)}
	if m.size >= 2 {
		// Two SGEs for every message with two bytes or more: the gather and
		// scatter paths cross an SGE boundary in the middle of a packet.
		h := m.size / 3
		local = []ib.SGE{a.SGE(m.off, h), a.SGE(m.off+h, m.size-h)}
	}
	remote := b.Addr() + uint64(m.off)
	if s.w.decorated {
		if m.size <= maxInline && (m.kind == opSend || m.kind == opSendImm || m.kind == opWrite || m.kind == opWriteImm) {
			wr.Inline = true
			if i%2 == 0 {
				// Copied at post time: the source may change at once.
				wr.InlineData = append([]byte(nil), a.Buf()[m.off:m.off+m.size]...)
			}
		}
		wr.Fence = i%7 == 3
	}
	switch m.kind {
	case opSend:
		wr.Opcode, wr.SGL = ib.WRSend, local
	case opSendImm:
		wr.Opcode, wr.SGL = ib.WRSendWithImm, local
	case opWrite:
		wr.Opcode, wr.SGL, wr.RemoteAddr, wr.RKey = ib.WRRDMAWrite, local, remote, b.RKey()
	case opWriteImm:
		wr.Opcode, wr.SGL, wr.RemoteAddr, wr.RKey = ib.WRRDMAWriteWithImm, local, remote, b.RKey()
	case opRead:
		wr.Opcode, wr.SGL, wr.RemoteAddr, wr.RKey = ib.WRRDMARead, local, remote, b.RKey()
	case opFetchAdd, opCmpSwap:
		wr.Opcode = ib.WRAtomicFetchAdd
		wr.RemoteAddr, wr.CompareAdd = s.atom[1].Addr()+faddOff, m.addend
		if m.kind == opCmpSwap {
			wr.Opcode = ib.WRAtomicCmpAndSwp
			wr.RemoteAddr, wr.CompareAdd, wr.Swap = s.atom[1].Addr()+casOff, m.compare, m.swap
		}
		wr.RKey = s.atom[1].RKey()
		wr.SGL = []ib.SGE{s.atom[0].SGE(8*i, 8)}
	case opSendInv:
		wr.Opcode, wr.SGL, wr.InvalidateRKey = ib.WRSendWithInv, local, s.invKey(m.invSlot, m.invGen)
	case opAtomicWrite:
		wr.Opcode, wr.SGL, wr.RemoteAddr, wr.RKey = ib.WRAtomicWrite, []ib.SGE{a.SGE(m.off, 8)}, remote, b.RKey()
	case opFlush:
		wr.Opcode, wr.RKey, wr.Flush = ib.WRFlush, b.RKey(), m.flush
		wr.SGL, wr.RemoteAddr = nil, b.Addr()
		if m.flushOf >= 0 && m.flush.Level == 0 {
			wr.RemoteAddr += uint64(s.w.msgs[m.flushOf].off)
		}
	}
	return wr
}

// recvWR returns receive j: one slot of the largest message's size, split in
// two SGEs.
func (s *rcStream) recvWR(j int) ib.RecvWR {
	off, n := j*s.w.recvSlot, s.w.recvSlot-gapLen
	h := n / 2
	return ib.RecvWR{WRID: uint64(j), SGL: []ib.SGE{s.recv.SGE(off, h), s.recv.SGE(off+h, n-h)}}
}

// checkArea verifies that mem holds message i's content (by CRC32, naming the
// first differing byte when it does not).
func (s *rcStream) checkArea(what string, i int, mem []byte) bool {
	m := &s.w.msgs[i]
	if got := crc32.ChecksumIEEE(mem); got != m.crc {
		want := make([]byte, len(mem))
		content(want, s.w.seed, i)
		at := 0
		for at < len(mem) && mem[at] == want[at] {
			at++
		}
		s.failf("%s of message %d (%s, %d bytes): crc32 %08x, want %08x (first difference at byte %d)",
			what, i, m.kind, m.size, got, m.crc, at)
		return false
	}
	return true
}

// inOrder reports whether the completion of wr wrid is the one expected next,
// next; if not, it fails the stream, saying whether wrid completed twice or
// overtook next (out of order, or next is missing). what is "send" or "recv".
func (s *rcStream) inOrder(what string, wrid uint64, next int) bool {
	switch {
	case wrid == uint64(next):
		return true
	case wrid < uint64(next):
		s.failf("%s wr %d completed twice (next expected %d)", what, wrid, next)
	default:
		s.failf("%s wr %d completed before %s wr %d: out of order or missing", what, wrid, what, next)
	}
	return false
}

// onSendWC checks a requester completion: the next WRID in posting order
// (exactly once, in order), success, and what the operation left behind.
func (s *rcStream) onSendWC(wc ib.WC) {
	if !s.inOrder("send", wc.WRID, s.completed) {
		return
	}
	i := s.completed
	s.completed++
	m := &s.w.msgs[i]
	switch {
	case wc.Status != ib.WCSuccess && s.allowFail && s.failure == nil:
		s.failure, s.failedAt = &wc, s.now
		return
	case wc.Status == ib.WCWRFlushErr && s.failure != nil:
		s.flushed++
		return
	case s.failure != nil:
		s.failf("send wr %d (%s) after the failure of wr %d: %v, want IBV_WC_WR_FLUSH_ERR", i, m.kind, s.failure.WRID, wc)
		return
	case wc.Status != ib.WCSuccess:
		s.failf("send wr %d (%s): %v", i, m.kind, wc)
		return
	}
	wantOp := m.kind.wcOpcode()
	if wc.Opcode != wantOp || wc.ByteLen != uint32(m.size) || wc.QPNum != s.c.qa.QPN() {
		s.failf("send wr %d: %v, want opcode %v len %d", i, wc, wantOp, m.size)
		return
	}
	b := s.data[1].Buf()
	switch m.kind {
	case opWrite, opWriteImm:
		// The ACK says the data is placed at B.
		s.checkArea("WRITE target", i, b[m.off:m.off+m.size])
	case opRead:
		s.checkArea("READ result", i, s.data[0].Buf()[m.off:m.off+m.size])
	case opFetchAdd, opCmpSwap:
		if got := binary.NativeEndian.Uint64(s.atom[0].Buf()[8*i:]); got != m.wantOrig {
			s.failf("%s wr %d returned %#x, want %#x (an atomic executed twice or lost)", m.kind, i, got, m.wantOrig)
		}
	case opAtomicWrite:
		// The READ response that completes it says the 8 bytes are placed.
		s.watchAtomicWrite(i)
		if !s.landed[i] {
			s.failf("ATOMIC_WRITE wr %d completed; its 8 bytes never reached B", i)
		}
	case opFlush:
		// Everything before it has completed; what it flushed holds the
		// data of the WRITE it covers.
		if m.flushOf >= 0 {
			f := &s.w.msgs[m.flushOf]
			s.checkArea("area a FLUSH covered", m.flushOf, b[f.off:f.off+f.size])
		}
	}
}

// onRecvWC checks a receive completion at B: the next receive in order, the
// message that had to consume it, its length, immediate data and bytes.
func (s *rcStream) onRecvWC(wc ib.WC, msgOfRecv []int) {
	if !s.inOrder("recv", wc.WRID, s.received) {
		return
	}
	j := s.received
	s.received++
	i := msgOfRecv[j]
	m := &s.w.msgs[i]
	if wc.Status != ib.WCSuccess {
		s.failf("recv wr %d (message %d, %s): %v", j, i, m.kind, wc)
		return
	}
	wantOp, wantFlags := ib.WCRecv, ib.WCFlags(0)
	var wantInv uint32
	switch m.kind {
	case opWriteImm:
		wantOp, wantFlags = ib.WCRecvRDMAWithImm, ib.WCFlagWithImm
	case opSendImm:
		wantFlags = ib.WCFlagWithImm
	case opSendInv:
		wantFlags, wantInv = ib.WCFlagWithInv, s.invKey(m.invSlot, m.invGen)
	}
	if wc.Opcode != wantOp || wc.ByteLen != uint32(m.size) || wc.Flags != wantFlags ||
		(wantFlags&ib.WCFlagWithImm != 0 && wc.Imm != m.imm) || wc.InvalidatedRKey != wantInv || wc.QPNum != s.c.qb.QPN() {
		s.failf("recv wr %d for message %d (%s, %d bytes, imm %#x, invalidating %#x): got %v flags %v invalidated %#x",
			j, i, m.kind, m.size, m.imm, wantInv, wc, wc.Flags, wc.InvalidatedRKey)
		return
	}
	if m.kind == opSendInv {
		if s.invReady[m.invSlot] != m.invGen {
			s.failf("recv wr %d: SEND_WITH_INV of region %d generation %d, registered %d", j, m.invSlot, m.invGen, s.invReady[m.invSlot])
			return
		}
		// Register the region again for its next SEND_WITH_INV: that
		// succeeds only if this one invalidated it.
		if next := m.invGen + 1; next < s.invUses(m.invSlot) {
			s.regs = append(s.regs, invReg{m.invSlot, next})
			s.postRegs()
		}
	}
	slot := s.recv.Buf()[j*s.w.recvSlot : (j+1)*s.w.recvSlot]
	switch m.kind {
	case opSend, opSendImm, opSendInv:
		if s.checkArea("received SEND", i, slot[:m.size]) {
			s.checkCanaryf(slot[m.size:], "receive buffer %d after its %d bytes", j, m.size)
		}
	case opWriteImm:
		s.checkArea("WRITE_IMM target", i, s.data[1].Buf()[m.off:m.off+m.size])
		s.checkCanaryf(slot, "receive buffer %d of a WRITE_IMM", j)
	}
}

func (s *rcStream) checkCanary(what string, b []byte) {
	if k := firstNotCanary(b); k >= 0 {
		s.failf("%s: byte %d is %#x, was never to be written", what, k, b[k])
	}
}

// checkCanaryf is checkCanary with the description formatted only on failure.
func (s *rcStream) checkCanaryf(b []byte, format string, args ...any) {
	if k := firstNotCanary(b); k >= 0 {
		s.failf("%s: byte %d is %#x, was never to be written", fmt.Sprintf(format, args...), k, b[k])
	}
}

// canaryBlock is canary bytes to compare memory against a block at a time.
var canaryBlock = bytes.Repeat([]byte{canary}, 4096)

// firstNotCanary returns the index of the first byte of b that is not canary,
// or -1.
func firstNotCanary(b []byte) int {
	for off := 0; off < len(b); off += len(canaryBlock) {
		chunk := b[off:min(len(b), off+len(canaryBlock))]
		if bytes.Equal(chunk, canaryBlock[:len(chunk)]) {
			continue
		}
		for k, c := range chunk {
			if c != canary {
				return off + k
			}
		}
	}
	return -1
}

// postRecvs tops up B's receive queue: the stream's next receives, as many
// as its depth ahead of the last completed one (none while recvHeld).
func (s *rcStream) postRecvs() {
	ahead := s.c.prm.Depth
	if s.recvAhead > 0 {
		ahead = s.recvAhead
	}
	for !s.recvHeld && s.recvPosted < s.w.recvs && s.recvPosted-s.recvFreed < ahead {
		if err := s.c.qb.PostRecv(s.recvWR(s.recvPosted)); err != nil {
			s.failf("post recv %d: %v", s.recvPosted, err)
			return
		}
		s.recvPosted++
	}
}

// start posts the first receives; step posts WRs (keeping prm.Depth in
// flight) and receives (as many ahead), and checks what completed; done says
// whether every WR and receive has completed, or a check failed, or the
// stream failed as allowed. runStreams drives them.
func (s *rcStream) start() {
	s.msgOfRecv = make([]int, 0, s.w.recvs)
	for i, m := range s.w.msgs {
		if m.recv >= 0 {
			s.msgOfRecv = append(s.msgOfRecv, i)
		}
	}
	s.postRecvs()
	s.postRegs()
}

func (s *rcStream) step(now time.Time) bool {
	s.now = now
	moved := s.pollRegs()
	moved = s.postRegs() || moved
	for s.posted < len(s.w.msgs) && s.posted-s.completed < s.c.prm.Depth && s.err == nil && s.failure == nil {
		if m := &s.w.msgs[s.posted]; m.kind == opSendInv && s.invReady[m.invSlot] < m.invGen {
			break // its key is not registered yet
		}
		wr := s.sendWR(s.posted)
		if err := s.c.qa.PostSend(wr); err != nil {
			s.failf("post send %d: %v", s.posted, err)
			return true
		}
		for k := range wr.InlineData {
			wr.InlineData[k] = 0xff // the engine copied it: scribbling must not matter
		}
		s.posted++
		moved = true
	}
	if s.landed != nil {
		for i := s.completed; i < s.posted; i++ {
			if s.w.msgs[i].kind == opAtomicWrite {
				s.watchAtomicWrite(i)
			}
		}
	}
	for _, wc := range s.c.na.poll(s.c.aS) {
		s.onSendWC(wc)
		moved = true
	}
	for _, wc := range s.c.nb.poll(s.c.bR) {
		s.onRecvWC(wc, s.msgOfRecv)
		moved = true
		if s.recvDelay > 0 {
			s.p.net.AfterFunc(s.recvDelay, func() { s.recvFreed++; s.postRecvs() })
		} else {
			s.recvFreed++
		}
	}
	s.postRecvs()
	return moved
}

func (s *rcStream) done() bool {
	return s.err != nil || (s.completed == len(s.w.msgs) && s.received == s.w.recvs) ||
		(s.failure != nil && s.completed == s.posted)
}

// progress describes how far the stream got, for error messages.
func (s *rcStream) progress() string {
	return fmt.Sprintf("%d of %d WRs and %d of %d receives completed", s.completed, len(s.w.msgs), s.received, s.w.recvs)
}

// run runs the stream alone; onStep, if not nil, runs in each step (for
// scheduled faults).
func (s *rcStream) run(limit time.Duration, onStep func(now time.Time)) error {
	return runStreams(s.p, limit, onStep, s)
}

// runStreams drives several streams at once until each is done, and returns
// the first stream's error.
func runStreams(p *simPair, limit time.Duration, onStep func(now time.Time), streams ...*rcStream) error {
	for _, s := range streams {
		s.start()
	}
	done := func() bool {
		for _, s := range streams {
			if s.err != nil {
				return true
			}
			if !s.done() {
				return false
			}
		}
		return true
	}
	step := func(now time.Time) bool {
		if onStep != nil {
			onStep(now)
		}
		moved := false
		for _, s := range streams {
			if s.step(now) {
				moved = true
			}
		}
		return moved
	}
	err := p.drive(limit, done, step)
	for k, s := range streams {
		if err != nil {
			return fmt.Errorf("stream %d: after %s: %w", k, s.progress(), err)
		}
		if s.err != nil {
			return fmt.Errorf("stream %d (%s→%s): %w", k, s.c.na.name, s.c.nb.name, s.err)
		}
	}
	return nil
}

// finish lets the network settle, then checks that nothing completed again,
// both QPs are still in RTS, and every byte of memory is what the workload
// says: each message area once more, the canary gaps, the atomic counters.
func (s *rcStream) finish(limit time.Duration) error {
	if err := s.p.settle(limit); err != nil {
		return fmt.Errorf("settle: %w", err)
	}
	for _, q := range []struct {
		n  *simNode
		cq *ib.CQ
	}{{s.c.na, s.c.aS}, {s.c.na, s.c.aR}, {s.c.nb, s.c.bS}, {s.c.nb, s.c.bR}} {
		if wcs := q.n.poll(q.cq); len(wcs) > 0 {
			return fmt.Errorf("%s: %d completions after the stream ended, first %v", q.n.name, len(wcs), wcs[0])
		}
	}
	if sa, sb := s.c.qa.State(), s.c.qb.State(); sa != ib.QPStateRTS || sb != ib.QPStateRTS {
		return fmt.Errorf("QP states %v and %v after the stream, want RTS", sa, sb)
	}
	a, b := s.data[0].Buf(), s.data[1].Buf()
	prev := 0
	for i, m := range s.w.msgs {
		s.checkCanaryf(b[prev:m.off], "B's gap before message %d", i)
		s.checkCanaryf(a[prev:m.off], "A's gap before message %d", i)
		switch m.kind {
		case opWrite, opWriteImm:
			s.checkArea("WRITE target at the end", i, b[m.off:m.off+m.size])
		case opRead:
			s.checkArea("READ result at the end", i, a[m.off:m.off+m.size])
			s.checkArea("READ source at the end", i, b[m.off:m.off+m.size])
		case opSend, opSendImm, opSendInv:
			s.checkArea("SEND source at the end", i, a[m.off:m.off+m.size])
			s.checkCanaryf(b[m.off:m.off+m.size], "B's area of SEND message %d", i)
		case opAtomicWrite:
			s.checkArea("ATOMIC_WRITE source at the end", i, a[m.off:m.off+m.size])
			if at := b[m.off : m.off+8]; !s.landed[i] || !bytes.Equal(at, tombstone[:]) {
				s.failf("ATOMIC_WRITE %d at the end: B holds % x, landed %v (executed twice, or never)", i, at, s.landed[i])
			}
		default:
			s.checkCanaryf(b[m.off:m.off+m.size], "B's area of atomic message %d", i)
		}
		prev = m.off + m.size
	}
	s.checkCanary("B's tail", b[prev:])
	ctr := s.atom[1].Buf()
	if got := binary.NativeEndian.Uint64(ctr[faddOff:]); got != s.w.faddEnd {
		s.failf("FETCH_ADD counter %#x after %d adds, want %#x", got, s.w.counts[opFetchAdd], s.w.faddEnd)
	}
	if got := binary.NativeEndian.Uint64(ctr[casOff:]); got != s.w.casEnd {
		s.failf("CMP_SWAP chain ended at %#x after %d, want %#x", got, s.w.counts[opCmpSwap], s.w.casEnd)
	}
	if s.err == nil && len(s.inv) > 0 {
		s.proveInvalidated(limit)
	}
	return s.err
}

// proveInvalidated checks what the last SEND_WITH_INV of each region of the
// ring left: the region is invalid, so one more registration of each
// succeeds, and every region is used as often as the workload says.
func (s *rcStream) proveInvalidated(limit time.Duration) {
	for slot := range s.inv {
		last := s.invUses(slot) - 1
		if s.invReady[slot] != last {
			s.failf("region %d: registration %d completed last, want %d", slot, s.invReady[slot], last)
			return
		}
		s.regs = append(s.regs, invReg{slot, last + 1})
	}
	err := s.p.drive(limit, func() bool { return s.err != nil || s.regDone == len(s.regs) }, func(time.Time) bool {
		moved := s.pollRegs()
		return s.postRegs() || moved
	})
	if err != nil {
		s.failf("registering the ring again: %v after %d of %d", err, s.regDone, len(s.regs))
	}
}

// runStats is one row of the matrix report.
type runStats struct {
	mix, profile          string
	msgs, recvs           int
	bytes                 int64
	retrans, timeouts     uint64
	seqNAKs, dupReqs      uint64
	frames, dropped       uint64
	corrupted, duplicated uint64
	reordered, badICRC    uint64
	virtual, wall         time.Duration
	partitionDrops        uint64
	failedWR              int       // the WR that ran out of retries (allowed by the profile), or -1
	badICRCAt             [2]uint64 // ICRC rejections at the requester and at the responder
}

// verified returns the number of messages of the run that completed
// successfully and were checked: all of them, or those before the WR that
// ran out of retries.
func (st *runStats) verified() int {
	if st.failedWR >= 0 {
		return st.failedWR
	}
	return st.msgs
}

// collect fills the counters of a finished run.
func (s *rcStream) collect(st *runStats) {
	ca, cb := s.c.qa.Counters(), s.c.qb.Counters()
	st.msgs, st.recvs, st.bytes = len(s.w.msgs), s.w.recvs, s.w.bytes
	if s.failure == nil {
		st.failedWR = -1
	}
	st.retrans, st.timeouts = ca.Retransmissions, ca.Timeouts
	st.seqNAKs, st.dupReqs = cb.NAKsSent[ib.NAKPSNSequenceError], cb.DuplicateRequests
	for _, d := range []sim.Direction{sim.AtoB, sim.BtoA} {
		ls := s.p.link.Stats(d)
		st.frames += ls.Sent
		st.dropped += ls.TotalDropped()
		st.corrupted += ls.Corrupted
		st.duplicated += ls.Duplicated
		st.reordered += ls.Reordered
		st.partitionDrops += ls.Dropped[sim.DropPartition]
	}
	st.badICRCAt = [2]uint64{s.c.na.dev.Counters().BadICRC, s.c.nb.dev.Counters().BadICRC}
	st.badICRC = st.badICRCAt[0] + st.badICRCAt[1]
	st.virtual = s.p.net.Now().Sub(sim.Epoch)
}

// formatStats renders the matrix as a table.
func formatStats(rows []runStats) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-10s %-9s %6s %6s %9s %7s %6s %6s %6s %7s %6s %6s %6s %6s %11s %8s\n",
		"profile", "mix", "msgs", "recvs", "bytes", "retrans", "tmo", "seqNAK", "dupReq",
		"frames", "drop", "corr", "dup", "badCRC", "virtual", "wall")
	for _, r := range rows {
		fmt.Fprintf(&b, "%-10s %-9s %6d %6d %9d %7d %6d %6d %6d %7d %6d %6d %6d %6d %11v %8v",
			r.profile, r.mix, r.msgs, r.recvs, r.bytes, r.retrans, r.timeouts, r.seqNAKs, r.dupReqs,
			r.frames, r.dropped, r.corrupted, r.duplicated, r.badICRC,
			r.virtual.Round(time.Microsecond), r.wall.Round(time.Millisecond))
		if r.failedWR >= 0 {
			fmt.Fprintf(&b, "  RETRY_EXC_ERR at wr %d", r.failedWR)
		}
		b.WriteByte('\n')
	}
	// One line per profile: its messages, retransmissions and times summed.
	for i := 0; i < len(rows); {
		j := i
		var t runStats
		verified := 0
		for ; j < len(rows) && rows[j].profile == rows[i].profile; j++ {
			t.msgs += rows[j].msgs
			verified += rows[j].verified()
			t.retrans += rows[j].retrans
			t.timeouts += rows[j].timeouts
			t.frames += rows[j].frames
			t.virtual += rows[j].virtual
			t.wall += rows[j].wall
		}
		fmt.Fprintf(&b, "total %-10s %6d messages (%d verified) %7d retransmissions %6d timeouts %8d frames, virtual %v, wall %v\n",
			rows[i].profile, t.msgs, verified, t.retrans, t.timeouts, t.frames, t.virtual.Round(time.Microsecond), t.wall.Round(time.Millisecond))
		i = j
	}
	return b.String()
}
