//go:build linux

package iwarp

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
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

// unsentLen returns the octets of the connection's send queue not yet
// transmitted (ioctl SIOCOUTQNSD). Not the unacknowledged ones (SIOCOUTQ): the
// peer's delayed ACK would hold an Abort for 40 ms.
func unsentLen(c *net.TCPConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var ierr error
	if err := raw.Control(func(fd uintptr) {
		n, ierr = unix.IoctlGetInt(int(fd), unix.SIOCOUTQNSD)
	}); err != nil {
		return 0, err
	}
	return n, ierr
}
