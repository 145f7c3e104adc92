//go:build linux

package netio

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/songgao/water"
	"golang.org/x/sys/unix"
)

// DefaultTAPBatchSize is the BatchSize of a TAPEndpoint. A TAP device moves
// one frame per read or write system call, so batching saves only poller
// wake-ups: 16 frames amortise those without holding frames back.
const DefaultTAPBatchSize = 16

// TAPStats counts what a TAPEndpoint did.
type TAPStats struct {
	FramesSent         uint64 // frames written to the device
	FramesReceived     uint64 // frames returned by Read or TryRead
	DroppedOversize    uint64 // Write: frame longer than MaxFrameLen(MTU()) or shorter than an Ethernet header
	DroppedWriteError  uint64 // Write: the device refused the frame (see LastWriteError)
	DroppedShortBuffer uint64 // Read: frame longer than the caller's buffer
}

// TAPEndpoint is a Linux TAP device (github.com/songgao/water, no packet
// information header, no virtio-net header and so no offloads): the kernel
// side of the device is an ordinary interface in the network namespace of
// the thread that called NewTAP, and frames written here arrive on it as if
// from a wire, and vice versa.
//
// Each frame costs one read or write system call (the device has no batch
// interface); Read and Write loop over the batch, and a Read waits in Go's
// network poller only when no frame is queued, so Close wakes it at once.
// A frame the kernel side sends is received straight into the caller's
// buffer; a frame longer than the buffer is detected (the read spills into
// a scratch buffer) and dropped.
type TAPEndpoint struct {
	ifce  *water.Interface
	file  *os.File
	rc    syscall.RawConn
	name  string
	mac   net.HardwareAddr
	mtu   int
	batch int

	closed atomic.Bool

	readMu   sync.Mutex
	overflow []byte // where a read longer than the caller's buffer spills
	rd       tapRead

	writeMu sync.Mutex
	wr      tapWrite

	lastWriteErr atomic.Pointer[error]
	c            struct {
		framesSent, framesReceived, droppedOversize, droppedWriteError, droppedShortBuffer atomic.Uint64
	}
}

var (
	_ Endpoint = (*TAPEndpoint)(nil)
	_ Poller   = (*TAPEndpoint)(nil)
)

// NewTAP creates a TAP device called name (empty: the kernel picks tapN) in
// the calling thread's network namespace, sets its MTU if mtu > 0 (else
// keeps the kernel's, normally 1500), brings its link up and waits (at most
// a few seconds) until the kernel has it operationally up, so that a bridge
// it is a port of forwards the first frame written, and raises its transmit
// queue length to at least DefaultTAPQueueLen. Addresses are the caller's
// business. The device disappears when the endpoint is closed. It needs
// CAP_NET_ADMIN and /dev/net/tun.
func NewTAP(name string, mtu int) (*TAPEndpoint, error) {
	ifce, err := water.New(water.Config{
		DeviceType:             water.TAP,
		PlatformSpecificParams: water.PlatformSpecificParams{Name: name},
	})
	if err != nil {
		return nil, fmt.Errorf("netio: tap: creating %q: %w", name, err)
	}
	e := &TAPEndpoint{ifce: ifce, name: ifce.Name(), batch: DefaultTAPBatchSize}
	f, ok := ifce.ReadWriteCloser.(*os.File)
	if !ok {
		ifce.Close()
		return nil, errors.New("netio: tap: water did not return an *os.File")
	}
	e.file = f
	if e.rc, err = f.SyscallConn(); err != nil {
		ifce.Close()
		return nil, fmt.Errorf("netio: tap: %w", err)
	}
	if err := configureLink(e.name, mtu); err != nil {
		ifce.Close()
		return nil, fmt.Errorf("netio: tap: configuring %s: %w", e.name, err)
	}
	ifi, err := net.InterfaceByName(e.name)
	if err != nil {
		ifce.Close()
		return nil, fmt.Errorf("netio: tap: %w", err)
	}
	e.mac, e.mtu = ifi.HardwareAddr, ifi.MTU
	e.overflow = make([]byte, 65536)
	e.rd.fn = e.readFrames
	e.wr.fn = e.writeFrames
	return e, nil
}

// DefaultTAPQueueLen is the least transmit queue length (txqueuelen) NewTAP
// gives its device. Frames the kernel sends towards the device wait for
// Read in a ring of txqueuelen frames (with, on kernels whose tun stops its
// queue when the ring is full, as many again in the device's qdisc); what
// does not fit is dropped. The kernel's default, 500, is less than one RDMA
// burst: 100 outstanding 64 KiB READs are answered with 6400 packets at
// once, and a peer writing them into a bridge this device is a port of
// fills the ring as fast as it writes, so a reader descheduled for a moment
// loses frames and go-back-N resends the whole window into the same ring
// (1 MiB READs between two softrdma TAP hosts lost 2-7% of the frames and
// resent up to 40% with 500; none with 4096). The ring is of pointers:
// frames take memory only while queued.
const DefaultTAPQueueLen = 4096

// configureLink sets the MTU (if mtu > 0) of the named link in the calling
// thread's namespace, brings it up, waits until it is running and raises its
// transmit queue length to at least DefaultTAPQueueLen.
func configureLink(name string, mtu int) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if mtu > 0 {
		ifr.SetUint32(uint32(mtu))
		if err := unix.IoctlIfreq(fd, unix.SIOCSIFMTU, ifr); err != nil {
			return fmt.Errorf("setting MTU %d: %w", mtu, err)
		}
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bringing link up: %w", err)
	}
	// Attaching to a persistent device turns its carrier on, but the kernel
	// acts on that later, in its link watcher (at once for an "urgent"
	// change, else up to a second after its last run): only then does it
	// start the device's queue, so that frames the kernel sends are not
	// dropped, and tell a bridge the device is a port of that the port may
	// forward; until then the bridge drops every frame written here. The
	// watcher marks the link operationally up (IFF_RUNNING) in that run, so
	// wait for that, bounded: a device that does not get there in
	// tapRunningTimeout is used as it is.
	deadline := time.Now().Add(tapRunningTimeout)
	for {
		if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
			return err
		}
		if ifr.Uint16()&unix.IFF_RUNNING != 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	// Setting the queue length takes the RTNL lock, which the link watcher
	// holds for its whole run: once this returns, the run that set
	// IFF_RUNNING has also started the queue and told the bridge. So it is
	// set even when it is already long enough.
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFTXQLEN, ifr); err != nil {
		return err
	}
	qlen := max(ifr.Uint32(), DefaultTAPQueueLen)
	ifr.SetUint32(qlen)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFTXQLEN, ifr); err != nil {
		return fmt.Errorf("setting txqueuelen %d: %w", qlen, err)
	}
	return nil
}

// tapRunningTimeout bounds configureLink's wait for the link watcher.
const tapRunningTimeout = 3 * time.Second

// Name returns the device's interface name.
func (e *TAPEndpoint) Name() string { return e.name }

// HardwareAddr returns the Ethernet address of the kernel side of the
// device: the destination of frames written to it.
func (e *TAPEndpoint) HardwareAddr() net.HardwareAddr { return e.mac }

// BatchSize returns DefaultTAPBatchSize.
func (e *TAPEndpoint) BatchSize() int { return e.batch }

// MTU returns the device's MTU.
func (e *TAPEndpoint) MTU() int { return e.mtu }

// LastWriteError returns the most recent error for a frame the device
// refused, or nil.
func (e *TAPEndpoint) LastWriteError() error {
	if p := e.lastWriteErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Stats returns a snapshot of the endpoint's counters.
func (e *TAPEndpoint) Stats() TAPStats {
	return TAPStats{
		FramesSent: e.c.framesSent.Load(), FramesReceived: e.c.framesReceived.Load(),
		DroppedOversize: e.c.droppedOversize.Load(), DroppedWriteError: e.c.droppedWriteError.Load(),
		DroppedShortBuffer: e.c.droppedShortBuffer.Load(),
	}
}

// Close closes the device, which removes it. A blocked Read returns
// net.ErrClosed.
func (e *TAPEndpoint) Close() error {
	if !e.closed.CompareAndSwap(false, true) {
		return nil
	}
	return e.ifce.Close()
}

// Read reads up to len(bufs) frames, one read system call each, blocking
// until at least one is queued. See Endpoint.
func (e *TAPEndpoint) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	return e.read(bufs, sizes, offset, true)
}

// TryRead is Read without blocking. See Poller.
func (e *TAPEndpoint) TryRead(bufs [][]byte, sizes []int, offset int) (int, error) {
	return e.read(bufs, sizes, offset, false)
}

// tapRead is a read's arguments and results, and the poller callback that
// does it, made once: a closure handed to RawConn.Read escapes, and made per
// call it would allocate. readMu guards it.
type tapRead struct {
	bufs       [][]byte
	sizes      []int
	offset     int
	want, n    int
	block      bool
	rerr, serr error
	iov        [2]unix.Iovec
	fn         func(fd uintptr) bool
}

func (e *TAPEndpoint) read(bufs [][]byte, sizes []int, offset int, block bool) (int, error) {
	if e.closed.Load() {
		return 0, net.ErrClosed
	}
	if offset < 0 {
		return 0, fmt.Errorf("netio: tap: negative read offset %d", offset)
	}
	e.readMu.Lock()
	defer e.readMu.Unlock()
	r := &e.rd
	r.bufs, r.sizes, r.offset, r.block = bufs, sizes, offset, block
	r.want, r.n, r.rerr, r.serr = min(len(bufs), len(sizes)), 0, nil, nil
	err := e.rc.Read(r.fn)
	n, rerr, serr := r.n, r.rerr, r.serr
	r.bufs, r.sizes, r.rerr, r.serr = nil, nil, nil, nil
	r.iov[0] = unix.Iovec{} // keep no reference to the caller's buffers
	e.c.framesReceived.Add(uint64(n))
	if err != nil {
		if e.closed.Load() || errors.Is(err, os.ErrClosed) {
			return n, net.ErrClosed
		}
		return n, err
	}
	if serr != nil {
		return n, fmt.Errorf("netio: tap: read: %w", serr)
	}
	return n, rerr
}

// readFrames is tapRead.fn: one readv per frame, into the caller's buffer
// and, past its end, the overflow buffer (so that a longer frame is seen and
// dropped whole), until the device has nothing queued or the batch is full.
func (e *TAPEndpoint) readFrames(fd uintptr) bool {
	r := &e.rd
	r.iov[1] = unix.Iovec{Base: &e.overflow[0]}
	r.iov[1].SetLen(len(e.overflow))
	for r.n < r.want {
		var room []byte
		if r.offset <= len(r.bufs[r.n]) {
			room = r.bufs[r.n][r.offset:]
		}
		r.iov[0] = unix.Iovec{}
		if len(room) > 0 {
			r.iov[0].Base = &room[0]
			r.iov[0].SetLen(len(room))
		}
		m, _, errno := unix.Syscall(unix.SYS_READV, fd, uintptr(unsafe.Pointer(&r.iov[0])), uintptr(len(r.iov)))
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			if errno != unix.EAGAIN {
				r.serr = errno
				return true
			}
			// Nothing queued: done if we have frames (or must not block).
			return r.n > 0 || !r.block
		}
		if int(m) > len(room) {
			e.c.droppedShortBuffer.Add(1)
			if r.rerr == nil {
				r.rerr = shortBufferError(int(m), len(room))
			}
			continue
		}
		r.sizes[r.n] = int(m)
		r.n++
	}
	return true
}

// Write writes each bufs[i][offset:] to the device, one write system call
// each. Frames shorter than an Ethernet header or longer than
// MaxFrameLen(MTU()), and frames the device refuses, are dropped and
// counted. See Endpoint.
func (e *TAPEndpoint) Write(bufs [][]byte, offset int) (int, error) {
	if e.closed.Load() {
		return 0, net.ErrClosed
	}
	e.writeMu.Lock()
	defer e.writeMu.Unlock()
	w := &e.wr
	w.bufs, w.offset, w.i = bufs, offset, 0
	err := e.rc.Write(w.fn)
	i := w.i
	w.bufs = nil
	if err != nil {
		if e.closed.Load() || errors.Is(err, os.ErrClosed) {
			return i, net.ErrClosed
		}
		return i, err
	}
	if i < len(bufs) {
		return i, fmt.Errorf("netio: tap: write offset %d outside buffer %d of length %d", offset, i, len(bufs[i]))
	}
	return i, nil
}

// tapWrite is Write's arguments and progress, and its poller callback, made
// once (see tapRead). writeMu guards it.
type tapWrite struct {
	bufs      [][]byte
	offset, i int
	fn        func(fd uintptr) bool
}

// writeFrames is tapWrite.fn: one write per frame.
func (e *TAPEndpoint) writeFrames(fd uintptr) bool {
	w := &e.wr
	for w.i < len(w.bufs) {
		b := w.bufs[w.i]
		if w.offset < 0 || w.offset > len(b) {
			return true
		}
		f := b[w.offset:]
		if len(f) < EthernetHeaderLen || len(f) > MaxFrameLen(e.mtu) {
			e.c.droppedOversize.Add(1)
			w.i++
			continue
		}
		_, err := unix.Write(int(fd), f)
		switch err {
		case nil:
			e.c.framesSent.Add(1)
		case unix.EAGAIN:
			return false // wait until the device can take more
		case unix.EINTR:
			continue
		default:
			err := error(os.NewSyscallError("write", err))
			e.lastWriteErr.Store(&err)
			e.c.droppedWriteError.Add(1)
		}
		w.i++
	}
	return true
}
