package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestRunFlags: softrdma run's wiring. PROGRAM's own flags (after the first
// argument that is not softrdma's) are left to it, with or without "--"; a
// missing PROGRAM gets the usage; errors from launch.Prepare are one line
// with their exit status. None of these reaches exec.
func TestRunFlags(t *testing.T) {
	missing := t.TempDir()
	cases := []struct {
		name  string
		args  []string
		code  int
		first string // stderr's first line contains
		usage bool   // the usage follows
	}{
		{"program's flags are its own", []string{"--lib", missing, "ibv_devinfo", "-d", "x", "--bogus"}, 2, "no libibverbs.so.1 in " + missing + " (--lib): run make lib", false},
		{"after --", []string{"--lib", missing, "--", "ibv_devinfo", "-v"}, 2, "run make lib", false},
		{"no program", []string{"--device", "roce:127.0.0.1"}, 2, "no PROGRAM to run", true},
		{"no program after --", []string{"--"}, 2, "no PROGRAM to run", true},
		{"--device needs a value", []string{"--device"}, 2, "flag needs an argument: --device", true},
		{"--device keeps its commas", []string{"--lib", missing, "--device", "roce:127.0.0.1,name=a,backend=udp", "true"}, 2, "run make lib", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := runCommand(append([]string{"run"}, c.args...), &stdout, &stderr)
			first, rest, _ := strings.Cut(stderr.String(), "\n")
			if code != c.code || !strings.HasPrefix(first, "softrdma run: ") || !strings.Contains(first, c.first) {
				t.Errorf("exit %d, stderr %q; want %d and a first line with %q", code, stderr.String(), c.code, c.first)
			}
			if got := strings.Contains(rest, "usage: softrdma run"); got != c.usage {
				t.Errorf("usage after the error: %v, want %v:\n%s", got, c.usage, stderr.String())
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout %q, want nothing", stdout.String())
			}
		})
	}
}
