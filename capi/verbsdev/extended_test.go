package verbsdev_test

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestExtendedVerbs: the extended CQ and QP API (ibv_create_cq_ex with
// ibv_start_poll/ibv_next_poll/ibv_end_poll and ibv_wc_read_*;
// ibv_create_qp_ex, ibv_qp_to_qp_ex and the ibv_wr_* builders), reached
// through struct verbs_context as rdma-core's inline wrappers reach it.
//   - Debian's ibv_rc_pingpong -N ("use new post send WR API": ibv_create_qp_ex
//     with IBV_QP_EX_WITH_SEND, ibv_wr_start/ibv_wr_send/ibv_wr_set_sge/
//     ibv_wr_complete for every send), both ends, -c checking the data.
//   - pyverbs (testdata/pyverbs_extended.py): CQEX polled with start_poll,
//     poll_next and end_poll, QPEx posting a SEND and an RDMA WRITE with
//     immediate in one wr_start..wr_complete; the four completions carry
//     their wr_id, status, opcode and byte_len, the bytes arrive; a CQ with
//     completion timestamps and a QP with memory-window binds are refused
//     with EOPNOTSUPP, each with its SOFTRDMA_DEBUG line.
func TestExtendedVerbs(t *testing.T) {
	lib := buildLib(t)
	t.Run("ibv_rc_pingpong -N", func(t *testing.T) {
		so, co, _, _ := pair(t, lib, "ibv_rc_pingpong", "-g", "1", "-N", "-n", "200", "-c")
		for _, o := range []string{so, co} {
			if !strings.Contains(o, "200 iters in ") || strings.Contains(o, "invalid data") {
				t.Errorf("ibv_rc_pingpong -N did not finish with good data:\nserver:\n%s\nclient:\n%s", so, co)
			}
		}
	})
	t.Run("pyverbs CQEX QPEx", func(t *testing.T) {
		if err := exec.Command("/usr/bin/python3", "-c", "import pyverbs.device").Run(); err != nil {
			t.Skip("needs Debian's python3-pyverbs (scripts/deps.sh lib installs it)")
		}
		out, errOut, err := runBounded(t, lib, "roce:"+randomNet()+"1", time.Minute, "/usr/bin/python3", "testdata/pyverbs_extended.py")
		if err != nil {
			t.Fatalf("pyverbs: %v\n%s%s", err, out, errOut)
		}
		want := `device sr_roce0 port state 4 max_qp_wr True
plain completions [(1, 0, 0), (2, 0, 128)]
plain received b'plain send'
extended completions [(10, 0, 0, 13), (11, 0, 1, 16), (20, 0, 128, 13), (21, 0, 129, 16)]
extended received b'extended send' b'written with imm'
refused cq timestamps 95
refused ud qp bind_mw 95
`
		if out != want {
			t.Errorf("pyverbs printed\n%s%s\nwant\n%s", out, errOut, want)
		}
		for _, w := range []string{"softrdma: create cq ex: wc_flags 0x80", "softrdma: create qp ex: send_ops_flags 0x100 not supported on QP type 4"} {
			if !strings.Contains(errOut, w) {
				t.Errorf("no %q on stderr:\n%s", w, errOut)
			}
		}
	})
}
