package iwarp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
)

// fuzzTarget is a connected softrdma QP whose peer is the fuzzer.
type fuzzTarget struct {
	ctx   *ib.Context
	pd    *ib.PD
	qp    *ib.QP
	scq   *ib.CQ
	rcq   *ib.CQ
	all   []byte // guard + region + guard
	mr    *ib.MR
	fmr   *ib.MR // a fast-register MR, invalidatable by the fuzzer's Sends
	nRecv int
}

const fuzzGuard = 64

func newFuzzTarget(tb testing.TB) *fuzzTarget {
	dev, _ := Open(DeviceConfig{Context: ib.ContextConfig{Seed: 1}})
	ft := &fuzzTarget{ctx: dev.Context()}
	ft.pd = ft.ctx.AllocPD()
	ft.scq, _ = ft.ctx.CreateCQ(256)
	ft.rcq, _ = ft.ctx.CreateCQ(256)
	var err error
	ft.qp, err = ft.ctx.CreateQP(ft.pd, ib.QPInitAttr{Type: ib.QPTypeRC, SendCQ: ft.scq, RecvCQ: ft.rcq,
		Cap: ib.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 2}})
	if err != nil {
		tb.Fatal(err)
	}
	ft.all = make([]byte, 4096+2*fuzzGuard)
	for i := range ft.all {
		ft.all[i] = 0xA5
	}
	region := ft.all[fuzzGuard : fuzzGuard+4096]
	ft.mr, _ = ft.pd.RegMR(region, ib.AccessLocalWrite|ib.AccessRemoteWrite|ib.AccessRemoteRead|ib.AccessRemoteAtomic)
	ft.fmr, _ = ft.pd.AllocMR(64)
	return ft
}

var (
	pairOnce sync.Once
	pairLn   net.Listener
)

// tcpPair returns the two ends of a loopback TCP connection (a pipe with
// half-close, which net.Pipe lacks).
func tcpPair(tb testing.TB) (net.Conn, net.Conn) {
	pairOnce.Do(func() {
		var err error
		if pairLn, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			tb.Fatal(err)
		}
	})
	ch := make(chan net.Conn, 1)
	go func() {
		c, err := pairLn.Accept()
		if err != nil {
			ch <- nil
			return
		}
		ch <- c
	}()
	theirs, err := net.Dial("tcp", pairLn.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	mine := <-ch
	if mine == nil {
		tb.Fatal("accept failed")
	}
	return mine, theirs
}

// fuzzOptions are selected by the first octet of a fuzz input.
func fuzzOptions(b byte) (crc, markers, p2p bool) { return b&1 != 0, b&2 != 0, b&4 != 0 }

// fuzzRequest is the MPA Request the fuzzer's side sends.
func fuzzRequest(crc, markers, p2p bool) []byte {
	w := MPAv2IRDORD(make([]byte, 4))
	w.SetIRD(4)
	w.SetORD(4)
	w.SetPeerToPeer(p2p)
	w.SetWriteRTR(p2p)
	b, _ := (&MPAFrameFields{Request: true, Revision: 2, Enhanced: true, CRC: crc, Markers: markers,
		Reserved: MPAFlagSoftRDMAExtensions, PrivateData: w}).Append(nil)
	return b
}

// runTCP connects the target as the MPA responder on one end of a loopback TCP
// connection, feeds data to it from the other after the exchange, and returns
// the ended connection. FuzzConnReceive runs the same exchange in memory
// (runMem); TestFuzzSeedsRun runs both and wants the same outcome.
func (ft *fuzzTarget) runTCP(tb testing.TB, crc, markers, p2p bool, data []byte) *Conn {
	mine, theirs := tcpPair(tb)
	defer theirs.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		theirs.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := theirs.Write(fuzzRequest(crc, markers, p2p)); err != nil {
			return
		}
		if _, err := readStartFrame(theirs, nil, false); err != nil {
			return
		}
		drained, first := make(chan struct{}), make(chan struct{})
		go func() {
			var b [1]byte
			if n, _ := theirs.Read(b[:]); n > 0 {
				close(first)
			}
			io.Copy(io.Discard, theirs)
			close(drained)
		}()
		if !p2p {
			// Without peer-to-peer mode the target's Read Request comes first:
			// once it is out, the READ is outstanding and REG_MR has run.
			select {
			case <-first:
			case <-drained:
			case <-time.After(5 * time.Second):
			}
		}
		theirs.Write(data)
		theirs.(*net.TCPConn).CloseWrite()
		<-drained
	}()
	mine.SetDeadline(time.Now().Add(10 * time.Second))
	c := ft.accept(tb, mine, markers)
	<-done
	return c
}

// runMem is runTCP with the fuzzer's end in memory (memPeer).
func (ft *fuzzTarget) runMem(tb testing.TB, crc, markers, p2p bool, data []byte) *Conn {
	return ft.accept(tb, newMemPeer(fuzzRequest(crc, markers, p2p), data, p2p), markers)
}

// accept runs the target's side on nc: it reads the MPA Request, accepts it,
// posts the work the fuzzer's traffic can complete or fail, and waits for the
// connection to end.
func (ft *fuzzTarget) accept(tb testing.TB, nc net.Conn, markers bool) *Conn {
	req, err := readStartFrame(nc, nil, true)
	if err != nil {
		tb.Fatal(err)
	}
	p := ConnParams{Markers: MarkersRequest, Linger: 200 * time.Millisecond, IRD: 2}
	if !markers {
		p.Markers = MarkersAccept
	}
	l := &Listener{p: p}
	r := &ConnRequest{l: l, nc: nc, req: req, v: judgeRequest(&p, req), peerPD: appPrivateData(req)}
	// Work the fuzzer's traffic can complete or fail: receives, a READ (whose
	// Read Request goes out first; the fuzzer may answer it), a fast-registration.
	// Receives are posted in INIT, before the peer can send anything.
	a := ib.QPAttr{QPState: ib.QPStateInit, Port: 1, AccessFlags: ib.AccessRemoteWrite | ib.AccessRemoteRead | ib.AccessRemoteAtomic}
	if err := ft.qp.Modify(&a, ib.QPAttrState|ib.QPAttrPKeyIndex|ib.QPAttrPort|ib.QPAttrAccessFlags); err != nil {
		tb.Fatal(err)
	}
	if err := ft.qp.PostRecv(ib.RecvWR{WRID: 1, SGL: []ib.SGE{ft.mr.SGE(0, 100), ft.mr.SGE(200, 50)}},
		ib.RecvWR{WRID: 2, SGL: []ib.SGE{ft.mr.SGE(1000, 3000)}}, ib.RecvWR{WRID: 3}); err != nil {
		tb.Fatal(err)
	}
	ft.nRecv = 3
	c, err := r.Accept(context.Background(), ft.qp, nil)
	if err != nil {
		tb.Fatal(err)
	}
	ft.qp.PostSend(
		ib.SendWR{WRID: 10, Opcode: ib.WRRegMR, RegMR: ib.RegMRInfo{MR: ft.fmr, Buf: ft.all[fuzzGuard+3000 : fuzzGuard+3064],
			Addr: 0x10000, Access: ib.AccessLocalWrite | ib.AccessRemoteWrite, Key: 7}},
		ib.SendWR{WRID: 11, Opcode: ib.WRRDMARead, SGL: []ib.SGE{ft.mr.SGE(2000, 64)}, RKey: 0x1234, RemoteAddr: 0x5000, Signaled: true},
	)
	t := time.NewTimer(5 * time.Second)
	defer t.Stop()
	select {
	case <-c.Done():
	case <-t.C:
		var b strings.Builder
		pprof.Lookup("goroutine").WriteTo(&b, 2)
		tb.Fatalf("connection did not end:\n%s", b.String())
	}
	return c
}

// check verifies the invariants after a fuzzed connection: it ended in ERR with
// every receive and the READ completed exactly once, a known error, and no
// octet outside the registered region touched.
func (ft *fuzzTarget) check(tb testing.TB, c *Conn) (recvs, sends []ib.WC) {
	if st := ft.qp.State(); st != ib.QPStateErr {
		tb.Fatalf("QP in %s after the connection ended", st)
	}
	var wcs, swcs [32]ib.WC
	n := ft.rcq.Poll(wcs[:])
	if n != ft.nRecv {
		tb.Fatalf("%d receive completions, want %d: %v", n, ft.nRecv, wcs[:n])
	}
	for i, wc := range wcs[:n] {
		if wc.WRID != uint64(i+1) {
			tb.Fatalf("receive completions out of order: %v", wcs[:n])
		}
	}
	// The READ completes once; the unsignaled REG_MR only if it was flushed
	// (the QP failed before the writer reached it).
	m := ft.scq.Poll(swcs[:])
	ok := m == 1 && swcs[0].WRID == 11 ||
		m == 2 && swcs[0].WRID == 10 && swcs[0].Status == ib.WCWRFlushErr && swcs[1].WRID == 11 && swcs[1].Status == ib.WCWRFlushErr
	if !ok {
		tb.Fatalf("send completions %v", swcs[:m])
	}
	switch err := c.Err(); {
	case err == nil, errors.Is(err, ErrPeerClosed), errors.Is(err, ErrTerminated), errors.Is(err, ErrConnectionLost):
	default:
		tb.Fatalf("unexpected connection error %v", err)
	}
	for i := 0; i < fuzzGuard; i++ {
		if ft.all[i] != 0xA5 || ft.all[len(ft.all)-1-i] != 0xA5 {
			tb.Fatal("an octet outside the registered region was written")
		}
	}
	return wcs[:n], swcs[:m]
}

// fuzzSeeds returns valid FPDU streams for the target (keys are reproducible:
// the Context seed is fixed).
func fuzzSeeds(tb testing.TB) [][]byte {
	ft := newFuzzTarget(tb)
	stag, va := ft.mr.RKey(), ft.mr.Addr()
	var seeds [][]byte
	frame := func(opts byte, ulpdus ...[]byte) {
		crc, markers, _ := fuzzOptions(opts)
		out := []byte{opts}
		var pos uint32
		for _, u := range ulpdus {
			var b []byte
			if markers {
				b, _ = AppendMarkedFPDU(nil, pos, crc, u)
			} else {
				b, _ = AppendFPDU(nil, crc, u)
			}
			pos += uint32(len(b))
			out = append(out, b...)
		}
		seeds = append(seeds, out)
	}
	hdr := func(f RDMAPFields, rest ...[]byte) []byte {
		d := f.DDPFields()
		b := make([]byte, d.Len())
		f.Encode(b)
		for _, r := range rest {
			b = append(b, r...)
		}
		return b
	}
	rr := make([]byte, ReadRequestLen)
	(&ReadRequestFields{SinkSTag: 9, Size: 16, SourceSTag: stag, SourceTO: va}).Encode(rr)
	at := AtomicRequest(make([]byte, AtomicRequestLen))
	at.SetOpcode(AtomicFetchAdd)
	at.SetRemoteSTag(stag)
	at.SetRemoteTO(va + 24)
	at.SetAddSwapData(1)
	inv := RDMAPFields{Opcode: OpSendInvalidate, Last: true, MSN: 2, InvalidateSTag: ft.fmr.LKey()&^0xff | 7}
	imm := make([]byte, ImmediateDataLen)
	for _, opts := range []byte{0, 1, 2, 3} {
		frame(opts,
			hdr(RDMAPFields{Opcode: OpSend, Last: false, MSN: 1}, []byte("hello, ")),
			hdr(RDMAPFields{Opcode: OpSend, Last: true, MSN: 1, MO: 7}, []byte("world")),
			hdr(RDMAPFields{Opcode: OpWrite, Last: true, STag: stag, TO: va + 100}, make([]byte, 70)),
			hdr(inv, []byte("x")),
			hdr(RDMAPFields{Opcode: OpReadRequest, Last: true, MSN: 1}, rr),
			hdr(RDMAPFields{Opcode: OpReadResponse, Last: true, STag: ft.mr.LKey(), TO: va + 2000}, make([]byte, 64)),
			hdr(RDMAPFields{Opcode: OpAtomicRequest, Last: true, MSN: 2}, at),
			hdr(RDMAPFields{Opcode: OpImmediateData, Last: true, MSN: 3}, imm),
		)
	}
	// p2p: the Write RTR first.
	frame(4, hdr(RDMAPFields{Opcode: OpWrite, Last: true}), hdr(RDMAPFields{Opcode: OpSend, Last: true, MSN: 1}, []byte("after the RTR")))
	// Linux siw's own traffic (an initiator's stream after its Request).
	_, fpdus := captureFPDUs(tb, "siw-rping.pcap")
	for i, f := range fpdus {
		if i < 8 {
			seeds = append(seeds, append([]byte{0}, f...))
		}
	}
	return seeds
}

// FuzzConnReceive feeds arbitrary octets, after a valid MPA exchange, to the
// receive path of a connected QP: whatever arrives, the connection ends with a
// known error (a Terminate, a lost connection or the peer's close), the QP in
// ERR with every WR completed exactly once and in order, no octet outside the
// registered memory written, and no panic.
//
// The fuzzer's end of the connection is in memory (memPeer, runMem): over
// loopback TCP an input cost a connection (~0.4 ms), and Go's minimization of
// each new interesting input (up to n²/2 runs for n octets) outlasted a short
// -fuzztime, which then counted a handful of executions (18 in 30 s). The
// readv(2) path of the reader (readSocket) needs a TCP socket: TestFuzzSeedsRun
// runs the seeds, and variants of them, over both and wants the same outcome.
func FuzzConnReceive(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 || len(data) > 1<<16 {
			return
		}
		crc, markers, p2p := fuzzOptions(data[0])
		ft := newFuzzTarget(t)
		c := ft.runMem(t, crc, markers, p2p, data[1:])
		ft.check(t, c)
	})
}

// fuzzOutcome is what a fuzzed connection left: its error's kind, the
// completions, and the registered memory.
type fuzzOutcome struct {
	err          string
	recvs, sends []ib.WC
	mem          []byte
}

func (ft *fuzzTarget) outcome(tb testing.TB, c *Conn) fuzzOutcome {
	recvs, sends := ft.check(tb, c)
	o := fuzzOutcome{recvs: recvs, sends: sends, mem: append([]byte(nil), ft.all...)}
	var te *TerminateError
	switch err := c.Err(); {
	case errors.As(err, &te):
		o.err = fmt.Sprintf("terminate local=%v layer=%v etype=%v code=%v", te.Local, te.Layer, te.EType, te.Code)
	case errors.Is(err, ErrConnectionLost):
		o.err = "connection lost"
	default:
		o.err = fmt.Sprint(err)
	}
	return o
}

// withoutWR returns wcs without the completions of WR id.
func withoutWR(wcs []ib.WC, id uint64) []ib.WC {
	var out []ib.WC
	for _, wc := range wcs {
		if wc.WRID != id {
			out = append(out, wc)
		}
	}
	return out
}

// TestFuzzSeedsRun: the seeds themselves are mostly valid traffic: they complete
// receives successfully, and the target survives them. Each seed, and without
// peer-to-peer mode its halves and a copy with an octet changed, ends the same
// way over loopback TCP (runTCP) and in memory (runMem, FuzzConnReceive's
// harness): the same error, completions and memory.
func TestFuzzSeedsRun(t *testing.T) {
	for i, s := range fuzzSeeds(t) {
		crc, markers, p2p := fuzzOptions(s[0])
		ft := newFuzzTarget(t)
		c := ft.runTCP(t, crc, markers, p2p, s[1:])
		recvs, sends := ft.check(t, c)
		if i < 4 {
			if err := c.Err(); err != ErrPeerClosed {
				t.Fatalf("seed %d (crc=%v markers=%v): connection ended with %v, want the peer's close", i, crc, markers, err)
			}
			if recvs[0].Status != ib.WCSuccess || recvs[0].ByteLen != 12 || string(ft.mr.Buf()[:12]) != "hello, world" ||
				recvs[1].Status != ib.WCSuccess || recvs[1].Flags&ib.WCFlagWithInv == 0 ||
				recvs[2].Status != ib.WCSuccess || recvs[2].Opcode != ib.WCRecvRDMAWithImm || recvs[2].ByteLen != 70 {
				t.Fatalf("seed %d: receives %v", i, recvs)
			}
			if sends[0].Status != ib.WCSuccess || sends[0].ByteLen != 64 {
				t.Fatalf("seed %d: READ %v", i, sends)
			}
		}
		variants := [][]byte{s}
		if !p2p {
			// Without peer-to-peer mode the data follows the Read Request in
			// both harnesses, so even broken traffic ends the same way; with it,
			// the data races the posting of the READ.
			flipped := append([]byte(nil), s...)
			flipped[len(s)/2] ^= 0x40
			variants = append(variants, s[:len(s)/2], s[:1+len(s)/4], flipped)
		}
		for j, v := range variants {
			ft := newFuzzTarget(t)
			tcp := ft.outcome(t, ft.runTCP(t, crc, markers, p2p, v[1:]))
			ft = newFuzzTarget(t)
			mem := ft.outcome(t, ft.runMem(t, crc, markers, p2p, v[1:]))
			if p2p {
				// The data may end the connection before the REG_MR is posted
				// (it is flushed then), in either harness.
				tcp.sends, mem.sends = withoutWR(tcp.sends, 10), withoutWR(mem.sends, 10)
			}
			if !reflect.DeepEqual(tcp, mem) {
				t.Errorf("seed %d variant %d: over TCP %s, %v, %v; in memory %s, %v, %v (memory equal: %v)", i, j,
					tcp.err, tcp.recvs, tcp.sends, mem.err, mem.recvs, mem.sends, bytes.Equal(tcp.mem, mem.mem))
			}
		}
	}
}
