package conform

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
)

// RoCEEnv is what the RoCE cases run against: the tester's wire and the peer's
// control channel.
type RoCEEnv struct {
	// Wire carries the tester's packets.
	Wire *Wire
	// Peer is the control channel; nil if the peer offers none (every case that
	// needs one is then not applicable).
	Peer Control
	// Hello is what the peer said about itself (nil without control).
	Hello *Hello
	// AnswerTimeout is how long, on the link's clock, the tester waits for an
	// answer the specification requires (default 200ms).
	AnswerTimeout time.Duration
	// Silence is how long no answer must come where the specification requires
	// none (default 100ms).
	Silence time.Duration

	nextQPN uint32
	nextPSN uint32
}

// NewRoCEEnv returns an environment on wire, asking peer (which may be nil) for
// its hello.
func NewRoCEEnv(ctx context.Context, wire *Wire, peer Control) (*RoCEEnv, error) {
	h, err := peerHello(ctx, peer, "")
	if err != nil {
		return nil, err
	}
	return &RoCEEnv{Wire: wire, Peer: peer, Hello: h, nextQPN: 0xc0de00, nextPSN: 0x10000}, nil
}

func (e *RoCEEnv) answerTimeout() time.Duration {
	return orDefault(e.AnswerTimeout, 200*time.Millisecond)
}

func (e *RoCEEnv) silence() time.Duration {
	return orDefault(e.Silence, 100*time.Millisecond)
}

// rt is one run of a case.
type rt struct {
	e    *RoCEEnv
	ctx  context.Context
	qpn  uint32 // the tester's QPN for this run
	note string // what a pass reports
	err  error  // the first error sending a packet
}

// run runs body as one case needing the control operations ops, and turns its
// result into a verdict. Whatever the case created on the peer is reset after.
func (e *RoCEEnv) run(ctx context.Context, ops []string, body func(t *rt) error) Verdict {
	if v, lacks := peerLacks(e.Peer, e.Hello, ops); lacks {
		return v
	}
	t := &rt{e: e, ctx: ctx, qpn: e.nextQPN}
	e.nextQPN = (e.nextQPN + 0x11) & ib.QPNMask
	defer func() {
		e.Peer.Reset(context.WithoutCancel(ctx))
		e.Wire.Discard(ToQP(t.qpn))
	}()
	err := body(t)
	if t.err != nil {
		err = fmt.Errorf("sending: %w", t.err)
	}
	if err != nil && ctx.Err() != nil && !errors.As(err, new(*Mismatch)) {
		err = fmt.Errorf("%w (case aborted: %v)", err, ctx.Err())
	}
	return verdictOf(err, t.note)
}

// needs are the control operations of the cases.
var (
	needsRC     = []string{OpCreateQP, OpRegMR}
	needsRecv   = []string{OpCreateQP, OpRegMR, OpPostRecv, OpPollCQ}
	needsMem    = []string{OpCreateQP, OpRegMR, OpReadMR, OpWriteMR}
	needsState  = []string{OpCreateQP, OpRegMR, OpQueryQP}
	needsSender = []string{OpCreateQP, OpRegMR, OpPostSend, OpPollCQ}
)

// psn returns a fresh starting PSN, different for every connection and close to
// the 2^24 wrap for some, so that PSN arithmetic is exercised.
func (e *RoCEEnv) psn() uint32 {
	p := e.nextPSN
	e.nextPSN = (e.nextPSN*7 + 0x3b3b01) & ib.PSNMask
	return p
}

// rcOpts are the peer QP's attributes for one RC connection.
type rcOpts struct {
	access      []string // QP remote rights (default all three)
	mrAccess    []string // region rights (default all three)
	mrLen       int      // region length (default 16 KiB)
	fill        uint8    // region fill byte
	recvs       int      // receives posted (each recvLen bytes from offset 0)
	recvLen     int      // default 4096
	minRNRTimer uint8    // default 14
	timeout     uint8    // default 0 (infinite) unless set
	rnrRetry    uint8    // default 7
	retryCnt    uint8    // default 7
}

var allRights = []string{AccessRemoteWrite, AccessRemoteRead, AccessRemoteAtomic}

// rcConn is an RC QP on the peer connected to the tester's QP.
type rcConn struct {
	t    *rt
	qp   *QPInfo
	mr   *MRInfo
	mtu  int
	psn  uint32 // the tester's next request PSN (the peer's expected PSN)
	rpsn uint32 // the peer's first request PSN
	opts rcOpts
}

// rc creates an RC QP on the peer, connected to the tester's QP, and a region.
func (t *rt) rc(o rcOpts) (*rcConn, error) {
	if o.access == nil {
		o.access = allRights
	}
	if o.mrAccess == nil {
		o.mrAccess = allRights
	}
	if o.mrLen == 0 {
		o.mrLen = 16384
	}
	if o.recvLen == 0 {
		o.recvLen = 4096
	}
	if o.minRNRTimer == 0 {
		o.minRNRTimer = 14
	}
	if o.rnrRetry == 0 {
		o.rnrRetry = 7
	}
	if o.retryCnt == 0 {
		o.retryCnt = 7
	}
	c := &rcConn{t: t, psn: t.e.psn(), rpsn: t.e.psn(), opts: o}
	q, err := t.e.Peer.CreateQP(t.ctx, QPSpec{Type: "rc", RemoteIP: t.e.Wire.LocalIP().String(), RemoteQPN: t.qpn,
		RQPSN: c.psn, SQPSN: c.rpsn, Access: o.access, MinRNRTimer: o.minRNRTimer, Timeout: o.timeout,
		RetryCnt: o.retryCnt, RNRRetry: o.rnrRetry, MaxRdAtomic: 4, MaxDestRdAtomic: 4})
	if err != nil {
		return nil, err
	}
	c.qp, c.mtu = q, q.PathMTU
	if c.mtu == 0 {
		c.mtu = t.e.Hello.PathMTU
	}
	if c.mr, err = t.e.Peer.RegMR(t.ctx, MRSpec{Length: o.mrLen, Access: o.mrAccess, Fill: o.fill}); err != nil {
		return nil, err
	}
	if o.recvs > 0 {
		if err := c.postRecv(o.recvs, 0); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// postRecv posts n receives of opts.recvLen bytes at the end of the region,
// WR IDs from wrid on.
func (c *rcConn) postRecv(n int, wrid uint64) error {
	off := c.mr.Length - n*c.opts.recvLen
	if off < 0 {
		return fmt.Errorf("region of %d bytes holds no %d receives of %d", c.mr.Length, n, c.opts.recvLen)
	}
	return c.t.e.Peer.PostRecv(c.t.ctx, RecvSpec{QPN: c.qp.QPN, MR: c.mr.MR, Offset: off, Length: c.opts.recvLen,
		Count: n, WRID: wrid})
}

// fields returns headers for a request with opcode op at psn.
func (c *rcConn) fields(op ib.Opcode, psn uint32, ackReq bool) ib.PacketFields {
	return ib.PacketFields{BTH: ib.BTHFields{Opcode: op, PKey: c.qp.PKey, DestQP: c.qp.QPN, PSN: psn & ib.PSNMask, AckReq: ackReq}}
}

// pkt returns a request packet.
func (c *rcConn) pkt(op ib.Opcode, psn uint32, ackReq bool, payload []byte) *Packet {
	return NewPacket(c.fields(op, psn, ackReq), payload)
}

// write returns an RDMA WRITE Only of data to offset off of the region.
func (c *rcConn) write(psn uint32, off int, data []byte) *Packet {
	p := c.pkt(ib.OpcodeRCRDMAWriteOnly, psn, true, data)
	p.Fields.RETH = ib.RETHFields{VA: c.mr.VA + uint64(off), RKey: c.mr.RKey, DMALen: uint32(len(data))}
	return p
}

// read returns an RDMA READ request of n bytes at offset off.
func (c *rcConn) read(psn uint32, off, n int) *Packet {
	p := c.pkt(ib.OpcodeRCRDMAReadRequest, psn, true, nil)
	p.Fields.RETH = ib.RETHFields{VA: c.mr.VA + uint64(off), RKey: c.mr.RKey, DMALen: uint32(n)}
	return p
}

// atomic returns a FetchAdd (swap is the addend) or CmpSwap at offset off.
func (c *rcConn) atomic(op ib.Opcode, psn uint32, off int, swapAdd, compare uint64) *Packet {
	p := c.pkt(op, psn, true, nil)
	p.Fields.AtomicETH = ib.AtomicETHFields{VA: c.mr.VA + uint64(off), RKey: c.mr.RKey, SwapAdd: swapAdd, Compare: compare}
	return p
}

// ack returns an Acknowledge from the tester (as responder) to the peer.
func (c *rcConn) ack(psn uint32, syn ib.AETHSyndrome, msn uint32) *Packet {
	f := c.fields(ib.OpcodeRCAcknowledge, psn, false)
	f.AETH = ib.AETHFields{Syndrome: syn, MSN: msn}
	return NewPacket(f, nil)
}

// send sends p. An error is kept and fails the case when it ends.
func (t *rt) send(p *Packet) (time.Time, error) {
	at, _, err := t.e.Wire.Send(p)
	if err != nil && t.err == nil {
		t.err = err
	}
	return at, err
}

// next returns the next packet to the tester's QP, waiting until deadline.
func (t *rt) next(deadline time.Time) (*Captured, error) {
	c, err := t.e.Wire.Next(deadline, ToQP(t.qpn))
	if err != nil {
		return nil, err
	}
	if c.Err != nil {
		return c, mismatch([][]byte{c.IB}, "the peer sent a packet that does not decode: %v", c.Err)
	}
	if !c.ICRCOK {
		return c, mismatch([][]byte{c.IB}, "the peer sent %s with an ICRC that does not verify", describe(c))
	}
	return c, nil
}

// expect returns the next packet to the tester's QP within the answer timeout;
// what names the answer expected.
func (t *rt) expect(what string) (*Captured, error) {
	c, err := t.next(t.e.Wire.Now().Add(t.e.answerTimeout()))
	if errors.Is(err, ErrTimeout) {
		return nil, mismatch(nil, "no answer within %v (expected %s)", t.e.answerTimeout(), what)
	}
	return c, err
}

// silence checks that no packet comes to the tester's QP for the silence period.
func (t *rt) silence(why string) error {
	c, err := t.next(t.e.Wire.Now().Add(t.e.silence()))
	switch {
	case errors.Is(err, ErrTimeout):
		return nil
	case err != nil:
		return err
	}
	return mismatch([][]byte{c.IB}, "expected no answer (%s), got %s", why, describe(c))
}

// wait lets time pass, keeping what arrives.
func (t *rt) wait(d time.Duration) {
	deadline := t.e.Wire.Now().Add(d)
	t.e.Wire.Next(deadline, func(*Captured) bool { return false })
}

// describe summarizes a captured packet: "RC ACKNOWLEDGE PSN 0x000102 NAK remote
// access error MSN 0".
func describe(c *Captured) string {
	if c == nil {
		return "nothing"
	}
	if c.Err != nil || len(c.Pkt.BTH) == 0 {
		return fmt.Sprintf("an undecodable packet (%v)", c.Err)
	}
	p := &c.Pkt
	var b strings.Builder
	fmt.Fprintf(&b, "%s PSN 0x%06x", p.Opcode(), p.BTH.PSN())
	if p.AETH != nil {
		fmt.Fprintf(&b, " %s MSN %d", p.AETH.Syndrome(), p.AETH.MSN())
	}
	if p.AtomicAckETH != nil {
		fmt.Fprintf(&b, " orig 0x%x", p.AtomicAckETH.OrigData())
	}
	if p.RETH != nil {
		fmt.Fprintf(&b, " VA 0x%x len %d", p.RETH.VA(), p.RETH.DMALen())
	}
	if p.Payload != nil {
		fmt.Fprintf(&b, " payload %d", len(p.Payload))
	}
	return b.String()
}

// want describes an expected acknowledgement for messages.
func wantAck(kind ib.AETHKind, value uint8, psn uint32) string {
	switch kind {
	case ib.AETHKindNAK:
		return fmt.Sprintf("Acknowledge PSN 0x%06x NAK %s", psn, ib.NAKCode(value))
	case ib.AETHKindRNRNAK:
		return fmt.Sprintf("Acknowledge PSN 0x%06x RNR NAK timer %d", psn, value)
	}
	return fmt.Sprintf("Acknowledge PSN 0x%06x ACK", psn)
}

// isAck checks that c is an Acknowledge of kind at psn; for NAKs and RNR NAKs
// value is the NAK code or the timer.
func isAck(c *Captured, kind ib.AETHKind, value uint8, psn uint32) error {
	p := &c.Pkt
	want := wantAck(kind, value, psn)
	seen := [][]byte{c.IB}
	if p.Opcode() != ib.OpcodeRCAcknowledge {
		return mismatch(seen, "got %s, want %s", describe(c), want)
	}
	syn := p.AETH.Syndrome()
	if syn.Kind() != kind || (kind != ib.AETHKindACK && syn.Value() != value) {
		return mismatch(seen, "got %s, want %s", describe(c), want)
	}
	if p.BTH.PSN() != psn&ib.PSNMask {
		return mismatch(seen, "got %s: PSN 0x%06x, want 0x%06x", describe(c), p.BTH.PSN(), psn&ib.PSNMask)
	}
	return nil
}

// expectAck waits for an Acknowledge of kind at psn with msn (msn < 0: any).
func (t *rt) expectAck(kind ib.AETHKind, value uint8, psn uint32, msn int) (*Captured, error) {
	c, err := t.expect(wantAck(kind, value, psn))
	if err != nil {
		return c, err
	}
	if err := isAck(c, kind, value, psn); err != nil {
		return c, err
	}
	if msn >= 0 && c.Pkt.AETH.MSN() != uint32(msn) {
		return c, mismatch([][]byte{c.IB}, "got %s: MSN %d, want %d", describe(c), c.Pkt.AETH.MSN(), msn)
	}
	return c, nil
}

// sendAcked sends p and waits for its ACK at psn with msn (msn < 0: any): the
// step most RC cases take for a request the peer must execute.
func (t *rt) sendAcked(p *Packet, psn uint32, msn int) error {
	t.send(p)
	_, err := t.expectAck(ib.AETHKindACK, 0, psn, msn)
	return err
}

// expectNAK waits for a NAK with code at psn.
func (t *rt) expectNAK(code ib.NAKCode, psn uint32) (*Captured, error) {
	return t.expectAck(ib.AETHKindNAK, uint8(code), psn, -1)
}

// expectState checks the peer QP's state. A peer that cannot report it
// (ErrUnobservable) is probed on the wire instead for the error state: a QP in
// ERR answers nothing (IBTA Vol. 1 10.3.1: an Error-state QP discards what it
// receives), while a live responder answers a SEND Only at its expected PSN with
// an ACK or, lacking a receive, an RNR NAK.
func (c *rcConn) expectState(state string) error {
	st, err := c.t.e.Peer.QueryQP(c.t.ctx, c.qp.QPN)
	if errors.Is(err, ErrUnobservable) && state == "ERR" {
		c.t.send(c.pkt(ib.OpcodeRCSendOnly, c.psn, true, pattern(8, 0x77)))
		return c.t.silence("a QP in the error state answers nothing (state probed on the wire)")
	}
	if err != nil {
		return err
	}
	if st.State != state {
		return mismatch(nil, "the peer's QP is in state %s, want %s", st.State, state)
	}
	return nil
}

// completions polls the peer QP's receive (recv) or send CQ.
func (c *rcConn) completions(recv bool) ([]Completion, error) {
	return c.t.e.Peer.PollCQ(c.t.ctx, PollArgs{QPN: c.qp.QPN, Recv: recv})
}

// expectCompletions checks that the CQ holds exactly n completions, all with
// status, and returns them.
func (c *rcConn) expectCompletions(recv bool, n int, status string) ([]Completion, error) {
	wcs, err := c.completions(recv)
	if err != nil {
		return nil, err
	}
	which := "send"
	if recv {
		which = "receive"
	}
	if len(wcs) != n {
		return wcs, mismatch(nil, "the peer's %s CQ holds %d completions %v, want %d", which, len(wcs), wcs, n)
	}
	for _, wc := range wcs {
		if wc.Status != status {
			return wcs, mismatch(nil, "the peer's %s completion %+v has status %s, want %s", which, wc, wc.Status, status)
		}
	}
	return wcs, nil
}

// order is the peer's byte order for atomic operands.
func (t *rt) order() binary.ByteOrder {
	if t.e.Hello != nil && t.e.Hello.ByteOrder == "big" {
		return binary.BigEndian
	}
	return binary.LittleEndian
}

// pattern returns n bytes of a recognizable pattern starting at seed.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7) + byte(i>>8)
	}
	return b
}

// rcReadable makes an RC connection whose region holds, at off, two MTUs and
// extra bytes of pattern seed: what a READ answered in several packets reads.
// It returns the connection and those bytes.
func (t *rt) rcReadable(off, extra int, seed byte) (*rcConn, []byte, error) {
	c, err := t.rc(rcOpts{})
	if err != nil {
		return nil, nil, err
	}
	data := pattern(2*c.mtu+extra, seed)
	if err := c.setMem(off, data); err != nil {
		return nil, nil, err
	}
	return c, data, nil
}

// setMem writes data into the peer's region at off.
func (c *rcConn) setMem(off int, data []byte) error {
	return c.t.e.Peer.WriteMR(c.t.ctx, c.mr.MR, off, data)
}

// expectMem checks the peer's region bytes at off.
func (c *rcConn) expectMem(off int, want []byte, what string) error {
	return expectMem(c.t.ctx, c.t.e.Peer, c.mr.MR, off, want, what)
}

// expectMem reads region mr of peer at off and compares it with want.
func expectMem(ctx context.Context, peer Control, mr, off int, want []byte, what string) error {
	got, err := peer.ReadMR(ctx, mr, off, len(want))
	if err != nil {
		return err
	}
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		lo := max(0, i-4)
		return mismatch([][]byte{got}, "the peer's memory differs at +%d: %x..., want %x... (%s)",
			off+lo, clip(got[lo:]), clip(want[min(lo, len(want)):]), what)
	}
	return nil
}

func clip(b []byte) []byte {
	if len(b) > 32 {
		return b[:32]
	}
	return b
}
