package iwarp_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/header"
	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/iwarp"
)

// TestNegotiationMatrix connects softrdma to softrdma with every interesting pair
// of policies: revisions 1 and 2 both ways, CRC accept/request/require, markers
// accept/request/refuse, peer-to-peer with each RTR type, IRD/ORD, extensions,
// private data; and checks what both sides settled on, or that the connection is
// rejected with the R bit and a reason both sides can read.
func TestNegotiationMatrix(t *testing.T) {
	type want struct {
		rev                 uint8
		crc                 bool
		dialSend, dialRecv  bool // markers the dialer sends / receives
		p2p                 bool
		rtr                 iwarp.RTRFlags
		dialORD, listenORD  int
		ext                 bool
		rejectedByPeer      string // the dialer's RejectError reason contains this
		rejectedLocal       string // the dialer rejected the reply itself
		listenerErrContains string
	}
	cases := []struct {
		name   string
		dp, lp iwarp.ConnParams
		w      want
	}{
		{"rev2-rev2", iwarp.ConnParams{}, iwarp.ConnParams{},
			want{rev: 2, dialORD: 16, listenORD: 16, ext: true}},
		{"rev2-rev1", iwarp.ConnParams{Revision: 2}, iwarp.ConnParams{Revision: 1},
			want{rev: 1, dialORD: 16, listenORD: 16, ext: true}},
		{"rev1-rev2", iwarp.ConnParams{Revision: 1}, iwarp.ConnParams{Revision: 2},
			want{rev: 1, dialORD: 16, listenORD: 16, ext: true}},
		{"crc accept-accept", iwarp.ConnParams{}, iwarp.ConnParams{},
			want{rev: 2, dialORD: 16, listenORD: 16, ext: true}},
		{"crc request-accept", iwarp.ConnParams{CRC: iwarp.CRCRequest}, iwarp.ConnParams{},
			want{rev: 2, crc: true, dialORD: 16, listenORD: 16, ext: true}},
		{"crc accept-request", iwarp.ConnParams{}, iwarp.ConnParams{CRC: iwarp.CRCRequest},
			want{rev: 2, crc: true, dialORD: 16, listenORD: 16, ext: true}},
		{"crc require-accept", iwarp.ConnParams{CRC: iwarp.CRCRequire}, iwarp.ConnParams{},
			want{rev: 2, crc: true, dialORD: 16, listenORD: 16, ext: true}},
		{"crc require-require rev1", iwarp.ConnParams{Revision: 1, CRC: iwarp.CRCRequire}, iwarp.ConnParams{CRC: iwarp.CRCRequire},
			want{rev: 1, crc: true, dialORD: 16, listenORD: 16, ext: true}},
		{"crc accept-require", iwarp.ConnParams{}, iwarp.ConnParams{CRC: iwarp.CRCRequire},
			want{rejectedByPeer: "CRC required", listenerErrContains: "CRC required"}},
		{"crc accept-require rev1", iwarp.ConnParams{Revision: 1}, iwarp.ConnParams{CRC: iwarp.CRCRequire},
			want{rejectedByPeer: "CRC required", listenerErrContains: "CRC required"}},
		{"markers request-accept", iwarp.ConnParams{Markers: iwarp.MarkersRequest}, iwarp.ConnParams{},
			want{rev: 2, dialRecv: true, dialORD: 16, listenORD: 16, ext: true}},
		{"markers accept-request", iwarp.ConnParams{}, iwarp.ConnParams{Markers: iwarp.MarkersRequest},
			want{rev: 2, dialSend: true, dialORD: 16, listenORD: 16, ext: true}},
		{"markers request-request rev1", iwarp.ConnParams{Revision: 1, Markers: iwarp.MarkersRequest}, iwarp.ConnParams{Markers: iwarp.MarkersRequest},
			want{rev: 1, dialSend: true, dialRecv: true, dialORD: 16, listenORD: 16, ext: true}},
		{"markers request-refuse (siw)", iwarp.ConnParams{Markers: iwarp.MarkersRequest},
			iwarp.ConnParams{Markers: iwarp.MarkersRefuse, NoExtensions: true},
			want{rejectedByPeer: "markers not supported", listenerErrContains: "markers not supported"}},
		{"markers refuse-request", iwarp.ConnParams{Markers: iwarp.MarkersRefuse}, iwarp.ConnParams{Markers: iwarp.MarkersRequest},
			want{rejectedLocal: "the peer asks for markers"}},
		{"p2p write RTR", iwarp.ConnParams{PeerToPeer: true}, iwarp.ConnParams{},
			want{rev: 2, p2p: true, rtr: iwarp.RTRWrite, dialORD: 16, listenORD: 16, ext: true}},
		{"p2p read RTR", iwarp.ConnParams{PeerToPeer: true, RTR: iwarp.RTRRead | iwarp.RTRZeroLength}, iwarp.ConnParams{PeerToPeer: true},
			want{rev: 2, p2p: true, rtr: iwarp.RTRRead, dialORD: 16, listenORD: 16, ext: true}},
		{"p2p zero-length RTR", iwarp.ConnParams{PeerToPeer: true}, iwarp.ConnParams{RTR: iwarp.RTRZeroLength},
			want{rev: 2, p2p: true, rtr: iwarp.RTRZeroLength, dialORD: 16, listenORD: 16, ext: true}},
		{"p2p no matching RTR", iwarp.ConnParams{PeerToPeer: true, RTR: iwarp.RTRRead}, iwarp.ConnParams{RTR: iwarp.RTRWrite},
			want{rejectedByPeer: "no matching RTR option", listenerErrContains: "no matching RTR option"}},
		{"p2p required, not offered", iwarp.ConnParams{}, iwarp.ConnParams{PeerToPeer: true},
			want{rejectedByPeer: "peer-to-peer mode required", listenerErrContains: "peer-to-peer"}},
		{"p2p over rev1 is not used", iwarp.ConnParams{Revision: 1, PeerToPeer: true}, iwarp.ConnParams{},
			want{rev: 1, dialORD: 16, listenORD: 16, ext: true}},
		{"IRD/ORD exchange", iwarp.ConnParams{IRD: 4, ORD: 8}, iwarp.ConnParams{IRD: 2, ORD: 16},
			want{rev: 2, dialORD: 2, listenORD: 4, ext: true}},
		{"IRD/ORD not exchanged in rev1", iwarp.ConnParams{Revision: 1, IRD: 4, ORD: 8}, iwarp.ConnParams{IRD: 2, ORD: 16},
			want{rev: 1, dialORD: 8, listenORD: 16, ext: true}},
		{"no extensions", iwarp.ConnParams{}, iwarp.ConnParams{NoExtensions: true},
			want{rev: 2, dialORD: 16, listenORD: 16}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := newSide(t, 4096), newSide(t, 4096)
			c.dp.PrivateData, c.lp.PrivateData = []byte("from the dialer"), []byte("from the listener")
			ca, cb, err := connect(t, a.qp, b.qp, c.dp, c.lp)
			w := c.w
			if w.rejectedByPeer != "" || w.rejectedLocal != "" {
				var re *iwarp.RejectError
				if !errors.As(err, &re) || !errors.Is(err, iwarp.ErrRejected) {
					t.Fatalf("connect: %v, want a rejection", err)
				}
				if w.rejectedByPeer != "" && (!re.ByPeer || !strings.Contains(re.Reason, w.rejectedByPeer) ||
					!bytes.Contains(re.PrivateData, []byte(w.rejectedByPeer))) {
					t.Fatalf("rejection %+v, want one by the peer naming %q", re, w.rejectedByPeer)
				}
				if w.rejectedLocal != "" && (re.ByPeer || !strings.Contains(re.Reason, w.rejectedLocal)) {
					t.Fatalf("rejection %+v, want a local one naming %q", re, w.rejectedLocal)
				}
				if w.listenerErrContains != "" && !strings.Contains(err.Error(), w.listenerErrContains) {
					t.Fatalf("listener side error does not name %q: %v", w.listenerErrContains, err)
				}
				if a.qp.State() != ib.QPStateInit {
					t.Fatalf("a rejected Dial left the QP in %s, want INIT", a.qp.State())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer ca.Close()
			defer cb.Close()
			na, nb := ca.Negotiated(), cb.Negotiated()
			if na.Revision != w.rev || nb.Revision != w.rev || na.CRC != w.crc || nb.CRC != w.crc {
				t.Fatalf("revision/CRC: dialer %+v, listener %+v", na, nb)
			}
			if na.SendMarkers != w.dialSend || na.RecvMarkers != w.dialRecv || nb.RecvMarkers != w.dialSend || nb.SendMarkers != w.dialRecv {
				t.Fatalf("markers: dialer %+v, listener %+v", na, nb)
			}
			if na.PeerToPeer != w.p2p || nb.PeerToPeer != w.p2p || na.RTR != w.rtr || nb.RTR != w.rtr {
				t.Fatalf("peer-to-peer: dialer %+v, listener %+v", na, nb)
			}
			if na.ORD != w.dialORD || nb.ORD != w.listenORD || na.Extensions != w.ext || nb.Extensions != w.ext {
				t.Fatalf("ORD/extensions: dialer %+v, listener %+v", na, nb)
			}
			if a.qp.Query().MaxRdAtomic != w.dialORD || b.qp.Query().MaxDestRdAtomic != nb.IRD {
				t.Fatalf("QP attributes %+v", a.qp.Query())
			}
			if string(ca.PeerPrivateData()) != "from the listener" || string(cb.PeerPrivateData()) != "from the dialer" {
				t.Fatalf("private data %q / %q", ca.PeerPrivateData(), cb.PeerPrivateData())
			}
			// The connection carries traffic both ways (after the RTR, in p2p mode),
			// including a READ whose response is not the RTR's.
			a.conn, b.conn = ca, cb
			fill(b.buf[:100], 7)
			a.qp.PostSend(ib.SendWR{WRID: 1, Opcode: ib.WRRDMARead, SGL: []ib.SGE{a.mr.SGE(1000, 100)},
				RKey: b.mr.RKey(), RemoteAddr: b.mr.Addr(), Signaled: true})
			wantOK(t, wait(t, a.scq, 1)[0], 1, ib.WCRDMARead)
			if !bytes.Equal(a.buf[1000:1100], b.buf[:100]) {
				t.Fatal("read data differs")
			}
			barrier(t, a, b)
			err = a.qp.PostSend(ib.SendWR{WRID: 2, Opcode: ib.WRAtomicFetchAdd, SGL: []ib.SGE{a.mr.SGE(0, 8)},
				RKey: b.mr.RKey(), RemoteAddr: b.mr.Addr(), CompareAdd: 1})
			if w.ext != (err == nil) {
				t.Fatalf("posting an atomic with extensions=%v: %v", w.ext, err)
			}
		})
	}
}

// TestPrivateDataLimits: the largest private data each revision carries goes
// through both ways; one octet more is refused locally before anything is sent.
func TestPrivateDataLimits(t *testing.T) {
	for _, c := range []struct {
		rev uint8
		max int
	}{{1, 512}, {2, 508}} {
		a, b := newSide(t, 64), newSide(t, 64)
		pd := bytes.Repeat([]byte{0xab}, c.max)
		ca, cb, err := connect(t, a.qp, b.qp, iwarp.ConnParams{Revision: c.rev, PrivateData: pd},
			iwarp.ConnParams{Revision: c.rev, PrivateData: pd})
		if err != nil {
			t.Fatalf("rev %d with %d octets: %v", c.rev, c.max, err)
		}
		if !bytes.Equal(ca.PeerPrivateData(), pd) || !bytes.Equal(cb.PeerPrivateData(), pd) {
			t.Fatalf("rev %d private data truncated", c.rev)
		}
		ca.Close()
		cb.Close()
		a2 := newSide(t, 64)
		ln, _ := iwarp.Listen("127.0.0.1:0", iwarp.ConnParams{})
		_, err = iwarp.Dial(context.Background(), a2.qp, ln.Addr().String(),
			iwarp.ConnParams{Revision: c.rev, PrivateData: append(pd, 1)})
		ln.Close()
		var he *header.Error
		if !errors.As(err, &he) || !errors.Is(err, iwarp.ErrTooLong) || !strings.Contains(err.Error(), "private data length") {
			t.Fatalf("rev %d with %d octets: %v, want a private data length error", c.rev, c.max+1, err)
		}
	}
}

// TestApplicationReject: the listener's application sees the request's private
// data and rejects it with its own; the dialer gets both.
func TestApplicationReject(t *testing.T) {
	a := newSide(t, 64)
	ln, err := iwarp.Listen("127.0.0.1:0", iwarp.ConnParams{})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		req, err := ln.Next(ctx)
		if err != nil {
			t.Error(err)
			return
		}
		if string(req.PrivateData()) != "may I?" || req.Request().Revision() != 2 {
			t.Errorf("request private data %q", req.PrivateData())
		}
		req.Reject([]byte("no you may not"))
	}()
	_, err = iwarp.Dial(ctx, a.qp, ln.Addr().String(), iwarp.ConnParams{PrivateData: []byte("may I?")})
	var re *iwarp.RejectError
	if !errors.As(err, &re) || !re.ByPeer || string(re.PrivateData) != "no you may not" {
		t.Fatalf("Dial: %v", err)
	}
}

// TestDialBadQP: only an external QP in RESET or INIT can be connected, once.
func TestDialBadQP(t *testing.T) {
	ctx := ib.NewContext(ib.ContextConfig{})
	pd := ctx.AllocPD()
	cq, _ := ctx.CreateCQ(4)
	qp, _ := ctx.CreateQP(pd, ib.QPInitAttr{Type: ib.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: ib.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
	if _, err := iwarp.Dial(context.Background(), qp, "127.0.0.1:1", iwarp.ConnParams{}); !errors.Is(err, iwarp.ErrBadQP) {
		t.Fatalf("Dial with an IB QP: %v", err)
	}
	a, b := pair(t, 64, iwarp.ConnParams{}, iwarp.ConnParams{})
	if _, err := iwarp.Dial(context.Background(), a.qp, b.conn.LocalAddr().String(), iwarp.ConnParams{}); !errors.Is(err, iwarp.ErrBadQP) {
		t.Fatalf("Dial with a connected QP: %v", err)
	}
}
