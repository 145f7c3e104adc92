package iwarp_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/header"
	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/iwarp"
)

// raw is a scripted peer: a plain TCP connection that does the MPA exchange by
// hand and then sends exactly the FPDUs a test tells it to, wrong ones included,
// while it records everything the softrdma side sends.
type raw struct {
	t     testing.TB
	nc    net.Conn
	req   iwarp.MPAFrame
	rep   iwarp.MPAFrame
	crc   bool
	mark  bool   // insert markers in what we send
	pos   uint32 // our marker-relative position
	mu    sync.Mutex
	in    []byte // what the softrdma side sent after its Reply
	eof   chan struct{}
	inErr error
}

// dialRaw connects to addr and sends the Request f; it returns after reading the
// Reply (which may reject).
func dialRaw(t testing.TB, addr string, f iwarp.MPAFrameFields) *raw {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	r := &raw{t: t, nc: nc, eof: make(chan struct{})}
	t.Cleanup(func() { nc.Close() })
	r.req, _ = f.Append(nil)
	if _, err := nc.Write(r.req); err != nil {
		t.Fatal(err)
	}
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	hdr := make([]byte, iwarp.MPAFrameHeaderLen)
	if _, err := io.ReadFull(nc, hdr); err != nil {
		t.Fatalf("reading the reply: %v", err)
	}
	pd := make([]byte, iwarp.MPAFrame(hdr).PrivateDataLen())
	if _, err := io.ReadFull(nc, pd); err != nil {
		t.Fatal(err)
	}
	r.rep = append(hdr, pd...)
	r.crc = r.req.CRC() || r.rep.CRC()
	r.mark = r.rep.Markers()
	go r.collect()
	return r
}

func (r *raw) collect() {
	var b [8192]byte
	for {
		n, err := r.nc.Read(b[:])
		r.mu.Lock()
		r.in = append(r.in, b[:n]...)
		r.mu.Unlock()
		if err != nil {
			r.inErr = err
			close(r.eof)
			return
		}
	}
}

// send writes one FPDU carrying the ULPDU pieces; flip XORs the CRC field.
func (r *raw) send(flip uint32, ulpdu ...[]byte) {
	r.t.Helper()
	var b []byte
	var err error
	if r.mark {
		b, err = iwarp.AppendMarkedFPDU(nil, r.pos, r.crc, ulpdu...)
	} else {
		b, err = iwarp.AppendFPDU(nil, r.crc, ulpdu...)
	}
	if err != nil {
		r.t.Fatal(err)
	}
	r.pos += uint32(len(b))
	if flip != 0 {
		c := binary.LittleEndian.Uint32(b[len(b)-4:])
		binary.LittleEndian.PutUint32(b[len(b)-4:], c^flip)
	}
	r.write(b)
}

func (r *raw) write(b []byte) {
	r.t.Helper()
	if _, err := r.nc.Write(b); err != nil {
		r.t.Fatalf("raw write: %v", err)
	}
}

// waitEOF waits until the softrdma side closed its direction.
func (r *raw) waitEOF() {
	r.t.Helper()
	select {
	case <-r.eof:
	case <-time.After(10 * time.Second):
		r.t.Fatal("the softrdma side did not close the connection")
	}
}

// waitFor waits until the softrdma side sent at least n octets after its Reply.
func (r *raw) waitFor(n int) {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		got := len(r.in)
		r.mu.Unlock()
		if got >= n {
			return
		}
		time.Sleep(time.Millisecond)
	}
	r.t.Fatalf("the softrdma side sent fewer than %d octets", n)
}

// records decodes what the softrdma side sent (its Reply, then FPDUs) with
// StreamDecoder, and fails on error records.
func (r *raw) records() []recordCopy {
	r.t.Helper()
	var neg iwarp.Negotiation
	neg.SetRequest(r.req.Flags(), r.req.Revision())
	var out []recordCopy
	d := iwarp.NewStreamDecoder(&neg, func(rec *iwarp.Record) {
		if rec.Err != nil || rec.Kind == iwarp.RecordError {
			r.t.Errorf("decoding the softrdma side: %v", rec.Err)
			return
		}
		if rec.Kind == iwarp.RecordFPDU {
			out = append(out, recordCopy{op: rec.RDMAP.Opcode(), ddp: append([]byte(nil), rec.DDP...)})
		}
	})
	d.Write(r.rep)
	r.mu.Lock()
	d.Write(r.in)
	r.mu.Unlock()
	d.Close()
	return out
}

type recordCopy struct {
	op  iwarp.Opcode
	ddp iwarp.DDP
}

// terminate returns the Terminate the softrdma side sent.
func (r *raw) terminate() iwarp.Terminate {
	r.t.Helper()
	for _, rec := range r.records() {
		if rec.op == iwarp.OpTerminate {
			if q, msn := rec.ddp.QN(), rec.ddp.MSN(); q != iwarp.QueueTerminate || msn != 1 || !rec.ddp.Last() {
				r.t.Fatalf("Terminate on queue %d MSN %d", q, msn)
			}
			t, err := iwarp.ParseTerminate(rec.ddp.Payload())
			if err != nil {
				r.t.Fatal(err)
			}
			return t
		}
	}
	r.t.Fatal("the softrdma side sent no Terminate")
	return nil
}

func untagged(op iwarp.Opcode, msn, mo uint32, last bool) []byte {
	f := iwarp.RDMAPFields{Opcode: op, MSN: msn, MO: mo, Last: last}
	b := make([]byte, iwarp.DDPUntaggedHeaderLen)
	f.Encode(b)
	return b
}

func tagged(op iwarp.Opcode, stag uint32, to uint64, last bool) []byte {
	f := iwarp.RDMAPFields{Opcode: op, STag: stag, TO: to, Last: last}
	b := make([]byte, iwarp.DDPTaggedHeaderLen)
	f.Encode(b)
	return b
}

func readRequest(msn uint32, rr iwarp.ReadRequestFields) []byte {
	b := untagged(iwarp.OpReadRequest, msn, 0, true)
	h := make([]byte, iwarp.ReadRequestLen)
	rr.Encode(h)
	return append(b, h...)
}

// listening runs a softrdma QP behind a listener with params lp and returns the
// side, the address and a channel that delivers its connection.
func listening(t testing.TB, lp iwarp.ConnParams) (*side, *iwarp.Listener, chan *iwarp.Conn) {
	t.Helper()
	s := newSide(t, 4096)
	ln, err := iwarp.Listen("127.0.0.1:0", lp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ch := make(chan *iwarp.Conn, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := ln.Accept(ctx, s.qp)
		if err != nil {
			t.Errorf("Accept: %v", err)
			close(ch)
			return
		}
		ch <- c
	}()
	return s, ln, ch
}

func request(crc, markers bool, ird, ord uint16) iwarp.MPAFrameFields {
	w := iwarp.MPAv2IRDORD(make([]byte, 4))
	w.SetIRD(ird)
	w.SetORD(ord)
	return iwarp.MPAFrameFields{Request: true, Revision: 2, Enhanced: true, CRC: crc, Markers: markers, PrivateData: w}
}

// TestBadPeerTerminates scripts a raw TCP peer that sends one bad FPDU after a
// valid MPA exchange. Each gets the Terminate RFC 5040/5041/5044 prescribe (layer,
// error type, code, and the offending DDP header echoed), a clear local error,
// the QP in ERR with its outstanding WRs flushed, and no panic.
func TestBadPeerTerminates(t *testing.T) {
	type env struct {
		s *side
		r *raw
	}
	cases := []struct {
		name    string
		lp      iwarp.ConnParams
		crc     bool
		markers bool
		ext     bool
		send    func(e env)
		layer   iwarp.TerminateLayer
		etype   uint8
		code    uint8
		errText string        // the local error names this
		field   string        // if set, the local error is a *header.Error for this "header: field"
		echoed  bool          // the Terminate carries the offending DDP header
		rdma    bool          // ... and the Read Request header
		recvs   []ib.WCStatus // statuses of the two receive WRs (nil: both flushed)
		noRead  bool          // post no READ (the case is about Read Responses)
		check   func(e env)   // after the end: what else must hold
	}{
		{name: "bad CRC", crc: true, send: func(e env) {
			e.r.send(0x1, untagged(iwarp.OpSend, 1, 0, true), []byte("payload"))
		}, layer: iwarp.LayerLLP, etype: iwarp.ETypeLLPMPA, code: iwarp.ECodeMPACRC, errText: "mpa: CRC", echoed: true},
		{name: "bad CRC on a tagged write", crc: true, send: func(e env) {
			e.r.send(0x80000000, tagged(iwarp.OpWrite, e.s.mr.RKey(), e.s.mr.Addr(), true), []byte("payload"))
		}, layer: iwarp.LayerLLP, etype: iwarp.ETypeLLPMPA, code: iwarp.ECodeMPACRC, errText: "mpa: CRC", echoed: true},
		{name: "FPDU longer than accepted", lp: iwarp.ConnParams{MaxRecvULPDU: 1000}, send: func(e env) {
			e.r.send(0, untagged(iwarp.OpSend, 1, 0, true), make([]byte, 1500))
		}, layer: iwarp.LayerLLP, etype: iwarp.ETypeLLPMPA, code: iwarp.ECodeMPAMarkerMismatch, errText: "ULPDU length 1518 > 1000"},
		{name: "ULPDU shorter than its DDP header", send: func(e env) {
			e.r.send(0, untagged(iwarp.OpSend, 1, 0, true)[:10])
		}, layer: iwarp.LayerLLP, etype: iwarp.ETypeLLPMPA, code: iwarp.ECodeMPAMarkerMismatch, errText: "segment length 10 < 18"},
		{name: "unknown STag", send: func(e env) {
			e.r.send(0, tagged(iwarp.OpWrite, 0xdeadbe00, 0x1000, true), []byte("payload"))
		}, layer: iwarp.LayerDDP, etype: iwarp.ETypeDDPTaggedBuffer, code: iwarp.ECodeDDPTaggedInvalidSTag,
			errText: "STag 0xdeadbe00", echoed: true},
		{name: "write beyond the region", send: func(e env) {
			e.r.send(0, tagged(iwarp.OpWrite, e.s.mr.RKey(), e.s.mr.Addr()+4090, true), []byte("payload"))
		}, layer: iwarp.LayerDDP, etype: iwarp.ETypeDDPTaggedBuffer, code: iwarp.ECodeDDPTaggedBaseBounds,
			errText: "out of bounds", echoed: true},
		{name: "write TO wraps", send: func(e env) {
			e.r.send(0, tagged(iwarp.OpWrite, e.s.mr.RKey(), ^uint64(0)-2, true), []byte("payload"))
		}, layer: iwarp.LayerDDP, etype: iwarp.ETypeDDPTaggedBuffer, code: iwarp.ECodeDDPTaggedTOWrap, errText: "wraps", echoed: true},
		{name: "write without remote write access", send: func(e env) {
			mr, _ := e.s.pd.RegMR(make([]byte, 64), ib.AccessLocalWrite|ib.AccessRemoteRead)
			e.r.send(0, tagged(iwarp.OpWrite, mr.RKey(), mr.Addr(), true), []byte("payload"))
		}, layer: iwarp.LayerRDMAP, etype: iwarp.ETypeRDMAPRemoteProtection, code: iwarp.ECodeRDMAPAccessRights,
			errText: "access right missing", echoed: true},
		{name: "READ beyond the region", send: func(e env) {
			e.r.send(0, readRequest(1, iwarp.ReadRequestFields{SinkSTag: 0x100, Size: 4097,
				SourceSTag: e.s.mr.RKey(), SourceTO: e.s.mr.Addr()}))
		}, layer: iwarp.LayerRDMAP, etype: iwarp.ETypeRDMAPRemoteProtection, code: iwarp.ECodeRDMAPBaseBounds,
			errText: "size 4097", echoed: true, rdma: true},
		{name: "READ of an unknown STag", send: func(e env) {
			e.r.send(0, readRequest(1, iwarp.ReadRequestFields{SinkSTag: 0x100, Size: 1, SourceSTag: 0x4242}))
		}, layer: iwarp.LayerRDMAP, etype: iwarp.ETypeRDMAPRemoteProtection, code: iwarp.ECodeRDMAPInvalidSTag,
			errText: "bad key", echoed: true, rdma: true},
		{name: "READs beyond the IRD", lp: iwarp.ConnParams{IRD: 1}, send: func(e env) {
			// The response to the first is held back: the raw peer does not read...
			// so send both in one write, before the softrdma side answers.
			var b []byte
			for msn := uint32(1); msn <= 4; msn++ {
				b, _ = iwarp.AppendFPDU(b, false, readRequest(msn, iwarp.ReadRequestFields{Size: 8, SourceSTag: e.s.mr.RKey(), SourceTO: e.s.mr.Addr()}))
			}
			e.r.write(b)
		}, layer: iwarp.LayerDDP, etype: iwarp.ETypeDDPUntaggedBuffer, code: iwarp.ECodeDDPUntaggedNoBuffer,
			errText: "beyond IRD 1", echoed: true, rdma: true},
		{name: "MSN out of range", send: func(e env) {
			e.r.send(0, untagged(iwarp.OpSend, 5, 0, true), []byte("x"))
		}, layer: iwarp.LayerDDP, etype: iwarp.ETypeDDPUntaggedBuffer, code: iwarp.ECodeDDPUntaggedMSNRange,
			errText: "MSN 5 != 1", echoed: true},
		{name: "MO out of order", send: func(e env) {
			e.r.send(0, untagged(iwarp.OpSend, 1, 0, false), []byte("first"))
			e.r.send(0, untagged(iwarp.OpSend, 1, 9, true), []byte("second"))
		}, layer: iwarp.LayerDDP, etype: iwarp.ETypeDDPUntaggedBuffer, code: iwarp.ECodeDDPUntaggedInvalidMO,
			errText: "MO 9 != 5", echoed: true},
		{name: "invalid queue number", send: func(e env) {
			h := untagged(iwarp.OpSend, 1, 0, true)
			iwarp.DDP(h).SetQN(7)
			e.r.send(0, h)
		}, layer: iwarp.LayerDDP, etype: iwarp.ETypeDDPUntaggedBuffer, code: iwarp.ECodeDDPUntaggedInvalidQN,
			errText: "queue number 7", echoed: true},
		{name: "bad DDP version", send: func(e env) {
			h := tagged(iwarp.OpWrite, 0, 0, true)
			iwarp.DDP(h).SetVersion(2)
			e.r.send(0, h)
		}, layer: iwarp.LayerDDP, etype: iwarp.ETypeDDPTaggedBuffer, code: iwarp.ECodeDDPTaggedInvalidVersion,
			errText: "version 2 != 1", echoed: true},
		{name: "bad RDMAP version", send: func(e env) {
			h := untagged(iwarp.OpSend, 1, 0, true)
			iwarp.RDMAP(h).SetVersion(0)
			e.r.send(0, h)
		}, layer: iwarp.LayerRDMAP, etype: iwarp.ETypeRDMAPRemoteOperation, code: iwarp.ECodeRDMAPInvalidVersion,
			errText: "version 0 != 1", echoed: true},
		{name: "reserved opcode", send: func(e env) {
			h := untagged(iwarp.OpSend, 1, 0, true)
			iwarp.RDMAP(h).SetOpcode(0xd)
			e.r.send(0, h)
		}, layer: iwarp.LayerRDMAP, etype: iwarp.ETypeRDMAPRemoteOperation, code: iwarp.ECodeRDMAPUnexpectedOpcode,
			errText: "opcode 13", echoed: true},
		{name: "atomic without the extensions", lp: iwarp.ConnParams{NoExtensions: true}, send: func(e env) {
			e.r.send(0, untagged(iwarp.OpAtomicRequest, 1, 0, true), make([]byte, iwarp.AtomicRequestLen))
		}, layer: iwarp.LayerRDMAP, etype: iwarp.ETypeRDMAPRemoteOperation, code: iwarp.ECodeRDMAPUnexpectedOpcode,
			errText: "not enabled", echoed: true},
		{name: "atomic misaligned", ext: true, send: func(e env) {
			a := iwarp.AtomicRequest(make([]byte, iwarp.AtomicRequestLen))
			a.SetOpcode(iwarp.AtomicFetchAdd)
			a.SetRemoteSTag(e.s.mr.RKey())
			a.SetRemoteTO(e.s.mr.Addr() + 4)
			e.r.send(0, untagged(iwarp.OpAtomicRequest, 1, 0, true), a)
		}, layer: iwarp.LayerRDMAP, etype: iwarp.ETypeRDMAPRemoteProtection, code: iwarp.ECodeRDMAPBaseBounds,
			errText: "atomic FetchAdd", echoed: true},
		{name: "Read Response without a Read", send: func(e env) {
			e.r.send(0, tagged(iwarp.OpReadResponse, 0x100, 0, true))
		}, layer: iwarp.LayerRDMAP, etype: iwarp.ETypeRDMAPRemoteOperation, code: iwarp.ECodeRDMAPUnexpectedOpcode,
			errText: "without an outstanding Read Request", echoed: true, noRead: true},
		{name: "Read Response to the wrong STag", send: func(e env) {
			e.r.send(0, tagged(iwarp.OpReadResponse, 0x100, e.s.mr.Addr()+200, true), make([]byte, 8))
		}, layer: iwarp.LayerDDP, etype: iwarp.ETypeDDPTaggedBuffer, code: iwarp.ECodeDDPTaggedInvalidSTag,
			errText: "!= the sink's", field: "rdmap: read response STag", echoed: true},
		{name: "Read Response beyond the sink", send: func(e env) {
			e.r.send(0, tagged(iwarp.OpReadResponse, e.s.mr.LKey(), e.s.mr.Addr()+200, true), make([]byte, 9))
		}, layer: iwarp.LayerDDP, etype: iwarp.ETypeDDPTaggedBuffer, code: iwarp.ECodeDDPTaggedBaseBounds,
			errText: "outside the sink", field: "rdmap: read response TO", echoed: true},
		{name: "send without a receive WR", send: func(e env) {
			e.r.send(0, untagged(iwarp.OpSend, 1, 0, true), []byte("x"))
			e.r.send(0, untagged(iwarp.OpSend, 2, 0, true), []byte("x"))
			e.r.send(0, untagged(iwarp.OpSend, 3, 0, true), []byte("x"))
		}, layer: iwarp.LayerDDP, etype: iwarp.ETypeDDPUntaggedBuffer, code: iwarp.ECodeDDPUntaggedNoBuffer,
			errText: "no receive WR", echoed: true, recvs: []ib.WCStatus{ib.WCSuccess, ib.WCSuccess}},
		{name: "send too long for the receive WR", send: func(e env) {
			e.r.send(0, untagged(iwarp.OpSend, 1, 0, true), make([]byte, 101))
		}, layer: iwarp.LayerDDP, etype: iwarp.ETypeDDPUntaggedBuffer, code: iwarp.ECodeDDPUntaggedTooLong,
			errText: "too long", echoed: true, recvs: []ib.WCStatus{ib.WCLocLenErr, ib.WCWRFlushErr}},
		{name: "send with invalidate of a regular MR", send: func(e env) {
			h := untagged(iwarp.OpSendInvalidate, 1, 0, true)
			iwarp.RDMAP(h).SetInvalidateSTag(e.s.mr.RKey())
			e.r.send(0, h, []byte("x"))
		}, layer: iwarp.LayerRDMAP, etype: iwarp.ETypeRDMAPRemoteProtection, code: iwarp.ECodeRDMAPCannotInvalidate,
			errText: "send with invalidate", echoed: true, recvs: []ib.WCStatus{ib.WCRemInvReqErr, ib.WCWRFlushErr}},
		{name: "marker mismatch", markers: true, lp: iwarp.ConnParams{Markers: iwarp.MarkersRequest}, send: func(e env) {
			b, _ := iwarp.AppendMarkedFPDU(nil, 0, false, untagged(iwarp.OpSend, 1, 0, true), make([]byte, 600))
			b[512+3] ^= 0x10 // the FPDUPTR of the second marker
			e.r.write(b)
		}, layer: iwarp.LayerLLP, etype: iwarp.ETypeLLPMPA, code: iwarp.ECodeMPAMarkerMismatch, errText: "marker: FPDU pointer",
			echoed: true},
		{name: "marker mismatch inside a write: nothing after it is placed", markers: true, lp: iwarp.ConnParams{Markers: iwarp.MarkersRequest},
			send: func(e env) {
				payload := bytes.Repeat([]byte{0x5a}, 1200)
				b, _ := iwarp.AppendMarkedFPDU(nil, 0, false, tagged(iwarp.OpWrite, e.s.mr.RKey(), e.s.mr.Addr(), true), payload)
				b[512+3] ^= 0x10 // the second marker, after 492 payload octets
				e.r.write(b)
			}, layer: iwarp.LayerLLP, etype: iwarp.ETypeLLPMPA, code: iwarp.ECodeMPAMarkerMismatch, errText: "marker: FPDU pointer",
			echoed: true, check: func(e env) {
				const before = 512 - iwarp.MarkerLen - iwarp.FPDUHeaderLen - iwarp.DDPTaggedHeaderLen
				if i := bytes.IndexByte(e.s.buf[before:1200], 0x5a); i >= 0 {
					e.r.t.Errorf("payload octet %d, after the bad marker, was placed", before+i)
				}
			}},
		{name: "markers negotiated, none sent", lp: iwarp.ConnParams{Markers: iwarp.MarkersRequest}, send: func(e env) {
			// Read as a marker, the ULPDU_Length and the control octets are
			// a bad FPDU pointer; read as the FPDU header, the STag's first
			// octets would be a ULPDU length of 4096 that never comes.
			b, _ := iwarp.AppendFPDU(nil, false, tagged(iwarp.OpWrite, 0x10000000, 0, true), make([]byte, 64))
			e.r.write(b)
		}, layer: iwarp.LayerLLP, etype: iwarp.ETypeLLPMPA, code: iwarp.ECodeMPAMarkerMismatch, errText: "marker: FPDU pointer"},
		{name: "p2p: a Send instead of the RTR", lp: iwarp.ConnParams{PeerToPeer: true}, send: func(e env) {
			e.r.send(0, untagged(iwarp.OpSend, 1, 0, true), []byte("hello"))
		}, layer: iwarp.LayerLLP, etype: iwarp.ETypeLLPMPA, code: iwarp.ECodeMPANoMatchingRTROption,
			errText: "not the write RTR", echoed: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, ln, accepted := listening(t, c.lp)
			req := request(c.crc, c.markers, 4, 4)
			if c.ext {
				req.Reserved = iwarp.MPAFlagSoftRDMAExtensions
			}
			if c.lp.PeerToPeer {
				w := iwarp.MPAv2IRDORD(req.PrivateData)
				w.SetPeerToPeer(true)
				w.SetWriteRTR(true)
			}
			r := dialRaw(t, ln.Addr().String(), req)
			if r.rep.Reject() {
				t.Fatalf("the softrdma side rejected the request: %q", r.rep.PrivateData())
			}
			conn := <-accepted
			if conn == nil {
				t.FailNow()
			}
			// Outstanding WRs to be flushed: two receives, and a READ the raw peer
			// never answers.
			s.qp.PostRecv(ib.RecvWR{WRID: 1, SGL: []ib.SGE{s.mr.SGE(0, 100)}}, ib.RecvWR{WRID: 2, SGL: []ib.SGE{s.mr.SGE(0, 100)}})
			switch {
			case c.lp.PeerToPeer: // held back until the RTR, which never comes
				s.qp.PostSend(ib.SendWR{WRID: 3, Opcode: ib.WRSend, Signaled: true})
			case !c.noRead:
				s.qp.PostSend(ib.SendWR{WRID: 3, Opcode: ib.WRRDMARead, SGL: []ib.SGE{s.mr.SGE(200, 8)}, RKey: 0x77, Signaled: true})
				r.waitFor(1) // the Read Request went out
			}
			c.send(env{s, r})
			r.waitEOF() // the Terminate, then FIN
			r.nc.Close()
			waitDone(t, conn)

			var te *iwarp.TerminateError
			err := conn.Err()
			if !errors.As(err, &te) || !te.Local || !errors.Is(err, iwarp.ErrTerminated) {
				t.Fatalf("connection error %v, want a local Terminate", err)
			}
			if te.Layer != c.layer || te.EType != c.etype || te.Code != c.code {
				t.Fatalf("local error %v, want layer %s etype %d code %d", err, c.layer, c.etype, c.code)
			}
			if !strings.Contains(err.Error(), c.errText) {
				t.Fatalf("local error %q does not name %q", err, c.errText)
			}
			var he *header.Error
			if c.field != "" && (!errors.As(err, &he) || he.Header+": "+he.Field != c.field) {
				t.Fatalf("local error %q is not a header error for %q", err, c.field)
			}
			term := r.terminate()
			if term.Layer() != c.layer || term.EType() != c.etype || term.ErrorCode() != c.code {
				t.Fatalf("Terminate %s/%d/%d, want %s/%d/%d", term.Layer(), term.EType(), term.ErrorCode(), c.layer, c.etype, c.code)
			}
			if c.echoed != term.DDPHeaderIncluded() || c.echoed != term.SegmentLengthValid() {
				t.Fatalf("Terminate D=%v M=%v, want %v", term.DDPHeaderIncluded(), term.SegmentLengthValid(), c.echoed)
			}
			if c.rdma != term.RDMAHeaderIncluded() {
				t.Fatalf("Terminate R=%v, want %v", term.RDMAHeaderIncluded(), c.rdma)
			}
			if s.qp.State() != ib.QPStateErr {
				t.Fatalf("QP in %s", s.qp.State())
			}
			recvs := c.recvs
			if recvs == nil {
				recvs = []ib.WCStatus{ib.WCWRFlushErr, ib.WCWRFlushErr}
			}
			rw := wait(t, s.rcq, 2)
			if rw[0].WRID != 1 || rw[0].Status != recvs[0] || rw[1].WRID != 2 || rw[1].Status != recvs[1] {
				t.Fatalf("receive completions %v, want %v", rw, recvs)
			}
			if !c.noRead {
				if sw := wait(t, s.scq, 1); sw[0].WRID != 3 || sw[0].Status != ib.WCWRFlushErr {
					t.Fatalf("send completion %v, want it flushed", sw)
				}
			}
			if c.check != nil {
				c.check(env{s, r})
			}
		})
	}
}

// TestPeerTerminate: a Terminate from the peer ends the connection with a
// *TerminateError naming it; the outstanding READ it is about completes with
// IBV_WC_REM_ACCESS_ERR and the rest is flushed.
func TestPeerTerminate(t *testing.T) {
	s, ln, accepted := listening(t, iwarp.ConnParams{})
	r := dialRaw(t, ln.Addr().String(), request(false, false, 4, 4))
	conn := <-accepted
	s.qp.PostRecv(ib.RecvWR{WRID: 1})
	s.qp.PostSend(
		ib.SendWR{WRID: 2, Opcode: ib.WRRDMARead, SGL: []ib.SGE{s.mr.SGE(0, 8)}, RKey: 0x77, Signaled: true},
		ib.SendWR{WRID: 3, Opcode: ib.WRRDMARead, SGL: []ib.SGE{s.mr.SGE(8, 8)}, RKey: 0x78, Signaled: true},
	)
	r.waitFor(2 * 52) // two Read Request FPDUs
	tf := iwarp.TerminateFields{Layer: iwarp.LayerRDMAP, EType: iwarp.ETypeRDMAPRemoteProtection, ErrorCode: iwarp.ECodeRDMAPInvalidSTag}
	tb := make([]byte, tf.Len())
	tf.Encode(tb)
	r.send(0, untagged(iwarp.OpTerminate, 1, 0, true), tb)
	r.waitEOF()
	r.nc.Close()
	waitDone(t, conn)
	var te *iwarp.TerminateError
	if err := conn.Err(); !errors.As(err, &te) || te.Local || te.Layer != iwarp.LayerRDMAP || te.Code != iwarp.ECodeRDMAPInvalidSTag ||
		!strings.Contains(err.Error(), "received Terminate (RDMA, Remote Protection Error, Invalid STag)") {
		t.Fatalf("connection error %v", err)
	}
	sw := wait(t, s.scq, 2)
	if sw[0].WRID != 2 || sw[0].Status != ib.WCRemAccessErr || sw[1].WRID != 3 || sw[1].Status != ib.WCWRFlushErr {
		t.Fatalf("send completions %v", sw)
	}
	if rw := wait(t, s.rcq, 1); rw[0].Status != ib.WCWRFlushErr {
		t.Fatalf("receive completion %v", rw)
	}
}

// TestBadPeerHandshake: a half MPA Request, garbage instead of one, or one with
// a bad field, are each dropped with a clear error from Listener.Next (the
// listener goes on), never a panic; a truncated FPDU ends the connection as lost.
func TestBadPeerHandshake(t *testing.T) {
	ln, err := iwarp.Listen("127.0.0.1:0", iwarp.ConnParams{HandshakeTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	good, _ := (&iwarp.MPAFrameFields{Request: true, Revision: 2}).Append(nil)
	bigPD := append([]byte(nil), good...)
	binary.BigEndian.PutUint16(bigPD[18:], 600)
	rev0 := append([]byte(nil), good...)
	rev0[17] = 0
	for _, c := range []struct {
		name   string
		send   []byte
		want   error
		text   string
		reply  bool // the listener answers with a rejecting Reply
		reason string
	}{
		{"half a request", good[:10], iwarp.ErrHandshake, "request frame: 10 of 20 octets", false, ""},
		{"garbage", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), iwarp.ErrBadKey, `key: "GET / HTTP/1.1.." is not the request key`, false, ""},
		{"a reply key", append([]byte(iwarp.MPAKeyReply), 0, 2, 0, 0), iwarp.ErrBadKey, "is not the request key", false, ""},
		{"private data too long", bigPD, iwarp.ErrTooLong, "private data length 600 > 512", false, ""},
		{"revision 0", rev0, iwarp.ErrRejected, "MPA revision 0", true, "softrdma: MPA revision 0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			nc, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			nc.Write(c.send)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			req, err := ln.Next(ctx)
			if req != nil || !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.text) {
				t.Fatalf("Next: %v, want %v naming %q", err, c.want, c.text)
			}
			nc.SetReadDeadline(time.Now().Add(5 * time.Second))
			got, err := io.ReadAll(nc)
			if err != nil {
				t.Fatalf("reading the listener's answer: %v", err)
			}
			if c.reply {
				m, err := iwarp.ParseMPAFrame(got)
				if err != nil || !m.IsReply() || !m.Reject() || string(m.PrivateData()) != c.reason {
					t.Fatalf("answer %q (%v), want a rejecting Reply with %q", got, err, c.reason)
				}
			} else if len(got) != 0 {
				t.Fatalf("the listener answered %q to a broken request, want a plain close", got)
			}
		})
	}
	// The listener still works.
	a, b := newSide(t, 64), newSide(t, 64)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if c, err := ln.Accept(ctx, b.qp); err == nil {
			defer c.Close()
			<-c.Done()
		}
	}()
	c, err := iwarp.Dial(context.Background(), a.qp, ln.Addr().String(), iwarp.ConnParams{})
	if err != nil {
		t.Fatalf("after bad peers: %v", err)
	}
	c.Close()
}

// TestTruncatedFPDU: the peer closes inside an FPDU: the connection is lost
// (no Terminate can follow a FIN), the QP goes to ERR.
func TestTruncatedFPDU(t *testing.T) {
	s, ln, accepted := listening(t, iwarp.ConnParams{})
	r := dialRaw(t, ln.Addr().String(), request(false, false, 4, 4))
	conn := <-accepted
	s.qp.PostRecv(ib.RecvWR{WRID: 1, SGL: []ib.SGE{s.mr.SGE(0, 100)}})
	b, _ := iwarp.AppendFPDU(nil, false, untagged(iwarp.OpSend, 1, 0, true), make([]byte, 50))
	r.write(b[:30])
	r.nc.(*net.TCPConn).CloseWrite()
	waitDone(t, conn)
	if err := conn.Err(); !errors.Is(err, iwarp.ErrConnectionLost) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("connection error %v", err)
	}
	if rw := wait(t, s.rcq, 1); rw[0].Status != ib.WCWRFlushErr {
		t.Fatalf("receive %v", rw)
	}
}

// TestDialBadListener: the initiator's side of broken handshakes.
func TestDialBadListener(t *testing.T) {
	for _, c := range []struct {
		name  string
		reply func(req []byte) []byte
		want  error
		text  string
	}{
		{"garbage", func([]byte) []byte { return []byte("SSH-2.0-OpenSSH_9.2p1 Debian\r\n") }, iwarp.ErrBadKey, "is not the reply key"},
		{"half a reply", func([]byte) []byte { return []byte(iwarp.MPAKeyReply)[:12] }, iwarp.ErrHandshake, "reply frame: 12 of 20 octets"},
		{"reject", func([]byte) []byte {
			b, _ := (&iwarp.MPAFrameFields{Revision: 1, Reject: true, PrivateData: []byte("busy")}).Append(nil)
			return b
		}, iwarp.ErrRejected, `"busy"`},
		{"revision above the request's", func([]byte) []byte {
			b, _ := (&iwarp.MPAFrameFields{Revision: 3}).Append(nil)
			return b
		}, iwarp.ErrHandshake, "reply revision 3"},
		{"no C while CRC is required", func([]byte) []byte {
			b, _ := (&iwarp.MPAFrameFields{Revision: 1}).Append(nil)
			return b
		}, iwarp.ErrRejected, "CRC required"},
		{"RTR not offered", func([]byte) []byte {
			w := iwarp.MPAv2IRDORD(make([]byte, 4))
			w.SetPeerToPeer(true)
			w.SetReadRTR(true)
			b, _ := (&iwarp.MPAFrameFields{Revision: 2, Enhanced: true, CRC: true, PrivateData: w}).Append(nil)
			return b
		}, iwarp.ErrTerminated, "No Matching RTR Option"},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			got := make(chan []byte, 1)
			go func() {
				nc, err := l.Accept()
				if err != nil {
					return
				}
				defer nc.Close()
				req := make([]byte, 24)
				io.ReadFull(nc, req)
				nc.Write(c.reply(req))
				if tc, ok := nc.(*net.TCPConn); ok {
					tc.CloseWrite()
				}
				nc.SetReadDeadline(time.Now().Add(5 * time.Second))
				rest, _ := io.ReadAll(nc)
				got <- rest
			}()
			a := newSide(t, 64)
			p := iwarp.ConnParams{CRC: iwarp.CRCRequire, PeerToPeer: true, RTR: iwarp.RTRWrite, HandshakeTimeout: 2 * time.Second}
			_, err = iwarp.Dial(context.Background(), a.qp, l.Addr().String(), p)
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.text) {
				t.Fatalf("Dial: %v, want %v naming %q", err, c.want, c.text)
			}
			if a.qp.State() != ib.QPStateInit {
				t.Fatalf("QP in %s after a failed Dial", a.qp.State())
			}
			rest := <-got
			if c.want == iwarp.ErrTerminated {
				// The initiator sent a Terminate (LLP, No Matching RTR) as its first FPDU.
				f, err := iwarp.ParseFPDU(rest)
				if err != nil || f.VerifyCRC() != nil {
					t.Fatalf("Terminate FPDU %x: %v", rest, err)
				}
				d, _ := iwarp.ParseDDP(f.ULPDU())
				tm, _ := iwarp.ParseTerminate(d.Payload())
				if iwarp.RDMAP(d).Opcode() != iwarp.OpTerminate || tm.Layer() != iwarp.LayerLLP || tm.ErrorCode() != iwarp.ECodeMPANoMatchingRTROption {
					t.Fatalf("sent %x", rest)
				}
			} else if len(rest) != 0 && !bytes.Equal(rest, nil) {
				t.Fatalf("the initiator sent %q after a failed exchange", rest)
			}
		})
	}
}
