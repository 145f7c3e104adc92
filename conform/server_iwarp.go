package conform

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/iwarp"
)

// iwarpQP is an iWARP QP's listener and, once the tester connected, its
// connection.
type iwarpQP struct {
	ln     *iwarp.Listener
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	conn   *iwarp.Conn
	err    error // the Accept error
}

func (s *Server) listenHost() string {
	if s.ListenHost != "" {
		return s.ListenHost
	}
	return "127.0.0.1"
}

// listenQP moves a new QP to INIT (so that receives can be posted before the
// connection) and listens for the tester's connection to it.
func (s *session) listenQP(q *sessionQP, a QPSpec, access ib.Access) (*QPInfo, error) {
	fail := func(err error) (*QPInfo, error) {
		q.destroy()
		return nil, err
	}
	var crc iwarp.CRCPolicy
	switch a.MPACRC {
	case "", "accept":
		crc = iwarp.CRCAccept
	case "request":
		crc = iwarp.CRCRequest
	case "require":
		crc = iwarp.CRCRequire
	default:
		return fail(fmt.Errorf("mpa_crc %q: want accept, request or require", a.MPACRC))
	}
	if access == 0 {
		access = ib.AccessLocalWrite // no remote rights: the listener's default would grant all
	}
	init := ib.QPAttr{QPState: ib.QPStateInit, Port: 1, AccessFlags: access}
	if err := q.qp.Modify(&init, ib.QPAttrState|ib.QPAttrPKeyIndex|ib.QPAttrPort|ib.QPAttrAccessFlags); err != nil {
		return fail(err)
	}
	p := iwarp.ConnParams{CRC: crc, Access: access, IRD: a.MaxDestRdAtomic, ORD: a.MaxRdAtomic, Observe: s.srv.Observe}
	ln, err := iwarp.Listen(net.JoinHostPort(s.srv.listenHost(), "0"), p)
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	iq := &iwarpQP{ln: ln, cancel: cancel, done: make(chan struct{})}
	q.iw = iq
	go func() {
		defer close(iq.done)
		for {
			conn, err := ln.Accept(ctx, q.qp)
			iq.mu.Lock()
			iq.conn, iq.err = conn, err
			iq.mu.Unlock()
			if err == nil || ctx.Err() != nil || !isHandshakeError(err) {
				return
			}
			// A failed or rejected MPA exchange (a case probing the handshake):
			// keep listening for the next one.
		}
	}()
	s.qps[q.qp.QPN()] = q
	return &QPInfo{QPN: q.qp.QPN(), State: q.qp.State().String(), PathMTU: s.srv.pathMTU(),
		ListenAddr: ln.Addr().String()}, nil
}

func isHandshakeError(err error) bool {
	return errors.Is(err, iwarp.ErrHandshake) || errors.Is(err, iwarp.ErrRejected)
}

// connError returns the connection's error, if it ended with one.
func (q *iwarpQP) connError() string {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.conn != nil {
		if err := q.conn.Err(); err != nil {
			return err.Error()
		}
	}
	return ""
}

// close stops listening and aborts the connection.
func (q *iwarpQP) close() {
	q.cancel()
	q.ln.Close()
	<-q.done
	q.mu.Lock()
	c := q.conn
	q.mu.Unlock()
	if c != nil {
		c.Abort()
	}
}
