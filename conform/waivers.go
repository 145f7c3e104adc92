package conform

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

// Waiver is one entry of a peer's expected-failures file: the cases it covers and
// why they are expected to fail on that peer (a known bug, a reading of the
// specification the peer's authors chose, a feature it lacks).
type Waiver struct {
	// Pattern is a glob over case IDs (path.Match syntax), e.g. "rc.recv.too-long"
	// or "ud.*".
	Pattern string
	// Reason says why the failure is expected; it is required.
	Reason string
	// Line is the entry's line in its file, for messages.
	Line int
}

// ReadWaivers reads an expected-failures file: one waiver a line, a case ID or
// glob, white space, and the reason; blank lines and lines starting with '#' are
// comments. For example:
//
//	# kernel rxe, Linux 6.12
//	rc.recv.too-long   rxe completes the receive with IBV_WC_REM_INV_REQ_ERR (rxe_resp.c)
//	ud.*               the peer's UD QPs use perftest's Q_Key
//
// A line without a reason, or with a malformed glob, is an error naming the line.
func ReadWaivers(r io.Reader) ([]Waiver, error) {
	var out []Waiver
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		pat, reason := line, ""
		if i := strings.IndexAny(line, " \t"); i >= 0 {
			pat, reason = line[:i], strings.TrimSpace(line[i+1:])
		}
		if reason == "" {
			return nil, fmt.Errorf("conform: waivers line %d: %q has no reason (write the case ID, then why it is expected to fail)", n, pat)
		}
		if _, err := path.Match(pat, ""); err != nil {
			return nil, fmt.Errorf("conform: waivers line %d: bad case pattern %q: %w", n, pat, err)
		}
		out = append(out, Waiver{Pattern: pat, Reason: reason, Line: n})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("conform: reading waivers: %w", err)
	}
	return out, nil
}

// Unused returns the waivers whose pattern matches none of cases: a misspelt ID
// would otherwise waive nothing without a word.
func Unused(waivers []Waiver, cases []Case) []Waiver {
	var out []Waiver
	for _, w := range waivers {
		used := false
		for _, c := range cases {
			if ok, _ := path.Match(w.Pattern, c.ID); ok {
				used = true
				break
			}
		}
		if !used {
			out = append(out, w)
		}
	}
	return out
}

// matchWaiver returns the first waiver whose pattern matches id.
func matchWaiver(waivers []Waiver, id string) (Waiver, bool) {
	for _, w := range waivers {
		if ok, _ := path.Match(w.Pattern, id); ok {
			return w, true
		}
	}
	return Waiver{}, false
}

// ReadWaiversFile reads the expected-failures file name (see ReadWaivers).
func ReadWaiversFile(name string) ([]Waiver, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("conform: waivers: %w", err)
	}
	defer f.Close()
	return ReadWaivers(f)
}
