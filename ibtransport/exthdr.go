package ibtransport

import (
	"encoding/binary"
	"strconv"
	"time"
)

// Lengths of the extension transport headers (IBTA Vol1 9.3) in bytes.
const (
	// RDETHLen is the length of the Reliable Datagram Extended Transport Header.
	RDETHLen = 4
	// DETHLen is the length of the Datagram Extended Transport Header.
	DETHLen = 8
	// XRCETHLen is the length of the XRC Extended Transport Header.
	XRCETHLen = 4
	// FETHLen is the length of the FLUSH Extended Transport Header.
	FETHLen = 4
	// RETHLen is the length of the RDMA Extended Transport Header.
	RETHLen = 16
	// AtomicETHLen is the length of the Atomic Extended Transport Header.
	AtomicETHLen = 28
	// AETHLen is the length of the ACK Extended Transport Header.
	AETHLen = 4
	// AtomicAckETHLen is the length of the Atomic Acknowledge Extended Transport Header.
	AtomicAckETHLen = 8
	// ImmDtLen is the length of the Immediate Data Extended Transport Header.
	ImmDtLen = 4
	// IETHLen is the length of the Invalidate Extended Transport Header.
	IETHLen = 4
	// AtomicWriteDataLen is the length of the payload of an ATOMIC WRITE request.
	AtomicWriteDataLen = 8
	// CNPReservedLen is the length of the reserved field after the BTH of a RoCEv2
	// Congestion Notification Packet (IBTA Annex A17.9.3).
	CNPReservedLen = 16
)

// RDETH is the Reliable Datagram Extended Transport Header (IBTA Vol1 9.3.1): one
// reserved byte, then the 24-bit EE context. Only RD packets carry it.
type RDETH []byte

// EEContext returns the 24-bit end-to-end context.
func (h RDETH) EEContext() uint32 { return get24(h[1:]) }

// SetEEContext sets the end-to-end context (low 24 bits) and clears the reserved byte.
func (h RDETH) SetEEContext(v uint32) { h[0] = 0; put24(h[1:], v) }

// DETH is the Datagram Extended Transport Header (IBTA Vol1 9.3.2), carried by UD
// and RD requests:
//
//	+-------------------------------+
//	|             Q_Key             |  bytes 0-3
//	+-------+-----------------------+
//	|  Rsvd |      Source QP        |  bytes 4-7
//	+-------+-----------------------+
type DETH []byte

// DETHFields holds the DETH fields for Encode.
type DETHFields struct {
	// QKey is the queue key.
	QKey uint32
	// SrcQP is the 24-bit source queue pair number.
	SrcQP uint32
}

// QKey returns the queue key.
func (h DETH) QKey() uint32 { return binary.BigEndian.Uint32(h[0:]) }

// SrcQP returns the 24-bit source queue pair number.
func (h DETH) SrcQP() uint32 { return get24(h[5:]) }

// SetQKey sets the queue key.
func (h DETH) SetQKey(k uint32) { binary.BigEndian.PutUint32(h[0:], k) }

// SetSrcQP sets the source queue pair number (low 24 bits).
func (h DETH) SetSrcQP(qpn uint32) { put24(h[5:], qpn) }

// Encode writes f, with the reserved byte cleared.
func (h DETH) Encode(f *DETHFields) {
	_ = h[DETHLen-1]
	h.SetQKey(f.QKey)
	h[4] = 0
	h.SetSrcQP(f.SrcQP)
}

// XRCETH is the XRC Extended Transport Header (IBTA Vol1 Annex A14): one reserved
// byte, then the 24-bit XRC shared receive queue number. XRC requests carry it.
type XRCETH []byte

// XRCSRQ returns the 24-bit XRC SRQ number.
func (h XRCETH) XRCSRQ() uint32 { return get24(h[1:]) }

// SetXRCSRQ sets the XRC SRQ number (low 24 bits) and clears the reserved byte.
func (h XRCETH) SetXRCSRQ(v uint32) { h[0] = 0; put24(h[1:], v) }

// FLUSH placement types (FETH bits 3-0; IBTA Vol1 Annex A19.4.1.1). They are bits
// and may be combined.
const (
	// FlushPlacementGlobal asks for global visibility.
	FlushPlacementGlobal = 1 << 0
	// FlushPlacementPersistent asks for persistence.
	FlushPlacementPersistent = 1 << 1
)

// FLUSH selectivity levels (FETH bits 5-4; IBTA Vol1 Annex A19.4.1.2).
const (
	// FlushSelectRange flushes the range given by the RETH.
	FlushSelectRange = 0
	// FlushSelectMR flushes the whole memory region of the RETH's R_Key.
	FlushSelectMR = 1
)

// FETH is the FLUSH Extended Transport Header (IBTA Vol1 Annex A19, added to the
// opcode table as RC FLUSH 0x1C), 32 bits big-endian:
//
//	bits 31-6 reserved | bits 5-4 selectivity level | bits 3-0 placement type
//
// rxe sends it right after the BTH, before the RETH (rxe_opcode.c offsets).
type FETH []byte

// FETHFields holds the FETH fields for Encode.
type FETHFields struct {
	// PlacementType is the 4-bit placement type (FlushPlacement* bits).
	PlacementType uint8
	// SelectivityLevel is the 2-bit selectivity level (FlushSelect*).
	SelectivityLevel uint8
}

const (
	fethPlacementMask = 0x0f
	fethSelectShift   = 4
	fethSelectMask    = 0x30
	// MaxFlushPlacementType is the largest value of the 4-bit FETH placement type.
	MaxFlushPlacementType = 15
	// MaxFlushSelectivityLevel is the largest value of the 2-bit FETH selectivity level.
	MaxFlushSelectivityLevel = 3
)

// PlacementType returns the 4-bit placement type.
func (h FETH) PlacementType() uint8 { return h[3] & fethPlacementMask }

// SelectivityLevel returns the 2-bit selectivity level.
func (h FETH) SelectivityLevel() uint8 { return (h[3] & fethSelectMask) >> fethSelectShift }

// SetPlacementType sets the placement type (low 4 bits of t).
func (h FETH) SetPlacementType(t uint8) {
	h[3] = h[3]&^fethPlacementMask | t&fethPlacementMask
}

// SetSelectivityLevel sets the selectivity level (low 2 bits of l).
func (h FETH) SetSelectivityLevel(l uint8) {
	h[3] = h[3]&^fethSelectMask | (l<<fethSelectShift)&fethSelectMask
}

// Encode writes f, with the reserved bits cleared.
func (h FETH) Encode(f *FETHFields) {
	_ = h[FETHLen-1]
	h[0], h[1], h[2] = 0, 0, 0
	h[3] = f.PlacementType&fethPlacementMask | (f.SelectivityLevel<<fethSelectShift)&fethSelectMask
}

// RETH is the RDMA Extended Transport Header (IBTA Vol1 9.3.3): the 64-bit virtual
// address, the R_Key and the 32-bit DMA length, all big-endian. It is carried by
// RDMA WRITE First/Only, RDMA READ Request, FLUSH and ATOMIC WRITE.
type RETH []byte

// RETHFields holds the RETH fields for Encode.
type RETHFields struct {
	// VA is the remote virtual address.
	VA uint64
	// RKey is the remote key.
	RKey uint32
	// DMALen is the length of the whole RDMA operation in bytes.
	DMALen uint32
}

// VA returns the remote virtual address.
func (h RETH) VA() uint64 { return binary.BigEndian.Uint64(h[0:]) }

// RKey returns the remote key.
func (h RETH) RKey() uint32 { return binary.BigEndian.Uint32(h[8:]) }

// DMALen returns the DMA length.
func (h RETH) DMALen() uint32 { return binary.BigEndian.Uint32(h[12:]) }

// SetVA sets the remote virtual address.
func (h RETH) SetVA(va uint64) { binary.BigEndian.PutUint64(h[0:], va) }

// SetRKey sets the remote key.
func (h RETH) SetRKey(k uint32) { binary.BigEndian.PutUint32(h[8:], k) }

// SetDMALen sets the DMA length.
func (h RETH) SetDMALen(n uint32) { binary.BigEndian.PutUint32(h[12:], n) }

// Encode writes f.
func (h RETH) Encode(f *RETHFields) {
	_ = h[RETHLen-1]
	h.SetVA(f.VA)
	h.SetRKey(f.RKey)
	h.SetDMALen(f.DMALen)
}

// AtomicETH is the Atomic Extended Transport Header (IBTA Vol1 9.3.4) of CmpSwap and
// FetchAdd: virtual address (8), R_Key (4), swap or add data (8), compare data (8).
type AtomicETH []byte

// AtomicETHFields holds the AtomicETH fields for Encode.
type AtomicETHFields struct {
	// VA is the remote virtual address of the 8-byte operand.
	VA uint64
	// RKey is the remote key.
	RKey uint32
	// SwapAdd is the swap value (CmpSwap) or the addend (FetchAdd).
	SwapAdd uint64
	// Compare is the compare value (CmpSwap; ignored by FetchAdd).
	Compare uint64
}

// VA returns the remote virtual address.
func (h AtomicETH) VA() uint64 { return binary.BigEndian.Uint64(h[0:]) }

// RKey returns the remote key.
func (h AtomicETH) RKey() uint32 { return binary.BigEndian.Uint32(h[8:]) }

// SwapAdd returns the swap (CmpSwap) or add (FetchAdd) data.
func (h AtomicETH) SwapAdd() uint64 { return binary.BigEndian.Uint64(h[12:]) }

// Compare returns the compare data.
func (h AtomicETH) Compare() uint64 { return binary.BigEndian.Uint64(h[20:]) }

// SetVA sets the remote virtual address.
func (h AtomicETH) SetVA(va uint64) { binary.BigEndian.PutUint64(h[0:], va) }

// SetRKey sets the remote key.
func (h AtomicETH) SetRKey(k uint32) { binary.BigEndian.PutUint32(h[8:], k) }

// SetSwapAdd sets the swap or add data.
func (h AtomicETH) SetSwapAdd(v uint64) { binary.BigEndian.PutUint64(h[12:], v) }

// SetCompare sets the compare data.
func (h AtomicETH) SetCompare(v uint64) { binary.BigEndian.PutUint64(h[20:], v) }

// Encode writes f.
func (h AtomicETH) Encode(f *AtomicETHFields) {
	_ = h[AtomicETHLen-1]
	h.SetVA(f.VA)
	h.SetRKey(f.RKey)
	h.SetSwapAdd(f.SwapAdd)
	h.SetCompare(f.Compare)
}

// AtomicAckETH is the Atomic Acknowledge Extended Transport Header (IBTA Vol1 9.3.6):
// the 8-byte original remote data of an atomic operation.
type AtomicAckETH []byte

// OrigData returns the original remote data.
func (h AtomicAckETH) OrigData() uint64 { return binary.BigEndian.Uint64(h) }

// SetOrigData sets the original remote data.
func (h AtomicAckETH) SetOrigData(v uint64) { binary.BigEndian.PutUint64(h, v) }

// ImmDt is the Immediate Data Extended Transport Header (IBTA Vol1 9.3.7): 4 opaque
// bytes, read here as a big-endian number (the value of ntohl(wc.imm_data)).
type ImmDt []byte

// Immediate returns the immediate data.
func (h ImmDt) Immediate() uint32 { return binary.BigEndian.Uint32(h) }

// SetImmediate sets the immediate data.
func (h ImmDt) SetImmediate(v uint32) { binary.BigEndian.PutUint32(h, v) }

// IETH is the Invalidate Extended Transport Header (IBTA Vol1 9.3.8): the R_Key to
// invalidate, carried by SEND Last/Only with Invalidate.
type IETH []byte

// RKey returns the R_Key to invalidate.
func (h IETH) RKey() uint32 { return binary.BigEndian.Uint32(h) }

// SetRKey sets the R_Key to invalidate.
func (h IETH) SetRKey(k uint32) { binary.BigEndian.PutUint32(h, k) }

// AtomicWriteData is the 8-byte payload of an ATOMIC WRITE request (IBTA Vol1
// Annex A19; rxe opcode 0x1D), which follows the RETH. It is payload, not a
// header: it is not counted in Opcode.HeaderLen and it is covered by the PadCount
// rules like any payload.
type AtomicWriteData []byte

// Value returns the 64-bit value to write.
func (h AtomicWriteData) Value() uint64 { return binary.BigEndian.Uint64(h) }

// SetValue sets the 64-bit value to write.
func (h AtomicWriteData) SetValue(v uint64) { binary.BigEndian.PutUint64(h, v) }

// AETH is the ACK Extended Transport Header (IBTA Vol1 9.3.5): the syndrome byte and
// the 24-bit message sequence number.
type AETH []byte

// AETHFields holds the AETH fields for Encode.
type AETHFields struct {
	// Syndrome is the ACK/NAK syndrome.
	Syndrome AETHSyndrome
	// MSN is the 24-bit message sequence number.
	MSN uint32
}

// Syndrome returns the syndrome byte.
func (h AETH) Syndrome() AETHSyndrome { return AETHSyndrome(h[0]) }

// MSN returns the 24-bit message sequence number.
func (h AETH) MSN() uint32 { return get24(h[1:]) }

// SetSyndrome sets the syndrome byte.
func (h AETH) SetSyndrome(s AETHSyndrome) { h[0] = uint8(s) }

// SetMSN sets the message sequence number (low 24 bits).
func (h AETH) SetMSN(msn uint32) { put24(h[1:], msn) }

// Encode writes f.
func (h AETH) Encode(f *AETHFields) {
	_ = h[AETHLen-1]
	h.SetSyndrome(f.Syndrome)
	h.SetMSN(f.MSN)
}

// AETHSyndrome is the AETH syndrome byte (IBTA Vol1 9.7.5.1, Table 43): bit 7 is
// reserved, bits 6-5 give the kind, bits 4-0 the credit count (ACK), the RNR timer
// code (RNR NAK) or the NAK code (NAK).
type AETHSyndrome uint8

// AETHKind is the kind of an AETH syndrome (bits 6-5).
type AETHKind uint8

// Syndrome kinds.
const (
	// AETHKindACK is a positive acknowledgement carrying a credit count.
	AETHKindACK AETHKind = 0
	// AETHKindRNRNAK is a receiver-not-ready NAK carrying an RNR timer code.
	AETHKindRNRNAK AETHKind = 1
	// AETHKindReserved is the reserved syndrome kind.
	AETHKindReserved AETHKind = 2
	// AETHKindNAK is a NAK carrying a NAK code.
	AETHKindNAK AETHKind = 3
)

// NAKCode is the 5-bit code of a NAK syndrome (IBTA Vol1 Table 43).
type NAKCode uint8

// NAK codes.
const (
	// NAKPSNSequenceError asks the requester to resend from the AETH's PSN.
	NAKPSNSequenceError NAKCode = 0
	// NAKInvalidRequest reports an unsupported or malformed request.
	NAKInvalidRequest NAKCode = 1
	// NAKRemoteAccessError reports an R_Key, bounds or access-rights violation.
	NAKRemoteAccessError NAKCode = 2
	// NAKRemoteOperationalError reports a responder failure.
	NAKRemoteOperationalError NAKCode = 3
	// NAKInvalidRDRequest reports an invalid RD request.
	NAKInvalidRDRequest NAKCode = 4
)

// ACKCreditsInvalid is the ACK credit code meaning "no credit count": the responder
// does not use end-to-end flow control (rxe always sends it).
const ACKCreditsInvalid = 31

const (
	aethKindShift = 5
	aethKindMask  = 0x3
	aethValueMask = 0x1f
)

// NewACKSyndrome returns an ACK syndrome with the given credit code (0..31).
func NewACKSyndrome(creditCode uint8) AETHSyndrome {
	return AETHSyndrome(creditCode & aethValueMask)
}

// NewRNRNAKSyndrome returns an RNR NAK syndrome with the given timer code (0..31).
func NewRNRNAKSyndrome(timerCode uint8) AETHSyndrome {
	return AETHSyndrome(uint8(AETHKindRNRNAK)<<aethKindShift | timerCode&aethValueMask)
}

// NewNAKSyndrome returns a NAK syndrome with the given code.
func NewNAKSyndrome(code NAKCode) AETHSyndrome {
	return AETHSyndrome(uint8(AETHKindNAK)<<aethKindShift | uint8(code)&aethValueMask)
}

// Kind returns the syndrome kind (bits 6-5).
func (s AETHSyndrome) Kind() AETHKind { return AETHKind(uint8(s)>>aethKindShift) & aethKindMask }

// Value returns the 5-bit value field (bits 4-0) whatever the kind.
func (s AETHSyndrome) Value() uint8 { return uint8(s) & aethValueMask }

// Credits returns the 5-bit credit code of an ACK (31 = ACKCreditsInvalid); see
// ACKCreditCount for the number of credits it stands for.
func (s AETHSyndrome) Credits() uint8 { return s.Value() }

// RNRTimer returns the 5-bit RNR timer code of an RNR NAK; see RNRTimerDuration.
func (s AETHSyndrome) RNRTimer() uint8 { return s.Value() }

// NAKCode returns the 5-bit NAK code of a NAK.
func (s AETHSyndrome) NAKCode() NAKCode { return NAKCode(s.Value()) }

// String describes the syndrome: "ACK credits=3", "ACK credits=invalid",
// "RNR NAK timer=14 (1.28ms)", "NAK remote access error".
func (s AETHSyndrome) String() string {
	switch s.Kind() {
	case AETHKindACK:
		if s.Credits() == ACKCreditsInvalid {
			return "ACK credits=invalid"
		}
		return "ACK credits=" + strconv.Itoa(int(s.Credits()))
	case AETHKindRNRNAK:
		return "RNR NAK timer=" + strconv.Itoa(int(s.RNRTimer())) + " (" + RNRTimerDuration(s.RNRTimer()).String() + ")"
	case AETHKindNAK:
		return "NAK " + s.NAKCode().String()
	}
	return "reserved syndrome 0x" + strconv.FormatUint(uint64(s), 16)
}

// String names the NAK code: "PSN sequence error", "invalid request", "remote access
// error", "remote operational error", "invalid RD request", or "reserved code N".
func (c NAKCode) String() string {
	switch c {
	case NAKPSNSequenceError:
		return "PSN sequence error"
	case NAKInvalidRequest:
		return "invalid request"
	case NAKRemoteAccessError:
		return "remote access error"
	case NAKRemoteOperationalError:
		return "remote operational error"
	case NAKInvalidRDRequest:
		return "invalid RD request"
	}
	return "reserved code " + strconv.Itoa(int(c))
}

// String names the kind: "ACK", "RNR NAK", "reserved", "NAK".
func (k AETHKind) String() string {
	switch k {
	case AETHKindACK:
		return "ACK"
	case AETHKindRNRNAK:
		return "RNR NAK"
	case AETHKindNAK:
		return "NAK"
	}
	return "reserved"
}

// rnrTimerTable is IBTA Vol1 Table 45 (RNR NAK timer field encodings) in units of
// 10 µs: code 0 is 655.36 ms, codes 1..31 run from 0.01 ms to 491.52 ms.
var rnrTimerTable = [32]uint32{
	65536, 1, 2, 3, 4, 6, 8, 12,
	16, 24, 32, 48, 64, 96, 128, 192,
	256, 384, 512, 768, 1024, 1536, 2048, 3072,
	4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152,
}

// RNRTimerDuration returns the minimum RNR NAK delay that a 5-bit RNR timer code
// stands for (IBTA Vol1 Table 45); only the low 5 bits of code are used.
func RNRTimerDuration(code uint8) time.Duration {
	return time.Duration(rnrTimerTable[code&aethValueMask]) * 10 * time.Microsecond
}

// ackCreditTable is IBTA Vol1 Table 44 (end-to-end flow control credit encodings),
// codes 0..30.
var ackCreditTable = [31]uint16{
	0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192,
	256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
}

// ACKCreditCount returns the number of receive credits that an ACK credit code
// stands for (IBTA Vol1 Table 44). ok is false for ACKCreditsInvalid (31) and for
// codes above 31.
func ACKCreditCount(code uint8) (credits int, ok bool) {
	if int(code) >= len(ackCreditTable) {
		return 0, false
	}
	return int(ackCreditTable[code]), true
}
