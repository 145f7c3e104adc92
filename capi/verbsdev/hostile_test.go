package verbsdev_test

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestThreadsPostPoll (testdata/threads.c): threads post and poll on one RC
// QP pair and its CQs at once, as libibverbs allows (rdma-core's rxe provider
// takes the queue's lock in rxe_post_send, rxe_post_recv and rxe_poll_cq).
// Each row gives one verb four threads; every WR must complete exactly once
// and successfully. Before the library guarded its per-QP and per-CQ scratch
// space, four posting threads crashed the process (index out of range in
// srgo_post_send), and four receivers or pollers saw completions twice and
// lost others.
func TestThreadsPostPoll(t *testing.T) {
	lib := buildLib(t)
	prog := compile(t, lib, "threads")
	const want = `post errors: 0
sends completed once: 12000 of 12000 (twice or more: 0)
recvs completed once: 12000 of 12000 (twice or more: 0)
bad status: 0, unknown wr_id: 0
`
	for _, mode := range []string{"send", "wr", "recv", "poll", "pollex"} {
		t.Run(mode, func(t *testing.T) {
			out, errOut, err := runBounded(t, lib, "roce:"+randomNet()+"1", 2*time.Minute, prog, mode)
			if err != nil || out != want {
				t.Errorf("threads %s: %v\n%s%s\nwant\n%s", mode, err, out, errOut, want)
			}
		})
	}
}

// TestHostileCalls (testdata/hostile.c) makes the wrong and hostile calls
// TestBadCalls does not: SGE counts that are negative or far beyond the
// queue's (with the list ending at an unmapped page), ibv_poll_cq asked for
// no entries or a negative number, regions over unmapped, inaccessible or
// read-only pages, SGEs outside their region or keys of another PD,
// zero-byte transfers with bad keys, out-of-range attributes and
// transitions in ibv_modify_qp, addresses on a port or GID entry the device
// lacks, and destroying what is in use. Each answer must be the one
// libibverbs gives over the kernel's rxe (the program cites the source of
// each), the process must neither crash nor hang, and every refused call must
// say why under SOFTRDMA_DEBUG=1.
func TestHostileCalls(t *testing.T) {
	lib := buildLib(t)
	prog := compile(t, lib, "hostile")
	out, errOut, err := runBounded(t, lib, "roce:"+randomNet()+"1", 2*time.Minute, prog)
	if err != nil {
		t.Errorf("hostile: %v", err)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "BAD ") {
			t.Error(line)
		}
	}
	m := regexp.MustCompile(`checks: (\d+), bad: 0\n`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("hostile did not finish:\n%s\nstderr:\n%s", out, errOut)
	}
	if s := silentRefusals(errOut); len(s) > 0 {
		t.Errorf("refused without a word under SOFTRDMA_DEBUG=1: %q", s)
	}
	t.Logf("%s checks", m[1])
}

// TestCMOutOfOrder (testdata/cmorder.c): rdma_cm calls out of order and
// with wrong arguments (resolve_route, connect, accept, reject and
// disconnect before their state, binding or listening twice, accepting on a
// listener, a second QP, joining a multicast group with an RC ID, acking
// NULL), then the same ID connecting in order. Each answer must be
// librdmacm's over the kernel's rdma_cm (the program cites each), and every
// refusal must say why under SOFTRDMA_DEBUG=1. Over both transports.
func TestCMOutOfOrder(t *testing.T) {
	lib := buildLib(t)
	prog := compileCM(t, lib, "cmorder")
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			addr := randomNet() + "1"
			out, errOut, err := runBounded(t, lib, tr+":"+addr, time.Minute, prog, addr)
			if err != nil {
				t.Errorf("cmorder: %v", err)
			}
			for _, line := range strings.Split(out, "\n") {
				if strings.HasPrefix(line, "BAD ") {
					t.Error(line)
				}
			}
			if !regexp.MustCompile(`checks: \d+, bad: 0\n`).MatchString(out) {
				t.Fatalf("cmorder did not finish:\n%s\nstderr:\n%s", out, errOut)
			}
			if s := silentRefusals(errOut); len(s) > 0 {
				t.Errorf("refused without a word under SOFTRDMA_DEBUG=1: %q", s)
			}
		})
	}
}
