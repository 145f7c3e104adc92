package conform

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"strings"
	"testing"
)

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, id string
		want        bool
	}{
		{"", "rc.psn.gap", true},
		{"rc.psn.gap", "rc.psn.gap", true},
		{"rc.psn.gap", "rc.psn.gap-once", false},
		{"rc.psn.*", "rc.psn.gap-once", true},
		{"rc.*", "ud.qkey.wrong", false},
		{"*.icrc.*", "roce.icrc.bad", true},
		{"ud.*, rc.dup.read", "rc.dup.read", true},
		{"ud.*,rc.dup.read", "rc.dup.write", false},
		{"rc.dup.[rw]*", "rc.dup.write", true},
		{"rc.???.gap", "rc.psn.gap", true},
		{" , ", "x", false},
	} {
		got, err := Match(tc.pattern, tc.id)
		if err != nil || got != tc.want {
			t.Errorf("Match(%q, %q) = %v, %v; want %v", tc.pattern, tc.id, got, err, tc.want)
		}
	}
	if _, err := Match("rc.[", "rc.x"); err == nil {
		t.Error("a malformed pattern is accepted")
	}
	if _, err := Select(RoCECases(nil), "ud.["); err == nil {
		t.Error("Select accepts a malformed pattern")
	}
}

// TestCatalogue checks the catalogue's shape: enough cases, unique IDs, every
// field filled in, an IBTA citation on each.
func TestCatalogue(t *testing.T) {
	cases := RoCECases(nil)
	if len(cases) < 25 {
		t.Fatalf("%d RoCE cases, want at least 25", len(cases))
	}
	seen := map[string]bool{}
	for _, c := range cases {
		if seen[c.ID] {
			t.Errorf("duplicate ID %s", c.ID)
		}
		seen[c.ID] = true
		if c.Section == "" || c.Summary == "" || c.Sends == "" || c.Expects == "" || c.Run == nil {
			t.Errorf("%s: incomplete: %+v", c.ID, c)
		}
		if !strings.HasPrefix(c.Section, "IBTA Vol. 1 ") {
			t.Errorf("%s: section %q does not cite IBTA Vol. 1", c.ID, c.Section)
		}
	}
	sel, err := Select(cases, "rc.dup.*")
	if err != nil || len(sel) != 5 {
		t.Errorf("rc.dup.* selects %d cases (%v), want 5", len(sel), err)
	}
	iw := IWARPCases(nil)
	if len(iw) < 25 {
		t.Errorf("%d iWARP cases, want at least 25", len(iw))
	}
	for _, c := range iw {
		if seen[c.ID] {
			t.Errorf("duplicate ID %s", c.ID)
		}
		seen[c.ID] = true
		if c.Section == "" || c.Summary == "" || c.Sends == "" || c.Expects == "" || c.Run == nil {
			t.Errorf("%s: incomplete: %+v", c.ID, c)
		}
		if !strings.HasPrefix(c.Section, "RFC ") {
			t.Errorf("%s: section %q does not cite an RFC", c.ID, c.Section)
		}
	}
}

// syntheticCases are one case of each outcome, and one that panics.
func syntheticCases() []Case {
	mk := func(id string, v Verdict) Case {
		return Case{ID: id, Section: "IBTA Vol. 1 9.7.5.1", Statement: "C9-105", Level: Must, Summary: "s " + id, Sends: "x", Expects: "y",
			Run: func(context.Context) Verdict { return v }}
	}
	cs := []Case{
		mk("a.pass", Passed("fine")),
		mk("a.fail", Failed([][]byte{{0x11, 0x00, 0xff, 0xff}}, "got <ACK> & \"NAK\"")),
		mk("b.na", NotApplicablef("no control")),
	}
	cs = append(cs, Case{ID: "b.panic", Section: "s", Summary: "s", Sends: "x", Expects: "y",
		Run: func(context.Context) Verdict { panic("boom") }})
	return cs
}

func runSynthetic(t *testing.T) *Report {
	t.Helper()
	var progress []string
	r := &Runner{Suite: "roce", Peer: "synthetic", Cases: syntheticCases(),
		Progress: func(c CaseReport) { progress = append(progress, c.ID) }}
	rep, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(progress) != 4 {
		t.Errorf("progress called for %v", progress)
	}
	return rep
}

func TestRunnerOutcomes(t *testing.T) {
	rep := runSynthetic(t)
	if rep.Passed != 1 || rep.Failed != 2 || rep.NotApplicable != 1 || rep.OK() {
		t.Fatalf("passed %d failed %d n/a %d ok %v", rep.Passed, rep.Failed, rep.NotApplicable, rep.OK())
	}
	if c := rep.Cases[3]; c.Result != Fail || !strings.Contains(c.Reason, "boom") {
		t.Errorf("the panicking case reports %s %q", c.Result, c.Reason)
	}
	if got := rep.Cases[1].Seen; len(got) != 1 || got[0] != "1100ffff" {
		t.Errorf("seen %q, want [1100ffff]", got)
	}
	ok := &Report{Passed: 1, NotApplicable: 2, Cases: make([]CaseReport, 3)}
	none := &Report{NotApplicable: 2, Cases: make([]CaseReport, 2)}
	if !ok.OK() || none.OK() {
		t.Errorf("OK: %v with a pass and no failure, %v with nothing applicable", ok.OK(), none.OK())
	}

	var b bytes.Buffer
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"PASS    a.pass   MUST", "IBTA Vol. 1 9.7.5.1, C9-105", "FAIL    a.fail", "N/A     b.na", "seen[0]: 1100ffff",
		"observed in the passing cases:\n  a.pass: fine\n", "FAIL a.fail (MUST IBTA Vol. 1 9.7.5.1, C9-105): got",
		"1 passed, 2 failed, 1 not applicable (4 cases"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestReportJSON(t *testing.T) {
	rep := runSynthetic(t)
	var b bytes.Buffer
	if err := rep.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatalf("JSON does not parse: %v\n%s", err, b.String())
	}
	if back.Passed != 1 || back.Failed != 2 || back.NotApplicable != 1 || len(back.Cases) != 4 {
		t.Errorf("round trip: %+v", back)
	}
	if back.Cases[1].Result != Fail || back.Cases[1].Seen[0] != "1100ffff" || back.Cases[2].Result != NotApplicable {
		t.Errorf("cases after the round trip: %+v", back.Cases)
	}
	var generic map[string]any
	json.Unmarshal(b.Bytes(), &generic)
	for _, k := range []string{"suite", "peer", "passed", "failed", "not_applicable", "cases"} {
		if _, ok := generic[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
	if c := back.Cases[0]; c.Level != Must || c.Statement != "C9-105" || c.Citation != "IBTA Vol. 1 9.7.5.1, C9-105" || c.Reason != "fine" {
		t.Errorf("the passing case's level, citation and observation after the round trip: %+v", c)
	}
}

func TestReportJUnit(t *testing.T) {
	rep := runSynthetic(t)
	var b bytes.Buffer
	if err := rep.WriteJUnit(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), xml.Header) {
		t.Error("no XML declaration")
	}
	var doc JUnitTestSuites
	if err := xml.Unmarshal(b.Bytes(), &doc); err != nil {
		t.Fatalf("JUnit XML does not parse: %v\n%s", err, b.String())
	}
	if doc.XMLName.Local != "testsuites" || len(doc.Suites) != 1 {
		t.Fatalf("root %q with %d suites", doc.XMLName.Local, len(doc.Suites))
	}
	s := doc.Suites[0]
	if doc.Tests != 4 || doc.Failures != 2 || doc.Skipped != 1 || s.Tests != 4 || s.Failures != 2 || s.Skipped != 1 || len(s.Cases) != 4 {
		t.Errorf("counts: doc %d/%d/%d suite %d/%d/%d, %d cases", doc.Tests, doc.Failures, doc.Skipped,
			s.Tests, s.Failures, s.Skipped, len(s.Cases))
	}
	failures, skipped := 0, 0
	for _, c := range s.Cases {
		if c.Name == "" || c.Classname == "" || c.Time == "" {
			t.Errorf("incomplete testcase %+v", c)
		}
		if c.Failure != nil {
			failures++
		}
		if c.Skipped != nil {
			skipped++
		}
	}
	if failures != 2 || skipped != 1 {
		t.Errorf("%d <failure> and %d <skipped>, want 2 and 1", failures, skipped)
	}
	if p := s.Cases[0]; !strings.Contains(p.SystemOut, "observed: fine\n") || !strings.Contains(p.SystemOut, "level: MUST\n") ||
		!strings.Contains(p.SystemOut, "citation: IBTA Vol. 1 9.7.5.1, C9-105\n") {
		t.Errorf("the passing case's system-out lacks its observation, level or citation:\n%s", p.SystemOut)
	}
	f := s.Cases[1]
	if f.Name != "a.fail" || f.Classname != "roce.a" || f.Failure.Message != `got <ACK> & "NAK"` ||
		!strings.Contains(f.Failure.Text, "seen[0]: 1100ffff") {
		t.Errorf("failure case: %+v %+v", f, f.Failure)
	}
	// Every element and attribute is well formed for a generic reader too.
	dec := xml.NewDecoder(bytes.NewReader(b.Bytes()))
	for {
		_, err := dec.Token()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("token stream: %v", err)
			}
			break
		}
	}
}

// TestSelfRoCEReports runs the whole catalogue against the in-process peer and
// checks the JSON and JUnit of a real run.
func TestSelfRoCEReports(t *testing.T) {
	s := newSelf(t, nil)
	rep, err := (&Runner{Suite: "roce", Peer: "self", Cases: RoCECases(s.Env)}).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var j, x bytes.Buffer
	rep.WriteJSON(&j)
	rep.WriteJUnit(&x)
	var back Report
	if err := json.Unmarshal(j.Bytes(), &back); err != nil || back.Passed != len(back.Cases) || !back.OK() {
		t.Errorf("JSON: %v, %d of %d passed", err, back.Passed, len(back.Cases))
	}
	var doc JUnitTestSuites
	if err := xml.Unmarshal(x.Bytes(), &doc); err != nil || doc.Tests != len(rep.Cases) || doc.Failures != 0 {
		t.Errorf("JUnit: %v, %d tests %d failures", err, doc.Tests, doc.Failures)
	}
}

// TestNoControl: without a control channel every case is not applicable, with
// the reason.
func TestNoControl(t *testing.T) {
	s := newSelf(t, nil)
	env := *s.Env
	env.Peer, env.Hello = nil, nil
	rep, err := (&Runner{Suite: "roce", Cases: RoCECases(&env)}).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.NotApplicable != len(rep.Cases) || rep.OK() {
		t.Fatalf("%d of %d not applicable, OK %v", rep.NotApplicable, len(rep.Cases), rep.OK())
	}
	if !strings.Contains(rep.Cases[0].Reason, "no control protocol") {
		t.Errorf("reason %q", rep.Cases[0].Reason)
	}
	// A peer whose control lacks post_send: the requester cases do not apply.
	env = *s.Env
	h := *s.Env.Hello
	h.Ops = []string{OpHello, OpCreateQP, OpRegMR, OpPollCQ, OpPostRecv, OpReadMR, OpWriteMR, OpQueryQP, OpReset}
	env.Hello = &h
	rep, _ = (&Runner{Suite: "roce", Cases: RoCECases(&env), Pattern: "rc.req.*,rc.psn.gap"}).Run(context.Background())
	for _, c := range rep.Cases {
		want := NotApplicable
		if c.ID == "rc.psn.gap" {
			want = Pass
		}
		if c.Result != want {
			t.Errorf("%s: %s (%s), want %s", c.ID, c.Result, c.Reason, want)
		}
	}
}
