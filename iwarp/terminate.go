package iwarp

import (
	"encoding/binary"
	"strconv"

	"github.com/softrdma/softrdma/header"
)

// Terminate message (RFC 5040 §4.8), the payload of an untagged segment on queue 2:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	| Layer | EType |  Error Code   |M|D|R|        Reserved         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  DDP Segment Length (if D)    |                               |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+                               +
//	~        Terminated DDP Header (14 or 18 octets, if D)          ~
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	~        Terminated RDMA Header (28 octets, if R)               ~
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// M: the DDP Segment Length is valid; D: the DDP header of the offending segment is
// included (preceded by its length, which is the MPA ULPDU_Length of the FPDU that
// carried it, so the two together are the first 16 or 20 octets of that FPDU); R: its
// RDMAP header (a Read Request's 28 octets) is included. The copied DDP header's own T bit
// gives its length. tshark 4.0 reads the length field only when D is set; so does this
// package.
const (
	// TerminateControlLen is the length of the Terminate control word.
	TerminateControlLen = 4
	// TerminateSegmentLenLen is the length of the DDP Segment Length field.
	TerminateSegmentLenLen = 2
	// TerminatedRDMAHeaderLen is the length of the terminated RDMA header (R).
	TerminatedRDMAHeaderLen = ReadRequestLen

	// TerminateFlagM is the M header-control bit (in octet 2).
	TerminateFlagM = 0x80
	// TerminateFlagD is the D header-control bit.
	TerminateFlagD = 0x40
	// TerminateFlagR is the R header-control bit.
	TerminateFlagR = 0x20
)

// TerminateLayer is the layer that detected the error.
type TerminateLayer uint8

// Layers (RFC 5040 §4.8).
const (
	LayerRDMAP TerminateLayer = 0
	LayerDDP   TerminateLayer = 1
	LayerLLP   TerminateLayer = 2 // MPA
)

// String returns tshark's name of the layer.
func (l TerminateLayer) String() string {
	switch l {
	case LayerRDMAP:
		return "RDMA"
	case LayerDDP:
		return "DDP"
	case LayerLLP:
		return "LLP"
	}
	return unknownPrefix + strconv.Itoa(int(l))
}

// Error types, by layer.
const (
	// RDMAP layer (RFC 5040 §4.8).
	ETypeRDMAPLocalCatastrophic = 0x0
	ETypeRDMAPRemoteProtection  = 0x1
	ETypeRDMAPRemoteOperation   = 0x2

	// DDP layer (RFC 5041 §7.2).
	ETypeDDPLocalCatastrophic = 0x0
	ETypeDDPTaggedBuffer      = 0x1
	ETypeDDPUntaggedBuffer    = 0x2
	ETypeDDPReservedForLLP    = 0x3

	// LLP layer (RFC 5044 §8).
	ETypeLLPMPA = 0x0
)

// Error codes, by layer and error type.
const (
	// RDMAP, local catastrophic error.
	ECodeRDMAPLocalCatastrophic = 0x00
	// RDMAP, remote protection error (and 0x09, 0xff also under remote operation).
	ECodeRDMAPInvalidSTag        = 0x00
	ECodeRDMAPBaseBounds         = 0x01
	ECodeRDMAPAccessRights       = 0x02
	ECodeRDMAPSTagNotAssociated  = 0x03
	ECodeRDMAPTOWrap             = 0x04
	ECodeRDMAPInvalidVersion     = 0x05 // remote operation
	ECodeRDMAPUnexpectedOpcode   = 0x06 // remote operation
	ECodeRDMAPCatastrophicStream = 0x07 // remote operation
	ECodeRDMAPCatastrophicGlobal = 0x08 // remote operation
	ECodeRDMAPCannotInvalidate   = 0x09
	ECodeRDMAPUnspecified        = 0xff

	// DDP, local catastrophic error.
	ECodeDDPLocalCatastrophic = 0x00
	// DDP, tagged buffer error.
	ECodeDDPTaggedInvalidSTag       = 0x00
	ECodeDDPTaggedBaseBounds        = 0x01
	ECodeDDPTaggedSTagNotAssociated = 0x02
	ECodeDDPTaggedTOWrap            = 0x03
	ECodeDDPTaggedInvalidVersion    = 0x04
	// DDP, untagged buffer error.
	ECodeDDPUntaggedInvalidQN      = 0x01
	ECodeDDPUntaggedNoBuffer       = 0x02 // invalid MSN: no buffer available
	ECodeDDPUntaggedMSNRange       = 0x03 // invalid MSN: MSN range is not valid
	ECodeDDPUntaggedInvalidMO      = 0x04
	ECodeDDPUntaggedTooLong        = 0x05 // DDP message too long for available buffer
	ECodeDDPUntaggedInvalidVersion = 0x06

	// LLP (MPA) error; 5 to 7 were added by RFC 6581 §9.
	ECodeMPAConnectionLost      = 0x01 // TCP connection closed, terminated or lost
	ECodeMPACRC                 = 0x02
	ECodeMPAMarkerMismatch      = 0x03
	ECodeMPAInvalidFrame        = 0x04 // invalid MPA Request or Reply frame
	ECodeMPALocalCatastrophic   = 0x05
	ECodeMPAInsufficientIRD     = 0x06
	ECodeMPANoMatchingRTROption = 0x07
)

// TerminateETypeName returns tshark's name of an error type of a layer.
func TerminateETypeName(l TerminateLayer, etype uint8) string {
	switch l {
	case LayerRDMAP:
		switch etype {
		case ETypeRDMAPLocalCatastrophic:
			return "Local Catastrophic Error"
		case ETypeRDMAPRemoteProtection:
			return "Remote Protection Error"
		case ETypeRDMAPRemoteOperation:
			return "Remote Operation Error"
		}
	case LayerDDP:
		switch etype {
		case ETypeDDPLocalCatastrophic:
			return "Local Catastrophic Error"
		case ETypeDDPTaggedBuffer:
			return "Tagged Buffer Error"
		case ETypeDDPUntaggedBuffer:
			return "Untagged Buffer Error"
		case ETypeDDPReservedForLLP:
			return "Reserved for the use by the LLP"
		}
	case LayerLLP:
		if etype == ETypeLLPMPA {
			return "MPA Error"
		}
	}
	return unknownPrefix + strconv.Itoa(int(etype))
}

var rdmapECodeNames = map[uint8]string{
	ECodeRDMAPInvalidSTag:        "Invalid STag",
	ECodeRDMAPBaseBounds:         "Base or bounds violation",
	ECodeRDMAPAccessRights:       "Access rights violation",
	ECodeRDMAPSTagNotAssociated:  "STag not associated with RDMAP Stream",
	ECodeRDMAPTOWrap:             "TO wrap",
	ECodeRDMAPInvalidVersion:     "Invalid RDMAP version",
	ECodeRDMAPUnexpectedOpcode:   "Unexpected OpCode",
	ECodeRDMAPCatastrophicStream: "Catastrophic error, localized to RDMAP Stream",
	ECodeRDMAPCatastrophicGlobal: "Catastrophic error, global",
	ECodeRDMAPCannotInvalidate:   "STag cannot be Invalidated",
	ECodeRDMAPUnspecified:        "Unspecific Error",
}

var ddpTaggedECodeNames = map[uint8]string{
	ECodeDDPTaggedInvalidSTag:       "Invalid STag",
	ECodeDDPTaggedBaseBounds:        "Base or bounds violation",
	ECodeDDPTaggedSTagNotAssociated: "STag not associated with DDP Stream",
	ECodeDDPTaggedTOWrap:            "TO wrap",
	ECodeDDPTaggedInvalidVersion:    "Invalid DDP version",
}

var ddpUntaggedECodeNames = map[uint8]string{
	ECodeDDPUntaggedInvalidQN:      "Invalid QN",
	ECodeDDPUntaggedNoBuffer:       "Invalid MSN - no buffer available",
	ECodeDDPUntaggedMSNRange:       "Invalid MSN - MSN range is not valid",
	ECodeDDPUntaggedInvalidMO:      "Invalid MO",
	ECodeDDPUntaggedTooLong:        "DDP Message too long for available buffer",
	ECodeDDPUntaggedInvalidVersion: "Invalid DDP version",
}

var mpaECodeNames = map[uint8]string{
	ECodeMPAConnectionLost:      "TCP connection closed, terminated or lost",
	ECodeMPACRC:                 "MPA CRC Error",
	ECodeMPAMarkerMismatch:      "MPA Marker and ULPDU Length field mismatch",
	ECodeMPAInvalidFrame:        "Invalid MPA Request Frame or MPA Response Frame",
	ECodeMPALocalCatastrophic:   "Local Catastrophic Error",
	ECodeMPAInsufficientIRD:     "Insufficient IRD Resources",
	ECodeMPANoMatchingRTROption: "No Matching RTR Option",
}

// TerminateErrorName returns tshark's name of an error code for a layer and error type.
func TerminateErrorName(l TerminateLayer, etype, code uint8) string {
	var names map[uint8]string
	switch {
	case l == LayerRDMAP && etype == ETypeRDMAPLocalCatastrophic && code == 0:
		return "Local Catastrophic Error"
	case l == LayerRDMAP:
		names = rdmapECodeNames
	case l == LayerDDP && etype == ETypeDDPLocalCatastrophic && code == 0:
		return "Local Catastrophic Error"
	case l == LayerDDP && etype == ETypeDDPTaggedBuffer:
		names = ddpTaggedECodeNames
	case l == LayerDDP && etype == ETypeDDPUntaggedBuffer:
		names = ddpUntaggedECodeNames
	case l == LayerLLP && etype == ETypeLLPMPA:
		names = mpaECodeNames
	}
	if s, ok := names[code]; ok {
		return s
	}
	return unknownPrefix + strconv.Itoa(int(code))
}

// Terminate is a view of a Terminate message (the DDP payload of a Terminate segment).
type Terminate []byte

// ParseTerminate checks that b holds a complete Terminate message and returns it (cut to
// its length: control, then the headers its D and R bits announce).
func ParseTerminate(b []byte) (Terminate, error) {
	if len(b) < TerminateControlLen {
		return nil, truncated("terminate", "length", len(b), TerminateControlLen)
	}
	t := Terminate(b)
	n := TerminateControlLen
	if t.DDPHeaderIncluded() {
		// The copied DDP control octet decides the header's length.
		if len(b) < n+TerminateSegmentLenLen+1 {
			return nil, truncated("terminate", "length", len(b), n+TerminateSegmentLenLen+1)
		}
		n += TerminateSegmentLenLen + DDP(b[n+TerminateSegmentLenLen:]).HeaderLen()
	}
	if t.RDMAHeaderIncluded() {
		n += TerminatedRDMAHeaderLen
	}
	if len(b) < n {
		return nil, truncated("terminate", "length", len(b), n)
	}
	return t[:n], nil
}

// Layer returns the layer that detected the error.
func (t Terminate) Layer() TerminateLayer { return TerminateLayer(t[0] >> 4) }

// SetLayer sets the layer.
func (t Terminate) SetLayer(l TerminateLayer) { t[0] = t[0]&0x0f | uint8(l)<<4 }

// EType returns the error type.
func (t Terminate) EType() uint8 { return t[0] & 0x0f }

// SetEType sets the error type.
func (t Terminate) SetEType(v uint8) { t[0] = t[0]&0xf0 | v&0x0f }

// ErrorCode returns the error code.
func (t Terminate) ErrorCode() uint8 { return t[1] }

// SetErrorCode sets the error code.
func (t Terminate) SetErrorCode(v uint8) { t[1] = v }

func (t Terminate) setFlag(f uint8, v bool) {
	if v {
		t[2] |= f
	} else {
		t[2] &^= f
	}
}

// SegmentLengthValid returns the M bit: the DDP Segment Length field is valid.
func (t Terminate) SegmentLengthValid() bool { return t[2]&TerminateFlagM != 0 }

// SetSegmentLengthValid sets the M bit.
func (t Terminate) SetSegmentLengthValid(v bool) { t.setFlag(TerminateFlagM, v) }

// DDPHeaderIncluded returns the D bit: the terminated DDP header follows.
func (t Terminate) DDPHeaderIncluded() bool { return t[2]&TerminateFlagD != 0 }

// SetDDPHeaderIncluded sets the D bit.
func (t Terminate) SetDDPHeaderIncluded(v bool) { t.setFlag(TerminateFlagD, v) }

// RDMAHeaderIncluded returns the R bit: the terminated RDMA header follows.
func (t Terminate) RDMAHeaderIncluded() bool { return t[2]&TerminateFlagR != 0 }

// SetRDMAHeaderIncluded sets the R bit.
func (t Terminate) SetRDMAHeaderIncluded(v bool) { t.setFlag(TerminateFlagR, v) }

// Reserved returns the 13 reserved bits of the control word.
func (t Terminate) Reserved() uint16 { return binary.BigEndian.Uint16(t[2:]) & 0x1fff }

// DDPSegmentLength returns the length of the offending DDP segment (D set).
func (t Terminate) DDPSegmentLength() uint16 {
	return binary.BigEndian.Uint16(t[TerminateControlLen:])
}

// SetDDPSegmentLength sets the DDP Segment Length field (D set).
func (t Terminate) SetDDPSegmentLength(v uint16) {
	binary.BigEndian.PutUint16(t[TerminateControlLen:], v)
}

// DDPHeader returns the terminated DDP header (nil unless D is set).
func (t Terminate) DDPHeader() DDP {
	if !t.DDPHeaderIncluded() {
		return nil
	}
	d := DDP(t[TerminateControlLen+TerminateSegmentLenLen:])
	return d[:d.HeaderLen()]
}

// RDMAHeader returns the terminated RDMA header (nil unless R is set).
func (t Terminate) RDMAHeader() []byte {
	if !t.RDMAHeaderIncluded() {
		return nil
	}
	off := TerminateControlLen
	if d := t.DDPHeader(); d != nil {
		off += TerminateSegmentLenLen + len(d)
	}
	return t[off : off+TerminatedRDMAHeaderLen]
}

// Fields returns the message's fields; the headers alias the view.
func (t Terminate) Fields() TerminateFields {
	f := TerminateFields{
		Layer:              t.Layer(),
		EType:              t.EType(),
		ErrorCode:          t.ErrorCode(),
		SegmentLengthValid: t.SegmentLengthValid(),
		DDPHeader:          t.DDPHeader(),
		RDMAHeader:         t.RDMAHeader(),
	}
	if f.DDPHeader != nil {
		f.DDPSegmentLength = t.DDPSegmentLength()
	}
	return f
}

// TerminateFields holds the fields of a Terminate message for encoding.
type TerminateFields struct {
	Layer     TerminateLayer
	EType     uint8
	ErrorCode uint8
	// SegmentLengthValid is the M bit.
	SegmentLengthValid bool
	// DDPSegmentLength is sent when DDPHeader is set.
	DDPSegmentLength uint16
	// DDPHeader is the offending DDP header (14 or 18 octets, by its T bit); nil clears D.
	DDPHeader []byte
	// RDMAHeader is the offending RDMA header (28 octets); nil clears R.
	RDMAHeader []byte
}

// Len returns the encoded length.
func (f *TerminateFields) Len() int {
	n := TerminateControlLen
	if f.DDPHeader != nil {
		n += TerminateSegmentLenLen + len(f.DDPHeader)
	}
	if f.RDMAHeader != nil {
		n += TerminatedRDMAHeaderLen
	}
	return n
}

// Encode writes the message into b (at least f.Len() octets) and returns its length.
func (f *TerminateFields) Encode(b []byte) (int, error) {
	if f.DDPHeader != nil && (len(f.DDPHeader) == 0 || len(f.DDPHeader) != DDP(f.DDPHeader).HeaderLen()) {
		return 0, &header.Error{Header: "terminate", Field: "DDP header length",
			Value: uint64(len(f.DDPHeader)), Reason: "not 14 (tagged) or 18 (untagged)",
			Err: ErrBadValue}
	}
	if f.RDMAHeader != nil && len(f.RDMAHeader) != TerminatedRDMAHeaderLen {
		return 0, &header.Error{Header: "terminate", Field: "RDMA header length",
			Value: uint64(len(f.RDMAHeader)), Limit: TerminatedRDMAHeaderLen, Rel: "!=",
			Err: ErrBadValue}
	}
	n := f.Len()
	if len(b) < n {
		return 0, truncated("terminate", "buffer length", len(b), n)
	}
	t := Terminate(b)
	t[0] = uint8(f.Layer)<<4 | f.EType&0x0f
	t[1] = f.ErrorCode
	t[2], t[3] = 0, 0
	t.SetSegmentLengthValid(f.SegmentLengthValid)
	off := TerminateControlLen
	if f.DDPHeader != nil {
		t.SetDDPHeaderIncluded(true)
		t.SetDDPSegmentLength(f.DDPSegmentLength)
		off += TerminateSegmentLenLen
		off += copy(b[off:], f.DDPHeader)
	}
	if f.RDMAHeader != nil {
		t.SetRDMAHeaderIncluded(true)
		copy(b[off:], f.RDMAHeader)
	}
	return n, nil
}
