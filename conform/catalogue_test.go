package conform

import (
	"regexp"
	"strings"
	"testing"
)

// confirmedStatements are the IBTA compliance statements a public source quotes
// (see the citations comment in roce_cases.go). A case may cite no other number:
// the spec text is not public, and a guessed number would mislead.
var confirmedStatements = map[string]bool{
	"C9-41": true, "C9-42": true, "C9-43": true, "C9-105": true, "C9-148": true, "C10-87": true,
}

var statementRE = regexp.MustCompile(`\b[Co][0-9]+-[0-9]+`)

// TestCatalogueCitations checks every case of both catalogues: a level, a
// statement only from the confirmed list and never buried in the section text, and
// a citation that says when an IBTA statement number is not confirmed.
func TestCatalogueCitations(t *testing.T) {
	levels := map[Level]int{}
	for _, c := range append(RoCECases(nil), IWARPCases(nil)...) {
		if c.Level != Must && c.Level != Should {
			t.Errorf("%s: level %q, want MUST or SHOULD", c.ID, c.Level)
		}
		levels[c.Level]++
		if c.Statement != "" && !confirmedStatements[c.Statement] {
			t.Errorf("%s: statement %q is not one a public source confirms", c.ID, c.Statement)
		}
		if m := statementRE.FindString(c.Section); m != "" {
			t.Errorf("%s: section %q carries statement %s: it belongs in Statement", c.ID, c.Section, m)
		}
		cit := c.Citation()
		switch {
		case c.Statement != "":
			if !strings.HasSuffix(cit, ", "+c.Statement) {
				t.Errorf("%s: citation %q lacks statement %s", c.ID, cit, c.Statement)
			}
		case strings.HasPrefix(c.Section, "IBTA "):
			if !strings.HasSuffix(cit, StatementUnconfirmed) {
				t.Errorf("%s: citation %q does not say its statement number is unconfirmed", c.ID, cit)
			}
		default:
			if cit != c.Section {
				t.Errorf("%s: RFC citation %q, want the section %q", c.ID, cit, c.Section)
			}
		}
	}
	if levels[Must] == 0 || levels[Should] == 0 {
		t.Errorf("levels %v: both MUST and SHOULD cases expected", levels)
	}
}
