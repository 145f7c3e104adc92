//go:build !linux

package iwarp

import (
	"errors"
	"net"
)

// tcpMSS is not implemented off Linux: FPDUs are then sized for the largest ULPDU.
func tcpMSS(*net.TCPConn) (int, error) { return 0, errors.New("TCP_MAXSEG not supported") }

// unsentLen is not implemented off Linux: Abort does not wait for the send queue.
func unsentLen(*net.TCPConn) (int, error) { return 0, errors.New("SIOCOUTQNSD not supported") }
