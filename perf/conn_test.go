package perf

import (
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/pcaptap"
)

// TestPerfConnectionType: -c UC runs WRITE and SEND tests on UC QPs, -c UD
// SEND tests on UD QPs: both sides say the type, agree on the keys and report
// their rows, and every packet in the capture has an opcode of the type (UC
// 0x20-0x3f, UD 0x60-0x7f), with no ACK at all. A UD message is at most the
// MTU: -s above it runs at the MTU, -a up to it. With -z (the parameters over
// an rdma_cm RC QP) the test QPs are UC or UD all the same.
func TestPerfConnectionType(t *testing.T) {
	for _, c := range []struct {
		conn string
		test string
		args []string
		rows int    // 0: 1
		size string // the rows' size, if not -s
	}{
		{"UC", "write_bw", []string{"-n", "50", "-s", "5000", "-m", "1024"}, 0, ""},
		{"UC", "write_bw", []string{"-n", "40", "-s", "4096", "-b", "-q", "2"}, 0, ""},
		{"UC", "send_bw", []string{"-n", "60", "-s", "3000"}, 0, ""},
		{"UC", "write_lat", []string{"-n", "30", "-s", "64"}, 0, ""},
		{"UC", "send_lat", []string{"-n", "30", "-s", "2000", "-m", "1024"}, 0, ""},
		{"UD", "send_bw", []string{"-n", "60", "-s", "3000", "-q", "2"}, 0, ""},
		{"UD", "send_bw", []string{"-n", "40", "-s", "5000", "-m", "1024"}, 0, "1024"},
		{"UD", "send_bw", []string{"-n", "20", "-a", "-m", "512"}, 9, ""}, // 2 to 512
		{"UD", "send_lat", []string{"-n", "30", "-s", "100"}, 0, ""},
		{"UD", "send_bw", []string{"-n", "50", "-s", "6000", "-z"}, 0, "4096"},        // parameters over rdma_cm
		{"UD", "send_bw", []string{"-n", "50", "-s", "2000", "-R", "-q", "2"}, 0, ""}, // rdma_cm's UD QPs (SIDR)
		{"UD", "send_lat", []string{"-n", "30", "-s", "100", "-R"}, 0, ""},
		{"UD", "send_bw", []string{"-n", "40", "-s", "1000", "-R", "-b"}, 0, ""},
		{"UC", "write_bw", []string{"-n", "50", "-s", "3000", "-z"}, 0, ""},
	} {
		t.Run(c.conn+" "+c.test+" "+strings.Join(c.args, " "), func(t *testing.T) {
			pcap := filepath.Join(t.TempDir(), "cli.pcap")
			args := append([]string{"-c", c.conn}, c.args...)
			r := runPerfPair(t, c.test, args, nil, []string{"--pcap", pcap})
			if r.srvCode != 0 || r.cliCode != 0 {
				t.Fatalf("exchange failed\n%s", r)
			}
			checkPerfPair(t, c.test, args, r, c.rows)
			for name, out := range map[string]string{"server": r.srv, "client": r.cli} {
				if !strings.Contains(out, " Connection type : "+c.conn+"\t\tUsing SRQ      : OFF\n") {
					t.Errorf("%s does not say %s:\n%s", name, c.conn, out)
				}
				if c.size != "" && !strings.Contains(out, "\n "+c.size+" ") {
					t.Errorf("%s has no row of %s bytes:\n%s", name, c.size, out)
				}
			}
			zflag := slices.Contains(c.args, "-z") || slices.Contains(c.args, "-R")
			class := ibtransport.Opcode(0x20) // UC
			if c.conn == "UD" {
				class = 0x60
			}
			frames, err := pcaptap.ReadRoCEFrames(pcap)
			if err != nil {
				t.Fatal(err)
			}
			requests, withImm := 0, 0
			for _, f := range frames {
				var pk ibtransport.Packet
				if err := pk.Decode(f.IB); err != nil {
					t.Fatal(err)
				}
				op := pk.BTH.Opcode()
				// With -z and -R the parameters travel on an RC QP that
				// rdma_cm connects (its MADs on QP1): not the test's.
				if zflag && (pk.BTH.DestQP() == 1 || op&0xe0 == 0) {
					continue
				}
				if op&0xe0 != class {
					t.Fatalf("%v (%#x) in a %s run", op, uint8(op), c.conn)
				}
				if op == 0x65 { // UD SEND Only with Immediate
					withImm++
				}
				requests++
			}
			if requests < 30 {
				t.Errorf("%d %s packets captured", requests, c.conn)
			}
			// -R's UD latency and -b runs: the client's QPN in one SEND with
			// immediate per QP, as perftest's client sends it.
			wantImm := 0
			if c.conn == "UD" && slices.Contains(c.args, "-R") && (c.test == "send_lat" || slices.Contains(c.args, "-b")) {
				wantImm = 1
			}
			if withImm != wantImm {
				t.Errorf("%d UD SENDs with immediate, want %d", withImm, wantImm)
			}
		})
	}
}

// TestPerfConnectionTypeChecks: -c's rules (perftest's change_conn_type and
// force_dependecies): UC for WRITE and SEND only, not with -R nor iWARP; UD
// for SEND only (not with -R here), inline at most 884; an unreliable
// receiver posts a receive per message (UC_MAX_RX) unless -r says otherwise.
func TestPerfConnectionTypeChecks(t *testing.T) {
	for _, c := range []struct {
		args   string
		err    string
		rx     int
		inline int
	}{
		{args: "read_bw -c UC", err: "UC connection not possible in READ/ATOMIC verbs"},
		{args: "atomic_bw -c UC", err: "UC connection not possible in READ/ATOMIC verbs"},
		{args: "write_bw -c UC -R", err: "UC is not supported in librdmacm"},
		{args: "write_bw -c UD", err: "UD connection only possible in SEND verb"},
		{args: "send_bw -c XRC", err: "no XRC QPs"},
		{args: "send_bw -c UD -R -n 100", rx: 100},
		{args: "send_bw -c UD -z -n 100", rx: 100},
		{args: "send_lat -c UD -n 1000", rx: 1000},
		{args: "send_bw -c UD -n 1000", rx: 1000},
		{args: "send_bw -c UD -I 900", rx: 1000, inline: 884},
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
		if p.rxDepth != c.rx || p.inline != c.inline {
			t.Errorf("%s: rx depth %d, inline %d; want %d, %d", c.args, p.rxDepth, p.inline, c.rx, c.inline)
		}
	}
}
