package netio

import (
	"errors"
	"fmt"
	"net/netip"
)

// EthernetHeaderLen is the length of an untagged Ethernet II header
// (destination MAC, source MAC, Ethertype). Frames carry no FCS.
const EthernetHeaderLen = 14

// DefaultMTU is the interface MTU used when none is given: the largest
// Ethernet payload, as Linux reports it for an ordinary NIC.
const DefaultMTU = 1500

// MaxFrameLen is the largest frame, in bytes, that an endpoint with the given
// interface MTU carries: the MTU plus the Ethernet header.
func MaxFrameLen(mtu int) int { return mtu + EthernetHeaderLen }

// Endpoint moves link-layer (Ethernet II) frames in batches, in the shape of
// wireguard-go's tun.Device. A frame starts with the destination MAC and has
// no FCS.
//
// Implementations must be safe for one goroutine calling Read while another
// calls Write; Close may be called from any goroutine at any time.
type Endpoint interface {
	// Read reads up to len(bufs) frames. Frame i is copied into
	// bufs[i][offset:] and its length stored in sizes[i]; the bytes before
	// offset are left alone, so the caller can keep headroom there. Read
	// blocks until at least one frame is available and returns the number of
	// frames read. It may return n > 0 together with an error: the caller must
	// process bufs[:n] before looking at the error. A frame that does not fit
	// in bufs[i][offset:] is dropped and reported with an error wrapping
	// ErrShortBuffer. After Close, Read must return net.ErrClosed.
	// len(sizes) must be at least len(bufs).
	Read(bufs [][]byte, sizes []int, offset int) (n int, err error)

	// Write writes each bufs[i][offset:] as one frame and returns how many
	// frames it consumed. The implementation may use the headroom
	// bufs[i][:offset] as scratch space but must not modify the frames
	// themselves. Write never keeps a reference to
	// bufs after it returns, so the caller may reuse them at once. Like a wire,
	// an endpoint may lose frames it consumed (a full queue, simulated loss,
	// a frame longer than the link carries): such losses are counted by the
	// implementation, not returned as errors. An error means bufs[n:] were not
	// written. After Close, Write must return net.ErrClosed.
	Write(bufs [][]byte, offset int) (int, error)

	// BatchSize returns the preferred (and largest useful) number of frames
	// per Read or Write call.
	BatchSize() int

	// MTU returns the interface MTU: the largest Ethernet payload, excluding
	// the EthernetHeaderLen-byte header, as with Linux interfaces.
	MTU() int

	// Close closes the endpoint. Blocked and later Reads and Writes return
	// net.ErrClosed. Close is idempotent.
	Close() error
}

// Link is what every endpoint offers, whether it carries Ethernet frames
// (Endpoint) or UDP datagrams (UDPEndpoint: DatagramReader and
// DatagramWriter): a RoCE device takes either (roce.DeviceConfig.Endpoint).
// The methods are Endpoint's.
type Link interface {
	BatchSize() int
	MTU() int
	Close() error
}

// Poller is implemented by endpoints that can be read without blocking, so a
// deterministic driver can step a device without goroutines.
type Poller interface {
	// TryRead is Read without blocking: it returns 0, nil when no frame is
	// waiting. Otherwise it follows the Read contract of Endpoint.
	TryRead(bufs [][]byte, sizes []int, offset int) (int, error)
}

// IPv4IDPolicy is implemented by endpoints that cannot carry the IPv4
// Identification field end to end, as an ordinary UDP socket cannot. The
// RoCE layer needs to know, because the RoCEv2 ICRC covers that field.
type IPv4IDPolicy interface {
	// IPv4IDZero reports whether Write requires every IPv4 frame to carry
	// Identification 0 with the DF flag set (and no other flag or fragment
	// offset); frames that do not are dropped and counted.
	IPv4IDZero() bool

	// UnknownIPv4ID reports whether the IPv4 Identification of frames
	// returned by Read is unknown and written as 0 (with DF assumed set).
	// The RoCE layer then recovers it from the ICRC, which is linear in
	// those 16 bits.
	UnknownIPv4ID() bool
}

// Datagram is a UDP datagram received by a DatagramReader, in the
// endpoint's own buffer.
type Datagram struct {
	// Payload is the UDP payload. It stays valid until the next read from
	// the endpoint.
	Payload []byte
	// Src and Dst are the datagram's source and destination addresses.
	Src, Dst netip.AddrPort
	// TOS is the IPv4 TOS or IPv6 traffic class byte, TTL the IPv4 TTL or
	// IPv6 hop limit.
	TOS, TTL uint8
	// Stamp is when the kernel received the datagram, in nanoseconds since
	// the Unix epoch (SO_TIMESTAMPNS), if the endpoint was asked for
	// receive timestamps (RxTimestamper: a capture asks); 0 otherwise.
	Stamp int64
}

// RxTimestamper is implemented by endpoints that can give each received
// datagram the kernel's receive time (Datagram.Stamp): the UDP backend,
// with SO_TIMESTAMPNS. A capture turns it on, so that frames read in one
// batch keep their own times; without a capture nothing asks for them and
// nothing is spent on them.
type RxTimestamper interface {
	// EnableRxTimestamps asks the kernel for each datagram's receive time
	// from now on.
	EnableRxTimestamps() error
}

// DatagramReader is implemented by endpoints that receive UDP datagrams
// (the UDP socket backend) and hand them over where the kernel put them,
// with their addresses beside them, instead of behind synthesised Ethernet,
// IP and UDP headers (which UDPFrames writes for users of frames). Only one
// goroutine may read at a time.
type DatagramReader interface {
	// ReadDatagrams blocks until at least one datagram is available and
	// returns up to len(d) of them. Their payloads stay valid until the next
	// read. After Close it returns net.ErrClosed.
	ReadDatagrams(d []Datagram) (int, error)
	// TryReadDatagrams is ReadDatagrams without blocking: it returns 0, nil
	// when nothing is waiting.
	TryReadDatagrams(d []Datagram) (int, error)
}

// ReadLender is implemented by DatagramReader endpoints that can hand their
// receiving to a thread outside Go (the UDP backend opened with
// SharedReads): that thread waits on the socket and reads with
// TryReadDatagrams. See UDPEndpoint.LendReads.
type ReadLender interface {
	// LendReads lends the reads while active reports true and returns the
	// socket to wait on; ok is false if the endpoint does not share them.
	LendReads(active func() bool) (sock int, ok bool)
}

// FrameReader is implemented by endpoints that can hand over received
// frames where they lie (the AF_PACKET ring) instead of copying them into
// the caller's buffers as Read does. Reads of either kind may be mixed; only
// one goroutine may read at a time.
type FrameReader interface {
	// ReadFrames blocks until at least one frame is available and sets
	// frames[:n] to the frames, which stay valid until the next read. After
	// Close it returns net.ErrClosed.
	ReadFrames(frames [][]byte) (n int, err error)
	// TryReadFrames is ReadFrames without blocking: it returns 0, nil when
	// nothing is waiting.
	TryReadFrames(frames [][]byte) (n int, err error)
}

// MaxWritePieces is the most pieces a frame given to a VectorWriter may
// have.
const MaxWritePieces = 8

// VectorWriter is implemented by endpoints that send a frame given in
// pieces, gathered by the kernel (sendmsg's iovecs), so that a payload need
// not be copied next to its headers first.
type VectorWriter interface {
	// WriteVectors writes each frames[i] — the concatenation of its at most
	// MaxWritePieces pieces — as one frame, and returns how many frames it
	// consumed, as Write does with offset 0. The first piece must hold every
	// header the endpoint reads (for a UDP endpoint: Ethernet, IP and UDP);
	// a frame that does not is dropped and counted. Like Write, WriteVectors
	// keeps no reference to the frames after it returns.
	WriteVectors(frames [][][]byte) (int, error)
}

// OutDatagram is a UDP datagram for a DatagramWriter to send: its payload
// and the fields of the IP and UDP headers the sender chooses. No header is
// written or parsed on the way; the kernel writes the real ones.
type OutDatagram struct {
	// Payload is the UDP payload: the concatenation of at most
	// MaxWritePieces pieces, gathered by the kernel where they lie.
	Payload [][]byte
	// Src is the IP source address: the zero Addr means the endpoint's.
	// An endpoint bound to an address sends only from it; one bound to
	// the unspecified address sends from any local address.
	Src netip.Addr
	// SrcPort is the UDP source port; Dst the destination address and port.
	SrcPort uint16
	Dst     netip.AddrPort
	// TOS is the IPv4 TOS or IPv6 traffic class; TTL the IPv4 TTL or IPv6
	// hop limit, 0 for the kernel's default.
	TOS, TTL uint8
	// IPv4ID is the IPv4 Identification the sender means the datagram to
	// carry (a RoCE ICRC covers it); ignored for IPv6. See DatagramWriter.
	IPv4ID uint16
}

// DatagramWriter is implemented by endpoints that send UDP datagrams (the
// UDP socket backend), in the shape of wireguard-go's conn.Bind: payload
// pieces plus addresses, ports, TOS and TTL, instead of frames whose
// headers the endpoint would parse back.
//
// IPv4 Identification: a UDP socket sends ID 0 (see IPv4IDPolicy), except
// that the segments of one UDP GSO send carry 0, 1, 2, ... A datagram with
// IPv4ID 0 leaves with ID 0. One with IPv4ID j > 0 continues a run: it
// leaves as segment j of the GSO send that the datagram j places before it
// in the same call (IPv4ID 0) begins, the datagrams between having IPv4IDs
// 1 ... j-1. A run is consecutive in the slice, has one Src, SrcPort, Dst,
// TOS and TTL, payloads of one length but the last (which may be shorter)
// and at most IPv4Run's datagrams and bytes. A datagram that breaks these
// rules is dropped and counted, not sent with another ID; so are the IDs
// above 0 of a run the kernel refuses to segment (IPv4Run then reports 1).
type DatagramWriter interface {
	// WriteDatagrams sends each d[i] as one UDP datagram and returns how
	// many it consumed; like Write it may lose (and count) datagrams, and
	// an error means d[n:] were not sent. It keeps no reference to the
	// payloads after it returns. After Close it returns net.ErrClosed.
	WriteDatagrams(d []OutDatagram) (int, error)
	// IPv4Run returns the most datagrams and payload bytes of a run of
	// IPv4 IDs (one UDP GSO send): datagrams is 1 when the endpoint does
	// not segment IPv4 (then every IPv4 datagram must have IPv4ID 0).
	IPv4Run() (datagrams, bytes int)
}

// ErrShortBuffer reports a frame longer than the buffer offered to Read; the
// frame has been dropped.
var ErrShortBuffer = errors.New("netio: frame longer than read buffer")

// ErrNotPollable reports TryRead on a wrapper whose underlying endpoint does
// not implement Poller.
var ErrNotPollable = errors.New("netio: endpoint does not implement Poller")

// shortBufferError returns an error wrapping ErrShortBuffer for a frame of
// frameLen bytes offered room bufLen.
func shortBufferError(frameLen, bufLen int) error {
	return fmt.Errorf("%w: frame length %d > buffer space %d", ErrShortBuffer, frameLen, bufLen)
}

// CopyFrame copies frame into buf[offset:] and returns the number of bytes
// copied. If the frame does not fit, it copies nothing and returns an error
// wrapping ErrShortBuffer. Endpoint implementations use it to honour the
// Read contract.
func CopyFrame(buf []byte, offset int, frame []byte) (int, error) {
	room := len(buf) - offset
	if offset < 0 || room < 0 {
		room = 0
	}
	if len(frame) > room {
		return 0, shortBufferError(len(frame), room)
	}
	return copy(buf[offset:], frame), nil
}
