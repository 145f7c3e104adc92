package pingpong

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"

	"github.com/softrdma/softrdma/oob"
)

// ConnectFunc is the server's QP work: called with the client's Dests after they were
// read and before the server's own are written, it moves the server's QPs to RTR and
// RTS (ibv_ud_pingpong: creates the address handle). An error aborts the exchange; the
// client then sees the connection close without an answer, as with the real tool.
type ConnectFunc func(ctx context.Context, remote []Dest) error

// Client runs the client side for one QP over conn, which it does not close: it writes
// local, reads the server's Dest and writes "done". The caller connects its QP to the
// returned Dest afterwards, as ibv_rc_pingpong does. ctx bounds the whole exchange.
func Client(ctx context.Context, conn net.Conn, local Dest) (Dest, error) {
	rem, err := ClientN(ctx, conn, []Dest{local})
	if err != nil {
		return Dest{}, err
	}
	return rem[0], nil
}

// Server runs the server side for one QP over conn, which it does not close: it reads
// the client's Dest, calls connect (nil: no QP work), writes local and reads "done".
func Server(ctx context.Context, conn net.Conn, local Dest, connect func(ctx context.Context, remote Dest) error) (Dest, error) {
	var c ConnectFunc
	if connect != nil {
		c = func(ctx context.Context, remote []Dest) error { return connect(ctx, remote[0]) }
	}
	rem, err := ServerN(ctx, conn, []Dest{local}, c)
	if err != nil {
		return Dest{}, err
	}
	return rem[0], nil
}

// ClientN is Client for several QPs (ibv_srq_pingpong sends one message per QP, 16 by
// default): it writes all of local, then reads as many messages, then writes "done". The
// server must have as many QPs.
func ClientN(ctx context.Context, conn net.Conn, local []Dest) (remote []Dest, err error) {
	release := oob.Guard(ctx, conn)
	defer func() { err = release(err) }()

	buf := make([]byte, 0, MessageSize*len(local))
	for i := range local {
		if buf, err = local[i].AppendBinary(buf); err != nil {
			return nil, err
		}
	}
	// One write per message, as the tools do (their reader needs no more than that).
	for i := range local {
		if _, err := conn.Write(buf[i*MessageSize : (i+1)*MessageSize]); err != nil {
			return nil, fmt.Errorf("pingpong client: writing QP %d's message: %w", i, err)
		}
	}
	if remote, err = readDests(conn, len(local), "pingpong client"); err != nil {
		return nil, err
	}
	if _, err := io.WriteString(conn, Done); err != nil {
		return nil, fmt.Errorf("pingpong client: writing done: %w", err)
	}
	return remote, nil
}

// ServerN is Server for several QPs: it reads len(local) messages, calls connect, writes
// local and reads "done".
func ServerN(ctx context.Context, conn net.Conn, local []Dest, connect ConnectFunc) (remote []Dest, err error) {
	release := oob.Guard(ctx, conn)
	defer func() { err = release(err) }()

	buf := make([]byte, 0, MessageSize*len(local))
	for i := range local {
		if buf, err = local[i].AppendBinary(buf); err != nil {
			return nil, err
		}
	}
	if remote, err = readDests(conn, len(local), "pingpong server"); err != nil {
		return nil, err
	}
	if connect != nil {
		if err := connect(ctx, remote); err != nil {
			return nil, fmt.Errorf("pingpong server: connecting QPs: %w", err)
		}
	}
	for i := range local {
		if _, err := conn.Write(buf[i*MessageSize : (i+1)*MessageSize]); err != nil {
			return nil, fmt.Errorf("pingpong server: writing QP %d's message: %w", i, err)
		}
	}
	var done [len(Done)]byte
	if _, err := io.ReadFull(conn, done[:]); err != nil {
		return nil, fmt.Errorf("pingpong server: reading done: %w", err)
	}
	if string(done[:]) != Done {
		return nil, &oob.Error{Message: "pingpong done", Value: strconv.Quote(string(done[:])), Reason: `want "done\x00"`, Err: oob.ErrUnexpected}
	}
	return remote, nil
}

// readDests reads n messages.
func readDests(conn net.Conn, n int, who string) ([]Dest, error) {
	var msg [MessageSize]byte
	remote := make([]Dest, n)
	for i := range remote {
		if _, err := io.ReadFull(conn, msg[:]); err != nil {
			return nil, fmt.Errorf("%s: reading QP %d's message: %w", who, i, err)
		}
		if err := remote[i].UnmarshalBinary(msg[:]); err != nil {
			return nil, err
		}
	}
	return remote, nil
}
