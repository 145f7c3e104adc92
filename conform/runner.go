package conform

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"strings"
	"text/tabwriter"
	"time"
)

// Match reports whether id matches pattern: a comma-separated list of globs
// (path.Match syntax: *, ?, [a-z]), any of which may match; an empty pattern
// matches everything. "rc.dup.*" matches "rc.dup.read"; "*.icrc.*,rc.psn.gap"
// matches both kinds.
func Match(pattern, id string) (bool, error) {
	if strings.TrimSpace(pattern) == "" {
		return true, nil
	}
	for _, p := range strings.Split(pattern, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		ok, err := path.Match(p, id)
		if err != nil {
			return false, fmt.Errorf("conform: bad case pattern %q: %w", p, err)
		}
		if ok {
			return true, nil
		}
	}
	return false, nil
}

// Select returns the cases whose IDs match pattern (see Match), in catalogue order.
func Select(cases []Case, pattern string) ([]Case, error) {
	var out []Case
	for _, c := range cases {
		ok, err := Match(pattern, c.ID)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, c)
		}
	}
	return out, nil
}

// Runner runs a catalogue of cases one after the other.
type Runner struct {
	// Suite names the catalogue in reports, e.g. "roce".
	Suite string
	// Peer describes the implementation under test, e.g. "softrdma (in-process)".
	Peer string
	// Cases is the catalogue.
	Cases []Case
	// Pattern selects cases (see Match); empty runs all.
	Pattern string
	// CaseTimeout bounds the context each case runs with, in wall time
	// (default one minute).
	CaseTimeout time.Duration
	// Progress, if not nil, is called after each case.
	Progress func(CaseReport)
}

// CaseReport is one case's entry in a Report.
type CaseReport struct {
	ID       string        `json:"id"`
	Section  string        `json:"section"`
	Summary  string        `json:"summary"`
	Sends    string        `json:"sends"`
	Expects  string        `json:"expects"`
	Result   Result        `json:"result"`
	Reason   string        `json:"reason,omitempty"`
	Seen     []string      `json:"seen,omitempty"` // hex, from the transport header on
	Duration time.Duration `json:"duration_ns"`
}

// Report is the outcome of a run.
type Report struct {
	Suite         string        `json:"suite"`
	Peer          string        `json:"peer"`
	Started       time.Time     `json:"started"`
	Duration      time.Duration `json:"duration_ns"`
	Passed        int           `json:"passed"`
	Failed        int           `json:"failed"`
	NotApplicable int           `json:"not_applicable"`
	Cases         []CaseReport  `json:"cases"`
}

// OK reports whether every applicable case passed, and at least one did (a run
// in which nothing applied proves nothing).
func (r *Report) OK() bool { return r.Failed == 0 && r.Passed > 0 }

// Run runs the selected cases and returns the report. A case that panics fails
// with the panic's value as its reason.
func (r *Runner) Run(ctx context.Context) (*Report, error) {
	cases, err := Select(r.Cases, r.Pattern)
	if err != nil {
		return nil, err
	}
	rep := &Report{Suite: r.Suite, Peer: r.Peer, Started: time.Now()}
	timeout := r.CaseTimeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	for _, c := range cases {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		start := time.Now()
		v := runOne(ctx, c, timeout)
		cr := CaseReport{ID: c.ID, Section: c.Section, Summary: c.Summary, Sends: c.Sends, Expects: c.Expects,
			Result: v.Result, Reason: v.Reason, Seen: v.SeenHex(), Duration: time.Since(start)}
		switch v.Result {
		case Pass:
			rep.Passed++
		case NotApplicable:
			rep.NotApplicable++
		default:
			cr.Result = Fail
			rep.Failed++
		}
		rep.Cases = append(rep.Cases, cr)
		if r.Progress != nil {
			r.Progress(cr)
		}
	}
	rep.Duration = time.Since(rep.Started)
	return rep, nil
}

func runOne(ctx context.Context, c Case, timeout time.Duration) (v Verdict) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			v = Failed(nil, "case panicked: %v", p)
		}
	}()
	if c.Run == nil {
		return NotApplicablef("case has no implementation")
	}
	return c.Run(ctx)
}

// WriteTable writes the report as a readable table: one line per case, then the
// reasons of failures (with the bytes seen) and of cases that do not apply, then
// the totals.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "RESULT\tCASE\tSECTION\tCHECKS\n")
	for _, c := range r.Cases {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", shortResult(c.Result), c.ID, c.Section, c.Summary)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, c := range r.Cases {
		if c.Result == Pass {
			continue
		}
		fmt.Fprintf(w, "\n%s %s: %s\n", shortResult(c.Result), c.ID, c.Reason)
		if c.Result == Fail {
			fmt.Fprintf(w, "  sends:   %s\n  expects: %s\n", c.Sends, c.Expects)
		}
		for i, s := range c.Seen {
			fmt.Fprintf(w, "  seen[%d]: %s\n", i, s)
		}
	}
	_, err := fmt.Fprintf(w, "\n%s against %s: %d passed, %d failed, %d not applicable (%d cases, %v)\n",
		r.Suite, r.Peer, r.Passed, r.Failed, r.NotApplicable, len(r.Cases), r.Duration.Round(time.Millisecond))
	return err
}

func shortResult(r Result) string {
	switch r {
	case Pass:
		return "PASS"
	case NotApplicable:
		return "N/A"
	}
	return "FAIL"
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
