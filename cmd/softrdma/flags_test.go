package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestEveryCommandReportsBadFlag: every command of the command table, and
// conform serve behind conform, answers a mistyped or unknown flag with the
// error and its usage on stderr and exit status 2, before doing anything
// (issue 19: six of them exited silently). The first rows are the issue's.
func TestEveryCommandReportsBadFlag(t *testing.T) {
	cases := []struct {
		args []string
		name string // the command as "softrdma NAME:" names it
		want string // in the error line
	}{
		{[]string{"rping", "-s", "-P"}, "rping", "unknown shorthand flag: 'P' in -P"},
		{[]string{"pingpong", "-o"}, "pingpong", "unknown shorthand flag: 'o' in -o"},
		{[]string{"conform", "--slef"}, "conform", "unknown flag: --slef"},
		{[]string{"conform", "serve", "--no-such-flag"}, "conform serve", "unknown flag: --no-such-flag"},
		{[]string{"demo", "--loss"}, "demo", "flag needs an argument: --loss"},
		{[]string{"perf", "write_bw", "-n", "many"}, "perf", `invalid argument "many" for "-n, --iters"`},
	}
	for _, c := range commands {
		cases = append(cases, struct {
			args       []string
			name, want string
		}{[]string{c.name, "--no-such-flag"}, c.name, "unknown flag: --no-such-flag"})
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := runCommand(c.args, &stdout, &stderr)
			if code != 2 {
				t.Errorf("exit status %d, want 2", code)
			}
			first, rest, _ := strings.Cut(stderr.String(), "\n")
			if want := "softrdma " + c.name + ": "; !strings.HasPrefix(first, want) || !strings.Contains(first, c.want) {
				t.Errorf("stderr's first line %q, want %q%s...", first, want, c.want)
			}
			if !strings.Contains(rest, "usage: softrdma "+c.name) {
				t.Errorf("no usage after the error on stderr:\n%s", stderr.String())
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout %q, want nothing", stdout.String())
			}
		})
	}
}
