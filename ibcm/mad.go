package ibcm

import (
	"encoding/binary"
	"strconv"

	"github.com/softrdma/softrdma/header"
	"github.com/softrdma/softrdma/ibtransport"
)

// MAD is a Management Datagram (IBTA Vol. 1 §13.4): the 256-byte payload of a UD
// SEND Only to QP1 (the GSI; QP0, the SMI, does not exist on RoCE). The common
// header (§13.4.2) is followed by 232 bytes of class-specific data:
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|  BaseVersion  |   MgmtClass   | ClassVersion  |R|   Method    |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|            Status             |         ClassSpecific         |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                   TransactionID (64 bits)                     |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|          AttributeID          |           Reserved            |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                      AttributeModifier                        |
//	+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//	|                   Data (232 bytes) ...                        |
//
// Methods do not check the length; [DecodeMAD] and [MADFromPacket] do.
type MAD []byte

const (
	// MADLen is the length of a MAD.
	MADLen = 256
	// MADHeaderLen is the length of the common MAD header.
	MADHeaderLen = 24
	// MADDataLen is the length of the class-specific data.
	MADDataLen = MADLen - MADHeaderLen
	// MADBaseVersion is the BaseVersion of IB MADs.
	MADBaseVersion = 1
	// GSIQPN is the QP number of the General Services Interface, which receives MADs.
	GSIQPN = 1
	// GSIQKey is the well-known Q_Key of QP1 (IBTA Vol. 1 ch. 13): every MAD sent to
	// QP1 carries it in its DETH.
	GSIQKey = 0x80010000
)

// MgmtClass is a MAD management class (IBTA Vol. 1 §13.4).
type MgmtClass uint8

// Management classes.
const (
	MgmtClassSubnMgmt       MgmtClass = 0x01 // subnet management, LID routed
	MgmtClassSubnAdm        MgmtClass = 0x03 // subnet administration
	MgmtClassPerf           MgmtClass = 0x04 // performance management
	MgmtClassBM             MgmtClass = 0x05 // baseboard management
	MgmtClassDevMgt         MgmtClass = 0x06 // device management
	MgmtClassCM             MgmtClass = 0x07 // communication management (ch. 12)
	MgmtClassSNMP           MgmtClass = 0x08 // SNMP tunneling
	MgmtClassSubnMgmtDirect MgmtClass = 0x81 // subnet management, directed route
)

// String returns the class name, e.g. "CM".
func (c MgmtClass) String() string {
	switch c {
	case MgmtClassSubnMgmt:
		return "SubnMgmt"
	case MgmtClassSubnAdm:
		return "SubnAdm"
	case MgmtClassPerf:
		return "Perf"
	case MgmtClassBM:
		return "BM"
	case MgmtClassDevMgt:
		return "DevMgt"
	case MgmtClassCM:
		return "CM"
	case MgmtClassSNMP:
		return "SNMP"
	case MgmtClassSubnMgmtDirect:
		return "SubnMgmtDirectedRoute"
	}
	return "MgmtClass(0x" + strconv.FormatUint(uint64(c), 16) + ")"
}

// MADMethod is a MAD method (IBTA Vol. 1 §13.4), including the response bit 0x80.
type MADMethod uint8

// Methods.
const (
	MADMethodGet          MADMethod = 0x01
	MADMethodSet          MADMethod = 0x02
	MADMethodSend         MADMethod = 0x03
	MADMethodTrap         MADMethod = 0x05
	MADMethodReport       MADMethod = 0x06
	MADMethodTrapRepress  MADMethod = 0x07
	MADMethodGetResp      MADMethod = 0x81
	MADMethodReportResp   MADMethod = 0x86
	MADMethodResponseFlag MADMethod = 0x80 // the R bit
)

// String returns the method name as tshark prints it, e.g. "Send".
func (m MADMethod) String() string {
	switch m {
	case MADMethodGet:
		return "Get"
	case MADMethodSet:
		return "Set"
	case MADMethodSend:
		return "Send"
	case MADMethodTrap:
		return "Trap"
	case MADMethodReport:
		return "Report"
	case MADMethodTrapRepress:
		return "TrapRepress"
	case MADMethodGetResp:
		return "GetResp"
	case MADMethodReportResp:
		return "ReportResp"
	}
	return "MADMethod(0x" + strconv.FormatUint(uint64(m), 16) + ")"
}

// BaseVersion returns the MAD base version (1).
func (m MAD) BaseVersion() uint8 { return m[0] }

// MgmtClass returns the management class.
func (m MAD) MgmtClass() MgmtClass { return MgmtClass(m[1]) }

// ClassVersion returns the version of the management class (2 for the CM).
func (m MAD) ClassVersion() uint8 { return m[2] }

// Method returns the method, response bit included.
func (m MAD) Method() MADMethod { return MADMethod(m[3]) }

// IsResponse reports whether the method's response bit is set.
func (m MAD) IsResponse() bool { return m[3]&0x80 != 0 }

// Status returns the status field.
func (m MAD) Status() uint16 { return binary.BigEndian.Uint16(m[4:]) }

// ClassSpecific returns the class-specific header field.
func (m MAD) ClassSpecific() uint16 { return binary.BigEndian.Uint16(m[6:]) }

// TransactionID returns the transaction ID.
func (m MAD) TransactionID() uint64 { return binary.BigEndian.Uint64(m[8:]) }

// AttributeID returns the attribute ID (for the CM: which message, see Attribute).
func (m MAD) AttributeID() uint16 { return binary.BigEndian.Uint16(m[16:]) }

// AttributeModifier returns the attribute modifier.
func (m MAD) AttributeModifier() uint32 { return binary.BigEndian.Uint32(m[20:]) }

// Data returns the 232 bytes of class-specific data.
func (m MAD) Data() []byte { return m[MADHeaderLen:MADLen:MADLen] }

// SetBaseVersion sets the base version.
func (m MAD) SetBaseVersion(v uint8) { m[0] = v }

// SetMgmtClass sets the management class.
func (m MAD) SetMgmtClass(c MgmtClass) { m[1] = uint8(c) }

// SetClassVersion sets the class version.
func (m MAD) SetClassVersion(v uint8) { m[2] = v }

// SetMethod sets the method, response bit included.
func (m MAD) SetMethod(x MADMethod) { m[3] = uint8(x) }

// SetStatus sets the status field.
func (m MAD) SetStatus(s uint16) { binary.BigEndian.PutUint16(m[4:], s) }

// SetClassSpecific sets the class-specific header field.
func (m MAD) SetClassSpecific(v uint16) { binary.BigEndian.PutUint16(m[6:], v) }

// SetTransactionID sets the transaction ID.
func (m MAD) SetTransactionID(id uint64) { binary.BigEndian.PutUint64(m[8:], id) }

// SetAttributeID sets the attribute ID.
func (m MAD) SetAttributeID(id uint16) { binary.BigEndian.PutUint16(m[16:], id) }

// SetAttributeModifier sets the attribute modifier.
func (m MAD) SetAttributeModifier(v uint32) { binary.BigEndian.PutUint32(m[20:], v) }

// MADFields holds the common MAD header, for [MAD.Encode].
type MADFields struct {
	BaseVersion       uint8     // 0 means MADBaseVersion
	MgmtClass         MgmtClass // management class
	ClassVersion      uint8     // class version
	Method            MADMethod // method, response bit included
	Status            uint16    // status
	ClassSpecific     uint16    // class-specific field
	TransactionID     uint64    // transaction ID
	AttributeID       uint16    // attribute ID
	AttributeModifier uint32    // attribute modifier
}

// Encode writes the common header f into m[:MADHeaderLen] (the reserved field
// becomes 0); the data is left alone.
func (m MAD) Encode(f *MADFields) {
	_ = m[MADHeaderLen-1]
	v := f.BaseVersion
	if v == 0 {
		v = MADBaseVersion
	}
	m.SetBaseVersion(v)
	m.SetMgmtClass(f.MgmtClass)
	m.SetClassVersion(f.ClassVersion)
	m.SetMethod(f.Method)
	m.SetStatus(f.Status)
	m.SetClassSpecific(f.ClassSpecific)
	m.SetTransactionID(f.TransactionID)
	m.SetAttributeID(f.AttributeID)
	binary.BigEndian.PutUint16(m[18:], 0)
	m.SetAttributeModifier(f.AttributeModifier)
}

// Fields returns the common header of m.
func (m MAD) Fields() MADFields {
	return MADFields{
		BaseVersion:       m.BaseVersion(),
		MgmtClass:         m.MgmtClass(),
		ClassVersion:      m.ClassVersion(),
		Method:            m.Method(),
		Status:            m.Status(),
		ClassSpecific:     m.ClassSpecific(),
		TransactionID:     m.TransactionID(),
		AttributeID:       m.AttributeID(),
		AttributeModifier: m.AttributeModifier(),
	}
}

// DecodeMAD checks that b is one MAD (exactly MADLen bytes, base version 1) and
// returns it as a view of b.
func DecodeMAD(b []byte) (MAD, error) {
	if len(b) < MADLen {
		return nil, header.Truncated("mad", "length", len(b), MADLen)
	}
	if len(b) > MADLen {
		return nil, header.Invalid("mad", "length", uint64(len(b)), ">", MADLen)
	}
	if v := b[0]; v != MADBaseVersion {
		return nil, header.Unsupported("mad", "base version", uint64(v), "!=", MADBaseVersion)
	}
	return MAD(b[:MADLen:MADLen]), nil
}

// MADFromPacket returns the MAD that p, a decoded IB packet, carries to the GSI:
// p must be a UD SEND Only to QP1 whose DETH has the Q_Key GSIQKey and whose payload
// is one MAD. It returns a view of p.Payload.
func MADFromPacket(p *ibtransport.Packet) (MAD, error) {
	if len(p.BTH) < ibtransport.BTHLen {
		return nil, header.Truncated("mad", "bth length", len(p.BTH), ibtransport.BTHLen)
	}
	if op := p.BTH.Opcode(); op != ibtransport.OpcodeUDSendOnly {
		return nil, header.Invalid("mad", "bth opcode", uint64(op), "!=", uint64(ibtransport.OpcodeUDSendOnly)).InHex(1)
	}
	if qp := p.BTH.DestQP(); qp != GSIQPN {
		return nil, header.Invalid("mad", "bth destination qp", uint64(qp), "!=", GSIQPN)
	}
	if len(p.DETH) < ibtransport.DETHLen {
		return nil, header.Truncated("mad", "deth length", len(p.DETH), ibtransport.DETHLen)
	}
	if k := p.DETH.QKey(); k != GSIQKey {
		return nil, header.Invalid("mad", "deth q_key", uint64(k), "!=", GSIQKey).InHex(1)
	}
	return DecodeMAD(p.Payload)
}
