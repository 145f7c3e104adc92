//go:build !linux

package iwarp

import (
	"net"
	"syscall"
)

func rawReader(net.Conn) syscall.RawConn { return nil }

// readSocket is not used off Linux (rawReader returns nil): readConn reads.
func (r *rxState) readSocket(p []byte) error { return r.readConn(p) }
