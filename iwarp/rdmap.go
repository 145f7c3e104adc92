package iwarp

import (
	"encoding/binary"
	"strconv"

	"github.com/softrdma/softrdma/header"
)

// RDMAP (RFC 5040 §4, RFC 7306) has no header of its own: its control octet is the DDP
// header's RsvdULP[0],
//
//	 0 1 2 3 4 5 6 7
//	+-+-+-+-+-+-+-+-+
//	| RV|Rsv| Opcode|
//	+-+-+-+-+-+-+-+-+
//
// and, in untagged segments, RsvdULP[1:5] holds the Invalidate STag of the two
// Send-with-Invalidate opcodes (reserved, 0, otherwise). Read Request, Terminate and the
// RFC 7306 atomics carry a further RDMAP header at the start of the DDP payload.
const (
	// RDMAPVersion is the RDMAP version (RV) of RFC 5040.
	RDMAPVersion = 1
	// RDMAPVersionMask masks RV in the control octet.
	RDMAPVersionMask = 0xc0
	// RDMAPReservedMask masks the two reserved bits of the control octet.
	RDMAPReservedMask = 0x30
	// RDMAPOpcodeMask masks the opcode in the control octet.
	RDMAPOpcodeMask = 0x0f
)

// Opcode is an RDMAP opcode.
type Opcode uint8

// RDMAP opcodes (RFC 5040 §4.3, RFC 7306 §10).
const (
	OpWrite            Opcode = 0x0
	OpReadRequest      Opcode = 0x1
	OpReadResponse     Opcode = 0x2
	OpSend             Opcode = 0x3
	OpSendInvalidate   Opcode = 0x4
	OpSendSE           Opcode = 0x5
	OpSendSEInvalidate Opcode = 0x6
	OpTerminate        Opcode = 0x7
	OpImmediateData    Opcode = 0x8
	OpImmediateDataSE  Opcode = 0x9
	OpAtomicRequest    Opcode = 0xa
	OpAtomicResponse   Opcode = 0xb
)

const (
	numOpcodes    = 0xc
	unknownPrefix = "Unknown "
)

// DDP untagged queue numbers RDMAP uses (RFC 5040 §5.1; queue 3 from RFC 7306).
const (
	// QueueSend carries Send messages (and RFC 7306 Immediate Data).
	QueueSend = 0
	// QueueReadRequest carries RDMA Read Requests (and RFC 7306 Atomic Requests).
	QueueReadRequest = 1
	// QueueTerminate carries Terminate messages.
	QueueTerminate = 2
	// QueueAtomicResponse carries RFC 7306 Atomic Responses.
	QueueAtomicResponse = 3
)

// The names are tshark 4.0's (iwarp_rdma.opcode); tshark has none for 8 and 9, which
// are named after RFC 7306.
var opcodeNames = [numOpcodes]string{
	OpWrite:            "Write",
	OpReadRequest:      "Read Request",
	OpReadResponse:     "Read Response",
	OpSend:             "Send",
	OpSendInvalidate:   "Send with Invalidate",
	OpSendSE:           "Send with SE",
	OpSendSEInvalidate: "Send with SE and Invalidate",
	OpTerminate:        "Terminate",
	OpImmediateData:    "Immediate Data",
	OpImmediateDataSE:  "Immediate Data with SE",
	OpAtomicRequest:    "Atomic Request",
	OpAtomicResponse:   "Atomic Response",
}

// String returns tshark's name of the opcode, or "Unknown N".
func (o Opcode) String() string {
	if o < numOpcodes {
		return opcodeNames[o]
	}
	return unknownPrefix + strconv.Itoa(int(o))
}

// Valid reports whether o is defined by RFC 5040 or RFC 7306.
func (o Opcode) Valid() bool { return o < numOpcodes }

// Tagged reports whether messages with this opcode use the DDP tagged buffer model
// (RDMA Write and Read Response do; everything else is untagged).
func (o Opcode) Tagged() bool { return o == OpWrite || o == OpReadResponse }

// QueueNumber returns the DDP queue an untagged opcode is sent on.
//
// RFC 7306 queue assignment (Atomic Request on queue 1 with the Read Requests it shares
// IRD/ORD with, Atomic Response on queue 3, Immediate Data on queue 0) was read from the
// RFC's text as recalled, not from a capture: no Linux iWARP stack sends them.
func (o Opcode) QueueNumber() uint32 {
	switch o {
	case OpReadRequest, OpAtomicRequest:
		return QueueReadRequest
	case OpTerminate:
		return QueueTerminate
	case OpAtomicResponse:
		return QueueAtomicResponse
	}
	return QueueSend
}

// Solicited reports whether the opcode carries a solicited event.
func (o Opcode) Solicited() bool {
	return o == OpSendSE || o == OpSendSEInvalidate || o == OpImmediateDataSE
}

// Invalidates reports whether the opcode carries an Invalidate STag.
func (o Opcode) Invalidates() bool { return o == OpSendInvalidate || o == OpSendSEInvalidate }

// IsSend reports whether o is one of the four Send opcodes.
func (o Opcode) IsSend() bool { return o >= OpSend && o <= OpSendSEInvalidate }

// RDMAPControl returns the control octet for opcode o with RV = 1.
func RDMAPControl(o Opcode) uint8 { return RDMAPVersion<<6 | uint8(o)&RDMAPOpcodeMask }

// RDMAP is a view of the RDMAP fields in a DDP header: the same octets as the DDP view
// (pass the DDP segment).
type RDMAP []byte

// ParseRDMAP checks the RDMAP fields of a DDP segment already checked by ParseDDP: RV = 1,
// a defined opcode, the buffer model the opcode requires and, when untagged, its queue.
func ParseRDMAP(d DDP) (RDMAP, error) {
	r := RDMAP(d)
	if v := r.Version(); v != RDMAPVersion {
		return r, &header.Error{Header: "rdmap", Field: "version", Value: uint64(v),
			Limit: RDMAPVersion, Rel: "!=", Err: ErrBadVersion}
	}
	op := r.Opcode()
	if !op.Valid() {
		return r, &header.Error{Header: "rdmap", Field: "opcode", Value: uint64(op),
			Reason: "reserved", Err: ErrBadOpcode}
	}
	if op.Tagged() != d.Tagged() {
		reason := "needs the untagged buffer model"
		if op.Tagged() {
			reason = "needs the tagged buffer model"
		}
		return r, &header.Error{Header: "rdmap", Field: "opcode", Value: uint64(op),
			Reason: op.String() + " " + reason, Err: ErrBadOpcode}
	}
	if !d.Tagged() && d.QN() != op.QueueNumber() {
		return r, &header.Error{Header: "rdmap", Field: "queue number", Value: uint64(d.QN()),
			Limit: uint64(op.QueueNumber()), Rel: "!=", Reason: "for " + op.String(),
			Err: ErrBadOpcode}
	}
	return r, nil
}

// Control returns the RDMAP control octet.
func (r RDMAP) Control() uint8 { return r[1] }

// SetControl sets the RDMAP control octet.
func (r RDMAP) SetControl(v uint8) { r[1] = v }

// Version returns RV.
func (r RDMAP) Version() uint8 { return r[1] >> 6 }

// SetVersion sets RV.
func (r RDMAP) SetVersion(v uint8) { r[1] = r[1]&^RDMAPVersionMask | v<<6 }

// Reserved returns the two reserved control bits, shifted down.
func (r RDMAP) Reserved() uint8 { return r[1] & RDMAPReservedMask >> 4 }

// SetReserved sets the two reserved control bits.
func (r RDMAP) SetReserved(v uint8) { r[1] = r[1]&^RDMAPReservedMask | v<<4&RDMAPReservedMask }

// Opcode returns the opcode.
func (r RDMAP) Opcode() Opcode { return Opcode(r[1] & RDMAPOpcodeMask) }

// SetOpcode sets the opcode.
func (r RDMAP) SetOpcode(o Opcode) { r[1] = r[1]&^RDMAPOpcodeMask | uint8(o)&RDMAPOpcodeMask }

// InvalidateSTag returns RsvdULP[1:5] of an untagged header: the STag to invalidate for
// Send with Invalidate, reserved otherwise.
func (r RDMAP) InvalidateSTag() uint32 { return binary.BigEndian.Uint32(r[2:]) }

// SetInvalidateSTag sets RsvdULP[1:5] of an untagged header.
func (r RDMAP) SetInvalidateSTag(v uint32) { binary.BigEndian.PutUint32(r[2:], v) }

// RDMAPFields describes a DDP/RDMAP header pair for encoding; the buffer model, the
// queue number and the versions follow from Opcode.
type RDMAPFields struct {
	// Opcode is the RDMAP opcode.
	Opcode Opcode
	// Last is the DDP L bit.
	Last bool
	// InvalidateSTag is sent with the Send-with-Invalidate opcodes.
	InvalidateSTag uint32
	// STag and TO address the data sink of a tagged message.
	STag uint32
	TO   uint64
	// MSN and MO place an untagged segment.
	MSN, MO uint32
}

// DDPFields returns the DDP header fields for f.
func (f *RDMAPFields) DDPFields() DDPFields {
	d := DDPFields{
		Tagged:   f.Opcode.Tagged(),
		Last:     f.Last,
		Version:  DDPVersion,
		RsvdULP0: RDMAPControl(f.Opcode),
	}
	if d.Tagged {
		d.STag, d.TO = f.STag, f.TO
	} else {
		if f.Opcode.Invalidates() {
			d.RsvdULP1 = f.InvalidateSTag
		}
		d.QN, d.MSN, d.MO = f.Opcode.QueueNumber(), f.MSN, f.MO
	}
	return d
}

// Encode writes the DDP/RDMAP header into b and returns its length (14 or 18).
func (f *RDMAPFields) Encode(b []byte) (int, error) {
	d := f.DDPFields()
	return d.Encode(b)
}

// RDMA Read Request header (RFC 5040 §4.4), the first 28 octets of the payload of an
// untagged segment on queue 1:
//
//	| Data Sink STag (32) | Data Sink TO (64) | RDMA Read Message Size (32) |
//	| Data Source STag (32) | Data Source TO (64) |
const ReadRequestLen = 28

// ReadRequest is a view of an RDMA Read Request header.
type ReadRequest []byte

// ParseReadRequest checks that b holds a Read Request header and returns it.
func ParseReadRequest(b []byte) (ReadRequest, error) {
	if len(b) < ReadRequestLen {
		return nil, truncated("rdmap", "read request length", len(b), ReadRequestLen)
	}
	return ReadRequest(b[:ReadRequestLen]), nil
}

// SinkSTag returns the data sink STag.
func (r ReadRequest) SinkSTag() uint32 { return binary.BigEndian.Uint32(r) }

// SetSinkSTag sets the data sink STag.
func (r ReadRequest) SetSinkSTag(v uint32) { binary.BigEndian.PutUint32(r, v) }

// SinkTO returns the data sink tagged offset.
func (r ReadRequest) SinkTO() uint64 { return binary.BigEndian.Uint64(r[4:]) }

// SetSinkTO sets the data sink tagged offset.
func (r ReadRequest) SetSinkTO(v uint64) { binary.BigEndian.PutUint64(r[4:], v) }

// Size returns the RDMA Read message size.
func (r ReadRequest) Size() uint32 { return binary.BigEndian.Uint32(r[12:]) }

// SetSize sets the RDMA Read message size.
func (r ReadRequest) SetSize(v uint32) { binary.BigEndian.PutUint32(r[12:], v) }

// SourceSTag returns the data source STag.
func (r ReadRequest) SourceSTag() uint32 { return binary.BigEndian.Uint32(r[16:]) }

// SetSourceSTag sets the data source STag.
func (r ReadRequest) SetSourceSTag(v uint32) { binary.BigEndian.PutUint32(r[16:], v) }

// SourceTO returns the data source tagged offset.
func (r ReadRequest) SourceTO() uint64 { return binary.BigEndian.Uint64(r[20:]) }

// SetSourceTO sets the data source tagged offset.
func (r ReadRequest) SetSourceTO(v uint64) { binary.BigEndian.PutUint64(r[20:], v) }

// Fields returns the header's fields.
func (r ReadRequest) Fields() ReadRequestFields {
	return ReadRequestFields{SinkSTag: r.SinkSTag(), SinkTO: r.SinkTO(), Size: r.Size(),
		SourceSTag: r.SourceSTag(), SourceTO: r.SourceTO()}
}

// ReadRequestFields holds the fields of a Read Request header.
type ReadRequestFields struct {
	SinkSTag   uint32
	SinkTO     uint64
	Size       uint32
	SourceSTag uint32
	SourceTO   uint64
}

// Encode writes the header into b (at least ReadRequestLen octets).
func (f *ReadRequestFields) Encode(b []byte) (int, error) {
	if len(b) < ReadRequestLen {
		return 0, truncated("rdmap", "buffer length", len(b), ReadRequestLen)
	}
	r := ReadRequest(b)
	r.SetSinkSTag(f.SinkSTag)
	r.SetSinkTO(f.SinkTO)
	r.SetSize(f.Size)
	r.SetSourceSTag(f.SourceSTag)
	r.SetSourceTO(f.SourceTO)
	return ReadRequestLen, nil
}

// AtomicOpcode is the operation of an RFC 7306 Atomic Request.
type AtomicOpcode uint8

// RFC 7306 §5.2.1 atomic operations.
const (
	AtomicFetchAdd    AtomicOpcode = 0
	AtomicSwap        AtomicOpcode = 1
	AtomicCompareSwap AtomicOpcode = 2
)

// String returns the operation's name (tshark's for 0 and 2).
func (a AtomicOpcode) String() string {
	switch a {
	case AtomicFetchAdd:
		return "FetchAdd"
	case AtomicSwap:
		return "Swap"
	case AtomicCompareSwap:
		return "CmpSwap"
	}
	return unknownPrefix + strconv.Itoa(int(a))
}

// RFC 7306 Atomic Request header (52 octets, start of the payload):
//
//	| Reserved (28) | AtomicOp (4) | Request Identifier (32) | Remote STag (32) |
//	| Remote Tagged Offset (64) | Add or Swap Data (64) | Add or Swap Mask (64) |
//	| Compare Data (64) | Compare Mask (64) |
//
// and Atomic Response header (12 octets):
//
//	| Original Request Identifier (32) | Original Remote Data Value (64) |
//
// Layouts as tshark 4.0 decodes them (iwarp_rdma.atomic.*).
const (
	// AtomicRequestLen is the length of an Atomic Request header.
	AtomicRequestLen = 52
	// AtomicResponseLen is the length of an Atomic Response header.
	AtomicResponseLen = 12
	// ImmediateDataLen is the payload length of an RFC 7306 Immediate Data message.
	ImmediateDataLen = 8
)

// AtomicRequest is a view of an RFC 7306 Atomic Request header.
type AtomicRequest []byte

// ParseAtomicRequest checks that b holds an Atomic Request header and returns it.
func ParseAtomicRequest(b []byte) (AtomicRequest, error) {
	if len(b) < AtomicRequestLen {
		return nil, truncated("atomic", "request length", len(b), AtomicRequestLen)
	}
	return AtomicRequest(b[:AtomicRequestLen]), nil
}

// Opcode returns the atomic operation (low 4 bits of the first word).
func (a AtomicRequest) Opcode() AtomicOpcode { return AtomicOpcode(a[3] & 0x0f) }

// SetOpcode sets the atomic operation and clears the reserved bits.
func (a AtomicRequest) SetOpcode(o AtomicOpcode) {
	binary.BigEndian.PutUint32(a, uint32(o)&0x0f)
}

// Reserved returns the 28 reserved bits of the first word.
func (a AtomicRequest) Reserved() uint32 { return binary.BigEndian.Uint32(a) >> 4 }

// RequestID returns the request identifier.
func (a AtomicRequest) RequestID() uint32 { return binary.BigEndian.Uint32(a[4:]) }

// SetRequestID sets the request identifier.
func (a AtomicRequest) SetRequestID(v uint32) { binary.BigEndian.PutUint32(a[4:], v) }

// RemoteSTag returns the STag of the target buffer.
func (a AtomicRequest) RemoteSTag() uint32 { return binary.BigEndian.Uint32(a[8:]) }

// SetRemoteSTag sets the STag of the target buffer.
func (a AtomicRequest) SetRemoteSTag(v uint32) { binary.BigEndian.PutUint32(a[8:], v) }

// RemoteTO returns the tagged offset of the target.
func (a AtomicRequest) RemoteTO() uint64 { return binary.BigEndian.Uint64(a[12:]) }

// SetRemoteTO sets the tagged offset of the target.
func (a AtomicRequest) SetRemoteTO(v uint64) { binary.BigEndian.PutUint64(a[12:], v) }

// AddSwapData returns the add or swap data.
func (a AtomicRequest) AddSwapData() uint64 { return binary.BigEndian.Uint64(a[20:]) }

// SetAddSwapData sets the add or swap data.
func (a AtomicRequest) SetAddSwapData(v uint64) { binary.BigEndian.PutUint64(a[20:], v) }

// AddSwapMask returns the add or swap mask.
func (a AtomicRequest) AddSwapMask() uint64 { return binary.BigEndian.Uint64(a[28:]) }

// SetAddSwapMask sets the add or swap mask.
func (a AtomicRequest) SetAddSwapMask(v uint64) { binary.BigEndian.PutUint64(a[28:], v) }

// CompareData returns the compare data.
func (a AtomicRequest) CompareData() uint64 { return binary.BigEndian.Uint64(a[36:]) }

// SetCompareData sets the compare data.
func (a AtomicRequest) SetCompareData(v uint64) { binary.BigEndian.PutUint64(a[36:], v) }

// CompareMask returns the compare mask.
func (a AtomicRequest) CompareMask() uint64 { return binary.BigEndian.Uint64(a[44:]) }

// SetCompareMask sets the compare mask.
func (a AtomicRequest) SetCompareMask(v uint64) { binary.BigEndian.PutUint64(a[44:], v) }

// AtomicResponse is a view of an RFC 7306 Atomic Response header.
type AtomicResponse []byte

// ParseAtomicResponse checks that b holds an Atomic Response header and returns it.
func ParseAtomicResponse(b []byte) (AtomicResponse, error) {
	if len(b) < AtomicResponseLen {
		return nil, truncated("atomic", "response length", len(b), AtomicResponseLen)
	}
	return AtomicResponse(b[:AtomicResponseLen]), nil
}

// RequestID returns the original request identifier.
func (a AtomicResponse) RequestID() uint32 { return binary.BigEndian.Uint32(a) }

// SetRequestID sets the original request identifier.
func (a AtomicResponse) SetRequestID(v uint32) { binary.BigEndian.PutUint32(a, v) }

// OriginalValue returns the original remote data value.
func (a AtomicResponse) OriginalValue() uint64 { return binary.BigEndian.Uint64(a[4:]) }

// SetOriginalValue sets the original remote data value.
func (a AtomicResponse) SetOriginalValue(v uint64) { binary.BigEndian.PutUint64(a[4:], v) }

// ImmediateData is a view of the 8-octet payload of an RFC 7306 Immediate Data message.
type ImmediateData []byte

// ParseImmediateData checks that b holds the 8 octets of immediate data.
func ParseImmediateData(b []byte) (ImmediateData, error) {
	if len(b) < ImmediateDataLen {
		return nil, truncated("rdmap", "immediate data length", len(b), ImmediateDataLen)
	}
	return ImmediateData(b[:ImmediateDataLen]), nil
}

// Value returns the immediate data as a big-endian integer.
func (d ImmediateData) Value() uint64 { return binary.BigEndian.Uint64(d) }

// SetValue sets the immediate data.
func (d ImmediateData) SetValue(v uint64) { binary.BigEndian.PutUint64(d, v) }
