package perf

import (
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/softrdma/softrdma/ibtransport"
)

// TestPerfInlineAndRetryFlags: -I (perftest's --inline_size, 0 to 912;
// nothing inline for READs and atomics; 884 at most on UD) decides which
// messages are posted inline; --retry_count (non-negative; the CM carries
// at most 7) is what the rdma_cm connections ask for.
func TestPerfInlineAndRetryFlags(t *testing.T) {
	for _, c := range []struct {
		args   string
		inline int
		retry  uint8
		err    string
	}{
		{args: "write_bw", inline: 0, retry: 7},
		{args: "write_lat -I 64", inline: 64, retry: 7},
		{args: "send_bw --inline_size 912", inline: 912, retry: 7},
		{args: "read_bw -I 64", inline: 0, retry: 7},
		{args: "atomic_bw -I 8", inline: 0, retry: 7},
		{args: "write_bw -I 913", err: "-I 913: Max inline should be between 0 and 912"},
		{args: "write_bw -I -1", err: "-I -1"},
		{args: "write_bw -R --retry_count 3", retry: 3},
		{args: "write_bw -R --retry_count 0", retry: 0},
		{args: "write_bw -R --retry_count 100", retry: 7},
		{args: "write_bw --retry_count -1", err: "--retry_count -1"},
	} {
		o, err := parseArgs(strings.Fields(c.args), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		p, err := derive(o)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want %q", c.args, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", c.args, err)
		}
		if p.inline != c.inline || p.retry != c.retry {
			t.Errorf("%s: inline %d retry %d, want %d %d", c.args, p.inline, p.retry, c.inline, c.retry)
		}
		if p.inline > 0 && (!p.inlined(uint64(p.inline)) || p.inlined(uint64(p.inline)+1)) {
			t.Errorf("%s: messages of %d bytes and less should go inline, larger ones not", c.args, p.inline)
		}
		if p.inline == 0 && p.inlined(1) {
			t.Errorf("%s: a 1-byte message goes inline with -I 0", c.args)
		}
		s := &session{p: p}
		if cp := s.cmConnParam(nil); cp.RetryCount != c.retry || cp.RNRRetryCount != 7 {
			t.Errorf("%s: rdma_cm retry %d, RNR retry %d; want %d, 7", c.args, cp.RetryCount, cp.RNRRetryCount, c.retry)
		}
	}
}

// TestPerfInlineLoopback: sends and WRITEs with -I run inline (the engine
// refuses an inline WR on a QP created without room for it), and both sides
// say so in their header.
func TestPerfInlineLoopback(t *testing.T) {
	for _, test := range []string{"send_lat", "write_bw"} {
		r := runPerfPair(t, test, []string{"-n", "20", "-s", "64", "-I", "100"}, nil, nil)
		if r.srvCode != 0 || r.cliCode != 0 {
			t.Fatalf("%s: exchange failed\n%s", test, r)
		}
		for name, out := range map[string]string{"server": r.srv, "client": r.cli} {
			if !strings.Contains(out, " Max inline data : 100[B]\n") {
				t.Errorf("%s %s: no 'Max inline data : 100[B]':\n%s", test, name, out)
			}
		}
	}
}

// TestPerfInlineHelp: -I's help names the devices' inline limit (the engine's
// MaxInlineData), which a larger -I is refused with, not only perftest's 912.
func TestPerfInlineHelp(t *testing.T) {
	fs := pflag.NewFlagSet("perf", pflag.ContinueOnError)
	var o Options
	o.AddFlags(fs)
	max := ibtransport.NewContext(ibtransport.ContextConfig{}).Config().MaxInlineData
	if u := fs.Lookup("inline_size").Usage; !strings.Contains(u, "at most "+strconv.Itoa(max)+" bytes") {
		t.Errorf("-I's help %q does not say the devices' limit, %d bytes", u, max)
	}
}
