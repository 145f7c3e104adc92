package roce

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
)

func TestGRHAccessors(t *testing.T) {
	sgid := netip.MustParseAddr("::ffff:10.77.0.22").As16()
	dgid := netip.MustParseAddr("fe80::1").As16()
	g := make(GRH, GRHLen)
	f := GRHFields{TClass: 0xA5, FlowLabel: 0xFEDCB, PayLen: 1040, NxtHdr: NxtHdrBTH, HopLmt: 64, SGID: sgid, DGID: dgid}
	g.Encode(&f)
	want := append([]byte{0x6A, 0x5F, 0xED, 0xCB, 0x04, 0x10, 0x1B, 0x40}, sgid[:]...)
	want = append(want, dgid[:]...)
	if !bytes.Equal(g, want) {
		t.Fatalf("encoded %x\nwant    %x", []byte(g), want)
	}
	if g.Fields() != f {
		t.Fatalf("Fields %+v, want %+v", g.Fields(), f)
	}
	if g.IPVer() != 6 || g.SourceAddr() != netip.AddrFrom16(sgid) || g.DestinationAddr() != netip.AddrFrom16(dgid) {
		t.Fatal("accessors")
	}
	// Each setter changes its field only.
	g.SetTClass(0x01)
	g.SetFlowLabel(0xFFFFFFFF) // high bits dropped
	if g.TClass() != 0x01 || g.FlowLabel() != 0xFFFFF || g.IPVer() != 6 {
		t.Fatalf("tclass %#x flow %#x ver %d", g.TClass(), g.FlowLabel(), g.IPVer())
	}
	g.SetFlowLabel(0)
	g.SetIPVer(4)
	if g.TClass() != 0x01 || g.FlowLabel() != 0 || g.IPVer() != 4 {
		t.Fatal("setters overlap")
	}
	g.SetIPVer(6)
	g.SetNxtHdr(0x11)
	g.SetHopLmt(1)
	g.SetPayLen(16)
	g.SetSGID(dgid)
	g.SetDGID(sgid)
	if g.NxtHdr() != 0x11 || g.HopLmt() != 1 || g.PayLen() != 16 || g.SGID() != dgid || g.DGID() != sgid {
		t.Fatal("setters")
	}
}

func TestGRHCheck(t *testing.T) {
	g := make(GRH, GRHLen)
	g.Encode(&GRHFields{PayLen: 16, NxtHdr: NxtHdrBTH})
	if err := g.Check(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		fn   func(g GRH) GRH
		kind error
		text string
	}{
		{"short", func(g GRH) GRH { return g[:39] }, ErrTruncated, "grh: length 39 < 40"},
		{"ipver", func(g GRH) GRH { g.SetIPVer(4); return g }, ErrMalformed, "grh: ipver 4 != 6"},
		{"nxthdr", func(g GRH) GRH { g.SetNxtHdr(17); return g }, ErrUnsupported, "grh: nxthdr 17 != 27"},
		{"paylen", func(g GRH) GRH { g.SetPayLen(15); return g }, ErrMalformed, "grh: paylen 15 < 16"},
	} {
		c := GRH(bytes.Clone(g))
		err := tc.fn(c).Check()
		if !errors.Is(err, tc.kind) || err.Error() != tc.text {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.text)
		}
	}
}
