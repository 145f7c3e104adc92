package ibtransport

import (
	"fmt"
)

// SGE is a scatter/gather element (struct ibv_sge): Length bytes at address Addr of
// the memory region whose local key is LKey.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// AddressHandle is the address of a remote port (ibv_ah_attr with a GRH): what the
// device layer needs to put a packet on the wire to it. The engine does not
// interpret it; it hands it back with each output packet. Do not modify an
// AddressHandle while work requests or QPs use it.
type AddressHandle struct {
	// DGID is the destination GID (an IPv6 address, or an IPv4-mapped one for
	// RoCEv2 over IPv4).
	DGID [16]byte
	// SGIDIndex selects the source GID in the device's GID table.
	SGIDIndex uint8
	// HopLimit is the IPv6 hop limit or IPv4 TTL.
	HopLimit uint8
	// TrafficClass is the IPv6 traffic class or IPv4 TOS.
	TrafficClass uint8
	// FlowLabel is the IPv6 flow label.
	FlowLabel uint32
	// SL is the service level.
	SL uint8
	// Opaque is the device layer's own value (a resolved MAC, a netip.AddrPort...).
	Opaque any
}

// FlushInfo describes a FLUSH work request (IBTA Vol1 Annex A19, Memory Placement
// Extensions): the range [RemoteAddr, RemoteAddr+Len) of the SendWR's RKey.
type FlushInfo struct {
	// Len is the length of the range.
	Len uint32
	// Type is the placement type: 1 global visibility, 2 persistence (FETH).
	Type uint8
	// Level is the selectivity level: 0 the range, 1 the whole region (FETH).
	Level uint8
}

// RegMRInfo describes a WRRegMR work request: map Buf into the fast-register region
// MR at address Addr with rights Access, and set the key byte of its keys to Key.
type RegMRInfo struct {
	// MR is a region from PD.AllocMR, currently invalid.
	MR *MR
	// Buf is the memory to map; at most the region's maximum length.
	Buf []byte
	// Addr is the I/O virtual address of Buf[0]. Zero picks an address from the
	// Context's address space (or 0 with AccessZeroBased).
	Addr uint64
	// Access is the region's new rights.
	Access Access
	// Key is the new low byte of the region's L_Key and R_Key.
	Key uint8
}

// MWBindInfo describes binding a memory window to part of a memory region
// (struct ibv_mw_bind_info).
type MWBindInfo struct {
	// MW is the window.
	MW *MW
	// RKey is the window's R_Key after the bind: its index bits (all but the low
	// byte) must be the window's. QP.BindMW fills it in for type 1 windows.
	RKey uint32
	// MR is the region; it needs AccessMWBind. Nil (with Length 0) unbinds a type 1
	// window.
	MR *MR
	// Addr and Length give the window's range, inside the region.
	Addr   uint64
	Length uint64
	// Access is the window's remote rights (RemoteRead, RemoteWrite, RemoteAtomic).
	Access Access
}

// SendWR is a send work request (struct ibv_send_wr).
type SendWR struct {
	// WRID is returned in the completion.
	WRID uint64
	// Opcode is the operation.
	Opcode WROpcode
	// SGL is the local data: the message for sends and writes, the destination of
	// READ data, the 8-byte destination of an atomic's original value, the 8-byte
	// value of an ATOMIC WRITE.
	SGL []SGE
	// Inline copies the message at post time (IBV_SEND_INLINE): the source may be
	// reused as soon as PostSend returns. The message is InlineData if it is not
	// nil, else the bytes of the SGL (which must then name registered memory).
	Inline bool
	// InlineData is the message of an Inline WR; it needs no memory region.
	InlineData []byte
	// Signaled asks for a completion on success (IBV_SEND_SIGNALED); errors always
	// complete. A QP created with SignalAll signals every WR.
	Signaled bool
	// Fence waits for every earlier WR to complete before this one starts
	// (IBV_SEND_FENCE; the spec only requires earlier READs and atomics).
	Fence bool
	// Solicited sets the SE bit on the message's last packet (IBV_SEND_SOLICITED).
	Solicited bool
	// Imm is the immediate data (host order) of *WithImm opcodes.
	Imm uint32
	// InvalidateRKey is the key a SEND with invalidate invalidates at the
	// responder, or the key a LOCAL_INV invalidates locally.
	InvalidateRKey uint32
	// RemoteAddr and RKey address the remote memory of RDMA, atomic and FLUSH
	// operations.
	RemoteAddr uint64
	RKey       uint32
	// CompareAdd is the compare value of CMP_AND_SWP or the addend of FETCH_AND_ADD.
	CompareAdd uint64
	// Swap is the swap value of CMP_AND_SWP.
	Swap uint64
	// AH, RemoteQPN and RemoteQKey address a UD send. A RemoteQKey with the high
	// bit set means "use the QP's own Q_Key" (IBTA 10.2.5).
	AH         *AddressHandle
	RemoteQPN  uint32
	RemoteQKey uint32
	// Flush describes a WRFlush.
	Flush FlushInfo
	// RegMR describes a WRRegMR.
	RegMR RegMRInfo
	// Bind describes a WRBindMW.
	Bind MWBindInfo
}

// RecvWR is a receive work request (struct ibv_recv_wr).
type RecvWR struct {
	// WRID is returned in the completion.
	WRID uint64
	// SGL is where the message goes; for UD the first 40 bytes receive the GRH.
	SGL []SGE
}

// PostError reports the work request that a post refused, like ibv_post_send's
// bad_wr. The WRs before it were posted; it and the ones after were not.
type PostError struct {
	// Index is the refused WR's position in the call's arguments.
	Index int
	// WRID is its WRID.
	WRID uint64
	// Err says why; it wraps one of the package's sentinel errors.
	Err error
}

// Error reads "post send: wr 2 (id 77): ...".
func (e *PostError) Error() string {
	return fmt.Sprintf("wr %d (id %d): %v", e.Index, e.WRID, e.Err)
}

// Unwrap returns the reason.
func (e *PostError) Unwrap() error { return e.Err }

// sglLength sums an SGL's lengths.
func sglLength(sgl []SGE) uint64 {
	var n uint64
	for _, s := range sgl {
		n += uint64(s.Length)
	}
	return n
}

// rcOpcodes[o] reports whether o is a send opcode (an RC QP supports them
// all): a table, as the lookup in wrOpcodeNames per posted WR was 2% of
// softrdma bench's CPU in its 64 B WRITE rate row.
var rcOpcodes = func() (t [256]bool) {
	for o := range wrOpcodeNames {
		t[o] = true
	}
	return t
}()

// opcodeAllowed reports whether a QP type supports a send opcode (IBTA Table 40 and
// rxe_opcode.c's wr masks).
func opcodeAllowed(t QPType, o WROpcode) bool {
	switch t {
	case QPTypeRC:
		return rcOpcodes[o]
	case QPTypeUC:
		switch o {
		case WRSend, WRSendWithImm, WRRDMAWrite, WRRDMAWriteWithImm, WRLocalInv, WRBindMW, WRRegMR:
			return true
		}
	case QPTypeUD, QPTypeGSI:
		return o == WRSend || o == WRSendWithImm
	}
	return false
}

// checkSendWR validates a send WR against the QP the way ibv_post_send does: what a
// device refuses synchronously. Errors found while executing (bad L_Key, bounds)
// complete the WR with an error status instead.
func (qp *QP) checkSendWR(wr *SendWR) error {
	if !opcodeAllowed(qp.typ, wr.Opcode) || (wr.Opcode == WRRDMAReadWithInv && qp.wire == nil) {
		return fmt.Errorf("opcode %s not supported on %s QP: %w", wr.Opcode, qp.typ, ErrInvalidArgument)
	}
	if len(wr.SGL) > qp.cap.MaxSendSGE {
		return tooLargeError("SGL length", "MaxSendSGE", uint64(len(wr.SGL)), uint64(qp.cap.MaxSendSGE))
	}
	n := sglLength(wr.SGL)
	if wr.Inline && wr.InlineData != nil {
		n = uint64(len(wr.InlineData))
	}
	if wr.Inline {
		if n > uint64(qp.cap.MaxInlineData) {
			return tooLargeError("inline data", "MaxInlineData", n, uint64(qp.cap.MaxInlineData))
		}
		switch wr.Opcode {
		case WRSend, WRSendWithImm, WRSendWithInv, WRRDMAWrite, WRRDMAWriteWithImm, WRAtomicWrite:
		default:
			return fmt.Errorf("inline %s: %w", wr.Opcode, ErrInvalidArgument)
		}
	}
	if n > uint64(qp.ctx.cfg.MaxMsgSize) {
		return tooLargeError("message length", "MaxMsgSize", n, uint64(qp.ctx.cfg.MaxMsgSize))
	}
	switch wr.Opcode {
	case WRAtomicCmpAndSwp, WRAtomicFetchAdd:
		if n < 8 {
			return fmt.Errorf("%s needs an 8-byte result buffer, SGL has %d: %w", wr.Opcode, n, ErrInvalidArgument)
		}
	case WRAtomicWrite:
		if n != 8 {
			return fmt.Errorf("ATOMIC_WRITE carries 8 bytes, SGL has %d: %w", n, ErrInvalidArgument)
		}
	case WRRDMARead, WRRDMAReadWithInv:
		if n > 1<<31 {
			return fmt.Errorf("READ length %d: %w", n, ErrInvalidArgument)
		}
	case WRRegMR:
		if wr.RegMR.MR == nil {
			return fmt.Errorf("REG_MR without MR: %w", ErrInvalidArgument)
		}
	case WRBindMW:
		if wr.Bind.MW == nil {
			return fmt.Errorf("BIND_MW without MW: %w", ErrInvalidArgument)
		}
	case WRFlush:
		if wr.Flush.Type == 0 || wr.Flush.Type > MaxFlushPlacementType || wr.Flush.Level > MaxFlushSelectivityLevel {
			return fmt.Errorf("FLUSH type %d level %d: %w", wr.Flush.Type, wr.Flush.Level, ErrInvalidArgument)
		}
	}
	if qp.typ.datagram() && wr.AH == nil {
		return fmt.Errorf("UD send without AH: %w", ErrInvalidArgument)
	}
	return nil
}

// checkRecvWR validates a receive WR against a maximum SGL length, the
// attribute named limit.
func checkRecvWR(wr *RecvWR, limit string, maxSGE int) error {
	if len(wr.SGL) > maxSGE {
		return tooLargeError("SGL length", limit, uint64(len(wr.SGL)), uint64(maxSGE))
	}
	return nil
}
