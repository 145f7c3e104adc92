package interop_test

import (
	"testing"

	"github.com/softrdma/softrdma/test/interop"
)

// TestRXEPerfRDMACM runs softrdma perf -R against perftest 4.5's ib_write_bw -R
// ib_send_bw -R and ib_read_bw -R over the kernel's rxe in a guest, softrdma as client and
// as server, at 2 bytes, 4096 and 1 MiB (reads at 64 KiB): both connections — perftest's "comm"
// QP that carries the parameters as RC SENDs, and the test QP — are made by
// rdma_cm, through the IB CM on QP1 (REQ, REP, RTU; DREQ, DREP at the end).
// The checks are TestRXEPerf's: both sides succeed, print perftest's layout,
// agree on each other's keys and results, and softrdma's capture (which has
// the CM MADs too) decodes with no error and has no malformed frame in tshark.
func TestRXEPerfRDMACM(t *testing.T) {
	h := interop.Require(t)
	g := h.Boot(t, "cmperf61", interop.BootOptions{IP: "10.77.0.61", IP6: "fd77::61", Links: "rxe"})
	for _, server := range []bool{false, true} {
		for _, c := range []perfCase{
			{tool: "ib_write_bw", size: 2},
			{tool: "ib_write_bw", size: 4096},
			{tool: "ib_write_bw", size: 1 << 20},
			{tool: "ib_send_bw", size: 2},
			{tool: "ib_send_bw", size: 4096},
			{tool: "ib_send_bw", size: 1 << 20},
			{tool: "ib_read_bw", size: 65536},
		} {
			c.server, c.iters, c.mtu, c.extra = server, perfIters, 1024, []string{"-R"}
			t.Run(c.String(), func(t *testing.T) { runRXEPerf(t, h, g, c) })
		}
	}
}
