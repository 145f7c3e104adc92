package main

import (
	"context"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/oob/perftest"
)

// TestPerfRDMACMLoopback runs perf -R (and -z) softrdma against softrdma over
// UDP on loopback: the comm connection and the test connections by the IB CM
// on QP1, the parameters as SENDs on the comm QP. The same checks as
// TestPerfLoopback: both exit 0, perftest's layout, the keys agree, the rows.
func TestPerfRDMACMLoopback(t *testing.T) {
	for _, c := range []struct {
		test string
		args []string
	}{
		{test: "write_bw", args: []string{"-R", "-n", "5", "-s", "2"}},
		{test: "write_bw", args: []string{"-R", "-n", "5", "-s", "1M"}},
		{test: "write_bw", args: []string{"-R", "-n", "20", "-s", "4096", "-q", "2"}},
		{test: "send_bw", args: []string{"-R", "-n", "5", "-s", "4096"}},
		{test: "send_bw", args: []string{"-R", "-n", "10", "-s", "1024", "-b"}},
		{test: "read_bw", args: []string{"-R", "-n", "10", "-s", "10000"}},
		{test: "write_bw", args: []string{"-z", "-n", "10", "-s", "4096"}},
	} {
		t.Run(c.test+" "+strings.Join(c.args, " "), func(t *testing.T) {
			r := runPerfPair(t, c.test, c.args, nil, nil)
			if r.srvCode != 0 || r.cliCode != 0 {
				t.Fatalf("exchange failed\n%s", r)
			}
			checkPerfPair(t, c.test, c.args, r, 0)
			if strings.Contains(r.srvErr+r.cliErr, "disconnecting") {
				t.Errorf("disconnect failed:\n%s", r)
			}
		})
	}
}

// TestPerfQPCarrier: the comm QP carrier refuses a message longer than the
// receive expects, as perftest's fixed-size copies would misread it.
func TestPerfQPCarrierLimits(t *testing.T) {
	q := &perfQPCarrier{}
	if err := q.Send(context.Background(), make([]byte, perftest.DestBinarySize+1)); err == nil {
		t.Error("a 57-byte message was sent")
	}
}
