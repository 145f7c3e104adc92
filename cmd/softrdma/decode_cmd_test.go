package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const decodeCaptures = "../../testdata/captures"

// TestDecodeCommand runs the decode subcommand: exit 0 on good captures, 1 naming the
// frame (on stderr) when an ICRC is wrong, 2 for a file that is not a capture or does
// not exist; the flags change the output.
func TestDecodeCommand(t *testing.T) {
	good := filepath.Join(decodeCaptures, "rxe-write-bw.pcap")
	b, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.pcap")
	corrupt := append([]byte(nil), b...)
	// Frame 21 (an RDMA WRITE Middle): flip a payload byte under the ICRC.
	off := 24
	for i := 1; i < 21; i++ {
		off += 16 + int(uint32(corrupt[off+8])|uint32(corrupt[off+9])<<8|uint32(corrupt[off+10])<<16)
	}
	corrupt[off+16+200] ^= 0x01
	if err := os.WriteFile(bad, corrupt, 0o644); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(dir, "garbage.pcap")
	if err := os.WriteFile(garbage, []byte("this is not a capture\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(dir, "truncated.pcap")
	if err := os.WriteFile(truncated, b[:len(b)-7], 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args      []string
		code      int
		stdout    string // substring of stdout
		notStdout string
		stderr    string // substring of stderr
	}{
		{[]string{good}, 0, "RC RDMA WRITE First", "", ""},
		{[]string{good}, 0, "Flows:", "", ""},
		{[]string{"--flows=false", good}, 0, "RDMA frames", "Flows:", ""},
		{[]string{"--no-summary", good}, 0, "RC Acknowledge", "RDMA frames", ""},
		{[]string{"--json", good}, 0, `{"summary":`, "Flows:", ""},
		{[]string{bad}, 1, "ERROR", "", "frame 21: icrc"},
		{[]string{"--json", bad}, 1, `"error":"icrc`, "", "frame 21"},
		{[]string{truncated}, 1, "", "", "truncated"},
		{[]string{garbage}, 2, "", "", "not a pcap or pcapng capture"},
		{[]string{filepath.Join(dir, "missing.pcap")}, 2, "", "", "no such file"},
		{[]string{}, 2, "", "", "usage"},
		{[]string{"--bogus", good}, 2, "", "", "unknown flag"},
	} {
		var stdout, stderr bytes.Buffer
		code := runDecode(tc.args, &stdout, &stderr)
		if code != tc.code ||
			!strings.Contains(stdout.String(), tc.stdout) ||
			tc.notStdout != "" && strings.Contains(stdout.String(), tc.notStdout) ||
			!strings.Contains(stderr.String(), tc.stderr) {
			t.Errorf("decode %v: exit %d (want %d)\nstdout: %.300s\nstderr: %s", tc.args, code, tc.code, stdout.String(), stderr.String())
		}
	}
	// The subcommand is wired into run.
	if code := run([]string{"decode", "--help"}); code != 0 {
		t.Errorf("softrdma decode --help: exit %d", code)
	}
}

// TestDecodeInput: "-" reads the capture from standard input (and names it so in
// errors); a directory is said to be a directory, not an empty file.
func TestDecodeInput(t *testing.T) {
	good, err := os.ReadFile(filepath.Join(decodeCaptures, "rxe-write-bw.pcap"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		name   string
		args   []string
		stdin  []byte
		code   int
		stdout string // substring of stdout
		stderr string // substring of stderr
	}{
		{"stdin", []string{"-"}, good, 0, "RC RDMA WRITE First", ""},
		{"stdin json", []string{"--json", "-"}, good, 0, `{"summary":`, ""},
		{"stdin truncated", []string{"-"}, good[:len(good)-7], 1, "", "softrdma decode: standard input: file: capture file truncated"},
		{"stdin garbage", []string{"-"}, []byte("not a capture\n"), 2, "", "standard input: not a pcap or pcapng capture"},
		{"stdin empty", []string{"-"}, nil, 2, "", "standard input: not a pcap or pcapng capture: empty file"},
		{"directory", []string{dir}, nil, 2, "", dir + ": is a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			decodeStdin = bytes.NewReader(tc.stdin)
			t.Cleanup(func() { decodeStdin = os.Stdin })
			var stdout, stderr bytes.Buffer
			code := runDecode(tc.args, &stdout, &stderr)
			if code != tc.code || !strings.Contains(stdout.String(), tc.stdout) || !strings.Contains(stderr.String(), tc.stderr) ||
				strings.Contains(stderr.String(), "empty file") != strings.Contains(tc.stderr, "empty file") {
				t.Errorf("decode %v: exit %d (want %d)\nstdout: %.300s\nstderr: %s", tc.args, code, tc.code, stdout.String(), stderr.String())
			}
		})
	}
}

// TestDecodeAnnotate: --annotate writes the pcapng copy, from a file and from standard
// input alike (the same bytes), with the verdict of each RDMA frame; a file that cannot
// be created is exit 2.
func TestDecodeAnnotate(t *testing.T) {
	good := filepath.Join(decodeCaptures, "rxe-write-bw.pcap")
	b, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	fromFile, fromStdin := filepath.Join(dir, "file.pcapng"), filepath.Join(dir, "stdin.pcapng")
	var stdout, stderr bytes.Buffer
	if code := runDecode([]string{"--annotate", fromFile, good}, &stdout, &stderr); code != 0 {
		t.Fatalf("decode --annotate FILE: exit %d: %s", code, stderr.String())
	}
	decodeStdin = bytes.NewReader(b)
	t.Cleanup(func() { decodeStdin = os.Stdin })
	if code := runDecode([]string{"--annotate", fromStdin, "-"}, &stdout, &stderr); code != 0 {
		t.Fatalf("decode --annotate - : exit %d: %s", code, stderr.String())
	}
	x, err := os.ReadFile(fromFile)
	if err != nil {
		t.Fatal(err)
	}
	y, err := os.ReadFile(fromStdin)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(x, y) || !bytes.Contains(x, []byte("softrdma: 10.77.0.22 → 10.77.0.21 RoCEv2 RC RDMA WRITE First QP=0x000014 PSN=7564821")) {
		t.Errorf("annotated from a file (%d bytes) and from standard input (%d bytes) differ, or lack frame 20's verdict", len(x), len(y))
	}
	if n := bytes.Count(x, []byte("; ICRC ok")); n != 25 {
		t.Errorf("%d verdicts saying ICRC ok, want 25 (the RDMA frames)", n)
	}
	stderr.Reset()
	if code := runDecode([]string{"--annotate", filepath.Join(dir, "no", "such", "dir.pcapng"), good}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "--annotate") {
		t.Errorf("--annotate into a missing directory: exit %d: %s", code, stderr.String())
	}
}

// TestDecodeFilterFlags: --flow, --qp, --opcode and --time reach the decoder (from a
// file and from '-', read twice for --flow), and bad values are exit 2 naming the flag.
func TestDecodeFilterFlags(t *testing.T) {
	good := filepath.Join(decodeCaptures, "rxe-write-bw.pcap")
	b, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string // substring of stdout
		lines  int    // packet lines (-1: not checked)
		stderr string
	}{
		{[]string{"--qp", "0x14", good}, 0, "filter --qp 0x000014:", 25, ""},
		{[]string{"--qp", "20", "--flow", "1", "-"}, 0, "filter --flow 1 --qp 0x000014:", 25, ""},
		{[]string{"--flow", "2", "-"}, 0, "0 RDMA packets", 0, ""},
		{[]string{"--flow", "10.77.0.21", "--opcode", "write first", good}, 0, "5 RDMA packets", 5, ""},
		{[]string{"--opcode", "Acknowledge", "--opcode", "write last", "-"}, 0, "10 RDMA packets", 10, ""},
		{[]string{"--time", "1.0555:1.056", good}, 0, "4 RDMA packets", 4, ""},
		{[]string{"--time", ":1.0547", "--json", good}, 0, `"filter":"--time :1.0547"`, -1, ""},
		{[]string{"--qp", "zz", good}, 2, "", -1, `--qp: QP "zz"`},
		{[]string{"--time", "2:1", good}, 2, "", -1, "--time: time range"},
		{[]string{"--flow", "x", good}, 2, "", -1, `flow "x"`},
	} {
		decodeStdin = bytes.NewReader(b)
		var stdout, stderr bytes.Buffer
		code := runDecode(tc.args, &stdout, &stderr)
		lines := 0
		for _, l := range strings.Split(stdout.String(), "\n") {
			if strings.Contains(l, " RoCEv2 ") && strings.Contains(l, " → ") {
				lines++
			}
		}
		if code != tc.code || !strings.Contains(stdout.String(), tc.stdout) || !strings.Contains(stderr.String(), tc.stderr) || tc.lines >= 0 && lines != tc.lines {
			t.Errorf("decode %q: exit %d (want %d), %d packet lines (want %d)\nstdout: %.600s\nstderr: %s", tc.args, code, tc.code, lines, tc.lines, stdout.String(), stderr.String())
		}
	}
	decodeStdin = os.Stdin
}

// TestDecodeHTML: --html writes the report (with a filter too: only the flows shown);
// a file that cannot be created is exit 2.
func TestDecodeHTML(t *testing.T) {
	good := filepath.Join(decodeCaptures, "rxe-write-bw-rdma-cm.pcap")
	dir := t.TempDir()
	for _, tc := range []struct {
		args  []string
		flows string // the flow sections, in order
	}{
		{nil, "#1 #2 #3"},
		{[]string{"--flow", "3"}, "#3"},
	} {
		out := filepath.Join(dir, "r.html")
		var stdout, stderr bytes.Buffer
		if code := runDecode(append(append([]string{"--html", out}, tc.args...), good), &stdout, &stderr); code != 0 {
			t.Fatalf("decode --html %v: exit %d: %s", tc.args, code, stderr.String())
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, part := range strings.Split(string(b), `<h2 id="flow-`)[1:] {
			n, _, _ := strings.Cut(part, `"`)
			got = append(got, "#"+n)
		}
		if strings.Join(got, " ") != tc.flows || !strings.Contains(string(b), `<svg class="plot"`) {
			t.Errorf("decode --html %v: flow sections %v, want %s", tc.args, got, tc.flows)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := runDecode([]string{"--html", filepath.Join(dir, "no", "r.html"), good}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "--html") {
		t.Errorf("--html into a missing directory: exit %d: %s", code, stderr.String())
	}
}
