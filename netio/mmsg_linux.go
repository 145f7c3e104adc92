//go:build linux

package netio

import (
	"encoding/binary"
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// This file is recvmmsg and sendmmsg straight on a socket's syscall.RawConn,
// with every message header, iovec, socket address and control buffer
// allocated once by the caller: x/net's ipv4/ipv6 ReadBatch allocates a
// net.UDPAddr for every datagram received, and neither it nor WriteBatch can
// send a datagram from several buffers without the caller building a
// [][]byte per message.

// mmsgConn moves batches of messages through one socket. Tests replace it to
// stand for a kernel that refuses some messages.
type mmsgConn interface {
	// recvmmsg receives into msgs; with flags MSG_DONTWAIT it returns
	// unix.EAGAIN at once when nothing is queued, else it blocks.
	recvmmsg(msgs []unix.Mmsghdr, flags int) (int, error)
	// sendmmsg sends msgs, blocking while the socket buffer is full. It
	// returns how many the kernel took and, if it took none, why.
	sendmmsg(msgs []unix.Mmsghdr) (int, error)
}

// rawMmsg is mmsgConn on a socket in Go's network poller. Reads and
// writes each keep their closure and its results in an mmsgOp made once (a
// closure handed to RawConn.Read escapes: made per call, it would allocate),
// so one goroutine at a time may read and one write, as the endpoint's
// readMu and writeMu ensure.
type rawMmsg struct {
	rc     syscall.RawConn
	rd, wr mmsgOp
}

// mmsgOp is one system call's arguments and results.
type mmsgOp struct {
	msgs  []unix.Mmsghdr
	flags int
	n     int
	errno syscall.Errno
	fn    func(fd uintptr) bool
}

func newRawMmsg(rc syscall.RawConn) *rawMmsg {
	m := &rawMmsg{rc: rc}
	m.rd.fn = func(fd uintptr) bool {
		op := &m.rd
		r, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&op.msgs[0])), uintptr(len(op.msgs)),
			uintptr(op.flags|unix.MSG_DONTWAIT), 0, 0)
		op.n, op.errno = int(r), e
		// Blocking reads wait for the poller on EAGAIN; others return it.
		return e != unix.EAGAIN || op.flags&unix.MSG_DONTWAIT != 0
	}
	m.wr.fn = func(fd uintptr) bool {
		op := &m.wr
		r, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&op.msgs[0])), uintptr(len(op.msgs)), 0, 0, 0)
		op.n, op.errno = int(r), e
		return e != unix.EAGAIN
	}
	return m
}

func (m *rawMmsg) recvmmsg(msgs []unix.Mmsghdr, flags int) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	op := &m.rd
	op.msgs, op.flags = msgs, flags
	err := m.rc.Read(op.fn)
	op.msgs = nil
	return op.result(err)
}

func (m *rawMmsg) sendmmsg(msgs []unix.Mmsghdr) (int, error) {
	if len(msgs) == 0 {
		return 0, nil
	}
	op := &m.wr
	op.msgs = msgs
	err := m.rc.Write(op.fn)
	op.msgs = nil
	return op.result(err)
}

func (op *mmsgOp) result(err error) (int, error) {
	if err != nil {
		return 0, err
	}
	if op.errno != 0 {
		return 0, op.errno
	}
	return op.n, nil
}

// sockaddrBuf holds one socket address as the kernel reads or writes it:
// struct sockaddr_in or sockaddr_in6.
type sockaddrBuf [unix.SizeofSockaddrInet6]byte

// put writes ap (IPv4 for a v4 socket, else IPv6 with zone index) and
// returns its length.
func (b *sockaddrBuf) put(ap netip.AddrPort, is6 bool, zone uint32) uint32 {
	*b = sockaddrBuf{}
	binary.BigEndian.PutUint16(b[2:], ap.Port())
	if !is6 {
		binary.NativeEndian.PutUint16(b[0:], unix.AF_INET)
		a := ap.Addr().Unmap().As4()
		copy(b[4:8], a[:])
		return unix.SizeofSockaddrInet4
	}
	binary.NativeEndian.PutUint16(b[0:], unix.AF_INET6)
	a := ap.Addr().As16()
	copy(b[8:24], a[:])
	binary.NativeEndian.PutUint32(b[24:], zone)
	return unix.SizeofSockaddrInet6
}

// addrPort reads the address the kernel wrote (IPv4-mapped IPv6 unmapped).
func (b *sockaddrBuf) addrPort(n uint32) netip.AddrPort {
	if n < 2 {
		return netip.AddrPort{}
	}
	port := binary.BigEndian.Uint16(b[2:])
	switch binary.NativeEndian.Uint16(b[0:]) {
	case unix.AF_INET:
		if n >= unix.SizeofSockaddrInet4 {
			return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), port)
		}
	case unix.AF_INET6:
		if n >= 24 {
			return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[8:24])).Unmap(), port)
		}
	}
	return netip.AddrPort{}
}

// setIov points iov at b.
func setIov(iov *unix.Iovec, b []byte) {
	if len(b) == 0 {
		*iov = unix.Iovec{}
		return
	}
	iov.Base = &b[0]
	iov.SetLen(len(b))
}

// setMsg fills a message header: iovecs, name and control.
func setMsg(h *unix.Msghdr, iov []unix.Iovec, name *sockaddrBuf, namelen uint32, oob []byte) {
	*h = unix.Msghdr{}
	if len(iov) > 0 {
		h.Iov = &iov[0]
		h.SetIovlen(len(iov))
	}
	if name != nil {
		h.Name = &name[0]
		h.Namelen = namelen
	}
	if len(oob) > 0 {
		h.Control = &oob[0]
		h.SetControllen(len(oob))
	}
}
