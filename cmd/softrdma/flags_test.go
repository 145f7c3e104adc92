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
		{[]string{"rping", "-s", "-Z"}, "rping", "unknown shorthand flag: 'Z' in -Z"},
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

// TestFlagRanges: a numeric flag out of its range is refused before anything
// starts, exit status 2, with one line naming the flag and the value (issue
// 19: demo panicked in the simulator on --loss 1.5, --corrupt 2,
// --bandwidth -1 and --latency -1s, overflowed -n × -s, ran out of memory on
// -s 1000000000 and took --mtu 10; rping's -p 70000 wrapped to port 4464;
// perf's -s 2^54+1 K wrapped to 1024). The clients name a closed port on
// loopback, so that a check missing shows as a connection error (exit 1).
func TestFlagRanges(t *testing.T) {
	client := []string{"127.0.0.1"}
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"demo", "--loss", "1.5"}, "softrdma demo: --loss 1.5: want a probability in [0, 1]"},
		{[]string{"demo", "--loss", "-0.1"}, "softrdma demo: --loss -0.1: want a probability"},
		{[]string{"demo", "--loss", "NaN"}, "softrdma demo: --loss NaN: want a probability"},
		{[]string{"demo", "--corrupt", "2"}, "softrdma demo: --corrupt 2: want a probability"},
		{[]string{"demo", "--bandwidth", "-1"}, "softrdma demo: --bandwidth -1: want bit/s"},
		{[]string{"demo", "--latency", "-1s"}, "softrdma demo: --latency -1s: want a duration from 0s to 100ms"},
		{[]string{"demo", "-n", "4611686018427387904", "-s", "8"}, "softrdma demo: --messages 4611686018427387904: want 1 to 33554432"},
		{[]string{"demo", "-s", "1000000000"}, "softrdma demo: --size 1000000000: want 8 to 1342177"},
		{[]string{"demo", "--mtu", "10"}, "softrdma demo: --mtu 10: want 336 to 65535"},
		{[]string{"demo", "--depth", "100000"}, "softrdma demo: --depth 100000: want 1 to 8192"},
		{[]string{"demo", "--transport", "iwarp", "-n", "20000"}, "softrdma demo: --messages 20000: want 1 to 16384"},
		{append([]string{"pingpong", "-p", "1", "-s", "0"}, client...), "softrdma pingpong: -s 0: want 1 to 1073741824"},
		{append([]string{"pingpong", "-p", "1", "-s", "2000000000"}, client...), "softrdma pingpong: -s 2000000000: want 1 to 1073741824"},
		{append([]string{"pingpong", "-p", "1", "-l", "16"}, client...), "softrdma pingpong: -l 16: want 0 to 15"},
		{append([]string{"pingpong", "-p", "1", "-m", "100"}, client...), "softrdma pingpong: -m 100: want 256, 512, 1024, 2048 or 4096"},
		{append([]string{"pingpong", "-p", "1", "--wait", "-1s"}, client...), "softrdma pingpong: --wait -1s: want a duration of 0 or more"},
		{[]string{"rping", "-c", "-a", "127.0.0.1", "-p", "70000", "-C", "1"}, "softrdma rping: -p 70000: want 0 to 65535"},
		{[]string{"rping", "-c", "-a", "127.0.0.1", "-p", "1", "--settle", "-1s"}, "softrdma rping: --settle -1s: want a duration of 0 or more"},
		{[]string{"cmatose", "-s", "127.0.0.1", "-p", "70000"}, "softrdma cmatose: -p 70000: want 1 to 65535"},
		{[]string{"cmatose", "-s", "127.0.0.1", "-p", "1", "-C", "100000"}, "softrdma cmatose: -C 100000: want 0 to 16384"},
		{[]string{"cmatose", "-s", "127.0.0.1", "-p", "1", "--timeout", "0"}, "softrdma cmatose: --timeout 0s: want a duration above 0"},
		{append([]string{"perf", "write_bw", "-p", "1", "--wait", "0", "-s", "18014398509481985K"}, client...), "softrdma perf: -s: Message Size should be between 1 and 2147483647"},
		{append([]string{"perf", "write_bw", "-p", "1", "--wait", "0", "-D", "3000000000"}, client...), "softrdma perf: -D 3000000000: want 0 to 2147483647"},
		{append([]string{"perf", "write_bw", "-p", "1", "--wait", "0", "-D", "10", "-f", "-3"}, client...), "softrdma perf: -f -3: want -1 to 2147483647"},
		{append([]string{"perf", "read_bw", "-p", "1", "--wait", "0", "-o", "-1"}, client...), "softrdma perf: -o -1: want 0 to 2147483647"},
		{append([]string{"perf", "write_bw", "-p", "1", "--wait", "-1s"}, client...), "softrdma perf: --wait -1s: want a duration of 0 or more"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := runCommand(c.args, &stdout, &stderr)
			if code != 2 || stderr.String() != c.want+"\n" && !strings.HasPrefix(stderr.String(), c.want) {
				t.Errorf("exit %d, stderr %q; want 2, %q", code, stderr.String(), c.want)
			}
			if strings.Count(stderr.String(), "\n") != 1 {
				t.Errorf("stderr is not one line: %q", stderr.String())
			}
		})
	}
}
