// Package tcploop gives tests TCP on the loopback interface: a port that was
// free a moment ago, and the two ends of a connection. It is a test helper:
// it fails (or skips) the test rather than return errors, and it imports
// nothing of ours, so any package's tests can use it.
package tcploop

import (
	"net"
	"testing"
)

// FreePort returns a TCP port of 127.0.0.1 that was free a moment ago (a
// listener on port 0, closed before it returns). Another process may take it
// before the caller does. A failure to listen fails the test.
func FreePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Pair returns the two ends of a TCP connection over 127.0.0.1 on network
// ("tcp" or "tcp4"): the dialled end, then the accepted one. A host that
// cannot listen on loopback skips the test; a failed dial fails it.
func Pair(tb testing.TB, network string) (dialed, accepted net.Conn) {
	tb.Helper()
	ln, err := net.Listen(network, "127.0.0.1:0")
	if err != nil {
		tb.Skip(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() { c, _ := ln.Accept(); ch <- c }()
	c, err := net.Dial(network, ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	return c, <-ch
}
