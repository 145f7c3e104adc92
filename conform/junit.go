package conform

import (
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"time"
)

// JUnit XML, in the shape CI systems (Jenkins, GitLab, GitHub actions that read
// test reports) accept: one <testsuite> per run inside <testsuites>, one
// <testcase> per case, <failure> for a fail, <skipped> for not applicable and for
// a failure an expected-failures file waived. <system-out> holds the citation,
// the level (MUST/SHOULD) and, for a pass, what was observed.

// JUnitTestSuites is the document element of a JUnit report.
type JUnitTestSuites struct {
	XMLName  xml.Name         `xml:"testsuites"`
	Name     string           `xml:"name,attr"`
	Tests    int              `xml:"tests,attr"`
	Failures int              `xml:"failures,attr"`
	Skipped  int              `xml:"skipped,attr"`
	Time     string           `xml:"time,attr"`
	Suites   []JUnitTestSuite `xml:"testsuite"`
}

// JUnitTestSuite is one run of a catalogue.
type JUnitTestSuite struct {
	Name       string          `xml:"name,attr"`
	Tests      int             `xml:"tests,attr"`
	Failures   int             `xml:"failures,attr"`
	Errors     int             `xml:"errors,attr"`
	Skipped    int             `xml:"skipped,attr"`
	Time       string          `xml:"time,attr"`
	Timestamp  string          `xml:"timestamp,attr"`
	Properties []JUnitProperty `xml:"properties>property"`
	Cases      []JUnitTestCase `xml:"testcase"`
}

// JUnitProperty is a name/value pair of a suite.
type JUnitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

// JUnitTestCase is one case.
type JUnitTestCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *JUnitFailure `xml:"failure,omitempty"`
	Skipped   *JUnitSkipped `xml:"skipped,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

// JUnitFailure describes a failed case: Message is the reason, the text the
// expectation and the bytes seen.
type JUnitFailure struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

// JUnitSkipped describes a case that did not apply.
type JUnitSkipped struct {
	Message string `xml:"message,attr"`
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.6f", d.Seconds()) }

// JUnit returns the report as a JUnit document.
func (r *Report) JUnit() *JUnitTestSuites {
	name := "softrdma conform " + r.Suite
	s := JUnitTestSuite{
		Name: name, Tests: len(r.Cases), Failures: r.Failed, Skipped: r.NotApplicable + r.Waived,
		Time: seconds(r.Duration), Timestamp: r.Started.UTC().Format("2006-01-02T15:04:05"),
		Properties: []JUnitProperty{{Name: "suite", Value: r.Suite}, {Name: "peer", Value: r.Peer}},
	}
	for _, c := range r.Cases {
		class := r.Suite
		if i := strings.LastIndexByte(c.ID, '.'); i > 0 {
			class += "." + c.ID[:i]
		}
		tc := JUnitTestCase{Name: c.ID, Classname: class, Time: seconds(c.Duration),
			SystemOut: fmt.Sprintf("citation: %s\nlevel: %s\nchecks: %s\nsends: %s\nexpects: %s\n",
				c.Citation, c.Level, c.Summary, c.Sends, c.Expects)}
		if c.Result == Pass && c.Reason != "" {
			tc.SystemOut += "observed: " + c.Reason + "\n"
		}
		if c.Waiver != "" {
			tc.SystemOut += "waiver: " + c.Waiver + "\n"
		}
		switch c.Result {
		case Fail:
			var b strings.Builder
			fmt.Fprintf(&b, "citation: %s\nlevel: %s\nexpects: %s\n", c.Citation, c.Level, c.Expects)
			for i, h := range c.Seen {
				fmt.Fprintf(&b, "seen[%d]: %s\n", i, h)
			}
			tc.Failure = &JUnitFailure{Message: c.Reason, Type: "conformance " + string(c.Level), Text: b.String()}
		case NotApplicable:
			tc.Skipped = &JUnitSkipped{Message: c.Reason}
		case Waived:
			tc.Skipped = &JUnitSkipped{Message: "expected failure (" + c.Waiver + "): " + c.Reason}
		}
		s.Cases = append(s.Cases, tc)
	}
	return &JUnitTestSuites{Name: name, Tests: s.Tests, Failures: s.Failures, Skipped: s.Skipped,
		Time: s.Time, Suites: []JUnitTestSuite{s}}
}

// WriteJUnit writes the report as JUnit XML.
func (r *Report) WriteJUnit(w io.Writer) error {
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(r.JUnit()); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}
