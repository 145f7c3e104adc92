package verbsdev_test

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestKernelMatch (testdata/kernelmatch.c): answers the library gives as the
// kernel's drivers and rdma_cm give them, read in their sources (Linux's rxe
// and siw, drivers/infiniband/core/cma.c and ucma.c, rdma-core's libsiw):
//   - cq->cqe after ibv_create_cq of 1, 100 and max_cqe entries is rxe's
//     rounding (1, 127, 32767) on RoCE, siw's (1, 128, 4194304) on iWARP;
//     it was the number asked for;
//   - on iWARP an atomic WR is refused at post with libsiw's -EINVAL; it
//     was EINVAL, or in RTS sent;
//   - RDMA_PS_IB makes an RC ID in a port space of its own, which connects
//     to a PS_IB listener on a port a TCP listener also holds (RoCE); it was
//     EOPNOTSUPP;
//   - rdma_resolve_addr of the device's own address with port 0 succeeds;
//     it was EINVAL;
//   - rdma_resolve_addr of 0.0.0.0 resolves to the device itself, unbound
//     and bound, and a connection to 0.0.0.0:PORT reaches the listener
//     (cma_resolve_loopback); it was an ADDR_ERROR.
func TestKernelMatch(t *testing.T) {
	lib := buildLib(t)
	prog := compileCM(t, lib, "kernelmatch")
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			addr := randomNet() + "1"
			out, errOut, err := runBounded(t, lib, tr+":"+addr, time.Minute, prog, addr, fmt.Sprint(20000+rand.IntN(20000)))
			if err != nil {
				t.Errorf("kernelmatch: %v", err)
			}
			for _, line := range strings.Split(out, "\n") {
				if strings.HasPrefix(line, "BAD ") {
					t.Error(line)
				}
			}
			if !regexp.MustCompile(`checks: \d+, bad: 0\n`).MatchString(out) {
				t.Fatalf("kernelmatch did not finish:\n%s\nstderr:\n%s", out, errOut)
			}
			if s := silentRefusals(errOut); len(s) > 0 {
				t.Errorf("refused without a word under SOFTRDMA_DEBUG=1: %q\n%s", s, errOut)
			}
		})
	}
}
