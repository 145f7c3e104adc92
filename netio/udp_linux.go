//go:build linux

package netio

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softrdma/softrdma/header"
)

// RoCEv2Port is the UDP destination port of RoCEv2 (IANA "roce").
const RoCEv2Port = 4791

// Header sizes and Ethertypes of the frames the backends parse and build.
const (
	ipv4HeaderLen = header.IPv4MinLen
	ipv6HeaderLen = header.IPv6Len
	udpHeaderLen  = header.UDPLen

	etherTypeIPv4   = header.EtherTypeIPv4
	etherTypeIPv6   = header.EtherTypeIPv6
	etherTypeARP    = header.EtherTypeARP
	etherTypeRoCEv1 = header.EtherTypeRoCEv1

	ipProtoUDP = header.IPProtocolUDP
	ipv4FlagDF = header.IPv4FlagDF // the flags+fragment offset word with DF alone
)

// DefaultUDPBatchSize is the batch size of a UDPEndpoint when UDPConfig
// leaves it zero. 64 is UDP_MAX_SEGMENTS, the most datagrams one UDP GSO
// send may carry, so a full batch to one peer can leave in a single message;
// recvmmsg and sendmmsg have amortised their system-call cost well before
// that.
const DefaultUDPBatchSize = 64

// DefaultUDPSocketBuffer is the SO_RCVBUF/SO_SNDBUF request when UDPConfig
// leaves SocketBuffer zero: a few milliseconds of line rate at 10 Gb/s, so
// a burst of RDMA WRITE segments is not dropped by the receive queue.
const DefaultUDPSocketBuffer = 4 << 20

// DefaultMaxSourcePorts bounds the lazily created send sockets of a
// UDPEndpoint when UDPConfig leaves MaxSourcePorts zero.
const DefaultMaxSourcePorts = 4096

// udpMaxSegments is UDP_MAX_SEGMENTS of include/linux/udp.h: 64 in most
// kernels (some raised it to 128), so 64 is safe everywhere.
const udpMaxSegments = 64

// udpMaxGSOPayload bounds the UDP payload of one GSO send: the IPv6 payload
// length is 16 bits and includes the UDP header; the IPv4 total length
// includes the IPv4 header too (__ip_append_data refuses more with EMSGSIZE).
const (
	udpMaxGSOPayload   = 65535 - udpHeaderLen
	udpMaxGSOPayloadV4 = 65535 - ipv4HeaderLen - udpHeaderLen
)

// groSlotLen is the receive buffer of one message when UDP_GRO is on: the
// kernel may hand over up to 64 KiB of coalesced datagrams at once.
const groSlotLen = 65536

// sourcePortRetry is how long a source port whose socket could not be
// bound is given up before binding is tried again.
const sourcePortRetry = time.Second

// UDPConfig configures NewUDP. The zero value listens on 0.0.0.0:4791.
type UDPConfig struct {
	// LocalAddr is where RoCEv2 datagrams are received, and the source
	// address of those sent. Its family selects IPv4 or IPv6 (an endpoint
	// carries one family). An unspecified address (0.0.0.0 or ::) receives
	// on every local address, and each datagram's source address is then
	// passed to the kernel with IP_PKTINFO/IPV6_PKTINFO. The zero Addr means
	// 0.0.0.0; port 0 means RoCEv2Port.
	LocalAddr netip.AddrPort

	// MTU is the interface MTU the endpoint reports (and enforces on
	// WriteDatagrams):
	// that of the path to the peers; 0 means DefaultMTU.
	MTU int

	// BatchSize is the most datagrams per receive or send system call; 0 means
	// DefaultUDPBatchSize.
	BatchSize int

	// SocketBuffer is the SO_RCVBUF and SO_SNDBUF size to request, in
	// bytes; 0 means DefaultUDPSocketBuffer, negative leaves the kernel
	// default. With CAP_NET_ADMIN the FORCE variants lift the
	// net.core.rmem_max/wmem_max caps.
	SocketBuffer int

	// DisableGSO turns off UDP generic segmentation offload on send
	// (UDP_SEGMENT), and DisableGRO the coalescing of received datagrams
	// (UDP_GRO); both are otherwise used where the kernel supports them.
	// IPv4 datagrams join a GSO send only as a run of IPv4 IDs 0, 1, ...
	// (see DatagramWriter).
	DisableGSO, DisableGRO bool

	// MaxSourcePorts bounds the number of send sockets, one per distinct UDP
	// source port; 0 means DefaultMaxSourcePorts. Datagrams from further source
	// ports are dropped and counted.
	MaxSourcePorts int
}

// UDPStats counts what a UDPEndpoint did.
type UDPStats struct {
	FramesSent     uint64 // datagrams handed to the kernel
	FramesReceived uint64 // datagrams returned by ReadDatagrams (or as frames by UDPFrames)
	SendCalls      uint64 // sendmmsg system calls
	RecvCalls      uint64 // recvmmsg system calls that returned datagrams
	GSOSends       uint64 // messages sent as several datagrams with UDP_SEGMENT
	GROReceives    uint64 // messages received as several coalesced datagrams

	DroppedMalformed   uint64 // WriteDatagrams: destination of the other family, too many pieces; UDPFrames: not Ethernet + IP + UDP of the endpoint's family, or inconsistent lengths
	DroppedIPv4ID      uint64 // WriteDatagrams: IPv4 ID not 0 and no place in a GSO run (see DatagramWriter); UDPFrames: flags/fragment offset not DF alone
	DroppedSourceAddr  uint64 // WriteDatagrams: IP source address not the endpoint's bound address
	DroppedSourcePort  uint64 // WriteDatagrams: no socket could be bound to the UDP source port
	DroppedOversize    uint64 // WriteDatagrams: payload longer than the MTU allows; UDPFrames: frame longer than MaxFrameLen(MTU())
	DroppedSendError   uint64 // WriteDatagrams: the kernel refused the datagram (see LastSendError)
	DroppedShortBuffer uint64 // datagram longer than the endpoint's buffer, or (UDPFrames) the caller's

	SourcePortSockets int // send sockets open, one per UDP source port in use
}

type udpCounters struct {
	framesSent, framesReceived, sendCalls, recvCalls, gsoSends, groReceives atomic.Uint64

	droppedMalformed, droppedIPv4ID, droppedSourceAddr, droppedSourcePort,
	droppedOversize, droppedSendError, droppedShortBuffer atomic.Uint64
}

// UDPEndpoint carries RoCEv2 over ordinary UDP sockets, without privileges.
// Its shape is wireguard-go's conn.Bind: WriteDatagrams (DatagramWriter)
// takes payload pieces with the destination, source port, TOS, TTL and
// IPv4 ID, and ReadDatagrams (DatagramReader) returns payloads with their
// addresses, TOS and TTL; the RoCE device uses those, so no layer parses
// headers another wrote. Users that need Ethernet frames wrap it in
// UDPFrames.
//
// Datagrams are sent with sendmmsg; the kernel writes the real IP and UDP
// headers. The TOS/traffic class and TTL/hop limit go along per datagram
// (IP_TOS, IP_TTL, IPV6_TCLASS, IPV6_HOPLIMIT); the IPv6 flow label and
// both checksums are the kernel's (all four are masked out of the ICRC).
//
// The IPv4 Identification field is covered by the ICRC but cannot be chosen
// through a UDP socket. Linux writes 0 for datagrams with DF set from an
// unconnected socket (ip_select_ident_segs in include/net/ip.h), so the
// endpoint sends from unconnected sockets with IP_PMTUDISC_DO, and sends
// IPv4 datagrams with Identification 0 and DF set (IPv4IDZero), which the
// wire then matches bit for bit. UDP GSO numbers the segments of one send
// 0, 1, 2 ... instead (inet_gso_segment: UDP GSO is not
// SKB_GSO_TCP_FIXEDID; TestKernelIPv4GSOIdentification watches a TAP: 0,
// 1, 2, 3): IPv4 datagrams join a GSO send only when their sender chose
// those IDs (a run, see DatagramWriter), as the RoCE device does, computing
// each ICRC for the ID the datagram will carry. IPv6 has no such field and
// uses GSO freely.
//
// WriteDatagrams gathers each datagram from its pieces with the kernel's
// iovecs: nothing is copied on the way. Message headers, iovecs, socket
// addresses and control buffers are allocated once: recvmmsg and sendmmsg
// run on the socket's RawConn.
//
// Source ports: rxe sends from 0xC000 + (hash(QPN) & 0x3fff), and the
// source port is covered by the ICRC too, so it must leave exactly as
// written. Without privileges the only way is a socket bound to that port:
// the endpoint creates one send socket per distinct source port, lazily on
// first use, bound to LocalAddr's address and shared by every QP that hashes
// alike (at most 16384 for rxe's scheme, bounded by MaxSourcePorts). A raw
// (IP_HDRINCL) path would need CAP_NET_RAW, which this backend exists to
// avoid. Send sockets never receive: a drop-everything socket filter keeps
// datagrams for their ports out of their queues. Datagrams whose source
// port is LocalAddr's port go out through the receiving socket. Datagrams
// are grouped per socket for sendmmsg; order is kept among datagrams of one
// source port (one QP), not across ports. Send sockets are opened in the
// network namespace NewUDP ran in, whichever thread WriteDatagrams runs on.
//
// ReadDatagrams receives with recvmmsg on the one socket bound to LocalAddr
// into the endpoint's own buffers and hands out each datagram, or each
// segment of a coalesced one, where the kernel put it, with the real source
// address and port, the destination address from IP_PKTINFO/IPV6_PKTINFO
// and the TOS/traffic class and TTL/hop limit from IP_RECVTOS/IP_RECVTTL
// (IPV6_RECVTCLASS, IPV6_RECVHOPLIMIT) beside it: what the RoCE device reads
// with, so that the payload's only copy after the kernel's is the one into
// the memory region. The IPv4 Identification is not reported by the kernel
// (UnknownIPv4ID). IPv6 datagrams with UDP checksum 0, as rxe sends them,
// are accepted (UDP_NO_CHECK6_RX); the kernel has checked every other
// checksum. With UDP_GRO the kernel may deliver up to 64 KiB of coalesced
// datagrams in one message, received into 64 KiB buffers: far fewer system
// calls and socket buffers; segments beyond the caller's batch wait for the
// next read.
type UDPEndpoint struct {
	is6      bool
	local    netip.AddrPort // bound address and port
	wildcard bool           // local address unspecified: pass sources with PKTINFO
	mtu      int
	batch    int
	maxPorts int
	bufSize  int
	zone     uint32 // the IPv6 scope of a link-local address: its interface index

	netns netnsHandle // where NewUDP ran: send sockets are opened there too

	rx *udpSocket // bound to local: receives, and sends from local's port
	// shared: the receiving is shared with a thread outside Go (SharedReads).
	shared *sharedRead
	gso    atomic.Bool
	gro    bool

	closed atomic.Bool

	sockMu sync.Mutex // guards socks; held while WriteDatagrams looks up and creates sockets
	socks  map[uint16]*sourcePortSocket

	readMu sync.Mutex
	r      udpReader

	writeMu sync.Mutex
	w       udpWriter

	lastSendErr atomic.Pointer[error]
	stats       udpCounters
}

// netnsHandle remembers the network namespace of the thread that opened
// an endpoint, so that sockets the endpoint opens later, from whatever
// thread WriteDatagrams happens to run on, are created in the same namespace (as when
// the endpoint was opened inside a test namespace).
type netnsHandle struct {
	file     *os.File // the namespace (nsfs); nil if /proc is unavailable
	dev, ino uint64
}

// threadNetnsPath names the calling thread's network namespace.
func threadNetnsPath() string { return fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()) }

// currentNetns returns a handle on the calling thread's network namespace.
func currentNetns() netnsHandle {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	f, err := os.Open(threadNetnsPath())
	if err != nil {
		return netnsHandle{}
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return netnsHandle{}
	}
	return netnsHandle{file: f, dev: st.Dev, ino: st.Ino}
}

// do runs f on an OS thread in the namespace. When the thread Go picks is
// elsewhere, it is moved with setns (which needs CAP_SYS_ADMIN, as moving
// into a namespace always does) and then discarded rather than reused.
func (h *netnsHandle) do(f func() error) error {
	if h.file == nil {
		return f()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		var st unix.Stat_t
		if unix.Stat(threadNetnsPath(), &st) == nil && st.Dev == h.dev && st.Ino == h.ino {
			err := f()
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		// The thread stays locked from here on: it ends with this goroutine.
		if err := unix.Setns(int(h.file.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns into the endpoint's network namespace: %w", err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

func (h *netnsHandle) close() {
	if h.file != nil {
		h.file.Close()
	}
}

// udpSocket is one UDP socket with its batch reader/writer.
type udpSocket struct {
	conn socketConn // *net.UDPConn; a send-only socket's *os.File (listenSend)
	mm   mmsgConn
}

// socketConn is what a udpSocket needs of its socket.
type socketConn interface {
	SyscallConn() (syscall.RawConn, error)
	Close() error
}

// sourcePortSocket is a send socket for one source port, or a record that
// binding it failed.
type sourcePortSocket struct {
	s        *udpSocket
	failedAt time.Time
}

var (
	_ Link           = (*UDPEndpoint)(nil)
	_ IPv4IDPolicy   = (*UDPEndpoint)(nil)
	_ DatagramReader = (*UDPEndpoint)(nil)
	_ DatagramWriter = (*UDPEndpoint)(nil)
)

// NewUDP opens the receiving socket of a UDP endpoint. Send sockets for
// other source ports are opened on demand by WriteDatagrams.
func NewUDP(cfg UDPConfig) (*UDPEndpoint, error) {
	addr := cfg.LocalAddr.Addr()
	if !addr.IsValid() {
		addr = netip.IPv4Unspecified()
	}
	if addr.Is4In6() {
		addr = addr.Unmap()
	}
	port := cfg.LocalAddr.Port()
	if port == 0 {
		port = RoCEv2Port
	}
	e := &UDPEndpoint{
		is6:      addr.Is6(),
		local:    netip.AddrPortFrom(addr, port),
		wildcard: addr.IsUnspecified(),
		mtu:      cfg.MTU,
		batch:    cfg.BatchSize,
		maxPorts: cfg.MaxSourcePorts,
		bufSize:  cfg.SocketBuffer,
		socks:    make(map[uint16]*sourcePortSocket),
	}
	if z := addr.Zone(); z != "" {
		if ifi, err := net.InterfaceByName(z); err == nil {
			e.zone = uint32(ifi.Index)
		} else if i, err := strconv.ParseUint(z, 10, 32); err == nil {
			e.zone = uint32(i)
		}
	}
	if e.mtu <= 0 {
		e.mtu = DefaultMTU
	}
	if e.batch <= 0 {
		e.batch = DefaultUDPBatchSize
	}
	if e.maxPorts <= 0 {
		e.maxPorts = DefaultMaxSourcePorts
	}
	if e.bufSize == 0 {
		e.bufSize = DefaultUDPSocketBuffer
	}

	e.netns = currentNetns()
	var rx *udpSocket
	var err error
	if SharedReads.Load() {
		rx, e.shared, err = e.listenShared(port)
	} else {
		rx, err = e.listen(port, true)
	}
	if err != nil {
		e.netns.close()
		return nil, fmt.Errorf("netio: udp: listening on %v: %w", e.local, err)
	}
	e.rx = rx
	if !cfg.DisableGRO {
		e.gro = rx.setInt(unix.IPPROTO_UDP, unix.UDP_GRO, 1) == nil
	}
	if !cfg.DisableGSO {
		e.gso.Store(rx.gsoSupported())
	}
	e.r.init(e)
	if e.shared != nil {
		e.shared.r.init(e)
	}
	e.w.init(e)
	return e, nil
}

// listen opens a UDP socket on the endpoint's address and the given port,
// unconnected, with DF set (PMTUDISC_DO). The receiving socket asks for the
// destination address, TOS and TTL of each datagram; a send-only socket
// gets a filter that drops everything it would receive.
func (e *UDPEndpoint) listen(port uint16, receiver bool) (*udpSocket, error) {
	network := "udp4"
	if e.is6 {
		network = "udp6"
	}
	var optErr error
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		err := c.Control(func(fd uintptr) { optErr = e.setSocketOptions(int(fd), receiver) })
		if err != nil {
			return err
		}
		return optErr
	}}
	pc, err := lc.ListenPacket(context.Background(), network, netip.AddrPortFrom(e.local.Addr(), port).String())
	if err != nil {
		return nil, err
	}
	conn := pc.(*net.UDPConn)
	rc, err := conn.SyscallConn()
	if err != nil {
		conn.Close()
		return nil, err
	}
	return &udpSocket{conn: conn, mm: newRawMmsg(rc)}, nil
}

func (e *UDPEndpoint) setSocketOptions(fd int, receiver bool) error {
	type opt struct{ level, name, value int }
	var opts []opt
	if e.is6 {
		opts = append(opts, opt{unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO})
		if receiver {
			opts = append(opts,
				opt{unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1},
				opt{unix.IPPROTO_IPV6, unix.IPV6_RECVHOPLIMIT, 1},
				opt{unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1})
		}
	} else {
		opts = append(opts, opt{unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO})
		if receiver {
			opts = append(opts,
				opt{unix.IPPROTO_IP, unix.IP_PKTINFO, 1},
				opt{unix.IPPROTO_IP, unix.IP_RECVTTL, 1},
				opt{unix.IPPROTO_IP, unix.IP_RECVTOS, 1})
		}
	}
	for _, o := range opts {
		if err := unix.SetsockoptInt(fd, o.level, o.name, o.value); err != nil {
			return fmt.Errorf("setsockopt(%d, %d): %w", o.level, o.name, err)
		}
	}
	if e.is6 && receiver {
		// rxe sends IPv6 datagrams with UDP checksum 0 (see WIRE-NOTES),
		// which the kernel otherwise drops (RFC 8200 forbids them; RFC 6936
		// lets tunnels opt in, as rxe's own socket does).
		unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_NO_CHECK6_RX, 1)
	}
	if e.bufSize > 0 {
		setSocketBuffer(fd, unix.SO_SNDBUF, unix.SO_SNDBUFFORCE, e.bufSize)
		if receiver {
			setSocketBuffer(fd, unix.SO_RCVBUF, unix.SO_RCVBUFFORCE, e.bufSize)
		}
	}
	if !receiver {
		// Drop everything addressed to this port (ret #0), and keep the
		// receive queue at the kernel minimum.
		drop := []unix.SockFilter{{Code: 0x06, K: 0}}
		prog := unix.SockFprog{Len: 1, Filter: &drop[0]}
		if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &prog); err != nil {
			return fmt.Errorf("attaching drop filter: %w", err)
		}
		unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 0)
	}
	return nil
}

// setSocketBuffer sets a socket buffer size, with the FORCE option when the
// process may (CAP_NET_ADMIN), else capped by the sysctl limit.
func setSocketBuffer(fd, opt, forceOpt, size int) {
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, forceOpt, size) == nil {
		return
	}
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, opt, size)
}

func (s *udpSocket) setInt(level, name, value int) error {
	rc, err := s.conn.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), level, name, value) }); err != nil {
		return err
	}
	return serr
}

func (s *udpSocket) getInt(level, name int) (int, error) {
	rc, err := s.conn.SyscallConn()
	if err != nil {
		return 0, err
	}
	var v int
	var gerr error
	if err := rc.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), level, name) }); err != nil {
		return 0, err
	}
	return v, gerr
}

// gsoSupported reports whether the kernel knows UDP_SEGMENT (Linux 4.18+).
func (s *udpSocket) gsoSupported() bool {
	_, err := s.getInt(unix.IPPROTO_UDP, unix.UDP_SEGMENT)
	return err == nil
}

// EnableRxTimestamps sets SO_TIMESTAMPNS on the receiving socket: each
// datagram ReadDatagrams returns from then on carries the kernel's receive
// time in Stamp. See RxTimestamper.
func (e *UDPEndpoint) EnableRxTimestamps() error {
	if err := e.rx.setInt(unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
		return fmt.Errorf("netio: udp: SO_TIMESTAMPNS: %w", err)
	}
	return nil
}

// LocalAddr returns the address and port the endpoint receives on.
func (e *UDPEndpoint) LocalAddr() netip.AddrPort { return e.local }

// BatchSize returns the most datagrams moved per system call.
func (e *UDPEndpoint) BatchSize() int { return e.batch }

// MTU returns the configured interface MTU.
func (e *UDPEndpoint) MTU() int { return e.mtu }

// IPv4IDZero returns true: IPv4 datagrams leave with Identification 0 and
// DF (but for runs: see DatagramWriter).
func (e *UDPEndpoint) IPv4IDZero() bool { return true }

// UnknownIPv4ID returns true: the IPv4 Identification of received datagrams
// is not known (UDPFrames writes 0).
func (e *UDPEndpoint) UnknownIPv4ID() bool { return true }

// GSO reports whether sends currently use UDP_SEGMENT. It turns false for
// good if the kernel refuses a segmented send.
func (e *UDPEndpoint) GSO() bool { return e.gso.Load() }

// IPv4Run returns the most datagrams and payload bytes of a run of IPv4 IDs
// (one GSO send; see DatagramWriter): (1, the largest payload) for an IPv6
// endpoint or without GSO. See DatagramWriter.
func (e *UDPEndpoint) IPv4Run() (datagrams, bytes int) {
	if e.is6 || !e.gso.Load() {
		return 1, e.mtu - ipv4HeaderLen - udpHeaderLen
	}
	return udpMaxSegments, udpMaxGSOPayloadV4
}

// GRO reports whether the receiving socket has UDP_GRO on.
func (e *UDPEndpoint) GRO() bool { return e.gro }

// SocketBuffers returns the receive and send buffer sizes of the receiving
// socket as the kernel reports them (twice the usable size, by Linux's
// convention).
func (e *UDPEndpoint) SocketBuffers() (recv, send int, err error) {
	if recv, err = e.rx.getInt(unix.SOL_SOCKET, unix.SO_RCVBUF); err != nil {
		return 0, 0, err
	}
	send, err = e.rx.getInt(unix.SOL_SOCKET, unix.SO_SNDBUF)
	return recv, send, err
}

// LastSendError returns the most recent error the kernel gave for a
// datagram that was then dropped, or nil.
func (e *UDPEndpoint) LastSendError() error {
	if p := e.lastSendErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Stats returns a snapshot of the endpoint's counters.
func (e *UDPEndpoint) Stats() UDPStats {
	c := &e.stats
	e.sockMu.Lock()
	open := 0
	for _, s := range e.socks {
		if s.s != nil {
			open++
		}
	}
	e.sockMu.Unlock()
	return UDPStats{
		FramesSent: c.framesSent.Load(), FramesReceived: c.framesReceived.Load(),
		SendCalls: c.sendCalls.Load(), RecvCalls: c.recvCalls.Load(),
		GSOSends: c.gsoSends.Load(), GROReceives: c.groReceives.Load(),
		DroppedMalformed: c.droppedMalformed.Load(), DroppedIPv4ID: c.droppedIPv4ID.Load(),
		DroppedSourceAddr: c.droppedSourceAddr.Load(), DroppedSourcePort: c.droppedSourcePort.Load(),
		DroppedOversize: c.droppedOversize.Load(), DroppedSendError: c.droppedSendError.Load(),
		DroppedShortBuffer: c.droppedShortBuffer.Load(),
		SourcePortSockets:  open,
	}
}

// Close closes every socket of the endpoint. Blocked and later Reads and
// Writes return net.ErrClosed.
func (e *UDPEndpoint) Close() error {
	if !e.closed.CompareAndSwap(false, true) {
		return nil
	}
	err := e.rx.conn.Close()
	if e.shared != nil {
		e.shared.closeShared()
	}
	e.sockMu.Lock()
	for p, s := range e.socks {
		if s.s != nil {
			s.s.conn.Close()
		}
		delete(e.socks, p)
	}
	e.sockMu.Unlock()
	e.netns.close()
	return err
}

// closedErr turns an error from a socket of a closed endpoint into
// net.ErrClosed.
func (e *UDPEndpoint) closedErr(err error) error {
	if e.closed.Load() || errors.Is(err, net.ErrClosed) {
		return net.ErrClosed
	}
	return err
}

// ---- receive ----

// rxMeta is what the control messages of one datagram say.
type rxMeta struct {
	dst     [16]byte // IPv4 in the first 4 bytes
	haveDst bool
	ttl     uint8
	tos     uint8
	gsoSize int   // UDP_GRO segment size; 0 if not coalesced
	stamp   int64 // SO_TIMESTAMPNS, Unix ns; 0 without
}

// pendingDatagram is a received message (possibly several coalesced
// datagrams) not yet fully copied out to the caller.
type pendingDatagram struct {
	data []byte // what is left of the message
	seg  int    // segment size; len(data) if not coalesced
	meta rxMeta
	src  netip.AddrPort
}

type udpReader struct {
	hdrs  []unix.Mmsghdr
	iov   []unix.Iovec // one per message
	names []sockaddrBuf
	oob   [][]byte
	// slots receive the messages of ReadDatagrams; pending are the
	// datagrams in them not yet handed out.
	slots   [][]byte
	pending []pendingDatagram
	head    int
	// mm receives for a reader state of its own (the lent reads':
	// sharedRead); nil: the receiving socket's.
	mm mmsgConn
}

// udpOOBLen holds PKTINFO, TTL, TOS, UDP_GRO and SO_TIMESTAMPNS control
// messages (32+24+24+24+32 octets on 64-bit Linux).
const udpOOBLen = 160

func (r *udpReader) init(e *UDPEndpoint) {
	r.hdrs = make([]unix.Mmsghdr, e.batch)
	r.iov = make([]unix.Iovec, e.batch)
	r.names = make([]sockaddrBuf, e.batch)
	r.oob = make([][]byte, e.batch)
	oob := make([]byte, e.batch*udpOOBLen)
	for i := range r.oob {
		r.oob[i] = oob[i*udpOOBLen : (i+1)*udpOOBLen : (i+1)*udpOOBLen]
	}
	// One allocation; pages are only touched as datagrams land. Without
	// GRO a slot holds one datagram of the MTU.
	slotLen := MaxFrameLen(e.mtu)
	if e.gro {
		slotLen = groSlotLen
	}
	slab := make([]byte, e.batch*slotLen)
	r.slots = make([][]byte, e.batch)
	for i := range r.slots {
		r.slots[i] = slab[i*slotLen : (i+1)*slotLen : (i+1)*slotLen]
	}
	r.pending = make([]pendingDatagram, 0, e.batch)
}

// recvInto receives up to len(bufs) messages, message i into bufs[i], with
// recvmmsg, and returns how many arrived; (0, nil) for MSG_DONTWAIT with
// nothing queued. r is the reader state (the endpoint's, under readMu, or
// the lent reads' own: sharedRead).
func (e *UDPEndpoint) recvInto(r *udpReader, bufs [][]byte, flags int) (int, error) {
	k := min(len(bufs), len(r.hdrs))
	for i := 0; i < k; i++ {
		setIov(&r.iov[i], bufs[i])
		setMsg(&r.hdrs[i].Hdr, r.iov[i:i+1], &r.names[i], uint32(len(r.names[i])), r.oob[i])
		r.hdrs[i].Len = 0
	}
	mm := e.rx.mm
	if r.mm != nil {
		mm = r.mm
	}
	n, err := mm.recvmmsg(r.hdrs[:k], flags)
	clear(r.iov[:k]) // keep no reference to the caller's buffers
	if err != nil {
		if flags&unix.MSG_DONTWAIT != 0 && errors.Is(err, unix.EAGAIN) {
			return 0, nil
		}
		return 0, e.closedErr(err)
	}
	e.stats.recvCalls.Add(1)
	return n, nil
}

// message returns what the kernel said about received message i: its
// length, whether it was truncated, its source and control messages.
func (r *udpReader) message(i int, m *rxMeta) (n int, trunc bool, src netip.AddrPort) {
	h := &r.hdrs[i]
	parseRxControl(r.oob[i][:min(int(h.Hdr.Controllen), len(r.oob[i]))], m)
	return int(h.Len), h.Hdr.Flags&unix.MSG_TRUNC != 0, r.names[i].addrPort(h.Hdr.Namelen)
}

// fillInto receives a batch of messages into r's slots and queues their
// datagrams (the segments of coalesced ones) in r.pending, unless datagrams
// are still pending.
func (e *UDPEndpoint) fillInto(r *udpReader, want, flags int) error {
	if r.head < len(r.pending) {
		return nil
	}
	r.pending, r.head = r.pending[:0], 0
	n, err := e.recvInto(r, r.slots[:min(want, len(r.slots))], flags)
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		var p pendingDatagram
		m, trunc, src := r.message(i, &p.meta)
		if trunc {
			e.stats.droppedShortBuffer.Add(1)
			continue
		}
		p.data, p.src = r.slots[i][:m], src
		p.seg = p.meta.gsoSize
		if p.seg <= 0 || p.seg >= m {
			p.seg = m
		} else {
			e.stats.groReceives.Add(1)
		}
		r.pending = append(r.pending, p)
	}
	return nil
}

// ReadDatagrams receives up to len(d) datagrams (at most BatchSize, or the
// segments of that many coalesced messages), blocking until at least one
// arrives, and returns them in the endpoint's own buffers: nothing is
// copied. See DatagramReader.
func (e *UDPEndpoint) ReadDatagrams(d []Datagram) (int, error) {
	if e.shared != nil {
		return e.readShared(d)
	}
	return e.readDatagrams(d, 0)
}

// TryReadDatagrams is ReadDatagrams without blocking: it returns 0, nil
// when nothing is queued.
func (e *UDPEndpoint) TryReadDatagrams(d []Datagram) (int, error) {
	if x := e.shared; x != nil {
		// The lender's reads (LendReads) have buffers of their own: the
		// reader goroutine may be handing its last batch to the engine, or
		// reading again (the reads taken back).
		x.mu.Lock()
		defer x.mu.Unlock()
		return e.readDatagramsInto(&x.r, d, unix.MSG_DONTWAIT)
	}
	return e.readDatagrams(d, unix.MSG_DONTWAIT)
}

func (e *UDPEndpoint) readDatagrams(d []Datagram, flags int) (int, error) {
	if e.closed.Load() {
		return 0, net.ErrClosed
	}
	e.readMu.Lock()
	defer e.readMu.Unlock()
	return e.readDatagramsInto(&e.r, d, flags)
}

// readDatagramsInto is readDatagrams with the reader state r, whose lock
// the caller holds (readMu for the endpoint's).
func (e *UDPEndpoint) readDatagramsInto(r *udpReader, d []Datagram, flags int) (int, error) {
	if e.closed.Load() {
		return 0, net.ErrClosed
	}
	if len(d) == 0 {
		return 0, nil
	}
	if err := e.fillInto(r, min(len(d), e.batch), flags); err != nil {
		return 0, err
	}
	out := 0
	for out < len(d) && r.head < len(r.pending) {
		p := &r.pending[r.head]
		l := min(p.seg, len(p.data))
		dst := e.local
		if p.meta.haveDst {
			if e.is6 {
				dst = netip.AddrPortFrom(netip.AddrFrom16(p.meta.dst), e.local.Port())
			} else {
				dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte(p.meta.dst[:4])), e.local.Port())
			}
		}
		d[out] = Datagram{Payload: p.data[:l:l], Src: p.src, Dst: dst, TOS: p.meta.tos, TTL: p.meta.ttl, Stamp: p.meta.stamp}
		out++
		p.data = p.data[l:]
		if len(p.data) == 0 {
			r.head++
		}
	}
	e.stats.framesReceived.Add(uint64(out))
	return out, nil
}

// parseRxControl reads the control messages of one received datagram
// without allocating.
func parseRxControl(b []byte, m *rxMeta) {
	m.ttl, m.tos, m.stamp = 64, 0, 0
	ne := binary.NativeEndian
	for len(b) >= unix.SizeofCmsghdr {
		h, data, rest, err := unix.ParseOneSocketControlMessage(b)
		if err != nil {
			return
		}
		b = rest
		switch {
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_PKTINFO && len(data) >= 12:
			copy(m.dst[:4], data[8:12]) // struct in_pktinfo: ifindex, spec_dst, addr
			m.haveDst = true
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_TTL && len(data) >= 4:
			m.ttl = uint8(ne.Uint32(data))
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_TOS && len(data) >= 1:
			m.tos = data[0]
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_PKTINFO && len(data) >= 16:
			copy(m.dst[:], data[:16]) // struct in6_pktinfo: addr, ifindex
			m.haveDst = true
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_HOPLIMIT && len(data) >= 4:
			m.ttl = uint8(ne.Uint32(data))
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_TCLASS && len(data) >= 4:
			m.tos = uint8(ne.Uint32(data))
		case h.Level == unix.SOL_SOCKET && h.Type == unix.SCM_TIMESTAMPNS:
			// struct timespec: two longs.
			switch {
			case unsafe.Sizeof(unix.Timespec{}) == 16 && len(data) >= 16:
				m.stamp = int64(ne.Uint64(data))*1e9 + int64(ne.Uint64(data[8:]))
			case unsafe.Sizeof(unix.Timespec{}) == 8 && len(data) >= 8:
				m.stamp = int64(int32(ne.Uint32(data)))*1e9 + int64(ne.Uint32(data[4:]))
			}
		case h.Level == unix.IPPROTO_UDP && h.Type == unix.UDP_GRO:
			switch {
			case len(data) >= 4:
				m.gsoSize = int(ne.Uint32(data))
			case len(data) >= 2:
				m.gsoSize = int(ne.Uint16(data))
			}
		}
	}
}

// ---- send ----

// txFrame is one datagram of a write chunk.
type txFrame struct {
	payload []byte   // the UDP payload's first piece
	rest    [][]byte // its further pieces
	plen    int      // the UDP payload length
	dst     netip.AddrPort
	src     netip.Addr // set only for wildcard endpoints
	srcPort uint16
	tos     uint8
	ttl     uint8
	sock    *udpSocket // nil: dropped
	next    int        // next frame of the same socket, -1 at the end
	iov0    int        // its iovecs: w.iov[iov0 : iov0+iovN]
	iovN    int
	ipv4ID  uint16 // IPv4: the Identification its sender chose (0, or its place in a GSO run)
}

// txGroup is the datagrams of one write chunk that leave through one socket.
type txGroup struct {
	sock        *udpSocket
	first, last int
}

type udpWriter struct {
	frames   []txFrame
	groups   []txGroup
	consumed []bool
	hdrs     []unix.Mmsghdr
	msgFrame []int // msgFrame[k]: index in order of message k's first frame
	msgSegs  []int // datagrams in message k
	msgIov   []int // message k's first iovec
	order    []int // frame indices in message order
	iov      []unix.Iovec
	niov     int
	oob      [][]byte
	names    []sockaddrBuf
	namelen  []uint32
	single   [1]unix.Mmsghdr
}

// udpWriteChunk is the most datagrams one write pass handles: a full GSO
// message, and the limit on the bookkeeping arrays.
const udpWriteChunk = udpMaxSegments

func (w *udpWriter) init(e *UDPEndpoint) {
	n := udpWriteChunk
	w.frames = make([]txFrame, n)
	w.groups = make([]txGroup, 0, n)
	w.consumed = make([]bool, n)
	w.hdrs = make([]unix.Mmsghdr, n)
	w.msgFrame = make([]int, n)
	w.msgSegs = make([]int, n)
	w.msgIov = make([]int, n)
	w.order = make([]int, 0, n)
	w.iov = make([]unix.Iovec, n*(MaxWritePieces+1))
	w.oob = make([][]byte, n)
	oob := make([]byte, n*udpOOBLen)
	for i := range w.oob {
		w.oob[i] = oob[i*udpOOBLen : i*udpOOBLen : (i+1)*udpOOBLen]
	}
	w.names = make([]sockaddrBuf, n)
	w.namelen = make([]uint32, n)
}

// WriteDatagrams sends each d[i] as one UDP datagram, gathering its
// payload pieces with the kernel's iovecs. Datagrams are dropped and counted
// (see UDPStats) when their destination is not of the endpoint's family,
// they have more than MaxWritePieces pieces or a payload longer than the
// MTU allows, their source address is not the endpoint's, no socket can be
// bound to their source port, their IPv4ID has no place in a run, or the
// kernel refuses them. See DatagramWriter.
func (e *UDPEndpoint) WriteDatagrams(d []OutDatagram) (int, error) {
	if e.closed.Load() {
		return 0, net.ErrClosed
	}
	e.writeMu.Lock()
	defer e.writeMu.Unlock()
	for start := 0; start < len(d); {
		end := min(start+udpWriteChunk, len(d))
		// A run of IPv4 IDs is one GSO send: never cut one in two.
		for k := end; k < len(d) && k > start+1 && !e.is6 && d[k].IPv4ID != 0; k-- {
			if d[k-1].IPv4ID == 0 {
				end = k - 1
				break
			}
		}
		if n, err := e.writeChunk(d[start:end]); err != nil {
			return start + n, err
		}
		start = end
	}
	return len(d), nil
}

// writeChunk sends up to udpWriteChunk datagrams. On a fatal error it
// returns how many leading ones were consumed.
func (e *UDPEndpoint) writeChunk(dgs []OutDatagram) (int, error) {
	w := &e.w
	w.groups = w.groups[:0]
	count := len(dgs)
	// The socket of the last source port looked up: a chunk's datagrams
	// mostly share one (a QP's), and the map lookup per datagram was 3% of
	// softrdma bench's CPU in the 64 B WRITE rate row.
	var lastPort uint16
	var lastSock *udpSocket
	e.sockMu.Lock()
	for i := 0; i < count; i++ {
		f := &w.frames[i]
		*f = txFrame{next: -1}
		w.consumed[i] = true
		if !e.txDatagram(&dgs[i], f) {
			continue
		}
		if lastSock != nil && f.srcPort == lastPort {
			f.sock = lastSock
		} else if f.sock = e.sendSocketLocked(f.srcPort); f.sock == nil {
			continue
		} else {
			lastPort, lastSock = f.srcPort, f.sock
		}
		w.consumed[i] = false
		g := -1
		for j := range w.groups {
			if w.groups[j].sock == f.sock {
				g = j
				break
			}
		}
		if g < 0 {
			w.groups = append(w.groups, txGroup{sock: f.sock, first: i, last: i})
		} else {
			w.frames[w.groups[g].last].next = i
			w.groups[g].last = i
		}
	}
	e.sockMu.Unlock()

	// Keep no reference to the caller's buffers once done.
	defer func() {
		clear(w.frames[:count])
		clear(w.iov[:w.niov])
		w.niov = 0
	}()
	for _, g := range w.groups {
		if err := e.sendGroup(g); err != nil {
			n := 0
			for n < count && w.consumed[n] {
				n++
			}
			return n, err
		}
	}
	return count, nil
}

// txDatagram checks a datagram given to WriteDatagrams into f, or counts it
// as dropped and returns false.
func (e *UDPEndpoint) txDatagram(d *OutDatagram, f *txFrame) bool {
	c := &e.stats
	dst := netip.AddrPortFrom(d.Dst.Addr().Unmap(), d.Dst.Port())
	if e.is6 {
		dst = d.Dst
	}
	if len(d.Payload) > MaxWritePieces || !dst.Addr().IsValid() || dst.Addr().Is6() != e.is6 {
		c.droppedMalformed.Add(1)
		return false
	}
	total := 0
	for _, p := range d.Payload {
		total += len(p)
	}
	hdr := ipv4HeaderLen + udpHeaderLen
	if e.is6 {
		hdr = ipv6HeaderLen + udpHeaderLen
	}
	if hdr+total > e.mtu {
		c.droppedOversize.Add(1)
		return false
	}
	if src := d.Src; src.IsValid() {
		if !e.is6 {
			src = src.Unmap()
		}
		if !e.txSource(src, f) {
			return false
		}
	}
	f.dst, f.srcPort, f.tos, f.ttl, f.plen = dst, d.SrcPort, d.TOS, d.TTL, total
	if !e.is6 {
		f.ipv4ID = d.IPv4ID
	}
	if len(d.Payload) > 0 {
		f.payload, f.rest = d.Payload[0], d.Payload[1:]
	}
	return true
}

// txSource checks a datagram's source address: an endpoint bound to an
// address sends from it alone (others are dropped and counted); a wildcard
// endpoint sends from any, passed to the kernel (f.src).
func (e *UDPEndpoint) txSource(src netip.Addr, f *txFrame) bool {
	if e.wildcard {
		if !src.IsUnspecified() {
			f.src = src
		}
		return true
	}
	if src != e.local.Addr() {
		e.stats.droppedSourceAddr.Add(1)
		return false
	}
	return true
}

// sendSocketLocked returns the socket that sends from port, creating it on
// first use, or nil (counted) if there is none. e.sockMu must be held.
func (e *UDPEndpoint) sendSocketLocked(port uint16) *udpSocket {
	if port == e.local.Port() {
		return e.rx
	}
	sp := e.socks[port]
	if sp != nil && sp.s != nil {
		return sp.s
	}
	if e.closed.Load() || (sp != nil && time.Since(sp.failedAt) < sourcePortRetry) {
		e.stats.droppedSourcePort.Add(1)
		return nil
	}
	if sp == nil && len(e.socks) >= e.maxPorts {
		e.stats.droppedSourcePort.Add(1)
		return nil
	}
	var s *udpSocket
	err := e.netns.do(func() (err error) {
		s, err = e.listenSend(port)
		return err
	})
	if err != nil {
		e.noteSendError(fmt.Errorf("netio: udp: binding source port %d: %w", port, err))
		e.socks[port] = &sourcePortSocket{failedAt: time.Now()}
		e.stats.droppedSourcePort.Add(1)
		return nil
	}
	e.socks[port] = &sourcePortSocket{s: s}
	return s
}

func (e *UDPEndpoint) noteSendError(err error) { e.lastSendErr.Store(&err) }

// appendIov appends frame fi's payload pieces to w.iov: exactly its UDP
// payload length of them.
func (w *udpWriter) appendIov(fi int) {
	f := &w.frames[fi]
	f.iov0 = w.niov
	left := f.plen
	add := func(p []byte) {
		if left == 0 || len(p) == 0 {
			return
		}
		p = p[:min(len(p), left)]
		setIov(&w.iov[w.niov], p)
		w.niov++
		left -= len(p)
	}
	add(f.payload)
	for _, p := range f.rest {
		add(p)
	}
	f.iovN = w.niov - f.iov0
}

// sendGroup builds the messages for the frames of one socket (merging runs
// into GSO messages when on) and sends them with as few sendmmsg calls as
// the kernel allows. It returns an error only when the endpoint is closed.
func (e *UDPEndpoint) sendGroup(g txGroup) error {
	w := &e.w
	nm := 0
	w.order = w.order[:0]
	w.niov = 0
	gso := e.gso.Load()
	seg := 0 // GSO segment size of message nm-1, 0 if it cannot grow
	total := 0
	for i := g.first; i >= 0; i = w.frames[i].next {
		f := &w.frames[i]
		// An IPv4 datagram joins the message before it only as the segment
		// whose number the kernel gives the ID its sender chose.
		join := gso && nm > 0 && seg > 0 && (e.is6 || int(f.ipv4ID) == w.msgSegs[nm-1]) && e.canJoin(nm-1, f, seg, total)
		if !join && f.ipv4ID != 0 {
			w.consumed[i] = true
			e.stats.droppedIPv4ID.Add(1) // no place for that ID
			continue
		}
		if join {
			// Messages of a group are built one after another and only the
			// last grows, so its iovecs stay contiguous.
			k := nm - 1
			w.appendIov(i)
			w.order = append(w.order, i)
			w.msgSegs[k]++
			total += f.plen
			if f.plen < seg || w.msgSegs[k] == udpMaxSegments {
				seg = 0 // a short segment must be the last
			}
			continue
		}
		k := nm
		nm++
		w.msgFrame[k] = len(w.order)
		w.msgSegs[k] = 1
		w.msgIov[k] = w.niov
		w.appendIov(i)
		w.order = append(w.order, i)
		w.namelen[k] = w.names[k].put(f.dst, e.is6, e.zone)
		seg, total = f.plen, f.plen
	}
	// Message headers and control messages, now that the segment counts are
	// known.
	for k := 0; k < nm; k++ {
		f := &w.frames[w.order[w.msgFrame[k]]]
		segSize := 0
		if w.msgSegs[k] > 1 {
			segSize = f.plen
		}
		end := w.niov
		if k+1 < nm {
			end = w.msgIov[k+1]
		}
		oob := e.appendTxControl(w.oob[k][:0], f, segSize)
		setMsg(&w.hdrs[k].Hdr, w.iov[w.msgIov[k]:end], &w.names[k], w.namelen[k], oob)
		w.hdrs[k].Len = 0
	}
	return e.sendMessages(g.sock, 0, nm)
}

// canJoin reports whether frame f may be appended to GSO message k, whose
// segments are seg bytes and total bytes in all.
func (e *UDPEndpoint) canJoin(k int, f *txFrame, seg, total int) bool {
	w := &e.w
	first := &w.frames[w.order[w.msgFrame[k]]]
	return f.plen <= seg && f.plen > 0 && w.niov+f.iovPieces() <= len(w.iov) &&
		total+f.plen <= e.maxGSOPayload() &&
		f.dst == first.dst && f.src == first.src && f.tos == first.tos && f.ttl == first.ttl
}

// maxGSOPayload returns the most UDP payload bytes of one GSO send.
func (e *UDPEndpoint) maxGSOPayload() int {
	if e.is6 {
		return udpMaxGSOPayload
	}
	return udpMaxGSOPayloadV4
}

// iovPieces returns the most iovecs f's payload takes.
func (f *txFrame) iovPieces() int { return 1 + len(f.rest) }

// appendTxControl appends the control messages for a datagram like f:
// TOS/traffic class, TTL/hop limit, source address for wildcard endpoints,
// and UDP_SEGMENT when segSize > 0.
func (e *UDPEndpoint) appendTxControl(b []byte, f *txFrame, segSize int) []byte {
	if e.is6 {
		b = appendCmsgInt(b, unix.IPPROTO_IPV6, unix.IPV6_TCLASS, int32(f.tos))
		if f.ttl != 0 {
			b = appendCmsgInt(b, unix.IPPROTO_IPV6, unix.IPV6_HOPLIMIT, int32(f.ttl))
		}
		if f.src.IsValid() {
			var pi [20]byte // struct in6_pktinfo: addr, ifindex 0
			a := f.src.As16()
			copy(pi[:16], a[:])
			b = appendCmsg(b, unix.IPPROTO_IPV6, unix.IPV6_PKTINFO, pi[:])
		}
	} else {
		b = appendCmsgInt(b, unix.IPPROTO_IP, unix.IP_TOS, int32(f.tos))
		if f.ttl != 0 {
			b = appendCmsgInt(b, unix.IPPROTO_IP, unix.IP_TTL, int32(f.ttl))
		}
		if f.src.IsValid() {
			var pi [12]byte // struct in_pktinfo: ifindex 0, spec_dst = source, addr 0
			a := f.src.As4()
			copy(pi[4:8], a[:])
			b = appendCmsg(b, unix.IPPROTO_IP, unix.IP_PKTINFO, pi[:])
		}
	}
	if segSize > 0 {
		var s [2]byte
		binary.NativeEndian.PutUint16(s[:], uint16(segSize))
		b = appendCmsg(b, unix.IPPROTO_UDP, unix.UDP_SEGMENT, s[:])
	}
	return b
}

func appendCmsgInt(b []byte, level, typ int, v int32) []byte {
	var d [4]byte
	binary.NativeEndian.PutUint32(d[:], uint32(v))
	return appendCmsg(b, level, typ, d[:])
}

// appendCmsg appends one control message; b's capacity must suffice.
func appendCmsg(b []byte, level, typ int, data []byte) []byte {
	start := len(b)
	space := unix.CmsgSpace(len(data))
	b = b[:start+space]
	clear(b[start:])
	h := (*unix.Cmsghdr)(unsafe.Pointer(&b[start]))
	h.Level = int32(level)
	h.Type = int32(typ)
	h.SetLen(unix.CmsgLen(len(data)))
	copy(b[start+unix.CmsgLen(0):], data)
	return b
}

// sendMessages sends messages [from, to) of w.hdrs through s, retrying
// after partial sends, dropping (and counting) messages the kernel refuses,
// and falling back to plain datagrams if a GSO send is refused. It returns
// an error only if the endpoint is closed.
func (e *UDPEndpoint) sendMessages(s *udpSocket, from, to int) error {
	w := &e.w
	for from < to {
		n, err := s.mm.sendmmsg(w.hdrs[from:to])
		e.stats.sendCalls.Add(1)
		n = max(n, 0)
		if n == 0 && err == nil {
			err = errors.New("sendmmsg sent nothing")
		}
		for k := from; k < from+n; k++ {
			e.consume(k, true)
		}
		from += n
		if err == nil {
			continue
		}
		if e.closed.Load() || errors.Is(err, net.ErrClosed) {
			return net.ErrClosed
		}
		if from >= to {
			break
		}
		k := from
		from++
		if w.msgSegs[k] > 1 && isGSOError(err) {
			e.gso.Store(false)
			if cerr := e.sendUnsegmented(s, k); cerr != nil {
				return cerr
			}
			continue
		}
		e.noteSendError(err)
		e.stats.droppedSendError.Add(uint64(w.msgSegs[k]))
		e.consume(k, false)
	}
	return nil
}

// consume marks message k's frames as handled, counting them sent if ok.
func (e *UDPEndpoint) consume(k int, ok bool) {
	w := &e.w
	segs := w.msgSegs[k]
	for j := 0; j < segs; j++ {
		w.consumed[w.order[w.msgFrame[k]+j]] = true
	}
	if ok {
		e.stats.framesSent.Add(uint64(segs))
		if segs > 1 {
			e.stats.gsoSends.Add(1)
		}
	}
}

// sendUnsegmented resends GSO message k as one datagram per segment; the
// IPv4 segments that were to carry IDs above 0 are dropped and counted
// instead, since alone they would leave with ID 0 (see DatagramWriter).
func (e *UDPEndpoint) sendUnsegmented(s *udpSocket, k int) error {
	w := &e.w
	first := w.msgFrame[k]
	for j := 0; j < w.msgSegs[k]; j++ {
		fi := w.order[first+j]
		f := &w.frames[fi]
		if f.ipv4ID != 0 {
			w.consumed[fi] = true
			e.stats.droppedIPv4ID.Add(1)
			continue
		}
		var oob [udpOOBLen]byte
		m := &w.single[0]
		setMsg(&m.Hdr, w.iov[f.iov0:f.iov0+f.iovN], &w.names[k], w.namelen[k], e.appendTxControl(oob[:0], f, 0))
		_, err := s.mm.sendmmsg(w.single[:])
		e.stats.sendCalls.Add(1)
		w.consumed[fi] = true
		switch {
		case err == nil:
			e.stats.framesSent.Add(1)
		case e.closed.Load() || errors.Is(err, net.ErrClosed):
			w.consumed[fi] = false
			return net.ErrClosed
		default:
			e.noteSendError(err)
			e.stats.droppedSendError.Add(1)
		}
	}
	return nil
}

// isGSOError reports whether err says the kernel or device cannot segment
// (as wireguard-go does, EIO; also the errors of kernels without
// UDP_SEGMENT).
func isGSOError(err error) bool {
	var errno syscall.Errno
	errors.As(err, &errno)
	return errno == unix.EIO || errno == unix.ENOPROTOOPT || errno == unix.EOPNOTSUPP
}
