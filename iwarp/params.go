package iwarp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
)

// CRCPolicy says how a side of a connection treats MPA CRCs (RFC 5044 §7.1: CRC32c
// is used on the connection, in both directions, if either start frame has C set).
type CRCPolicy uint8

// CRC policies.
const (
	// CRCAccept does not ask for CRCs but uses them if the peer asks (Linux siw's
	// default).
	CRCAccept CRCPolicy = iota
	// CRCRequest asks for CRCs (sets C).
	CRCRequest
	// CRCRequire asks for CRCs and rejects a peer whose start frame does not set C
	// (siw built with mpa_crc_required).
	CRCRequire
)

// String returns "accept", "request" or "require".
func (p CRCPolicy) String() string {
	switch p {
	case CRCAccept:
		return "accept"
	case CRCRequest:
		return "request"
	case CRCRequire:
		return "require"
	}
	return fmt.Sprintf("CRCPolicy(%d)", uint8(p))
}

// MarkerPolicy says how a side treats MPA markers (RFC 5044 §7.1: M in a start frame
// asks the other side to insert markers in what it sends; the two directions are
// independent).
type MarkerPolicy uint8

// Marker policies.
const (
	// MarkersAccept does not ask to receive markers, and sends them if the peer
	// asks.
	MarkersAccept MarkerPolicy = iota
	// MarkersRequest asks the peer to send markers (sets M).
	MarkersRequest
	// MarkersRefuse rejects a peer that asks for markers, as Linux siw does.
	MarkersRefuse
)

// String returns "accept", "request" or "refuse".
func (p MarkerPolicy) String() string {
	switch p {
	case MarkersAccept:
		return "accept"
	case MarkersRequest:
		return "request"
	case MarkersRefuse:
		return "refuse"
	}
	return fmt.Sprintf("MarkerPolicy(%d)", uint8(p))
}

// RTRFlags is a set of RFC 6581 ready-to-receive message types: the ones an
// initiator can send, the ones a responder accepts, or the one negotiated.
type RTRFlags uint8

// RTR message types (RFC 6581 §9.1, the Z, W and R bits).
const (
	// RTRZeroLength is a zero-length FPDU (Z). RFC 6581 leaves its DDP content to
	// the implementation; softrdma sends a zero-length Send on queue 0 (MSN 1) that
	// the responder consumes without a receive WQE: the shape the brief reads
	// "zero-length SEND" as. Interop with a peer that sends something else for Z is
	// unverified.
	RTRZeroLength RTRFlags = 1 << iota
	// RTRWrite is a zero-length RDMA Write (STag 0, TO 0) (W).
	RTRWrite
	// RTRRead is a zero-length RDMA Read Request, answered by a zero-length Read
	// Response (R).
	RTRRead

	rtrAll = RTRZeroLength | RTRWrite | RTRRead
)

// String lists the types, e.g. "write|read", or "none".
func (f RTRFlags) String() string {
	if f == 0 {
		return "none"
	}
	var s []string
	for _, x := range []struct {
		f RTRFlags
		n string
	}{{RTRZeroLength, "zero-length"}, {RTRWrite, "write"}, {RTRRead, "read"}} {
		if f&x.f != 0 {
			s = append(s, x.n)
		}
	}
	return strings.Join(s, "|")
}

// StreamObserver sees every octet of one TCP connection: Sent with what is about to
// be written (in order, from one goroutine), Received with what was read (in order,
// from another goroutine), MPA start frames included. It must not keep or modify
// the slices. It is the hook for captures (pcap) and for decoding a live
// connection with StreamDecoder.
type StreamObserver interface {
	Sent(b []byte)
	Received(b []byte)
}

// Default limits.
const (
	// DefaultIRDORD is the inbound and outbound RDMA Read queue depth when
	// ConnParams leaves them 0 (capped by the Context's MaxRdAtomic).
	DefaultIRDORD = 16
	// DefaultHandshakeTimeout bounds the MPA exchange when ConnParams leaves it 0.
	DefaultHandshakeTimeout = 10 * time.Second
	// DefaultLinger bounds an orderly close: how long the connection waits for the
	// peer's FIN (and for a Terminate to be written) before it closes anyway.
	DefaultLinger = 2 * time.Second
)

// ConnParams configure one side of an iWARP connection. The zero value is Linux
// siw's default: MPA revision 2, no CRC unless the peer asks, no markers unless the
// peer asks, no peer-to-peer RTR, and IRD = ORD = DefaultIRDORD.
type ConnParams struct {
	// Revision is the highest MPA revision spoken: 1 (RFC 5044) or 2 (RFC 6581,
	// the default). A responder answers with the lower of its own and the
	// request's; an initiator accepts a lower one in the reply.
	Revision uint8
	// CRC and Markers are the MPA policies.
	CRC     CRCPolicy
	Markers MarkerPolicy
	// PeerToPeer asks for RFC 6581 peer-to-peer mode (revision 2): the initiator
	// sends an RTR message first and the responder sends nothing before it. A
	// responder always honours a request for it; with PeerToPeer set it rejects
	// a request without it.
	PeerToPeer bool
	// RTR is the set of RTR types an initiator offers, or a responder accepts
	// (0: all three). A responder picks Write, then Read, then zero-length.
	RTR RTRFlags
	// IRD is the number of incoming RDMA Read (and RFC 7306 atomic) requests
	// accepted outstanding; ORD the number this side issues outstanding (0:
	// DefaultIRDORD; at most the Context's MaxRdAtomic and 0x3fff). With revision
	// 2 they are exchanged and ORD is lowered to the peer's IRD. A negative
	// value means none (0): rdma_cm's responder resources or initiator depth
	// of 0, which siw and librdmacm put in the IRD/ORD words of a connection
	// that does no RDMA Read (perftest's ib_write_bw and ib_send_bw -R).
	IRD, ORD int
	// PrivateData is sent in the start frame: at most 512 octets for revision 1,
	// 508 for revision 2 (whose IRD/ORD words take 4).
	PrivateData []byte
	// Access is the remote access the QP grants when it is moved from RESET to INIT
	// (default AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic).
	Access ib.Access
	// NoExtensions stops this side offering the RFC 7306 extensions (atomics and
	// immediate data). They are used only when both start frames carry softrdma's
	// extension flag, MPAFlagSoftRDMAExtensions, which no other implementation
	// sets (Linux siw has neither extension).
	NoExtensions bool
	// MaxULPDU caps the ULPDU of the FPDUs this side sends (0: the MULPDU RFC 5044
	// derives from the TCP MSS, so that each FPDU fits one segment, or, toward a
	// softrdma peer that accepts them, FPDUs of up to 64 KiB: see
	// MPAFlagSoftRDMALargeFPDU).
	MaxULPDU int
	// SegmentFPDUs keeps FPDUs sized to one TCP segment even toward a softrdma
	// peer that accepts larger ones (as RFC 5044 §8 recommends and siw does).
	SegmentFPDUs bool
	// MaxRecvULPDU is the longest ULPDU accepted from the peer (0: 65535, any); a
	// longer FPDU is a framing error answered by a Terminate.
	MaxRecvULPDU int
	// HandshakeTimeout bounds the MPA exchange (0: DefaultHandshakeTimeout).
	HandshakeTimeout time.Duration
	// Linger bounds an orderly close (0: DefaultLinger).
	Linger time.Duration
	// Observe, if set, is called once per TCP connection for an observer of its
	// octets.
	Observe func(local, remote net.Addr) StreamObserver
	// LocalAddr, if valid, is the address Dial's TCP connection leaves from
	// (port chosen by the kernel): the device's, as siw_connect binds the
	// cm_id's source address; without it the kernel picks the route's source
	// (127.0.0.1 for any 127/8 destination).
	LocalAddr netip.Addr
	// Dial, if set, makes Dial's TCP connection in place of
	// d.DialContext(ctx, "tcp", addr) (d has LocalAddr): a connection made
	// in another network namespace than the caller's, say, as softrdma bench
	// connects through rdma_cm, whose iWARP Connect dials in a goroutine of
	// its own, from one namespace to another.
	Dial func(ctx context.Context, d *net.Dialer, addr string) (net.Conn, error)
}

func (p *ConnParams) revision() uint8 {
	if p.Revision == 0 || p.Revision > MPARevision2 {
		return MPARevision2
	}
	return p.Revision
}

func (p *ConnParams) rtrSet() RTRFlags {
	if p.RTR&rtrAll == 0 {
		return rtrAll
	}
	return p.RTR & rtrAll
}

func depth(v, limit int) int {
	if v < 0 {
		return 0
	}
	if v == 0 {
		v = DefaultIRDORD
	}
	return min(v, limit, MPAv2IRDORDMask)
}

func (p *ConnParams) handshakeTimeout() time.Duration {
	if p.HandshakeTimeout <= 0 {
		return DefaultHandshakeTimeout
	}
	return p.HandshakeTimeout
}

func (p *ConnParams) linger() time.Duration {
	if p.Linger <= 0 {
		return DefaultLinger
	}
	return p.Linger
}

func (p *ConnParams) access() ib.Access {
	if p.Access == 0 {
		return ib.AccessRemoteWrite | ib.AccessRemoteRead | ib.AccessRemoteAtomic
	}
	return p.Access
}

// largeFPDUFlag is MPAFlagSoftRDMALargeFPDU if this side accepts FPDUs of any
// length, else 0.
func (p *ConnParams) largeFPDUFlag() uint8 {
	if p.maxRecvULPDU() < MaxULPDULen {
		return 0
	}
	return MPAFlagSoftRDMALargeFPDU
}

func (p *ConnParams) maxRecvULPDU() int {
	if p.MaxRecvULPDU <= 0 || p.MaxRecvULPDU > MaxULPDULen {
		return MaxULPDULen
	}
	return p.MaxRecvULPDU
}

// MPAFlagSoftRDMAExtensions is the reserved MPA flag bit softrdma sets in its start
// frames to offer the RFC 7306 extensions (RFC 7306 leaves their enabling to the
// ULP and MPA has no field for it). Non-standard, like siw's GSO bit; RFC 5044
// §7.1 has receivers ignore reserved bits, so other implementations are
// unaffected.
const MPAFlagSoftRDMAExtensions = 0x01

// MPAFlagSoftRDMAExtensionsAck is the reserved bit a softrdma responder sets in
// its Reply to accept the extensions. It differs from the offer bit because
// Linux siw echoes the Request's reserved bits in its Reply (seen against siw:
// Request flags 0x11, Reply 0x11), so an echoed offer must not read as an
// acceptance.
const MPAFlagSoftRDMAExtensionsAck = 0x02

// MPAFlagSoftRDMALargeFPDU is the reserved bit a softrdma side sets beside its
// extension offer or acknowledgement to say that it accepts FPDUs of any length
// up to 65535 octets (its MaxRecvULPDU is the default). RFC 5044 §8 has a sender
// fit each FPDU in one TCP segment so that a receiver can place it without
// reassembly; a user-space receiver reads a TCP stream, not segments, and one
// 64 KiB FPDU costs it one read where 45 MSS-sized ones cost 45. It counts only
// where the extensions were negotiated: siw echoes a Request's reserved bits,
// so the acknowledgement bit is what proves a softrdma peer.
const MPAFlagSoftRDMALargeFPDU = 0x04

// largeMULPDU is the ULPDU of the FPDUs sent to a peer that accepts large ones:
// the longest whose FPDU needs no pad (2 + 65534 is a multiple of 4).
const largeMULPDU = MaxULPDULen - 1

// Negotiated is what the MPA exchange of a connection settled.
type Negotiated struct {
	// Revision is the MPA revision in use (1 or 2).
	Revision uint8
	// Enhanced says that RFC 6581 IRD/ORD words were exchanged.
	Enhanced bool
	// CRC says that every FPDU carries a CRC32c (both directions).
	CRC bool
	// SendMarkers and RecvMarkers say whether the FPDUs this side sends, or
	// receives, carry markers.
	SendMarkers, RecvMarkers bool
	// PeerToPeer says that RFC 6581 peer-to-peer mode is in use, with RTR.
	PeerToPeer bool
	// RTR is the RTR message type used (0 without peer-to-peer mode).
	RTR RTRFlags
	// IRD is the depth of incoming Read/atomic requests this side accepts; ORD the
	// depth it issues (its own ORD lowered to the peer's IRD).
	IRD, ORD int
	// PeerIRD and PeerORD are the peer's announced values (revision 2 only, else
	// -1).
	PeerIRD, PeerORD int
	// Extensions says that RFC 7306 atomics and immediate data are enabled.
	Extensions bool
	// LargeFPDU says that this side sends FPDUs longer than one TCP segment (the
	// peer offered MPAFlagSoftRDMALargeFPDU, SegmentFPDUs is off, and the peer
	// wants no markers: a marker's 16-bit FPDU pointer cannot reach back across
	// a 64 KiB FPDU, and markers are there to find FPDUs in segments).
	LargeFPDU bool
	// EMSS is the TCP maximum segment size the FPDU size was derived from (0 if
	// the connection is not TCP).
	EMSS int
	// MULPDU is the largest ULPDU this side sends.
	MULPDU int
}

// Errors. Each error of the package wraps one of these (errors.Is), besides the
// *header.Error of the decoders.
var (
	// ErrRejected: the MPA exchange rejected the connection (*RejectError).
	ErrRejected = errors.New("iwarp: connection rejected")
	// ErrTerminated: a Terminate message ended the connection (*TerminateError).
	ErrTerminated = errors.New("iwarp: connection terminated")
	// ErrHandshake: the MPA exchange failed (timeout, garbage, a bad frame).
	ErrHandshake = errors.New("iwarp: MPA handshake failed")
	// ErrPeerClosed: the peer closed the TCP connection in an orderly way.
	ErrPeerClosed = errors.New("iwarp: peer closed the connection")
	// ErrQPError: the QP entered the error state (Modify, a local operation
	// failure), which ends its connection.
	ErrQPError = errors.New("iwarp: the QP entered the error state")
	// ErrConnectionLost: the TCP connection failed or ended inside an FPDU.
	ErrConnectionLost = errors.New("iwarp: connection lost")
	// ErrBadQP: the QP cannot be connected (not external, wrong state, in use).
	ErrBadQP = errors.New("iwarp: QP cannot be connected")
)

// RejectError is a rejected MPA exchange: by the peer (its Reply had R set) or by
// this side (the peer's frame broke this side's policy).
type RejectError struct {
	// ByPeer says that the peer rejected.
	ByPeer bool
	// Reason says why, as this side understands it.
	Reason string
	// PrivateData is the private data of the peer's rejecting Reply (ByPeer).
	PrivateData []byte
}

// Error reads "iwarp: connection rejected by the peer: CRC required" or
// "iwarp: connection rejected: peer asks for markers".
func (e *RejectError) Error() string {
	s := ErrRejected.Error()
	if e.ByPeer {
		s += " by the peer"
	}
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

// Unwrap returns ErrRejected.
func (e *RejectError) Unwrap() error { return ErrRejected }

// TerminateError is a Terminate message that ended a connection: one this side sent
// about the peer's traffic (Local), or one the peer sent.
type TerminateError struct {
	// Local says that this side detected the error and sent the Terminate.
	Local bool
	// Layer, EType and Code are the Terminate's error fields (RFC 5040 §4.8).
	Layer TerminateLayer
	EType uint8
	Code  uint8
	// Err is the error this side found (Local), with field and values.
	Err error
}

// Error reads e.g. "iwarp: sent Terminate (LLP, MPA Error, MPA CRC Error): mpa: CRC
// 0x1234abcd != 0x00000000".
func (e *TerminateError) Error() string {
	dir := "received"
	if e.Local {
		dir = "sent"
	}
	s := fmt.Sprintf("iwarp: %s Terminate (%s, %s, %s)", dir, e.Layer,
		TerminateETypeName(e.Layer, e.EType), TerminateErrorName(e.Layer, e.EType, e.Code))
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns ErrTerminated and the underlying error.
func (e *TerminateError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrTerminated, e.Err}
	}
	return []error{ErrTerminated}
}
