package conform

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/softrdma/softrdma/iwarp"
)

// IWARPEnv is what the iWARP cases run against: the peer's control channel and a
// way to open TCP connections to the listeners it creates. The tester speaks MPA,
// DDP and RDMAP itself, octet by octet, on those connections.
type IWARPEnv struct {
	// Peer is the control channel; nil if the peer offers none.
	Peer Control
	// Hello is what the peer said about itself.
	Hello *Hello
	// Dial opens a TCP connection (default: net.Dialer).
	Dial func(ctx context.Context, addr string) (net.Conn, error)
	// AnswerTimeout is how long the tester waits for an answer (default 2s).
	AnswerTimeout time.Duration
	// Silence is how long no answer must come where none is due (default 100ms).
	Silence time.Duration
}

// NewIWARPEnv returns an environment asking peer (which may be nil) for its hello.
func NewIWARPEnv(ctx context.Context, peer Control) (*IWARPEnv, error) {
	h, err := peerHello(ctx, peer, "iwarp")
	if err != nil {
		return nil, err
	}
	return &IWARPEnv{Peer: peer, Hello: h}, nil
}

func (e *IWARPEnv) answerTimeout() time.Duration {
	return orDefault(e.AnswerTimeout, 2*time.Second)
}

func (e *IWARPEnv) silence() time.Duration {
	return orDefault(e.Silence, 100*time.Millisecond)
}

// iwt is one run of an iWARP case.
type iwt struct {
	e    *IWARPEnv
	ctx  context.Context
	note string
	err  error // the first error writing to a connection
	cs   []*iwConn
}

func (e *IWARPEnv) run(ctx context.Context, ops []string, body func(t *iwt) error) Verdict {
	if v, lacks := peerLacks(e.Peer, e.Hello, ops); lacks {
		return v
	}
	t := &iwt{e: e, ctx: ctx}
	defer func() {
		for _, c := range t.cs {
			c.nc.Close()
		}
		e.Peer.Reset(context.WithoutCancel(ctx))
	}()
	err := body(t)
	if t.err != nil && err == nil {
		err = fmt.Errorf("writing: %w", t.err)
	}
	return verdictOf(err, t.note)
}

// iwOpts are the peer QP's attributes for one iWARP connection.
type iwOpts struct {
	access   []string // QP and region rights (default all three)
	mrAccess []string // region rights (default access)
	mrLen    int      // default 16 KiB
	recvs    int      // receives posted before the connection, recvLen bytes each
	recvLen  int      // default 4096
	crc      string   // the peer's MPA CRC policy ("" accept)
}

// iwConn is the tester's end of an iWARP connection to a peer QP.
type iwConn struct {
	t    *iwt
	qp   *QPInfo
	mr   *MRInfo
	opts iwOpts
	nc   net.Conn
	br   *bufio.Reader
	crc  bool      // CRC negotiated
	msn  [3]uint32 // the next MSN the tester sends on each untagged queue
	rep  iwarp.MPAFrame
}

// dialQP creates a QP listening on the peer, and a region, and opens a TCP
// connection to it (no MPA yet).
func (t *iwt) dialQP(o iwOpts) (*iwConn, error) {
	if o.access == nil {
		o.access = allRights
	}
	if o.mrAccess == nil {
		o.mrAccess = o.access
	}
	if o.mrLen == 0 {
		o.mrLen = 16384
	}
	if o.recvLen == 0 {
		o.recvLen = 4096
	}
	c := &iwConn{t: t, opts: o, msn: [3]uint32{1, 1, 1}}
	q, err := t.e.Peer.CreateQP(t.ctx, QPSpec{Type: "rc", Access: o.access, MPACRC: o.crc, MaxRdAtomic: 4, MaxDestRdAtomic: 4})
	if err != nil {
		return nil, err
	}
	if q.ListenAddr == "" {
		return nil, errors.New("the peer's create_qp returned no listen_addr")
	}
	c.qp = q
	if c.mr, err = t.e.Peer.RegMR(t.ctx, MRSpec{Length: o.mrLen, Access: o.mrAccess}); err != nil {
		return nil, err
	}
	if o.recvs > 0 {
		if err := t.e.Peer.PostRecv(t.ctx, RecvSpec{QPN: q.QPN, MR: c.mr.MR, Offset: c.mr.Length - o.recvs*o.recvLen,
			Length: o.recvLen, Count: o.recvs}); err != nil {
			return nil, err
		}
	}
	dial := t.e.Dial
	if dial == nil {
		var d net.Dialer
		dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	nc, err := dial(t.ctx, q.ListenAddr)
	if err != nil {
		return nil, err
	}
	c.nc, c.br = nc, bufio.NewReaderSize(nc, 1<<16)
	t.cs = append(t.cs, c)
	return c, nil
}

// defaultRequest is the tester's usual MPA Request: revision 2 with the RFC 6581
// IRD/ORD words (IRD 4, ORD 4), CRC asked for, no markers.
func defaultRequest() iwarp.MPAFrameFields {
	pd := make([]byte, 4)
	w := iwarp.MPAv2IRDORD(pd)
	w.SetIRD(4)
	w.SetORD(4)
	return iwarp.MPAFrameFields{Request: true, CRC: true, Enhanced: true, Revision: iwarp.MPARevision2, PrivateData: pd}
}

// connect makes a connection with the default request and expects it accepted.
func (t *iwt) connect(o iwOpts) (*iwConn, error) {
	c, err := t.dialQP(o)
	if err != nil {
		return nil, err
	}
	req := defaultRequest()
	rep, err := c.handshake(req)
	if err != nil {
		return nil, err
	}
	if rep.Reject() {
		return nil, mismatch([][]byte{rep}, "the peer rejected a valid MPA Request: %q", rep.PrivateData())
	}
	return c, nil
}

// write writes b to the connection, keeping the first error.
func (c *iwConn) write(b []byte) error {
	c.nc.SetWriteDeadline(time.Now().Add(c.t.e.answerTimeout()))
	_, err := c.nc.Write(b)
	if err != nil && c.t.err == nil {
		c.t.err = err
	}
	return err
}

// handshake sends an MPA Request built from f and reads the Reply.
func (c *iwConn) handshake(f iwarp.MPAFrameFields) (iwarp.MPAFrame, error) {
	req, err := f.Append(nil)
	if err != nil {
		return nil, err
	}
	c.write(req)
	rep, err := c.readReply()
	if err != nil {
		return rep, err
	}
	c.rep = rep
	c.crc = f.CRC || rep.CRC()
	return rep, nil
}

// readReply reads an MPA Reply frame.
func (c *iwConn) readReply() (iwarp.MPAFrame, error) {
	c.nc.SetReadDeadline(time.Now().Add(c.t.e.answerTimeout()))
	hdr := make([]byte, iwarp.MPAFrameHeaderLen)
	if n, err := io.ReadFull(c.br, hdr); err != nil {
		return nil, mismatch([][]byte{hdr[:n]}, "no MPA Reply (%d octets, then %v)", n, err)
	}
	if string(hdr[:iwarp.MPAKeyLen]) != iwarp.MPAKeyReply {
		return nil, mismatch([][]byte{hdr}, "the answer to the MPA Request starts %q, not the Reply key %q",
			hdr[:iwarp.MPAKeyLen], iwarp.MPAKeyReply)
	}
	n := int(binary.BigEndian.Uint16(hdr[18:]))
	if n > iwarp.MPAMaxPrivateData {
		return nil, mismatch([][]byte{hdr}, "the MPA Reply's private data length %d > %d", n, iwarp.MPAMaxPrivateData)
	}
	frame := append(hdr, make([]byte, n)...)
	if _, err := io.ReadFull(c.br, frame[iwarp.MPAFrameHeaderLen:]); err != nil {
		return nil, mismatch([][]byte{frame}, "the MPA Reply is cut short: %v", err)
	}
	return iwarp.MPAFrame(frame), nil
}

// fpduOpts spoil an FPDU.
type fpduOpts struct {
	badCRC bool
}

// send frames a DDP segment (header fields h, then payload) in an FPDU and
// writes it.
func (c *iwConn) send(h iwarp.DDPFields, payload []byte, o fpduOpts) error {
	ulpdu := make([]byte, h.Len()+len(payload))
	if _, err := h.Encode(ulpdu); err != nil {
		return err
	}
	copy(ulpdu[h.Len():], payload)
	b, err := iwarp.AppendFPDU(nil, c.crc, ulpdu)
	if err != nil {
		return err
	}
	if o.badCRC {
		b[len(b)-1] ^= 0x01
	}
	return c.write(b)
}

// rdmapFields returns the DDP fields of an RDMAP message.
func rdmapFields(f iwarp.RDMAPFields) iwarp.DDPFields { return f.DDPFields() }

// sendMsg sends one Send segment on queue 0 with the next MSN (the MSN advances
// when last).
func (c *iwConn) sendMsg(payload []byte, mo uint32, last bool, o fpduOpts) error {
	h := rdmapFields(iwarp.RDMAPFields{Opcode: iwarp.OpSend, Last: last, MSN: c.msn[0], MO: mo})
	if last {
		c.msn[0]++
	}
	return c.send(h, payload, o)
}

// writeMsg sends one RDMA Write segment.
func (c *iwConn) writeMsg(stag uint32, to uint64, payload []byte, last bool) error {
	return c.send(rdmapFields(iwarp.RDMAPFields{Opcode: iwarp.OpWrite, Last: last, STag: stag, TO: to}), payload, fpduOpts{})
}

// readReq sends an RDMA Read Request for size octets of the source at srcSTag,
// srcTO into the tester's sinkSTag, sinkTO.
func (c *iwConn) readReq(sinkSTag uint32, sinkTO uint64, size uint32, srcSTag uint32, srcTO uint64) error {
	body := make([]byte, iwarp.ReadRequestLen)
	rr := iwarp.ReadRequestFields{SinkSTag: sinkSTag, SinkTO: sinkTO, Size: size, SourceSTag: srcSTag, SourceTO: srcTO}
	if _, err := rr.Encode(body); err != nil {
		return err
	}
	h := rdmapFields(iwarp.RDMAPFields{Opcode: iwarp.OpReadRequest, Last: true, MSN: c.msn[1]})
	c.msn[1]++
	return c.send(h, body, fpduOpts{})
}

// segment is one FPDU the peer sent, decoded.
type segment struct {
	raw   []byte // the whole FPDU, from ULPDU_Length through the CRC
	ddp   iwarp.DDP
	op    iwarp.Opcode
	data  []byte // the DDP payload
	term  iwarp.Terminate
	crcOK bool
}

// next reads the peer's next FPDU, waiting until deadline. A closed connection
// returns io.EOF; a timeout ErrTimeout.
func (c *iwConn) next(deadline time.Time) (*segment, error) {
	c.nc.SetReadDeadline(deadline)
	var lb [2]byte
	if _, err := io.ReadFull(c.br, lb[:]); err != nil {
		return nil, readErr(err)
	}
	n := int(binary.BigEndian.Uint16(lb[:]))
	total := iwarp.FPDULen(n)
	raw := make([]byte, total)
	copy(raw, lb[:])
	if _, err := io.ReadFull(c.br, raw[2:]); err != nil {
		return nil, mismatch([][]byte{raw}, "an FPDU of %d octets is cut short: %v", total, err)
	}
	f := iwarp.FPDU(raw)
	s := &segment{raw: raw, crcOK: !c.crc || f.VerifyCRC() == nil}
	if !c.crc && f.CRC() != 0 {
		s.crcOK = false
	}
	d, err := iwarp.ParseDDP(f.ULPDU())
	if err != nil {
		return s, mismatch([][]byte{raw}, "the peer sent an FPDU whose DDP segment does not decode: %v", err)
	}
	s.ddp, s.op, s.data = d, iwarp.RDMAP(d).Opcode(), d.Payload()
	if s.op == iwarp.OpTerminate && !d.Tagged() {
		if s.term, err = iwarp.ParseTerminate(s.data); err != nil {
			return s, mismatch([][]byte{raw}, "the peer's Terminate does not decode: %v", err)
		}
	}
	return s, nil
}

func readErr(err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return ErrTimeout
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		strings.Contains(err.Error(), "connection reset") {
		return io.EOF
	}
	return err
}

// expect returns the peer's next FPDU within the answer timeout, with a good CRC.
func (c *iwConn) expect(what string) (*segment, error) {
	s, err := c.next(time.Now().Add(c.t.e.answerTimeout()))
	switch {
	case errors.Is(err, ErrTimeout):
		return nil, mismatch(nil, "no FPDU within %v (expected %s)", c.t.e.answerTimeout(), what)
	case errors.Is(err, io.EOF):
		return nil, mismatch(nil, "the peer closed the connection (expected %s)", what)
	case err != nil:
		return s, err
	}
	if !s.crcOK {
		return s, mismatch([][]byte{s.raw}, "the peer's %s FPDU has a bad CRC (CRC negotiated: %v)", s.op, c.crc)
	}
	return s, nil
}

// describeSeg summarizes an FPDU: "Terminate DDP untagged buffer error: invalid
// QN" or "Read Response STag 0x1234 TO 0x500 L 1000 octets".
func describeSeg(s *segment) string {
	if s == nil {
		return "nothing"
	}
	if len(s.ddp) == 0 {
		return fmt.Sprintf("an FPDU of %d octets whose DDP segment does not decode", len(s.raw))
	}
	if s.term != nil {
		l, et := s.term.Layer(), s.term.EType()
		return fmt.Sprintf("Terminate %s, %s: %s", l, iwarp.TerminateETypeName(l, et), iwarp.TerminateErrorName(l, et, s.term.ErrorCode()))
	}
	if s.ddp.Tagged() {
		return fmt.Sprintf("%s STag 0x%x TO 0x%x L=%v %d octets", s.op, s.ddp.STag(), s.ddp.TO(), s.ddp.Last(), len(s.data))
	}
	return fmt.Sprintf("%s QN %d MSN %d MO %d L=%v %d octets", s.op, s.ddp.QN(), s.ddp.MSN(), s.ddp.MO(), s.ddp.Last(), len(s.data))
}

// expectTerminate expects a Terminate with layer, etype and code.
func (c *iwConn) expectTerminate(layer iwarp.TerminateLayer, etype, code uint8) (*segment, error) {
	want := fmt.Sprintf("%s, %s: %s", layer, iwarp.TerminateETypeName(layer, etype), iwarp.TerminateErrorName(layer, etype, code))
	s, err := c.expect("a Terminate: " + want)
	if err != nil {
		return s, err
	}
	if s.term == nil {
		return s, mismatch([][]byte{s.raw}, "got %s, want a Terminate: %s", describeSeg(s), want)
	}
	if s.term.Layer() != layer || s.term.EType() != etype || s.term.ErrorCode() != code {
		return s, mismatch([][]byte{s.raw}, "got %s (layer %d etype %d code 0x%02x), want %s (layer %d etype %d code 0x%02x)",
			describeSeg(s), s.term.Layer(), s.term.EType(), s.term.ErrorCode(), want, layer, etype, code)
	}
	if s.ddp.QN() != iwarp.QueueTerminate || !s.ddp.Last() {
		return s, mismatch([][]byte{s.raw}, "the Terminate went on queue %d (L=%v), want queue 2 with L set", s.ddp.QN(), s.ddp.Last())
	}
	return s, nil
}

// expectClosed checks that the peer closes the connection (after anything it
// still sends, which is returned) within the answer timeout.
func (c *iwConn) expectClosed(why string) error {
	deadline := time.Now().Add(c.t.e.answerTimeout())
	for {
		s, err := c.next(deadline)
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case errors.Is(err, ErrTimeout):
			return mismatch(nil, "the peer kept the connection open for %v (%s)", c.t.e.answerTimeout(), why)
		case err != nil:
			var m *Mismatch
			if errors.As(err, &m) {
				return nil // a cut FPDU: the connection ended
			}
			return err
		}
		_ = s // late FPDUs before the close are allowed
	}
}

// silence checks that the peer sends nothing for the silence period.
func (c *iwConn) silence(why string) error {
	s, err := c.next(time.Now().Add(c.t.e.silence()))
	switch {
	case errors.Is(err, ErrTimeout):
		return nil
	case errors.Is(err, io.EOF):
		return mismatch(nil, "the peer closed the connection (%s)", why)
	case err != nil:
		return err
	}
	return mismatch([][]byte{s.raw}, "expected nothing (%s), got %s", why, describeSeg(s))
}

// expectState checks the peer QP's state.
func (c *iwConn) expectState(state string) error {
	deadline := time.Now().Add(c.t.e.answerTimeout())
	for {
		st, err := c.t.e.Peer.QueryQP(c.t.ctx, c.qp.QPN)
		if err != nil {
			return err
		}
		if st.State == state {
			return nil
		}
		if time.Now().After(deadline) {
			return mismatch(nil, "the peer's QP is in state %s, want %s", st.State, state)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// awaitRecv waits until the peer's receive CQ holds n completions, all with status.
func (c *iwConn) awaitRecv(n int, status string) ([]Completion, error) {
	var all []Completion
	deadline := time.Now().Add(c.t.e.answerTimeout())
	for {
		wcs, err := c.t.e.Peer.PollCQ(c.t.ctx, PollArgs{QPN: c.qp.QPN, Recv: true})
		if err != nil {
			return all, err
		}
		all = append(all, wcs...)
		if len(all) >= n || time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	if len(all) != n {
		return all, mismatch(nil, "the peer's receive CQ holds %d completions %+v, want %d", len(all), all, n)
	}
	for _, wc := range all {
		if wc.Status != status {
			return all, mismatch(nil, "the peer's receive completion %+v has status %s, want %s", wc, wc.Status, status)
		}
	}
	return all, nil
}

// noDelivery checks that no receive completion with success appears (flushes after
// an error are fine).
func (c *iwConn) noDelivery() error {
	wcs, err := c.t.e.Peer.PollCQ(c.t.ctx, PollArgs{QPN: c.qp.QPN, Recv: true})
	if err != nil {
		return err
	}
	for _, wc := range wcs {
		if wc.Status == "IBV_WC_SUCCESS" {
			return mismatch(nil, "the spoiled message was delivered: %+v", wc)
		}
	}
	return nil
}

// expectMem checks the peer's region bytes at off.
func (c *iwConn) expectMem(off int, want []byte, what string) error {
	return expectMem(c.t.ctx, c.t.e.Peer, c.mr.MR, off, want, what)
}
