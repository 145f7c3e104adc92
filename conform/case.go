package conform

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Result is the outcome of a case.
type Result string

// The outcomes.
const (
	// Pass means the peer answered as the specification requires.
	Pass Result = "pass"
	// Fail means it did not (or the case could not be set up); Verdict.Seen holds
	// what it sent instead.
	Fail Result = "fail"
	// NotApplicable means the case could not run against this peer: it lacks a
	// control the case needs, or the feature is optional and absent.
	NotApplicable Result = "not applicable"
	// Waived means the case failed and the peer's expected-failures file lists
	// it (Runner.Waivers), with the reason in CaseReport.Waiver.
	Waived Result = "waived"
)

// Verdict is what a case concluded.
type Verdict struct {
	// Result is pass, fail or not applicable.
	Result Result
	// Reason says what was seen (pass), what was wrong (fail), or why the case
	// does not apply.
	Reason string
	// Seen are the bytes that decided a failure: packets, each from the first
	// byte of its transport header (for RoCE the BTH, without the ICRC), or the
	// peer's memory as read back.
	Seen [][]byte
}

// Passed returns a passing verdict.
func Passed(format string, args ...any) Verdict {
	return Verdict{Result: Pass, Reason: fmt.Sprintf(format, args...)}
}

// Failed returns a failing verdict with the packets seen.
func Failed(seen [][]byte, format string, args ...any) Verdict {
	return Verdict{Result: Fail, Reason: fmt.Sprintf(format, args...), Seen: seen}
}

// NotApplicablef returns a not-applicable verdict.
func NotApplicablef(format string, args ...any) Verdict {
	return Verdict{Result: NotApplicable, Reason: fmt.Sprintf(format, args...)}
}

// SeenHex returns the packets seen in hex, one string each.
func (v Verdict) SeenHex() []string {
	out := make([]string, len(v.Seen))
	for i, b := range v.Seen {
		out[i] = hex.EncodeToString(b)
	}
	return out
}

// Case is one conformance check.
type Case struct {
	// ID names the case, e.g. "rc.psn.gap"; --case globs match it.
	ID string
	// Section is the part of the specification it checks, e.g.
	// "IBTA Vol. 1 9.7.5.1" or "RFC 5044 §7.1".
	Section string
	// Statement is the IBTA compliance statement the case checks, e.g. "C9-105",
	// or "" where no public source confirms its number (IBTA) or the Section is
	// the clause (RFCs). See Citation.
	Statement string
	// Level says whether the specification requires the behaviour (Must) or
	// recommends it (Should).
	Level Level
	// Summary is one line about what is checked.
	Summary string
	// Sends describes what the tester sends.
	Sends string
	// Expects describes the answer the specification requires.
	Expects string
	// Run runs the case. It must return once ctx is done.
	Run func(ctx context.Context) Verdict
}

// Citation returns the section with the compliance statement, e.g.
// "IBTA Vol. 1 9.7.5.1, C9-105"; an IBTA section without a confirmed statement
// says so ("..., statement number not confirmed").
func (c *Case) Citation() string { return citation(c.Section, c.Statement) }

func citation(section, statement string) string {
	switch {
	case statement != "":
		return section + ", " + statement
	case strings.HasPrefix(section, "IBTA "):
		return section + ", " + StatementUnconfirmed
	}
	return section
}

// Mismatch is the error a case's steps return when the peer answered wrongly:
// What says how, Seen holds the packets.
type Mismatch struct {
	What string
	Seen [][]byte
}

// Error returns What.
func (m *Mismatch) Error() string { return m.What }

// mismatch returns a *Mismatch.
func mismatch(seen [][]byte, format string, args ...any) error {
	return &Mismatch{What: fmt.Sprintf(format, args...), Seen: seen}
}

// ErrNotApplicable is wrapped by errors that make a case not applicable.
var ErrNotApplicable = errors.New("not applicable")

// notApplicable returns an error wrapping ErrNotApplicable.
func notApplicable(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrNotApplicable, fmt.Sprintf(format, args...))
}

// WireOnlyPrefix starts the reason of a pass on the wire checks alone.
const WireOnlyPrefix = "passed on the wire; not checked: "

// ErrUnobservable is wrapped by the errors of control operations a peer serves
// in name only: a kernel peer driven through perftest or rping (kernel.go) has no
// way to show its completions or its QP state. A case that gets one has passed
// every wire check before it (the checks run in order), so it passes, with a
// reason that says what could not be checked.
var ErrUnobservable = errors.New("not observable on this peer")

// verdictOf turns the error a case's steps returned into a verdict: nil passes
// with note, a *Mismatch fails with its packets, ErrNotApplicable does not apply,
// ErrUnobservable passes on the wire checks alone (see ErrUnobservable), and
// anything else fails as a setup error.
func verdictOf(err error, note string) Verdict {
	var m *Mismatch
	switch {
	case err == nil:
		return Verdict{Result: Pass, Reason: note}
	case errors.As(err, &m):
		return Verdict{Result: Fail, Reason: m.What, Seen: m.Seen}
	case errors.Is(err, ErrNotApplicable):
		return Verdict{Result: NotApplicable, Reason: strings.TrimPrefix(err.Error(), ErrNotApplicable.Error()+": ")}
	case errors.Is(err, ErrUnobservable):
		return Verdict{Result: Pass, Reason: WireOnlyPrefix + err.Error()}
	}
	return Verdict{Result: Fail, Reason: "setup: " + err.Error()}
}
