package perf

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/softrdma/softrdma/device"
	"github.com/softrdma/softrdma/devspec"
	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/oob/perftest"
)

// perf --transport iwarp is perftest -R over siw: both of perftest's
// connections (the "comm" QP that carries the parameters and each test QP)
// are made by rdma_cm over iWARP, which is TCP to the server's port (-p,
// 18515) and the MPA exchange (revision 2, enhanced: the private data is the
// IRD/ORD words and nothing else, since perftest's rdma_connect and
// rdma_accept pass none; IRD = ORD = 0 except for READs, whose connections
// carry -o's depth; seen in testdata/captures/siw-*-bw.pcap). What differs
// from RoCE besides the transport:
//
//   - iWARP has no RNR flow control (a SEND that finds no receive ends the
//     connection), so ib_send_bw over iWARP (send_bw.c: send_rcredit) has the
//     receiver grant credits: after each rx_depth/3 receives of a QP (counted
//     within the run, modulo rx_depth) it RDMA WRITEs the 4-octet count of
//     receives (host order: little endian on the x86 hosts perftest runs on)
//     to the sender's credit word, whose address and key travel in the keys
//     instead of the buffer's (ctx_alloc_credit); the sender posts SEND k
//     only while k+1-credit < rx_depth (run_iter_bw). credit does both.
//   - The READ sink is registered with remote write too (ctx_init on iWARP).
//   - No atomics, no immediate data: atomic_bw is refused; the MPA exchange
//     offers no RFC 7306 extensions (siw echoes reserved flag bits, see
//     rping/device.go).
//   - siw (6.1) as the MPA responder may leave an FPDU that arrives right
//     after its Reply unread (test/interop/README.md): the active side waits
//     iwarpSettle after each ESTABLISHED before it sends.
//   - The device is the interface the comm connection runs on: its name, its
//     MTU as an IB MTU (ib_mtu_int_to_enum of the netdev's, as siw reports
//     it), and siw's one GID (index 0): the interface's MAC address in the
//     first 6 octets.

// iwarpSettle is how long the active side waits after ESTABLISHED before
// its first SEND (softrdma rping's --settle).
const iwarpSettle = 200 * time.Millisecond

// creditPoll is how often a sender that waits for credit looks again.
const creditPoll = 50 * time.Microsecond

// checkIWARP checks the options that --transport iwarp allows.
func checkIWARP(o *Options) error {
	if !o.RDMACM {
		return errors.New("--transport iwarp needs -R: an iWARP connection is made by rdma_cm (TCP and MPA), not by exchanged keys")
	}
	if o.Set["backend"] {
		return errors.New("--backend is RoCE's: iWARP runs over a TCP socket")
	}
	if o.Set["tap-peer"] || o.Set["tap-name"] {
		return errors.New("--tap-peer and --tap-name are RoCE's")
	}
	if _, err := device.ParseCRCPolicy(o.CRC); err != nil {
		return err
	}
	o.Backend = "tcp"
	return nil
}

// settle is the active side's wait after ESTABLISHED on iWARP.
func (c *cmSide) settle() {
	if c.iwarp {
		time.Sleep(iwarpSettle)
	}
}

// commLocal returns this side's address of the comm connection: the client's
// TCP source; for the server, the source the kernel picks towards the client
// (an accepted rdma_cm ID on a wildcard listener names a device address, not
// necessarily the connection's).
func (c *cmSide) commLocal(server bool) netip.Addr {
	if !server {
		return c.comm.LocalAddr().Addr()
	}
	a, err := device.RouteSource(c.comm.RemoteAddr().Addr())
	if err != nil {
		return netip.Addr{}
	}
	return a
}

// credit is ib_send_bw's receive credit over iWARP (ctx_alloc_credit,
// ctx_set_credit_wqes, and the send_rcredit parts of run_iter_bw and
// run_iter_bw_server). Its region holds the credit words the peer writes
// (one per QP, first), then this side's sources of its credit WRITEs: a ring
// of tx depth words per QP, so that no word is rewritten while its WRITE is
// in flight.
type credit struct {
	mr      *ibtransport.MR
	nqp     int
	ring    int    // source words per QP: the most credit WRITEs in flight
	every   uint64 // credit_cnt: rx_depth/3
	rxDepth uint64

	rcnt        []uint64 // receiver: receives of this run, per QP
	sent        []uint64 // receiver: credit WRITEs posted, per QP
	outstanding []int    // receiver: credit WRITEs not completed, per QP
	total       int
	wc          []ibtransport.WC
}

// setupCredit registers ib_send_bw's credit region on iWARP and puts its
// words' addresses and key in the keys (my_dest's rkey and vaddr).
func (s *session) setupCredit(dests []perftest.Dest) error {
	p := s.p
	if s.dev.Spec().Transport != devspec.IWARP || p.verb != verbSend || !p.bw {
		return nil
	}
	nqp := len(dests)
	ring := max(p.txDepth, 1)
	mr, err := s.pd.RegMR(make([]byte, 4*nqp*(1+ring)), ibtransport.AccessLocalWrite|ibtransport.AccessRemoteWrite)
	if err != nil {
		return fmt.Errorf("Couldn't allocate MR: %w", err)
	}
	c := &credit{mr: mr, nqp: nqp, ring: ring, every: uint64(max(p.rxDepth/3, 1)), rxDepth: uint64(max(p.rxDepth, 1)),
		rcnt: make([]uint64, nqp), sent: make([]uint64, nqp), outstanding: make([]int, nqp), wc: make([]ibtransport.WC, 16)}
	for i := range dests {
		dests[i].RKey = mr.RKey()
		dests[i].VAddr = mr.Addr() + uint64(4*i)
	}
	s.credit = c
	return nil
}

// reset zeroes the credit words (the sender, before each run).
func (c *credit) reset() {
	clear(c.mr.Buf()[:4*c.nqp])
}

// mayPost says whether the sender may post SEND k on QP q: fewer than rx
// depth unanswered by the receiver's credit. It reads the word with
// MR.ReadAt, under the engine's lock, under which package iwarp places the
// last octets of each WRITE segment (the whole 4-octet credit); the word only
// grows, so a value read just before the WRITE lands merely waits another
// poll.
func (c *credit) mayPost(q int, k uint64) bool {
	var b [4]byte
	if _, err := c.mr.ReadAt(b[:], int64(4*q)); err != nil {
		return false
	}
	got := uint64(binary.LittleEndian.Uint32(b[:]))
	return got >= k+1 || k+1-got < c.rxDepth
}

// start begins a receiver's run.
func (c *credit) start() {
	clear(c.rcnt)
}

// received counts a receive of QP q and, every rx_depth/3 of them, writes the
// count to the sender's credit word.
func (c *credit) received(ctx context.Context, s *session, q int) error {
	c.rcnt[q]++
	if !c.due(c.rcnt[q]) {
		return nil
	}
	for c.outstanding[q] >= c.ring {
		if err := c.reap(ctx, s); err != nil {
			return err
		}
	}
	off := 4 * (c.nqp + q*c.ring + int(c.sent[q]%uint64(c.ring)))
	binary.LittleEndian.PutUint32(c.mr.Buf()[off:], uint32(c.rcnt[q]))
	wr := ibtransport.SendWR{WRID: uint64(q), Opcode: ibtransport.WRRDMAWrite, Signaled: true,
		SGL: []ibtransport.SGE{c.mr.SGE(off, 4)}, RemoteAddr: s.remote[q].VAddr, RKey: s.remote[q].RKey}
	if err := s.qps[q].PostSend(wr); err != nil {
		return fmt.Errorf("Couldn't post send qp %d credit = %d: %w", q, c.rcnt[q], err)
	}
	c.sent[q]++
	c.outstanding[q]++
	c.total++
	return nil
}

// due says whether the receiver writes its credit after rcnt receives:
// every rx_depth/3 of them, counting within rx depth (so at rx depth too).
func (c *credit) due(rcnt uint64) bool { return rcnt%c.rxDepth%c.every == 0 }

// reap waits for credit WRITE completions.
func (c *credit) reap(ctx context.Context, s *session) error {
	n := s.sendCQ.Poll(c.wc)
	if n == 0 {
		return device.WaitCQ(ctx, s.sendCQ, time.Time{})
	}
	for _, w := range c.wc[:n] {
		q := int(w.WRID)
		if w.Status != ibtransport.WCSuccess {
			return fmt.Errorf("Poll send CQ error status=%s (%d) qp %d credit=%d", w.Status, int(w.Status), q, c.rcnt[q%c.nqp])
		}
		if q < c.nqp && c.outstanding[q] > 0 {
			c.outstanding[q]--
			c.total--
		}
	}
	return nil
}

// drain waits for every credit WRITE (clean_scq_credit).
func (c *credit) drain(ctx context.Context, s *session) error {
	for c.total > 0 {
		if err := c.reap(ctx, s); err != nil {
			return err
		}
	}
	return nil
}
