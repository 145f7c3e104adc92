package conform

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/oob/perftest"
)

// The kernel plans name every case of their catalogue, and only those.
func TestKernelPlansCoverCatalogues(t *testing.T) {
	for _, v := range []struct {
		name  string
		cases []Case
		plan  map[string]KernelPlan
	}{
		{"roce", RoCECases(nil), KernelRoCEPlan},
		{"iwarp", IWARPCases(nil), KernelIWARPPlan},
	} {
		seen := map[string]bool{}
		for _, c := range v.cases {
			seen[c.ID] = true
			p, ok := v.plan[c.ID]
			if !ok {
				t.Errorf("%s: case %s has no kernel plan", v.name, c.ID)
			}
			if p.Why == "" {
				t.Errorf("%s: case %s: the plan gives no reason", v.name, c.ID)
			}
		}
		for id := range v.plan {
			if !seen[id] {
				t.Errorf("%s: the kernel plan names %s, which is not in the catalogue", v.name, id)
			}
		}
	}
}

// A case that runs into an unobservable operation passes on its wire checks and
// says so; one ruled out by the plan is not applicable with the plan's reason.
func TestKernelVerdicts(t *testing.T) {
	v := verdictOf(unobservable("the completions"), "")
	if v.Result != Pass || !strings.HasPrefix(v.Reason, WireOnlyPrefix) || !strings.Contains(v.Reason, "the completions") {
		t.Errorf("verdict %+v, want a wire-only pass", v)
	}
	if got := KernelVerdict(CaseReport{Result: Pass, Reason: v.Reason}); got != "pass (wire only)" {
		t.Errorf("KernelVerdict = %q", got)
	}
	wrapped := fmt.Errorf("step: %w", unobservable("x"))
	if v := verdictOf(wrapped, ""); v.Result != Pass {
		t.Errorf("wrapped: %+v", v)
	}
	if v := verdictOf(&Mismatch{What: "bad"}, ""); v.Result != Fail {
		t.Errorf("mismatch: %+v", v)
	}
	cases := kernelCases([]Case{{ID: "a", Run: func(context.Context) Verdict { return Passed("ran") }}, {ID: "b"}},
		map[string]KernelPlan{"a": {"write", "fits"}, "b": {"", "needs memory"}}, func(kernelSession) {})
	if v := cases[0].Run(context.Background()); v.Result != Pass {
		t.Errorf("a: %+v", v)
	}
	if v := cases[1].Run(context.Background()); v.Result != NotApplicable || !strings.Contains(v.Reason, "needs memory") {
		t.Errorf("b: %+v", v)
	}
	if ids := KernelApplicable(map[string]KernelPlan{"b": {"", "x"}, "a": {"send", "y"}}); len(ids) != 1 || ids[0] != "a" {
		t.Errorf("KernelApplicable = %v", ids)
	}
}

// PerftestControl, as perftest's client, hands the case the server's QP and
// region, announces the tester's QPN, PSN and GID, and ends the exchange on Reset.
func TestPerftestControlSession(t *testing.T) {
	for _, v := range []struct {
		server  string
		test    perftest.Test
		size    int
		wantLen int
	}{
		{"write", perftest.WriteBW, 16384, 16384},
		{"atomic", perftest.AtomicBW, 8, 4096},
		{"send", perftest.SendBW, 4096, 12288},
	} {
		t.Run(v.server, func(t *testing.T) {
			l, err := net.Listen("tcp4", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			srv := PerftestServer{Test: v.test, Port: l.Addr().(*net.TCPAddr).Port, Size: v.size, Iters: 5}
			theirs := perftest.Dest{QPN: 0x123, PSN: 0x456, RKey: 0x789, VAddr: 0xabc000, OutReads: 1,
				GID: netip.MustParseAddr("10.77.0.81").As16()}
			got := make(chan perftest.Dest, 1)
			served := make(chan error, 1)
			go func() {
				c, err := l.Accept()
				if err != nil {
					served <- err
					return
				}
				defer c.Close()
				_, err = perftest.RunServer(context.Background(), c,
					perftest.Config{Test: v.test, MTU: perftest.MTU1024, Size: uint64(v.size), WithGID: true},
					perftest.Hooks{
						Setup: func(context.Context, *perftest.Result) ([]perftest.Dest, error) {
							return []perftest.Dest{theirs}, nil
						},
						Connect: func(_ context.Context, _, remote []perftest.Dest) error { got <- remote[0]; return nil },
					})
				served <- err
			}()
			p := &PerftestControl{Host: "127.0.0.1", Servers: map[string]PerftestServer{v.server: srv}, DialTimeout: 5 * time.Second}
			p.cur = kernelSession{id: "x", plan: KernelPlan{Server: v.server}}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			qp, err := p.CreateQP(ctx, QPSpec{Type: "rc", RemoteIP: "10.77.0.1", RemoteQPN: 0xc0de00, RQPSN: 0x10000})
			if err != nil {
				t.Fatal(err)
			}
			if qp.QPN != 0x123 || qp.PathMTU != 1024 || qp.PKey != 0xffff {
				t.Errorf("QP %+v, want QPN 0x123, MTU 1024, P_Key 0xffff", qp)
			}
			mine := <-got
			if mine.QPN != 0xc0de00 || mine.PSN != 0x10000 || netip.AddrFrom16(mine.GID).Unmap() != netip.MustParseAddr("10.77.0.1") {
				t.Errorf("announced %v, want QPN 0xc0de00 PSN 0x010000 GID ::ffff:10.77.0.1", mine)
			}
			mr, err := p.RegMR(ctx, MRSpec{Length: v.wantLen, Access: allRights})
			if err != nil {
				t.Fatal(err)
			}
			if mr.VA != 0xabc000 || mr.RKey != 0x789 || mr.Length != v.wantLen {
				t.Errorf("region %+v, want VA 0xabc000 R_Key 0x789 length %d", mr, v.wantLen)
			}
			if mr, err := p.RegMR(ctx, MRSpec{Length: v.wantLen + 1, Access: allRights}); err != nil || v.server != "send" && mr.Length != v.wantLen {
				t.Errorf("a region longer than the server's: %+v, %v, want the server's length %d", mr, err, v.wantLen)
			}
			if _, err := p.RegMR(ctx, MRSpec{Length: 64, Fill: 0x5a, Access: allRights}); !errors.Is(err, ErrNotApplicable) {
				t.Errorf("a filled region: %v, want not applicable", err)
			}
			err = p.PostRecv(ctx, RecvSpec{Count: 3})
			if (v.server == "send") != (err == nil) {
				t.Errorf("post_recv: %v", err)
			}
			if _, err := p.PollCQ(ctx, PollArgs{}); !errors.Is(err, ErrUnobservable) {
				t.Errorf("poll_cq: %v, want ErrUnobservable", err)
			}
			if _, err := p.QueryQP(ctx, 0x123); !errors.Is(err, ErrUnobservable) {
				t.Errorf("query_qp: %v, want ErrUnobservable", err)
			}
			if err := p.Reset(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-served:
				if err == nil {
					t.Error("the server's exchange ended without an error after Reset")
				}
			case <-time.After(5 * time.Second):
				t.Error("the server's exchange did not end after Reset")
			}
			if _, err := p.RegMR(ctx, MRSpec{Length: 1}); err == nil {
				t.Error("reg_mr after Reset succeeded")
			}
		})
	}
}

// The settling connection delays only the first write after the MPA Request.
func TestSettlingConn(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	go func() {
		buf := make([]byte, 16)
		for {
			if _, err := b.Read(buf); err != nil {
				return
			}
		}
	}()
	c := &settlingConn{Conn: a, settle: 50 * time.Millisecond}
	var took [3]time.Duration
	for i := range took {
		start := time.Now()
		c.Write([]byte("x"))
		took[i] = time.Since(start)
	}
	if took[0] > 40*time.Millisecond || took[1] < 50*time.Millisecond || took[2] > 40*time.Millisecond {
		t.Errorf("writes took %v, want only the second delayed by 50ms", took)
	}
	b.Close()
}

// The results table has one row per case with its kernel verdict, escapes pipes,
// and lists the bytes of the failures.
func TestKernelResultsTable(t *testing.T) {
	rep := &Report{Passed: 2, Failed: 1, NotApplicable: 1, Cases: []CaseReport{
		{ID: "a.pass", Section: "S 1", Result: Pass, Reason: "ACKed"},
		{ID: "a.wire", Section: "S 2", Result: Pass, Reason: WireOnlyPrefix + "its completions (" + ErrUnobservable.Error() + ")"},
		{ID: "a.fail", Section: "S 3", Result: Fail, Reason: "got a|b", Seen: []string{"00ff"}},
		{ID: "a.na", Section: "S 4", Result: NotApplicable, Reason: "kernel peer: needs memory"},
		{ID: "a.waived", Section: "S 5", Citation: "S 5, C9-1", Level: Must, Result: Waived, Reason: "got NAK 3",
			Waiver: "R3: known", Seen: []string{"0063"}},
	}}
	got := KernelResultsTable(rep)
	for _, want := range []string{
		"| `a.pass` | S 1 | pass | ACKed |",
		"| `a.wire` | S 2 | pass (wire only) | its completions are not observable |",
		"| `a.fail` | S 3 | FAIL | got a\\|b |",
		"| `a.na` | S 4 | n/a | needs memory |",
		"| `a.waived` | S 5, C9-1 (MUST) | FAIL (waived) | got NAK 3; waiver: R3: known |",
		"5 cases: 2 pass (1 of them on the wire only), 2 fail (1 of them waived), 1 not applicable.",
		"- `a.fail` seen[0]: `00ff`",
		"- `a.waived` seen[0]: `0063`",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
}

// SettleDial (softrdma conform --settle) dials as the dialer it wraps and
// holds the tester's second write, its first FPDU, for the settle time; what
// is written arrives unchanged and in order.
func TestSettleDial(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := make(chan []byte, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c)
		got <- b
	}()
	c, err := SettleDial(nil, time.Millisecond)(context.Background(), l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := c.(*settlingConn); !ok || s.settle != time.Millisecond {
		t.Fatalf("SettleDial's connection %T, want a settlingConn of 1ms", c)
	}
	for _, w := range []string{"request", "fpdu", "more"} {
		if _, err := c.Write([]byte(w)); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	if b := <-got; string(b) != "requestfpdumore" {
		t.Errorf("the listener read %q", b)
	}
	if _, err := SettleDial(nil, time.Millisecond)(context.Background(), "127.0.0.1:1"); err == nil {
		t.Errorf("dialing a closed port: no error")
	}
}
