package ibtransport_test

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/ibtransport/ibtest"
)

// TestSourceAddressCheck: a connected (RC, UC) QP takes packets only from the
// DGID of its address handle. Each case sends one packet on the wire, takes
// it off before delivery, and hands it to the receiving Context twice: first
// with a source GID other than the sender's (another host, another family, the
// receiver's own), which must be dropped as DropSourceAddress with no effect
// on memory or completions; then as it came, which must take effect. A UD QP
// takes the forged copy.
func TestSourceAddressCheck(t *testing.T) {
	stranger := netip.MustParseAddr("::ffff:10.0.0.3").As16()
	v6 := netip.MustParseAddr("fd00::2").As16()
	const n = 1000 // one packet at MTU 1024: UC would lose a message begun out of order
	for _, tt := range []struct {
		name string
		typ  ib.QPType
		// dir is the direction of the packet taken off the wire.
		dir ibtest.Direction
		op  ib.WROpcode
		// payload says the packet carries data (not an ACK).
		payload bool
		// checked says the forged copy must be dropped.
		checked bool
	}{
		{"RC WRITE", ib.QPTypeRC, ibtest.AToB, ib.WRRDMAWrite, true, true},
		{"RC SEND", ib.QPTypeRC, ibtest.AToB, ib.WRSend, true, true},
		{"RC ACK", ib.QPTypeRC, ibtest.BToA, ib.WRRDMAWrite, false, true},
		{"RC READ response", ib.QPTypeRC, ibtest.BToA, ib.WRRDMARead, true, true},
		{"UC WRITE", ib.QPTypeUC, ibtest.AToB, ib.WRRDMAWrite, true, true},
		{"UC SEND", ib.QPTypeUC, ibtest.AToB, ib.WRSend, true, true},
		{"UD SEND", ib.QPTypeUD, ibtest.AToB, ib.WRSend, true, false},
	} {
		for _, forged := range []struct {
			name string
			sgid func(dir ibtest.Direction) [16]byte
		}{
			{"another host", func(ibtest.Direction) [16]byte { return stranger }},
			{"IPv6", func(ibtest.Direction) [16]byte { return v6 }},
			{"the receiver itself", func(d ibtest.Direction) [16]byte { return ibtest.GID(1 - d) }},
		} {
			t.Run(tt.name+"/"+forged.name, func(t *testing.T) {
				p := newPair(t, tt.typ, ibtest.DefaultConnOptions())
				size := n
				src := regMR(t, p.A.PD, pattern(size, 9), ib.AccessLocalWrite)
				dst := newGuarded(t, p.B.PD, 40+size, allAccess)
				wr := ib.SendWR{WRID: 1, Opcode: tt.op, SGL: []ib.SGE{src.SGE(0, size)}, Signaled: true,
					RemoteAddr: dst.mr.Addr(), RKey: dst.mr.RKey()}
				want := pattern(size, 9)
				if tt.op == ib.WRRDMARead {
					// A reads B's region into its own.
					copy(dst.buf, pattern(size, 3))
					clear(src.Buf())
					want = pattern(size, 3)
				}
				if tt.op == ib.WRSend {
					postRecv(t, p.B.QP, ib.RecvWR{WRID: 2, SGL: []ib.SGE{dst.mr.SGE(0, 40+size)}})
				}
				if tt.typ == ib.QPTypeUD {
					wr.AH, wr.RemoteQPN, wr.RemoteQKey = ibtest.AddressOf(ibtest.BToA), p.B.QP.QPN(), 0x11111111
				}
				dir := tt.dir
				to, toQP, toCQ := p.B.Ctx, p.B.QP, p.B.CQ
				if dir == ibtest.BToA {
					to, toQP, toCQ = p.A.Ctx, p.A.QP, p.A.CQ
				}
				var taken []byte
				p.Wire.Filter = func(f *ibtest.Frame) ibtest.Action {
					if f.Dir == dir && f.Index == 0 {
						taken = bytes.Clone(f.Data)
						return ibtest.Action{Drop: true}
					}
					return ibtest.Action{}
				}
				post(t, p.A.QP, wr)
				if err := p.Wire.Run(func() bool { return taken != nil }, 10000); err != nil {
					t.Fatal(err)
				}
				p.Wire.Filter = nil
				before := toQP.Counters()
				got := func() []byte {
					if tt.op == ib.WRRDMARead {
						return src.Buf()
					}
					if tt.op == ib.WRSend && tt.typ == ib.QPTypeUD {
						return dst.buf[40:]
					}
					return dst.buf[:size]
				}
				wantGRH := ib.InputMeta{HasGRH: true, SGID: ibtest.GID(dir), DGID: ibtest.GID(1 - dir), HopLimit: 64}
				bad := wantGRH
				bad.SGID = forged.sgid(dir)
				err := to.Input(p.Wire.Clock.Now(), taken, bad)
				var de *ib.DropError
				if tt.checked {
					if !errors.As(err, &de) || de.Reason != ib.DropSourceAddress {
						t.Fatalf("packet from %v: Input = %v, want a %q drop", netip.AddrFrom16(bad.SGID), err, ib.DropSourceAddress)
					}
					after := toQP.Counters()
					if after.Drops[ib.DropSourceAddress] != before.Drops[ib.DropSourceAddress]+1 {
						t.Fatalf("drops %v, want one %q", after.Drops, ib.DropSourceAddress)
					}
					if after.AcksSent != before.AcksSent || after.NAKsSent != before.NAKsSent {
						t.Fatal("the forged packet was answered")
					}
					var wc [1]ib.WC
					if k := toCQ.Poll(wc[:]); k != 0 {
						t.Fatalf("the forged packet completed %v", wc[0])
					}
					if tt.payload && bytes.Equal(got(), want) {
						t.Fatal("the forged packet's payload was placed")
					}
					if err := to.Input(p.Wire.Clock.Now(), taken, wantGRH); err != nil {
						t.Fatalf("packet from the peer: %v", err)
					}
				} else if err != nil {
					t.Fatalf("UD packet from %v: %v", netip.AddrFrom16(bad.SGID), err)
				}
				wantWC(t, complete(t, p, p.A.CQ, 1)[0], 1, tt.op.WCOpcode(), ib.WCSuccess)
				if tt.op == ib.WRSend {
					wc := complete(t, p, p.B.CQ, 1)[0]
					wantWC(t, wc, 2, ib.WCRecv, ib.WCSuccess)
					if tt.typ == ib.QPTypeUD && [16]byte(dst.buf[8:24]) != bad.SGID {
						t.Fatalf("UD receive's GRH has SGID % x, want the packet's", dst.buf[8:24])
					}
				}
				if !bytes.Equal(got(), want) {
					t.Fatal("data differs after the peer's packet")
				}
				dst.check(t)
				wantDrops := uint64(0)
				if tt.checked {
					wantDrops = 1
				}
				if c := toQP.Counters(); c.Drops[ib.DropSourceAddress] != wantDrops {
					t.Fatalf("drops %v, want %d %q", c.Drops, wantDrops, ib.DropSourceAddress)
				}
			})
		}
	}
}
