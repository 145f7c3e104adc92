package verbsdev_test

import (
	"strings"
	"testing"
)

// TestSRQResize builds testdata/srqresize.c against rdma-core's headers and
// runs it on the library: the RoCE device claims IBV_DEVICE_SRQ_RESIZE as
// rxe does, and ibv_modify_srq with IBV_SRQ_MAX_WR grows an SRQ holding WRs,
// refuses (EINVAL) a depth below them, of 0 or beyond max_srq_wr, and a limit
// above the depth, and ibv_query_srq reports the new depth and limit.
func TestSRQResize(t *testing.T) {
	lib := buildLib(t)
	prog := compile(t, lib, "srqresize")
	addr := randomNet() + "1"
	out, errOut, err := run(t, lib, "roce:"+addr, prog)
	if err != nil || strings.Contains(out, "BAD") {
		t.Fatalf("srqresize: %v\n%s%s", err, out, errOut)
	}
	t.Log(out)
}
