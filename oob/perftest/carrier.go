package perftest

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"

	"github.com/softrdma/softrdma/oob"
)

// Carrier moves perftest's out-of-band messages between the two sides: a TCP socket
// (StreamCarrier), or, with -R or -z, RC SENDs on the QP rdma_cm connected for the
// exchange (the caller implements that one over its QP; MessagePipe is an in-memory
// stand-in).
//
// Send and Receive each handle one message; one Send and one Receive may run at the
// same time (the end of the TCP exchange has both sides write "done" at once).
type Carrier interface {
	// Send sends msg as one message: one write() on a socket, one SEND on a QP.
	Send(ctx context.Context, msg []byte) error
	// Receive receives the next message into buf, whose length is the size the
	// message must have, and returns the number of bytes received. A stream carrier
	// fills buf (or fails); a message carrier may return a shorter message's length,
	// which the session rejects, and must fail for a longer one.
	Receive(ctx context.Context, buf []byte) (int, error)
}

// StreamCarrier is the TCP carrier: messages are runs of bytes on the connection, their
// boundaries implied by the sizes both sides expect.
type StreamCarrier struct {
	conn net.Conn
}

// NewStreamCarrier returns the carrier over conn. Closing conn is the caller's job.
func NewStreamCarrier(conn net.Conn) *StreamCarrier { return &StreamCarrier{conn: conn} }

// Send writes msg, honouring ctx.
func (s *StreamCarrier) Send(ctx context.Context, msg []byte) (err error) {
	release := oob.GuardWrite(ctx, s.conn)
	_, err = s.conn.Write(msg)
	return release(err)
}

// Receive reads exactly len(buf) bytes, honouring ctx. perftest itself does one read()
// and fails if it returns less; reading until the message is complete accepts every
// stream perftest accepts and a few segmentations it would not.
func (s *StreamCarrier) Receive(ctx context.Context, buf []byte) (n int, err error) {
	release := oob.GuardRead(ctx, s.conn)
	n, err = io.ReadFull(s.conn, buf)
	return n, release(err)
}

// MessagePipe returns two connected in-memory message carriers, standing in for the
// rdma_cm QP pair perftest exchanges its messages on with -R or -z. Each direction holds
// one message in flight (the one receive perftest keeps posted); Close on either end
// makes both ends' pending and future calls fail with net.ErrClosed.
func MessagePipe() (*PipeCarrier, *PipeCarrier) {
	ab, ba := make(chan []byte, 1), make(chan []byte, 1)
	done := make(chan struct{})
	once := new(sync.Once)
	return &PipeCarrier{send: ab, recv: ba, done: done, once: once},
		&PipeCarrier{send: ba, recv: ab, done: done, once: once}
}

// PipeCarrier is one end of a MessagePipe.
type PipeCarrier struct {
	send chan<- []byte
	recv <-chan []byte
	done chan struct{}
	once *sync.Once
}

// Send queues a copy of msg for the other end.
func (p *PipeCarrier) Send(ctx context.Context, msg []byte) error {
	select {
	case <-p.done:
		return net.ErrClosed
	default:
	}
	select {
	case p.send <- append([]byte(nil), msg...):
		return nil
	case <-p.done:
		return net.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Receive takes the next message. A message longer than buf is an error, as a SEND
// longer than the posted receive buffer is.
func (p *PipeCarrier) Receive(ctx context.Context, buf []byte) (int, error) {
	deliver := func(m []byte) (int, error) {
		n := copy(buf, m)
		if len(m) > len(buf) {
			return n, &oob.Error{Message: "perftest message", Field: "length", Value: strconv.Itoa(len(m)),
				Reason: fmt.Sprintf("> receive buffer %d", len(buf)), Err: oob.ErrRange}
		}
		return n, nil
	}
	// A message sent before Close is still delivered.
	select {
	case m := <-p.recv:
		return deliver(m)
	default:
	}
	select {
	case m := <-p.recv:
		return deliver(m)
	case <-p.done:
		return 0, net.ErrClosed
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// Close closes the pipe (both ends).
func (p *PipeCarrier) Close() error {
	p.once.Do(func() { close(p.done) })
	return nil
}

// Compile-time checks.
var (
	_ Carrier = (*StreamCarrier)(nil)
	_ Carrier = (*PipeCarrier)(nil)
)
