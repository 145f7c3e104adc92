package main

import (
	"bytes"
	"runtime/debug"
	"strings"
	"testing"
)

// TestHelpCommand: "softrdma help CMD" prints on stdout exactly what
// "softrdma CMD --help" prints, for every subcommand in the table, and exits
// 0; "softrdma help" lists every subcommand; an unknown CMD is an error
// naming it, exit 2.
func TestHelpCommand(t *testing.T) {
	for _, c := range commands {
		if c.run == nil {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			var hOut, hErr, fOut, fErr bytes.Buffer
			hCode := runCommand([]string{"help", c.name}, &hOut, &hErr)
			fCode := runCommand([]string{c.name, "--help"}, &fOut, &fErr)
			if hCode != 0 || fCode != 0 {
				t.Fatalf("exit codes: help %s = %d, %s --help = %d, want 0 (stderr %q, %q)", c.name, hCode, c.name, fCode, hErr.String(), fErr.String())
			}
			want := fOut.String() + fErr.String()
			if want == "" {
				t.Fatalf("%s --help printed nothing", c.name)
			}
			if hOut.String() != want {
				t.Errorf("help %s:\n%s\nwant (%s --help):\n%s", c.name, hOut.String(), c.name, want)
			}
			if hErr.Len() != 0 {
				t.Errorf("help %s wrote on stderr: %q", c.name, hErr.String())
			}
		})
	}

	var out, errb bytes.Buffer
	if code := runCommand([]string{"help"}, &out, &errb); code != 0 {
		t.Fatalf("help: exit %d, stderr %q", code, errb.String())
	}
	for _, c := range commands {
		if !strings.Contains(out.String(), "\n  "+c.name+" ") {
			t.Errorf("help does not list %q:\n%s", c.name, out.String())
		}
	}

	out.Reset()
	errb.Reset()
	if code := runCommand([]string{"help", "frobnicate"}, &out, &errb); code != 2 {
		t.Errorf("help frobnicate: exit %d, want 2", code)
	}
	if !strings.Contains(errb.String(), `unknown command "frobnicate"`) {
		t.Errorf("help frobnicate: stderr does not name the command:\n%s", errb.String())
	}
}

// TestVersionLine: the version line from build information, with and
// without a VCS stamp, and "softrdma version" / "--version" print one line.
func TestVersionLine(t *testing.T) {
	cases := []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"clean", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.3.0"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "8858962abcdef0123456789"}, {Key: "vcs.modified", Value: "false"}}},
			"softrdma v0.3.0 (8858962abcde, go1.26.8)"},
		{"dirty", debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "8858962abcdef0123456789"}, {Key: "vcs.modified", Value: "true"}}},
			"softrdma (devel) (8858962abcde+dirty, go1.26.8)"},
		{"no vcs", debug.BuildInfo{GoVersion: "go1.26.8"},
			"softrdma (devel) (unknown, go1.26.8)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := versionLine(&c.bi); got != c.want {
				t.Errorf("versionLine = %q, want %q", got, c.want)
			}
		})
	}
	t.Run("make build's commit", func(t *testing.T) {
		defer func(c string) { buildCommit = c }(buildCommit)
		buildCommit = "b49d1be714df+dirty"
		bi := debug.BuildInfo{GoVersion: "go1.26.8"}
		if got, want := versionLine(&bi), "softrdma (devel) (b49d1be714df+dirty, go1.26.8)"; got != want {
			t.Errorf("versionLine = %q, want %q", got, want)
		}
	})
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var out, errb bytes.Buffer
		if code := runCommand(args, &out, &errb); code != 0 {
			t.Fatalf("%v: exit %d, stderr %q", args, code, errb.String())
		}
		if !strings.HasPrefix(out.String(), "softrdma ") || strings.Count(out.String(), "\n") != 1 {
			t.Errorf("%v printed %q, want one line starting \"softrdma \"", args, out.String())
		}
	}
	var out, errb bytes.Buffer
	if code := runCommand([]string{"version", "extra"}, &out, &errb); code != 2 {
		t.Errorf("version extra: exit %d, want 2", code)
	}
}
