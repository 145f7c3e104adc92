package conform

import (
	"bytes"
	"context"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadWaivers(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []Waiver
		err      string
	}{
		{"comments and blanks", "# rxe\n\n  rc.recv.too-long  rxe answers IBV_WC_REM_INV_REQ_ERR\nud.*\tperftest's Q_Key\n",
			[]Waiver{{"rc.recv.too-long", "rxe answers IBV_WC_REM_INV_REQ_ERR", 3}, {"ud.*", "perftest's Q_Key", 4}}, ""},
		{"no reason", "rc.psn.gap\n", nil, "line 1: \"rc.psn.gap\" has no reason"},
		{"bad glob", "\nrc.[ why\n", nil, "line 2: bad case pattern \"rc.[\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadWaivers(strings.NewReader(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || len(got) != len(tc.want) {
				t.Fatalf("%+v, %v; want %+v", got, err, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("waiver %d: %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// TestRunnerWaivers runs the synthetic catalogue with a waivers file: the failure
// it lists is waived (XFAIL, run OK), the pass it lists is reported stale, the
// panic it does not list still fails the run.
func TestRunnerWaivers(t *testing.T) {
	name := filepath.Join(t.TempDir(), "rxe.waivers")
	os.WriteFile(name, []byte("a.fail  known bug 123\na.pass  fixed since\nzz.* matches nothing\n"), 0o644)
	waivers, err := ReadWaiversFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if u := Unused(waivers, syntheticCases()); len(u) != 1 || u[0].Pattern != "zz.*" {
		t.Errorf("unused waivers %+v, want zz.*", u)
	}
	r := &Runner{Suite: "roce", Peer: "synthetic", Cases: syntheticCases(), Waivers: waivers}
	rep, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failed != 1 || rep.Waived != 1 || rep.Passed != 1 || rep.OK() {
		t.Fatalf("failed %d waived %d passed %d OK %v, want 1 1 1 false (b.panic still fails)", rep.Failed, rep.Waived, rep.Passed, rep.OK())
	}
	if c := rep.Cases[1]; c.Result != Waived || c.Waiver != "known bug 123" {
		t.Errorf("a.fail: %s waiver %q", c.Result, c.Waiver)
	}
	if len(rep.StaleWaivers) != 1 || rep.StaleWaivers[0] != "a.pass" {
		t.Errorf("stale waivers %v, want [a.pass]", rep.StaleWaivers)
	}
	var b bytes.Buffer
	rep.WriteTable(&b)
	for _, want := range []string{"XFAIL   a.fail", "waiver:  known bug 123", "1 failed as waived", "waived but passed (the waiver can go): a.pass"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	rep.WriteJUnit(&b)
	var doc JUnitTestSuites
	if err := xml.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if s := doc.Suites[0]; s.Failures != 1 || s.Skipped != 2 || s.Cases[1].Skipped == nil ||
		!strings.Contains(s.Cases[1].Skipped.Message, "known bug 123") {
		t.Errorf("JUnit: failures %d skipped %d, a.fail %+v", s.Failures, s.Skipped, s.Cases[1])
	}

	// Without the panicking case, the waived failure leaves the run OK.
	r.Cases = syntheticCases()[:3]
	if rep, _ := r.Run(context.Background()); !rep.OK() {
		t.Errorf("a run whose only failure is waived is not OK: %+v", rep)
	}
}

// TestKernelWaiverFiles reads the waivers shipped for the kernel peers: each
// parses, and each entry names a case of its catalogue (a misspelt ID would
// silently waive nothing).
func TestKernelWaiverFiles(t *testing.T) {
	for file, cases := range map[string][]Case{
		"../test/conform/kernel-rxe-6.1.waivers": RoCECases(nil),
		"../test/conform/kernel-siw-6.1.waivers": IWARPCases(nil),
	} {
		w, err := ReadWaiversFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if len(w) == 0 {
			t.Errorf("%s: no waivers", file)
		}
		for _, u := range Unused(w, cases) {
			t.Errorf("%s line %d: %q matches no case", file, u.Line, u.Pattern)
		}
	}
}
