package perf

import (
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/pcaptap"
)

// TestPerfConnectionType: -c UC runs WRITE and SEND tests on UC QPs: both
// sides say 'Connection type : UC', agree on the keys and report their rows,
// and every request in the capture is a UC opcode, with no ACK at all.
func TestPerfConnectionType(t *testing.T) {
	for _, c := range []struct {
		test string
		args []string
	}{
		{"write_bw", []string{"-n", "50", "-s", "5000", "-m", "1024"}},
		{"write_bw", []string{"-n", "40", "-s", "4096", "-b", "-q", "2"}},
		{"send_bw", []string{"-n", "60", "-s", "3000"}},
		{"write_lat", []string{"-n", "30", "-s", "64"}},
		{"send_lat", []string{"-n", "30", "-s", "2000", "-m", "1024"}},
	} {
		t.Run(c.test+" "+strings.Join(c.args, " "), func(t *testing.T) {
			pcap := filepath.Join(t.TempDir(), "cli.pcap")
			args := append([]string{"-c", "UC"}, c.args...)
			r := runPerfPair(t, c.test, args, nil, []string{"--pcap", pcap})
			if r.srvCode != 0 || r.cliCode != 0 {
				t.Fatalf("exchange failed\n%s", r)
			}
			checkPerfPair(t, c.test, args, r, 1)
			for name, out := range map[string]string{"server": r.srv, "client": r.cli} {
				if !strings.Contains(out, " Connection type : UC\t\tUsing SRQ      : OFF\n") {
					t.Errorf("%s does not say UC:\n%s", name, out)
				}
			}
			frames, err := pcaptap.ReadRoCEFrames(pcap)
			if err != nil {
				t.Fatal(err)
			}
			requests := 0
			for _, f := range frames {
				var pk ibtransport.Packet
				if err := pk.Decode(f.IB); err != nil {
					t.Fatal(err)
				}
				op := pk.BTH.Opcode()
				if op>>5 != 1 { // the UC opcodes are 0x20 to 0x3f
					t.Fatalf("%v (%#x) in a UC run", op, uint8(op))
				}
				requests++
			}
			if requests < 30 {
				t.Errorf("%d UC packets captured", requests)
			}
		})
	}
}

// TestPerfConnectionTypeChecks: -c's rules (perftest's change_conn_type and
// force_dependecies): UC for WRITE and SEND only, not with -R nor iWARP;
// an unreliable receiver posts a receive per message (UC_MAX_RX).
func TestPerfConnectionTypeChecks(t *testing.T) {
	for _, c := range []struct {
		args string
		err  string
		rx   int
	}{
		{args: "read_bw -c UC", err: "UC connection not possible in READ/ATOMIC verbs"},
		{args: "atomic_bw -c UC", err: "UC connection not possible in READ/ATOMIC verbs"},
		{args: "write_bw -c UC -R", err: "UC is not supported in librdmacm"},
		{args: "write_bw -c UD", err: "UD connection only possible in SEND verb"},
		{args: "send_bw -c XRC", err: "no XRC QPs"},
		{args: "send_bw -c UC --transport iwarp -R", err: "UC is not supported in librdmacm"},
		{args: "send_bw -c UC -n 1000", rx: 1000},
		{args: "send_bw -c UC -n 20000", rx: 16000},
		{args: "send_bw -c UC -n 1000 -r 64", rx: 64},
		{args: "send_bw -n 1000", rx: 512},
		{args: "send_bw -c uc -n 101", rx: 102}, // odd: perftest's +1
	} {
		o, err := parseArgs(strings.Fields(c.args), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		p, err := derive(o)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %v, want %q", c.args, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.args, err)
			continue
		}
		if p.rxDepth != c.rx {
			t.Errorf("%s: rx depth %d, want %d", c.args, p.rxDepth, c.rx)
		}
	}
}
