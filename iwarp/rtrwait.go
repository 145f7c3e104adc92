package iwarp

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// An initiator that chose the RFC 6581 Read RTR (peer-to-peer mode) learns
// from its zero-length Read Response that the responder is reading the
// stream: Dial returns only then, so the application's first message cannot
// go to a responder that is not receiving yet.
//
// Linux siw (6.1, siw_accept in siw_cm.c) needs this, and one more thing: it
// sends its MPA Reply and only then moves the socket's data-ready upcall to
// the QP (siw_qp_socket_assoc, or siw_sk_assign_rtr_upcalls in peer-to-peer
// mode). Data that arrives between the two is seen by its CM upcall, which
// ignores data in RDMA mode (siw_cm_llp_data_ready), and stays unread in the
// socket until more data arrives. Without peer-to-peer mode that stranded the
// initiator's first SEND (rping, perftest -R: the exchange hung, TCP ACKs
// and keep-alives only). So while the Read Response has not come, the
// initiator sends a zero-length RDMA Write now and then (after rtrKickFirst,
// doubling up to rtrKickMax): a zero-length Write places nothing and has no
// STag checked (RFC 5040 §5.3 and §7.2; siw_proc_write returns at once), and
// its arrival makes siw read what waits in the socket, the RTR first.
const (
	rtrKickFirst = 20 * time.Millisecond
	rtrKickMax   = time.Second
)

// errRTRUnanswered is why Dial fails when the connection ends before the
// Read RTR is answered.
var errRTRUnanswered = errors.New("iwarp: the connection ended before the peer answered the RTR Read Request")

// awaitRTRAnswer waits until the Read RTR is answered (at once without one),
// the connection ends, or ctx is done, asking the writer for a zero-length
// Write at each kick time.
func (c *Conn) awaitRTRAnswer(ctx context.Context) error {
	if c.rtrAnswered == nil {
		return nil
	}
	kick := rtrKickFirst
	t := time.NewTimer(kick)
	defer t.Stop()
	for {
		select {
		case <-c.rtrAnswered:
			return nil
		case <-c.done:
			if err := c.Err(); err != nil {
				return fmt.Errorf("%w: %w", errRTRUnanswered, err)
			}
			return errRTRUnanswered
		case <-ctx.Done():
			return fmt.Errorf("iwarp: waiting for the answer to the RTR Read Request: %w", ctx.Err())
		case <-t.C:
			c.kickWrite.Store(true)
			select {
			case c.kick <- struct{}{}:
			default:
			}
			kick = min(2*kick, rtrKickMax)
			t.Reset(kick)
		}
	}
}

// frameKick frames a zero-length RDMA Write (STag 0, TO 0), the writer's
// answer to awaitRTRAnswer's request.
func (c *Conn) frameKick() {
	f := RDMAPFields{Opcode: OpWrite, Last: true}
	c.tx.fpdu(c.tx.header(&f), nil)
}
