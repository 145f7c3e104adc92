package test

// The UC and UD streams of the soak test. Neither service retransmits, so
// over a faulty network some messages are lost; neither detects duplicates
// either: UD has no sequence at all (IBTA 9.8), and a UC responder starts a
// new message on any First or Only packet whatever its PSN (IBTA 9.7.5.1.2;
// rxe's check_psn does the same), so a duplicated or late Only packet is
// delivered again, or out of order. What must hold is that every send WR
// completes exactly once, in order, with success; every receive completes
// exactly once, in order — consumed by a message whose every byte is intact,
// or flushed when the QP goes to ERR at the end; and nothing is written where
// no message may write. Repeated and out-of-order deliveries are counted.

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/softrdma/softrdma/header"
	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/ibtransport/ibtest"
)

// soakDepth is how many send WRs each UC and UD stream keeps in flight.
const soakDepth = 8

// ucImm is the immediate data of UC message i: it names the message.
func ucImm(i int) uint32 { return 0x5a000000 | uint32(i) }

// ucStream runs SEND_IMM, WRITE_IMM and WRITE messages from x to y over UC.
type ucStream struct {
	stream
	w              *workload
	src, dst, recv *ib.MR
}

// stream is what the UC and UD streams share: the QPs from x to y, each with a
// send and a receive CQ, and the counts of the sends and receives.
type stream struct {
	kind           string // "uc" or "ud", for errors
	x, y           *simNode
	qa, qb         *ib.QP
	aS, aR, bS, bR *ib.CQ

	posted, completed int
	received          int    // receives consumed, in order
	last              int    // the last message delivered, or -1
	got               []bool // messages whose receive completed
	again, early      int    // deliveries of a message already delivered, or before an earlier one
	err               error
}

func (s *stream) failf(format string, args ...any) {
	if s.err == nil {
		s.err = fmt.Errorf("%s %s→%s: "+format, append([]any{s.kind, s.x.name, s.y.name}, args...)...)
	}
}

// pump posts the next of n messages while fewer than soakDepth are
// outstanding (wr builds message i's work request), checks the send
// completions (each the next in order, a success of opcode want(i)), and hands
// the receive completions to onRecv. It reports whether anything moved.
func (s *stream) pump(n int, wr func(i int) ib.SendWR, want func(i int) ib.WCOpcode, onRecv func(ib.WC)) bool {
	moved := false
	for s.posted < n && s.posted-s.completed < soakDepth && s.err == nil {
		if err := s.qa.PostSend(wr(s.posted)); err != nil {
			s.failf("post send %d: %v", s.posted, err)
			return true
		}
		s.posted++
		moved = true
	}
	for _, wc := range s.x.poll(s.aS) {
		moved = true
		op := want(min(int(wc.WRID), n-1))
		if wc.WRID != uint64(s.completed) || wc.Status != ib.WCSuccess || wc.Opcode != op {
			s.failf("send completion %v, want wr %d %v success (lost, duplicate or out of order)", wc, s.completed, op)
			continue
		}
		s.completed++
	}
	for _, wc := range s.y.poll(s.bR) {
		moved = true
		onRecv(wc)
	}
	return moved
}

// newUCStream creates and connects the two UC QPs (each with its own CQs),
// registers the memory and posts every receive the workload may consume.
func newUCStream(sn *soakNet, x, y *simNode, seed uint64, n, maxSize int) (*ucStream, error) {
	t := sn.t
	w := buildWorkload(seed, []opKind{opSendImm, opWriteImm, opWrite}, n, maxSize)
	s := &ucStream{stream: stream{kind: "uc", x: x, y: y, last: -1, got: make([]bool, n)}, w: w}
	s.aS, s.aR, s.bS, s.bR = x.newCQ(t, 2*soakDepth), x.newCQ(t, 1), y.newCQ(t, 1), y.newCQ(t, max(1, w.recvs)+1)
	mk := func(nd *simNode, scq, rcq *ib.CQ, recvs int) (*ib.QP, error) {
		return nd.ctx.CreateQP(nd.pd, ib.QPInitAttr{Type: ib.QPTypeUC, SendCQ: scq, RecvCQ: rcq,
			Cap: ib.QPCap{MaxSendWR: soakDepth, MaxRecvWR: max(1, recvs), MaxSendSGE: 2, MaxRecvSGE: 2}})
	}
	var err error
	if s.qa, err = mk(x, s.aS, s.aR, 1); err != nil {
		return nil, err
	}
	if s.qb, err = mk(y, s.bS, s.bR, w.recvs); err != nil {
		return nil, err
	}
	psnX, psnY := uint32(seed*0x9e37)&ib.PSNMask, uint32(seed*0x7f4a+0xfff000)&ib.PSNMask
	up := func(nd *simNode, qp *ib.QP, peer *simNode, dest, rqpsn, sqpsn uint32) error {
		ah, err := nd.dev.AddressHandle(peer.ip)
		if err != nil {
			return err
		}
		return modifySteps(qp,
			modifyStep{ib.QPAttr{QPState: ib.QPStateInit, Port: 1, AccessFlags: ib.AccessRemoteWrite},
				ib.QPAttrState | ib.QPAttrPKeyIndex | ib.QPAttrPort | ib.QPAttrAccessFlags},
			modifyStep{ib.QPAttr{QPState: ib.QPStateRTR, AH: ah, PathMTU: nd.dev.PathMTU(), DestQPN: dest, RQPSN: rqpsn},
				ib.QPAttrState | ib.QPAttrAH | ib.QPAttrPathMTU | ib.QPAttrDestQPN | ib.QPAttrRQPSN},
			modifyStep{ib.QPAttr{QPState: ib.QPStateRTS, SQPSN: sqpsn}, ib.QPAttrState | ib.QPAttrSQPSN})
	}
	if err := up(x, s.qa, y, s.qb.QPN(), psnY, psnX); err != nil {
		return nil, err
	}
	if err := up(y, s.qb, x, s.qa.QPN(), psnX, psnY); err != nil {
		return nil, err
	}
	acc := ib.AccessLocalWrite | ib.AccessRemoteWrite
	s.src = x.regMR(t, w.dataLen, 0, canary)
	s.dst = y.regMR(t, w.dataLen, acc, canary)
	s.recv = y.regMR(t, max(1, w.recvs)*w.recvSlot, ib.AccessLocalWrite, canary)
	for i, m := range w.msgs {
		content(s.src.Buf()[m.off:m.off+m.size], w.seed, i)
	}
	for j := range w.recvs {
		off, sz := j*w.recvSlot, w.recvSlot-gapLen
		h := sz / 2
		if err := s.qb.PostRecv(ib.RecvWR{WRID: uint64(j), SGL: []ib.SGE{s.recv.SGE(off, h), s.recv.SGE(off+h, sz-h)}}); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// verify checks mem against message i's content; exact says every byte must
// match, otherwise each byte may also still be the canary (a message cut
// short by a lost packet: UC places what arrives, packet by packet).
func (s *ucStream) verify(what string, i int, mem []byte, exact bool) {
	want := make([]byte, len(mem))
	content(want, s.w.seed, i)
	for k := range mem {
		if mem[k] != want[k] && (exact || mem[k] != canary) {
			s.failf("%s of message %d (%s, %d bytes): byte %d is %#x, want %#x", what, i, s.w.msgs[i].kind, len(mem), k, mem[k], want[k])
			return
		}
	}
}

func (s *ucStream) step(time.Time) bool {
	return s.pump(len(s.w.msgs), func(i int) ib.SendWR {
		m := &s.w.msgs[i]
		wr := ib.SendWR{WRID: uint64(i), Signaled: true, Imm: ucImm(i),
			SGL: []ib.SGE{s.src.SGE(m.off, m.size)}, RemoteAddr: s.dst.Addr() + uint64(m.off), RKey: s.dst.RKey()}
		if m.size >= 2 {
			h := m.size / 2
			wr.SGL = []ib.SGE{s.src.SGE(m.off, h), s.src.SGE(m.off+h, m.size-h)}
		}
		switch m.kind {
		case opSendImm:
			wr.Opcode = ib.WRSendWithImm
		case opWriteImm:
			wr.Opcode = ib.WRRDMAWriteWithImm
		default:
			wr.Opcode = ib.WRRDMAWrite
		}
		return wr
	}, func(i int) ib.WCOpcode {
		if s.w.msgs[i].kind != opSendImm {
			return ib.WCRDMAWrite
		}
		return ib.WCSend
	}, s.onRecv)
}

// onRecv checks a receive completion: the next receive, for a message after
// the last one delivered, with its length, immediate data and bytes.
func (s *ucStream) onRecv(wc ib.WC) {
	j := s.received
	if wc.WRID != uint64(j) || wc.Status != ib.WCSuccess || wc.Flags&ib.WCFlagWithImm == 0 {
		s.failf("receive completion %v flags %v, want recv wr %d success with immediate data", wc, wc.Flags, j)
		return
	}
	s.received++
	i := int(wc.Imm &^ 0x5a000000)
	if wc.Imm&0xff000000 != 0x5a000000 || i >= len(s.w.msgs) {
		s.failf("recv wr %d: immediate %#x names no message", j, wc.Imm)
		return
	}
	switch {
	case s.got[i]:
		s.again++
	case i < s.last:
		s.early++
	}
	s.last = max(s.last, i)
	s.got[i] = true
	m := &s.w.msgs[i]
	wantOp := ib.WCRecv
	if m.kind == opWriteImm {
		wantOp = ib.WCRecvRDMAWithImm
	}
	if !m.kind.consumesRecv() || wc.Opcode != wantOp || wc.ByteLen != uint32(m.size) || wc.QPNum != s.qb.QPN() {
		s.failf("recv wr %d: %v for message %d (%s, %d bytes)", j, wc, i, m.kind, m.size)
		return
	}
	switch m.kind {
	case opSendImm:
		off := j * s.w.recvSlot
		s.verify("received SEND", i, s.recv.Buf()[off:off+m.size], true)
	case opWriteImm:
		s.verify("WRITE_IMM target", i, s.dst.Buf()[m.off:m.off+m.size], true)
	}
}

func (s *ucStream) done() bool { return s.err != nil || s.completed == len(s.w.msgs) }

// finish runs once the network is quiet: it collects the last receives, moves
// the receiver to ERR (flushing exactly the receives no message consumed),
// checks every byte of the destination and source, and returns how many
// messages were delivered of those that consume a receive.
func (s *ucStream) finish() (delivered int, err error) {
	s.step(time.Time{})
	if s.err != nil {
		return 0, s.err
	}
	if err := flushRecvs(s.y, s.qb, s.bR, s.received, s.w.recvs); err != nil {
		return 0, fmt.Errorf("uc %s→%s: %w", s.x.name, s.y.name, err)
	}
	if err := s.qa.Modify(&ib.QPAttr{QPState: ib.QPStateErr}, ib.QPAttrState); err != nil {
		return 0, err
	}
	if wcs := s.x.poll(s.aS); len(wcs) > 0 {
		return 0, fmt.Errorf("uc %s→%s: %d send completions after the last, first %v", s.x.name, s.y.name, len(wcs), wcs[0])
	}
	d, src := s.dst.Buf(), s.src.Buf()
	prev := 0
	for i, m := range s.w.msgs {
		s.checkCanary(fmt.Sprintf("gap before message %d", i), d[prev:m.off])
		area := d[m.off : m.off+m.size]
		switch {
		case m.kind == opSendImm:
			s.checkCanary(fmt.Sprintf("target area of SEND message %d", i), area)
		case m.kind == opWriteImm && s.got[i]:
			s.verify("WRITE_IMM target at the end", i, area, true)
		default:
			s.verify("WRITE target at the end", i, area, false)
		}
		s.verify("source at the end", i, src[m.off:m.off+m.size], true)
		if s.got[i] {
			delivered++
		}
		prev = m.off + m.size
	}
	s.checkCanary("tail", d[prev:])
	return delivered, s.err
}

func (s *ucStream) checkCanary(what string, b []byte) {
	for k, c := range b {
		if c != canary {
			s.failf("%s: byte %d is %#x, was never to be written", what, k, c)
			return
		}
	}
}

// teardown destroys the QPs and CQs and deregisters the memory.
func (s *ucStream) teardown() error {
	if err := destroyAll([]*ib.QP{s.qa, s.qb}, []*ib.CQ{s.aS, s.aR, s.bS, s.bR}); err != nil {
		return err
	}
	return deregAll(s.src, s.dst, s.recv)
}

// udStream sends SEND and SEND_IMM datagrams of up to the path MTU from x to
// y. Each message's first four bytes are its number.
type udStream struct {
	stream
	ah          ib.AddressHandle
	seed        uint64
	msgs        []udSoakMsg
	src, recv   *ib.MR
	badIPHeader int // deliveries whose IPv4 header failed its checksum
}

type udSoakMsg struct {
	size int
	imm  bool
	crc  uint32
}

// udSlot is the size of one UD receive buffer: the GRH area, a path MTU of
// payload, and canary bytes after it.
const (
	udMTU  = 1024
	udSlot = 40 + udMTU + gapLen
	udQKey = 0x51515151
)

func newUDStream(sn *soakNet, x, y *simNode, seed uint64, n int) (*udStream, error) {
	t := sn.t
	s := &udStream{stream: stream{kind: "ud", x: x, y: y, last: -1, got: make([]bool, n)}, seed: seed, msgs: make([]udSoakMsg, n)}
	s.aS, s.aR, s.bS, s.bR = x.newCQ(t, 2*soakDepth), x.newCQ(t, 1), y.newCQ(t, 1), y.newCQ(t, n+1)
	mk := func(nd *simNode, scq, rcq *ib.CQ, recvs int) (*ib.QP, error) {
		qp, err := nd.ctx.CreateQP(nd.pd, ib.QPInitAttr{Type: ib.QPTypeUD, SendCQ: scq, RecvCQ: rcq,
			Cap: ib.QPCap{MaxSendWR: soakDepth, MaxRecvWR: recvs, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			return nil, err
		}
		return qp, ibtest.UDToRTS(qp, udQKey, uint32(seed)&ib.PSNMask)
	}
	var err error
	if s.qa, err = mk(x, s.aS, s.aR, 1); err != nil {
		return nil, err
	}
	if s.qb, err = mk(y, s.bS, s.bR, n); err != nil {
		return nil, err
	}
	if s.ah, err = x.dev.AddressHandle(y.ip); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(seed, 0xd6))
	s.src = x.regMR(t, n*udMTU, 0, 0)
	for i := range s.msgs {
		m := &s.msgs[i]
		m.size = 4 + rng.IntN(udMTU-4+1)
		m.imm = i%3 == 1
		b := s.src.Buf()[udMTU*i : udMTU*i+m.size]
		content(b, seed, i)
		binary.LittleEndian.PutUint32(b, uint32(i))
		m.crc = crc32.ChecksumIEEE(b)
	}
	s.recv = y.regMR(t, n*udSlot, ib.AccessLocalWrite, canary)
	for j := range n {
		if err := s.qb.PostRecv(ib.RecvWR{WRID: uint64(j), SGL: []ib.SGE{s.recv.SGE(j*udSlot, udSlot-gapLen)}}); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *udStream) step(time.Time) bool {
	return s.pump(len(s.msgs), func(i int) ib.SendWR {
		m := &s.msgs[i]
		wr := ib.SendWR{WRID: uint64(i), Opcode: ib.WRSend, Signaled: true,
			SGL: []ib.SGE{s.src.SGE(udMTU*i, m.size)}, AH: &s.ah, RemoteQPN: s.qb.QPN(), RemoteQKey: udQKey}
		if m.imm {
			wr.Opcode, wr.Imm = ib.WRSendWithImm, ucImm(i)
		}
		return wr
	}, func(int) ib.WCOpcode { return ib.WCSend }, s.onRecv)
}

func (s *udStream) onRecv(wc ib.WC) {
	j := s.received
	if wc.WRID != uint64(j) || wc.Status != ib.WCSuccess || wc.Opcode != ib.WCRecv || wc.Flags&ib.WCFlagGRH == 0 {
		s.failf("receive completion %v flags %v, want recv wr %d success with GRH", wc, wc.Flags, j)
		return
	}
	s.received++
	b := s.recv.Buf()[j*udSlot : (j+1)*udSlot]
	size := int(wc.ByteLen) - 40
	if size < 4 || size > udMTU {
		s.failf("recv wr %d: %d bytes", j, wc.ByteLen)
		return
	}
	i := int(binary.LittleEndian.Uint32(b[40:]))
	if i >= len(s.msgs) {
		s.failf("recv wr %d: message %d of %d", j, i, len(s.msgs))
		return
	}
	switch {
	case s.got[i]:
		s.again++
	case i < s.last:
		s.early++
	}
	s.last = max(s.last, i)
	s.got[i] = true
	m := &s.msgs[i]
	switch {
	case size != m.size || crc32.ChecksumIEEE(b[40:40+size]) != m.crc:
		s.failf("message %d: %d bytes crc32 %08x, want %d bytes %08x", i, size, crc32.ChecksumIEEE(b[40:40+size]), m.size, m.crc)
	case wc.SrcQP != s.qa.QPN():
		s.failf("message %d from qp %#x, want %#x", i, wc.SrcQP, s.qa.QPN())
	case m.imm != (wc.Flags&ib.WCFlagWithImm != 0) || (m.imm && wc.Imm != ucImm(i)):
		s.failf("message %d: flags %v imm %#x", i, wc.Flags, wc.Imm)
	}
	if err := checkIPv4GRH(b[:40], s.x.ip, s.y.ip, m.size, m.imm); err != nil {
		// The ICRC does not cover the IPv4 TOS, TTL and header checksum
		// (IBTA A17.3.3), so a bit flipped there reaches the QP unless the
		// device checks the IPv4 header checksum (the kernel's IP layer
		// would have dropped the frame). Count it; anything else is wrong.
		if !grhOnlyUncoveredDiffers(b[20:40], s.x.ip, s.y.ip, m.size, m.imm) {
			s.failf("message %d: %v", i, err)
		}
		s.badIPHeader++
	}
	for k, c := range b[40+size:] {
		if c != canary {
			s.failf("message %d: byte %d after the payload was written", i, 40+size+k)
			break
		}
	}
}

func (s *udStream) done() bool { return s.err != nil || s.completed == len(s.msgs) }

// finish collects the last receives, flushes the rest, checks that no receive
// buffer that took no message was written, and returns how many distinct
// messages were delivered.
func (s *udStream) finish() (int, error) {
	s.step(time.Time{})
	if s.err != nil {
		return 0, s.err
	}
	if err := flushRecvs(s.y, s.qb, s.bR, s.received, len(s.msgs)); err != nil {
		return 0, fmt.Errorf("ud %s→%s: %w", s.x.name, s.y.name, err)
	}
	for j := s.received; j < len(s.msgs); j++ {
		for k, c := range s.recv.Buf()[j*udSlot : (j+1)*udSlot] {
			if c != canary {
				return 0, fmt.Errorf("ud %s→%s: flushed receive %d: byte %d written", s.x.name, s.y.name, j, k)
			}
		}
	}
	if wcs := s.x.poll(s.aS); len(wcs) > 0 {
		return 0, fmt.Errorf("ud %s→%s: %d send completions after the last, first %v", s.x.name, s.y.name, len(wcs), wcs[0])
	}
	d := 0
	for _, g := range s.got {
		if g {
			d++
		}
	}
	return d, nil
}

func (s *udStream) teardown() error {
	if err := destroyAll([]*ib.QP{s.qa, s.qb}, []*ib.CQ{s.aS, s.aR, s.bS, s.bR}); err != nil {
		return err
	}
	return deregAll(s.src, s.recv)
}

// grhOnlyUncoveredDiffers reports whether an IPv4 header h that failed
// checkIPv4GRH differs from the one the sender wrote only in fields the ICRC
// does not cover: TOS, TTL and the header checksum.
func grhOnlyUncoveredDiffers(h []byte, src, dst netip.Addr, payload int, imm bool) bool {
	fixed := append([]byte(nil), h...)
	fixed[1], fixed[8] = 0, 64 // TOS as sent (rxe's default), TTL 64
	fixed[10], fixed[11] = 0, 0
	sum := header.IPv4Checksum(fixed)
	binary.BigEndian.PutUint16(fixed[10:], sum)
	grh := append(make([]byte, 20), fixed...)
	return checkIPv4GRH(grh, src, dst, payload, imm) == nil
}
