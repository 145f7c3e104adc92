package decode

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket/layers"
)

// mergedCapture is rxe-write-bw-rdma-cm.pcap (flows #1 UD CM, #2 and #3 RC) followed,
// 10 s later, by siw-crc-rping.pcap (flow #4, iWARP).
func mergedCapture(t *testing.T) []byte {
	t.Helper()
	a := readFrames(t, readFile(t, filepath.Join(captureDir, "rxe-write-bw-rdma-cm.pcap")))
	b := readFrames(t, readFile(t, filepath.Join(captureDir, "siw-crc-rping.pcap")))
	shift := a[len(a)-1].ci.Timestamp.Add(10 * time.Second).Sub(b[0].ci.Timestamp)
	for _, f := range b {
		f.ci.Timestamp = f.ci.Timestamp.Add(shift)
		a = append(a, f)
	}
	return writeCapture(t, a, layers.LinkTypeEthernet, false)
}

// TestFilter: each filter prints exactly the packet lines of the unfiltered output that
// it selects (by an independent predicate on the unfiltered packets), keeps the flow
// numbers, summarizes the flows it shows, and counts only the packets shown.
func TestFilter(t *testing.T) {
	capture := mergedCapture(t)
	all := decodeRun(t, capture)
	if n := len(all.res.Flows); n != 4 || all.res.Flows[3].Transport != "iWARP" {
		t.Fatalf("merged capture: %d flows %+v", n, all.res.Flows)
	}
	qp := func(p Packet, q uint32) bool { return p.DestQP != nil && *p.DestQP == q }
	iwarpStart := all.res.Flows[3].First
	for _, tc := range []struct {
		name   string
		filter Filter
		pred   func(p Packet) bool
		flows  []int
	}{
		{"flow 3", Filter{Flows: []string{"3"}}, func(p Packet) bool { return qp(p, 0x1d) }, []int{3}},
		{"flow #2 and #4", Filter{Flows: []string{"#2", "4"}},
			func(p Packet) bool { return qp(p, 0x1c) || p.Transport == "iWARP" }, []int{2, 4}},
		{"flow ADDR:PORT", Filter{Flows: []string{"10.77.0.21:7174"}}, func(p Packet) bool { return p.Transport == "iWARP" }, []int{4}},
		{"flow ADDR", Filter{Flows: []string{"10.77.0.22"}}, func(p Packet) bool { return true }, []int{1, 2, 3, 4}},
		{"flow ADDR not there", Filter{Flows: []string{"10.77.0.99"}}, func(p Packet) bool { return false }, nil},
		{"qp 0x1c", Filter{QPs: []uint32{0x1c}}, func(p Packet) bool { return qp(p, 0x1c) }, []int{2}},
		{"qp 1 (the CM)", Filter{QPs: []uint32{1}}, func(p Packet) bool { return qp(p, 1) }, []int{1}},
		{"opcode rdma write", Filter{Opcodes: []string{"RDMA write"}},
			func(p Packet) bool { return strings.Contains(p.Opcode, "RDMA WRITE") }, []int{3}},
		{"opcode acknowledge or read", Filter{Opcodes: []string{"acknowledge", "READ"}},
			func(p Packet) bool {
				o := strings.ToLower(p.Opcode)
				return strings.Contains(o, "acknowledge") || strings.Contains(o, "read")
			}, []int{2, 3, 4}},
		{"opcode MPA", Filter{Opcodes: []string{"mpa"}}, func(p Packet) bool { return strings.HasPrefix(p.Opcode, "MPA") }, []int{4}},
		{"time from the iWARP flow", Filter{Start: iwarpStart, HasStart: true},
			func(p Packet) bool { return p.Time >= iwarpStart }, []int{4}},
		{"time window", Filter{Start: 1.1, End: 1.104, HasStart: true, HasEnd: true},
			func(p Packet) bool { return p.Time >= 1.1 && p.Time <= 1.104 }, []int{2, 3}},
		{"time to", Filter{End: 1.0, HasEnd: true}, func(p Packet) bool { return p.Time <= 1.0 }, []int{1}},
		{"flow, opcode and time", Filter{Flows: []string{"3"}, Opcodes: []string{"middle"}, Start: 1.103, HasStart: true},
			func(p Packet) bool { return qp(p, 0x1d) && strings.Contains(p.Opcode, "Middle") && p.Time >= 1.103 }, []int{3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.filter
			res, out, err := decodeBytes(t, capture, Options{Flows: true, Summary: true, Filter: &f})
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			frames := map[int]bool{}
			for i, p := range all.pkts {
				if tc.pred(p) {
					want = append(want, all.lines[i])
					frames[p.Frame] = true
				}
			}
			got := shownLines(out)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("%d packet lines, want %d:\n%s\nwant\n%s", len(got), len(want), strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if res.Packets != len(want) || res.RDMAFrames != len(frames) || res.Filter == "" || !strings.Contains(out, "filter "+res.Filter) {
				t.Errorf("packets %d, RDMA frames %d, filter %q; want %d, %d", res.Packets, res.RDMAFrames, res.Filter, len(want), len(frames))
			}
			var ids []int
			for _, fs := range res.Flows {
				ids = append(ids, fs.ID)
				w := all.res.Flows[fs.ID-1]
				if fs.A.String() != w.A.String() || fs.B.String() != w.B.String() {
					t.Errorf("flow #%d is %v ↔ %v, without the filter %v ↔ %v", fs.ID, fs.A, fs.B, w.A, w.B)
				}
				if fs.Transport == "iWARP" {
					continue
				}
				// A RoCE flow counts the packets shown, and finds no PSN gap or
				// duplicate the whole capture does not have.
				n := 0
				for _, p := range all.pkts {
					if tc.pred(p) && p.DestQP != nil && (fs.A.QP != nil && *fs.A.QP == *p.DestQP || fs.B.QP != nil && *fs.B.QP == *p.DestQP) {
						n++
					}
				}
				if fs.Packets != n || fs.PSNGaps != 0 || fs.Duplicates != w.Duplicates && tc.filter.Opcodes == nil && !tc.filter.HasStart && !tc.filter.HasEnd {
					t.Errorf("flow #%d: %d packets (want %d), %d PSN gaps, %d duplicates", fs.ID, fs.Packets, n, fs.PSNGaps, fs.Duplicates)
				}
			}
			if fmt.Sprint(ids) != fmt.Sprint(tc.flows) {
				t.Errorf("flows %v, want %v", ids, tc.flows)
			}
		})
	}
}

// TestFilterVerdicts: a filter changes what is shown, not the verdicts: the PSN gap
// before a packet is found over every packet of its direction (with --opcode Middle the
// gap of a lost WRITE Middle is still 1, not the PSNs of the First and Last hidden), and
// the problems of frames not shown are not counted (a corrupted frame outside the time
// range: exit 0).
func TestFilterVerdicts(t *testing.T) {
	frames := readFrames(t, readFile(t, filepath.Join(captureDir, "rxe-write-bw.pcap")))
	gap := writeCapture(t, append(append([]frameOut(nil), frames[:20]...), frames[21:]...), layers.LinkTypeEthernet, false)
	middle := Filter{Opcodes: []string{"middle"}}
	res, out, err := decodeBytes(t, gap, Options{Flows: true, Summary: true, Filter: &middle})
	if err != nil {
		t.Fatal(err)
	}
	lines := shownLines(out)
	if len(lines) != 9 || !strings.Contains(lines[0], "PSN=7564823 len=1024 [PSN gap: 1 missing before]") {
		t.Errorf("--opcode middle over a capture without frame 21: %d lines, first %q", len(lines), lines[0])
	}
	for _, l := range lines[1:] {
		if strings.Contains(l, "gap") {
			t.Errorf("gap on %q", l)
		}
	}
	if len(res.Flows) != 1 || res.Flows[0].PSNGaps != 1 || res.Flows[0].PSNsMissing != 1 {
		t.Errorf("flows %+v, want one with 1 gap of 1 PSN", res.Flows)
	}
	last := Filter{Opcodes: []string{"write last"}}
	if res, _, _ := decodeBytes(t, gap, Options{Flows: true, Summary: true, Filter: &last}); len(res.Flows) != 1 || res.Flows[0].PSNGaps != 0 || res.Flows[0].Packets != 5 {
		t.Errorf("--opcode 'write last': flows %+v, want one of 5 packets and no gap", res.Flows)
	}

	// Frame 21 corrupted: an error of the whole capture, of a filter that shows it, not
	// of one that does not.
	bad := append([]frameOut(nil), frames...)
	bad[20].data = append([]byte(nil), bad[20].data...)
	bad[20].data[len(bad[20].data)-6] ^= 0x20
	capture := writeCapture(t, bad, layers.LinkTypeEthernet, false)
	t21 := all21(t, capture)
	for _, tc := range []struct {
		name   string
		filter Filter
		errors int
	}{
		{"shown", Filter{Start: t21, End: t21, HasStart: true, HasEnd: true}, 1},
		{"after it", Filter{Start: t21 + 1e-6, HasStart: true}, 0},
		{"qp of its flow", Filter{QPs: []uint32{0x14}}, 1},
		{"other opcode", Filter{Opcodes: []string{"acknowledge"}}, 0},
	} {
		f := tc.filter
		res, _, err := decodeBytes(t, capture, Options{Flows: true, Summary: true, Filter: &f})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Errors) != tc.errors || res.CRCErrors != tc.errors || res.ExitCode() != min(tc.errors, 1) {
			t.Errorf("%s: errors %v, CRC errors %d, exit %d; want %d", tc.name, res.Errors, res.CRCErrors, res.ExitCode(), tc.errors)
		}
	}
}

// all21 returns the time of frame 21 of a capture, as the decoder prints it.
func all21(t *testing.T, capture []byte) float64 {
	t.Helper()
	for _, p := range decodeRun(t, capture).pkts {
		if p.Frame == 21 {
			return p.Time
		}
	}
	t.Fatal("no frame 21")
	return 0
}

// TestParseFilter: the flag values and their errors.
func TestParseFilter(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string // Filter.String, or the error
	}{
		{"1.5:2", "--time 1.5:2"},
		{":2", "--time :2"},
		{"3:", "--time 3:"},
		{"2:1", `time range "2:1": END 1 is before START 2`},
		{"x:1", `time range "x:1": START "x" is not a number of seconds`},
		{"1", `time range "1": want START:END in seconds since the first frame (either may be empty)`},
	} {
		f, err := ParseTimeRange(tc.in)
		got := f.String()
		if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("ParseTimeRange(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for _, tc := range []struct {
		in   string
		want string
	}{
		{"0x1c", "28"}, {"28", "28"}, {"0x1000000", `QP "0x1000000": want a 24-bit QP number, decimal or 0x hexadecimal`},
		{"qp", `QP "qp": want a 24-bit QP number, decimal or 0x hexadecimal`},
	} {
		n, err := ParseQP(tc.in)
		got := fmt.Sprint(n)
		if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("ParseQP(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for _, tc := range []struct {
		flow, want string
	}{
		{"0", `flow "0": flow numbers start at 1`},
		{"somewhere", `flow "somewhere": want a flow number (as the summary numbers them), ADDR, or ADDR:PORT`},
		{"[fd77::21]:7174", ""},
	} {
		f := Filter{Flows: []string{tc.flow}}
		err := f.Check()
		if got := fmt.Sprint(err); err == nil && tc.want != "" || err != nil && got != tc.want {
			t.Errorf("Check(--flow %s) = %v, want %q", tc.flow, err, tc.want)
		}
	}
}

// shownLines returns the packet lines of a text output.
func shownLines(out string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if packetLineRE.MatchString(l) {
			lines = append(lines, l)
		}
	}
	return lines
}
