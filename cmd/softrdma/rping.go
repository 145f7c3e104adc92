package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"time"

	"github.com/softrdma/softrdma/device"
	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/rdmacm"
)

// softrdma rping is rdma-core's rping (librdmacm/examples/rping.c), over
// iWARP or RoCE, wire-compatible with it: the client SENDs a 16-octet "rping
// info" (buffer address, big-endian 64 bits; rkey, 32; size, 32) naming its
// start buffer, the server RDMA READs it, SENDs a 16-octet "go ahead", the
// client SENDs the info of its sink buffer, the server RDMA WRITEs the data
// back into it and SENDs "go ahead" again; the client checks and prints, then
// the next ping.
//
// Both transports are driven by the same rdma_cm calls on an rdmacm.Manager
// (rping_cm.go); only the Manager's device differs (rping_iwarp.go,
// rping_roce.go).

const (
	// rpingInfoLen is sizeof(struct rping_rdma_info).
	rpingInfoLen = 16
	// rpingMinSize is rping.c's RPING_MIN_BUFSIZE: sizeof("INT_MAX") +
	// sizeof("rdma-ping-%d: ") (its stringify of INT_MAX yields the name).
	rpingMinSize = 8 + 15
	// rpingMaxSize is RPING_BUFSIZE - 1.
	rpingMaxSize = 64*1024 - 1
	// rpingIRDORD is rping's responder_resources and initiator_depth.
	rpingIRDORD = 1
	// rpingSettle is how long the iWARP client waits after ESTABLISHED before
	// its first SEND. Linux siw as the responder sends its Reply before it has
	// finished accepting (the QP's state lock is still held, the QP not yet in
	// RTS), and an FPDU that arrives in that window is left in the socket
	// unread until more data comes, which here is never: the server waits for
	// that SEND and the client for the answer (seen with siw 6.1 under qemu
	// TCG: the SEND ACKed by TCP, no Read Request ever). The kernel's rping
	// client is only slow enough by chance (its SEND follows rdma_cm's
	// ESTABLISHED event through user space). RFC 6581's RTR would close the
	// window, but siw offers no peer-to-peer mode by default.
	rpingSettle = 200 * time.Millisecond
)

const rpingUsage = `usage: softrdma rping -s [-a ADDR] [-p PORT] [flags]
       softrdma rping -c -a ADDR [-p PORT] [-C COUNT] [-S SIZE] [-vV] [flags]

rdma-core's rping over rdma_cm: iWARP on TCP (the default) or, with
--transport roce, the IB CM on a RoCE device; either side may be the real tool.

flags:
`

type rpingOptions struct {
	server, client    bool
	addr              string
	port              int
	count, size       int
	verbose, validate bool
	debug             bool
	transport         string
	crc               string
	pcap              string
	timeout           time.Duration
	settle            time.Duration
}

func rpingCmd(args []string, stdout, stderr io.Writer) int {
	var o rpingOptions
	fs := newFlagSet("rping", rpingUsage, stderr)
	fs.BoolVarP(&o.server, "server", "s", false, "server side")
	fs.BoolVarP(&o.client, "client", "c", false, "client side")
	fs.StringVarP(&o.addr, "addr", "a", "", "address (server: to bind, default any; client: of the server)")
	fs.IntVarP(&o.port, "port", "p", 7174, "port")
	fs.IntVarP(&o.count, "count", "C", 0, "ping count times (0: forever)")
	fs.IntVarP(&o.size, "size", "S", 64, "ping data size")
	fs.BoolVarP(&o.verbose, "verbose", "v", false, "display ping data to stdout")
	fs.BoolVarP(&o.validate, "validate", "V", false, "validate ping data")
	fs.BoolVarP(&o.debug, "debug", "d", false, "debug printfs (to stdout, as rping), the rdma_cm events included")
	fs.StringVar(&o.transport, "transport", "iwarp", "iwarp, or roce (rdma_cm over the IB CM on a RoCE device)")
	fs.StringVar(&o.crc, "crc", "accept", "iWARP: MPA CRC policy: accept (siw's default), request or require")
	fs.StringVar(&o.pcap, "pcap", "", "write the connection to this pcap file (iWARP: its TCP octets; RoCE: its frames)")
	fs.DurationVar(&o.timeout, "timeout", 0, "give up after this long (0: never)")
	fs.DurationVar(&o.settle, "settle", rpingSettle, "iWARP client: wait this long after ESTABLISHED before the first SEND (see rpingSettle)")
	if err := parseFlags(fs, args, stderr); err != nil {
		return flagsExit(err)
	}
	if o.server == o.client {
		fmt.Fprintln(stderr, "softrdma rping: exactly one of -s and -c")
		return 2
	}
	if o.client && o.addr == "" {
		fmt.Fprintln(stderr, "softrdma rping: the client needs -a ADDR")
		return 2
	}
	if o.size < rpingMinSize || o.size > rpingMaxSize {
		fmt.Fprintf(stderr, "Invalid size %d (valid range is %d to %d)\n", o.size, rpingMinSize, rpingMaxSize+1)
		return 2
	}
	if o.count < 0 {
		fmt.Fprintf(stderr, "Invalid count %d\n", o.count)
		return 2
	}
	if err := checkFlags(
		intRange("-p", o.port, 0, 65535),
		durationNonNegative("--timeout", o.timeout),
		durationNonNegative("--settle", o.settle),
	); err != nil {
		fmt.Fprintf(stderr, "softrdma rping: %v\n", err)
		return 2
	}
	crc, err := device.ParseCRCPolicy(o.crc)
	if err != nil {
		fmt.Fprintf(stderr, "softrdma rping: %v\n", err)
		return 2
	}
	switch o.transport {
	case "iwarp":
	case "roce":
		if o.server && o.addr == "" {
			fmt.Fprintln(stderr, "softrdma rping: --transport roce: the server needs -a ADDR (the RoCE device's address)")
			return 2
		}
	default:
		fmt.Fprintf(stderr, "softrdma rping: --transport %q: want iwarp or roce\n", o.transport)
		return 2
	}
	open := func(addr netip.Addr) (*rpingCM, error) { return rpingOpen(o, crc, addr) }
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	r := &rping{o: o, stdout: stdout, stderr: stderr}
	if err := r.run(ctx, open); err != nil {
		side := "client"
		if o.server {
			side = "server"
		}
		fmt.Fprintf(stderr, "rping %s failed: %v\n", side, err)
		return 1
	}
	return 0
}

// rping is one side's control block, as rping.c's struct rping_cb.
type rping struct {
	o              rpingOptions
	stdout, stderr io.Writer

	cmID    *rdmacm.ID // rping.c's cm_id: the listener (server) or the connection (client)
	cq      *ib.CQ
	qp      *ib.QP
	conn    *rpingCMConn // the connection, once ESTABLISHED
	recvMR  *ib.MR       // the info received
	sendMR  *ib.MR       // the info (client) or go-ahead (server) sent
	rdmaMR  *ib.MR       // server: READ sink and WRITE source; client: WRITE sink
	startMR *ib.MR       // client: READ source

	remoteAddr uint64
	remoteKey  uint32
	remoteLen  uint32
}

func (r *rping) debugf(format string, args ...any) {
	if r.o.debug { // rping.c's DEBUG_LOG is a printf: stdout
		fmt.Fprintf(r.stdout, format, args...)
	}
}

func (r *rping) postRecv() error {
	return r.qp.PostRecv(ib.RecvWR{WRID: 1, SGL: []ib.SGE{r.recvMR.SGE(0, rpingInfoLen)}})
}

// rpingEvent is what the completion handler reports to the main loop.
type rpingEvent int

const (
	rpingRecv rpingEvent = iota
	rpingReadDone
	rpingWriteDone
	rpingDisconnected
)

// errRpingDisconnected is the peer's disconnect in the middle of a ping.
var errRpingDisconnected = errors.New("disconnected")

// next waits for the next event the main loop waits for: a receive (the info is
// parsed and the receive reposted, as rping_cq_event_handler does), a READ or
// WRITE completion, or the disconnect (the connection's end, or its flushed WRs).
// SEND completions are consumed silently.
func (r *rping) next(ctx context.Context) (rpingEvent, error) {
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
					return rpingDisconnected, nil
				default:
				}
				return 0, err
			}
			continue
		}
		w := wc[0]
		if w.Status == ib.WCWRFlushErr {
			r.debugf("flushed %v\n", w.Opcode)
			return rpingDisconnected, nil
		}
		if w.Status != ib.WCSuccess {
			return 0, fmt.Errorf("cq completion failed status %d (%v)", int(w.Status), w.Status)
		}
		switch w.Opcode {
		case ib.WCSend:
			r.debugf("send completion\n")
		case ib.WCRDMAWrite:
			r.debugf("rdma write completion\n")
			return rpingWriteDone, nil
		case ib.WCRDMARead:
			r.debugf("rdma read completion\n")
			return rpingReadDone, nil
		case ib.WCRecv:
			r.debugf("recv completion\n")
			if w.ByteLen != rpingInfoLen {
				return 0, fmt.Errorf("Received bogus data, size %d", w.ByteLen)
			}
			b := r.recvMR.Buf()
			r.remoteAddr = binary.BigEndian.Uint64(b[0:])
			r.remoteKey = binary.BigEndian.Uint32(b[8:])
			r.remoteLen = binary.BigEndian.Uint32(b[12:])
			if r.o.server {
				r.debugf("Received rkey %x addr %x len %d from peer\n", r.remoteKey, r.remoteAddr, r.remoteLen)
			}
			if err := r.postRecv(); err != nil {
				return 0, fmt.Errorf("post recv error: %w", err)
			}
			return rpingRecv, nil
		default:
			return 0, fmt.Errorf("unexpected completion %v", w.Opcode)
		}
	}
}

// expect waits for event want; the disconnect ends the run as errRpingDisconnected.
func (r *rping) expect(ctx context.Context, want rpingEvent, what string) error {
	ev, err := r.next(ctx)
	if err != nil {
		return err
	}
	if ev == rpingDisconnected {
		return errRpingDisconnected
	}
	if ev != want {
		return fmt.Errorf("wait for %s: got event %d", what, ev)
	}
	return nil
}

// sendInfo SENDs the 16-octet send buffer, after formatting it with mr's
// address, rkey and the ping size (rping_format_send) if mr is not nil.
func (r *rping) sendInfo(mr *ib.MR) error {
	b := r.sendMR.Buf()
	if mr != nil {
		binary.BigEndian.PutUint64(b[0:], mr.Addr())
		binary.BigEndian.PutUint32(b[8:], mr.RKey())
		binary.BigEndian.PutUint32(b[12:], uint32(r.o.size))
		r.debugf("RDMA addr %x rkey %x len %d\n", mr.Addr(), mr.RKey(), r.o.size)
	}
	return r.qp.PostSend(ib.SendWR{WRID: 2, Opcode: ib.WRSend, Signaled: true, SGL: []ib.SGE{r.sendMR.SGE(0, rpingInfoLen)}})
}

// cString is b up to its first NUL, as printf's %s reads it.
func cString(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}

// rpingDisconnectWait bounds the wait for the DISCONNECTED event once the
// connection is seen to end (by its flushed WRs, or after rdma_disconnect).
const rpingDisconnectWait = 5 * time.Second

// disconnectEvent is rping.c's handling of RDMA_CM_EVENT_DISCONNECTED: it
// waits (bounded) for the event, which may come after the flushed WRs, prints
// its debug line and the message.
func (r *rping) disconnectEvent() {
	select {
	case <-r.conn.Done():
	case <-time.After(rpingDisconnectWait):
	}
	if ev, ok := r.conn.disconnected(); ok {
		r.cmEvent(ev)
	}
	side := "client"
	if r.o.server {
		side = "server"
	}
	fmt.Fprintf(r.stderr, "%s DISCONNECT EVENT...\n", side)
}

func (r *rping) serverPing(ctx context.Context) error {
	if err := r.expect(ctx, rpingRecv, "RDMA_READ_ADV"); err != nil {
		return err
	}
	r.debugf("server received sink adv\n")
	if r.remoteLen > uint32(r.o.size) {
		return fmt.Errorf("the client's buffer of %d octets is larger than -S %d", r.remoteLen, r.o.size)
	}
	if err := r.qp.PostSend(ib.SendWR{WRID: 3, Opcode: ib.WRRDMARead, Signaled: true,
		SGL: []ib.SGE{r.rdmaMR.SGE(0, int(r.remoteLen))}, RemoteAddr: r.remoteAddr, RKey: r.remoteKey}); err != nil {
		return fmt.Errorf("post send error: %w", err)
	}
	r.debugf("server posted rdma read req \n")
	if err := r.expect(ctx, rpingReadDone, "RDMA_READ_COMPLETE"); err != nil {
		return err
	}
	r.debugf("server received read complete\n")
	if r.o.verbose {
		fmt.Fprintf(r.stdout, "server ping data: %s\n", cString(r.rdmaMR.Buf()))
	}
	if err := r.sendInfo(nil); err != nil {
		return fmt.Errorf("post send error: %w", err)
	}
	r.debugf("server posted go ahead\n")
	if err := r.expect(ctx, rpingRecv, "RDMA_WRITE_ADV"); err != nil {
		return err
	}
	r.debugf("server received sink adv\n")
	n := len(cString(r.rdmaMR.Buf())) + 1
	n = min(n, r.o.size)
	if err := r.qp.PostSend(ib.SendWR{WRID: 4, Opcode: ib.WRRDMAWrite, Signaled: true,
		SGL: []ib.SGE{r.rdmaMR.SGE(0, n)}, RemoteAddr: r.remoteAddr, RKey: r.remoteKey}); err != nil {
		return fmt.Errorf("post send error: %w", err)
	}
	r.debugf("rdma write from lkey %x laddr %x len %d\n", r.rdmaMR.LKey(), r.rdmaMR.Addr(), n)
	if err := r.expect(ctx, rpingWriteDone, "RDMA_WRITE_COMPLETE"); err != nil {
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
func (r *rping) clientPings(ctx context.Context) error {
	start := byte(65)
	start0 := r.startMR.Buf()
	for ping := 0; r.o.count == 0 || ping < r.o.count; ping++ {
		// Put some ascii text in the buffer.
		cc := copy(start0, fmt.Sprintf("rdma-ping-%d: ", ping))
		c := start
		for i := cc; i < r.o.size; i++ {
			start0[i] = c
			if c++; c > 122 {
				c = 65
			}
		}
		if start++; start > 122 {
			start = 65
		}
		start0[r.o.size-1] = 0
		if err := r.sendInfo(r.startMR); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
		if err := r.expect(ctx, rpingRecv, "RDMA_WRITE_ADV"); err != nil {
			return r.clientEnd(err)
		}
		if err := r.sendInfo(r.rdmaMR); err != nil {
			return fmt.Errorf("post send error: %w", err)
		}
		if err := r.expect(ctx, rpingRecv, "RDMA_WRITE_COMPLETE"); err != nil {
			return r.clientEnd(err)
		}
		if r.o.validate && !bytes.Equal(start0, r.rdmaMR.Buf()) {
			fmt.Fprintln(r.stderr, "data mismatch!")
			r.conn.Close()
			return errors.New("data mismatch")
		}
		if r.o.verbose {
			fmt.Fprintf(r.stdout, "ping data: %s\n", cString(r.rdmaMR.Buf()))
		}
	}
	// rping_disconnect: an orderly close; the DISCONNECTED event follows.
	r.conn.Close()
	r.disconnectEvent()
	return nil
}

// clientEnd turns the server's disconnect in the middle of a ping into rping's
// exit status (0: rping_test_client returns 0 in the DISCONNECTED state).
func (r *rping) clientEnd(err error) error {
	if errors.Is(err, errRpingDisconnected) {
		r.disconnectEvent()
		return nil
	}
	r.conn.Abort()
	return err
}
