package device

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/rdmacm"
)

// The rdma_cm steps the tools take on a CM (StartCM's): wait for an event,
// resolve an address and route, disconnect; and their wait for a completion.

// NoProgress is how long a tool waits for a completion before giving up on
// a vanished peer (perftest's server gives up after 120 s without a message).
const NoProgress = 60 * time.Second

// WaitCQ blocks until cq has a completion, until deadline (if not zero: then
// it returns nil, and the caller looks at the clock), or until nothing has
// happened for NoProgress (an error).
func WaitCQ(ctx context.Context, cq *ibtransport.CQ, deadline time.Time) error {
	limit := time.Now().Add(NoProgress)
	expired := false
	if !deadline.IsZero() && deadline.Before(limit) {
		limit, expired = deadline, true
	}
	wctx, cancel := context.WithDeadline(ctx, limit)
	defer cancel()
	err := cq.Wait(wctx)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, context.DeadlineExceeded) && expired:
		return nil // the caller's deadline: it looks at the clock
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("no completion for %v: is the peer still there?", NoProgress)
	}
	return err
}

// CMWait returns the next event of id of one of the wanted types; any
// other event, or none within timeout, is an error.
func CMWait(ctx context.Context, id *rdmacm.ID, timeout time.Duration, want ...rdmacm.EventType) (rdmacm.Event, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case ev := <-id.Events():
			for _, w := range want {
				if ev.Type == w {
					return ev, nil
				}
			}
			if ev.Type == rdmacm.EventTimewaitExit {
				continue
			}
			msg := fmt.Sprintf("rdma_cm event %v (status %d)", ev.Type, ev.Status)
			if ev.Err != nil {
				msg += ": " + ev.Err.Error()
			}
			return ev, &CMEventError{Got: ev.Type, Status: ev.Status, msg: msg + fmt.Sprintf(", want %v", want)}
		case <-t.C:
			return rdmacm.Event{}, fmt.Errorf("no rdma_cm event %v in %v", want, timeout)
		case <-ctx.Done():
			return rdmacm.Event{}, ctx.Err()
		}
	}
}

// CMEventError is an unexpected rdma_cm event (CMWait): one a caller may
// retry after, as a REJ of a server not listening yet.
type CMEventError struct {
	Got    rdmacm.EventType
	Status int
	msg    string
}

func (e *CMEventError) Error() string { return e.msg }

// CMDisconnect disconnects ids and waits up to timeout for each one's
// EventDisconnected.
func CMDisconnect(ids []*rdmacm.ID, timeout time.Duration) error {
	for _, id := range ids {
		id.Disconnect()
	}
	var first error
	for _, id := range ids {
		// A passive side's EventEstablished may still be unread.
		ev, err := CMWait(context.Background(), id, timeout, rdmacm.EventDisconnected, rdmacm.EventEstablished)
		if err == nil && ev.Type == rdmacm.EventEstablished {
			_, err = CMWait(context.Background(), id, timeout, rdmacm.EventDisconnected)
		}
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

// CMStep is how long one rdma_cm step (an address, a route, an answer to
// a REQ) may take: the IB CM's own retries (REQ timeouts of a few seconds)
// come first.
const CMStep = 30 * time.Second

// CMResolve resolves dst's address and route on id.
func CMResolve(ctx context.Context, id *rdmacm.ID, src netip.Addr, dst netip.AddrPort) error {
	if err := id.ResolveAddr(src, dst, 2*time.Second); err != nil {
		return err
	}
	if _, err := CMWait(ctx, id, CMStep, rdmacm.EventAddrResolved); err != nil {
		return err
	}
	if err := id.ResolveRoute(2 * time.Second); err != nil {
		return err
	}
	_, err := CMWait(ctx, id, CMStep, rdmacm.EventRouteResolved)
	return err
}

// ResolveHost returns the address a tool's HOST names (rping's -a,
// cmatose's -b and -s): an IP address, or a name's first IPv4 address.
func ResolveHost(ctx context.Context, s string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip4", s)
	if err != nil || len(ips) == 0 {
		return netip.Addr{}, fmt.Errorf("getaddrinfo %s: %v", s, err)
	}
	return ips[0].Unmap(), nil
}
