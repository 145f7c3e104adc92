package conform

import (
	"context"
	"fmt"
	"sort"
	"strings"
)

// Kernel peers. The Linux kernel's rxe and siw serve no control protocol, but the
// tools that run on them hand a tester most of what the cases need:
//
//   - RoCE (rxe): a perftest server (ib_write_bw, ib_read_bw, ib_atomic_bw,
//     ib_send_bw) in the guest, with the tester as its client over perftest's TCP
//     exchange, gives one RC QP in RTS connected to the tester's QPN, expecting the
//     tester's PSN, and one region whose R_Key, address and length the exchange
//     tells (PerftestControl). ib_send_bw's server has receives posted.
//   - iWARP (siw): rping's persistent server gives an rdma_cm listener behind which
//     siw speaks MPA, and a QP with one 16-octet receive posted (RpingControl).
//
// Neither shows completions, QP states or memory: PollCQ and QueryQP answer with
// ErrUnobservable (the case then passes on its wire checks alone, saying so; a
// RoCE case that wants the error state probes it on the wire), ReadMR and WriteMR
// are not offered. Which server each case runs against, and why a case cannot run,
// is the kernel plan of each catalogue (KernelRoCEPlan, KernelIWARPPlan).

// KernelPlan is how one case runs against a kernel peer.
type KernelPlan struct {
	// Server is the peer-side tool the case needs: for RoCE "write", "read",
	// "atomic", "send" or "send16" (perftest servers), for iWARP "rping"; empty
	// if the case cannot run.
	Server string
	// Why says why the server fits (Server set) or why the case is not applicable.
	Why string
}

// kernelSession is what a kernel Control knows about the running case.
type kernelSession struct {
	id   string
	plan KernelPlan
}

// kernelCases wraps cases so that each one first tells the control (via begin)
// which case runs, and cases the plan rules out are not applicable.
func kernelCases(cases []Case, plan map[string]KernelPlan, begin func(kernelSession)) []Case {
	out := make([]Case, len(cases))
	for i, c := range cases {
		c := c
		p, ok := plan[c.ID]
		if !ok {
			p = KernelPlan{Why: "no kernel plan for this case"}
		}
		run := c.Run
		c.Run = func(ctx context.Context) Verdict {
			if p.Server == "" {
				return NotApplicablef("kernel peer: %s", p.Why)
			}
			begin(kernelSession{id: c.ID, plan: p})
			return run(ctx)
		}
		out[i] = c
	}
	return out
}

// unobservable returns an error wrapping ErrUnobservable.
func unobservable(what string) error {
	return fmt.Errorf("%s (%w)", what, ErrUnobservable)
}

// KernelApplicable returns the IDs the plan runs, sorted.
func KernelApplicable(plan map[string]KernelPlan) []string {
	var ids []string
	for id, p := range plan {
		if p.Server != "" {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// KernelResultsTable writes rep as the Markdown table of test/conform/kernel-results.md:
// case, citation (the section and compliance statement as the catalogue has
// them, with MUST or SHOULD), verdict ("pass", "pass (wire only)", "FAIL",
// "FAIL (waived)", "n/a") and the reason (a waived failure's with its waiver).
func KernelResultsTable(rep *Report) string {
	var b strings.Builder
	b.WriteString("| case | section | verdict | detail |\n| --- | --- | --- | --- |\n")
	wireOnly, failed, waived := 0, 0, 0
	for _, c := range rep.Cases {
		v := KernelVerdict(c)
		switch c.Result {
		case Pass:
			if v == "pass (wire only)" {
				wireOnly++
			}
		case Fail:
			failed++
		case Waived:
			failed++
			waived++
		}
		reason := strings.TrimPrefix(c.Reason, WireOnlyPrefix)
		reason = strings.ReplaceAll(reason, " ("+ErrUnobservable.Error()+")", " are not observable")
		reason = strings.TrimPrefix(reason, "kernel peer: ")
		if c.Result == Waived && c.Waiver != "" {
			reason += "; waiver: " + c.Waiver
		}
		reason = strings.ReplaceAll(reason, "|", "\\|")
		reason = strings.ReplaceAll(reason, "\n", " ")
		cite := c.Citation
		if cite == "" {
			cite = c.Section
		}
		if c.Level != "" {
			cite += fmt.Sprintf(" (%s)", c.Level)
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", c.ID, cite, v, reason)
	}
	fmt.Fprintf(&b, "\n%d cases: %d pass (%d of them on the wire only), %d fail", len(rep.Cases), rep.Passed, wireOnly, failed)
	if waived > 0 {
		fmt.Fprintf(&b, " (%d of them waived)", waived)
	}
	fmt.Fprintf(&b, ", %d not applicable.\n", rep.NotApplicable)
	first := true
	for _, c := range rep.Cases {
		if (c.Result != Fail && c.Result != Waived) || len(c.Seen) == 0 {
			continue
		}
		if first {
			b.WriteString("\nBytes seen in the failures (from the transport header on: BTH for RoCE, MPA length for iWARP):\n\n")
			first = false
		}
		for i, h := range c.Seen {
			fmt.Fprintf(&b, "- `%s` seen[%d]: `%s`\n", c.ID, i, h)
		}
	}
	return b.String()
}

// KernelVerdict is a case's verdict as kernel-results.md writes it.
func KernelVerdict(c CaseReport) string {
	switch {
	case c.Result == Pass && strings.HasPrefix(c.Reason, WireOnlyPrefix):
		return "pass (wire only)"
	case c.Result == Pass:
		return "pass"
	case c.Result == NotApplicable:
		return "n/a"
	case c.Result == Waived:
		return "FAIL (waived)"
	}
	return "FAIL"
}
