package ibtransport_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/ibtransport/ibtest"
)

// flushAll returns the FLUSH work request, with info, of the whole region mr:
// the wr of a case.
func flushAtStart(info ib.FlushInfo) func(mr *ib.MR) ib.SendWR {
	return func(mr *ib.MR) ib.SendWR {
		return ib.SendWR{Opcode: ib.WRFlush, RemoteAddr: mr.Addr(), RKey: mr.RKey(), Flush: info}
	}
}

// atomicWriteAt returns a case's wr: an ATOMIC WRITE to offset off of the
// region mr.
func atomicWriteAt(off uint64) func(mr *ib.MR) ib.SendWR {
	return func(mr *ib.MR) ib.SendWR {
		return ib.SendWR{Opcode: ib.WRAtomicWrite, RemoteAddr: mr.Addr() + off, RKey: mr.RKey()}
	}
}

// TestAtomicWriteFlushErrors: a refused ATOMIC WRITE or FLUSH (IBTA Vol1 Annex
// A19) gets the NAK its class calls for and both sides see it: the requester's
// WR completes with the NAK's status and its QP goes to ERR; the responder
// (class C/D errors, IBTA 9.9.3) posts the async event and goes to ERR; memory is
// untouched. Misaligned or wrong-length ATOMIC WRITEs, a QP without remote write,
// and FLUSH placement types or selectivity levels that do not exist are invalid
// requests; a region without the right, a range outside it and a bad key are
// remote access errors.
func TestAtomicWriteFlushErrors(t *testing.T) {
	const size = 64
	type edit func(pk *ib.Packet)
	cases := []struct {
		name   string
		mrAcc  ib.Access // the target region's rights beyond local write
		qpAcc  ib.Access // the responder QP's rights; 0: the defaults
		wr     func(mr *ib.MR) ib.SendWR
		edit   edit // rewrites the request on the wire
		status ib.WCStatus
		nak    ib.NAKCode
		event  ib.AsyncEventType
	}{
		{name: "atomic write misaligned by 4", mrAcc: ib.AccessRemoteWrite,
			wr: atomicWriteAt(4), status: ib.WCRemInvReqErr, nak: ib.NAKInvalidRequest, event: ib.EventQPReqErr},
		{name: "atomic write misaligned by 1", mrAcc: ib.AccessRemoteWrite,
			wr: atomicWriteAt(9), status: ib.WCRemInvReqErr, nak: ib.NAKInvalidRequest, event: ib.EventQPReqErr},
		{name: "atomic write DMA length 16 on the wire", mrAcc: ib.AccessRemoteWrite,
			wr: atomicWriteAt(0), edit: func(pk *ib.Packet) { pk.RETH.SetDMALen(16) },
			status: ib.WCRemInvReqErr, nak: ib.NAKInvalidRequest, event: ib.EventQPReqErr},
		{name: "atomic write, region without remote write", mrAcc: ib.AccessRemoteRead | ib.AccessRemoteAtomic,
			wr: atomicWriteAt(0), status: ib.WCRemAccessErr, nak: ib.NAKRemoteAccessError, event: ib.EventQPAccessErr},
		{name: "atomic write, QP without remote write", mrAcc: ib.AccessRemoteWrite, qpAcc: ib.AccessRemoteRead | ib.AccessRemoteAtomic,
			wr: atomicWriteAt(0), status: ib.WCRemInvReqErr, nak: ib.NAKInvalidRequest, event: ib.EventQPReqErr},
		{name: "atomic write past the end", mrAcc: ib.AccessRemoteWrite,
			wr: atomicWriteAt(size), status: ib.WCRemAccessErr, nak: ib.NAKRemoteAccessError, event: ib.EventQPAccessErr},
		{name: "flush placement type 0 on the wire", mrAcc: ib.AccessFlushGlobal,
			wr: flushAtStart(ib.FlushInfo{Len: 8, Type: 1}), edit: func(pk *ib.Packet) { pk.FETH.SetPlacementType(0) },
			status: ib.WCRemInvReqErr, nak: ib.NAKInvalidRequest, event: ib.EventQPReqErr},
		{name: "flush placement type 4", mrAcc: ib.AccessFlushGlobal | ib.AccessFlushPersistent,
			wr: flushAtStart(ib.FlushInfo{Len: 8, Type: 4}), status: ib.WCRemInvReqErr, nak: ib.NAKInvalidRequest, event: ib.EventQPReqErr},
		{name: "flush placement type 5", mrAcc: ib.AccessFlushGlobal | ib.AccessFlushPersistent,
			wr: flushAtStart(ib.FlushInfo{Len: 8, Type: 5}), status: ib.WCRemInvReqErr, nak: ib.NAKInvalidRequest, event: ib.EventQPReqErr},
		{name: "flush selectivity level 2", mrAcc: ib.AccessFlushGlobal,
			wr: flushAtStart(ib.FlushInfo{Len: 8, Type: 1, Level: 2}), status: ib.WCRemInvReqErr, nak: ib.NAKInvalidRequest, event: ib.EventQPReqErr},
		{name: "flush global without the right", mrAcc: ib.AccessRemoteWrite | ib.AccessFlushPersistent,
			wr: flushAtStart(ib.FlushInfo{Len: 8, Type: 1}), status: ib.WCRemAccessErr, nak: ib.NAKRemoteAccessError, event: ib.EventQPAccessErr},
		{name: "flush global and persistent with only global", mrAcc: ib.AccessFlushGlobal,
			wr: flushAtStart(ib.FlushInfo{Len: 8, Type: 3}), status: ib.WCRemAccessErr, nak: ib.NAKRemoteAccessError, event: ib.EventQPAccessErr},
		{name: "flush whole region without the right", mrAcc: ib.AccessFlushGlobal,
			wr: func(mr *ib.MR) ib.SendWR {
				return ib.SendWR{Opcode: ib.WRFlush, RKey: mr.RKey(), Flush: ib.FlushInfo{Type: 2, Level: 1}}
			}, status: ib.WCRemAccessErr, nak: ib.NAKRemoteAccessError, event: ib.EventQPAccessErr},
		{name: "flush range one byte past the end", mrAcc: ib.AccessFlushGlobal,
			wr: flushAtStart(ib.FlushInfo{Len: size + 1, Type: 1}), status: ib.WCRemAccessErr, nak: ib.NAKRemoteAccessError, event: ib.EventQPAccessErr},
		{name: "flush whole region with a bad key", mrAcc: ib.AccessFlushGlobal,
			wr: func(mr *ib.MR) ib.SendWR {
				return ib.SendWR{Opcode: ib.WRFlush, RKey: mr.RKey() ^ 0x80, Flush: ib.FlushInfo{Type: 1, Level: 1}}
			}, status: ib.WCRemAccessErr, nak: ib.NAKRemoteAccessError, event: ib.EventQPAccessErr},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := ibtest.DefaultConnOptions()
			if c.qpAcc != 0 {
				o.Access = c.qpAcc
			}
			p := newPair(t, ib.QPTypeRC, o)
			remote := newGuarded(t, p.B.PD, size, ib.AccessLocalWrite|c.mrAcc)
			init := pattern(size, 1)
			copy(remote.buf, init)
			val := regMR(t, p.A.PD, pattern(8, 0x40), 0)
			wr := c.wr(remote.mr)
			wr.WRID, wr.Signaled = 1, true
			if wr.Opcode == ib.WRAtomicWrite {
				wr.SGL = []ib.SGE{val.SGE(0, 8)}
			}
			if c.edit != nil {
				p.Wire.Filter = filterDir(ibtest.AToB, func(i int, pk *ib.Packet) ibtest.Action {
					if i == 0 {
						c.edit(pk)
					}
					return ibtest.Action{}
				})
			}
			post(t, p.A.QP, wr, ib.SendWR{WRID: 2, Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{val.SGE(0, 8)},
				RemoteAddr: remote.mr.Addr(), RKey: remote.mr.RKey(), Signaled: true})
			wcs := complete(t, p, p.A.CQ, 2)
			if wc := wcs[0]; wc.WRID != 1 || wc.Status != c.status || wc.Opcode != wr.Opcode.WCOpcode() {
				t.Fatalf("completion %v, want %s %s", wc, wr.Opcode.WCOpcode(), c.status)
			}
			wantWC(t, wcs[1], 2, ib.WCRDMAWrite, ib.WCWRFlushErr)
			if a, b := p.A.QP.State(), p.B.QP.State(); a != ib.QPStateErr || b != ib.QPStateErr {
				t.Fatalf("states %s and %s, want ERR and ERR", a, b)
			}
			if n := p.B.QP.Counters().NAKsSent; n[c.nak] != 1 {
				t.Fatalf("NAKs sent %v, want one %s", n, c.nak)
			}
			if !hasEvent(p.B.Ctx, c.event, p.B.QP) {
				t.Fatalf("no %s for the responder QP", c.event)
			}
			if !bytes.Equal(remote.buf, init) {
				t.Fatal("a refused request changed the memory")
			}
			remote.check(t)
		})
	}
}

// hasEvent drains c's async events and reports whether one of type typ for qp
// was among them.
func hasEvent(c *ib.Context, typ ib.AsyncEventType, qp *ib.QP) bool {
	found := false
	for {
		select {
		case ev := <-c.AsyncEvents():
			if ev.Type == typ && ev.QP == qp {
				found = true
			}
		default:
			return found
		}
	}
}

// TestRCAtomicWriteFlushOnce: a duplicate ATOMIC WRITE or FLUSH — resent after
// its response was lost, or a copy of the request arriving after it was executed
// — is answered from the responder's saved result, not executed again (IBTA
// 9.7.5.1.x responder resources; rxe replays them from the resource too). To see
// a second execution, the test changes the target between the first execution
// and the duplicate: it overwrites the ATOMIC WRITE's word (a second execution
// would write it back), and deregisters the FLUSH's region (a second execution
// would fail its key check with a remote access NAK). The requester completes
// once, with success, and both QPs stay in RTS.
func TestRCAtomicWriteFlushOnce(t *testing.T) {
	const marker = 0xdeadbeefcafef00d
	for _, op := range []ib.WROpcode{ib.WRAtomicWrite, ib.WRFlush} {
		for _, how := range []string{"lost response", "late copy of the request", "lost response and duplicates"} {
			t.Run(op.String()+"/"+how, func(t *testing.T) {
				p := newRC(t)
				remote := newGuarded(t, p.B.PD, 16, allAccess|ib.AccessFlushGlobal)
				val := make([]byte, 8)
				binary.NativeEndian.PutUint64(val, 0x1122334455667788)
				local := regMR(t, p.A.PD, val, 0)
				// change runs once the request was executed.
				changed := false
				change := func() {
					if changed {
						return
					}
					changed = true
					if op == ib.WRAtomicWrite {
						if !bytes.Equal(remote.buf[8:], val) {
							t.Error("the ATOMIC WRITE did not land")
						}
						binary.NativeEndian.PutUint64(remote.buf[8:], marker)
						return
					}
					if err := remote.mr.Dereg(); err != nil {
						t.Error(err)
					}
				}
				var request []byte
				p.Wire.Filter = func(f *ibtest.Frame) ibtest.Action {
					switch {
					case f.Dir == ibtest.AToB && f.Index == 0:
						request = bytes.Clone(f.Data)
						if how == "lost response and duplicates" {
							return ibtest.Action{Duplicates: 2}
						}
					case f.Dir == ibtest.BToA && f.Index == 0 && how != "late copy of the request":
						change()
						return ibtest.Action{Drop: true}
					}
					return ibtest.Action{}
				}
				wr := ib.SendWR{WRID: 1, Opcode: op, RemoteAddr: remote.mr.Addr() + 8, RKey: remote.mr.RKey(), Signaled: true}
				if op == ib.WRAtomicWrite {
					wr.SGL = []ib.SGE{local.SGE(0, 8)}
				} else {
					wr.Flush = ib.FlushInfo{Len: 8, Type: ib.FlushPlacementGlobal}
				}
				post(t, p.A.QP, wr)
				wantWC(t, complete(t, p, p.A.CQ, 1)[0], 1, op.WCOpcode(), ib.WCSuccess)
				if how == "late copy of the request" {
					change()
					meta := ib.InputMeta{HasGRH: true, SGID: ibtest.GID(ibtest.AToB), DGID: ibtest.GID(ibtest.BToA), HopLimit: 64}
					if err := p.B.Ctx.Input(p.Wire.Clock.Now(), request, meta); err != nil {
						t.Fatalf("duplicate request: %v", err)
					}
				}
				noMore(t, p, p.A.CQ)
				if a, b := p.A.QP.State(), p.B.QP.State(); a != ib.QPStateRTS || b != ib.QPStateRTS {
					t.Fatalf("states %s and %s, want RTS", a, b)
				}
				if op == ib.WRAtomicWrite {
					if got := binary.NativeEndian.Uint64(remote.buf[8:]); got != marker {
						t.Fatalf("memory %#x after the duplicate, want %#x: the ATOMIC WRITE ran twice", got, uint64(marker))
					}
					remote.check(t)
				}
				b, a := p.B.QP.Counters(), p.A.QP.Counters()
				if b.DuplicateRequests == 0 || b.NAKsSent != [len(b.NAKsSent)]uint64{} {
					t.Fatalf("responder: %d duplicate requests, NAKs sent %v", b.DuplicateRequests, b.NAKsSent)
				}
				if how == "late copy of the request" && (b.DuplicateRequests != 1 || a.DuplicateResponses != 1) {
					t.Fatalf("duplicate requests %d, duplicate responses %d; want 1 and 1", b.DuplicateRequests, a.DuplicateResponses)
				}
			})
		}
	}
}
