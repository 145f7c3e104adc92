package perf

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/ibtransport"
)

// TestPerfCompletionErrorReport: a completion with an error status, or a run
// that made no progress, is reported as perftest does and followed by the
// engine's state of each QP
// (ibtransport StateReport), so that a run ending in retry exceeded says what
// the transport saw (timeouts, retransmissions, NAKs, drops): before, a
// TestPerfLoopback failure under load said only "IBV_WC_RETRY_EXC_ERR".
func TestPerfCompletionErrorReport(t *testing.T) {
	ctx := ibtransport.NewContext(ibtransport.ContextConfig{Seed: 1})
	cq, err := ctx.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := ctx.CreateQP(ctx.AllocPD(), ibtransport.QPInitAttr{Type: ibtransport.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: ibtransport.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	s := &session{ctx: ctx}
	err = s.completionError(ibtransport.WC{WRID: 7, Status: ibtransport.WCRetryExcErr}, "send", 3, 2)
	for _, want := range []string{
		`^Completion with error at send: IBV_WC_RETRY_EXC_ERR \(status 12, wr 7, posted 3, completed 2\)\n`,
		`(?m)^context: 1 QPs; `,
		fmt.Sprintf(`(?m)^qp 0x%06x RC RESET`, qp.QPN()) + ` dest 0x000000: .* timeouts 0, probes 0, retransmitted 0,`,
	} {
		if !regexp.MustCompile(want).MatchString(err.Error()) {
			t.Errorf("no %q in\n%v", want, err)
		}
	}
	if err := s.withReport(context.Canceled); err != context.Canceled {
		t.Errorf("a cancelled run's error became %q", err)
	}
	if err := s.withReport(errors.New("no WRITE from the peer")); !strings.Contains(err.Error(), "no WRITE from the peer\ncontext: 1 QPs") {
		t.Errorf("no report after a run without progress: %q", err)
	}
	if (&session{}).completionError(ibtransport.WC{Status: ibtransport.WCRetryExcErr}, "send", 0, 0) == nil {
		t.Error("no error without a context")
	}
}
