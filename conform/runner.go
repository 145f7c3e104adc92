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
	// Waivers are the peer's expected failures (ReadWaivers): a failing case one
	// of them matches is reported as Waived, not Fail.
	Waivers []Waiver
}

// CaseReport is one case's entry in a Report.
type CaseReport struct {
	ID      string `json:"id"`
	Section string `json:"section"`
	// Statement is the IBTA compliance statement ("C9-105"), empty if none is
	// confirmed or the section is an RFC clause; Citation joins the two.
	Statement string `json:"statement,omitempty"`
	Citation  string `json:"citation"`
	// Level is MUST or SHOULD.
	Level   Level  `json:"level"`
	Summary string `json:"summary"`
	Sends   string `json:"sends"`
	Expects string `json:"expects"`
	Result  Result `json:"result"`
	// Reason says what was observed: for a pass what the peer answered, for a
	// fail what was wrong, else why the case does not apply.
	Reason string `json:"reason,omitempty"`
	// Waiver is the reason of the expected-failures entry that matched the case
	// (see Waiver): with Result Waived the failure was expected; with Pass the
	// waiver is stale.
	Waiver   string        `json:"waiver,omitempty"`
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
	// Waived counts the failures an expected-failures file listed; StaleWaivers
	// the IDs of waived cases that passed (their waiver can go).
	Waived       int          `json:"waived"`
	StaleWaivers []string     `json:"stale_waivers,omitempty"`
	Cases        []CaseReport `json:"cases"`
}

// OK reports whether every applicable case passed or failed as a waiver
// expected, and at least one passed (a run in which nothing applied proves
// nothing).
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
		cr := c.report(v)
		cr.Duration = time.Since(start)
		rep.count(&cr, r.Waivers)
		rep.Cases = append(rep.Cases, cr)
		if r.Progress != nil {
			r.Progress(cr)
		}
	}
	rep.Duration = time.Since(rep.Started)
	return rep, nil
}

// Describe returns the case's entry in a report that has not run it: its ID,
// citation, level and what it sends and expects (softrdma conform --list).
func (c *Case) Describe() CaseReport { return c.report(Verdict{}) }

// report returns the case's entry for verdict v (without its duration).
func (c *Case) report(v Verdict) CaseReport {
	return CaseReport{ID: c.ID, Section: c.Section, Statement: c.Statement, Citation: c.Citation(), Level: c.Level,
		Summary: c.Summary, Sends: c.Sends, Expects: c.Expects, Result: v.Result, Reason: v.Reason, Seen: v.SeenHex()}
}

// count adds cr to the totals, first applying the waiver that matches a failure
// (Waived) or a pass (stale).
func (r *Report) count(cr *CaseReport, waivers []Waiver) {
	w, waived := matchWaiver(waivers, cr.ID)
	if waived {
		cr.Waiver = w.Reason
	}
	switch cr.Result {
	case Pass:
		r.Passed++
		if waived {
			r.StaleWaivers = append(r.StaleWaivers, cr.ID)
		}
	case NotApplicable:
		r.NotApplicable++
	default:
		cr.Result = Fail
		if waived {
			cr.Result = Waived
			r.Waived++
			break
		}
		r.Failed++
	}
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

// WriteTable writes the report as a readable table: one line per case with its
// level and citation, then what each case observed (passes included), with the
// bytes seen and the expectation of failures, then the totals.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "RESULT\tCASE\tLEVEL\tCITATION\tCHECKS\n")
	for _, c := range r.Cases {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", shortResult(c.Result), c.ID, c.Level, c.Citation, c.Summary)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	observed := false
	for _, c := range r.Cases {
		if c.Result == Pass && c.Reason != "" {
			if !observed {
				fmt.Fprintf(w, "\nobserved in the passing cases:\n")
				observed = true
			}
			fmt.Fprintf(w, "  %s: %s\n", c.ID, c.Reason)
		}
	}
	for _, c := range r.Cases {
		c.writeDetail(w)
	}
	fmt.Fprintf(w, "\n%s against %s: %d passed, %d failed, %d not applicable", r.Suite, r.Peer, r.Passed, r.Failed, r.NotApplicable)
	if r.Waived > 0 {
		fmt.Fprintf(w, ", %d failed as waived", r.Waived)
	}
	_, err := fmt.Fprintf(w, " (%d cases, %v)\n", len(r.Cases), r.Duration.Round(time.Millisecond))
	if len(r.StaleWaivers) > 0 {
		_, err = fmt.Fprintf(w, "waived but passed (the waiver can go): %s\n", strings.Join(r.StaleWaivers, ", "))
	}
	return err
}

// writeDetail writes what a case that did not pass observed: for a fail the
// reason, what was sent and expected and the bytes, for a waived failure the
// waiver's reason too; for a case that does not apply, why. A pass writes nothing
// (WriteTable lists what the passes observed before).
func (c *CaseReport) writeDetail(w io.Writer) {
	switch c.Result {
	case Pass:
		if c.Waiver != "" {
			fmt.Fprintf(w, "\nPASS %s, waived: %s\n", c.ID, c.Waiver)
		}
		return
	case NotApplicable:
		fmt.Fprintf(w, "\nN/A %s: %s\n", c.ID, c.Reason)
	default:
		fmt.Fprintf(w, "\n%s %s (%s %s): %s\n", shortResult(c.Result), c.ID, c.Level, c.Citation, c.Reason)
	}
	if c.Result == Fail || c.Result == Waived {
		fmt.Fprintf(w, "  sends:   %s\n  expects: %s\n", c.Sends, c.Expects)
	}
	if c.Waiver != "" {
		fmt.Fprintf(w, "  waiver:  %s\n", c.Waiver)
	}
	for i, s := range c.Seen {
		fmt.Fprintf(w, "  seen[%d]: %s\n", i, s)
	}
}

// String returns the level, or "-" for a case without one.
func (l Level) String() string {
	if l == "" {
		return "-"
	}
	return string(l)
}

func shortResult(r Result) string {
	switch r {
	case Pass:
		return "PASS"
	case NotApplicable:
		return "N/A"
	case Waived:
		return "XFAIL"
	}
	return "FAIL"
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
