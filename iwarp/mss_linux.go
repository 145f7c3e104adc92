//go:build linux

package iwarp

import (
	"net"
	"syscall"
)

// tcpMSS returns the connection's current maximum segment size (getsockopt
// TCP_MAXSEG: the MSS less the TCP options in use, e.g. 1448 on a 1500-byte link
// with timestamps).
func tcpMSS(c *net.TCPConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var mss int
	var serr error
	if err := raw.Control(func(fd uintptr) {
		mss, serr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_MAXSEG)
	}); err != nil {
		return 0, err
	}
	return mss, serr
}
