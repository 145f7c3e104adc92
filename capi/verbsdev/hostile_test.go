package verbsdev_test

import (
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
	for _, mode := range []string{"send", "recv", "poll"} {
		t.Run(mode, func(t *testing.T) {
			out, errOut, err := runBounded(t, lib, "roce:"+randomNet()+"1", 2*time.Minute, prog, mode)
			if err != nil || out != want {
				t.Errorf("threads %s: %v\n%s%s\nwant\n%s", mode, err, out, errOut, want)
			}
		})
	}
}
