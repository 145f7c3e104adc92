package conform

import "context"

// Level is how strongly the specification asks for the behaviour a case checks.
type Level string

// The levels.
const (
	// Must: an IBTA compliance statement (Cnn-nn: "shall"), or an RFC MUST, SHALL
	// or REQUIRED. A peer that fails such a case does not conform.
	Must Level = "MUST"
	// Should: an IBTA optional statement (onn-nn) or "should", an RFC SHOULD or
	// RECOMMENDED, or the answer the specification leaves open and the case checks
	// as Linux rxe/siw give it (the case's Expects says so). A failure is a
	// finding, not a violation.
	Should Level = "SHOULD"
)

// StatementUnconfirmed is what a citation shows in place of an IBTA compliance
// statement number that no public source available to the authors confirms: the
// IBTA text is not public, so numbers are cited only where a public
// implementation quotes them (Linux rxe: C9-105, C9-148; pib: C9-41, C9-42,
// C9-43, C10-87), never guessed.
const StatementUnconfirmed = "C-number unconfirmed"

// caseDef is one row of a catalogue: a case as data. T is the runtime a body gets
// (rt for RoCE, iwt for iWARP).
type caseDef[T any] struct {
	// ID, Section, Summary, Sends and Expects are those of Case.
	ID, Section string
	// Statement is the IBTA compliance statement ("C9-105"), or "" where none is
	// confirmed (IBTA) or none exists (RFCs: the Section is the clause).
	Statement string
	// Level is MUST or SHOULD.
	Level                   Level
	Summary, Sends, Expects string
	// Needs are the control operations the peer must offer (Hello.Ops); a peer
	// without them makes the case not applicable.
	Needs []string
	// Body runs the case on a connected runtime; see Mismatch and verdictOf.
	Body func(t *T) error
}

// bind turns a catalogue into Cases whose Run calls run with each row's needs and
// body. run may be nil (the catalogue is only listed); Run then panics.
func bind[T any](defs []caseDef[T], run func(ctx context.Context, needs []string, body func(*T) error) Verdict) []Case {
	cases := make([]Case, len(defs))
	for i, d := range defs {
		cases[i] = Case{ID: d.ID, Section: d.Section, Statement: d.Statement, Level: d.Level,
			Summary: d.Summary, Sends: d.Sends, Expects: d.Expects,
			Run: func(ctx context.Context) Verdict { return run(ctx, d.Needs, d.Body) }}
	}
	return cases
}
