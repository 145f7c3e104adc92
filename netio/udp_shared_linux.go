//go:build linux

package netio

import (
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// SharedReads makes the UDP endpoints NewUDP opens from then on share their
// receiving with a thread outside Go (LendReads): the C verbs library, whose
// program's thread then waits for its completions on the socket itself
// instead of being woken by the endpoint's reader goroutine after it has
// handed the datagrams to the engine. That wake-up was a second thread
// switch per message on top of the one Go programs pay (the reader's):
// ib_send_lat's client, Go execution trace: median 17 us from the reader's
// wake-up to the program's thread running again, under load.
//
// The receiving socket of such an endpoint stays out of Go's network poller
// (as the send sockets do, listenSend): an outside thread waiting on it would
// otherwise also wake the poller's thread at every datagram. The blocking
// ReadDatagrams waits in ppoll(2) on the socket and an eventfd (which Close
// and LendReads signal) instead.
var SharedReads atomic.Bool

// sharedRead is the state of an endpoint whose reads are shared.
type sharedRead struct {
	sock, efd int
	// lent: the outside thread reads; the reader goroutine waits on efd
	// alone, asking active every lendCheck whether it still does.
	lent   atomic.Bool
	active atomic.Pointer[func() bool]
	// mu guards r, the reader state of TryReadDatagrams (the lender's
	// reads): its own buffers, so that the datagrams each side is handing
	// to the engine stay intact while the other reads.
	mu sync.Mutex
	r  udpReader
}

// lendCheck is how often a reader goroutine whose reads are lent asks
// whether the outside thread still polls.
const lendCheck = time.Millisecond

// listenShared opens the receiving socket outside Go's poller (see
// SharedReads) and the eventfd that wakes the reader's wait.
func (e *UDPEndpoint) listenShared(port uint16) (*udpSocket, *sharedRead, error) {
	domain := unix.AF_INET
	if e.is6 {
		domain = unix.AF_INET6
	}
	fd, err := unix.Socket(domain, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return nil, nil, fmt.Errorf("socket: %w", err)
	}
	f := os.NewFile(uintptr(fd), fmt.Sprintf("udp socket %v", e.local))
	if err := e.bindSocket(fd, port, true); err != nil {
		f.Close()
		return nil, nil, err
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("eventfd: %w", err)
	}
	x := &sharedRead{sock: fd, efd: efd}
	x.r.mm = newRawMmsg(rc) // its own: rawMmsg holds the call's state
	return &udpSocket{conn: f, mm: newRawMmsg(rc)}, x, nil
}

// LendReads hands the endpoint's receiving to a thread outside Go, which
// waits on the socket sock (poll(2)) and reads with TryReadDatagrams; the
// reader goroutine stops waiting on it. active says whether that thread still
// polls: once it says no, the reader goroutine reads again (until the next
// LendReads). ok is false for an endpoint that does not share its reads
// (opened without SharedReads).
func (e *UDPEndpoint) LendReads(active func() bool) (sock int, ok bool) {
	x := e.shared
	if x == nil {
		return -1, false
	}
	x.active.Store(&active)
	if !x.lent.Swap(true) {
		x.signal()
	}
	return x.sock, true
}

// ReadsLent reports whether the endpoint's reads are lent (LendReads).
func (e *UDPEndpoint) ReadsLent() bool { return e.shared != nil && e.shared.lent.Load() }

// signal wakes the reader goroutine's wait.
func (x *sharedRead) signal() {
	one := uint64(1)
	unix.Write(x.efd, (*[8]byte)(unsafe.Pointer(&one))[:])
}

// readShared is the blocking ReadDatagrams of an endpoint whose reads are
// shared.
func (e *UDPEndpoint) readShared(d []Datagram) (int, error) {
	x := e.shared
	for {
		if e.closed.Load() {
			return 0, net.ErrClosed
		}
		if !x.lent.Load() {
			n, err := e.readDatagrams(d, unix.MSG_DONTWAIT)
			if n > 0 || err != nil {
				return n, err
			}
		}
		x.wait()
	}
}

// wait waits until the socket is readable (reads not lent), the eventfd is
// signalled, or (lent) lendCheck has passed, when it takes the reads back
// if the outside thread no longer polls.
func (x *sharedRead) wait() {
	fds := [2]unix.PollFd{{Fd: int32(x.efd), Events: unix.POLLIN}, {Fd: int32(x.sock), Events: unix.POLLIN}}
	lent := x.lent.Load()
	var n int
	var err error
	if lent {
		ts := unix.NsecToTimespec(int64(lendCheck))
		n, err = unix.Ppoll(fds[:1], &ts, nil)
	} else {
		n, err = unix.Ppoll(fds[:], nil, nil)
	}
	if err == nil && fds[0].Revents != 0 {
		var b [8]byte
		unix.Read(x.efd, b[:])
	}
	if lent && err == nil && n == 0 {
		if f := x.active.Load(); f == nil || !(*f)() {
			x.lent.Store(false)
		}
	}
}

// closeShared wakes the reader's wait on Close (a socket closed under a
// ppoll does not end it) and closes the eventfd once the reader is gone.
func (x *sharedRead) closeShared() {
	x.signal()
}

var _ ReadLender = (*UDPEndpoint)(nil)
