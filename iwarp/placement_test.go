package iwarp_test

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/iwarp"
)

// rxCounter counts the octets the softrdma side has read from its socket.
type rxCounter struct {
	mu   sync.Mutex
	n    int
	cond *sync.Cond
}

func (c *rxCounter) Sent([]byte) {}

func (c *rxCounter) Received(b []byte) {
	c.mu.Lock()
	c.n += len(b)
	c.cond.Broadcast()
	c.mu.Unlock()
}

// waitFor waits until n octets have been read, or fails after a bounded time.
func (c *rxCounter) waitFor(t testing.TB, n int) {
	t.Helper()
	stop := time.AfterFunc(10*time.Second, func() {
		c.mu.Lock()
		c.n = -1 << 40
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	defer stop.Stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.n >= 0 && c.n < n {
		c.cond.Wait()
	}
	if c.n < 0 {
		t.Fatalf("the softrdma side did not read %d octets", n)
	}
}

// TestNoPlacementAfterDereg: a hostile peer sends the first part of an FPDU whose
// payload goes into a region, waits until the softrdma side is reading the
// payload into the region, lets the test deregister the region, and then sends
// the rest. Once Dereg has returned no byte of the region may change (the reader
// checked the STag before the first byte: without the placement records, the
// rest of the payload landed in the deregistered memory). The softrdma side
// discards the rest and terminates with the error of an invalid STag (tagged) or
// a lost receive buffer (untagged).
func TestNoPlacementAfterDereg(t *testing.T) {
	const size = 14000 // payload octets; the region is as big
	const first = 6000 // payload octets sent before the Dereg (> the read-ahead buffer)
	cases := []struct {
		name  string
		setup func(s *side, mr *ib.MR, r *raw) // post what the FPDU needs
		hdr   func(mr *ib.MR) []byte           // the FPDU's DDP/RDMAP header
		layer iwarp.TerminateLayer
		etype uint8
		code  uint8
		recv  ib.WCStatus // the receive WR's status (0: none posted)
		send  ib.WCStatus // the READ's status (0: none posted)
		inv   bool        // a fast-register region, invalidated by LOCAL_INV instead
		mw    bool        // a type 2 window onto the region, invalidated by LOCAL_INV instead
	}{
		{name: "tagged write", hdr: func(mr *ib.MR) []byte {
			return tagged(iwarp.OpWrite, mr.RKey(), mr.Addr(), true)
		}, layer: iwarp.LayerDDP, etype: iwarp.ETypeDDPTaggedBuffer, code: iwarp.ECodeDDPTaggedInvalidSTag},
		{name: "tagged write, LOCAL_INV", inv: true, hdr: func(mr *ib.MR) []byte {
			return tagged(iwarp.OpWrite, mr.RKey(), mr.Addr(), true)
		}, layer: iwarp.LayerDDP, etype: iwarp.ETypeDDPTaggedBuffer, code: iwarp.ECodeDDPTaggedInvalidSTag},
		{name: "tagged write through a window, LOCAL_INV", mw: true, hdr: nil,
			layer: iwarp.LayerDDP, etype: iwarp.ETypeDDPTaggedBuffer, code: iwarp.ECodeDDPTaggedInvalidSTag},
		{name: "untagged send", setup: func(s *side, mr *ib.MR, r *raw) {
			s.qp.PostRecv(ib.RecvWR{WRID: 1, SGL: []ib.SGE{mr.SGE(0, size)}})
		}, hdr: func(mr *ib.MR) []byte {
			return untagged(iwarp.OpSend, 1, 0, true)
		}, layer: iwarp.LayerRDMAP, etype: iwarp.ETypeRDMAPLocalCatastrophic, code: iwarp.ECodeRDMAPLocalCatastrophic,
			recv: ib.WCLocProtErr},
		{name: "read response into the sink", setup: func(s *side, mr *ib.MR, r *raw) {
			s.qp.PostSend(ib.SendWR{WRID: 2, Opcode: ib.WRRDMARead, SGL: []ib.SGE{mr.SGE(0, size)}, RKey: 0x77, Signaled: true})
			r.waitFor(1) // the Read Request
		}, hdr: func(mr *ib.MR) []byte {
			return tagged(iwarp.OpReadResponse, mr.LKey(), mr.Addr(), true)
		}, layer: iwarp.LayerDDP, etype: iwarp.ETypeDDPTaggedBuffer, code: iwarp.ECodeDDPTaggedInvalidSTag,
			send: ib.WCWRFlushErr},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cnt := &rxCounter{}
			cnt.cond = sync.NewCond(&cnt.mu)
			lp := iwarp.ConnParams{Observe: func(net.Addr, net.Addr) iwarp.StreamObserver { return cnt }}
			s, ln, accepted := listening(t, lp)
			buf := make([]byte, size)
			var mr *ib.MR
			var err error
			switch {
			case c.inv:
				mr, err = s.pd.AllocMR(size)
			case c.mw:
				mr, err = s.pd.RegMR(buf, testAccess|ib.AccessMWBind)
			default:
				mr, err = s.pd.RegMR(buf, testAccess)
			}
			if err != nil {
				t.Fatal(err)
			}
			r := dialRaw(t, ln.Addr().String(), request(true, false, 4, 4))
			conn := <-accepted
			if conn == nil {
				t.FailNow()
			}
			if c.inv {
				s.qp.PostSend(ib.SendWR{WRID: 10, Opcode: ib.WRRegMR, Signaled: true,
					RegMR: ib.RegMRInfo{MR: mr, Buf: buf, Access: testAccess, Key: 0x42}})
				wantOK(t, wait(t, s.scq, 1)[0], 10, ib.WCRegMR)
			}
			hdr := c.hdr
			invKey := uint32(0) // the key LOCAL_INV invalidates
			if c.mw {
				// The region is reached only through a type 2 window bound to the QP.
				mw, err := s.pd.AllocMW(ib.MWType2)
				if err != nil {
					t.Fatal(err)
				}
				rkey := mw.RKey()&^0xff | 0x17
				s.qp.PostSend(ib.SendWR{WRID: 10, Opcode: ib.WRBindMW, Signaled: true, Bind: ib.MWBindInfo{MW: mw, RKey: rkey,
					MR: mr, Addr: mr.Addr(), Length: size, Access: ib.AccessRemoteWrite}})
				wantOK(t, wait(t, s.scq, 1)[0], 10, ib.WCBindMW)
				invKey = rkey
				hdr = func(mr *ib.MR) []byte { return tagged(iwarp.OpWrite, rkey, mr.Addr(), true) }
			} else if c.inv {
				invKey = mr.RKey()
			}
			if c.setup != nil {
				c.setup(s, mr, r)
			}
			payload := make([]byte, size)
			fill(payload, 0x5a)
			fpdu, err := iwarp.AppendFPDU(nil, true, hdr(mr), payload)
			if err != nil {
				t.Fatal(err)
			}
			cnt.mu.Lock()
			before := cnt.n // the Request, so far
			cnt.mu.Unlock()
			cut := len(fpdu) - size - iwarp.CRCLen + first // headers and the first payload octets
			r.write(fpdu[:cut])
			// Every octet sent has been read: beyond the read-ahead buffer, so the
			// reader is reading the payload into the region (the STag checked).
			cnt.waitFor(t, before+cut)
			if invKey != 0 {
				// LOCAL_INV returns with its completion: success, or flushed
				// when the connection is terminated for the invalidation.
				s.qp.PostSend(ib.SendWR{WRID: 11, Opcode: ib.WRLocalInv, InvalidateRKey: invKey, Signaled: true})
				if wc := wait(t, s.scq, 1)[0]; wc.WRID != 11 {
					t.Fatalf("completion %v, want the LOCAL_INV's", wc)
				}
			} else if err := mr.Dereg(); err != nil {
				t.Fatal(err)
			}
			snap := append([]byte(nil), buf...)
			r.nc.Write(fpdu[cut:]) // may fail: the softrdma side may have reset by now
			r.nc.(*net.TCPConn).CloseWrite()
			waitDone(t, conn)
			if n := countDiff(snap, buf); n != 0 {
				t.Fatalf("%d octets of the region changed after the Dereg or LOCAL_INV returned", n)
			}
			var te *iwarp.TerminateError
			if err := conn.Err(); !errors.As(err, &te) || !te.Local {
				t.Fatalf("connection error %v, want a local Terminate", err)
			}
			if te.Layer != c.layer || te.EType != c.etype || te.Code != c.code {
				t.Fatalf("local error %v, want layer %s etype %d code %d", te, c.layer, c.etype, c.code)
			}
			r.waitEOF()
			term := r.terminate()
			if term.Layer() != c.layer || term.EType() != c.etype || term.ErrorCode() != c.code {
				t.Fatalf("Terminate %s/%d/%d, want %s/%d/%d", term.Layer(), term.EType(), term.ErrorCode(), c.layer, c.etype, c.code)
			}
			if c.recv != 0 {
				if wc := wait(t, s.rcq, 1); wc[0].WRID != 1 || wc[0].Status != c.recv {
					t.Fatalf("receive completion %v, want %s", wc[0], c.recv)
				}
			}
			if c.send != 0 {
				if wc := wait(t, s.scq, 1); wc[0].WRID != 2 || wc[0].Status != c.send {
					t.Fatalf("send completion %v, want %s", wc[0], c.send)
				}
			}
		})
	}
}

// countDiff returns the number of positions where a and b differ.
func countDiff(a, b []byte) int {
	n := 0
	for i := range a {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}
