package decode

import (
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"
)

// Filter restricts which packets Run prints and summarizes. Each of its parts that is
// set must match: a packet is shown if it is in one of Flows (or any flow when none is
// given), to or in a flow of one of QPs, of one of Opcodes, and in the time range.
//
// The verdicts of a packet do not depend on the filter: PSN gaps and duplicates are
// found over every packet of its direction. The summary's totals count the packets
// shown (and the problems of their frames, and of the file); its flows are the flows
// selected, each counting its packets in the time range and of the opcodes (an iWARP
// flow's TCP counts, segments and bytes, are those in the time range).
type Filter struct {
	// Flows are flow numbers, as the summary numbers them (#1, the first flow of the
	// capture, with no filter), or addresses: ADDR (a flow with an end at it) or
	// ADDR:PORT / [ADDR]:PORT (an iWARP connection with that end).
	Flows []string
	// QPs are QP numbers: a RoCE packet to one, or in a QP pair with one at an end.
	QPs []uint32
	// Opcodes are opcode names, matched case-insensitively against the packet's opcode
	// as printed ("RC RDMA WRITE First", "Read Request", "MPA Request"): a name matches
	// an opcode that contains it ("write" matches every RDMA WRITE opcode).
	Opcodes []string
	// Start and End bound the packets' times, in seconds since the first frame, both
	// included; HasStart and HasEnd say whether each bound is set.
	Start, End       float64
	HasStart, HasEnd bool
}

// ParseTimeRange parses "START:END", either side possibly empty ("1.5:", ":2"), in
// seconds since the first frame.
func ParseTimeRange(s string) (f Filter, err error) {
	a, b, ok := strings.Cut(s, ":")
	if !ok {
		return f, fmt.Errorf("time range %q: want START:END in seconds since the first frame (either may be empty)", s)
	}
	parse := func(v, which string) (float64, bool, error) {
		if v = strings.TrimSpace(v); v == "" {
			return 0, false, nil
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			return 0, false, fmt.Errorf("time range %q: %s %q is not a number of seconds", s, which, v)
		}
		return x, true, nil
	}
	if f.Start, f.HasStart, err = parse(a, "START"); err != nil {
		return f, err
	}
	if f.End, f.HasEnd, err = parse(b, "END"); err != nil {
		return f, err
	}
	if f.HasStart && f.HasEnd && f.End < f.Start {
		return f, fmt.Errorf("time range %q: END %v is before START %v", s, f.End, f.Start)
	}
	return f, nil
}

// ParseQP parses a QP number: decimal, or hexadecimal with 0x (as the packet lines
// print it), at most 24 bits.
func ParseQP(s string) (uint32, error) {
	v, err := strconv.ParseUint(strings.TrimSpace(s), 0, 32)
	if err != nil || v > 0xffffff {
		return 0, fmt.Errorf("QP %q: want a 24-bit QP number, decimal or 0x hexadecimal", s)
	}
	return uint32(v), nil
}

// flowSpec is one parsed Filter.Flows entry.
type flowSpec struct {
	id   int
	addr netip.Addr
	port int // -1: any
}

func parseFlowSpec(s string) (flowSpec, error) {
	s = strings.TrimSpace(s)
	if n, err := strconv.Atoi(strings.TrimPrefix(s, "#")); err == nil {
		if n < 1 {
			return flowSpec{}, fmt.Errorf("flow %q: flow numbers start at 1", s)
		}
		return flowSpec{id: n}, nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return flowSpec{addr: a.Unmap(), port: -1}, nil
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return flowSpec{addr: ap.Addr().Unmap(), port: int(ap.Port())}, nil
	}
	return flowSpec{}, fmt.Errorf("flow %q: want a flow number (as the summary numbers them), ADDR, or ADDR:PORT", s)
}

// Check reports the first malformed entry of the filter.
func (f *Filter) Check() error {
	for _, s := range f.Flows {
		if _, err := parseFlowSpec(s); err != nil {
			return err
		}
	}
	for _, o := range f.Opcodes {
		if strings.TrimSpace(o) == "" {
			return fmt.Errorf("opcode %q: empty name", o)
		}
	}
	return nil
}

// String describes the filter as the command's flags would.
func (f *Filter) String() string {
	var s []string
	for _, x := range f.Flows {
		s = append(s, "--flow "+x)
	}
	for _, q := range f.QPs {
		s = append(s, fmt.Sprintf("--qp 0x%06x", q))
	}
	for _, o := range f.Opcodes {
		s = append(s, strconv.Quote(o))
	}
	if len(f.Opcodes) > 0 {
		s[len(s)-len(f.Opcodes)] = "--opcode " + s[len(s)-len(f.Opcodes)]
	}
	if f.HasStart || f.HasEnd {
		r := "--time "
		if f.HasStart {
			r += strconv.FormatFloat(f.Start, 'f', -1, 64)
		}
		r += ":"
		if f.HasEnd {
			r += strconv.FormatFloat(f.End, 'f', -1, 64)
		}
		s = append(s, r)
	}
	return strings.Join(s, " ")
}

// needsFlows says the filter selects by flow: the flow of each packet must be known
// when it is printed, which takes a first pass over the capture.
func (f *Filter) needsFlows() bool { return len(f.Flows) > 0 || len(f.QPs) > 0 }

// inTime reports whether t (seconds since the first frame) is in the range.
func (f *Filter) inTime(t float64) bool {
	return (!f.HasStart || t >= f.Start) && (!f.HasEnd || t <= f.End)
}

// opcodeMatch reports whether an opcode name matches Opcodes.
func (f *Filter) opcodeMatch(op string) bool {
	if len(f.Opcodes) == 0 {
		return true
	}
	lop := strings.ToLower(op)
	for _, o := range f.Opcodes {
		if strings.Contains(lop, strings.ToLower(strings.TrimSpace(o))) {
			return true
		}
	}
	return false
}

// flowSelected reports whether a flow (as the first pass summarized it) is selected by
// Flows and QPs.
func (f *Filter) flowSelected(fs *FlowSummary) bool {
	if len(f.Flows) > 0 {
		ok := false
		for _, x := range f.Flows {
			spec, _ := parseFlowSpec(x)
			if spec.id != 0 {
				ok = ok || spec.id == fs.ID
				continue
			}
			for _, e := range []Endpoint{fs.A, fs.B} {
				a, err := netip.ParseAddr(e.Addr)
				if err != nil || a.Unmap() != spec.addr {
					continue
				}
				if spec.port < 0 || e.Port != nil && int(*e.Port) == spec.port {
					ok = true
				}
			}
		}
		if !ok {
			return false
		}
	}
	if len(f.QPs) > 0 {
		for _, q := range f.QPs {
			if fs.A.QP != nil && *fs.A.QP == q || fs.B.QP != nil && *fs.B.QP == q {
				return true
			}
		}
		return false
	}
	return true
}
