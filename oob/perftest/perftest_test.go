package perftest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/internal/tcploop"
	"github.com/softrdma/softrdma/oob"
)

func TestVersionNumber(t *testing.T) {
	tests := []struct {
		in   string
		want float64
	}{
		{"6.06", 6.06}, {"5.70", 5.70}, {"4.5", 4.5}, {"6", 6}, {" 6.1x", 6.1}, {"", 0}, {"x6", 0}, {".5", 0.5}, {"-1.5", -1.5},
		{"123456789012345", 123456789012345},
	}
	for _, tt := range tests {
		if got := MakeVersion(tt.in).Number(); got != tt.want {
			t.Errorf("%q: %v, want %v", tt.in, got, tt.want)
		}
	}
	v := MakeVersion("6.06")
	if v.String() != "6.06" || !bytes.Equal(v[:], []byte("6.06\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00")) {
		t.Errorf("%q", v[:])
	}
	long := MakeVersion(strings.Repeat("9", 20))
	if long[15] != 0 || len(long.String()) != 15 {
		t.Errorf("long version not truncated to 15 bytes: %q", long[:])
	}
}

func TestMTU(t *testing.T) {
	tests := []struct {
		wire string
		mtu  MTU
	}{{"1\x00", MTU256}, {"3\x00", MTU1024}, {"5\x00", MTU4096}, {"0\x00", 0}, {"12", 12}}
	for _, tt := range tests {
		var m MTU
		if err := m.UnmarshalBinary([]byte(tt.wire)); err != nil || m != tt.mtu {
			t.Errorf("%q: %v %v", tt.wire, m, err)
		}
		if b, err := tt.mtu.MarshalBinary(); err != nil || string(b) != tt.wire {
			t.Errorf("%v: %q %v", tt.mtu, b, err)
		}
	}
	for _, bad := range []string{"", "3", "3\x00\x00", "a\x00", "3x", "\x003", "03"} {
		var m MTU
		if err := m.UnmarshalBinary([]byte(bad)); err == nil {
			t.Errorf("%q accepted as %v", bad, m)
		}
	}
	big := MTU(100)
	if _, err := big.MarshalBinary(); !errors.Is(err, oob.ErrRange) {
		t.Errorf("MTU 100: %v", err)
	}
	for n, want := range map[int]MTU{256: MTU256, 1024: MTU1024, 4096: MTU4096} {
		if m, ok := MTUFromBytes(n); !ok || m != want || m.Bytes() != n || m.String() != fmt.Sprint(n) {
			t.Errorf("%d: %v %v", n, m, ok)
		}
	}
	if _, ok := MTUFromBytes(1500); ok {
		t.Error("1500 is not an IB MTU")
	}
	// check_mtu: the smaller, unless the remote one is invalid.
	for _, tt := range []struct{ local, remote, want MTU }{
		{MTU4096, MTU1024, MTU1024}, {MTU1024, MTU4096, MTU1024}, {MTU1024, 0, MTU1024}, {MTU1024, 9, MTU1024}, {MTU2048, MTU2048, MTU2048},
	} {
		if got := tt.local.Negotiate(tt.remote); got != tt.want {
			t.Errorf("%v with %v: %v, want %v", tt.local, tt.remote, got, tt.want)
		}
	}
}

func TestSysDataAndReport(t *testing.T) {
	s := SysData{CycleBuffer: 65536, CacheLineSize: 32}
	b, _ := s.MarshalBinary()
	if !bytes.Equal(b, []byte{0, 1, 0, 0, 0, 0, 0, 32}) {
		t.Errorf("%x", b)
	}
	if got := s.Max(DefaultSysData); got != (SysData{65536, 64}) {
		t.Errorf("max %v", got)
	}
	if err := s.UnmarshalBinary(b[:7]); !errors.Is(err, oob.ErrTruncated) {
		t.Errorf("short sys data: %v", err)
	}

	r := BWReport{Size: 65536, Iters: 1000, BWPeak: 11000.5, BWAvg: math.NaN(), MsgRateAvg: math.Inf(1)}
	b, _ = r.MarshalBinary()
	if len(b) != ReportSize || !bytes.Equal(b[:16], []byte{0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0xe8}) {
		t.Fatalf("%x", b)
	}
	var back BWReport
	if err := back.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	again, _ := back.MarshalBinary()
	if !bytes.Equal(again, b) || back.PerPort {
		t.Errorf("NaN report did not round-trip: %x vs %x", again, b)
	}
	r = BWReport{PerPort: true, BWAvgP1: 1, MsgRateAvgP1: 2, BWAvgP2: 3, MsgRateAvgP2: 4}
	b, _ = r.MarshalBinary()
	if len(b) != ReportPerPortSize || math.Float64frombits(uint64(b[47])|uint64(b[46])<<8|uint64(b[45])<<16|uint64(b[44])<<24|uint64(b[43])<<32|uint64(b[42])<<40|uint64(b[41])<<48|uint64(b[40])<<56) != 1 {
		t.Fatalf("per-port layout %x", b)
	}
	if err := back.UnmarshalBinary(b); err != nil || back != r {
		t.Errorf("%+v %v", back, err)
	}
	for _, n := range []int{0, 39, 41, 71, 80} {
		if err := back.UnmarshalBinary(make([]byte, n)); err == nil {
			t.Errorf("report of %d bytes accepted", n)
		}
	}
}

var testGID = netip.MustParseAddr("::ffff:10.77.0.22").As16()

func TestKeysLayout(t *testing.T) {
	d := Dest{LID: 0x1234, OutReads: 0x80, QPN: 0xabcdef, PSN: 0x736e15, RKey: 0x5b5, VAddr: 0x564aed094000, GID: testGID, SRQN: 0x77}
	b, err := d.AppendKeys(nil, false)
	if err != nil || string(b) != "1234:0080:abcdef:736e15:000005b5:0000564aed094000:00000077\x00" || len(b) != KeysSize {
		t.Fatalf("%q %v", b, err)
	}
	b, err = d.AppendKeys(nil, true)
	want := "1234:0080:abcdef:736e15:000005b5:0000564aed094000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:16:00000077:\x00"
	if err != nil || string(b) != want || len(b) != KeysGIDSize {
		t.Fatalf("%q %v", b, err)
	}
	var back Dest
	back.GIDIndex = 1
	if err := back.UnmarshalKeys(b, true); err != nil {
		t.Fatal(err)
	}
	d.GIDIndex = 1
	if back != d {
		t.Errorf("%v, want %v", back, d)
	}
	for _, bad := range []Dest{{LID: 0x10000}, {OutReads: 0x10000}, {QPN: 1 << 24}, {PSN: 1 << 24}} {
		if _, err := bad.AppendKeys(nil, true); !errors.Is(err, oob.ErrRange) {
			t.Errorf("%v: %v", bad, err)
		}
	}

	bin, _ := d.MarshalBinary()
	wantBin := "00001234" + "00000080" + "00abcdef" + "00736e15" + "000005b5" + "00000000" + "0000564aed094000" +
		"00000000000000000000ffff0a4d0016" + "00000077" + "00000001"
	if fmt.Sprintf("%x", bin) != wantBin {
		t.Errorf("binary\n%x\nwant\n%s", bin, wantBin)
	}
	d.GIDIndex = -1
	d.Padding = [4]byte{5, 0x56, 0, 0}
	bin, _ = d.MarshalBinary()
	if err := back.UnmarshalBinary(bin); err != nil || back != d || !bytes.Equal(bin[52:], []byte{0xff, 0xff, 0xff, 0xff}) {
		t.Errorf("%v %v %x", back, err, bin)
	}
}

func TestKeysErrors(t *testing.T) {
	good, _ := (&Dest{QPN: 0x14, GID: testGID}).AppendKeys(nil, true)
	goodNoGID, _ := (&Dest{QPN: 0x14}).AppendKeys(nil, false)
	mod := func(b []byte, off int, s string) []byte { b = bytes.Clone(b); copy(b[off:], s); return b }
	tests := []struct {
		name    string
		in      []byte
		withGID bool
		want    error
		field   string
	}{
		{"empty", nil, true, oob.ErrTruncated, "length"},
		{"no-gid message as gid", goodNoGID, true, oob.ErrTruncated, "length"},
		{"gid message as no-gid", good, false, oob.ErrSyntax, "length"},
		{"lid", mod(good, 0, "000g"), true, oob.ErrSyntax, "lid"},
		{"out_reads sep", mod(good, 4, "-"), true, oob.ErrSyntax, "separator"},
		{"qpn", mod(good, 10, "0x0014"), true, oob.ErrSyntax, "qpn"},
		{"vaddr", mod(good, 33, " "), true, oob.ErrSyntax, "vaddr"},
		{"gid byte", mod(good, 50+3*10, "f"+"\x00"), true, oob.ErrSyntax, "gid[10]"},
		{"gid sep", mod(good, 52, ";"), true, oob.ErrSyntax, "separator"},
		{"srqn", mod(good, 98, "0000000z"), true, oob.ErrSyntax, "srqn"},
		{"trailing colon", mod(good, 106, "x"), true, oob.ErrSyntax, "separator"},
		{"no NUL", mod(good, 107, "x"), true, oob.ErrSyntax, "terminator"},
		{"no NUL, no gid", mod(goodNoGID, 58, ":"), false, oob.ErrSyntax, "terminator"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d Dest
			err := d.UnmarshalKeys(tt.in, tt.withGID)
			var e *oob.Error
			if !errors.Is(err, tt.want) || !errors.As(err, &e) || e.Field != tt.field {
				t.Fatalf("got %v, want %v in %q", err, tt.want, tt.field)
			}
			if !strings.HasPrefix(err.Error(), "perftest keys: "+tt.field) {
				t.Errorf("text %q", err)
			}
		})
	}
	var d Dest
	if err := d.UnmarshalBinary(make([]byte, 55)); !errors.Is(err, oob.ErrTruncated) {
		t.Errorf("binary 55: %v", err)
	}
}

// TestKeysBitFlips: a flipped captured keys message fails with a typed error or decodes
// to keys that re-encode to it (up to hex case).
func TestKeysBitFlips(t *testing.T) {
	cp := loadCapture(t, capCases[1]) // rxe-read-bw
	var msg []byte
	for _, m := range cp.msgs {
		if m.step.Kind == StepHandShake {
			msg = m.data
			break
		}
	}
	for i := range msg {
		for bit := range 8 {
			b := bytes.Clone(msg)
			b[i] ^= 1 << bit
			var d Dest
			if err := d.UnmarshalKeys(b, true); err != nil {
				var e *oob.Error
				if !errors.As(err, &e) {
					t.Fatalf("byte %d bit %d: untyped %v", i, bit, err)
				}
				continue
			}
			again, err := d.AppendKeys(nil, true)
			if err != nil || !bytes.EqualFold(again, b) {
				t.Errorf("byte %d bit %d: %q -> %v -> %q %v", i, bit, b, d, again, err)
			}
		}
	}
}

func TestGIDCompatible(t *testing.T) {
	v4 := netip.MustParseAddr("::ffff:10.77.0.21").As16()
	v4b := netip.MustParseAddr("::ffff:192.168.0.1").As16()
	v6 := netip.MustParseAddr("fd77::21").As16()
	ll := netip.MustParseAddr("fe80::5054:ff:fe77:1").As16()
	mc := netip.MustParseAddr("ff0e::ffff:239.1.1.1").As16()
	siw := [16]byte{0x52, 0x54, 0, 0x77, 0, 1}
	for _, tt := range []struct {
		a, b [16]byte
		want bool
	}{{v4, v4b, true}, {v6, ll, true}, {v4, v6, false}, {mc, v4, true}, {mc, v6, false}, {siw, ll, true}, {[16]byte{}, v6, true}, {[16]byte{}, v4, false}} {
		if got := GIDCompatible(tt.a, tt.b); got != tt.want {
			t.Errorf("%v %v: %v", netip.AddrFrom16(tt.a), netip.AddrFrom16(tt.b), got)
		}
	}
}

func TestDecodeAllocs(t *testing.T) {
	keys, _ := (&Dest{QPN: 1, GID: testGID}).AppendKeys(nil, true)
	bin, _ := (&Dest{QPN: 1}).MarshalBinary()
	rep, _ := (&BWReport{Size: 1}).MarshalBinary()
	var (
		d Dest
		r BWReport
		m MTU
		v Version
		s SysData
	)
	buf := make([]byte, 0, 128)
	for name, f := range map[string]func(){
		"UnmarshalKeys":   func() { _ = d.UnmarshalKeys(keys, true) },
		"UnmarshalBinary": func() { _ = d.UnmarshalBinary(bin) },
		"report":          func() { _ = r.UnmarshalBinary(rep) },
		"mtu":             func() { _ = m.UnmarshalBinary([]byte{'3', 0}) },
		"version":         func() { _ = v.UnmarshalBinary(keys[:16]); _ = v.Number() },
		"sysdata":         func() { _ = s.UnmarshalBinary(rep[:8]) },
		"AppendKeys":      func() { _, _ = d.AppendKeys(buf, true) },
		"AppendBinary":    func() { _, _ = d.AppendBinary(buf) },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s allocates %v times", name, n)
		}
	}
}

// exchangeShape is a plan with the hooks left out: what goes over the wire.
func exchangeShape(cfg Config) (string, error) {
	p, err := Plan(cfg)
	if err != nil {
		return "", err
	}
	var parts []string
	for _, s := range p {
		if s.Kind.Exchanges() {
			parts = append(parts, fmt.Sprint(s.Kind, cfg.MessageSizes(s)))
		}
	}
	return strings.Join(parts, " "), nil
}

func allConfigs() []Config {
	var out []Config
	for test := WriteBW; test <= AtomicLat; test++ {
		for _, duplex := range []bool{false, true} {
			if duplex && !test.Bandwidth() {
				continue
			}
			for _, runAll := range []bool{false, true} {
				for _, cm := range []int{0, 1, 2} { // TCP, -z, -R
					for _, qps := range []int{1, 3} {
						for _, dur := range []bool{false, true} {
							out = append(out, Config{Test: test, Duplex: duplex, RunAll: runAll, RunAllSizes: []uint64{2, 4, 8},
								UseRDMACM: cm >= 1, WorkRDMACM: cm == 2, NumQPs: qps, Duration: dur, WithGID: qps == 1, Size: 64, MTU: MTU1024})
						}
					}
				}
			}
		}
	}
	return out
}

// TestPlansMatch: for every configuration, the client's and the server's plans put the
// same messages on the wire in the same order (otherwise the real tools would hang).
func TestPlansMatch(t *testing.T) {
	for _, cfg := range allConfigs() {
		cfg.Role = RoleClient
		c, err := exchangeShape(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Role = RoleServer
		s, err := exchangeShape(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if c != s {
			t.Errorf("%+v:\nclient %s\nserver %s", cfg, c, s)
		}
	}
	if _, err := Plan(Config{Test: WriteLat, Role: RoleClient, Duplex: true}); err == nil {
		t.Error("duplex latency test planned")
	}
	if _, err := Plan(Config{Test: WriteBW}); err == nil {
		t.Error("plan without role")
	}
}

// TestPlanShapes pins the plans the captures do not show.
func TestPlanShapes(t *testing.T) {
	k := func(cfg Config) string {
		p, err := Plan(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, st := range p {
			x := st.Kind.String()
			if st.Kind == StepHandShake {
				x = "hs"
				if st.Zero {
					x = "hs0"
				}
			}
			s = append(s, x)
		}
		return strings.Join(s, ",")
	}
	pre := "versions,sys data,mtu,setup,"
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{Test: WriteBW, Role: RoleServer}, pre + "hs,connect,hs,hs,hs,reports,hs,done"},
		{Config{Test: WriteBW, Role: RoleClient, Duplex: true}, pre + "hs,connect,hs,hs,hs,run,reports,hs,done"},
		{Config{Test: ReadBW, Role: RoleServer, Duplex: true, RunAll: true, RunAllSizes: []uint64{2, 4}}, pre + "hs,connect,hs,hs,hs,run,hs,reports,hs,run,hs,reports,hs,done"},
		{Config{Test: AtomicBW, Role: RoleClient, RunAll: true}, pre + "hs,connect,hs,hs,run,hs,reports,hs,done"},
		{Config{Test: SendBW, Role: RoleServer, RunAll: true, RunAllSizes: []uint64{2, 4}}, pre + "hs,connect,hs,hs,post receives,hs,run,hs,post receives,hs,run,hs,hs,done"},
		{Config{Test: SendBW, Role: RoleClient, Duplex: true}, pre + "hs,connect,hs,hs,post receives,hs,run,reports,hs,done"},
		{Config{Test: SendBW, Role: RoleClient, Duplex: true, Duration: true}, pre + "hs,connect,hs,hs,post receives,hs,run,hs,done"},
		{Config{Test: ReadLat, Role: RoleServer}, pre + "hs,hs,connect,hs,hs,hs,done"},
		{Config{Test: ReadLat, Role: RoleClient}, pre + "hs,hs,connect,hs,hs,run,hs,done"},
		{Config{Test: AtomicLat, Role: RoleClient, UseRDMACM: true}, pre + "hs,hs,connect,hs,hs,run,hs"},
		{Config{Test: WriteLat, Role: RoleServer, NumQPs: 2}, pre + "hs,hs,hs,connect,hs,hs,hs,run"},
		{Config{Test: SendLat, Role: RoleServer, WorkRDMACM: true}, "versions,sys data,mtu,hs0,connect cm,hs0,setup,hs,hs,hs,post receives,hs,run,hs"},
	} {
		if got := k(tt.cfg); got != tt.want {
			t.Errorf("%v %v:\n got %s\nwant %s", tt.cfg.Test, tt.cfg.Role, got, tt.want)
		}
	}
}

// side records what a simulated tool does in its hooks.
type side struct {
	mu     sync.Mutex
	dests  []Dest
	calls  []string
	report BWReport
}

func (s *side) hooks(t *testing.T, cfg Config) Hooks {
	note := func(c string) { s.mu.Lock(); s.calls = append(s.calls, c); s.mu.Unlock() }
	return Hooks{
		ConnectCM: func(context.Context) error { note("cm"); return nil },
		Setup: func(_ context.Context, r *Result) ([]Dest, error) {
			note("setup")
			if r.MTU != MTU1024 || r.SysData != (SysData{8192, 128}) {
				t.Errorf("negotiated %v %v", r.MTU, r.SysData)
			}
			return s.dests, nil
		},
		Connect: func(_ context.Context, local, remote []Dest) error { note("connect"); return nil },
		PostReceives: func(_ context.Context, size uint64) error {
			note(fmt.Sprint("post ", size))
			return nil
		},
		Run: func(_ context.Context, size uint64) (BWReport, error) {
			note(fmt.Sprint("run ", size))
			r := s.report
			r.Size = size
			return r, nil
		},
	}
}

func makeDests(n int, qpn uint32, gid [16]byte) []Dest {
	ds := make([]Dest, n)
	for i := range ds {
		ds[i] = Dest{OutReads: 1, QPN: qpn + uint32(i), PSN: 0x100000 + qpn*17 + uint32(i), RKey: 0x500 + qpn, VAddr: 0x7f0000000000 + uint64(qpn)<<20 + uint64(i)<<12, GID: gid, GIDIndex: 1}
	}
	return ds
}

// TestRoundTrip runs client against server for every configuration, over net.Pipe (TCP
// configurations), loopback TCP (some) and MessagePipe (rdma_cm configurations): each
// side must get the other's Dests, the reports must cross, both must finish their plan.
func TestRoundTrip(t *testing.T) {
	for i, base := range allConfigs() {
		carriers := []string{"pipe"}
		if base.useRDMACM() {
			carriers = []string{"messages"}
		} else if i%7 == 0 {
			carriers = append(carriers, "tcp")
		}
		for _, kind := range carriers {
			name := fmt.Sprintf("%v/%s/b=%v/a=%v/cm=%v,%v/q=%d/D=%v", base.Test, kind, base.Duplex, base.RunAll, base.UseRDMACM, base.WorkRDMACM, base.NumQPs, base.Duration)
			t.Run(name, func(t *testing.T) {
				var cc, sc Carrier
				switch kind {
				case "pipe":
					a, b := net.Pipe()
					defer a.Close()
					defer b.Close()
					cc, sc = NewStreamCarrier(a), NewStreamCarrier(b)
				case "tcp":
					a, b := tcploop.Pair(t, "tcp4")
					defer a.Close()
					defer b.Close()
					cc, sc = NewStreamCarrier(a), NewStreamCarrier(b)
				default:
					a, b := MessagePipe()
					defer a.Close()
					cc, sc = a, b
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				n := max(base.NumQPs, 1)
				cgid, sgid := testGID, netip.MustParseAddr("::ffff:10.77.0.21").As16()
				if !base.WithGID && !base.useRDMACM() {
					cgid, sgid = [16]byte{}, [16]byte{} // the GID does not travel
				}
				cli := &side{dests: makeDests(n, 0x14, cgid), report: BWReport{Iters: 5, BWPeak: 4.61, BWAvg: 4.3, MsgRateAvg: 0.0011}}
				srv := &side{dests: makeDests(n, 0x90, sgid), report: BWReport{Iters: 7, BWAvg: 9}}
				ccfg, scfg := base, base
				ccfg.Role, scfg.Role = RoleClient, RoleServer
				ccfg.SysData = SysData{8192, 64}
				scfg.SysData = SysData{4096, 128}
				scfg.MTU = MTU2048
				var (
					wg   sync.WaitGroup
					sres *Result
					serr error
				)
				wg.Add(1)
				go func() { defer wg.Done(); sres, serr = Run(ctx, sc, scfg, srv.hooks(t, scfg)) }()
				cres, cerr := Run(ctx, cc, ccfg, cli.hooks(t, ccfg))
				if cerr != nil {
					cancel()
				}
				wg.Wait()
				if cerr != nil || serr != nil {
					t.Fatalf("client: %v\nserver: %v", cerr, serr)
				}
				for q := range n {
					if cres.Remote[q] != srv.dests[q] || sres.Remote[q] != cli.dests[q] {
						t.Fatalf("QP %d: client got %v\nwant %v\nserver got %v\nwant %v", q, cres.Remote[q], srv.dests[q], sres.Remote[q], cli.dests[q])
					}
				}
				if len(cres.Reports) != len(sres.Reports) {
					t.Fatalf("%d vs %d report exchanges", len(cres.Reports), len(sres.Reports))
				}
				for j := range cres.Reports {
					if cres.Reports[j].Local != sres.Reports[j].Remote || sres.Reports[j].Local != cres.Reports[j].Remote {
						t.Errorf("report %d did not cross: %+v / %+v", j, cres.Reports[j], sres.Reports[j])
					}
				}
				if base.Test.Bandwidth() && base.Test != SendBW && !base.Duplex {
					if len(sres.Reports) != 1 || sres.Reports[0].Remote.Iters != 5 || sres.Reports[0].Local != (BWReport{}) {
						t.Errorf("half-duplex server reports %+v", sres.Reports)
					}
				}
				wantDone := !base.useRDMACM() && base.Test != WriteLat
				if cres.PeerDone != wantDone || sres.PeerDone != wantDone {
					t.Errorf("done: client %v server %v, want %v", cres.PeerDone, sres.PeerDone, wantDone)
				}
				if base.WorkRDMACM == contains(cli.calls, "connect") || base.WorkRDMACM != contains(cli.calls, "cm") {
					t.Errorf("hooks %v with WorkRDMACM=%v", cli.calls, base.WorkRDMACM)
				}
			})
		}
	}
}

func contains(s []string, x string) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}

// fakePeer runs fn as the other side of a net.Pipe.
func fakePeer(t *testing.T, fn func(c net.Conn)) net.Conn {
	a, b := net.Pipe()
	go func() { defer b.Close(); fn(b) }()
	t.Cleanup(func() { a.Close() })
	return a
}

func TestRunFailures(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := Config{Test: WriteBW, WithGID: true, MTU: MTU1024}
	// A server-side peer script: read n bytes, write w.
	rw := func(c net.Conn, n int, w []byte) {
		io.ReadFull(c, make([]byte, n))
		c.Write(w)
	}
	ver := func(s string) []byte { v := MakeVersion(s); return v[:] }

	t.Run("old peer", func(t *testing.T) {
		conn := fakePeer(t, func(c net.Conn) { rw(c, 16, ver("5.60")) })
		_, err := RunClient(ctx, conn, cfg, Hooks{})
		var se *StepError
		if !errors.Is(err, oob.ErrIncompatible) || !errors.As(err, &se) || se.Step.Kind != StepVersions {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("peer closes", func(t *testing.T) {
		conn := fakePeer(t, func(c net.Conn) { rw(c, 16, ver("6.06")[:10]) })
		_, err := RunClient(ctx, conn, cfg, Hooks{})
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("short SEND", func(t *testing.T) {
		a, b := MessagePipe()
		defer a.Close()
		go b.Send(ctx, ver("6.06")[:8])
		c := cfg
		c.Role, c.UseRDMACM = RoleServer, true
		_, err := Run(ctx, a, c, Hooks{})
		if !errors.Is(err, oob.ErrTruncated) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("long SEND", func(t *testing.T) {
		a, b := MessagePipe()
		defer a.Close()
		go b.Send(ctx, make([]byte, 17))
		c := cfg
		c.Role, c.UseRDMACM = RoleServer, true
		_, err := Run(ctx, a, c, Hooks{})
		if !errors.Is(err, oob.ErrRange) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("bad keys", func(t *testing.T) {
		conn := fakePeer(t, func(c net.Conn) {
			rw(c, 16, ver("6.06"))
			rw(c, 4, []byte{0, 0, 16, 0})
			rw(c, 4, []byte{0, 0, 0, 64})
			rw(c, 2, []byte("3\x00"))
			rw(c, KeysGIDSize, bytes.Repeat([]byte{'0'}, KeysGIDSize))
		})
		_, err := RunClient(ctx, conn, cfg, Hooks{})
		var se *StepError
		if !errors.Is(err, oob.ErrSyntax) || !errors.As(err, &se) || se.Step.Kind != StepHandShake || se.Index != 4 {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("gid types", func(t *testing.T) {
		a, b := MessagePipe()
		defer a.Close()
		c := cfg
		c.Role, c.UseRDMACM = RoleClient, true
		go func() {
			s := &Session{Carrier: b, Role: RoleServer, UseRDMACM: true}
			s.Versions(ctx, DefaultVersion)
			s.SysData(ctx, DefaultSysData)
			s.MTU(ctx, MTU1024)
			s.HandShake(ctx, &Dest{GID: netip.MustParseAddr("fd77::21").As16()})
		}()
		_, err := Run(ctx, a, c, Hooks{Setup: func(context.Context, *Result) ([]Dest, error) {
			return []Dest{{GID: testGID}}, nil
		}})
		var se *StepError
		if !errors.Is(err, oob.ErrIncompatible) || !errors.As(err, &se) || se.Step.Kind != StepConnect {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("setup count", func(t *testing.T) {
		a, b := MessagePipe()
		defer a.Close()
		go func() {
			s := &Session{Carrier: b, Role: RoleServer, UseRDMACM: true}
			s.Versions(ctx, DefaultVersion)
			s.SysData(ctx, DefaultSysData)
			s.MTU(ctx, MTU1024)
		}()
		c := cfg
		c.Role, c.UseRDMACM, c.NumQPs = RoleClient, true, 2
		_, err := Run(ctx, a, c, Hooks{Setup: func(context.Context, *Result) ([]Dest, error) { return []Dest{{}}, nil }})
		var se *StepError
		if !errors.As(err, &se) || se.Step.Kind != StepSetup {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("hook error", func(t *testing.T) {
		boom := errors.New("boom")
		for _, tt := range []struct {
			cfg   Config
			hooks Hooks
			kind  StepKind
		}{
			{Config{Test: WriteBW, WorkRDMACM: true}, Hooks{ConnectCM: func(context.Context) error { return boom }}, StepConnectCM},
			{Config{Test: SendLat, UseRDMACM: true}, Hooks{PostReceives: func(context.Context, uint64) error { return boom }}, StepPostReceives},
			{Config{Test: ReadLat, UseRDMACM: true}, Hooks{Connect: func(context.Context, []Dest, []Dest) error { return boom }}, StepConnect},
			{Config{Test: ReadBW, UseRDMACM: true}, Hooks{Setup: func(context.Context, *Result) ([]Dest, error) { return nil, boom }}, StepSetup},
		} {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			tt.cfg.Role, tt.cfg.MTU = RoleServer, MTU1024
			res, err := Run(ctx, mustPipeWithPeer(t, ctx), tt.cfg, tt.hooks)
			cancel()
			var se *StepError
			if !errors.Is(err, boom) || !errors.As(err, &se) || se.Step.Kind != tt.kind || res == nil || res.Steps != se.Index {
				t.Errorf("%v: got %v", tt.cfg.Test, err)
			}
		}
	})
	t.Run("no MTU", func(t *testing.T) {
		if _, err := Run(ctx, mustPipeWithPeer(t, ctx), Config{Test: WriteBW, Role: RoleServer}, Hooks{}); err == nil {
			t.Fatal("ran without an MTU")
		}
	})
	t.Run("not done", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		a, b := net.Pipe()
		defer a.Close()
		go func() { io.ReadFull(b, make([]byte, 5)) }()
		go func() { b.Write([]byte("nope\x00")) }()
		s := &Session{Carrier: NewStreamCarrier(a), Role: RoleClient}
		if _, err := s.Done(ctx); !errors.Is(err, oob.ErrUnexpected) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := RunServer(ctx, a, cfg, Hooks{})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		a, b := MessagePipe()
		defer a.Close()
		defer b.Close()
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(20*time.Millisecond, cancel)
		_, err := Run(ctx, a, Config{Test: WriteBW, Role: RoleServer, UseRDMACM: true, MTU: MTU4096}, Hooks{})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v", err)
		}
	})
}

// mustPipeWithPeer returns a message carrier whose peer is a client that answers the
// first three exchanges of any plan.
func mustPipeWithPeer(t *testing.T, ctx context.Context) Carrier {
	a, b := MessagePipe()
	t.Cleanup(func() { a.Close() })
	go func() {
		s := &Session{Carrier: b, Role: RoleClient, UseRDMACM: true}
		s.Versions(ctx, DefaultVersion)
		s.SysData(ctx, DefaultSysData)
		s.MTU(ctx, MTU1024)
		for {
			if _, err := s.HandShake(ctx, &Dest{}); err != nil {
				return
			}
		}
	}()
	return a
}
