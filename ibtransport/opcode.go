package ibtransport

import (
	"math/bits"
	"strconv"
	"strings"
)

// Opcode is the BTH opcode (IBTA Vol1 9.2.1, Table 35): bits 7-5 give the transport
// service (ServiceType), bits 4-0 the operation. Every property of an opcode is read
// from a fixed 256-entry table; no lookup allocates or uses a map.
type Opcode uint8

// Reliable Connection opcodes (bits 7-5 = 000).
const (
	OpcodeRCSendFirst              Opcode = 0x00
	OpcodeRCSendMiddle             Opcode = 0x01
	OpcodeRCSendLast               Opcode = 0x02
	OpcodeRCSendLastWithImm        Opcode = 0x03
	OpcodeRCSendOnly               Opcode = 0x04
	OpcodeRCSendOnlyWithImm        Opcode = 0x05
	OpcodeRCRDMAWriteFirst         Opcode = 0x06
	OpcodeRCRDMAWriteMiddle        Opcode = 0x07
	OpcodeRCRDMAWriteLast          Opcode = 0x08
	OpcodeRCRDMAWriteLastWithImm   Opcode = 0x09
	OpcodeRCRDMAWriteOnly          Opcode = 0x0A
	OpcodeRCRDMAWriteOnlyWithImm   Opcode = 0x0B
	OpcodeRCRDMAReadRequest        Opcode = 0x0C
	OpcodeRCRDMAReadResponseFirst  Opcode = 0x0D
	OpcodeRCRDMAReadResponseMiddle Opcode = 0x0E
	OpcodeRCRDMAReadResponseLast   Opcode = 0x0F
	OpcodeRCRDMAReadResponseOnly   Opcode = 0x10
	OpcodeRCAcknowledge            Opcode = 0x11
	OpcodeRCAtomicAcknowledge      Opcode = 0x12
	OpcodeRCCompareSwap            Opcode = 0x13
	OpcodeRCFetchAdd               Opcode = 0x14
	OpcodeRCSendLastWithInvalidate Opcode = 0x16
	OpcodeRCSendOnlyWithInvalidate Opcode = 0x17
	OpcodeRCFlush                  Opcode = 0x1C
	OpcodeRCAtomicWrite            Opcode = 0x1D
)

// Unreliable Connection opcodes (bits 7-5 = 001).
const (
	OpcodeUCSendFirst            Opcode = 0x20
	OpcodeUCSendMiddle           Opcode = 0x21
	OpcodeUCSendLast             Opcode = 0x22
	OpcodeUCSendLastWithImm      Opcode = 0x23
	OpcodeUCSendOnly             Opcode = 0x24
	OpcodeUCSendOnlyWithImm      Opcode = 0x25
	OpcodeUCRDMAWriteFirst       Opcode = 0x26
	OpcodeUCRDMAWriteMiddle      Opcode = 0x27
	OpcodeUCRDMAWriteLast        Opcode = 0x28
	OpcodeUCRDMAWriteLastWithImm Opcode = 0x29
	OpcodeUCRDMAWriteOnly        Opcode = 0x2A
	OpcodeUCRDMAWriteOnlyWithImm Opcode = 0x2B
)

// Reliable Datagram opcodes (bits 7-5 = 010). softrdma does not implement RD; the
// table knows their layout so that captures and conformance tests can use them.
const (
	OpcodeRDSendFirst              Opcode = 0x40
	OpcodeRDSendMiddle             Opcode = 0x41
	OpcodeRDSendLast               Opcode = 0x42
	OpcodeRDSendLastWithImm        Opcode = 0x43
	OpcodeRDSendOnly               Opcode = 0x44
	OpcodeRDSendOnlyWithImm        Opcode = 0x45
	OpcodeRDRDMAWriteFirst         Opcode = 0x46
	OpcodeRDRDMAWriteMiddle        Opcode = 0x47
	OpcodeRDRDMAWriteLast          Opcode = 0x48
	OpcodeRDRDMAWriteLastWithImm   Opcode = 0x49
	OpcodeRDRDMAWriteOnly          Opcode = 0x4A
	OpcodeRDRDMAWriteOnlyWithImm   Opcode = 0x4B
	OpcodeRDRDMAReadRequest        Opcode = 0x4C
	OpcodeRDRDMAReadResponseFirst  Opcode = 0x4D
	OpcodeRDRDMAReadResponseMiddle Opcode = 0x4E
	OpcodeRDRDMAReadResponseLast   Opcode = 0x4F
	OpcodeRDRDMAReadResponseOnly   Opcode = 0x50
	OpcodeRDAcknowledge            Opcode = 0x51
	OpcodeRDAtomicAcknowledge      Opcode = 0x52
	OpcodeRDCompareSwap            Opcode = 0x53
	OpcodeRDFetchAdd               Opcode = 0x54
	OpcodeRDResync                 Opcode = 0x55
	OpcodeRDFlush                  Opcode = 0x5C
)

// Unreliable Datagram opcodes (bits 7-5 = 011).
const (
	OpcodeUDSendOnly        Opcode = 0x64
	OpcodeUDSendOnlyWithImm Opcode = 0x65
)

// OpcodeCNP is the RoCEv2 Congestion Notification Packet (IBTA Annex A17.9.3): a BTH
// followed by 16 reserved bytes.
const OpcodeCNP Opcode = 0x81

// Extended Reliable Connection opcodes (bits 7-5 = 101; IBTA Vol1 Annex A14). Not
// implemented by rxe; in the table for decoding.
const (
	OpcodeXRCSendFirst              Opcode = 0xA0
	OpcodeXRCSendMiddle             Opcode = 0xA1
	OpcodeXRCSendLast               Opcode = 0xA2
	OpcodeXRCSendLastWithImm        Opcode = 0xA3
	OpcodeXRCSendOnly               Opcode = 0xA4
	OpcodeXRCSendOnlyWithImm        Opcode = 0xA5
	OpcodeXRCRDMAWriteFirst         Opcode = 0xA6
	OpcodeXRCRDMAWriteMiddle        Opcode = 0xA7
	OpcodeXRCRDMAWriteLast          Opcode = 0xA8
	OpcodeXRCRDMAWriteLastWithImm   Opcode = 0xA9
	OpcodeXRCRDMAWriteOnly          Opcode = 0xAA
	OpcodeXRCRDMAWriteOnlyWithImm   Opcode = 0xAB
	OpcodeXRCRDMAReadRequest        Opcode = 0xAC
	OpcodeXRCRDMAReadResponseFirst  Opcode = 0xAD
	OpcodeXRCRDMAReadResponseMiddle Opcode = 0xAE
	OpcodeXRCRDMAReadResponseLast   Opcode = 0xAF
	OpcodeXRCRDMAReadResponseOnly   Opcode = 0xB0
	OpcodeXRCAcknowledge            Opcode = 0xB1
	OpcodeXRCAtomicAcknowledge      Opcode = 0xB2
	OpcodeXRCCompareSwap            Opcode = 0xB3
	OpcodeXRCFetchAdd               Opcode = 0xB4
	OpcodeXRCSendLastWithInvalidate Opcode = 0xB6
	OpcodeXRCSendOnlyWithInvalidate Opcode = 0xB7
)

// ServiceType is the transport service of an opcode (its bits 7-5).
type ServiceType uint8

// Transport services.
const (
	ServiceRC  ServiceType = 0 // Reliable Connection
	ServiceUC  ServiceType = 1 // Unreliable Connection
	ServiceRD  ServiceType = 2 // Reliable Datagram
	ServiceUD  ServiceType = 3 // Unreliable Datagram
	ServiceCNP ServiceType = 4 // Congestion Notification
	ServiceXRC ServiceType = 5 // Extended Reliable Connection
	// Values 6 and 7 are manufacturer specific.
)

var serviceNames = [8]string{"RC", "UC", "RD", "UD", "CNP", "XRC", "VENDOR6", "VENDOR7"}

// Long names as tshark 4.0 prints them in front of the opcode name.
var serviceLongNames = [8]string{
	"Reliable Connection (RC)",
	"Unreliable Connection (UC)",
	"Reliable Datagram (RD)",
	"Unreliable Datagram (UD)",
	"Congestion Notification (CNP)",
	"Extended Reliable Connection (XRC)",
	"Manufacturer Specific (6)",
	"Manufacturer Specific (7)",
}

// String returns the short service name: "RC", "UC", "RD", "UD", "CNP", "XRC".
func (s ServiceType) String() string { return serviceNames[s&7] }

// LongName returns the service name as Wireshark prints it, e.g.
// "Reliable Connection (RC)".
func (s ServiceType) LongName() string { return serviceLongNames[s&7] }

// ExtHeaders is a set of extension transport headers. The bits are declared in the
// order in which the headers follow the BTH on the wire (IBTA Vol1 9.3; FETH before
// RETH as rxe sends FLUSH), so iterating from the lowest bit yields wire order.
type ExtHeaders uint16

// Extension headers.
const (
	ExtRDETH        ExtHeaders = 1 << iota // Reliable Datagram ETH
	ExtDETH                                // Datagram ETH
	ExtXRCETH                              // XRC ETH
	ExtFETH                                // FLUSH ETH
	ExtRETH                                // RDMA ETH
	ExtAtomicETH                           // Atomic ETH
	ExtAETH                                // ACK ETH
	ExtAtomicAckETH                        // Atomic ACK ETH
	ExtImmDt                               // Immediate data
	ExtIETH                                // Invalidate ETH
	// extCNPReserved is the 16-byte reserved block of a CNP; it is part of the
	// header area but not an IBTA extension header.
	extCNPReserved
)

const numExtHeaders = 11

var extHeaderLens = [numExtHeaders]uint8{
	RDETHLen, DETHLen, XRCETHLen, FETHLen, RETHLen, AtomicETHLen,
	AETHLen, AtomicAckETHLen, ImmDtLen, IETHLen, CNPReservedLen,
}

var extHeaderNames = [numExtHeaders]string{
	"RDETH", "DETH", "XRCETH", "FETH", "RETH", "AtomicETH",
	"AETH", "AtomicAckETH", "ImmDt", "IETH", "CNP reserved",
}

// Has reports whether every header of h2 is in h.
func (h ExtHeaders) Has(h2 ExtHeaders) bool { return h&h2 == h2 }

// Len returns the total length in bytes of the headers in h.
func (h ExtHeaders) Len() int {
	n := 0
	for i := range numExtHeaders {
		if h&(1<<i) != 0 {
			n += int(extHeaderLens[i])
		}
	}
	return n
}

// String lists the headers in wire order, e.g. "RETH+ImmDt"; "none" for the empty set.
func (h ExtHeaders) String() string {
	if h == 0 {
		return "none"
	}
	var b strings.Builder
	for i := range numExtHeaders {
		if h&(1<<i) != 0 {
			if b.Len() > 0 {
				b.WriteByte('+')
			}
			b.WriteString(extHeaderNames[i])
		}
	}
	if rest := h &^ (1<<numExtHeaders - 1); rest != 0 {
		if b.Len() > 0 {
			b.WriteByte('+')
		}
		b.WriteString("0x" + strconv.FormatUint(uint64(rest), 16))
	}
	return b.String()
}

// Position is where a packet sits in its message.
type Position uint8

// Packet positions. Single-packet operations (READ Request, ACK, atomics, FLUSH,
// ATOMIC WRITE, RESYNC, CNP) are PositionOnly.
const (
	PositionNone   Position = iota // invalid opcode
	PositionFirst                  // first packet of a multi-packet message
	PositionMiddle                 // neither first nor last
	PositionLast                   // last packet of a multi-packet message
	PositionOnly                   // the message's only packet
)

// String names the position: "First", "Middle", "Last", "Only" or "None".
func (p Position) String() string {
	switch p {
	case PositionFirst:
		return "First"
	case PositionMiddle:
		return "Middle"
	case PositionLast:
		return "Last"
	case PositionOnly:
		return "Only"
	}
	return "None"
}

// opFlags are the boolean properties of an opcode.
type opFlags uint16

const (
	opValid opFlags = 1 << iota
	opPayload
	opRequest
	opResponse
	opSend
	opWrite
	opRead
	opAtomic
	opImm
	opInvalidate
	opFlush
	opAtomicWrite
	opAck
	opCNP
)

// opcodeInfo is one entry of the opcode table.
type opcodeInfo struct {
	ident    string // "SEND_ONLY"
	name     string // "SEND Only", as tshark prints it
	full     string // "RC SEND_ONLY"
	wireName string // "Reliable Connection (RC) - SEND Only"
	flags    opFlags
	ext      ExtHeaders
	pos      Position
	hdrLen   uint8
	offsets  [numExtHeaders]uint8 // offset of each ext header from the BTH start
}

var opcodeTable [256]opcodeInfo

// opDef describes an operation independent of its transport service.
type opDef struct {
	low   uint8 // bits 4-0 of the opcode
	ident string
	name  string
	ext   ExtHeaders
	flags opFlags
	pos   Position
}

const (
	sendReq  = opPayload | opRequest | opSend
	writeReq = opPayload | opRequest | opWrite
	readResp = opResponse | opRead
)

// The operations of the connected services, before service-specific headers (RDETH,
// DETH, XRCETH) are added. IBTA Vol1 Table 35 and rxe_opcode.c (FLUSH, ATOMIC WRITE).
var connectedOps = []opDef{
	{0x00, "SEND_FIRST", "SEND First", 0, sendReq, PositionFirst},
	{0x01, "SEND_MIDDLE", "SEND Middle", 0, sendReq, PositionMiddle},
	{0x02, "SEND_LAST", "SEND Last", 0, sendReq, PositionLast},
	{0x03, "SEND_LAST_WITH_IMMEDIATE", "SEND Last with Immediate", ExtImmDt, sendReq | opImm, PositionLast},
	{0x04, "SEND_ONLY", "SEND Only", 0, sendReq, PositionOnly},
	{0x05, "SEND_ONLY_WITH_IMMEDIATE", "SEND Only with Immediate", ExtImmDt, sendReq | opImm, PositionOnly},
	{0x06, "RDMA_WRITE_FIRST", "RDMA WRITE First", ExtRETH, writeReq, PositionFirst},
	{0x07, "RDMA_WRITE_MIDDLE", "RDMA WRITE Middle", 0, writeReq, PositionMiddle},
	{0x08, "RDMA_WRITE_LAST", "RDMA WRITE Last", 0, writeReq, PositionLast},
	{0x09, "RDMA_WRITE_LAST_WITH_IMMEDIATE", "RDMA WRITE Last with Immediate", ExtImmDt, writeReq | opImm, PositionLast},
	{0x0A, "RDMA_WRITE_ONLY", "RDMA WRITE Only", ExtRETH, writeReq, PositionOnly},
	{0x0B, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", "RDMA WRITE Only with Immediate", ExtRETH | ExtImmDt, writeReq | opImm, PositionOnly},
	{0x0C, "RDMA_READ_REQUEST", "RDMA READ Request", ExtRETH, opRequest | opRead, PositionOnly},
	{0x0D, "RDMA_READ_RESPONSE_FIRST", "RDMA READ response First", ExtAETH, readResp | opPayload, PositionFirst},
	{0x0E, "RDMA_READ_RESPONSE_MIDDLE", "RDMA READ response Middle", 0, readResp | opPayload, PositionMiddle},
	{0x0F, "RDMA_READ_RESPONSE_LAST", "RDMA READ response Last", ExtAETH, readResp | opPayload, PositionLast},
	{0x10, "RDMA_READ_RESPONSE_ONLY", "RDMA READ response Only", ExtAETH, readResp | opPayload, PositionOnly},
	{0x11, "ACKNOWLEDGE", "Acknowledge", ExtAETH, opResponse | opAck, PositionOnly},
	{0x12, "ATOMIC_ACKNOWLEDGE", "ATOMIC Acknowledge", ExtAETH | ExtAtomicAckETH, opResponse | opAtomic | opAck, PositionOnly},
	{0x13, "COMPARE_SWAP", "CmpSwap", ExtAtomicETH, opRequest | opAtomic, PositionOnly},
	{0x14, "FETCH_ADD", "FetchAdd", ExtAtomicETH, opRequest | opAtomic, PositionOnly},
	{0x15, "RESYNC", "RESYNC", 0, opRequest, PositionOnly}, // RD only
	{0x16, "SEND_LAST_WITH_INVALIDATE", "SEND Last with Invalidate", ExtIETH, sendReq | opInvalidate, PositionLast},
	{0x17, "SEND_ONLY_WITH_INVALIDATE", "SEND Only with Invalidate", ExtIETH, sendReq | opInvalidate, PositionOnly},
	// tshark 4.0 knows neither FLUSH nor ATOMIC WRITE; these names are ours.
	{0x1C, "FLUSH", "FLUSH", ExtFETH | ExtRETH, opRequest | opFlush, PositionOnly},
	{0x1D, "ATOMIC_WRITE", "ATOMIC WRITE", ExtRETH, opPayload | opRequest | opAtomicWrite, PositionOnly},
}

func init() {
	for _, d := range connectedOps {
		// RC: everything but RESYNC (reserved in RC).
		if d.low != 0x15 {
			defineOpcode(ServiceRC, d, 0)
		}
		// UC: SEND and RDMA WRITE, 0x00-0x0B (IBTA Vol1 Table 35).
		if d.low <= 0x0B {
			defineOpcode(ServiceUC, d, 0)
		}
		// RD: 0x00-0x15 and FLUSH (ib_pack.h lists IB_OPCODE_RD_FLUSH); every packet
		// carries the RDETH, requests also the DETH.
		if d.low <= 0x15 || d.flags&opFlush != 0 {
			extra := ExtRDETH
			if d.flags&opRequest != 0 {
				extra |= ExtDETH
			}
			defineOpcode(ServiceRD, d, extra)
		}
		// XRC: like RC without RESYNC, FLUSH and ATOMIC WRITE; requests carry the
		// XRCETH right after the BTH (Annex A14), responses do not.
		if d.low <= 0x17 && d.low != 0x15 {
			var extra ExtHeaders
			if d.flags&opRequest != 0 {
				extra = ExtXRCETH
			}
			defineOpcode(ServiceXRC, d, extra)
		}
	}
	// UD: SEND Only and SEND Only with Immediate, each with a DETH. tshark spells
	// "only" in lower case for UD.
	defineOpcode(ServiceUD, opDef{0x04, "SEND_ONLY", "SEND only", ExtDETH, sendReq, PositionOnly}, 0)
	defineOpcode(ServiceUD, opDef{0x05, "SEND_ONLY_WITH_IMMEDIATE", "SEND only with Immediate", ExtDETH | ExtImmDt, sendReq | opImm, PositionOnly}, 0)
	// CNP (RoCEv2, Annex A17.9.3): BTH + 16 reserved bytes, no payload.
	defineOpcode(ServiceCNP, opDef{0x01, "CNP", "CNP", extCNPReserved, opCNP, PositionOnly}, 0)
}

func defineOpcode(s ServiceType, d opDef, extra ExtHeaders) {
	o := Opcode(uint8(s)<<5 | d.low)
	e := &opcodeTable[o]
	e.ident = d.ident
	e.name = d.name
	e.full = s.String() + " " + d.ident
	e.wireName = s.LongName() + " - " + d.name
	e.flags = d.flags | opValid
	e.ext = d.ext | extra
	e.pos = d.pos
	off := BTHLen
	for i := range numExtHeaders {
		if e.ext&(1<<i) != 0 {
			e.offsets[i] = uint8(off)
			off += int(extHeaderLens[i])
		}
	}
	e.hdrLen = uint8(off)
}

func (o Opcode) has(f opFlags) bool { return opcodeTable[o].flags&f != 0 }

// Valid reports whether o is a defined opcode (IBTA Table 35, plus rxe's FLUSH and
// ATOMIC WRITE and the RoCEv2 CNP). Reserved opcodes are invalid.
func (o Opcode) Valid() bool { return o.has(opValid) }

// Service returns the transport service, bits 7-5 of the opcode.
func (o Opcode) Service() ServiceType { return ServiceType(o >> 5) }

// Name returns the operation name as tshark prints it ("SEND Only", "RDMA READ
// response First", "Acknowledge", UD "SEND only"), or "" for an invalid opcode.
func (o Opcode) Name() string { return opcodeTable[o].name }

// WiresharkName returns the full opcode text of tshark 4.0's BTH opcode field
// without the number, e.g. "Reliable Connection (RC) - SEND Only"; "" if invalid.
func (o Opcode) WiresharkName() string { return opcodeTable[o].wireName }

// String returns the service and the rdma-core style operation, e.g. "RC SEND_ONLY",
// "UD SEND_ONLY_WITH_IMMEDIATE"; an invalid opcode reads "Opcode(0x15)".
func (o Opcode) String() string {
	if s := opcodeTable[o].full; s != "" {
		return s
	}
	const hex = "0123456789abcdef"
	return "Opcode(0x" + string([]byte{hex[o>>4], hex[o&0xf]}) + ")"
}

// ExtHeaders returns the extension headers the opcode carries after the BTH.
func (o Opcode) ExtHeaders() ExtHeaders { return opcodeTable[o].ext &^ extCNPReserved }

// HeaderLen returns the length of the BTH plus the extension headers of o (for CNP
// also its 16 reserved bytes). For an invalid opcode it returns BTHLen.
func (o Opcode) HeaderLen() int {
	if n := opcodeTable[o].hdrLen; n != 0 {
		return int(n)
	}
	return BTHLen
}

// extOffset returns the offset of header h (a single bit) from the BTH start, or 0
// if o does not carry it.
func (o Opcode) extOffset(h ExtHeaders) int {
	e := &opcodeTable[o]
	if e.ext&h == 0 || bits.OnesCount16(uint16(h)) != 1 {
		return 0
	}
	return int(e.offsets[bits.TrailingZeros16(uint16(h))])
}

// HasPayload reports whether the opcode carries a payload (possibly empty).
func (o Opcode) HasPayload() bool { return o.has(opPayload) }

// Position returns where a packet with this opcode sits in its message.
func (o Opcode) Position() Position { return opcodeTable[o].pos }

// IsFirst reports whether the packet starts a message (First or Only).
func (o Opcode) IsFirst() bool {
	p := opcodeTable[o].pos
	return p == PositionFirst || p == PositionOnly
}

// IsLast reports whether the packet ends a message (Last or Only).
func (o Opcode) IsLast() bool {
	p := opcodeTable[o].pos
	return p == PositionLast || p == PositionOnly
}

// IsRequest reports whether a requester sends the opcode (SEND, WRITE, READ Request,
// atomics, FLUSH, ATOMIC WRITE, RESYNC).
func (o Opcode) IsRequest() bool { return o.has(opRequest) }

// IsResponse reports whether a responder sends the opcode: READ responses,
// Acknowledge and ATOMIC Acknowledge (the ACK-type packets that carry an AETH,
// except READ response Middle).
func (o Opcode) IsResponse() bool { return o.has(opResponse) }

// IsAck reports whether the opcode is Acknowledge or ATOMIC Acknowledge.
func (o Opcode) IsAck() bool { return o.has(opAck) }

// IsSend reports whether the opcode is a SEND of any kind.
func (o Opcode) IsSend() bool { return o.has(opSend) }

// IsWrite reports whether the opcode is an RDMA WRITE of any kind (not ATOMIC WRITE).
func (o Opcode) IsWrite() bool { return o.has(opWrite) }

// IsRead reports whether the opcode is an RDMA READ Request or READ response.
func (o Opcode) IsRead() bool { return o.has(opRead) }

// IsAtomic reports whether the opcode is CmpSwap, FetchAdd or ATOMIC Acknowledge.
func (o Opcode) IsAtomic() bool { return o.has(opAtomic) }

// IsAtomicWrite reports whether the opcode is ATOMIC WRITE.
func (o Opcode) IsAtomicWrite() bool { return o.has(opAtomicWrite) }

// IsFlush reports whether the opcode is FLUSH.
func (o Opcode) IsFlush() bool { return o.has(opFlush) }

// HasImmediate reports whether the opcode carries immediate data (ImmDt).
func (o Opcode) HasImmediate() bool { return o.has(opImm) }

// HasInvalidate reports whether the opcode carries an IETH (SEND with Invalidate).
func (o Opcode) HasInvalidate() bool { return o.has(opInvalidate) }

// OpcodeInfo is a copy of everything the opcode table knows about one opcode, for
// tools and tests; the hot path uses the Opcode methods.
type OpcodeInfo struct {
	Opcode        Opcode
	Valid         bool
	Service       ServiceType
	Ident         string // "SEND_ONLY"
	Name          string // "SEND Only" (tshark)
	ExtHeaders    ExtHeaders
	HeaderLen     int
	HasPayload    bool
	Position      Position
	IsRequest     bool
	IsResponse    bool
	IsAck         bool
	IsSend        bool
	IsWrite       bool
	IsRead        bool
	IsAtomic      bool
	IsAtomicWrite bool
	IsFlush       bool
	HasImmediate  bool
	HasInvalidate bool
}

// Info returns a copy of the opcode's table entry.
func (o Opcode) Info() OpcodeInfo {
	return OpcodeInfo{
		Opcode:        o,
		Valid:         o.Valid(),
		Service:       o.Service(),
		Ident:         opcodeTable[o].ident,
		Name:          o.Name(),
		ExtHeaders:    o.ExtHeaders(),
		HeaderLen:     o.HeaderLen(),
		HasPayload:    o.HasPayload(),
		Position:      o.Position(),
		IsRequest:     o.IsRequest(),
		IsResponse:    o.IsResponse(),
		IsAck:         o.IsAck(),
		IsSend:        o.IsSend(),
		IsWrite:       o.IsWrite(),
		IsRead:        o.IsRead(),
		IsAtomic:      o.IsAtomic(),
		IsAtomicWrite: o.IsAtomicWrite(),
		IsFlush:       o.IsFlush(),
		HasImmediate:  o.HasImmediate(),
		HasInvalidate: o.HasInvalidate(),
	}
}
