package pingpong

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/ibtransport"
	oobpp "github.com/softrdma/softrdma/oob/pingpong"
)

// TestCFloat: numbers print as glibc's printf("%.2f") prints them (inf, -nan).
func TestCFloat(t *testing.T) {
	zero := 0.0
	for v, want := range map[float64]string{1.005: "1.00", 8192000 * 8.0 / 12345: "5308.71", 1 / zero: "inf", -1 / zero: "-inf"} {
		if got := cFloat(v); got != want {
			t.Errorf("cFloat(%v) = %q, want %q", v, got, want)
		}
	}
	if got := cFloat(zero / zero); got != "-nan" {
		t.Errorf("NaN: %q", got)
	}
}

// TestRxDepthPostsReceives checks what -r does to the QP, as
// Run sets it up: the receive queue holds exactly rx-depth receives,
// and the CQ room for them and the send.
func TestRxDepthPostsReceives(t *testing.T) {
	for _, mode := range []string{"rc", "uc", "ud"} {
		t.Run(mode, func(t *testing.T) {
			s := testSession(t, Options{Mode: mode, Size: 256, MTU: 1024, RxDepth: 7, IBPort: 1, GIDIndex: 1}, "127.0.78.141")
			if c := s.qp.Cap(); c.MaxRecvWR != 7 || c.MaxSendWR != 1 {
				t.Errorf("QP cap %+v, want MaxRecvWR 7, MaxSendWR 1", c)
			}
			if n := s.postRecv(s.o.RxDepth); n != 7 {
				t.Fatalf("posted %d receives, want 7", n)
			}
			if err := s.qp.PostRecv(ibtransport.RecvWR{WRID: recvWRID, SGL: []ibtransport.SGE{s.mr.SGE(0, len(s.buf))}}); !errors.Is(err, ibtransport.ErrQueueFull) {
				t.Errorf("an 8th receive: %v, want queue full", err)
			}
		})
	}
}

// TestServiceLevelAddressHandle: with -l 7 the SL goes into the address
// handle of the QP (RC, UC) or of the UD sends, as ibv_*_pingpong put it in
// ibv_ah_attr.sl (cmd/softrdma's TestPingpongServiceLevel runs the tools).
func TestServiceLevelAddressHandle(t *testing.T) {
	for _, mode := range []string{"rc", "uc", "ud"} {
		t.Run(mode+" address handle", func(t *testing.T) {
			s := testSession(t, Options{Mode: mode, Size: 256, MTU: 1024, RxDepth: 4, IBPort: 1, GIDIndex: 1, SL: 7}, "127.0.78.160")
			peer := netip.MustParseAddr("127.0.78.161")
			if err := s.connect(0x111, oobpp.Dest{QPN: 0x222, PSN: 0x333, GID: peer.As16()}, peer); err != nil {
				t.Fatal(err)
			}
			ah := s.qp.Query().AH
			if mode == "ud" {
				ah = *s.ah
			}
			if ah.SL != 7 || ah.DGID != netip.AddrFrom16(peer.As16()).As16() {
				t.Errorf("address handle %+v, want SL 7 to %v", ah, peer)
			}
		})
	}
}

// testSession opens a udp device on ip and makes the session's CQ, QP and
// buffer (session.init), as Run does before the address exchange.
func testSession(t *testing.T, o Options, ip string) *session {
	t.Helper()
	o.Device, o.Backend = ip, "udp"
	dev, err := OpenDevice(o, netip.Addr{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	s := &session{o: o, dev: dev}
	if err := s.init(); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestZeroGIDToSelf: a remote that sent no GID (no -g) is addressed at its
// TCP address; when that is this side's own RoCE address (a client on lo
// towards a server whose device took eth0) the packets would loop back to
// this side and be retried until the QP fails: connect fails at once, saying
// to give -g. A zero GID from another address still connects.
func TestZeroGIDToSelf(t *testing.T) {
	cases := []struct {
		name, peer string
		wantErr    string
	}{
		{"peer is self", "127.0.78.170", "give -g 1 on both sides"},
		{"peer elsewhere", "127.0.78.171", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := testSession(t, Options{Mode: "rc", Size: 256, MTU: 1024, RxDepth: 4, IBPort: 1, GIDIndex: -1}, "127.0.78.170")
			err := s.connect(0x111, oobpp.Dest{QPN: 0x222, PSN: 0x333}, netip.MustParseAddr(c.peer))
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatal(err)
			case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
				t.Fatalf("connect to a zero GID from %v: error %v, want one containing %q", c.peer, err, c.wantErr)
			}
		})
	}
}
