//go:build linux

package netio

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// listenSend opens the send-only socket of a source port (bound to the
// endpoint's address and port, every datagram addressed to it dropped) as a
// blocking socket outside Go's network poller: os.NewFile leaves a blocking
// descriptor out of it. Go's poller watches each of its sockets for both
// directions, edge-triggered, so with a send socket in it every datagram
// sent woke the thread waiting in the poller when the kernel freed the
// datagram's buffer (sock_wfree: writable again), a context switch per
// datagram for nothing: nothing ever waits on a send socket but a sender
// whose buffer is full, and a blocking sendmmsg waits for that in the
// kernel (its thread in a system call, as Go's runtime knows).
func (e *UDPEndpoint) listenSend(port uint16) (*udpSocket, error) {
	domain := unix.AF_INET
	if e.is6 {
		domain = unix.AF_INET6
	}
	fd, err := unix.Socket(domain, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	f := os.NewFile(uintptr(fd), fmt.Sprintf("udp send socket %v", e.local.Addr()))
	if err := e.bindSend(fd, port); err != nil {
		f.Close()
		return nil, err
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &udpSocket{conn: f, mm: newRawMmsg(rc)}, nil
}

// bindSend sets a send socket's options as the net package and
// setSocketOptions set a listening one's, and binds it to port.
func (e *UDPEndpoint) bindSend(fd int, port uint16) error { return e.bindSocket(fd, port, false) }

// bindSocket is bindSend for a send socket or (receiver) a receiving one.
func (e *UDPEndpoint) bindSocket(fd int, port uint16, receiver bool) error {
	var sa unix.Sockaddr
	if e.is6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1); err != nil {
			return fmt.Errorf("setsockopt IPV6_V6ONLY: %w", err)
		}
		sa = &unix.SockaddrInet6{Port: int(port), ZoneId: e.zone, Addr: e.local.Addr().As16()}
	} else {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_BROADCAST, 1); err != nil {
			return fmt.Errorf("setsockopt SO_BROADCAST: %w", err)
		}
		sa = &unix.SockaddrInet4{Port: int(port), Addr: e.local.Addr().As4()}
	}
	if err := e.setSocketOptions(fd, receiver); err != nil {
		return err
	}
	if err := unix.Bind(fd, sa); err != nil {
		return fmt.Errorf("bind %v port %d: %w", e.local.Addr(), port, err)
	}
	return nil
}
