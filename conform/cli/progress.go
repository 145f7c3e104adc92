package cli

import (
	"fmt"
	"io"

	"github.com/softrdma/softrdma/conform"
	"github.com/softrdma/softrdma/progress"
)

// caseProgress returns the Runner's Progress for a run of total cases (0:
// not known): with --verbose each case's line on stderr, as before; on a
// terminal also a status line ("softrdma conform: 12/57 cases, 1 failed:
// LAST-ID") that the verbose lines scroll above and done erases. Piped, the
// status line is not written at all.
func caseProgress(stderr io.Writer, total int, verbose bool) (report func(conform.CaseReport), done func()) {
	m := progress.New(stderr)
	if !m.Active() && !verbose {
		return nil, func() {}
	}
	n, failed := 0, 0
	report = func(c conform.CaseReport) {
		n++
		if c.Result == conform.Fail {
			failed++
		}
		if verbose {
			m.Done() // the line goes above the status
			fmt.Fprintf(stderr, "%-14s %-26s %s\n", c.Result, c.ID, c.Reason)
		}
		of := ""
		if total > 0 {
			of = fmt.Sprintf("/%d", total)
		}
		m.Update("softrdma conform: %d%s cases, %d failed: %s", n, of, failed, c.ID)
	}
	return report, m.Done
}
