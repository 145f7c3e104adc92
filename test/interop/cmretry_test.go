package interop_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/test/interop"
)

// refusedConnect reports whether a failed rdma_cm client run was refused
// before any connection was made: the server's rdma_cm did not listen yet,
// and the kernel's iw_cm (TCP RST) or IB CM (REJ, invalid service ID) said so.
// These are the tools' own lines for the first connect's refusal:
//
//   - rping (rdma-core's librdmacm/examples/rping.c, cma_event_handler):
//     "cma event RDMA_CM_EVENT_REJECTED, error N", and over siw, whose
//     rdma_connect fails at once on the RST, "rdma_connect: Connection refused";
//   - perftest -R (perftest_communication.c, rdma_client_connect, the first
//     connection, which carries the out-of-band exchange):
//     "Unexpected CM event bl blka 8" (8 is RDMA_CM_EVENT_REJECTED);
//   - ucmatose and udaddy (librdmacm/examples cmatose.c, udaddy.c,
//     cma_handler): "cmatose: event: RDMA_CM_EVENT_REJECTED, error: N",
//     and udaddy's "udaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: N" (a
//     SIDR_REP refusing the request) or REJECTED;
//   - rstream -T b (librdmacm/examples/rstream.c, client_connect): a blocking
//     rconnect refused, "rconnect: Connection refused".
//
// Anything else, and any refusal after a connection was established
// (perftest's second connection, "RDMA CM event error: ... REJECTED", comes
// after the first exchange: the server is then past its first listen and a
// rerun could not connect), is a failure of the exchange, never retried.
func refusedConnect(r interop.Result) bool {
	if r.OK() {
		return false
	}
	out := r.Stdout + r.Stderr
	for _, after := range []string{
		"RDMA CM event error", // perftest's second connection
		"ping data",           // rping exchanged data
		"Failed to sync",      // perftest got past its first connection
		"local address",       // perftest printed its first exchange
		"server ping data",    // rping server side, for completeness
		"Bad wc status",       // a completion failed: connected
		"Couldn't post",       // as above
		"Unable to read",      // perftest's out-of-band exchange failed
		"Failed to exchange",  // as above
		"data transfers",      // ucmatose and udaddy: connected
	} {
		if strings.Contains(out, after) {
			return false
		}
	}
	for _, refused := range []string{
		"cma event RDMA_CM_EVENT_REJECTED",
		"rdma_connect: Connection refused",
		"Unexpected CM event bl blka 8\n",
		"cmatose: event: RDMA_CM_EVENT_REJECTED",
		"udaddy: event: RDMA_CM_EVENT_UNREACHABLE",
		"udaddy: event: RDMA_CM_EVENT_REJECTED",
		"rconnect: Connection refused",
	} {
		if strings.Contains(out, refused) {
			return true
		}
	}
	return false
}

// retryCMClient runs a client until it succeeds or fails other than by a
// refused first connect (refusedConnect), at most 30 times; the result's
// output holds every attempt's, so that no failure is hidden.
func retryCMClient(run func() interop.Result) interop.Result {
	var all []string
	for try := 0; ; try++ {
		r := run()
		if try > 0 {
			r.Stderr = strings.Join(all, "") + fmt.Sprintf("=== attempt %d\n", try+1) + r.Stderr
		}
		if r.OK() || !refusedConnect(r) || try == 29 {
			return r
		}
		all = append(all, fmt.Sprintf("=== attempt %d, refused (exit %d after %v):\n%s%s", try+1, r.ExitCode,
			r.Duration.Round(time.Millisecond), r.Stdout, r.Stderr))
		time.Sleep(time.Second)
	}
}

// TestRefusedConnect checks the classification of client runs that
// retryCMClient retries, on the tools' real output.
func TestRefusedConnect(t *testing.T) {
	for _, c := range []struct {
		name string
		r    interop.Result
		want bool
	}{
		{"ok", interop.Result{Stdout: "rping data"}, false},
		{"rping REJ", interop.Result{ExitCode: 255, Stderr: "cma event RDMA_CM_EVENT_REJECTED, error 8\nwait for CONNECTED state 4\nconnect error -1\n"}, true},
		{"rping siw RST", interop.Result{ExitCode: 255, Stderr: "rdma_connect: Connection refused\nconnect error -1\n"}, true},
		{"perftest first connect", interop.Result{ExitCode: 1, Stderr: "Unexpected CM event bl blka 8\n Unable to perform rdma_client function\n"}, true},
		{"perftest second connect", interop.Result{ExitCode: -1, Stderr: "RDMA CM event error:\nEvent: RDMA_CM_EVENT_REJECTED; error: -111.\n"}, false},
		{"perftest flush", interop.Result{ExitCode: 1, Stderr: "Unexpected CM event bl blka 8\n Bad wc status -- 5 --\n"}, false},
		{"silent failure", interop.Result{ExitCode: 1}, false},
		{"rping data then REJ", interop.Result{ExitCode: 1, Stdout: "ping data: rdma-ping-0\n", Stderr: "cma event RDMA_CM_EVENT_REJECTED, error 8\n"}, false},
		{"other CM event", interop.Result{ExitCode: 1, Stderr: "Unexpected CM event bl blka 9\n"}, false},
		{"ucmatose REJ", interop.Result{ExitCode: 8, Stdout: "cmatose: starting client\ncmatose: connecting\ncmatose: event: RDMA_CM_EVENT_REJECTED, error: 8\ntest complete\nreturn status 8\n"}, true},
		{"udaddy SIDR refused", interop.Result{ExitCode: 1, Stdout: "udaddy: starting client\nudaddy: connecting\nudaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: 1\ntest complete\nreturn status 1\n"}, true},
		{"rstream refused", interop.Result{ExitCode: 255, Stdout: "name      bytes   xfers   iters   total       time     Gb/sec    usec/xfer\n", Stderr: "rconnect: Connection refused\n"}, true},
		{"rstream connected, then failed", interop.Result{ExitCode: 255, Stderr: "rrecv: Connection reset by peer\n"}, false},
		{"ucmatose connected, then failed", interop.Result{ExitCode: 1, Stdout: "cmatose: connecting\nreceiving data transfers\ncmatose: event: RDMA_CM_EVENT_REJECTED, error: 8\n"}, false},
	} {
		if got := refusedConnect(c.r); got != c.want {
			t.Errorf("%s: refusedConnect = %v, want %v", c.name, got, c.want)
		}
	}
}
