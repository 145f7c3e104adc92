package ibtransport_test

import (
	"bytes"
	"errors"
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/ibtransport/ibtest"
)

// TestRereg: MR.Rereg changes a region in place and keeps its keys, as rxe's
// rereg does, so the R_Key a peer was given goes on working: a WRITE through
// it after a change of translation lands in the new memory, after a change of
// access to local write only it fails with a remote access error, and after a
// move to another PD (not the responder QP's) likewise. A refused Rereg leaves
// the region as it was.
func TestRereg(t *testing.T) {
	const n = 256
	cases := []struct {
		name   string
		rereg  func(p *pairMR) ib.Rereg
		status ib.WCStatus
	}{
		{"translation", func(p *pairMR) ib.Rereg {
			return ib.Rereg{Buf: p.other, IOVA: 0x7000_0000, ChangeTranslation: true}
		}, ib.WCSuccess},
		{"access", func(p *pairMR) ib.Rereg {
			return ib.Rereg{Access: ib.AccessLocalWrite, ChangeAccess: true}
		}, ib.WCRemAccessErr},
		{"pd", func(p *pairMR) ib.Rereg {
			return ib.Rereg{PD: p.p.B.Ctx.AllocPD(), ChangePD: true}
		}, ib.WCRemAccessErr},
		{"access and pd back", func(p *pairMR) ib.Rereg {
			return ib.Rereg{PD: p.p.B.PD, ChangePD: true, Access: allAccess, ChangeAccess: true}
		}, ib.WCSuccess},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newPairMR(t, n)
			lkey, rkey := p.dst.LKey(), p.dst.RKey()
			if err := p.dst.Rereg(c.rereg(p)); err != nil {
				t.Fatal(err)
			}
			if p.dst.LKey() != lkey || p.dst.RKey() != rkey {
				t.Fatalf("keys 0x%x/0x%x after rereg, want 0x%x/0x%x", p.dst.LKey(), p.dst.RKey(), lkey, rkey)
			}
			post(t, p.p.A.QP, ib.SendWR{WRID: 9, Opcode: ib.WRRDMAWrite, SGL: []ib.SGE{p.src.SGE(0, n)},
				RemoteAddr: p.dst.Addr(), RKey: rkey, Signaled: true})
			wantWC(t, complete(t, p.p, p.p.A.CQ, 1)[0], 9, ib.WCRDMAWrite, c.status)
			if c.status != ib.WCSuccess {
				return
			}
			if !bytes.Equal(p.dst.Buf(), p.src.Buf()) {
				t.Errorf("the region's memory after the WRITE differs from what was written")
			}
			if c.name == "translation" && !bytes.Equal(p.first, make([]byte, n)) {
				t.Errorf("the WRITE after a change of translation reached the old memory")
			}
		})
	}
}

// TestReregRefused: a Rereg the verb refuses changes nothing.
func TestReregRefused(t *testing.T) {
	p := newPairMR(t, 64)
	mw, err := p.p.B.PD.AllocMW(ib.MWType1)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		r    ib.Rereg
		want error
		prep func(t *testing.T)
	}{
		{"remote write without local write", ib.Rereg{Access: ib.AccessRemoteWrite, ChangeAccess: true}, ib.ErrInvalidArgument, nil},
		{"pd of another context", ib.Rereg{PD: p.p.A.PD, ChangePD: true}, ib.ErrInvalidArgument, nil},
		{"window bound", ib.Rereg{Access: ib.AccessLocalWrite, ChangeAccess: true}, ib.ErrBusy, func(t *testing.T) {
			if _, err := p.p.B.QP.BindMW(mw, 7, true, ib.MWBindInfo{MR: p.dst, Addr: p.dst.Addr(), Length: 8, Access: ib.AccessRemoteWrite}); err != nil {
				t.Fatal(err)
			}
			wantWC(t, complete(t, p.p, p.p.B.CQ, 1)[0], 7, ib.WCBindMW, ib.WCSuccess)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.prep != nil {
				c.prep(t)
			}
			addr, access, lkey := p.dst.Addr(), p.dst.Access(), p.dst.LKey()
			if err := p.dst.Rereg(c.r); !errors.Is(err, c.want) {
				t.Fatalf("rereg: %v, want %v", err, c.want)
			}
			if p.dst.Addr() != addr || p.dst.Access() != access || p.dst.LKey() != lkey {
				t.Errorf("a refused rereg changed the region")
			}
		})
	}
	fresh := regMR(t, p.p.B.PD, make([]byte, 8), ib.AccessLocalWrite)
	if err := fresh.Dereg(); err != nil {
		t.Fatal(err)
	}
	if err := fresh.Rereg(ib.Rereg{Access: allAccess, ChangeAccess: true}); !errors.Is(err, ib.ErrDestroyed) {
		t.Errorf("rereg of a deregistered region: %v, want ErrDestroyed", err)
	}
}

// pairMR is an RC pair with a source region on A and a destination region on
// B (first, all access) and a second buffer for a change of translation.
type pairMR struct {
	p        *ibtest.Pair
	src, dst *ib.MR
	first    []byte
	other    []byte
}

func newPairMR(t *testing.T, n int) *pairMR {
	p := &pairMR{p: newRC(t), first: make([]byte, n), other: make([]byte, n)}
	p.src = regMR(t, p.p.A.PD, pattern(n, 3), ib.AccessLocalWrite)
	p.dst = regMR(t, p.p.B.PD, p.first, allAccess|ib.AccessMWBind)
	return p
}
