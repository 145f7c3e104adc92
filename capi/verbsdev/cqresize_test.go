package verbsdev_test

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestResizeCQ (testdata/cqresize.c): ibv_resize_cq refuses what rxe refuses
// (0, beyond max_cqe, below the completions waiting: EINVAL), gives rxe's
// rounded depth in cq->cqe, and keeps the completions waiting, in order,
// across a shrink and a grow; on iWARP, like siw, it is EOPNOTSUPP. It was a
// stub answering EOPNOTSUPP on both.
func TestResizeCQ(t *testing.T) {
	lib := buildLib(t)
	prog := compile(t, lib, "cqresize")
	for _, tr := range []string{"roce", "iwarp"} {
		t.Run(tr, func(t *testing.T) {
			out, errOut, err := runBounded(t, lib, tr+":"+randomNet()+"1", time.Minute, prog)
			if err != nil {
				t.Errorf("cqresize: %v", err)
			}
			for _, line := range strings.Split(out, "\n") {
				if strings.HasPrefix(line, "BAD ") {
					t.Error(line)
				}
			}
			if !regexp.MustCompile(`checks: \d+, bad: 0\n`).MatchString(out) {
				t.Fatalf("cqresize did not finish:\n%s\nstderr:\n%s", out, errOut)
			}
			if s := silentRefusals(errOut); len(s) > 0 {
				t.Errorf("refused without a word under SOFTRDMA_DEBUG=1: %q\n%s", s, errOut)
			}
		})
	}
}
