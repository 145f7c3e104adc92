//go:build linux

package netio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Ring defaults of a PacketEndpoint.
const (
	// DefaultPacketBlockSize is the ring's block size: a power-of-two
	// multiple of the page size, larger than a jumbo frame's slot.
	DefaultPacketBlockSize = 128 << 10
	// DefaultPacketBlockCount is the number of ring blocks (4 MiB in all
	// with the default block size: 2048 slots at MTU 1500, about 3 ms at
	// 10 Gb/s).
	DefaultPacketBlockCount = 32
	// DefaultPacketBatchSize is the batch size of a PacketEndpoint.
	DefaultPacketBatchSize = 64
)

// packetSlotSize returns tp_frame_size of the ring for a link MTU: the
// smallest power of two, 2048 at least, that holds the ring's headers
// (tpacket2_hdr, sockaddr_ll, virtio_net_hdr) and a frame of that MTU.
// Longer frames (GSO super-frames) go the socket's way (TP_STATUS_COPY).
func packetSlotSize(mtu int) int {
	need := tpacketAlign(unix.SizeofTpacket2Hdr) + tpacketAlign(unix.SizeofSockaddrLinklayer+vnetHdrLen) + 16 + MaxFrameLen(mtu)
	n := 2048
	for n < need {
		n *= 2
	}
	return n
}

// packetSnapLen is what the filter keeps of an accepted frame: all of it.
const packetSnapLen = 0x40000

// PacketConfig configures NewPacket.
type PacketConfig struct {
	// Interface is the name of the link, looked up in the calling thread's
	// network namespace.
	Interface string
	// UDPPort is the RoCEv2 destination port the filter accepts; 0 means
	// RoCEv2Port.
	UDPPort uint16
	// BatchSize is the most frames per Read or Write; 0 means
	// DefaultPacketBatchSize.
	BatchSize int
	// BlockSize and BlockCount size the receive ring; 0 means
	// DefaultPacketBlockSize and DefaultPacketBlockCount. BlockSize must be
	// a multiple of the page size and of the ring's slot size (2048 at MTU
	// 1500; a power of two).
	BlockSize, BlockCount int
	// QdiscBypass sends straight to the driver (PACKET_QDISC_BYPASS),
	// skipping traffic control; frames the device queue cannot take are
	// dropped.
	QdiscBypass bool
	// Promiscuous also receives frames addressed to other MACs.
	Promiscuous bool
	// SendBuffer is the SO_SNDBUF size; 0 means DefaultUDPSocketBuffer,
	// negative leaves the kernel default.
	SendBuffer int
}

// PacketStats counts what a PacketEndpoint did.
type PacketStats struct {
	FramesSent         uint64 // frames the kernel accepted
	FramesReceived     uint64 // frames returned by Read or TryRead
	SendCalls          uint64 // sendmmsg system calls
	CopiedFrames       uint64 // Read: frames longer than a ring slot, read from the socket (TP_STATUS_COPY)
	DroppedOversize    uint64 // Write: frame longer than MaxFrameLen(MTU()) or empty
	DroppedSendError   uint64 // Write: the kernel refused the frame (see LastSendError)
	DroppedShortBuffer uint64 // Read: frame longer than the caller's buffer
	DroppedTruncated   uint64 // Read: frame longer than a ring slot whose full copy the socket did not keep
	DroppedOutgoing    uint64 // Read: our own outgoing frames (only without PACKET_IGNORE_OUTGOING)
	DroppedGSO         uint64 // Read: a GSO frame of another kind than UDP, or one that does not parse

	// GSOFrames counts UDP GSO frames that Read split, GSOSegments the
	// datagrams it made of them.
	GSOFrames, GSOSegments uint64

	// From PACKET_STATISTICS, accumulated: frames that passed the filter,
	// and of those the ones dropped because the ring was full.
	KernelPackets, KernelDrops uint64
}

// PacketEndpoint sends and receives raw Ethernet frames on one interface
// through an AF_PACKET socket (needs CAP_NET_RAW): RoCEv1 (Ethertype
// 0x8915) and RoCEv2 (IPv4 or IPv6 UDP to the configured port) frames
// only, chosen by a classic BPF filter in the kernel (RoCEFilter).
//
// Receive uses a TPACKET_V2 memory-mapped ring of fixed slots, each handed
// over by the kernel as soon as it holds a frame: a TPACKET_V3 ring hands
// over whole blocks, when full or after a retire timeout of at least 1 ms,
// which was the latency of every light exchange (softrdma bench: 500 us
// one way on a veth). Read copies each frame out of its slot into the
// caller's buffer at offset; ReadFrames points into the slot. A frame
// longer than a slot (a GSO super-frame) is truncated in the ring and
// queued whole on the socket as well (PACKET_COPY_THRESH), and read from
// there. Frames keep whatever Ethernet padding the sender
// added, so the upper layer must use the IP and UDP lengths; VLAN tags the
// NIC stripped are not put back. The socket sits in Go's network poller,
// so a blocked Read costs no thread, and Close wakes it at once.
//
// Send uses sendmmsg on the packet socket, one message per frame, straight
// from the caller's buffers. A TX ring would save nothing: the kernel copies
// the frame into an skb either way, and a ring adds a copy into it, status
// hand-shakes and a send() kick per batch. PACKET_IGNORE_OUTGOING keeps our
// own frames (and the kernel's) out of the ring.
//
// A veth or a NIC with UDP GRO can hand the socket one frame that stands for
// many UDP datagrams (SKB_GSO_UDP_L4), for example a super-datagram that a
// UDP socket in the far namespace sent with UDP_SEGMENT. The socket asks for
// a virtio_net_hdr before each frame (PACKET_VNET_HDR) to learn of these, and
// Read returns each such frame as the datagrams it stands for, as a NIC
// would have put them on the wire (see udpGSOFrame.segment).
type PacketEndpoint struct {
	file    *os.File
	rc      syscall.RawConn
	ifindex int
	ifname  string
	mac     net.HardwareAddr
	mtu     int
	batch   int

	ring      []byte
	blockSize int
	blockNr   int
	slotSize  int              // tp_frame_size
	slotNr    int              // slots in the ring
	perBlock  int              // slots per block
	vnet      bool             // frames carry a virtio_net_hdr (PACKET_VNET_HDR)
	vnetHdr   [vnetHdrLen]byte // the all-zero header sent before each frame

	closed atomic.Bool

	readMu  sync.Mutex
	cur     int // slot being consumed
	held    int // slots before cur consumed by ReadFrames, not yet handed back
	segNext int // next datagram to return of the GSO frame in slot cur
	// copied holds slot cur's frame read from the socket (TP_STATUS_COPY),
	// virtio_net_hdr first, copiedLen bytes; 0 when not read yet.
	copied    []byte
	copiedLen int
	// copyHeld says ReadFrames returned a frame in copied: no other may be
	// read into it before the next read.
	copyHeld bool
	// scratch holds the datagrams split from GSO frames that ReadFrames
	// returned, until the next read; scratchUsed bytes are in use.
	scratch     []byte
	scratchUsed int
	recvFn      func(fd uintptr) bool // reads slot cur's copy into copied
	recvErr     syscall.Errno

	writeMu sync.Mutex
	hdrs    []unix.Mmsghdr
	iovs    []unix.Iovec // packetIovecs per message
	send    *packetSend
	waitFn  func(uintptr) bool // a blocked read's poller check, made once

	statsMu     sync.Mutex // guards the kernel counters
	kernel      PacketStats
	lastSendErr atomic.Pointer[error]
	c           packetCounters
}

type packetCounters struct {
	framesSent, framesReceived, sendCalls, copied, droppedOversize, droppedSendError,
	droppedShortBuffer, droppedTruncated, droppedOutgoing, droppedGSO, gsoFrames, gsoSegments atomic.Uint64
}

var (
	_ VectorWriter = (*PacketEndpoint)(nil)
	_ FrameReader  = (*PacketEndpoint)(nil)
	_ Endpoint     = (*PacketEndpoint)(nil)
	_ Poller       = (*PacketEndpoint)(nil)
)

// RoCEFilter returns the classic BPF program of a PacketEndpoint: accept
// Ethertype 0x8915 (RoCEv1), and IPv4 (first fragments, any header length)
// or IPv6 (UDP as the first next header) UDP datagrams to udpPort; reject
// everything else.
func RoCEFilter(udpPort uint16) []bpf.Instruction {
	// Instruction indices that jumps land on; a jump at index i skips
	// target-(i+1) instructions.
	const (
		ipv6   = 8
		udp4   = 11
		reject = 14
		udp6   = 15
		accept = 17
	)
	port := uint32(udpPort)
	return []bpf.Instruction{
		/* 0 */ bpf.LoadAbsolute{Off: 12, Size: 2}, // Ethertype
		/* 1 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: etherTypeRoCEv1, SkipTrue: accept - 2},
		/* 2 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: etherTypeIPv4, SkipFalse: ipv6 - 3},
		/* 3 */ bpf.LoadAbsolute{Off: EthernetHeaderLen + 9, Size: 1}, // IPv4 protocol
		/* 4 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: ipProtoUDP, SkipFalse: reject - 5},
		/* 5 */ bpf.LoadAbsolute{Off: EthernetHeaderLen + 6, Size: 2}, // flags, fragment offset
		/* 6 */ bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: 0x1fff, SkipTrue: reject - 7},
		/* 7 */ bpf.Jump{Skip: udp4 - 8},
		/* 8 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: etherTypeIPv6, SkipFalse: reject - 9},
		/* 9 */ bpf.LoadAbsolute{Off: EthernetHeaderLen + 6, Size: 1}, // IPv6 next header
		/* 10 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: ipProtoUDP, SkipTrue: udp6 - 11, SkipFalse: reject - 11},
		/* 11 */ bpf.LoadMemShift{Off: EthernetHeaderLen}, // X = IPv4 header length
		/* 12 */ bpf.LoadIndirect{Off: EthernetHeaderLen + 2, Size: 2}, // UDP destination port
		/* 13 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: port, SkipTrue: accept - 14},
		/* 14 */ bpf.RetConstant{Val: 0},
		/* 15 */ bpf.LoadAbsolute{Off: EthernetHeaderLen + ipv6HeaderLen + 2, Size: 2},
		/* 16 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: port, SkipFalse: 18 - 17},
		/* 17 */ bpf.RetConstant{Val: packetSnapLen},
		/* 18 */ bpf.RetConstant{Val: 0},
	}
}

// NewPacket opens an AF_PACKET endpoint on cfg.Interface.
func NewPacket(cfg PacketConfig) (*PacketEndpoint, error) {
	ifi, err := net.InterfaceByName(cfg.Interface)
	if err != nil {
		return nil, fmt.Errorf("netio: packet: %w", err)
	}
	e := &PacketEndpoint{
		ifindex:   ifi.Index,
		ifname:    ifi.Name,
		mac:       ifi.HardwareAddr,
		mtu:       ifi.MTU,
		batch:     cfg.BatchSize,
		blockSize: cfg.BlockSize,
		blockNr:   cfg.BlockCount,
	}
	if e.batch <= 0 {
		e.batch = DefaultPacketBatchSize
	}
	if e.blockSize <= 0 {
		e.blockSize = DefaultPacketBlockSize
	}
	if e.blockNr <= 0 {
		e.blockNr = DefaultPacketBlockCount
	}
	e.slotSize = packetSlotSize(e.mtu)
	if cfg.BlockSize <= 0 && e.blockSize < e.slotSize {
		e.blockSize = e.slotSize // a jumbo MTU
	}
	if e.blockSize%os.Getpagesize() != 0 || e.blockSize%e.slotSize != 0 {
		return nil, fmt.Errorf("netio: packet: block size %d is not a multiple of the page size and of the slot size %d", e.blockSize, e.slotSize)
	}
	e.perBlock = e.blockSize / e.slotSize
	e.slotNr = e.perBlock * e.blockNr
	port := cfg.UDPPort
	if port == 0 {
		port = RoCEv2Port
	}
	sndbuf := cfg.SendBuffer
	if sndbuf == 0 {
		sndbuf = DefaultUDPSocketBuffer
	}

	// Protocol 0: the socket receives nothing until bind, after the filter
	// and ring are in place.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("netio: packet: socket: %w", err)
	}
	fail := func(what string, err error) (*PacketEndpoint, error) {
		if e.ring != nil {
			unix.Munmap(e.ring)
		}
		unix.Close(fd)
		return nil, fmt.Errorf("netio: packet: %s on %s: %w", what, cfg.Interface, err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VERSION, unix.TPACKET_V2); err != nil {
		return fail("PACKET_VERSION", err)
	}
	// Before the ring, or the kernel refuses it. Where it refuses it anyway,
	// GSO frames are never delivered (the kernel drops them).
	e.vnet = unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1) == nil
	raw, err := bpf.Assemble(RoCEFilter(port))
	if err != nil {
		return fail("assembling filter", err)
	}
	prog := unix.SockFprog{Len: uint16(len(raw)), Filter: (*unix.SockFilter)(unsafe.Pointer(&raw[0]))}
	if err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &prog); err != nil {
		return fail("SO_ATTACH_FILTER", err)
	}
	// Without it (Linux < 4.20) Read skips outgoing frames itself.
	unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1)
	if cfg.QdiscBypass {
		if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1); err != nil {
			return fail("PACKET_QDISC_BYPASS", err)
		}
	}
	if sndbuf > 0 {
		setSocketBuffer(fd, unix.SO_SNDBUF, unix.SO_SNDBUFFORCE, sndbuf)
	}
	// A frame longer than a slot is queued whole on the socket too (up to
	// the receive buffer), its slot marked TP_STATUS_COPY.
	if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_COPY_THRESH, 1); err != nil {
		return fail("PACKET_COPY_THRESH", err)
	}
	setSocketBuffer(fd, unix.SO_RCVBUF, unix.SO_RCVBUFFORCE, DefaultUDPSocketBuffer)
	req := unix.TpacketReq{
		Block_size: uint32(e.blockSize),
		Block_nr:   uint32(e.blockNr),
		Frame_size: uint32(e.slotSize),
		Frame_nr:   uint32(e.slotNr),
	}
	if err := unix.SetsockoptTpacketReq(fd, unix.SOL_PACKET, unix.PACKET_RX_RING, &req); err != nil {
		return fail("PACKET_RX_RING", err)
	}
	e.ring, err = unix.Mmap(fd, 0, e.blockSize*e.blockNr, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail("mmap", err)
	}
	if cfg.Promiscuous {
		mr := unix.PacketMreq{Ifindex: int32(e.ifindex), Type: unix.PACKET_MR_PROMISC}
		if err := unix.SetsockoptPacketMreq(fd, unix.SOL_PACKET, unix.PACKET_ADD_MEMBERSHIP, &mr); err != nil {
			return fail("PACKET_MR_PROMISC", err)
		}
	}
	sll := unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: e.ifindex}
	if err := unix.Bind(fd, &sll); err != nil {
		return fail("bind", err)
	}
	// A non-blocking descriptor joins Go's network poller.
	e.file = os.NewFile(uintptr(fd), "packet:"+cfg.Interface)
	if e.rc, err = e.file.SyscallConn(); err != nil {
		unix.Munmap(e.ring)
		e.file.Close()
		return nil, fmt.Errorf("netio: packet: %w", err)
	}
	e.hdrs = make([]unix.Mmsghdr, e.batch)
	e.iovs = make([]unix.Iovec, e.batch*packetIovecs)
	e.scratch = make([]byte, 2*maxGSOFrame)
	e.copied = make([]byte, vnetHdrLen+maxGSOFrame)
	e.send = newPacketSend(e)
	e.waitFn = func(uintptr) bool { return e.closed.Load() || e.slotReady(e.cur) }
	e.recvFn = func(fd uintptr) bool {
		r, _, en := unix.Syscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&e.copied[0])), uintptr(len(e.copied)), unix.MSG_DONTWAIT, 0, 0)
		e.copiedLen, e.recvErr = int(r), en
		if en != 0 {
			e.copiedLen = 0
		}
		return true // never wait: the copy is queued before its slot is handed over, or not at all
	}
	return e, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// Interface returns the name of the endpoint's link.
func (e *PacketEndpoint) Interface() string { return e.ifname }

// HardwareAddr returns the link's Ethernet address.
func (e *PacketEndpoint) HardwareAddr() net.HardwareAddr { return e.mac }

// BatchSize returns the most frames per Read or Write.
func (e *PacketEndpoint) BatchSize() int { return e.batch }

// MTU returns the link's MTU when the endpoint was opened.
func (e *PacketEndpoint) MTU() int { return e.mtu }

// LastSendError returns the most recent error the kernel gave for a frame
// that was then dropped, or nil.
func (e *PacketEndpoint) LastSendError() error {
	if p := e.lastSendErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Stats returns a snapshot of the endpoint's counters, folding in the
// kernel's PACKET_STATISTICS (which reset when read).
func (e *PacketEndpoint) Stats() PacketStats {
	e.statsMu.Lock()
	defer e.statsMu.Unlock()
	if !e.closed.Load() {
		e.rc.Control(func(fd uintptr) {
			if st, err := unix.GetsockoptTpacketStats(int(fd), unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil {
				e.kernel.KernelPackets += uint64(st.Packets)
				e.kernel.KernelDrops += uint64(st.Drops)
			}
		})
	}
	s := e.kernel
	c := &e.c
	s.FramesSent, s.FramesReceived, s.SendCalls = c.framesSent.Load(), c.framesReceived.Load(), c.sendCalls.Load()
	s.CopiedFrames = c.copied.Load()
	s.DroppedOversize, s.DroppedSendError = c.droppedOversize.Load(), c.droppedSendError.Load()
	s.DroppedShortBuffer, s.DroppedTruncated = c.droppedShortBuffer.Load(), c.droppedTruncated.Load()
	s.DroppedOutgoing, s.DroppedGSO = c.droppedOutgoing.Load(), c.droppedGSO.Load()
	s.GSOFrames, s.GSOSegments = c.gsoFrames.Load(), c.gsoSegments.Load()
	return s
}

// Close closes the socket and unmaps the ring. A blocked Read returns
// net.ErrClosed at once.
func (e *PacketEndpoint) Close() error {
	if !e.closed.CompareAndSwap(false, true) {
		return nil
	}
	err := e.file.Close() // wakes a Read waiting in the poller
	e.readMu.Lock()       // wait for it to leave the ring
	unix.Munmap(e.ring)
	e.ring = nil
	e.readMu.Unlock()
	return err
}

// Read copies up to len(bufs) frames out of the ring, blocking until at
// least one is there. See Endpoint.
func (e *PacketEndpoint) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	return e.read(bufs, sizes, offset, true)
}

// TryRead is Read without blocking. See Poller.
func (e *PacketEndpoint) TryRead(bufs [][]byte, sizes []int, offset int) (int, error) {
	return e.read(bufs, sizes, offset, false)
}

func (e *PacketEndpoint) read(bufs [][]byte, sizes []int, offset int, block bool) (int, error) {
	e.readMu.Lock()
	defer e.readMu.Unlock()
	want := min(len(bufs), len(sizes))
	e.releaseHeld()
	for {
		if e.closed.Load() {
			return 0, net.ErrClosed
		}
		n, err := e.drain(bufs[:want], sizes, offset, false)
		if n > 0 || err != nil || !block || want == 0 {
			return n, err
		}
		werr := e.rc.Read(e.waitFn)
		if werr != nil {
			if e.closed.Load() || errors.Is(werr, os.ErrClosed) {
				return 0, net.ErrClosed
			}
			return 0, werr
		}
	}
}

// sllPktTypeOff is the offset of sll_pkttype in struct sockaddr_ll.
const sllPktTypeOff = 10

// maxGSOFrame bounds a GSO super-frame: 64 KiB of IP packet and its
// Ethernet header (with a VLAN tag).
const maxGSOFrame = 65535 + EthernetHeaderLen + 4

// slot returns ring slot i, shared with the kernel: its tpacket2_hdr first.
func (e *PacketEndpoint) slot(i int) []byte {
	off := i/e.perBlock*e.blockSize + i%e.perBlock*e.slotSize
	return e.ring[off : off+e.slotSize : off+e.slotSize]
}

// slotStatus returns the status word (tp_status) of slot i.
func (e *PacketEndpoint) slotStatus(i int) *uint32 {
	return (*uint32)(unsafe.Pointer(&e.slot(i)[0]))
}

func (e *PacketEndpoint) slotReady(i int) bool {
	return atomic.LoadUint32(e.slotStatus(i))&unix.TP_STATUS_USER != 0
}

// ReadFrames returns up to len(frames) frames where they lie in the ring,
// blocking until at least one is there: no copy. They stay valid until the
// next read of any kind, which hands their slots back to the kernel. See
// FrameReader.
func (e *PacketEndpoint) ReadFrames(frames [][]byte) (int, error) {
	return e.readFrames(frames, true)
}

// TryReadFrames is ReadFrames without blocking: it returns 0, nil when no
// frame is waiting.
func (e *PacketEndpoint) TryReadFrames(frames [][]byte) (int, error) {
	return e.readFrames(frames, false)
}

func (e *PacketEndpoint) readFrames(frames [][]byte, block bool) (int, error) {
	e.readMu.Lock()
	defer e.readMu.Unlock()
	e.releaseHeld()
	for {
		if e.closed.Load() {
			return 0, net.ErrClosed
		}
		n, err := e.drain(frames, nil, 0, true)
		if n > 0 || err != nil || !block || len(frames) == 0 {
			return n, err
		}
		werr := e.rc.Read(e.waitFn)
		if werr != nil {
			if e.closed.Load() || errors.Is(werr, os.ErrClosed) {
				return 0, net.ErrClosed
			}
			return 0, werr
		}
	}
}

// releaseHeld hands back to the kernel the slots whose frames ReadFrames
// returned last time.
func (e *PacketEndpoint) releaseHeld() {
	e.scratchUsed = 0
	e.copyHeld = false
	if e.ring == nil { // Close unmapped it (under readMu): nothing to hand back
		e.held = 0
		return
	}
	for ; e.held > 0; e.held-- {
		i := (e.cur - e.held + e.slotNr) % e.slotNr
		atomic.StoreUint32(e.slotStatus(i), unix.TP_STATUS_KERNEL)
	}
}

// drain copies frames from ready slots into bufs (or, inPlace, points
// bufs[i] at them in the ring, sizes unused), handing each slot back to the
// kernel once its frame is consumed (inPlace: at the next read).
func (e *PacketEndpoint) drain(bufs [][]byte, sizes []int, offset int, inPlace bool) (int, error) {
	n := 0
	var rerr error
	for n < len(bufs) {
		if e.held == e.slotNr || !e.slotReady(e.cur) {
			break
		}
		sl := e.slot(e.cur)
		h := (*unix.Tpacket2Hdr)(unsafe.Pointer(&sl[0]))
		mac, snap, length := int(h.Mac), int(h.Snaplen), int(h.Len)
		pktType := sl[tpacketAlign(unix.SizeofTpacket2Hdr)+sllPktTypeOff]
		var frame, vnet []byte
		switch {
		case pktType == unix.PACKET_OUTGOING:
			e.c.droppedOutgoing.Add(1)
			if h.Status&unix.TP_STATUS_COPY != 0 && e.copiedLen == 0 {
				if inPlace && e.copyHeld {
					e.c.framesReceived.Add(uint64(n))
					return n, rerr // copied still holds a frame returned by this read
				}
				e.rc.Read(e.recvFn) // its copy too, or the next slot would read this one's
			}
		case h.Status&unix.TP_STATUS_COPY != 0 && snap < length:
			if e.copiedLen == 0 {
				if inPlace && e.copyHeld {
					e.c.framesReceived.Add(uint64(n))
					return n, rerr // copied still holds a frame returned by this read
				}
				e.rc.Read(e.recvFn)
				if e.copiedLen > 0 {
					e.c.copied.Add(1)
				}
			}
			hdr := 0
			if e.vnet {
				hdr = vnetHdrLen
			}
			if e.copiedLen-hdr != length {
				e.c.droppedTruncated.Add(1) // the socket kept no copy (receive buffer full)
				break
			}
			frame, vnet = e.copied[hdr:e.copiedLen:e.copiedLen], e.copied[:hdr]
		case snap < length || mac+snap > len(sl):
			e.c.droppedTruncated.Add(1)
		default:
			frame = sl[mac : mac+snap : mac+snap]
			if e.vnet && mac >= vnetHdrLen {
				vnet = sl[mac-vnetHdrLen : mac]
			}
		}
		if frame != nil {
			gsoSize := 0
			if len(vnet) == vnetHdrLen {
				gsoSize = e.gsoSize(vnet)
			}
			switch {
			case gsoSize < 0:
				e.c.droppedGSO.Add(1)
			case gsoSize > 0:
				k, done, err := e.split(frame, gsoSize, bufs[n:], sizes, n, offset, inPlace)
				n += k
				if err != nil && rerr == nil {
					rerr = err
				}
				if !done {
					e.c.framesReceived.Add(uint64(n))
					return n, rerr
				}
			case inPlace:
				bufs[n] = frame
				n++
				if e.copiedLen > 0 {
					e.copyHeld = true
				}
			default:
				m, err := CopyFrame(bufs[n], offset, frame)
				if err != nil {
					e.c.droppedShortBuffer.Add(1)
					if rerr == nil {
						rerr = err
					}
					break
				}
				sizes[n] = m
				n++
			}
		}
		e.doneSlot(inPlace)
	}
	e.c.framesReceived.Add(uint64(n))
	return n, rerr
}

// doneSlot moves past slot cur, handing it back to the kernel now, or
// (inPlace: its frame is still in use) at the next read.
func (e *PacketEndpoint) doneSlot(inPlace bool) {
	if inPlace {
		e.held++
	} else {
		atomic.StoreUint32(e.slotStatus(e.cur), unix.TP_STATUS_KERNEL)
	}
	e.cur = (e.cur + 1) % e.slotNr
	e.segNext, e.copiedLen = 0, 0
}

func tpacketAlign(n int) int {
	return (n + unix.TPACKET_ALIGNMENT - 1) &^ (unix.TPACKET_ALIGNMENT - 1)
}

// Write sends each bufs[i][offset:] as one frame with sendmmsg. Frames
// longer than MaxFrameLen(MTU()) or empty, and frames the kernel refuses
// (for example ENOBUFS from a full device queue), are dropped and counted.
// See Endpoint.
func (e *PacketEndpoint) Write(bufs [][]byte, offset int) (int, error) {
	if e.closed.Load() {
		return 0, net.ErrClosed
	}
	e.writeMu.Lock()
	defer e.writeMu.Unlock()
	done := 0
	for done < len(bufs) {
		// Gather up to a batch of sendable frames.
		k := 0
		end := done
		for end < len(bufs) && k < e.batch {
			b := bufs[end]
			if offset < 0 || offset > len(b) {
				break
			}
			f := b[offset:]
			end++
			if len(f) == 0 || len(f) > MaxFrameLen(e.mtu) {
				e.c.droppedOversize.Add(1)
				continue
			}
			e.setMessage(k, appendIovec(e.messageIovecs(k), f))
			k++
		}
		err := e.sendmmsg(k)
		clear(e.iovs[:k*packetIovecs]) // keep no reference to the caller's buffers
		if err != nil {
			return done, err
		}
		done = end
		if end < len(bufs) && (offset < 0 || offset > len(bufs[end])) {
			return done, fmt.Errorf("netio: packet: write offset %d outside buffer %d of length %d", offset, end, len(bufs[end]))
		}
	}
	return done, nil
}

// packetSend is sendmmsg's closure and its arguments and results, made
// once: a closure handed to RawConn.Write escapes, and made per call it would
// allocate. writeMu guards it.
type packetSend struct {
	from, count int
	n           int
	errno       syscall.Errno
	fn          func(fd uintptr) bool
}

func newPacketSend(e *PacketEndpoint) *packetSend {
	s := &packetSend{}
	s.fn = func(fd uintptr) bool {
		r, _, en := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&e.hdrs[s.from])), uintptr(s.count), 0, 0, 0)
		s.n, s.errno = int(r), en
		return en != unix.EAGAIN
	}
	return s
}

// WriteVectors sends each frame from its pieces, gathered by the kernel
// (sendmmsg with one iovec per piece): nothing is copied. Frames with more
// than MaxWritePieces pieces, longer than MaxFrameLen(MTU()) or empty are
// dropped and counted. See VectorWriter.
func (e *PacketEndpoint) WriteVectors(frames [][][]byte) (int, error) {
	if e.closed.Load() {
		return 0, net.ErrClosed
	}
	e.writeMu.Lock()
	defer e.writeMu.Unlock()
	done := 0
	for done < len(frames) {
		k := 0
		end := done
		for end < len(frames) && k < e.batch {
			f := frames[end]
			end++
			n := 0
			for _, p := range f {
				n += len(p)
			}
			if len(f) > MaxWritePieces || n == 0 || n > MaxFrameLen(e.mtu) {
				e.c.droppedOversize.Add(1)
				continue
			}
			iov := e.messageIovecs(k)
			for _, p := range f {
				iov = appendIovec(iov, p)
			}
			e.setMessage(k, iov)
			k++
		}
		err := e.sendmmsg(k)
		clear(e.iovs[:k*packetIovecs]) // keep no reference to the caller's buffers
		if err != nil {
			return done, err
		}
		done = end
	}
	return done, nil
}

// packetIovecs is the iovec room per message: the virtio_net_hdr and up to
// MaxWritePieces pieces.
const packetIovecs = MaxWritePieces + 1

// messageIovecs returns the empty iovec list of message k, with the all-zero
// virtio_net_hdr (no offload asked for) first when the socket expects one.
func (e *PacketEndpoint) messageIovecs(k int) []unix.Iovec {
	iov := e.iovs[k*packetIovecs : k*packetIovecs : (k+1)*packetIovecs]
	if e.vnet {
		iov = appendIovec(iov, e.vnetHdr[:])
	}
	return iov
}

// appendIovec appends an iovec for p unless p is empty.
func appendIovec(iov []unix.Iovec, p []byte) []unix.Iovec {
	if len(p) == 0 {
		return iov
	}
	iov = append(iov, unix.Iovec{Base: &p[0]})
	iov[len(iov)-1].SetLen(len(p))
	return iov
}

// setMessage makes message k of the next sendmmsg send iov.
func (e *PacketEndpoint) setMessage(k int, iov []unix.Iovec) {
	e.hdrs[k] = unix.Mmsghdr{}
	e.hdrs[k].Hdr.Iov = &iov[0]
	e.hdrs[k].Hdr.SetIovlen(len(iov))
}

// sendmmsg sends e.hdrs[:k], dropping (and counting) frames the kernel
// refuses. It returns an error only if the endpoint is closed.
func (e *PacketEndpoint) sendmmsg(k int) error {
	sent := 0
	for sent < k {
		e.send.from, e.send.count = sent, k-sent
		err := e.rc.Write(e.send.fn)
		n, errno := e.send.n, e.send.errno
		if err != nil {
			if e.closed.Load() || errors.Is(err, os.ErrClosed) {
				return net.ErrClosed
			}
			return err
		}
		e.c.sendCalls.Add(1)
		if errno != 0 {
			// The frame at hdrs[sent] was refused.
			err := error(os.NewSyscallError("sendmmsg", errno))
			e.lastSendErr.Store(&err)
			e.c.droppedSendError.Add(1)
			sent++
			continue
		}
		if n <= 0 { // not expected without an error; do not spin
			e.c.droppedSendError.Add(1)
			n = 1
		} else {
			e.c.framesSent.Add(uint64(n))
		}
		sent += n
	}
	return nil
}

// gsoSize reads the virtio_net_hdr before a frame: 0 for a plain frame, the
// datagram payload size for a UDP GSO frame, -1 for any other kind of GSO
// frame (which the filter should never let through).
func (e *PacketEndpoint) gsoSize(vnet []byte) int {
	switch vnet[vnetGSOTypeOff] &^ vnetGSOECN {
	case vnetGSOTypeNone:
		return 0
	case vnetGSOUDPL4:
		if size := int(binary.LittleEndian.Uint16(vnet[vnetGSOSizeOff:])); size > 0 {
			return size
		}
	}
	return -1
}

// split returns the datagrams of the UDP GSO frame, from segNext on, in bufs
// (drain's bufs from index n): copied to bufs[i][offset:] with their sizes in
// sizes[n+i], or, inPlace, built in scratch with bufs[i] pointing at them. done
// is false when bufs or scratch ran out before the last datagram: segNext says
// where the next read goes on.
func (e *PacketEndpoint) split(frame []byte, gsoSize int, bufs [][]byte, sizes []int, n, offset int, inPlace bool) (k int, done bool, err error) {
	g, perr := parseUDPGSOFrame(frame, gsoSize)
	if perr != nil {
		e.c.droppedGSO.Add(1)
		return 0, true, nil
	}
	if e.segNext == 0 {
		e.c.gsoFrames.Add(1)
	}
	for ; e.segNext < g.count; e.segNext++ {
		if k == len(bufs) {
			return k, false, err
		}
		l := g.segLen(frame, e.segNext)
		if inPlace {
			if e.scratchUsed+l > len(e.scratch) {
				// Only after earlier frames of this read: scratch holds
				// two GSO frames' datagrams.
				return k, false, err
			}
			dst := e.scratch[e.scratchUsed : e.scratchUsed+l : e.scratchUsed+l]
			e.scratchUsed += l
			g.segment(dst, frame, e.segNext)
			bufs[k] = dst
		} else {
			b := bufs[k]
			if offset < 0 || offset > len(b) || len(b)-offset < l {
				e.c.droppedShortBuffer.Add(1)
				if err == nil {
					err = shortBufferError(l, max(0, len(b)-offset))
				}
				continue
			}
			sizes[n+k] = g.segment(b[offset:], frame, e.segNext)
		}
		k++
		e.c.gsoSegments.Add(1)
	}
	return k, true, err
}
