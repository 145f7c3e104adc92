package netio

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// LiveCapture reads every frame of one interface, both directions, as
// 'tcpdump -i IFACE' does, for softrdma decode -i: an AF_PACKET SOCK_RAW
// socket bound to the interface for every protocol (ETH_P_ALL), with the
// kernel's receive time of each frame (SO_TIMESTAMPNS). Unlike
// PacketEndpoint, which a RoCE device uses, it filters nothing and keeps the
// frames going out. On a loopback interface each frame passes the socket
// twice (out, then in); the outgoing copy is dropped, as libpcap does. Frames
// are read one at a time (recvmsg): a capture tool prints each, and a ring
// would save nothing worth its code here. Needs CAP_NET_RAW.
type LiveCapture struct {
	f        *os.File
	rc       syscall.RawConn
	ifname   string
	loopback bool
	buf      []byte
	oob      []byte
}

// liveSnapLen is the most of a frame LiveCapture keeps: a UDP or TCP GSO
// super-frame on a veth or lo is up to 64 KiB and its headers; longer frames
// are cut (their length still reported).
const liveSnapLen = 256 << 10

// OpenLiveCapture opens a capture on the interface named iface, in the
// calling thread's network namespace.
func OpenLiveCapture(iface string) (*LiveCapture, error) {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return nil, fmt.Errorf("netio: live capture: %w", err)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
	if err != nil {
		return nil, fmt.Errorf("netio: live capture on %s: AF_PACKET socket: %w", iface, err)
	}
	fail := func(what string, err error) (*LiveCapture, error) {
		unix.Close(fd)
		return nil, fmt.Errorf("netio: live capture on %s: %s: %w", iface, what, err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
		return fail("SO_TIMESTAMPNS", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
		return fail("bind", err)
	}
	f := os.NewFile(uintptr(fd), "packet:"+iface)
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("netio: live capture on %s: %w", iface, err)
	}
	return &LiveCapture{f: f, rc: rc, ifname: ifi.Name, loopback: ifi.Flags&net.FlagLoopback != 0,
		buf: make([]byte, liveSnapLen), oob: make([]byte, unix.CmsgSpace(int(unsafe.Sizeof(unix.Timespec{}))))}, nil
}

// Interface is the interface's name.
func (c *LiveCapture) Interface() string { return c.ifname }

// ReadFrame waits for the next frame and returns it (valid until the next
// call), its receive time and its length on the wire (more than len(frame)
// if it was cut). After the read deadline it returns an error that
// errors.Is os.ErrDeadlineExceeded; after Close, os.ErrClosed.
func (c *LiveCapture) ReadFrame() (frame []byte, ts time.Time, length int, err error) {
	for {
		var ok bool
		var rerr error
		err := c.rc.Read(func(fd uintptr) bool {
			frame, ts, length, ok, rerr = c.recv(fd)
			return !errors.Is(rerr, unix.EAGAIN)
		})
		if err != nil {
			return nil, time.Time{}, 0, err
		}
		if rerr != nil {
			return nil, time.Time{}, 0, fmt.Errorf("netio: live capture on %s: %w", c.ifname, rerr)
		}
		if ok {
			return frame, ts, length, nil
		}
	}
}

// TryReadFrame returns the next frame the socket already holds, without
// waiting and whatever the read deadline: ok is false when it holds none.
// A capture that stops drains the socket with it.
func (c *LiveCapture) TryReadFrame() (frame []byte, ts time.Time, length int, ok bool, err error) {
	for {
		var rerr error
		cerr := c.rc.Control(func(fd uintptr) { frame, ts, length, ok, rerr = c.recv(fd) })
		switch {
		case cerr != nil:
			return nil, time.Time{}, 0, false, cerr
		case errors.Is(rerr, unix.EAGAIN):
			return nil, time.Time{}, 0, false, nil
		case rerr != nil:
			return nil, time.Time{}, 0, false, fmt.Errorf("netio: live capture on %s: %w", c.ifname, rerr)
		case ok:
			return frame, ts, length, true, nil
		}
		// A loopback frame's outgoing copy: the next.
	}
}

// recv reads one frame with recvmsg; ok is false for a frame that is not
// kept (the outgoing copy on a loopback interface).
func (c *LiveCapture) recv(fd uintptr) (frame []byte, ts time.Time, length int, ok bool, err error) {
	n, oobn, _, from, err := unix.Recvmsg(int(fd), c.buf, c.oob, unix.MSG_TRUNC)
	if err != nil {
		return nil, time.Time{}, 0, false, err
	}
	if ll, isLL := from.(*unix.SockaddrLinklayer); isLL && c.loopback && ll.Pkttype == unix.PACKET_OUTGOING {
		return nil, time.Time{}, 0, false, nil
	}
	ts = time.Now()
	if msgs, perr := unix.ParseSocketControlMessage(c.oob[:oobn]); perr == nil {
		for _, m := range msgs {
			if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS && len(m.Data) >= int(unsafe.Sizeof(unix.Timespec{})) {
				t := (*unix.Timespec)(unsafe.Pointer(&m.Data[0]))
				ts = time.Unix(t.Unix())
			}
		}
	}
	return c.buf[:min(n, len(c.buf))], ts, n, true, nil
}

// SetReadDeadline bounds ReadFrame's wait (the zero time: none).
func (c *LiveCapture) SetReadDeadline(t time.Time) error { return c.f.SetReadDeadline(t) }

// Close closes the socket; a ReadFrame waiting returns.
func (c *LiveCapture) Close() error { return c.f.Close() }
