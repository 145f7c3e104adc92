package ibcm

import (
	"encoding/binary"
	"net/netip"
	"strconv"

	"github.com/softrdma/softrdma/header"
)

// The Communication Manager (IBTA Vol. 1 ch. 12) speaks MADs of class 0x07, class
// version 2, method Send. Each message type is an attribute; its contents fill the
// 232-byte MAD data. The views below (REQ, REP, ...) are over that data, i.e.
// MAD.Data(), with the byte offsets of IBTA Vol. 1 Tables 106-120 (the kernel's
// include/rdma/ibta_vol1_c12.h uses the same offsets); multi-bit fields are numbered
// from the most significant bit of their byte, as in the spec. Every view is
// MADDataLen bytes; methods do not check the length: [Check] does.

// ClassVersion is the class version of the CM MADs the kernel sends (IBTA 1.2 and later).
const ClassVersion = 2

// Attribute is a CM attribute ID: which CM message a MAD is.
type Attribute uint16

// CM attributes (IBTA Vol. 1 ch. 12; names as tshark prints them).
const (
	AttrClassPortInfo Attribute = 0x0001
	AttrREQ           Attribute = 0x0010 // ConnectRequest
	AttrMRA           Attribute = 0x0011 // MsgRcptAck
	AttrREJ           Attribute = 0x0012 // ConnectReject
	AttrREP           Attribute = 0x0013 // ConnectReply
	AttrRTU           Attribute = 0x0014 // ReadyToUse
	AttrDREQ          Attribute = 0x0015 // DisconnectRequest
	AttrDREP          Attribute = 0x0016 // DisconnectReply
	AttrSIDRREQ       Attribute = 0x0017 // ServiceIDResReq
	AttrSIDRREP       Attribute = 0x0018 // ServiceIDResReqResp
	AttrLAP           Attribute = 0x0019 // LoadAlternatePath
	AttrAPR           Attribute = 0x001A // AlternatePathResponse
)

// String returns the attribute's name as tshark prints it ("ConnectRequest", ...).
func (a Attribute) String() string {
	switch a {
	case AttrClassPortInfo:
		return "ClassPortInfo"
	case AttrREQ:
		return "ConnectRequest"
	case AttrMRA:
		return "MsgRcptAck"
	case AttrREJ:
		return "ConnectReject"
	case AttrREP:
		return "ConnectReply"
	case AttrRTU:
		return "ReadyToUse"
	case AttrDREQ:
		return "DisconnectRequest"
	case AttrDREP:
		return "DisconnectReply"
	case AttrSIDRREQ:
		return "ServiceIDResReq"
	case AttrSIDRREP:
		return "ServiceIDResReqResp"
	case AttrLAP:
		return "LoadAlternatePath"
	case AttrAPR:
		return "AlternatePathResponse"
	}
	return "CMAttribute(0x" + strconv.FormatUint(uint64(a), 16) + ")"
}

// Known reports whether a is one of the attributes above.
func (a Attribute) Known() bool {
	return a == AttrClassPortInfo || a >= AttrREQ && a <= AttrAPR
}

// Attribute returns m's attribute ID as a CM attribute.
func (m MAD) Attribute() Attribute { return Attribute(m.AttributeID()) }

// Check checks that m (already a valid MAD, see DecodeMAD) is a CM MAD of class
// version 2 with a known attribute.
func Check(m MAD) error {
	if len(m) < MADLen {
		return header.Truncated("cm", "mad length", len(m), MADLen)
	}
	if c := m.MgmtClass(); c != MgmtClassCM {
		return header.Invalid("cm", "mgmt class", uint64(c), "!=", uint64(MgmtClassCM))
	}
	if v := m.ClassVersion(); v != ClassVersion {
		return header.Unsupported("cm", "class version", uint64(v), "!=", ClassVersion)
	}
	if a := m.Attribute(); !a.Known() {
		return header.Unsupported("cm", "attribute id", uint64(a), "", 0).InHex(1).Because("unknown")
	}
	return nil
}

// Encode writes the header of a CM MAD (class 0x07, version 2, method Send) for
// attribute a into m and clears the data; fill it through the view, e.g.
// m.REQ().SetLocalCommID(...).
func Encode(m MAD, a Attribute, transactionID uint64) {
	m.Encode(&MADFields{
		MgmtClass:     MgmtClassCM,
		ClassVersion:  ClassVersion,
		Method:        MADMethodSend,
		TransactionID: transactionID,
		AttributeID:   uint16(a),
	})
	clear(m[MADHeaderLen:MADLen])
}

// REQ returns the data of m as a REQ.
func (m MAD) REQ() REQ { return REQ(m.Data()) }

// MRA returns the data of m as an MRA.
func (m MAD) MRA() MRA { return MRA(m.Data()) }

// REJ returns the data of m as a REJ.
func (m MAD) REJ() REJ { return REJ(m.Data()) }

// REP returns the data of m as a REP.
func (m MAD) REP() REP { return REP(m.Data()) }

// RTU returns the data of m as an RTU.
func (m MAD) RTU() RTU { return RTU(m.Data()) }

// DREQ returns the data of m as a DREQ.
func (m MAD) DREQ() DREQ { return DREQ(m.Data()) }

// DREP returns the data of m as a DREP.
func (m MAD) DREP() DREP { return DREP(m.Data()) }

// SIDRREQ returns the data of m as a SIDR_REQ.
func (m MAD) SIDRREQ() SIDRREQ { return SIDRREQ(m.Data()) }

// SIDRREP returns the data of m as a SIDR_REP.
func (m MAD) SIDRREP() SIDRREP { return SIDRREP(m.Data()) }

func get24(b []byte) uint32    { return uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]) }
func put24(b []byte, v uint32) { b[0], b[1], b[2] = byte(v>>16), byte(v>>8), byte(v) }

// getBits returns the n bits of b[i] that start at bit `from` counted from the MSB.
func getBits(b []byte, i, from, n int) uint8 { return b[i] >> (8 - from - n) & (1<<n - 1) }

// setBits sets the n bits of b[i] that start at bit `from` counted from the MSB.
func setBits(b []byte, i, from, n int, v uint8) {
	shift := 8 - from - n
	mask := uint8(1<<n-1) << shift
	b[i] = b[i]&^mask | v<<shift&mask
}

func getBool(b []byte, i, from int) bool { return getBits(b, i, from, 1) != 0 }

func setBool(b []byte, i, from int, v bool) {
	var x uint8
	if v {
		x = 1
	}
	setBits(b, i, from, 1, x)
}

func gid(b []byte) (g [16]byte) { copy(g[:], b[:16]); return g }

// ---- REQ (IBTA Vol. 1 Table 106) ----

// REQ is the data of a REQ (ConnectRequest) MAD.
type REQ []byte

// Offsets in the REQ data.
const (
	cmREQPrimaryPath   = 52
	cmREQAlternatePath = 96
	cmREQPrivateData   = 140
	// REQPrivateDataLen is the length of a REQ's private data.
	REQPrivateDataLen = MADDataLen - cmREQPrivateData
)

// LocalCommID returns the sender's communication ID.
func (r REQ) LocalCommID() uint32 { return binary.BigEndian.Uint32(r[0:]) }

// ServiceID returns the service ID (see CMAServiceID for rdma_cm's).
func (r REQ) ServiceID() uint64 { return binary.BigEndian.Uint64(r[8:]) }

// LocalCAGUID returns the sender's CA GUID.
func (r REQ) LocalCAGUID() uint64 { return binary.BigEndian.Uint64(r[16:]) }

// LocalQKey returns the sender's Q_Key (RD only; 0 for RC).
func (r REQ) LocalQKey() uint32 { return binary.BigEndian.Uint32(r[28:]) }

// LocalQPN returns the sender's QP number.
func (r REQ) LocalQPN() uint32 { return get24(r[32:]) }

// ResponderResources returns how many RDMA READs/atomics the sender accepts at once.
func (r REQ) ResponderResources() uint8 { return r[35] }

// LocalEECN returns the sender's EE context number (RD only).
func (r REQ) LocalEECN() uint32 { return get24(r[36:]) }

// InitiatorDepth returns how many RDMA READs/atomics the sender issues at once.
func (r REQ) InitiatorDepth() uint8 { return r[39] }

// RemoteEECN returns the receiver's EE context number (RD only).
func (r REQ) RemoteEECN() uint32 { return get24(r[40:]) }

// RemoteCMResponseTimeout returns the 5-bit timeout exponent the sender waits for an answer.
func (r REQ) RemoteCMResponseTimeout() uint8 { return getBits(r, 43, 0, 5) }

// TransportServiceType returns the transport: 0 RC, 1 UC, 2 RD.
func (r REQ) TransportServiceType() uint8 { return getBits(r, 43, 5, 2) }

// EndToEndFlowControl reports whether the sender uses end-to-end flow control.
func (r REQ) EndToEndFlowControl() bool { return getBool(r, 43, 7) }

// StartingPSN returns the PSN the sender's QP expects first, i.e. the first PSN the
// receiver of the REQ sends with. (The captures settle the direction: the passive
// side's first request carries the REQ's Starting PSN, the active side's first
// request the REP's.)
func (r REQ) StartingPSN() uint32 { return get24(r[44:]) }

// LocalCMResponseTimeout returns the 5-bit timeout exponent the sender answers within.
func (r REQ) LocalCMResponseTimeout() uint8 { return getBits(r, 47, 0, 5) }

// RetryCount returns the transport retry count.
func (r REQ) RetryCount() uint8 { return getBits(r, 47, 5, 3) }

// PKey returns the partition key.
func (r REQ) PKey() uint16 { return binary.BigEndian.Uint16(r[48:]) }

// PathMTU returns the path MTU code (1 = 256 ... 5 = 4096 bytes).
func (r REQ) PathMTU() uint8 { return getBits(r, 50, 0, 4) }

// RDCExists reports whether an RD channel exists (RD only).
func (r REQ) RDCExists() bool { return getBool(r, 50, 4) }

// RNRRetryCount returns the RNR retry count (7 = infinite).
func (r REQ) RNRRetryCount() uint8 { return getBits(r, 50, 5, 3) }

// MaxCMRetries returns how often the sender retries CM messages.
func (r REQ) MaxCMRetries() uint8 { return getBits(r, 51, 0, 4) }

// SRQ reports whether the sender's QP uses a shared receive queue.
func (r REQ) SRQ() bool { return getBool(r, 51, 4) }

// ExtendedTransportType returns the extended transport type (1 = XRC).
func (r REQ) ExtendedTransportType() uint8 { return getBits(r, 51, 5, 3) }

// PrimaryPath returns the primary path.
func (r REQ) PrimaryPath() Path {
	return Path(r[cmREQPrimaryPath:cmREQAlternatePath:cmREQAlternatePath])
}

// AlternatePath returns the alternate path (all zero if none).
func (r REQ) AlternatePath() Path {
	return Path(r[cmREQAlternatePath:cmREQPrivateData:cmREQPrivateData])
}

// SAPSupported reports the SAP Supported bit (IBTA 1.4; byte 139 bit 5).
func (r REQ) SAPSupported() bool { return getBool(r, 139, 5) }

// PrivateData returns the REQ's 92 bytes of private data (rdma_cm puts a CMAHeader first).
func (r REQ) PrivateData() []byte { return r[cmREQPrivateData:MADDataLen:MADDataLen] }

// SetLocalCommID sets the sender's communication ID.
func (r REQ) SetLocalCommID(id uint32) { binary.BigEndian.PutUint32(r[0:], id) }

// SetServiceID sets the service ID.
func (r REQ) SetServiceID(id uint64) { binary.BigEndian.PutUint64(r[8:], id) }

// SetLocalCAGUID sets the sender's CA GUID.
func (r REQ) SetLocalCAGUID(g uint64) { binary.BigEndian.PutUint64(r[16:], g) }

// SetLocalQKey sets the sender's Q_Key.
func (r REQ) SetLocalQKey(k uint32) { binary.BigEndian.PutUint32(r[28:], k) }

// SetLocalQPN sets the sender's QP number.
func (r REQ) SetLocalQPN(qpn uint32) { put24(r[32:], qpn) }

// SetResponderResources sets the responder resources.
func (r REQ) SetResponderResources(n uint8) { r[35] = n }

// SetLocalEECN sets the sender's EE context number.
func (r REQ) SetLocalEECN(n uint32) { put24(r[36:], n) }

// SetInitiatorDepth sets the initiator depth.
func (r REQ) SetInitiatorDepth(n uint8) { r[39] = n }

// SetRemoteEECN sets the receiver's EE context number.
func (r REQ) SetRemoteEECN(n uint32) { put24(r[40:], n) }

// SetRemoteCMResponseTimeout sets the remote CM response timeout exponent.
func (r REQ) SetRemoteCMResponseTimeout(t uint8) { setBits(r, 43, 0, 5, t) }

// SetTransportServiceType sets the transport (0 RC, 1 UC, 2 RD).
func (r REQ) SetTransportServiceType(t uint8) { setBits(r, 43, 5, 2, t) }

// SetEndToEndFlowControl sets the end-to-end flow control bit.
func (r REQ) SetEndToEndFlowControl(v bool) { setBool(r, 43, 7, v) }

// SetStartingPSN sets the starting PSN.
func (r REQ) SetStartingPSN(psn uint32) { put24(r[44:], psn) }

// SetLocalCMResponseTimeout sets the local CM response timeout exponent.
func (r REQ) SetLocalCMResponseTimeout(t uint8) { setBits(r, 47, 0, 5, t) }

// SetRetryCount sets the retry count.
func (r REQ) SetRetryCount(n uint8) { setBits(r, 47, 5, 3, n) }

// SetPKey sets the partition key.
func (r REQ) SetPKey(k uint16) { binary.BigEndian.PutUint16(r[48:], k) }

// SetPathMTU sets the path MTU code.
func (r REQ) SetPathMTU(m uint8) { setBits(r, 50, 0, 4, m) }

// SetRDCExists sets the RDC Exists bit.
func (r REQ) SetRDCExists(v bool) { setBool(r, 50, 4, v) }

// SetRNRRetryCount sets the RNR retry count.
func (r REQ) SetRNRRetryCount(n uint8) { setBits(r, 50, 5, 3, n) }

// SetMaxCMRetries sets the maximum CM retries.
func (r REQ) SetMaxCMRetries(n uint8) { setBits(r, 51, 0, 4, n) }

// SetSRQ sets the SRQ bit.
func (r REQ) SetSRQ(v bool) { setBool(r, 51, 4, v) }

// SetExtendedTransportType sets the extended transport type.
func (r REQ) SetExtendedTransportType(t uint8) { setBits(r, 51, 5, 3, t) }

// SetSAPSupported sets the SAP Supported bit.
func (r REQ) SetSAPSupported(v bool) { setBool(r, 139, 5, v) }

// REQFields holds the values of a REQ, for [REQ.Encode].
type REQFields struct {
	LocalCommID             uint32     // sender's communication ID
	ServiceID               uint64     // service ID
	LocalCAGUID             uint64     // sender's CA GUID
	LocalQKey               uint32     // sender's Q_Key (RD)
	LocalQPN                uint32     // sender's QP number
	ResponderResources      uint8      // READs/atomics accepted at once
	LocalEECN               uint32     // sender's EE context (RD)
	InitiatorDepth          uint8      // READs/atomics issued at once
	RemoteEECN              uint32     // receiver's EE context (RD)
	RemoteCMResponseTimeout uint8      // 5-bit exponent
	TransportServiceType    uint8      // 0 RC, 1 UC, 2 RD
	EndToEndFlowControl     bool       // end-to-end flow control
	StartingPSN             uint32     // first PSN the sender expects (the receiver sends)
	LocalCMResponseTimeout  uint8      // 5-bit exponent
	RetryCount              uint8      // transport retries
	PKey                    uint16     // partition key
	PathMTU                 uint8      // MTU code, 1 = 256 ... 5 = 4096
	RDCExists               bool       // RD channel exists
	RNRRetryCount           uint8      // RNR retries, 7 = infinite
	MaxCMRetries            uint8      // CM retries
	SRQ                     bool       // sender uses an SRQ
	ExtendedTransportType   uint8      // 1 = XRC
	Primary                 PathFields // primary path
	Alternate               PathFields // alternate path (zero if none)
	SAPSupported            bool       // SAP Supported bit
	PrivateData             []byte     // up to REQPrivateDataLen bytes; the rest is zeroed
}

// Encode writes f into r, zeroing reserved fields and unused private data.
func (r REQ) Encode(f *REQFields) {
	_ = r[MADDataLen-1]
	clear(r[:MADDataLen])
	r.SetLocalCommID(f.LocalCommID)
	r.SetServiceID(f.ServiceID)
	r.SetLocalCAGUID(f.LocalCAGUID)
	r.SetLocalQKey(f.LocalQKey)
	r.SetLocalQPN(f.LocalQPN)
	r.SetResponderResources(f.ResponderResources)
	r.SetLocalEECN(f.LocalEECN)
	r.SetInitiatorDepth(f.InitiatorDepth)
	r.SetRemoteEECN(f.RemoteEECN)
	r.SetRemoteCMResponseTimeout(f.RemoteCMResponseTimeout)
	r.SetTransportServiceType(f.TransportServiceType)
	r.SetEndToEndFlowControl(f.EndToEndFlowControl)
	r.SetStartingPSN(f.StartingPSN)
	r.SetLocalCMResponseTimeout(f.LocalCMResponseTimeout)
	r.SetRetryCount(f.RetryCount)
	r.SetPKey(f.PKey)
	r.SetPathMTU(f.PathMTU)
	r.SetRDCExists(f.RDCExists)
	r.SetRNRRetryCount(f.RNRRetryCount)
	r.SetMaxCMRetries(f.MaxCMRetries)
	r.SetSRQ(f.SRQ)
	r.SetExtendedTransportType(f.ExtendedTransportType)
	r.PrimaryPath().Encode(&f.Primary)
	r.AlternatePath().Encode(&f.Alternate)
	r.SetSAPSupported(f.SAPSupported)
	copy(r.PrivateData(), f.PrivateData)
}

// Fields returns the values of r; PrivateData refers to r.
func (r REQ) Fields() REQFields {
	return REQFields{
		LocalCommID:             r.LocalCommID(),
		ServiceID:               r.ServiceID(),
		LocalCAGUID:             r.LocalCAGUID(),
		LocalQKey:               r.LocalQKey(),
		LocalQPN:                r.LocalQPN(),
		ResponderResources:      r.ResponderResources(),
		LocalEECN:               r.LocalEECN(),
		InitiatorDepth:          r.InitiatorDepth(),
		RemoteEECN:              r.RemoteEECN(),
		RemoteCMResponseTimeout: r.RemoteCMResponseTimeout(),
		TransportServiceType:    r.TransportServiceType(),
		EndToEndFlowControl:     r.EndToEndFlowControl(),
		StartingPSN:             r.StartingPSN(),
		LocalCMResponseTimeout:  r.LocalCMResponseTimeout(),
		RetryCount:              r.RetryCount(),
		PKey:                    r.PKey(),
		PathMTU:                 r.PathMTU(),
		RDCExists:               r.RDCExists(),
		RNRRetryCount:           r.RNRRetryCount(),
		MaxCMRetries:            r.MaxCMRetries(),
		SRQ:                     r.SRQ(),
		ExtendedTransportType:   r.ExtendedTransportType(),
		Primary:                 r.PrimaryPath().Fields(),
		Alternate:               r.AlternatePath().Fields(),
		SAPSupported:            r.SAPSupported(),
		PrivateData:             r.PrivateData(),
	}
}

// Path is one path of a REQ (primary or alternate): 44 bytes.
//
// Note: tshark 4.0 shows the flow label of the captured REQs shifted by 12 bits
// (0x00668 for the 0x66843 on the wire); the wire and rxe's use of it (the UDP
// source port) agree with IBTA Table 106: the top 20 bits of the word at offset 88.
type Path []byte

// PathLen is the length of a Path.
const PathLen = 44

// LocalLID returns the sender's port LID (0xFFFF on RoCE, the permissive LID).
func (p Path) LocalLID() uint16 { return binary.BigEndian.Uint16(p[0:]) }

// RemoteLID returns the receiver's port LID.
func (p Path) RemoteLID() uint16 { return binary.BigEndian.Uint16(p[2:]) }

// LocalGID returns the sender's port GID.
func (p Path) LocalGID() [16]byte { return gid(p[4:]) }

// RemoteGID returns the receiver's port GID.
func (p Path) RemoteGID() [16]byte { return gid(p[20:]) }

// FlowLabel returns the 20-bit flow label.
func (p Path) FlowLabel() uint32 { return binary.BigEndian.Uint32(p[36:]) >> 12 }

// PacketRate returns the 6-bit static rate code.
func (p Path) PacketRate() uint8 { return getBits(p, 39, 2, 6) }

// TrafficClass returns the traffic class.
func (p Path) TrafficClass() uint8 { return p[40] }

// HopLimit returns the hop limit.
func (p Path) HopLimit() uint8 { return p[41] }

// SL returns the service level.
func (p Path) SL() uint8 { return getBits(p, 42, 0, 4) }

// SubnetLocal reports whether the path stays in the local subnet.
func (p Path) SubnetLocal() bool { return getBool(p, 42, 4) }

// LocalACKTimeout returns the 5-bit local ACK timeout exponent.
func (p Path) LocalACKTimeout() uint8 { return getBits(p, 43, 0, 5) }

// SetLocalLID sets the sender's port LID.
func (p Path) SetLocalLID(l uint16) { binary.BigEndian.PutUint16(p[0:], l) }

// SetRemoteLID sets the receiver's port LID.
func (p Path) SetRemoteLID(l uint16) { binary.BigEndian.PutUint16(p[2:], l) }

// SetLocalGID sets the sender's port GID.
func (p Path) SetLocalGID(g [16]byte) { copy(p[4:20], g[:]) }

// SetRemoteGID sets the receiver's port GID.
func (p Path) SetRemoteGID(g [16]byte) { copy(p[20:36], g[:]) }

// SetFlowLabel sets the 20-bit flow label.
func (p Path) SetFlowLabel(fl uint32) {
	w := binary.BigEndian.Uint32(p[36:])
	binary.BigEndian.PutUint32(p[36:], w&0xFFF|fl<<12)
}

// SetPacketRate sets the 6-bit static rate code.
func (p Path) SetPacketRate(r uint8) { setBits(p, 39, 2, 6, r) }

// SetTrafficClass sets the traffic class.
func (p Path) SetTrafficClass(tc uint8) { p[40] = tc }

// SetHopLimit sets the hop limit.
func (p Path) SetHopLimit(h uint8) { p[41] = h }

// SetSL sets the service level.
func (p Path) SetSL(sl uint8) { setBits(p, 42, 0, 4, sl) }

// SetSubnetLocal sets the subnet-local bit.
func (p Path) SetSubnetLocal(v bool) { setBool(p, 42, 4, v) }

// SetLocalACKTimeout sets the local ACK timeout exponent.
func (p Path) SetLocalACKTimeout(t uint8) { setBits(p, 43, 0, 5, t) }

// PathFields holds the values of a Path.
type PathFields struct {
	LocalLID        uint16   // sender's port LID
	RemoteLID       uint16   // receiver's port LID
	LocalGID        [16]byte // sender's port GID
	RemoteGID       [16]byte // receiver's port GID
	FlowLabel       uint32   // 20-bit flow label
	PacketRate      uint8    // static rate code
	TrafficClass    uint8    // traffic class
	HopLimit        uint8    // hop limit
	SL              uint8    // service level
	SubnetLocal     bool     // path stays in the subnet
	LocalACKTimeout uint8    // 5-bit exponent
}

// Encode writes f into p (bits this view does not name, such as REQ's SAP bit, are kept).
func (p Path) Encode(f *PathFields) {
	_ = p[PathLen-1]
	p.SetLocalLID(f.LocalLID)
	p.SetRemoteLID(f.RemoteLID)
	p.SetLocalGID(f.LocalGID)
	p.SetRemoteGID(f.RemoteGID)
	p.SetFlowLabel(f.FlowLabel)
	p.SetPacketRate(f.PacketRate)
	p.SetTrafficClass(f.TrafficClass)
	p.SetHopLimit(f.HopLimit)
	p.SetSL(f.SL)
	p.SetSubnetLocal(f.SubnetLocal)
	p.SetLocalACKTimeout(f.LocalACKTimeout)
}

// Fields returns the values of p.
func (p Path) Fields() PathFields {
	return PathFields{
		LocalLID:        p.LocalLID(),
		RemoteLID:       p.RemoteLID(),
		LocalGID:        p.LocalGID(),
		RemoteGID:       p.RemoteGID(),
		FlowLabel:       p.FlowLabel(),
		PacketRate:      p.PacketRate(),
		TrafficClass:    p.TrafficClass(),
		HopLimit:        p.HopLimit(),
		SL:              p.SL(),
		SubnetLocal:     p.SubnetLocal(),
		LocalACKTimeout: p.LocalACKTimeout(),
	}
}

// ---- Messages that start with the two communication IDs ----

// cmIDs is the common start of MRA, REJ, REP, RTU, DREQ, DREP (and LAP, APR).
type cmIDs []byte

func (c cmIDs) local() uint32      { return binary.BigEndian.Uint32(c[0:]) }
func (c cmIDs) remote() uint32     { return binary.BigEndian.Uint32(c[4:]) }
func (c cmIDs) setLocal(v uint32)  { binary.BigEndian.PutUint32(c[0:], v) }
func (c cmIDs) setRemote(v uint32) { binary.BigEndian.PutUint32(c[4:], v) }

// ---- MRA (Table 107) ----

// MRA is the data of an MRA (MsgRcptAck) MAD.
type MRA []byte

// MRAPrivateDataLen is the length of an MRA's private data.
const MRAPrivateDataLen = MADDataLen - 10

// LocalCommID returns the sender's communication ID.
func (r MRA) LocalCommID() uint32 { return cmIDs(r).local() }

// RemoteCommID returns the receiver's communication ID.
func (r MRA) RemoteCommID() uint32 { return cmIDs(r).remote() }

// MessageMRAed returns which message is acknowledged: 0 REQ, 1 REP, 2 LAP.
func (r MRA) MessageMRAed() uint8 { return getBits(r, 8, 0, 2) }

// ServiceTimeout returns the 5-bit exponent of the time the sender needs.
func (r MRA) ServiceTimeout() uint8 { return getBits(r, 9, 0, 5) }

// PrivateData returns the MRA's private data.
func (r MRA) PrivateData() []byte { return r[10:MADDataLen:MADDataLen] }

// SetLocalCommID sets the sender's communication ID.
func (r MRA) SetLocalCommID(id uint32) { cmIDs(r).setLocal(id) }

// SetRemoteCommID sets the receiver's communication ID.
func (r MRA) SetRemoteCommID(id uint32) { cmIDs(r).setRemote(id) }

// SetMessageMRAed sets which message is acknowledged.
func (r MRA) SetMessageMRAed(m uint8) { setBits(r, 8, 0, 2, m) }

// SetServiceTimeout sets the service timeout exponent.
func (r MRA) SetServiceTimeout(t uint8) { setBits(r, 9, 0, 5, t) }

// ---- REJ (Table 108) ----

// REJ is the data of a REJ (ConnectReject) MAD.
type REJ []byte

// REJ layout.
const (
	cmREJARI = 12
	// REJARILen is the room for Additional Rejection Information.
	REJARILen        = 72
	cmREJPrivateData = cmREJARI + REJARILen
	// REJPrivateDataLen is the length of a REJ's private data.
	REJPrivateDataLen = MADDataLen - cmREJPrivateData
)

// LocalCommID returns the sender's communication ID.
func (r REJ) LocalCommID() uint32 { return cmIDs(r).local() }

// RemoteCommID returns the receiver's communication ID (0 if the REQ was not understood).
func (r REJ) RemoteCommID() uint32 { return cmIDs(r).remote() }

// MessageRejected returns which message is rejected: 0 REQ, 1 REP, 2 none/other.
func (r REJ) MessageRejected() uint8 { return getBits(r, 8, 0, 2) }

// RejectedInfoLength returns the number of valid ARI bytes.
func (r REJ) RejectedInfoLength() uint8 { return getBits(r, 9, 0, 7) }

// Reason returns the rejection reason.
func (r REJ) Reason() RejectReason { return RejectReason(binary.BigEndian.Uint16(r[10:])) }

// ARI returns the valid Additional Rejection Information (RejectedInfoLength bytes, at most 72).
func (r REJ) ARI() []byte {
	n := min(int(r.RejectedInfoLength()), REJARILen)
	return r[cmREJARI : cmREJARI+n : cmREJARI+n]
}

// PrivateData returns the REJ's private data.
func (r REJ) PrivateData() []byte { return r[cmREJPrivateData:MADDataLen:MADDataLen] }

// SetLocalCommID sets the sender's communication ID.
func (r REJ) SetLocalCommID(id uint32) { cmIDs(r).setLocal(id) }

// SetRemoteCommID sets the receiver's communication ID.
func (r REJ) SetRemoteCommID(id uint32) { cmIDs(r).setRemote(id) }

// SetMessageRejected sets which message is rejected.
func (r REJ) SetMessageRejected(m uint8) { setBits(r, 8, 0, 2, m) }

// SetRejectedInfoLength sets the number of valid ARI bytes.
func (r REJ) SetRejectedInfoLength(n uint8) { setBits(r, 9, 0, 7, n) }

// SetReason sets the rejection reason.
func (r REJ) SetReason(c RejectReason) { binary.BigEndian.PutUint16(r[10:], uint16(c)) }

// SetARI copies ari (at most 72 bytes) into the ARI field and sets its length.
func (r REJ) SetARI(ari []byte) {
	n := copy(r[cmREJARI:cmREJARI+REJARILen], ari)
	r.SetRejectedInfoLength(uint8(n))
}

// RejectReason is a REJ reason code (IBTA Vol. 1 ch. 12; the kernel's enum ib_cm_rej_reason).
type RejectReason uint16

// Reject reasons.
const (
	RejNoQP                      RejectReason = 1
	RejNoEEC                     RejectReason = 2
	RejNoResources               RejectReason = 3
	RejTimeout                   RejectReason = 4
	RejUnsupported               RejectReason = 5
	RejInvalidCommID             RejectReason = 6
	RejInvalidCommInstance       RejectReason = 7
	RejInvalidServiceID          RejectReason = 8
	RejInvalidTransportType      RejectReason = 9
	RejStaleConnection           RejectReason = 10
	RejRDCNotExist               RejectReason = 11
	RejInvalidGID                RejectReason = 12
	RejInvalidLID                RejectReason = 13
	RejInvalidSL                 RejectReason = 14
	RejInvalidTrafficClass       RejectReason = 15
	RejInvalidHopLimit           RejectReason = 16
	RejInvalidPacketRate         RejectReason = 17
	RejInvalidAltGID             RejectReason = 18
	RejInvalidAltLID             RejectReason = 19
	RejInvalidAltSL              RejectReason = 20
	RejInvalidAltTrafficClass    RejectReason = 21
	RejInvalidAltHopLimit        RejectReason = 22
	RejInvalidAltPacketRate      RejectReason = 23
	RejPortCMRedirect            RejectReason = 24
	RejPortRedirect              RejectReason = 25
	RejInvalidMTU                RejectReason = 26
	RejInsufficientRespResources RejectReason = 27
	RejConsumer                  RejectReason = 28 // rdma_reject(); rdma_cm's "connection refused"
	RejInvalidRNRRetry           RejectReason = 29
	RejDuplicateLocalCommID      RejectReason = 30
	RejInvalidClassVersion       RejectReason = 31
	RejInvalidFlowLabel          RejectReason = 32
	RejInvalidAltFlowLabel       RejectReason = 33
	RejVendorOptionNotSupported  RejectReason = 35
)

var cmRejectReasonNames = [...]string{
	RejNoQP:                      "no QP",
	RejNoEEC:                     "no EEC",
	RejNoResources:               "no resources",
	RejTimeout:                   "timeout",
	RejUnsupported:               "unsupported request",
	RejInvalidCommID:             "invalid communication ID",
	RejInvalidCommInstance:       "invalid communication instance",
	RejInvalidServiceID:          "invalid service ID",
	RejInvalidTransportType:      "invalid transport service type",
	RejStaleConnection:           "stale connection",
	RejRDCNotExist:               "RDC does not exist",
	RejInvalidGID:                "primary remote port GID rejected",
	RejInvalidLID:                "primary remote port LID rejected",
	RejInvalidSL:                 "invalid primary SL",
	RejInvalidTrafficClass:       "invalid primary traffic class",
	RejInvalidHopLimit:           "invalid primary hop limit",
	RejInvalidPacketRate:         "invalid primary packet rate",
	RejInvalidAltGID:             "alternate remote port GID rejected",
	RejInvalidAltLID:             "alternate remote port LID rejected",
	RejInvalidAltSL:              "invalid alternate SL",
	RejInvalidAltTrafficClass:    "invalid alternate traffic class",
	RejInvalidAltHopLimit:        "invalid alternate hop limit",
	RejInvalidAltPacketRate:      "invalid alternate packet rate",
	RejPortCMRedirect:            "port CM redirection",
	RejPortRedirect:              "port redirection",
	RejInvalidMTU:                "invalid path MTU",
	RejInsufficientRespResources: "insufficient responder resources",
	RejConsumer:                  "consumer reject",
	RejInvalidRNRRetry:           "RNR retry count reject",
	RejDuplicateLocalCommID:      "duplicate local communication ID",
	RejInvalidClassVersion:       "unsupported class version",
	RejInvalidFlowLabel:          "invalid primary flow label",
	RejInvalidAltFlowLabel:       "invalid alternate flow label",
	RejVendorOptionNotSupported:  "vendor option not supported",
}

// String returns the reason in words, e.g. "consumer reject".
func (c RejectReason) String() string {
	if int(c) < len(cmRejectReasonNames) && cmRejectReasonNames[c] != "" {
		return cmRejectReasonNames[c]
	}
	return "CMRejectReason(" + strconv.Itoa(int(c)) + ")"
}

// ---- REP (Table 110) ----

// REP is the data of a REP (ConnectReply) MAD.
type REP []byte

const (
	cmREPPrivateData = 36
	// REPPrivateDataLen is the length of a REP's private data.
	REPPrivateDataLen = MADDataLen - cmREPPrivateData
)

// LocalCommID returns the sender's communication ID.
func (r REP) LocalCommID() uint32 { return cmIDs(r).local() }

// RemoteCommID returns the receiver's communication ID (the REQ's LocalCommID).
func (r REP) RemoteCommID() uint32 { return cmIDs(r).remote() }

// LocalQKey returns the sender's Q_Key (RD only).
func (r REP) LocalQKey() uint32 { return binary.BigEndian.Uint32(r[8:]) }

// LocalQPN returns the sender's QP number.
func (r REP) LocalQPN() uint32 { return get24(r[12:]) }

// LocalEECN returns the sender's EE context number (RD only).
func (r REP) LocalEECN() uint32 { return get24(r[16:]) }

// StartingPSN returns the PSN the sender's QP expects first: the first PSN the
// active side sends with (see REQ.StartingPSN).
func (r REP) StartingPSN() uint32 { return get24(r[20:]) }

// ResponderResources returns how many RDMA READs/atomics the sender accepts at once.
func (r REP) ResponderResources() uint8 { return r[24] }

// InitiatorDepth returns how many RDMA READs/atomics the sender issues at once.
func (r REP) InitiatorDepth() uint8 { return r[25] }

// TargetACKDelay returns the 5-bit exponent of the sender's ACK delay.
func (r REP) TargetACKDelay() uint8 { return getBits(r, 26, 0, 5) }

// FailoverAccepted returns the failover answer: 0 accepted, 1 not supported, 2 rejected.
func (r REP) FailoverAccepted() uint8 { return getBits(r, 26, 5, 2) }

// EndToEndFlowControl reports whether the sender uses end-to-end flow control.
func (r REP) EndToEndFlowControl() bool { return getBool(r, 26, 7) }

// RNRRetryCount returns the RNR retry count.
func (r REP) RNRRetryCount() uint8 { return getBits(r, 27, 0, 3) }

// SRQ reports whether the sender's QP uses a shared receive queue.
func (r REP) SRQ() bool { return getBool(r, 27, 3) }

// LocalCAGUID returns the sender's CA GUID.
func (r REP) LocalCAGUID() uint64 { return binary.BigEndian.Uint64(r[28:]) }

// PrivateData returns the REP's 196 bytes of private data.
func (r REP) PrivateData() []byte { return r[cmREPPrivateData:MADDataLen:MADDataLen] }

// SetLocalCommID sets the sender's communication ID.
func (r REP) SetLocalCommID(id uint32) { cmIDs(r).setLocal(id) }

// SetRemoteCommID sets the receiver's communication ID.
func (r REP) SetRemoteCommID(id uint32) { cmIDs(r).setRemote(id) }

// SetLocalQKey sets the sender's Q_Key.
func (r REP) SetLocalQKey(k uint32) { binary.BigEndian.PutUint32(r[8:], k) }

// SetLocalQPN sets the sender's QP number.
func (r REP) SetLocalQPN(qpn uint32) { put24(r[12:], qpn) }

// SetLocalEECN sets the sender's EE context number.
func (r REP) SetLocalEECN(n uint32) { put24(r[16:], n) }

// SetStartingPSN sets the starting PSN.
func (r REP) SetStartingPSN(psn uint32) { put24(r[20:], psn) }

// SetResponderResources sets the responder resources.
func (r REP) SetResponderResources(n uint8) { r[24] = n }

// SetInitiatorDepth sets the initiator depth.
func (r REP) SetInitiatorDepth(n uint8) { r[25] = n }

// SetTargetACKDelay sets the target ACK delay exponent.
func (r REP) SetTargetACKDelay(d uint8) { setBits(r, 26, 0, 5, d) }

// SetFailoverAccepted sets the failover answer.
func (r REP) SetFailoverAccepted(v uint8) { setBits(r, 26, 5, 2, v) }

// SetEndToEndFlowControl sets the end-to-end flow control bit.
func (r REP) SetEndToEndFlowControl(v bool) { setBool(r, 26, 7, v) }

// SetRNRRetryCount sets the RNR retry count.
func (r REP) SetRNRRetryCount(n uint8) { setBits(r, 27, 0, 3, n) }

// SetSRQ sets the SRQ bit.
func (r REP) SetSRQ(v bool) { setBool(r, 27, 3, v) }

// SetLocalCAGUID sets the sender's CA GUID.
func (r REP) SetLocalCAGUID(g uint64) { binary.BigEndian.PutUint64(r[28:], g) }

// REPFields holds the values of a REP, for [REP.Encode].
type REPFields struct {
	LocalCommID         uint32 // sender's communication ID
	RemoteCommID        uint32 // the REQ's LocalCommID
	LocalQKey           uint32 // sender's Q_Key (RD)
	LocalQPN            uint32 // sender's QP number
	LocalEECN           uint32 // sender's EE context (RD)
	StartingPSN         uint32 // first PSN the sender expects (the active side sends)
	ResponderResources  uint8  // READs/atomics accepted at once
	InitiatorDepth      uint8  // READs/atomics issued at once
	TargetACKDelay      uint8  // 5-bit exponent
	FailoverAccepted    uint8  // 0 accepted, 1 not supported, 2 rejected
	EndToEndFlowControl bool   // end-to-end flow control
	RNRRetryCount       uint8  // RNR retries
	SRQ                 bool   // sender uses an SRQ
	LocalCAGUID         uint64 // sender's CA GUID
	PrivateData         []byte // up to REPPrivateDataLen bytes; the rest is zeroed
}

// Encode writes f into r, zeroing reserved fields and unused private data.
func (r REP) Encode(f *REPFields) {
	_ = r[MADDataLen-1]
	clear(r[:MADDataLen])
	r.SetLocalCommID(f.LocalCommID)
	r.SetRemoteCommID(f.RemoteCommID)
	r.SetLocalQKey(f.LocalQKey)
	r.SetLocalQPN(f.LocalQPN)
	r.SetLocalEECN(f.LocalEECN)
	r.SetStartingPSN(f.StartingPSN)
	r.SetResponderResources(f.ResponderResources)
	r.SetInitiatorDepth(f.InitiatorDepth)
	r.SetTargetACKDelay(f.TargetACKDelay)
	r.SetFailoverAccepted(f.FailoverAccepted)
	r.SetEndToEndFlowControl(f.EndToEndFlowControl)
	r.SetRNRRetryCount(f.RNRRetryCount)
	r.SetSRQ(f.SRQ)
	r.SetLocalCAGUID(f.LocalCAGUID)
	copy(r.PrivateData(), f.PrivateData)
}

// Fields returns the values of r; PrivateData refers to r.
func (r REP) Fields() REPFields {
	return REPFields{
		LocalCommID:         r.LocalCommID(),
		RemoteCommID:        r.RemoteCommID(),
		LocalQKey:           r.LocalQKey(),
		LocalQPN:            r.LocalQPN(),
		LocalEECN:           r.LocalEECN(),
		StartingPSN:         r.StartingPSN(),
		ResponderResources:  r.ResponderResources(),
		InitiatorDepth:      r.InitiatorDepth(),
		TargetACKDelay:      r.TargetACKDelay(),
		FailoverAccepted:    r.FailoverAccepted(),
		EndToEndFlowControl: r.EndToEndFlowControl(),
		RNRRetryCount:       r.RNRRetryCount(),
		SRQ:                 r.SRQ(),
		LocalCAGUID:         r.LocalCAGUID(),
		PrivateData:         r.PrivateData(),
	}
}

// ---- RTU (Table 111) ----

// RTU is the data of an RTU (ReadyToUse) MAD.
type RTU []byte

// RTUPrivateDataLen is the length of an RTU's private data.
const RTUPrivateDataLen = MADDataLen - 8

// LocalCommID returns the sender's communication ID.
func (r RTU) LocalCommID() uint32 { return cmIDs(r).local() }

// RemoteCommID returns the receiver's communication ID.
func (r RTU) RemoteCommID() uint32 { return cmIDs(r).remote() }

// PrivateData returns the RTU's private data.
func (r RTU) PrivateData() []byte { return r[8:MADDataLen:MADDataLen] }

// SetLocalCommID sets the sender's communication ID.
func (r RTU) SetLocalCommID(id uint32) { cmIDs(r).setLocal(id) }

// SetRemoteCommID sets the receiver's communication ID.
func (r RTU) SetRemoteCommID(id uint32) { cmIDs(r).setRemote(id) }

// ---- DREQ (Table 112) ----

// DREQ is the data of a DREQ (DisconnectRequest) MAD.
type DREQ []byte

// DREQPrivateDataLen is the length of a DREQ's private data.
const DREQPrivateDataLen = MADDataLen - 12

// LocalCommID returns the sender's communication ID.
func (r DREQ) LocalCommID() uint32 { return cmIDs(r).local() }

// RemoteCommID returns the receiver's communication ID.
func (r DREQ) RemoteCommID() uint32 { return cmIDs(r).remote() }

// RemoteQPN returns the receiver's QP (or EE context) number.
func (r DREQ) RemoteQPN() uint32 { return get24(r[8:]) }

// PrivateData returns the DREQ's private data.
func (r DREQ) PrivateData() []byte { return r[12:MADDataLen:MADDataLen] }

// SetLocalCommID sets the sender's communication ID.
func (r DREQ) SetLocalCommID(id uint32) { cmIDs(r).setLocal(id) }

// SetRemoteCommID sets the receiver's communication ID.
func (r DREQ) SetRemoteCommID(id uint32) { cmIDs(r).setRemote(id) }

// SetRemoteQPN sets the receiver's QP number.
func (r DREQ) SetRemoteQPN(qpn uint32) { put24(r[8:], qpn) }

// ---- DREP (Table 113) ----

// DREP is the data of a DREP (DisconnectReply) MAD.
type DREP []byte

// DREPPrivateDataLen is the length of a DREP's private data.
const DREPPrivateDataLen = MADDataLen - 8

// LocalCommID returns the sender's communication ID.
func (r DREP) LocalCommID() uint32 { return cmIDs(r).local() }

// RemoteCommID returns the receiver's communication ID.
func (r DREP) RemoteCommID() uint32 { return cmIDs(r).remote() }

// PrivateData returns the DREP's private data.
func (r DREP) PrivateData() []byte { return r[8:MADDataLen:MADDataLen] }

// SetLocalCommID sets the sender's communication ID.
func (r DREP) SetLocalCommID(id uint32) { cmIDs(r).setLocal(id) }

// SetRemoteCommID sets the receiver's communication ID.
func (r DREP) SetRemoteCommID(id uint32) { cmIDs(r).setRemote(id) }

// ---- SIDR_REQ (Table 119) ----

// SIDRREQ is the data of a SIDR_REQ (ServiceIDResReq) MAD.
type SIDRREQ []byte

// SIDRREQPrivateDataLen is the length of a SIDR_REQ's private data.
const SIDRREQPrivateDataLen = MADDataLen - 16

// RequestID returns the request ID.
func (r SIDRREQ) RequestID() uint32 { return binary.BigEndian.Uint32(r[0:]) }

// PKey returns the partition key.
func (r SIDRREQ) PKey() uint16 { return binary.BigEndian.Uint16(r[4:]) }

// ServiceID returns the service ID.
func (r SIDRREQ) ServiceID() uint64 { return binary.BigEndian.Uint64(r[8:]) }

// PrivateData returns the SIDR_REQ's private data (rdma_cm puts a CMAHeader first).
func (r SIDRREQ) PrivateData() []byte { return r[16:MADDataLen:MADDataLen] }

// SetRequestID sets the request ID.
func (r SIDRREQ) SetRequestID(id uint32) { binary.BigEndian.PutUint32(r[0:], id) }

// SetPKey sets the partition key.
func (r SIDRREQ) SetPKey(k uint16) { binary.BigEndian.PutUint16(r[4:], k) }

// SetServiceID sets the service ID.
func (r SIDRREQ) SetServiceID(id uint64) { binary.BigEndian.PutUint64(r[8:], id) }

// ---- SIDR_REP (Table 120) ----

// SIDRREP is the data of a SIDR_REP (ServiceIDResReqResp) MAD.
type SIDRREP []byte

// SIDRREP layout.
const (
	cmSIDRREPInfo = 24
	// SIDRREPInfoLen is the room for additional information.
	SIDRREPInfoLen        = 72
	cmSIDRREPPrivateData  = cmSIDRREPInfo + SIDRREPInfoLen
	SIDRREPPrivateDataLen = MADDataLen - cmSIDRREPPrivateData // length of a SIDR_REP's private data
)

// RequestID returns the SIDR_REQ's request ID.
func (r SIDRREP) RequestID() uint32 { return binary.BigEndian.Uint32(r[0:]) }

// Status returns the status: 0 valid, 1 service ID not supported, 2 rejected, 3 no QP,
// 4 redirect, 5 unsupported class version.
func (r SIDRREP) Status() uint8 { return r[4] }

// AdditionalInfoLength returns the number of valid additional-information bytes.
func (r SIDRREP) AdditionalInfoLength() uint8 { return r[5] }

// QPN returns the QP number serving the service.
func (r SIDRREP) QPN() uint32 { return get24(r[8:]) }

// ServiceID returns the service ID.
func (r SIDRREP) ServiceID() uint64 { return binary.BigEndian.Uint64(r[12:]) }

// QKey returns the Q_Key of the serving QP.
func (r SIDRREP) QKey() uint32 { return binary.BigEndian.Uint32(r[20:]) }

// AdditionalInfo returns the valid additional information (at most 72 bytes).
func (r SIDRREP) AdditionalInfo() []byte {
	n := min(int(r.AdditionalInfoLength()), SIDRREPInfoLen)
	return r[cmSIDRREPInfo : cmSIDRREPInfo+n : cmSIDRREPInfo+n]
}

// PrivateData returns the SIDR_REP's private data.
func (r SIDRREP) PrivateData() []byte { return r[cmSIDRREPPrivateData:MADDataLen:MADDataLen] }

// SetRequestID sets the request ID.
func (r SIDRREP) SetRequestID(id uint32) { binary.BigEndian.PutUint32(r[0:], id) }

// SetStatus sets the status.
func (r SIDRREP) SetStatus(s uint8) { r[4] = s }

// SetAdditionalInfoLength sets the number of valid additional-information bytes.
func (r SIDRREP) SetAdditionalInfoLength(n uint8) { r[5] = n }

// SetQPN sets the QP number.
func (r SIDRREP) SetQPN(qpn uint32) { put24(r[8:], qpn) }

// SetServiceID sets the service ID.
func (r SIDRREP) SetServiceID(id uint64) { binary.BigEndian.PutUint64(r[12:], id) }

// SetQKey sets the Q_Key.
func (r SIDRREP) SetQKey(k uint32) { binary.BigEndian.PutUint32(r[20:], k) }

// ---- rdma_cm: service IDs and the CMA header (IBTA Vol. 1 Annex A11) ----

// RDMAPortSpace is an rdma_cm port space (enum rdma_ucm_port_space).
type RDMAPortSpace uint16

// Port spaces.
const (
	RDMAPortSpaceIPoIB RDMAPortSpace = 0x0002
	RDMAPortSpaceTCP   RDMAPortSpace = 0x0106 // RC QPs: rping, perftest -R
	RDMAPortSpaceUDP   RDMAPortSpace = 0x0111 // UD QPs
	RDMAPortSpaceIB    RDMAPortSpace = 0x013F
)

// CMAServiceID returns the service ID rdma_cm uses for port in port space ps:
// ps<<16 | port, e.g. 0x0000000001061C06 for rping's TCP port 7174. For the TCP,
// UDP and IB port spaces this is IBTA Annex A11's IP CM service ID: the prefix
// 0x0000000001, the protocol byte (0x06 TCP, 0x11 UDP) and the port.
func CMAServiceID(ps RDMAPortSpace, port uint16) uint64 {
	return uint64(ps)<<16 | uint64(port)
}

// ParseCMAServiceID splits an rdma_cm service ID into port space and port; ok is
// false if id does not have the IP CM prefix 0x0000000001.
func ParseCMAServiceID(id uint64) (ps RDMAPortSpace, port uint16, ok bool) {
	if id>>24 != 1 {
		return 0, 0, false
	}
	return RDMAPortSpace(id >> 16), uint16(id), true
}

// CMAHeader is the header rdma_cm puts at the start of a REQ's (or SIDR_REQ's)
// private data (the kernel's struct cma_hdr; IBTA Vol. 1 Annex A11, "IP
// Addressing CM REQ Message Private Data Format"): 36 bytes, then the
// application's private data.
//
//	+---------------+---------------+-------------------------------+
//	| version (0x00)| IPV | reserved|   source port (active side)   |
//	+---------------+---------------+-------------------------------+
//	|    source IP address (16 bytes; IPv4: 12 zero bytes + 4)      |
//	+---------------------------------------------------------------+
//	|  destination IP address (16 bytes; IPv4: 12 zero bytes + 4)   |
//	+---------------------------------------------------------------+
//
// The destination port is not here: it is the low 16 bits of the service ID.
type CMAHeader []byte

const (
	// CMAHeaderLen is the length of a CMAHeader.
	CMAHeaderLen = 36
	// CMAVersion is the version byte the kernel writes (CMA_VERSION).
	CMAVersion = 0x00
)

// Version returns the version byte (IBTA's major and minor version nibbles).
func (h CMAHeader) Version() uint8 { return h[0] }

// IPVersion returns the IP version nibble: 4 or 6.
func (h CMAHeader) IPVersion() uint8 { return h[1] >> 4 }

// SrcPort returns the active side's port.
func (h CMAHeader) SrcPort() uint16 { return binary.BigEndian.Uint16(h[2:]) }

func (h CMAHeader) addr(off int) netip.Addr {
	if h.IPVersion() == 4 {
		return netip.AddrFrom4([4]byte(h[off+12 : off+16]))
	}
	return netip.AddrFrom16([16]byte(h[off : off+16]))
}

// SrcAddr returns the active side's IP address (IPv4 if IPVersion is 4).
func (h CMAHeader) SrcAddr() netip.Addr { return h.addr(4) }

// DstAddr returns the passive side's IP address (IPv4 if IPVersion is 4).
func (h CMAHeader) DstAddr() netip.Addr { return h.addr(20) }

// SetVersion sets the version byte.
func (h CMAHeader) SetVersion(v uint8) { h[0] = v }

// SetIPVersion sets the IP version nibble.
func (h CMAHeader) SetIPVersion(v uint8) { h[1] = h[1]&0x0F | v<<4 }

// SetSrcPort sets the active side's port.
func (h CMAHeader) SetSrcPort(p uint16) { binary.BigEndian.PutUint16(h[2:], p) }

func (h CMAHeader) setAddr(off int, a netip.Addr) {
	if h.IPVersion() == 4 {
		a = a.Unmap()
	}
	if a.Is4() {
		clear(h[off : off+12])
		b := a.As4()
		copy(h[off+12:off+16], b[:])
		return
	}
	b := a.As16()
	copy(h[off:off+16], b[:])
}

// SetSrcAddr sets the active side's address (an IPv4 address as 12 zero bytes + 4).
func (h CMAHeader) SetSrcAddr(a netip.Addr) { h.setAddr(4, a) }

// SetDstAddr sets the passive side's address.
func (h CMAHeader) SetDstAddr(a netip.Addr) { h.setAddr(20, a) }

// Check reports whether h is a CMA header this package understands: 36 bytes,
// version 0, IP version 4 or 6.
func (h CMAHeader) Check() error {
	if len(h) < CMAHeaderLen {
		return header.Truncated("cma", "length", len(h), CMAHeaderLen)
	}
	if v := h.Version(); v != CMAVersion {
		return header.Unsupported("cma", "version", uint64(v), "!=", CMAVersion)
	}
	if v := h.IPVersion(); v != 4 && v != 6 {
		return header.Invalid("cma", "ip version", uint64(v), "", 0).Because("not 4 or 6")
	}
	return nil
}

// CMAHeaderFields holds the values of a CMAHeader. The IP version is Src's: an IPv4
// address gives 4, anything else (an IPv4-mapped address too) 6.
type CMAHeaderFields struct {
	SrcPort uint16     // active side's port
	Src     netip.Addr // active side's address
	Dst     netip.Addr // passive side's address
}

// Encode writes f into h with version CMAVersion (Dst should be of Src's family).
func (h CMAHeader) Encode(f *CMAHeaderFields) {
	_ = h[CMAHeaderLen-1]
	h.SetVersion(CMAVersion)
	if f.Src.Is4() {
		h[1] = 4 << 4
	} else {
		h[1] = 6 << 4
	}
	h.SetSrcPort(f.SrcPort)
	h.SetSrcAddr(f.Src)
	h.SetDstAddr(f.Dst)
}

// Fields returns the values of h.
func (h CMAHeader) Fields() CMAHeaderFields {
	return CMAHeaderFields{SrcPort: h.SrcPort(), Src: h.SrcAddr(), Dst: h.DstAddr()}
}
