package verbsdev_test

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestReregMR (testdata/rereg.c): ibv_rereg_mr returns rdma-core's codes
// (IBV_REREG_MR_ERR_INPUT for input libibverbs refuses, IBV_REREG_MR_ERR_CMD
// for what the kernel refuses, errno set) and moves a region to other access
// flags, another PD and other memory, through which an RDMA WRITE then goes;
// every refusal says why under SOFTRDMA_DEBUG=1. It was a stub returning
// EOPNOTSUPP (95), none of the verb's values.
func TestReregMR(t *testing.T) {
	lib := buildLib(t)
	prog := compile(t, lib, "rereg")
	out, errOut, err := runBounded(t, lib, "roce:"+randomNet()+"1", time.Minute, prog)
	if err != nil {
		t.Errorf("rereg: %v", err)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "BAD ") {
			t.Error(line)
		}
	}
	if !regexp.MustCompile(`checks: \d+, bad: 0\n`).MatchString(out) {
		t.Fatalf("rereg did not finish:\n%s\nstderr:\n%s", out, errOut)
	}
	if s := silentRefusals(errOut); len(s) > 0 {
		t.Errorf("refused without a word under SOFTRDMA_DEBUG=1: %q", s)
	}
}
