package ibcm

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"github.com/softrdma/softrdma/header"
	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/roce"
)

// GSIConfig sizes a device's General Services Interface (OpenGSI).
type GSIConfig struct {
	// RecvDepth is the number of receive buffers kept posted (default 512,
	// the kernel's mad_recvq_size): MADs that arrive between two polls of
	// the agent, such as the REQs of a program opening a hundred connections
	// at once, must find a buffer each, or they are dropped and wait for the
	// peer's retry.
	RecvDepth int
	// SendDepth is the depth of the send queue (default 128, the kernel's
	// mad_sendq_size). MADs sent while it is full wait in the GSI's overflow
	// list, as in the kernel's MAD layer, and go out as sends complete.
	SendDepth int
}

// MADAddress is the address of one end of a MAD exchange: the peer's QP1 a MAD
// came from or goes to.
type MADAddress struct {
	// Remote is the peer's address: the source IP of a received MAD (its GID,
	// IPv4-mapped GIDs unmapped), the destination of one to send.
	Remote netip.Addr
	// Local is this side's address: the destination of a received MAD; for a
	// send, the source address (zero: the device's address of Remote's family).
	Local netip.Addr
	// RemoteQPN is the peer's QP (the SrcQP of a received MAD; 0 in a send
	// means QP1).
	RemoteQPN uint32
	// PKeyIndex is the partition key index a MAD was received with.
	PKeyIndex uint16
}

// GSI is the General Services Interface of a device (IBTA Vol. 1 ch. 13): QP1,
// a UD QP that sends and receives MADs with Q_Key GSIQKey, with its completion
// queue and a pool of posted receive buffers. Received MADs come with the
// address they came from, read from the 40-byte roce.GRH area of the receive buffer
// (the IPv4 header in its last 20 bytes for RoCEv2 over IPv4, as rxe fills it).
// Sends are inline: the MAD is copied at post time.
//
// Poll must not be called from two goroutines at once; Send may be called from
// any goroutine.
type GSI struct {
	dev    *roce.Device
	pd     *ibtransport.PD
	cq     *ibtransport.CQ
	qp     *ibtransport.QP
	mr     *ibtransport.MR
	bufLen int
	depth  int

	mu       sync.Mutex // Poll
	wcs      []ibtransport.WC
	counters GSICounters
	closed   bool

	// sendMu orders the posts and guards overflow: the MADs that found
	// the send queue full, oldest first (a burst of connection requests:
	// cmtime -c 1000 posts a thousand REQs at once). Dropping them left the
	// connections to the REQ's retry, 4.3 s later.
	sendMu   sync.Mutex
	overflow []queuedMAD
	// inflight counts the sends posted whose completions Poll has not
	// taken yet; at most sendDepth, so that with the receives they never
	// overrun the CQ (sends are signaled).
	inflight, sendDepth int
}

// queuedMAD is a MAD waiting in the overflow list: a copy of its bytes and
// where it goes.
type queuedMAD struct {
	mad []byte
	ah  *ibtransport.AddressHandle
	qpn uint32
}

// maxOverflow bounds the overflow list; a MAD sent beyond it is refused
// (ErrQueueFull) and counted as a send error.
const maxOverflow = 1 << 14

// GSICounters count what the GSI sent and received.
type GSICounters struct {
	Sent        uint64 // MADs posted
	Queued      uint64 // MADs that waited in the overflow list (the send queue was full)
	SendErrors  uint64 // posts refused and error completions of sends
	Received    uint64 // MADs handed to Poll's function
	RecvErrors  uint64 // error completions of receives
	NoGRHSource uint64 // receives whose roce.GRH area names no source address
}

// grhAreaLen is the roce.GRH area at the start of every UD receive buffer.
const grhAreaLen = roce.GRHLen

// ErrGSIClosed is returned by a closed GSI.
var ErrGSIClosed = errors.New("ibcm: gsi closed")

// OpenGSI creates the device's QP1, brings it to RTS (Q_Key GSIQKey, send PSN
// 0 as the kernel's), and posts the receive buffers. A device has one GSI.
func OpenGSI(dev *roce.Device, cfg GSIConfig) (*GSI, error) {
	if cfg.RecvDepth <= 0 {
		cfg.RecvDepth = 512
	}
	if cfg.SendDepth <= 0 {
		cfg.SendDepth = 128
	}
	ctx := dev.Context()
	g := &GSI{dev: dev, depth: cfg.RecvDepth, sendDepth: cfg.SendDepth}
	// A receive buffer holds the roce.GRH area and a whole packet payload: a MAD
	// that is too long reaches the decoder (and is counted) instead of ending
	// as a local length error.
	g.bufLen = grhAreaLen + dev.PathMTU()
	g.pd = ctx.AllocPD()
	var err error
	fail := func(err error) (*GSI, error) {
		g.Close()
		return nil, fmt.Errorf("ibcm: open gsi: %w", err)
	}
	if g.cq, err = ctx.CreateCQ(cfg.RecvDepth + cfg.SendDepth); err != nil {
		return fail(err)
	}
	g.qp, err = ctx.CreateQP(g.pd, ibtransport.QPInitAttr{
		Type: ibtransport.QPTypeGSI, SendCQ: g.cq, RecvCQ: g.cq,
		Cap: ibtransport.QPCap{MaxSendWR: cfg.SendDepth, MaxRecvWR: cfg.RecvDepth, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: MADLen},
	})
	if err != nil {
		return fail(err)
	}
	steps := []struct {
		attr ibtransport.QPAttr
		mask ibtransport.QPAttrMask
	}{
		{ibtransport.QPAttr{QPState: ibtransport.QPStateInit, QKey: GSIQKey}, ibtransport.QPAttrState | ibtransport.QPAttrQKey},
		{ibtransport.QPAttr{QPState: ibtransport.QPStateRTR}, ibtransport.QPAttrState},
		{ibtransport.QPAttr{QPState: ibtransport.QPStateRTS}, ibtransport.QPAttrState | ibtransport.QPAttrSQPSN},
	}
	for _, s := range steps {
		if err := g.qp.Modify(&s.attr, s.mask); err != nil {
			return fail(err)
		}
	}
	if g.mr, err = g.pd.RegMR(make([]byte, g.bufLen*cfg.RecvDepth), ibtransport.AccessLocalWrite); err != nil {
		return fail(err)
	}
	for i := range cfg.RecvDepth {
		if err := g.post(i); err != nil {
			return fail(err)
		}
	}
	g.wcs = make([]ibtransport.WC, 32)
	return g, nil
}

func (g *GSI) post(i int) error {
	return g.qp.PostRecv(ibtransport.RecvWR{WRID: uint64(i), SGL: []ibtransport.SGE{g.mr.SGE(i*g.bufLen, g.bufLen)}})
}

// QP returns QP1.
func (g *GSI) QP() *ibtransport.QP { return g.qp }

// CQ returns the completion queue of QP1's sends and receives.
func (g *GSI) CQ() *ibtransport.CQ { return g.cq }

// roce.Device returns the device.
func (g *GSI) Device() *roce.Device { return g.dev }

// Counters returns a snapshot of the counters.
func (g *GSI) Counters() GSICounters {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.counters
}

// AddressHandle returns the address handle of a MAD to to: the device's
// handle for to.Remote, with the source GID of to.Local if that is one of the
// device's GIDs.
func (g *GSI) AddressHandle(to MADAddress) (*ibtransport.AddressHandle, error) {
	ah, err := g.dev.AddressHandle(to.Remote)
	if err != nil {
		return nil, err
	}
	if to.Local.IsValid() {
		for i, gid := range g.dev.GIDs() {
			if gid.Unmap() == to.Local.Unmap() && gid.Unmap().Is4() == to.Remote.Unmap().Is4() {
				ah.SGIDIndex = uint8(i)
				break
			}
		}
	}
	return &ah, nil
}

// Send posts m (one MAD) to the peer's QP (QP1 unless to.RemoteQPN says
// otherwise) with an address handle from AddressHandle. The MAD is copied.
func (g *GSI) Send(m []byte, to MADAddress) error {
	ah, err := g.AddressHandle(to)
	if err != nil {
		g.countSendError()
		return err
	}
	return g.SendAH(m, ah, to.RemoteQPN)
}

// SendAH posts m to remoteQPN (0: QP1) at ah, which must stay unchanged while
// the send is queued. When the send queue is full, a copy of m waits in the
// overflow list and is posted as earlier sends complete (Poll); only a full
// overflow list refuses it.
func (g *GSI) SendAH(m []byte, ah *ibtransport.AddressHandle, remoteQPN uint32) error {
	if remoteQPN == 0 {
		remoteQPN = GSIQPN
	}
	g.sendMu.Lock()
	defer g.sendMu.Unlock()
	var err error
	if len(g.overflow) == 0 && g.inflight < g.sendDepth {
		err = g.postSend(m, ah, remoteQPN)
		if err == nil || !errors.Is(err, ibtransport.ErrQueueFull) {
			g.count(err)
			return err
		}
	}
	if len(g.overflow) >= maxOverflow {
		g.count(err)
		return fmt.Errorf("ibcm: gsi: overflow list full (%d MADs): %w", len(g.overflow), ibtransport.ErrQueueFull)
	}
	g.overflow = append(g.overflow, queuedMAD{mad: append([]byte(nil), m...), ah: ah, qpn: remoteQPN})
	g.mu.Lock()
	g.counters.Queued++
	g.mu.Unlock()
	return nil
}

// postSend posts one MAD, signaled: its completion is what wakes Poll to
// send the overflow list. g.sendMu is held.
func (g *GSI) postSend(m []byte, ah *ibtransport.AddressHandle, remoteQPN uint32) error {
	err := g.qp.PostSend(ibtransport.SendWR{
		Opcode: ibtransport.WRSend, Inline: true, InlineData: m, Signaled: true,
		AH: ah, RemoteQPN: remoteQPN, RemoteQKey: GSIQKey,
	})
	if err == nil {
		g.inflight++
	}
	return err
}

// count counts a post's outcome.
func (g *GSI) count(err error) {
	g.mu.Lock()
	if err != nil {
		g.counters.SendErrors++
	} else {
		g.counters.Sent++
	}
	g.mu.Unlock()
}

// sendOverflow takes done send completions off the in-flight count and posts
// the MADs of the overflow list while the send queue has room.
func (g *GSI) sendOverflow(done int) {
	g.sendMu.Lock()
	defer g.sendMu.Unlock()
	g.inflight = max(g.inflight-done, 0)
	n := 0
	for _, q := range g.overflow {
		if g.inflight >= g.sendDepth {
			break
		}
		err := g.postSend(q.mad, q.ah, q.qpn)
		if errors.Is(err, ibtransport.ErrQueueFull) {
			break
		}
		g.count(err)
		n++
	}
	if n > 0 {
		rest := copy(g.overflow, g.overflow[n:])
		clear(g.overflow[rest:])
		g.overflow = g.overflow[:rest]
	}
}

func (g *GSI) countSendError() {
	g.mu.Lock()
	g.counters.SendErrors++
	g.mu.Unlock()
}

// Poll takes the completions waiting on QP1's CQ: each received MAD is handed
// to fn (the bytes are valid only during the call: the buffer is posted again
// right after), send errors are counted. It returns the number of receives.
// fn is called without the GSI's lock held.
func (g *GSI) Poll(fn func(mad []byte, from MADAddress)) int {
	total := 0
	for {
		g.mu.Lock()
		if g.closed {
			g.mu.Unlock()
			return total
		}
		n := g.cq.Poll(g.wcs)
		wcs := g.wcs[:n]
		g.mu.Unlock()
		sends := 0
		for i := range wcs {
			wc := &wcs[i]
			if wc.Opcode != ibtransport.WCRecv {
				if wc.Status != ibtransport.WCSuccess {
					g.countSendError()
				}
				sends++
				continue
			}
			idx := int(wc.WRID)
			if idx < 0 || idx >= g.depth {
				continue
			}
			if wc.Status != ibtransport.WCSuccess {
				g.mu.Lock()
				g.counters.RecvErrors++
				g.mu.Unlock()
				if wc.Status != ibtransport.WCWRFlushErr {
					g.post(idx) // a flushed QP is in error: posting again would flush again
				}
				continue
			}
			buf := g.mr.Buf()[idx*g.bufLen : (idx+1)*g.bufLen]
			n := min(int(wc.ByteLen), len(buf))
			from := MADAddress{RemoteQPN: wc.SrcQP, PKeyIndex: wc.PKeyIndex}
			ok := false
			if wc.Flags&ibtransport.WCFlagGRH != 0 && n >= grhAreaLen {
				from.Remote, from.Local, ok = GRHAreaAddrs(buf[:grhAreaLen])
			}
			g.mu.Lock()
			g.counters.Received++
			if !ok {
				g.counters.NoGRHSource++
			}
			g.mu.Unlock()
			if n >= grhAreaLen {
				fn(buf[grhAreaLen:n], from)
			}
			total++
			g.post(idx)
		}
		if sends > 0 {
			g.sendOverflow(sends) // the completed sends made room
		}
		if n < len(g.wcs) {
			return total
		}
	}
}

// GRHAreaAddrs returns the source and destination addresses of the 40-byte
// roce.GRH area of a UD receive buffer: an IPv4 header in its last 20 bytes (the
// first 20 zero) for RoCEv2 over IPv4, else an IPv6 header or a roce.GRH (IPVer 6)
// with the GIDs at bytes 8 and 24; IPv4-mapped GIDs are returned unmapped.
func GRHAreaAddrs(g []byte) (src, dst netip.Addr, ok bool) {
	if len(g) < grhAreaLen {
		return src, dst, false
	}
	if ip := header.IPv4(g[grhAreaLen-header.IPv4MinLen:]); ip.Version() == 4 && allZero(g[:grhAreaLen-header.IPv4MinLen]) {
		return ip.Src(), ip.Dst(), true
	}
	if ip := header.IPv6(g); ip.Version() == 6 {
		return ip.Src().Unmap(), ip.Dst().Unmap(), true
	}
	return src, dst, false
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// Close destroys QP1 and its resources. It is idempotent.
func (g *GSI) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	g.mu.Unlock()
	var first error
	keep := func(err error) {
		if first == nil && err != nil {
			first = err
		}
	}
	if g.qp != nil {
		keep(g.qp.Destroy())
	}
	if g.mr != nil {
		keep(g.mr.Dereg())
	}
	if g.cq != nil {
		keep(g.cq.Destroy())
	}
	if g.pd != nil {
		keep(g.pd.Dealloc())
	}
	return first
}
