package verbsdev_test

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestMemoryWindows (testdata/mw.c): a window bound in one process gives its
// peer remote WRITE and READ into the window's range of a region that has no
// remote rights of its own, and nothing outside it; once the window is
// invalidated, the peer's WRITE completes with IBV_WC_REM_ACCESS_ERR and
// changes nothing. Type 1 through ibv_bind_mw (unbound by a zero-length
// bind), type 2 through an IBV_WR_BIND_MW work request (invalidated by the
// peer's SEND_WITH_INV) and through ibv_wr_bind_mw on an extended QP
// (invalidated by ibv_wr_local_inv, or by the peer's ibv_wr_send_inv). ibv_alloc_mw was EOPNOTSUPP: the device
// advertised windows as rxe does but set no alloc_mw.
func TestMemoryWindows(t *testing.T) {
	lib := buildLib(t)
	prog := compile(t, lib, "mw")
	done := regexp.MustCompile(`(?m)^done \d+ checks, 0 bad$`)
	for _, mode := range []string{"1", "2", "2x", "2xs"} {
		t.Run("type "+mode, func(t *testing.T) {
			so, co, _, _ := pair(t, lib, prog, "-t", mode)
			for name, out := range map[string]string{"owner": so, "peer": co} {
				for _, line := range strings.Split(out, "\n") {
					if strings.HasPrefix(line, "BAD ") {
						t.Errorf("%s: %s", name, line)
					}
				}
				if !done.MatchString(out) {
					t.Errorf("%s did not finish:\n%s", name, out)
				}
			}
		})
	}
}

// TestMWErrors (testdata/mwerrors.c): the memory window verbs refuse what
// rxe refuses, with its errno (type 3, ibv_bind_mw of a type 2 window, a
// range without a region, zero-based: EINVAL; a region of another PD: EPERM;
// a BIND_MW WR with an SGE: EINVAL; a PD with a window: EBUSY) or its
// completion status (IBV_WC_MW_BIND_ERR for a region without MW_BIND, a type 2
// bind on a QP of another PD, of length 0 or of a bound window;
// IBV_WC_LOC_QP_OP_ERR for LOCAL_INV of a type 1 window), saying why under
// SOFTRDMA_DEBUG=1; on iWARP, which has no windows (siw), ibv_alloc_mw is
// EOPNOTSUPP.
func TestMWErrors(t *testing.T) {
	lib := buildLib(t)
	prog := compile(t, lib, "mwerrors")
	for _, tr := range []string{"roce", "iwarp"} {
		t.Run(tr, func(t *testing.T) {
			out, errOut, err := runBounded(t, lib, tr+":"+randomNet()+"1", time.Minute, prog)
			if err != nil {
				t.Errorf("mwerrors: %v", err)
			}
			for _, line := range strings.Split(out, "\n") {
				if strings.HasPrefix(line, "BAD ") {
					t.Error(line)
				}
			}
			if !regexp.MustCompile(`checks: \d+, bad: 0\n`).MatchString(out) {
				t.Fatalf("mwerrors did not finish:\n%s\nstderr:\n%s", out, errOut)
			}
			if s := silentRefusals(errOut); len(s) > 0 {
				t.Errorf("refused without a word under SOFTRDMA_DEBUG=1: %q\n%s", s, errOut)
			}
		})
	}
}
