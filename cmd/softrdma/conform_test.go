package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/conform"
)

// TestConformSelf runs softrdma conform --self as CI would: the whole RoCE
// catalogue on the simulator, exit 0, the table, and a JUnit file that parses
// with every case in it and no failure.
func TestConformSelf(t *testing.T) {
	junit := filepath.Join(t.TempDir(), "conform.xml")
	var out, errOut bytes.Buffer
	if code := conformCmd([]string{"--self", "--junit", junit}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errOut.String())
	}
	n := len(conform.RoCECases(nil))
	if !strings.Contains(out.String(), "passed, 0 failed, 0 not applicable") || strings.Count(out.String(), "\nPASS ") != n {
		t.Errorf("table:\n%s", out.String())
	}
	b, err := os.ReadFile(junit)
	if err != nil {
		t.Fatal(err)
	}
	var doc conform.JUnitTestSuites
	if err := xml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("junit: %v", err)
	}
	if doc.Tests != n || doc.Failures != 0 || len(doc.Suites) != 1 || len(doc.Suites[0].Cases) != n {
		t.Errorf("junit: %d tests, %d failures", doc.Tests, doc.Failures)
	}
}

// TestConformSelfIWARP runs the iWARP catalogue against softrdma over loopback TCP.
func TestConformSelfIWARP(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := conformCmd([]string{"--self", "--transport", "iwarp", "--json"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errOut.String())
	}
	var rep conform.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || rep.Suite != "iwarp" || rep.Passed != len(conform.IWARPCases(nil)) {
		t.Errorf("report: %v %+v", err, rep)
	}
}

func TestConformFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string // in stdout+stderr
	}{
		{[]string{"--self", "--case", "rc.dup.*", "--json"}, 0, `"passed": 5`},
		{[]string{"--list"}, 0, "rc.psn.gap\n  section: IBTA Vol. 1 9.7.5.1"},
		{[]string{"--list", "--case", "ud.*", "--json"}, 0, `"id": "ud.qkey.wrong"`},
		{[]string{"--self", "--case", "no.such.case"}, 2, "no case matches"},
		{[]string{"--self", "--case", "rc.["}, 2, "bad case pattern"},
		{[]string{}, 2, "exactly one of --self and --peer"},
		{[]string{"--self", "--peer", "x"}, 2, "exactly one of --self and --peer"},
		{[]string{"--self", "--transport", "ib"}, 2, "want roce or iwarp"},
		{[]string{"--self", "--backend", "afpacket"}, 2, "want sim or udp"},
		{[]string{"--self", "extra"}, 2, "unexpected argument"},
		{[]string{"serve"}, 2, "give --addr or --interface"},
		{[]string{"serve", "--transport", "iwarp"}, 2, "give --addr"},
		{[]string{"--list", "--transport", "iwarp", "--case", "mpa.*"}, 0, "mpa.reply.accept\n  section: RFC 5044"},
	} {
		var out, errOut bytes.Buffer
		code := conformCmd(tc.args, &out, &errOut)
		all := out.String() + errOut.String()
		if code != tc.code || !strings.Contains(all, tc.want) {
			t.Errorf("conform %q: exit %d, want %d with %q in\n%s", tc.args, code, tc.code, tc.want, all)
		}
	}
	var out bytes.Buffer
	conformCmd([]string{"--self", "--case", "rc.psn.gap", "--json"}, &out, &out)
	var rep conform.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || len(rep.Cases) != 1 || rep.Cases[0].Result != conform.Pass {
		t.Errorf("--json: %v %+v", err, rep)
	}
}
