// Package rping is softrdma rping: rdma-core's rping (librdmacm/examples/rping.c), over
// iWARP or RoCE, wire-compatible with it: the client SENDs a 16-octet "rping
// info" (buffer address, big-endian 64 bits; rkey, 32; size, 32) naming its
// start buffer, the server RDMA READs it, SENDs a 16-octet "go ahead", the
// client SENDs the info of its sink buffer, the server RDMA WRITEs the data
// back into it and SENDs "go ahead" again; the client checks and prints, then
// the next ping.
//
// Both transports are driven by the same rdma_cm calls on an rdmacm.Manager
// (cm.go); only the Manager's device differs (device.go). Run runs one side;
// cmd/softrdma holds the flags.
package rping

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/iwarp"
	"github.com/softrdma/softrdma/rdmacm"
)

const (
	// infoLen is sizeof(struct rping_rdma_info).
	infoLen = 16
	// MinSize is rping.c's RPING_MIN_BUFSIZE: sizeof("INT_MAX") +
	// sizeof("rdma-ping-%d: ") (its stringify of INT_MAX yields the name).
	MinSize = 8 + 15
	// MaxSize is RPING_BUFSIZE - 1.
	MaxSize = 64*1024 - 1
	// irdOrd is rping's responder_resources and initiator_depth.
	irdOrd = 1
	// Settle is how long the iWARP client waits after ESTABLISHED before
	// its first SEND. Linux siw as the responder sends its Reply before it has
	// finished accepting (the QP's state lock is still held, the QP not yet in
	// RTS), and an FPDU that arrives in that window is left in the socket
	// unread until more data comes, which here is never: the server waits for
	// that SEND and the client for the answer (seen with siw 6.1 under qemu
	// TCG: the SEND ACKed by TCP, no Read Request ever). The kernel's rping
	// client is only slow enough by chance (its SEND follows rdma_cm's
	// ESTABLISHED event through user space). RFC 6581's RTR would close the
	// window, but siw offers no peer-to-peer mode by default.
	Settle = 200 * time.Millisecond
)

// Options are rping's flags.
type Options struct {
	Server, Client bool
	// Persistent is rping's -P: the server accepts connection after
	// connection, each served at once beside the others, until it is stopped.
	Persistent bool
	// Source is rping's -I: the client's source address (rdma_resolve_addr's
	// src), and so its device.
	Source string
	// SelfQP is rping's -q: the program creates its QP with the verbs and
	// moves it to INIT, RTR and RTS itself with rdma_init_qp_attr's
	// attributes, naming it in conn_param.qp_num (on iWARP rdma_cm moves it
	// to RTS at the MPA exchange, as iw_cm does).
	SelfQP            bool
	Addr              string
	Port              int
	Count, Size       int
	Verbose, Validate bool
	Debug             bool
	Transport         string
	CRC               string
	Pcap              string
	Timeout           time.Duration
	Settle            time.Duration
}

// rping is one side's control block, as rping.c's struct rping_cb.
type session struct {
	o              Options
	stdout, stderr io.Writer

	cmID    *rdmacm.ID // rping.c's cm_id: the listener (server) or the connection (client)
	verbs   *ib.Context
	pd      *ib.PD
	cq      *ib.CQ
	qp      *ib.QP
	conn    *cmConn // the connection, once ESTABLISHED
	recvMR  *ib.MR  // the info received
	sendMR  *ib.MR  // the info (client) or go-ahead (server) sent
	rdmaMR  *ib.MR  // server: READ sink and WRITE source; client: WRITE sink
	startMR *ib.MR  // client: READ source

	remoteAddr uint64
	remoteKey  uint32
	remoteLen  uint32
}

func (r *session) debugf(format string, args ...any) {
	if r.o.Debug { // rping.c's DEBUG_LOG is a printf: stdout
		fmt.Fprintf(r.stdout, format, args...)
	}
}

func (r *session) postRecv() error {
	return r.qp.PostRecv(ib.RecvWR{WRID: 1, SGL: []ib.SGE{r.recvMR.SGE(0, infoLen)}})
}

// event is what the completion handler reports to the main loop.
type event int

const (
	recv event = iota
	readDone
	writeDone
	disconnected
)

// errDisconnected is the peer's disconnect in the middle of a ping.
var errDisconnected = errors.New("disconnected")

// next waits for the next event the main loop waits for: a receive (the info is
// parsed and the receive reposted, as rping_cq_event_handler does), a READ or
// WRITE completion, or the disconnect (the connection's end, or its flushed WRs).
// SEND completions are consumed silently.
func (r *session) next(ctx context.Context) (event, error) {
	var wc [1]ib.WC
	for {
		if r.cq.Poll(wc[:]) == 0 {
			wctx, cancel := context.WithCancel(ctx)
			go func() {
				select {
				case <-r.conn.Done():
				case <-wctx.Done():
				}
				cancel()
			}()
			err := r.cq.Wait(wctx)
			cancel()
			if err != nil && r.cq.Len() == 0 {
				if ctx.Err() != nil {
					return 0, ctx.Err()
				}
				select {
				case <-r.conn.Done():
					return disconnected, nil
				default:
				}
				return 0, err
			}
			continue
		}
		w := wc[0]
		if w.Status == ib.WCWRFlushErr {
			r.debugf("flushed %v\n", w.Opcode)
			return disconnected, nil
		}
		if w.Status != ib.WCSuccess {
			return 0, fmt.Errorf("cq completion failed status %d (%v)", int(w.Status), w.Status)
		}
		switch w.Opcode {
		case ib.WCSend:
			r.debugf("send completion\n")
		case ib.WCRDMAWrite:
			r.debugf("rdma write completion\n")
			return writeDone, nil
		case ib.WCRDMARead:
			r.debugf("rdma read completion\n")
			return readDone, nil
		case ib.WCRecv:
			r.debugf("recv completion\n")
			if w.ByteLen != infoLen {
				return 0, fmt.Errorf("Received bogus data, size %d", w.ByteLen)
			}
			b := r.recvMR.Buf()
			r.remoteAddr = binary.BigEndian.Uint64(b[0:])
			r.remoteKey = binary.BigEndian.Uint32(b[8:])
			r.remoteLen = binary.BigEndian.Uint32(b[12:])
			if r.o.Server {
				r.debugf("Received rkey %x addr %x len %d from peer\n", r.remoteKey, r.remoteAddr, r.remoteLen)
			}
			if err := r.postRecv(); err != nil {
				return 0, fmt.Errorf("post recv error: %w", err)
			}
			return recv, nil
		default:
			return 0, fmt.Errorf("unexpected completion %v", w.Opcode)
		}
	}
}

// expect waits for event want; the disconnect ends the run as errDisconnected.
func (r *session) expect(ctx context.Context, want event, what string) error {
	ev, err := r.next(ctx)
	if err != nil {
		return err
	}
	if ev == disconnected {
		return errDisconnected
	}
	if ev != want {
		return fmt.Errorf("wait for %s: got event %d", what, ev)
	}
	return nil
}

// sendInfo SENDs the 16-octet send buffer, after formatting it with mr's
// address, rkey and the ping size (rping_format_send) if mr is not nil.
func (r *session) sendInfo(mr *ib.MR) error {
	b := r.sendMR.Buf()
	if mr != nil {
		binary.BigEndian.PutUint64(b[0:], mr.Addr())
		binary.BigEndian.PutUint32(b[8:], mr.RKey())
		binary.BigEndian.PutUint32(b[12:], uint32(r.o.Size))
		r.debugf("RDMA addr %x rkey %x len %d\n", mr.Addr(), mr.RKey(), r.o.Size)
	}
	return r.qp.PostSend(ib.SendWR{WRID: 2, Opcode: ib.WRSend, Signaled: true, SGL: []ib.SGE{r.sendMR.SGE(0, infoLen)}})
}

// cString is b up to its first NUL, as printf's %s reads it.
func cString(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}

// disconnectWait bounds the wait for the DISCONNECTED event once the
// connection is seen to end (by its flushed WRs, or after rdma_disconnect).
const disconnectWait = 5 * time.Second

// disconnectEvent is rping.c's handling of RDMA_CM_EVENT_DISCONNECTED: it
// waits (bounded) for the event, which may come after the flushed WRs, prints
// its debug line and the message.
func (r *session) disconnectEvent() {
	select {
	case <-r.conn.Done():
	case <-time.After(disconnectWait):
	}
	if ev, ok := r.conn.disconnected(); ok {
		r.cmEvent(ev)
	}
	side := "client"
	if r.o.Server {
		side = "server"
	}
	fmt.Fprintf(r.stderr, "%s DISCONNECT EVENT...\n", side)
}

func (r *session) serverPing(ctx context.Context) error {
	if err := r.expect(ctx, recv, "RDMA_READ_ADV"); err != nil {
		return err
	}
	r.debugf("server received sink adv\n")
	if r.remoteLen > uint32(r.o.Size) {
		return fmt.Errorf("the client's buffer of %d octets is larger than -S %d", r.remoteLen, r.o.Size)
	}
	if err := r.qp.PostSend(ib.SendWR{WRID: 3, Opcode: ib.WRRDMARead, Signaled: true,
		SGL: []ib.SGE{r.rdmaMR.SGE(0, int(r.remoteLen))}, RemoteAddr: r.remoteAddr, RKey: r.remoteKey}); err != nil {
		return fmt.Errorf("post send error: %w", err)
	}
	r.debugf("server posted rdma read req \n")
	if err := r.expect(ctx, readDone, "RDMA_READ_COMPLETE"); err != nil {
		return err
	}
	r.debugf("server received read complete\n")
	if r.o.Verbose {
		fmt.Fprintf(r.stdout, "server ping data: %s\n", cString(r.rdmaMR.Buf()))
	}
	if err := r.sendInfo(nil); err != nil {
		return fmt.Errorf("post send error: %w", err)
	}
	r.debugf("server posted go ahead\n")
	if err := r.expect(ctx, recv, "RDMA_WRITE_ADV"); err != nil {
		return err
	}
	r.debugf("server received sink adv\n")
	n := len(cString(r.rdmaMR.Buf())) + 1
	n = min(n, r.o.Size)
	if err := r.qp.PostSend(ib.SendWR{WRID: 4, Opcode: ib.WRRDMAWrite, Signaled: true,
		SGL: []ib.SGE{r.rdmaMR.SGE(0, n)}, RemoteAddr: r.remoteAddr, RKey: r.remoteKey}); err != nil {
		return fmt.Errorf("post send error: %w", err)
	}
	r.debugf("rdma write from lkey %x laddr %x len %d\n", r.rdmaMR.LKey(), r.rdmaMR.Addr(), n)
	if err := r.expect(ctx, writeDone, "RDMA_WRITE_COMPLETE"); err != nil {
		return err
	}
	r.debugf("server rdma write complete \n")
	if err := r.sendInfo(nil); err != nil {
		return fmt.Errorf("post send error: %w", err)
	}
	r.debugf("server posted go ahead\n")
	return nil
}

// clientPings is rping_test_client's loop, then rping_disconnect.
func (r *session) clientPings(ctx context.Context) error {
	start := byte(65)
	start0 := r.startMR.Buf()
	for ping := 0; r.o.Count == 0 || ping < r.o.Count; ping++ {
		// Put some ascii text in the buffer.
		cc := copy(start0, fmt.Sprintf("rdma-ping-%d: ", ping))
		c := start
		for i := cc; i < r.o.Size; i++ {
			start0[i] = c
			if c++; c > 122 {
				c = 65
			}
		}
		if start++; start > 122 {
			start = 65
		}
		start0[r.o.Size-1] = 0
		if err := r.sendInfo(r.startMR); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
		if err := r.expect(ctx, recv, "RDMA_WRITE_ADV"); err != nil {
			return r.clientEnd(err)
		}
		if err := r.sendInfo(r.rdmaMR); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
		if err := r.expect(ctx, recv, "RDMA_WRITE_COMPLETE"); err != nil {
			return r.clientEnd(err)
		}
		if r.o.Validate && !bytes.Equal(start0, r.rdmaMR.Buf()) {
			fmt.Fprintln(r.stderr, "data mismatch!")
			r.conn.Close()
			return errors.New("data mismatch")
		}
		if r.o.Verbose {
			fmt.Fprintf(r.stdout, "ping data: %s\n", cString(r.rdmaMR.Buf()))
		}
	}
	// rping_disconnect: an orderly close; the DISCONNECTED event follows.
	r.disconnect()
	r.disconnectEvent()
	return nil
}

// clientEnd turns the server's disconnect in the middle of a ping into rping's
// exit status (0: rping_test_client returns 0 in the DISCONNECTED state).
func (r *session) clientEnd(err error) error {
	if errors.Is(err, errDisconnected) {
		r.disconnectEvent()
		return nil
	}
	r.conn.Abort()
	return err
}

// Run runs one side of rping with o until it is done or ctx ends; crc is
// --crc's MPA CRC policy (iWARP).
func Run(ctx context.Context, o Options, crc iwarp.CRCPolicy, stdout, stderr io.Writer) error {
	r := &session{o: o, stdout: stdout, stderr: stderr}
	return r.run(ctx, func(addr, src netip.Addr) (*cmSide, error) { return openDevice(o, crc, addr, src) })
}
