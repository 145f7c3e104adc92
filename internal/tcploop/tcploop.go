// Package tcploop gives tests TCP on the loopback interface: a port that was
// free a moment ago, and the two ends of a connection. It is a test helper:
// it fails (or skips) the test rather than return errors, and it imports
// nothing of ours, so any package's tests can use it.
package tcploop

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// FreePort returns a TCP port that was free a moment ago on every address
// (a listener on it, closed before it returns). The port is drawn at random
// below the kernel's ephemeral range (net.ipv4.ip_local_port_range), from
// which it gives connections their local ports and port-0 listeners theirs:
// a port taken that way was seen to come back to another test process, or to
// an outgoing connection, before the caller listened on it ("bind: address
// already in use" in a parallel make test). Another FreePort may still draw
// the same port, 1 in thousands. A failure to listen fails the test.
func FreePort(tb testing.TB) int {
	tb.Helper()
	low := ephemeralLow()
	for range 100 {
		port := freePortMin + rand.IntN(max(low-freePortMin, 1))
		if l, err := net.Listen("tcp", ":"+strconv.Itoa(port)); err == nil {
			l.Close()
			return port
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// freePortMin is the lowest port FreePort draws: above the well-known and
// most registered services' ports.
const freePortMin = 20000

// ephemeralLow is the first port of the kernel's ephemeral range (32768 when
// it cannot be read, Linux's default).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n <= freePortMin {
		return 32768
	}
	return n
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
