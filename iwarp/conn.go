package iwarp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
)

// DeviceConfig configures an iWARP device.
type DeviceConfig struct {
	// Context configures the verbs engine (limits, seed). ExternalQPs is forced
	// on: every QP of the device is run by this package.
	Context ib.ContextConfig
}

// Device is a soft-iWARP device: a verbs engine (ibtransport.Context) whose RC QPs
// speak RDMAP/DDP/MPA over ordinary TCP connections, made with Dial and Listen.
// The PD, MR, MW, CQ, SRQ and QP objects, work requests and completions are the
// same as on a RoCE device, so application code is the same for both transports.
type Device struct {
	ctx *ib.Context
}

// Open returns a device with the configuration cfg.
func Open(cfg DeviceConfig) (*Device, error) {
	cfg.Context.ExternalQPs = true
	return &Device{ctx: ib.NewContext(cfg.Context)}, nil
}

// Context returns the device's verbs engine.
func (d *Device) Context() *ib.Context { return d.ctx }

// Conn is the iWARP connection of one QP: a TCP connection carrying an RDMAP
// stream, with a reader and a writer goroutine. It ends when either side closes or
// terminates it, or the QP enters the error state; the QP is then in the error
// state with every outstanding WR flushed.
type Conn struct {
	nc        net.Conn
	tcp       *net.TCPConn
	qp        *ib.QP
	wire      *ib.Wire
	neg       Negotiated
	peerPD    []byte
	params    ConnParams
	initiator bool
	maxRecv   int

	tx       txState // writer goroutine
	reqID    uint32  // writer: last Atomic Request identifier
	rx       rxState // reader goroutine
	rq       [4]rxQueue
	awaitRTR RTRFlags // reader: the RTR the responder still waits for
	rtrGate  chan struct{}
	// rtrAnswered is closed when the initiator's Read RTR is answered
	// (rtrwait.go); kickWrite asks the writer for a zero-length Write.
	rtrAnswered chan struct{}
	kickWrite   atomic.Bool

	writeLen, lastWriteLen uint64             // reader: octets of the Write in progress / the last one
	wroteN                 uint64             // reader: placeWrite's segment length, for wrote
	wroteLast              bool               // reader: placeWrite's segment ends its message
	wroteTarget            [2][]byte          // reader: placeWrite's target: the region, then wroteTail
	wroteTail              [writeTailLen]byte // reader: a WRITE segment's last octets, placed by wrote
	wroteSTag              uint32             // reader: placeWrite's STag, for wrote
	wroteTailTO            uint64             // reader: the tagged offset of wroteTail's first octet
	wroteEffect            func() error       // reader: c.wrote, bound in newConn
	fx                     rxEffect           // reader: the arguments of the effects below
	sendEffect             func() error       // reader: c.sendPlaced, bound in newConn
	readRespEffect         func() error       // reader: c.readResponsePlaced, bound in newConn
	headerEffect           func() error       // reader: c.headerOnly, bound in newConn
	immEffect              func() error       // reader: c.immediatePlaced, bound in newConn
	atomicRespEffect       func() error       // reader: c.atomicResponsePlaced, bound in newConn
	sinkBufs, recvBufs     [][]byte

	// sends are WQEs the writer took from the engine in one Wire.NextSends
	// call; [sendsHead, sendsN) are still to frame. It grows (to
	// txSendBatch) only while NextSends fills it: a QP with one WR in flight
	// at a time keeps one SendWork.
	sends             []ib.SendWork
	sendsHead, sendsN int

	mu             sync.Mutex
	orq            []outReq // outstanding Read and Atomic Requests, oldest first
	orqHead        int
	respQ          []inResp // Read and Atomic Responses to send
	respHead       int
	irdUsed        int
	rtrReadPending bool
	err            error
	term           *TerminateFields
	termQueued     bool          // fail queued a Terminate for the writer
	termWritten    chan struct{} // closed by the writer once it has written it (or given up)

	cnt connCounters

	failed      atomic.Bool
	aborted     atomic.Bool // Abort: the writer must not send FIN before the RST
	interrupted atomic.Bool // the engine interrupted the reader's placement (rx.go)
	kick        chan struct{}
	done        chan struct{}
	running     atomic.Int32 // reader and writer still running (start, exited)
}

// outReq is an outstanding Read or Atomic Request of this side.
type outReq struct {
	id       uint64
	atomic   bool
	reqID    uint32
	sinkSTag uint32
	sinkTO   uint64
	length   uint64
	placed   uint64
}

// rxEffect holds what the receive path's effect of the FPDU being read needs
// once the CRC has been checked (the reader reads one FPDU at a time).
type rxEffect struct {
	n    uint64 // payload octets of the segment
	last bool   // the segment ends its message
	op   Opcode // Send, Immediate Data: its opcode
	inv  uint32 // Send with Invalidate: the STag
	imm  uint32 // Immediate Data: the value
	id   uint64 // Read Response, Atomic Response: the WR
	orig uint64 // Atomic Response: the original value
	h    *rxHdr // Read Request, Atomic Request, Terminate: the headers
}

// connCounters are the connection's part of its QP's QPCounters, counted by the
// reader and the writer without the engine's lock and added by QP.Counters
// (ibtransport.Wire.SetCounterSource).
type connCounters struct {
	packetsOut, bytesOut, packetsIn, bytesIn atomic.Uint64
	terminatesSent, terminatesReceived       atomic.Uint64
}

// addTo adds the counts to q (called by the engine, with its lock held).
func (k *connCounters) addTo(q *ib.QPCounters) {
	q.PacketsOut += k.packetsOut.Load()
	q.BytesOut += k.bytesOut.Load()
	q.PacketsIn += k.packetsIn.Load()
	q.BytesIn += k.bytesIn.Load()
	q.TerminatesSent += k.terminatesSent.Load()
	q.TerminatesReceived += k.terminatesReceived.Load()
}

// inResp is a Read or Atomic Response this side owes the peer.
type inResp struct {
	atomic           bool
	reqID            uint32
	orig             uint64
	sinkSTag         uint32
	sinkTO           uint64
	srcSTag          uint32
	srcTO, size, off uint64
}

var (
	errLocalClose = errors.New("closed")
	errAbort      = errors.New("aborted")
)

// QP returns the connection's queue pair.
func (c *Conn) QP() *ib.QP { return c.qp }

// Negotiated returns what the MPA exchange settled.
func (c *Conn) Negotiated() Negotiated { return c.neg }

// PeerPrivateData returns the private data of the peer's start frame (without the
// RFC 6581 IRD/ORD words).
func (c *Conn) PeerPrivateData() []byte { return c.peerPD }

// LocalAddr returns the local TCP address.
func (c *Conn) LocalAddr() net.Addr { return c.nc.LocalAddr() }

// RemoteAddr returns the peer's TCP address.
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// Done returns a channel that is closed when the connection has ended and its
// goroutines have exited.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err returns why the connection ended: nil while it runs and after Close or
// Abort; ErrPeerClosed after the peer's orderly close; a *TerminateError after a
// Terminate either way; ErrQPError when the QP entered the error state; an
// ErrConnectionLost error when TCP failed.
func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == errLocalClose || c.err == errAbort {
		return nil
	}
	return c.err
}

// Close ends the connection in an orderly way (RFC 5040 §6.2.1 graceful
// termination): the QP moves to the error state, flushing its outstanding WRs,
// the writer stops and sends FIN, and Close waits (at most the linger time) for the
// peer to close its side.
func (c *Conn) Close() error {
	if c.fail(errLocalClose, nil) {
		c.wire.SetError(0, false)
	}
	t := time.NewTimer(c.params.linger() + time.Second)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		c.nc.Close()
		<-c.done
	}
	return nil
}

// Abort ends the connection abortively: the QP moves to the error state and the
// TCP connection is reset (RST). A Terminate already queued for an error this
// side found is sent first: Abort waits (at most the linger time) until the
// socket has transmitted it, since a reset discards what the socket has not
// sent (RFC 5040 §6.2.1: the Terminate precedes the stream's end).
func (c *Conn) Abort() error {
	c.aborted.Store(true)
	if c.fail(errAbort, nil) {
		c.wire.SetError(0, false)
	}
	c.flushTerminate()
	if c.tcp != nil {
		c.tcp.SetLinger(0)
	}
	c.nc.Close()
	<-c.done
	return nil
}

// abortWaitHook, if set (by tests, export_test.go), is called when Abort starts
// waiting for a queued Terminate.
var abortWaitHook func()

// flushTerminate waits, at most the linger time, until a queued Terminate has
// been written and the socket has transmitted every octet of it.
func (c *Conn) flushTerminate() {
	c.mu.Lock()
	queued := c.termQueued
	c.mu.Unlock()
	if !queued {
		return
	}
	d := c.params.linger()
	deadline := time.Now().Add(d)
	t := time.NewTimer(d)
	defer t.Stop()
	if abortWaitHook != nil {
		abortWaitHook()
	}
	select {
	case <-c.termWritten:
	case <-c.done:
		return
	case <-t.C:
		return
	}
	if c.tcp == nil {
		return
	}
	for time.Now().Before(deadline) {
		if n, err := unsentLen(c.tcp); err != nil || n == 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// fail records why the connection ends (the first caller wins and gets true),
// with an optional Terminate for the writer to send first, and arms the linger
// deadlines so that nothing blocks for longer.
func (c *Conn) fail(err error, term *TerminateFields) bool {
	c.mu.Lock()
	if c.failed.Load() {
		c.mu.Unlock()
		return false
	}
	c.err, c.term, c.termQueued = err, term, term != nil
	c.failed.Store(true)
	c.mu.Unlock()
	c.nc.SetDeadline(time.Now().Add(c.params.linger()))
	if c.interrupted.Load() {
		// A Dereg waits for the reader: keep its read interrupted.
		c.nc.SetReadDeadline(time.Unix(1, 0))
	}
	c.kickWriter()
	return true
}

// localError terminates the connection for an error this side found: Terminate
// to the peer (with the offending segment's headers when known, RFC 5040 §4.8),
// the QP to the error state with the receive WQE in use completed with the error's
// status, and an asynchronous event.
func (c *Conn) localError(re *rxError, h *rxHdr) {
	tf := re.term
	if h != nil && h.ddp != nil {
		tf.SegmentLengthValid = true
		tf.DDPSegmentLength = uint16(h.ulpdu)
		tf.DDPHeader = append([]byte(nil), h.ddp...)
		if re.rdma && len(h.opHdr) == ReadRequestLen {
			tf.RDMAHeader = append([]byte(nil), h.opHdr...)
		}
	}
	te := &TerminateError{Local: true, Layer: tf.Layer, EType: tf.EType, Code: tf.ErrorCode, Err: re.err}
	if !c.fail(te, &tf) {
		return
	}
	if re.status != 0 {
		c.wire.FailRecv(re.status, re.event, true)
	} else {
		c.wire.SetError(re.event, true)
	}
}

// lost ends the connection after an I/O failure.
func (c *Conn) lost(err error) {
	if c.fail(fmt.Errorf("%w: %w", ErrConnectionLost, err), nil) {
		c.wire.SetError(ib.EventQPFatal, true)
	}
}

func (c *Conn) kickWriter() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *Conn) addORQ(o outReq) {
	c.mu.Lock()
	c.orq = append(c.orq, o)
	c.mu.Unlock()
}

// closeWrite sends FIN (unless the connection is being reset): it closes the
// writing half of a connection that has one (TCP, a Unix socket, FuzzConnReceive's
// in-memory peer), so that the reader still drains what the peer sends, and
// closes any other.
func (c *Conn) closeWrite() {
	if c.aborted.Load() {
		return
	}
	if hc, ok := c.nc.(interface{ CloseWrite() error }); ok {
		hc.CloseWrite()
		return
	}
	c.nc.Close()
}

// observer returns the connection's StreamObserver, if any.
func observer(p *ConnParams, nc net.Conn) StreamObserver {
	if p.Observe == nil {
		return nil
	}
	return p.Observe(nc.LocalAddr(), nc.RemoteAddr())
}

// prepareQP checks that qp can be connected, attaches owner to it and moves it to
// INIT; it returns the IRD and ORD to offer.
func prepareQP(qp *ib.QP, p *ConnParams, owner *Conn) (w *ib.Wire, ird, ord int, err error) {
	if qp == nil || qp.Wire() == nil {
		return nil, 0, 0, fmt.Errorf("%w: not an external QP (create it on an iwarp.Device)", ErrBadQP)
	}
	w = qp.Wire()
	if err := w.Attach(owner); err != nil {
		return nil, 0, 0, fmt.Errorf("%w: %w", ErrBadQP, err)
	}
	switch st := qp.State(); st {
	case ib.QPStateReset:
		a := ib.QPAttr{QPState: ib.QPStateInit, Port: 1, AccessFlags: p.access()}
		if err := qp.Modify(&a, ib.QPAttrState|ib.QPAttrPKeyIndex|ib.QPAttrPort|ib.QPAttrAccessFlags); err != nil {
			w.Detach(owner)
			return nil, 0, 0, fmt.Errorf("%w: %w", ErrBadQP, err)
		}
	case ib.QPStateInit:
	default:
		w.Detach(owner)
		return nil, 0, 0, fmt.Errorf("%w: QP 0x%x is in %s, not RESET or INIT", ErrBadQP, qp.QPN(), st)
	}
	return w, depth(p.IRD, maxRdAtomic(qp)), depth(p.ORD, maxRdAtomic(qp)), nil
}

// maxRdAtomic returns the Context's bound on IRD and ORD.
func maxRdAtomic(qp *ib.QP) int { return qp.Wire().Context().Config().MaxRdAtomic }

// connectQP moves the QP to RTR and RTS with the negotiated IRD and ORD and
// installs the post check.
func (c *Conn) connectQP() error {
	qp := c.qp
	c.wire.SetPostCheck(postCheck(c.neg))
	a := ib.QPAttr{QPState: ib.QPStateRTR, PathMTU: c.wire.Context().Config().PortMTU, MaxDestRdAtomic: c.neg.IRD,
		AH: ib.AddressHandle{Opaque: c.nc.RemoteAddr()}}
	if err := qp.Modify(&a, ib.QPAttrState|ib.QPAttrAH|ib.QPAttrPathMTU|ib.QPAttrDestQPN|ib.QPAttrRQPSN|
		ib.QPAttrMaxDestRdAtomic|ib.QPAttrMinRNRTimer); err != nil {
		return err
	}
	a = ib.QPAttr{QPState: ib.QPStateRTS, MaxRdAtomic: c.neg.ORD}
	return qp.Modify(&a, ib.QPAttrState|ib.QPAttrSQPSN|ib.QPAttrTimeout|ib.QPAttrRetryCnt|ib.QPAttrRNRRetry|ib.QPAttrMaxRdAtomic)
}

// postCheck refuses the work requests iWARP, or this connection, cannot carry.
func postCheck(neg Negotiated) func(*ib.SendWR) error {
	return func(wr *ib.SendWR) error {
		switch wr.Opcode {
		case ib.WRSendWithImm:
			return fmt.Errorf("iwarp: %s has no iWARP form (RFC 7306 immediate data follows an RDMA WRITE): %w",
				wr.Opcode, ib.ErrInvalidArgument)
		case ib.WRFlush, ib.WRAtomicWrite:
			return fmt.Errorf("iwarp: %s is not an iWARP operation: %w", wr.Opcode, ib.ErrInvalidArgument)
		case ib.WRAtomicCmpAndSwp, ib.WRAtomicFetchAdd, ib.WRRDMAWriteWithImm:
			if !neg.Extensions {
				return fmt.Errorf("iwarp: %s needs the RFC 7306 extensions, which the peer did not offer: %w",
					wr.Opcode, ib.ErrInvalidArgument)
			}
		}
		return nil
	}
}

// newConn sets up a connection whose MPA exchange succeeded; start runs it.
func newConn(c *Conn, nc net.Conn, qp *ib.QP, w *ib.Wire, neg Negotiated, p ConnParams, peerPD []byte,
	initiator bool, obs StreamObserver) {
	c.nc, c.qp, c.wire, c.params, c.peerPD, c.initiator = nc, qp, w, p, peerPD, initiator
	c.tcp, _ = nc.(*net.TCPConn)
	neg.MULPDU = MaxULPDULen
	if c.tcp != nil {
		if mss, err := tcpMSS(c.tcp); err == nil && mss > 0 {
			neg.EMSS = mss
			neg.MULPDU = MULPDU(mss, neg.SendMarkers)
		}
	}
	if neg.LargeFPDU {
		neg.MULPDU = largeMULPDU
	}
	if p.MaxULPDU > 0 {
		neg.MULPDU = min(neg.MULPDU, max(p.MaxULPDU, DDPUntaggedHeaderLen+AtomicRequestLen))
	}
	c.neg = neg
	c.maxRecv = p.maxRecvULPDU()
	// The receive path's effects, bound here once: a method value made per FPDU
	// would be an allocation per FPDU.
	c.wroteEffect, c.sendEffect, c.readRespEffect = c.wrote, c.sendPlaced, c.readResponsePlaced
	c.headerEffect, c.immEffect, c.atomicRespEffect = c.headerOnly, c.immediatePlaced, c.atomicResponsePlaced
	c.tx = newTxState(&c.neg, obs)
	c.rx.init(nc, obs, &neg)
	for i := range c.rq {
		c.rq[i].msn = 1
	}
	if !initiator && neg.PeerToPeer {
		c.awaitRTR = neg.RTR
		c.rtrGate = make(chan struct{})
	}
	if initiator && neg.PeerToPeer && neg.RTR == RTRRead {
		c.rtrAnswered = make(chan struct{})
	}
	c.kick = make(chan struct{}, 1)
	c.rx.kick = c.kick
	c.done = make(chan struct{})
	c.termWritten = make(chan struct{})
	w.SetPlacementInterrupt(c.interruptPlacement)
	w.SetCounterSource(c.cnt.addTo)
}

// start runs the reader and the writer goroutines; the last of them to end
// closes the connection (exited): two goroutines per connection, not three
// (a third only waited for them, a parked goroutine per connection at the
// scale rows' 4096).
func (c *Conn) start() {
	c.running.Store(2)
	go c.reader()
	go c.writer()
}

// exited is called by the reader and the writer as they end; the last one
// closes the socket, moves the QP to the error state, detaches the
// connection and closes done.
func (c *Conn) exited() {
	if c.running.Add(-1) != 0 {
		return
	}
	c.nc.Close()
	c.wire.SetError(0, false)
	c.wire.SetPlacementInterrupt(nil)
	c.wire.SetCounterSource(nil) // the counts are final: the QP keeps them
	c.wire.Detach(c)
	close(c.done)
}

// cancelOnDone makes ctx's end interrupt blocking I/O on nc.
func cancelOnDone(ctx context.Context, nc net.Conn) (stop func() bool) {
	return context.AfterFunc(ctx, func() { nc.SetDeadline(time.Unix(1, 0)) })
}

// Dial connects qp, an external QP in RESET or INIT (one created on an iwarp
// Device), to the iWARP listener at addr ("host:port") as the MPA initiator:
// TCP connect, MPA Request, Reply, and with peer-to-peer mode the RTR; with the
// Read RTR, Dial returns once the peer has answered it (rtrwait.go). On success
// the QP is in RTS and the returned Conn runs its traffic; the peer's private data
// is Conn.PeerPrivateData. A rejection returns a *RejectError; a failure of the
// exchange leaves the QP in INIT, free to Dial again (one after the Reply, an
// unanswered RTR, leaves it in ERR).
func Dial(ctx context.Context, qp *ib.QP, addr string, p ConnParams) (*Conn, error) {
	c := &Conn{}
	w, ird, ord, err := prepareQP(qp, &p, c)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	if p.LocalAddr.IsValid() {
		d.LocalAddr = &net.TCPAddr{IP: p.LocalAddr.AsSlice(), Zone: p.LocalAddr.Zone()}
	}
	var nc net.Conn
	if p.Dial != nil {
		nc, err = p.Dial(ctx, &d, addr)
	} else {
		nc, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		w.Detach(c)
		return nil, err
	}
	obs := observer(&p, nc)
	dl, ok := ctx.Deadline()
	setHandshakeDeadline(nc, &p, dl, ok)
	stop := cancelOnDone(ctx, nc)
	neg, peerPD, err := initiate(nc, obs, &p, ird, ord)
	stop()
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		nc.Close()
		w.Detach(c)
		return nil, err
	}
	nc.SetDeadline(time.Time{})
	newConn(c, nc, qp, w, neg, p, peerPD, true, obs)
	if err := c.connectQP(); err != nil {
		nc.Close()
		w.Detach(c)
		return nil, err
	}
	c.start()
	if err := c.awaitRTRAnswer(ctx); err != nil {
		c.Abort()
		return nil, err
	}
	return c, nil
}

// initiate runs the initiator's side of the MPA exchange.
func initiate(nc net.Conn, obs StreamObserver, p *ConnParams, ird, ord int) (Negotiated, []byte, error) {
	f, err := requestFrame(p, ird, ord)
	if err != nil {
		return Negotiated{}, nil, err
	}
	reqb, _ := f.Append(nil)
	if obs != nil {
		obs.Sent(reqb)
	}
	if _, err := nc.Write(reqb); err != nil {
		return Negotiated{}, nil, handshakeError(err)
	}
	rep, err := readStartFrame(nc, obs, false)
	if err != nil {
		return Negotiated{}, nil, err
	}
	neg, peerPD, term, err := negotiateAsInitiator(p, MPAFrame(reqb), rep, ird, ord)
	if term != nil {
		b := handshakeTerminate(&neg, term)
		if obs != nil {
			obs.Sent(b)
		}
		nc.Write(b)
	}
	return neg, peerPD, err
}

// Listener accepts iWARP connections: it runs the MPA exchange of each incoming TCP
// connection in its own goroutine (so that a slow or silent peer holds up nobody),
// rejects requests its ConnParams do not allow, and hands the others to Next or
// Accept.
type Listener struct {
	ln     net.Listener
	p      ConnParams
	reqs   chan listenResult
	closed chan struct{}
	once   sync.Once
}

type listenResult struct {
	req *ConnRequest
	err error
}

// Listen listens for iWARP connections on the TCP address addr ("host:port"; port
// 0 picks one). The policies of p (revision, CRC, markers, peer-to-peer, RTR,
// extensions, timeouts, observer) apply to every connection.
func Listen(addr string, p ConnParams) (*Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	l := &Listener{ln: ln, p: p, reqs: make(chan listenResult), closed: make(chan struct{})}
	go l.loop()
	return l, nil
}

// Addr returns the listening address.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Close stops listening; connections not yet accepted are closed.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return l.ln.Close()
}

func (l *Listener) loop() {
	for {
		nc, err := l.ln.Accept()
		if err != nil {
			select {
			case <-l.closed:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			l.deliver(listenResult{err: err}, nil)
			return
		}
		go l.handshake(nc)
	}
}

// deliver hands a result to Next, or drops it (closing nc) if the listener closes.
func (l *Listener) deliver(r listenResult, nc net.Conn) {
	select {
	case l.reqs <- r:
	case <-l.closed:
		if nc != nil {
			nc.Close()
		}
	}
}

// handshake reads and judges one MPA Request.
func (l *Listener) handshake(nc net.Conn) {
	obs := observer(&l.p, nc)
	nc.SetDeadline(time.Now().Add(l.p.handshakeTimeout()))
	from := nc.RemoteAddr()
	req, err := readStartFrame(nc, obs, true)
	if err != nil {
		// Not an MPA Request (or not all of one): RFC 5044 §7.1 has the responder
		// close the connection; there is no frame to answer.
		go lingerClose(nc, l.p.linger())
		l.deliver(listenResult{err: fmt.Errorf("iwarp: connection from %s: %w", from, err)}, nil)
		return
	}
	v := judgeRequest(&l.p, req)
	if v.reject != "" {
		ird, ord := depth(l.p.IRD, MPAv2IRDORDMask), depth(l.p.ORD, MPAv2IRDORDMask)
		f, _ := replyFrame(&l.p, req, v, ird, ord, true, []byte("softrdma: "+v.reject))
		writeStartFrame(nc, obs, f)
		go lingerClose(nc, l.p.linger())
		l.deliver(listenResult{err: fmt.Errorf("iwarp: connection from %s: %w", from,
			&RejectError{Reason: v.reject})}, nil)
		return
	}
	r := &ConnRequest{l: l, nc: nc, obs: obs, req: req, v: v,
		peerPD: appPrivateData(req)}
	l.deliver(listenResult{req: r}, nc)
}

// lingerClose sends FIN, waits (bounded) for the peer's, and closes.
func lingerClose(nc net.Conn, d time.Duration) {
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.CloseWrite()
		nc.SetReadDeadline(time.Now().Add(d))
		var b [512]byte
		for {
			if _, err := nc.Read(b[:]); err != nil {
				break
			}
		}
	}
	nc.Close()
}

// Next returns the next connection request that passed the listener's policy, or
// an error: for a failed or rejected MPA exchange of one incoming connection (an
// ErrHandshake or ErrRejected error: call Next again), ctx's error, or
// net.ErrClosed once the listener is closed.
func (l *Listener) Next(ctx context.Context) (*ConnRequest, error) {
	select {
	case r := <-l.reqs:
		return r.req, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// Accept waits for the next connection request and accepts it on qp with the
// listener's ConnParams (see ConnRequest.Accept). Errors are Next's and Accept's.
func (l *Listener) Accept(ctx context.Context, qp *ib.QP) (*Conn, error) {
	r, err := l.Next(ctx)
	if err != nil {
		return nil, err
	}
	return r.Accept(ctx, qp, nil)
}

// ConnRequest is an incoming connection whose MPA Request passed the listener's
// policy, waiting for Accept or Reject.
type ConnRequest struct {
	l      *Listener
	nc     net.Conn
	obs    StreamObserver
	req    MPAFrame
	v      requestVerdict
	peerPD []byte
	used   bool
}

// PrivateData returns the private data of the Request (without the RFC 6581
// IRD/ORD words).
func (r *ConnRequest) PrivateData() []byte { return r.peerPD }

// RemoteAddr returns the initiator's TCP address.
func (r *ConnRequest) RemoteAddr() net.Addr { return r.nc.RemoteAddr() }

// Request returns the MPA Request frame as received.
func (r *ConnRequest) Request() MPAFrame { return r.req }

// Accept replies to the request, accepting it, and runs qp (an external QP in
// RESET or INIT) on the connection. The listener's ConnParams apply; p, if not
// nil, overrides the per-connection ones: PrivateData (always), and IRD, ORD,
// Access, MaxULPDU, MaxRecvULPDU and Linger when set. With peer-to-peer mode the
// QP's writer waits for the initiator's RTR before it sends.
func (r *ConnRequest) Accept(ctx context.Context, qp *ib.QP, p *ConnParams) (*Conn, error) {
	if r.used {
		return nil, fmt.Errorf("iwarp: connection request already answered: %w", ErrBadQP)
	}
	cp := r.l.p
	if p != nil {
		cp.PrivateData = p.PrivateData
		if p.IRD != 0 {
			cp.IRD = p.IRD
		}
		if p.ORD != 0 {
			cp.ORD = p.ORD
		}
		if p.Access != 0 {
			cp.Access = p.Access
		}
		if p.MaxULPDU != 0 {
			cp.MaxULPDU = p.MaxULPDU
		}
		if p.MaxRecvULPDU != 0 {
			cp.MaxRecvULPDU = p.MaxRecvULPDU
		}
		if p.Linger != 0 {
			cp.Linger = p.Linger
		}
	}
	c := &Conn{}
	w, ird, ord, err := prepareQP(qp, &cp, c)
	if err != nil {
		return nil, err
	}
	if r.v.p2p && r.v.rtr == RTRRead && ird < 1 {
		// The Read RTR is a Read Request and takes one of the IRD's buffers:
		// with an IRD of 0 (rdma_cm's responder resources 0, perftest's write
		// and send bw) it was answered by a Terminate. siw's siw_accept raises
		// its IRD to the peer's ORD in the same way.
		ird = 1
	}
	f, err := replyFrame(&cp, r.req, r.v, ird, ord, false, cp.PrivateData)
	if err != nil {
		w.Detach(c)
		return nil, err
	}
	r.used = true
	dl, ok := ctx.Deadline()
	setHandshakeDeadline(r.nc, &cp, dl, ok)
	stop := cancelOnDone(ctx, r.nc)
	err = writeStartFrame(r.nc, r.obs, f)
	stop()
	if err != nil {
		r.nc.Close()
		w.Detach(c)
		return nil, handshakeError(err)
	}
	r.nc.SetDeadline(time.Time{})
	neg := negotiatedAsResponder(&cp, r.req, r.v, ird, ord)
	newConn(c, r.nc, qp, w, neg, cp, r.peerPD, false, r.obs)
	if err := c.connectQP(); err != nil {
		r.nc.Close()
		w.Detach(c)
		return nil, err
	}
	c.start()
	return c, nil
}

// Reject rejects the request with a Reply that has R set and carries pd as its
// private data (RFC 5044 §7.1.2), and closes the connection.
func (r *ConnRequest) Reject(pd []byte) error {
	if r.used {
		return fmt.Errorf("iwarp: connection request already answered: %w", ErrBadQP)
	}
	r.used = true
	ird, ord := depth(r.l.p.IRD, MPAv2IRDORDMask), depth(r.l.p.ORD, MPAv2IRDORDMask)
	f, err := replyFrame(&r.l.p, r.req, r.v, ird, ord, true, pd)
	if err != nil {
		r.nc.Close()
		return err
	}
	r.nc.SetDeadline(time.Now().Add(r.l.p.handshakeTimeout()))
	err = writeStartFrame(r.nc, r.obs, f)
	go lingerClose(r.nc, r.l.p.linger())
	return err
}
