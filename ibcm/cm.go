package ibcm

import (
	"encoding/binary"
	"net/netip"
	"strconv"

	"github.com/softrdma/softrdma/header"
)

// The Communication Manager (IBTA Vol. 1 ch. 12) speaks MADs of class 0x07, class
// version 2, method Send. Each message type is an attribute; its contents fill the
// 232-byte MAD data. The views below (CMREQ, CMREP, ...) are over that data, i.e.
// MAD.Data(), with the byte offsets of IBTA Vol. 1 Tables 106-120 (the kernel's
// include/rdma/ibta_vol1_c12.h uses the same offsets); multi-bit fields are numbered
// from the most significant bit of their byte, as in the spec. Every view is
// MADDataLen bytes; methods do not check the length: [CheckCM] does.

// CMClassVersion is the class version of the CM MADs the kernel sends (IBTA 1.2 and later).
const CMClassVersion = 2

// CMAttribute is a CM attribute ID: which CM message a MAD is.
type CMAttribute uint16

// CM attributes (IBTA Vol. 1 ch. 12; names as tshark prints them).
const (
	CMAttrClassPortInfo CMAttribute = 0x0001
	CMAttrREQ           CMAttribute = 0x0010 // ConnectRequest
	CMAttrMRA           CMAttribute = 0x0011 // MsgRcptAck
	CMAttrREJ           CMAttribute = 0x0012 // ConnectReject
	CMAttrREP           CMAttribute = 0x0013 // ConnectReply
	CMAttrRTU           CMAttribute = 0x0014 // ReadyToUse
	CMAttrDREQ          CMAttribute = 0x0015 // DisconnectRequest
	CMAttrDREP          CMAttribute = 0x0016 // DisconnectReply
	CMAttrSIDRREQ       CMAttribute = 0x0017 // ServiceIDResReq
	CMAttrSIDRREP       CMAttribute = 0x0018 // ServiceIDResReqResp
	CMAttrLAP           CMAttribute = 0x0019 // LoadAlternatePath
	CMAttrAPR           CMAttribute = 0x001A // AlternatePathResponse
)

// String returns the attribute's name as tshark prints it ("ConnectRequest", ...).
func (a CMAttribute) String() string {
	switch a {
	case CMAttrClassPortInfo:
		return "ClassPortInfo"
	case CMAttrREQ:
		return "ConnectRequest"
	case CMAttrMRA:
		return "MsgRcptAck"
	case CMAttrREJ:
		return "ConnectReject"
	case CMAttrREP:
		return "ConnectReply"
	case CMAttrRTU:
		return "ReadyToUse"
	case CMAttrDREQ:
		return "DisconnectRequest"
	case CMAttrDREP:
		return "DisconnectReply"
	case CMAttrSIDRREQ:
		return "ServiceIDResReq"
	case CMAttrSIDRREP:
		return "ServiceIDResReqResp"
	case CMAttrLAP:
		return "LoadAlternatePath"
	case CMAttrAPR:
		return "AlternatePathResponse"
	}
	return "CMAttribute(0x" + strconv.FormatUint(uint64(a), 16) + ")"
}

// Known reports whether a is one of the attributes above.
func (a CMAttribute) Known() bool {
	return a == CMAttrClassPortInfo || a >= CMAttrREQ && a <= CMAttrAPR
}

// CMAttribute returns m's attribute ID as a CM attribute.
func (m MAD) CMAttribute() CMAttribute { return CMAttribute(m.AttributeID()) }

// CheckCM checks that m (already a valid MAD, see DecodeMAD) is a CM MAD of class
// version 2 with a known attribute.
func CheckCM(m MAD) error {
	if len(m) < MADLen {
		return truncated("cm", "mad length", uint64(len(m)), MADLen)
	}
	if c := m.MgmtClass(); c != MgmtClassCM {
		return malformed("cm", "mgmt class", uint64(c), uint64(MgmtClassCM), "!=")
	}
	if v := m.ClassVersion(); v != CMClassVersion {
		return &header.Error{Err: header.ErrUnsupported, Header: "cm", Field: "class version", Value: uint64(v), Limit: CMClassVersion, Rel: "!="}
	}
	if a := m.CMAttribute(); !a.Known() {
		return &header.Error{Err: header.ErrUnsupported, Header: "cm", Field: "attribute id", Value: uint64(a), Reason: "unknown", Hex: 1}
	}
	return nil
}

// EncodeCM writes the header of a CM MAD (class 0x07, version 2, method Send) for
// attribute a into m and clears the data; fill it through the view, e.g.
// m.REQ().SetLocalCommID(...).
func EncodeCM(m MAD, a CMAttribute, transactionID uint64) {
	m.Encode(&MADFields{
		MgmtClass:     MgmtClassCM,
		ClassVersion:  CMClassVersion,
		Method:        MADMethodSend,
		TransactionID: transactionID,
		AttributeID:   uint16(a),
	})
	clear(m[MADHeaderLen:MADLen])
}

// REQ returns the data of m as a REQ.
func (m MAD) REQ() CMREQ { return CMREQ(m.Data()) }

// MRA returns the data of m as an MRA.
func (m MAD) MRA() CMMRA { return CMMRA(m.Data()) }

// REJ returns the data of m as a REJ.
func (m MAD) REJ() CMREJ { return CMREJ(m.Data()) }

// REP returns the data of m as a REP.
func (m MAD) REP() CMREP { return CMREP(m.Data()) }

// RTU returns the data of m as an RTU.
func (m MAD) RTU() CMRTU { return CMRTU(m.Data()) }

// DREQ returns the data of m as a DREQ.
func (m MAD) DREQ() CMDREQ { return CMDREQ(m.Data()) }

// DREP returns the data of m as a DREP.
func (m MAD) DREP() CMDREP { return CMDREP(m.Data()) }

// SIDRREQ returns the data of m as a SIDR_REQ.
func (m MAD) SIDRREQ() CMSIDRREQ { return CMSIDRREQ(m.Data()) }

// SIDRREP returns the data of m as a SIDR_REP.
func (m MAD) SIDRREP() CMSIDRREP { return CMSIDRREP(m.Data()) }

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

// CMREQ is the data of a REQ (ConnectRequest) MAD.
type CMREQ []byte

// Offsets in the REQ data.
const (
	cmREQPrimaryPath   = 52
	cmREQAlternatePath = 96
	cmREQPrivateData   = 140
	// CMREQPrivateDataLen is the length of a REQ's private data.
	CMREQPrivateDataLen = MADDataLen - cmREQPrivateData
)

// LocalCommID returns the sender's communication ID.
func (r CMREQ) LocalCommID() uint32 { return binary.BigEndian.Uint32(r[0:]) }

// ServiceID returns the service ID (see CMAServiceID for rdma_cm's).
func (r CMREQ) ServiceID() uint64 { return binary.BigEndian.Uint64(r[8:]) }

// LocalCAGUID returns the sender's CA GUID.
func (r CMREQ) LocalCAGUID() uint64 { return binary.BigEndian.Uint64(r[16:]) }

// LocalQKey returns the sender's Q_Key (RD only; 0 for RC).
func (r CMREQ) LocalQKey() uint32 { return binary.BigEndian.Uint32(r[28:]) }

// LocalQPN returns the sender's QP number.
func (r CMREQ) LocalQPN() uint32 { return get24(r[32:]) }

// ResponderResources returns how many RDMA READs/atomics the sender accepts at once.
func (r CMREQ) ResponderResources() uint8 { return r[35] }

// LocalEECN returns the sender's EE context number (RD only).
func (r CMREQ) LocalEECN() uint32 { return get24(r[36:]) }

// InitiatorDepth returns how many RDMA READs/atomics the sender issues at once.
func (r CMREQ) InitiatorDepth() uint8 { return r[39] }

// RemoteEECN returns the receiver's EE context number (RD only).
func (r CMREQ) RemoteEECN() uint32 { return get24(r[40:]) }

// RemoteCMResponseTimeout returns the 5-bit timeout exponent the sender waits for an answer.
func (r CMREQ) RemoteCMResponseTimeout() uint8 { return getBits(r, 43, 0, 5) }

// TransportServiceType returns the transport: 0 RC, 1 UC, 2 RD.
func (r CMREQ) TransportServiceType() uint8 { return getBits(r, 43, 5, 2) }

// EndToEndFlowControl reports whether the sender uses end-to-end flow control.
func (r CMREQ) EndToEndFlowControl() bool { return getBool(r, 43, 7) }

// StartingPSN returns the PSN the sender's QP expects first, i.e. the first PSN the
// receiver of the REQ sends with. (The captures settle the direction: the passive
// side's first request carries the REQ's Starting PSN, the active side's first
// request the REP's.)
func (r CMREQ) StartingPSN() uint32 { return get24(r[44:]) }

// LocalCMResponseTimeout returns the 5-bit timeout exponent the sender answers within.
func (r CMREQ) LocalCMResponseTimeout() uint8 { return getBits(r, 47, 0, 5) }

// RetryCount returns the transport retry count.
func (r CMREQ) RetryCount() uint8 { return getBits(r, 47, 5, 3) }

// PKey returns the partition key.
func (r CMREQ) PKey() uint16 { return binary.BigEndian.Uint16(r[48:]) }

// PathMTU returns the path MTU code (1 = 256 ... 5 = 4096 bytes).
func (r CMREQ) PathMTU() uint8 { return getBits(r, 50, 0, 4) }

// RDCExists reports whether an RD channel exists (RD only).
func (r CMREQ) RDCExists() bool { return getBool(r, 50, 4) }

// RNRRetryCount returns the RNR retry count (7 = infinite).
func (r CMREQ) RNRRetryCount() uint8 { return getBits(r, 50, 5, 3) }

// MaxCMRetries returns how often the sender retries CM messages.
func (r CMREQ) MaxCMRetries() uint8 { return getBits(r, 51, 0, 4) }

// SRQ reports whether the sender's QP uses a shared receive queue.
func (r CMREQ) SRQ() bool { return getBool(r, 51, 4) }

// ExtendedTransportType returns the extended transport type (1 = XRC).
func (r CMREQ) ExtendedTransportType() uint8 { return getBits(r, 51, 5, 3) }

// PrimaryPath returns the primary path.
func (r CMREQ) PrimaryPath() CMPath {
	return CMPath(r[cmREQPrimaryPath:cmREQAlternatePath:cmREQAlternatePath])
}

// AlternatePath returns the alternate path (all zero if none).
func (r CMREQ) AlternatePath() CMPath {
	return CMPath(r[cmREQAlternatePath:cmREQPrivateData:cmREQPrivateData])
}

// SAPSupported reports the SAP Supported bit (IBTA 1.4; byte 139 bit 5).
func (r CMREQ) SAPSupported() bool { return getBool(r, 139, 5) }

// PrivateData returns the REQ's 92 bytes of private data (rdma_cm puts a CMAHeader first).
func (r CMREQ) PrivateData() []byte { return r[cmREQPrivateData:MADDataLen:MADDataLen] }

// SetLocalCommID sets the sender's communication ID.
func (r CMREQ) SetLocalCommID(id uint32) { binary.BigEndian.PutUint32(r[0:], id) }

// SetServiceID sets the service ID.
func (r CMREQ) SetServiceID(id uint64) { binary.BigEndian.PutUint64(r[8:], id) }

// SetLocalCAGUID sets the sender's CA GUID.
func (r CMREQ) SetLocalCAGUID(g uint64) { binary.BigEndian.PutUint64(r[16:], g) }

// SetLocalQKey sets the sender's Q_Key.
func (r CMREQ) SetLocalQKey(k uint32) { binary.BigEndian.PutUint32(r[28:], k) }

// SetLocalQPN sets the sender's QP number.
func (r CMREQ) SetLocalQPN(qpn uint32) { put24(r[32:], qpn) }

// SetResponderResources sets the responder resources.
func (r CMREQ) SetResponderResources(n uint8) { r[35] = n }

// SetLocalEECN sets the sender's EE context number.
func (r CMREQ) SetLocalEECN(n uint32) { put24(r[36:], n) }

// SetInitiatorDepth sets the initiator depth.
func (r CMREQ) SetInitiatorDepth(n uint8) { r[39] = n }

// SetRemoteEECN sets the receiver's EE context number.
func (r CMREQ) SetRemoteEECN(n uint32) { put24(r[40:], n) }

// SetRemoteCMResponseTimeout sets the remote CM response timeout exponent.
func (r CMREQ) SetRemoteCMResponseTimeout(t uint8) { setBits(r, 43, 0, 5, t) }

// SetTransportServiceType sets the transport (0 RC, 1 UC, 2 RD).
func (r CMREQ) SetTransportServiceType(t uint8) { setBits(r, 43, 5, 2, t) }

// SetEndToEndFlowControl sets the end-to-end flow control bit.
func (r CMREQ) SetEndToEndFlowControl(v bool) { setBool(r, 43, 7, v) }

// SetStartingPSN sets the starting PSN.
func (r CMREQ) SetStartingPSN(psn uint32) { put24(r[44:], psn) }

// SetLocalCMResponseTimeout sets the local CM response timeout exponent.
func (r CMREQ) SetLocalCMResponseTimeout(t uint8) { setBits(r, 47, 0, 5, t) }

// SetRetryCount sets the retry count.
func (r CMREQ) SetRetryCount(n uint8) { setBits(r, 47, 5, 3, n) }

// SetPKey sets the partition key.
func (r CMREQ) SetPKey(k uint16) { binary.BigEndian.PutUint16(r[48:], k) }

// SetPathMTU sets the path MTU code.
func (r CMREQ) SetPathMTU(m uint8) { setBits(r, 50, 0, 4, m) }

// SetRDCExists sets the RDC Exists bit.
func (r CMREQ) SetRDCExists(v bool) { setBool(r, 50, 4, v) }

// SetRNRRetryCount sets the RNR retry count.
func (r CMREQ) SetRNRRetryCount(n uint8) { setBits(r, 50, 5, 3, n) }

// SetMaxCMRetries sets the maximum CM retries.
func (r CMREQ) SetMaxCMRetries(n uint8) { setBits(r, 51, 0, 4, n) }

// SetSRQ sets the SRQ bit.
func (r CMREQ) SetSRQ(v bool) { setBool(r, 51, 4, v) }

// SetExtendedTransportType sets the extended transport type.
func (r CMREQ) SetExtendedTransportType(t uint8) { setBits(r, 51, 5, 3, t) }

// SetSAPSupported sets the SAP Supported bit.
func (r CMREQ) SetSAPSupported(v bool) { setBool(r, 139, 5, v) }

// CMREQFields holds the values of a REQ, for [CMREQ.Encode].
type CMREQFields struct {
	LocalCommID             uint32       // sender's communication ID
	ServiceID               uint64       // service ID
	LocalCAGUID             uint64       // sender's CA GUID
	LocalQKey               uint32       // sender's Q_Key (RD)
	LocalQPN                uint32       // sender's QP number
	ResponderResources      uint8        // READs/atomics accepted at once
	LocalEECN               uint32       // sender's EE context (RD)
	InitiatorDepth          uint8        // READs/atomics issued at once
	RemoteEECN              uint32       // receiver's EE context (RD)
	RemoteCMResponseTimeout uint8        // 5-bit exponent
	TransportServiceType    uint8        // 0 RC, 1 UC, 2 RD
	EndToEndFlowControl     bool         // end-to-end flow control
	StartingPSN             uint32       // first PSN the sender expects (the receiver sends)
	LocalCMResponseTimeout  uint8        // 5-bit exponent
	RetryCount              uint8        // transport retries
	PKey                    uint16       // partition key
	PathMTU                 uint8        // MTU code, 1 = 256 ... 5 = 4096
	RDCExists               bool         // RD channel exists
	RNRRetryCount           uint8        // RNR retries, 7 = infinite
	MaxCMRetries            uint8        // CM retries
	SRQ                     bool         // sender uses an SRQ
	ExtendedTransportType   uint8        // 1 = XRC
	Primary                 CMPathFields // primary path
	Alternate               CMPathFields // alternate path (zero if none)
	SAPSupported            bool         // SAP Supported bit
	PrivateData             []byte       // up to CMREQPrivateDataLen bytes; the rest is zeroed
}

// Encode writes f into r, zeroing reserved fields and unused private data.
func (r CMREQ) Encode(f *CMREQFields) {
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
func (r CMREQ) Fields() CMREQFields {
	return CMREQFields{
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

// CMPath is one path of a REQ (primary or alternate): 44 bytes.
//
// Note: tshark 4.0 shows the flow label of the captured REQs shifted by 12 bits
// (0x00668 for the 0x66843 on the wire); the wire and rxe's use of it (the UDP
// source port) agree with IBTA Table 106: the top 20 bits of the word at offset 88.
type CMPath []byte

// CMPathLen is the length of a CMPath.
const CMPathLen = 44

// LocalLID returns the sender's port LID (0xFFFF on RoCE, the permissive LID).
func (p CMPath) LocalLID() uint16 { return binary.BigEndian.Uint16(p[0:]) }

// RemoteLID returns the receiver's port LID.
func (p CMPath) RemoteLID() uint16 { return binary.BigEndian.Uint16(p[2:]) }

// LocalGID returns the sender's port GID.
func (p CMPath) LocalGID() [16]byte { return gid(p[4:]) }

// RemoteGID returns the receiver's port GID.
func (p CMPath) RemoteGID() [16]byte { return gid(p[20:]) }

// FlowLabel returns the 20-bit flow label.
func (p CMPath) FlowLabel() uint32 { return binary.BigEndian.Uint32(p[36:]) >> 12 }

// PacketRate returns the 6-bit static rate code.
func (p CMPath) PacketRate() uint8 { return getBits(p, 39, 2, 6) }

// TrafficClass returns the traffic class.
func (p CMPath) TrafficClass() uint8 { return p[40] }

// HopLimit returns the hop limit.
func (p CMPath) HopLimit() uint8 { return p[41] }

// SL returns the service level.
func (p CMPath) SL() uint8 { return getBits(p, 42, 0, 4) }

// SubnetLocal reports whether the path stays in the local subnet.
func (p CMPath) SubnetLocal() bool { return getBool(p, 42, 4) }

// LocalACKTimeout returns the 5-bit local ACK timeout exponent.
func (p CMPath) LocalACKTimeout() uint8 { return getBits(p, 43, 0, 5) }

// SetLocalLID sets the sender's port LID.
func (p CMPath) SetLocalLID(l uint16) { binary.BigEndian.PutUint16(p[0:], l) }

// SetRemoteLID sets the receiver's port LID.
func (p CMPath) SetRemoteLID(l uint16) { binary.BigEndian.PutUint16(p[2:], l) }

// SetLocalGID sets the sender's port GID.
func (p CMPath) SetLocalGID(g [16]byte) { copy(p[4:20], g[:]) }

// SetRemoteGID sets the receiver's port GID.
func (p CMPath) SetRemoteGID(g [16]byte) { copy(p[20:36], g[:]) }

// SetFlowLabel sets the 20-bit flow label.
func (p CMPath) SetFlowLabel(fl uint32) {
	w := binary.BigEndian.Uint32(p[36:])
	binary.BigEndian.PutUint32(p[36:], w&0xFFF|fl<<12)
}

// SetPacketRate sets the 6-bit static rate code.
func (p CMPath) SetPacketRate(r uint8) { setBits(p, 39, 2, 6, r) }

// SetTrafficClass sets the traffic class.
func (p CMPath) SetTrafficClass(tc uint8) { p[40] = tc }

// SetHopLimit sets the hop limit.
func (p CMPath) SetHopLimit(h uint8) { p[41] = h }

// SetSL sets the service level.
func (p CMPath) SetSL(sl uint8) { setBits(p, 42, 0, 4, sl) }

// SetSubnetLocal sets the subnet-local bit.
func (p CMPath) SetSubnetLocal(v bool) { setBool(p, 42, 4, v) }

// SetLocalACKTimeout sets the local ACK timeout exponent.
func (p CMPath) SetLocalACKTimeout(t uint8) { setBits(p, 43, 0, 5, t) }

// CMPathFields holds the values of a CMPath.
type CMPathFields struct {
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
func (p CMPath) Encode(f *CMPathFields) {
	_ = p[CMPathLen-1]
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
func (p CMPath) Fields() CMPathFields {
	return CMPathFields{
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

// CMMRA is the data of an MRA (MsgRcptAck) MAD.
type CMMRA []byte

// CMMRAPrivateDataLen is the length of an MRA's private data.
const CMMRAPrivateDataLen = MADDataLen - 10

// LocalCommID returns the sender's communication ID.
func (r CMMRA) LocalCommID() uint32 { return cmIDs(r).local() }

// RemoteCommID returns the receiver's communication ID.
func (r CMMRA) RemoteCommID() uint32 { return cmIDs(r).remote() }

// MessageMRAed returns which message is acknowledged: 0 REQ, 1 REP, 2 LAP.
func (r CMMRA) MessageMRAed() uint8 { return getBits(r, 8, 0, 2) }

// ServiceTimeout returns the 5-bit exponent of the time the sender needs.
func (r CMMRA) ServiceTimeout() uint8 { return getBits(r, 9, 0, 5) }

// PrivateData returns the MRA's private data.
func (r CMMRA) PrivateData() []byte { return r[10:MADDataLen:MADDataLen] }

// SetLocalCommID sets the sender's communication ID.
func (r CMMRA) SetLocalCommID(id uint32) { cmIDs(r).setLocal(id) }

// SetRemoteCommID sets the receiver's communication ID.
func (r CMMRA) SetRemoteCommID(id uint32) { cmIDs(r).setRemote(id) }

// SetMessageMRAed sets which message is acknowledged.
func (r CMMRA) SetMessageMRAed(m uint8) { setBits(r, 8, 0, 2, m) }

// SetServiceTimeout sets the service timeout exponent.
func (r CMMRA) SetServiceTimeout(t uint8) { setBits(r, 9, 0, 5, t) }

// ---- REJ (Table 108) ----

// CMREJ is the data of a REJ (ConnectReject) MAD.
type CMREJ []byte

// CMREJ layout.
const (
	cmREJARI = 12
	// CMREJARILen is the room for Additional Rejection Information.
	CMREJARILen      = 72
	cmREJPrivateData = cmREJARI + CMREJARILen
	// CMREJPrivateDataLen is the length of a REJ's private data.
	CMREJPrivateDataLen = MADDataLen - cmREJPrivateData
)

// LocalCommID returns the sender's communication ID.
func (r CMREJ) LocalCommID() uint32 { return cmIDs(r).local() }

// RemoteCommID returns the receiver's communication ID (0 if the REQ was not understood).
func (r CMREJ) RemoteCommID() uint32 { return cmIDs(r).remote() }

// MessageRejected returns which message is rejected: 0 REQ, 1 REP, 2 none/other.
func (r CMREJ) MessageRejected() uint8 { return getBits(r, 8, 0, 2) }

// RejectedInfoLength returns the number of valid ARI bytes.
func (r CMREJ) RejectedInfoLength() uint8 { return getBits(r, 9, 0, 7) }

// Reason returns the rejection reason.
func (r CMREJ) Reason() CMRejectReason { return CMRejectReason(binary.BigEndian.Uint16(r[10:])) }

// ARI returns the valid Additional Rejection Information (RejectedInfoLength bytes, at most 72).
func (r CMREJ) ARI() []byte {
	n := min(int(r.RejectedInfoLength()), CMREJARILen)
	return r[cmREJARI : cmREJARI+n : cmREJARI+n]
}

// PrivateData returns the REJ's private data.
func (r CMREJ) PrivateData() []byte { return r[cmREJPrivateData:MADDataLen:MADDataLen] }

// SetLocalCommID sets the sender's communication ID.
func (r CMREJ) SetLocalCommID(id uint32) { cmIDs(r).setLocal(id) }

// SetRemoteCommID sets the receiver's communication ID.
func (r CMREJ) SetRemoteCommID(id uint32) { cmIDs(r).setRemote(id) }

// SetMessageRejected sets which message is rejected.
func (r CMREJ) SetMessageRejected(m uint8) { setBits(r, 8, 0, 2, m) }

// SetRejectedInfoLength sets the number of valid ARI bytes.
func (r CMREJ) SetRejectedInfoLength(n uint8) { setBits(r, 9, 0, 7, n) }

// SetReason sets the rejection reason.
func (r CMREJ) SetReason(c CMRejectReason) { binary.BigEndian.PutUint16(r[10:], uint16(c)) }

// SetARI copies ari (at most 72 bytes) into the ARI field and sets its length.
func (r CMREJ) SetARI(ari []byte) {
	n := copy(r[cmREJARI:cmREJARI+CMREJARILen], ari)
	r.SetRejectedInfoLength(uint8(n))
}

// CMRejectReason is a REJ reason code (IBTA Vol. 1 ch. 12; the kernel's enum ib_cm_rej_reason).
type CMRejectReason uint16

// Reject reasons.
const (
	CMRejNoQP                      CMRejectReason = 1
	CMRejNoEEC                     CMRejectReason = 2
	CMRejNoResources               CMRejectReason = 3
	CMRejTimeout                   CMRejectReason = 4
	CMRejUnsupported               CMRejectReason = 5
	CMRejInvalidCommID             CMRejectReason = 6
	CMRejInvalidCommInstance       CMRejectReason = 7
	CMRejInvalidServiceID          CMRejectReason = 8
	CMRejInvalidTransportType      CMRejectReason = 9
	CMRejStaleConnection           CMRejectReason = 10
	CMRejRDCNotExist               CMRejectReason = 11
	CMRejInvalidGID                CMRejectReason = 12
	CMRejInvalidLID                CMRejectReason = 13
	CMRejInvalidSL                 CMRejectReason = 14
	CMRejInvalidTrafficClass       CMRejectReason = 15
	CMRejInvalidHopLimit           CMRejectReason = 16
	CMRejInvalidPacketRate         CMRejectReason = 17
	CMRejInvalidAltGID             CMRejectReason = 18
	CMRejInvalidAltLID             CMRejectReason = 19
	CMRejInvalidAltSL              CMRejectReason = 20
	CMRejInvalidAltTrafficClass    CMRejectReason = 21
	CMRejInvalidAltHopLimit        CMRejectReason = 22
	CMRejInvalidAltPacketRate      CMRejectReason = 23
	CMRejPortCMRedirect            CMRejectReason = 24
	CMRejPortRedirect              CMRejectReason = 25
	CMRejInvalidMTU                CMRejectReason = 26
	CMRejInsufficientRespResources CMRejectReason = 27
	CMRejConsumer                  CMRejectReason = 28 // rdma_reject(); rdma_cm's "connection refused"
	CMRejInvalidRNRRetry           CMRejectReason = 29
	CMRejDuplicateLocalCommID      CMRejectReason = 30
	CMRejInvalidClassVersion       CMRejectReason = 31
	CMRejInvalidFlowLabel          CMRejectReason = 32
	CMRejInvalidAltFlowLabel       CMRejectReason = 33
	CMRejVendorOptionNotSupported  CMRejectReason = 35
)

var cmRejectReasonNames = [...]string{
	CMRejNoQP:                      "no QP",
	CMRejNoEEC:                     "no EEC",
	CMRejNoResources:               "no resources",
	CMRejTimeout:                   "timeout",
	CMRejUnsupported:               "unsupported request",
	CMRejInvalidCommID:             "invalid communication ID",
	CMRejInvalidCommInstance:       "invalid communication instance",
	CMRejInvalidServiceID:          "invalid service ID",
	CMRejInvalidTransportType:      "invalid transport service type",
	CMRejStaleConnection:           "stale connection",
	CMRejRDCNotExist:               "RDC does not exist",
	CMRejInvalidGID:                "primary remote port GID rejected",
	CMRejInvalidLID:                "primary remote port LID rejected",
	CMRejInvalidSL:                 "invalid primary SL",
	CMRejInvalidTrafficClass:       "invalid primary traffic class",
	CMRejInvalidHopLimit:           "invalid primary hop limit",
	CMRejInvalidPacketRate:         "invalid primary packet rate",
	CMRejInvalidAltGID:             "alternate remote port GID rejected",
	CMRejInvalidAltLID:             "alternate remote port LID rejected",
	CMRejInvalidAltSL:              "invalid alternate SL",
	CMRejInvalidAltTrafficClass:    "invalid alternate traffic class",
	CMRejInvalidAltHopLimit:        "invalid alternate hop limit",
	CMRejInvalidAltPacketRate:      "invalid alternate packet rate",
	CMRejPortCMRedirect:            "port CM redirection",
	CMRejPortRedirect:              "port redirection",
	CMRejInvalidMTU:                "invalid path MTU",
	CMRejInsufficientRespResources: "insufficient responder resources",
	CMRejConsumer:                  "consumer reject",
	CMRejInvalidRNRRetry:           "RNR retry count reject",
	CMRejDuplicateLocalCommID:      "duplicate local communication ID",
	CMRejInvalidClassVersion:       "unsupported class version",
	CMRejInvalidFlowLabel:          "invalid primary flow label",
	CMRejInvalidAltFlowLabel:       "invalid alternate flow label",
	CMRejVendorOptionNotSupported:  "vendor option not supported",
}

// String returns the reason in words, e.g. "consumer reject".
func (c CMRejectReason) String() string {
	if int(c) < len(cmRejectReasonNames) && cmRejectReasonNames[c] != "" {
		return cmRejectReasonNames[c]
	}
	return "CMRejectReason(" + strconv.Itoa(int(c)) + ")"
}

// ---- REP (Table 110) ----

// CMREP is the data of a REP (ConnectReply) MAD.
type CMREP []byte

const (
	cmREPPrivateData = 36
	// CMREPPrivateDataLen is the length of a REP's private data.
	CMREPPrivateDataLen = MADDataLen - cmREPPrivateData
)

// LocalCommID returns the sender's communication ID.
func (r CMREP) LocalCommID() uint32 { return cmIDs(r).local() }

// RemoteCommID returns the receiver's communication ID (the REQ's LocalCommID).
func (r CMREP) RemoteCommID() uint32 { return cmIDs(r).remote() }

// LocalQKey returns the sender's Q_Key (RD only).
func (r CMREP) LocalQKey() uint32 { return binary.BigEndian.Uint32(r[8:]) }

// LocalQPN returns the sender's QP number.
func (r CMREP) LocalQPN() uint32 { return get24(r[12:]) }

// LocalEECN returns the sender's EE context number (RD only).
func (r CMREP) LocalEECN() uint32 { return get24(r[16:]) }

// StartingPSN returns the PSN the sender's QP expects first: the first PSN the
// active side sends with (see CMREQ.StartingPSN).
func (r CMREP) StartingPSN() uint32 { return get24(r[20:]) }

// ResponderResources returns how many RDMA READs/atomics the sender accepts at once.
func (r CMREP) ResponderResources() uint8 { return r[24] }

// InitiatorDepth returns how many RDMA READs/atomics the sender issues at once.
func (r CMREP) InitiatorDepth() uint8 { return r[25] }

// TargetACKDelay returns the 5-bit exponent of the sender's ACK delay.
func (r CMREP) TargetACKDelay() uint8 { return getBits(r, 26, 0, 5) }

// FailoverAccepted returns the failover answer: 0 accepted, 1 not supported, 2 rejected.
func (r CMREP) FailoverAccepted() uint8 { return getBits(r, 26, 5, 2) }

// EndToEndFlowControl reports whether the sender uses end-to-end flow control.
func (r CMREP) EndToEndFlowControl() bool { return getBool(r, 26, 7) }

// RNRRetryCount returns the RNR retry count.
func (r CMREP) RNRRetryCount() uint8 { return getBits(r, 27, 0, 3) }

// SRQ reports whether the sender's QP uses a shared receive queue.
func (r CMREP) SRQ() bool { return getBool(r, 27, 3) }

// LocalCAGUID returns the sender's CA GUID.
func (r CMREP) LocalCAGUID() uint64 { return binary.BigEndian.Uint64(r[28:]) }

// PrivateData returns the REP's 196 bytes of private data.
func (r CMREP) PrivateData() []byte { return r[cmREPPrivateData:MADDataLen:MADDataLen] }

// SetLocalCommID sets the sender's communication ID.
func (r CMREP) SetLocalCommID(id uint32) { cmIDs(r).setLocal(id) }

// SetRemoteCommID sets the receiver's communication ID.
func (r CMREP) SetRemoteCommID(id uint32) { cmIDs(r).setRemote(id) }

// SetLocalQKey sets the sender's Q_Key.
func (r CMREP) SetLocalQKey(k uint32) { binary.BigEndian.PutUint32(r[8:], k) }

// SetLocalQPN sets the sender's QP number.
func (r CMREP) SetLocalQPN(qpn uint32) { put24(r[12:], qpn) }

// SetLocalEECN sets the sender's EE context number.
func (r CMREP) SetLocalEECN(n uint32) { put24(r[16:], n) }

// SetStartingPSN sets the starting PSN.
func (r CMREP) SetStartingPSN(psn uint32) { put24(r[20:], psn) }

// SetResponderResources sets the responder resources.
func (r CMREP) SetResponderResources(n uint8) { r[24] = n }

// SetInitiatorDepth sets the initiator depth.
func (r CMREP) SetInitiatorDepth(n uint8) { r[25] = n }

// SetTargetACKDelay sets the target ACK delay exponent.
func (r CMREP) SetTargetACKDelay(d uint8) { setBits(r, 26, 0, 5, d) }

// SetFailoverAccepted sets the failover answer.
func (r CMREP) SetFailoverAccepted(v uint8) { setBits(r, 26, 5, 2, v) }

// SetEndToEndFlowControl sets the end-to-end flow control bit.
func (r CMREP) SetEndToEndFlowControl(v bool) { setBool(r, 26, 7, v) }

// SetRNRRetryCount sets the RNR retry count.
func (r CMREP) SetRNRRetryCount(n uint8) { setBits(r, 27, 0, 3, n) }

// SetSRQ sets the SRQ bit.
func (r CMREP) SetSRQ(v bool) { setBool(r, 27, 3, v) }

// SetLocalCAGUID sets the sender's CA GUID.
func (r CMREP) SetLocalCAGUID(g uint64) { binary.BigEndian.PutUint64(r[28:], g) }

// CMREPFields holds the values of a REP, for [CMREP.Encode].
type CMREPFields struct {
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
	PrivateData         []byte // up to CMREPPrivateDataLen bytes; the rest is zeroed
}

// Encode writes f into r, zeroing reserved fields and unused private data.
func (r CMREP) Encode(f *CMREPFields) {
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
func (r CMREP) Fields() CMREPFields {
	return CMREPFields{
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

// CMRTU is the data of an RTU (ReadyToUse) MAD.
type CMRTU []byte

// CMRTUPrivateDataLen is the length of an RTU's private data.
const CMRTUPrivateDataLen = MADDataLen - 8

// LocalCommID returns the sender's communication ID.
func (r CMRTU) LocalCommID() uint32 { return cmIDs(r).local() }

// RemoteCommID returns the receiver's communication ID.
func (r CMRTU) RemoteCommID() uint32 { return cmIDs(r).remote() }

// PrivateData returns the RTU's private data.
func (r CMRTU) PrivateData() []byte { return r[8:MADDataLen:MADDataLen] }

// SetLocalCommID sets the sender's communication ID.
func (r CMRTU) SetLocalCommID(id uint32) { cmIDs(r).setLocal(id) }

// SetRemoteCommID sets the receiver's communication ID.
func (r CMRTU) SetRemoteCommID(id uint32) { cmIDs(r).setRemote(id) }

// ---- DREQ (Table 112) ----

// CMDREQ is the data of a DREQ (DisconnectRequest) MAD.
type CMDREQ []byte

// CMDREQPrivateDataLen is the length of a DREQ's private data.
const CMDREQPrivateDataLen = MADDataLen - 12

// LocalCommID returns the sender's communication ID.
func (r CMDREQ) LocalCommID() uint32 { return cmIDs(r).local() }

// RemoteCommID returns the receiver's communication ID.
func (r CMDREQ) RemoteCommID() uint32 { return cmIDs(r).remote() }

// RemoteQPN returns the receiver's QP (or EE context) number.
func (r CMDREQ) RemoteQPN() uint32 { return get24(r[8:]) }

// PrivateData returns the DREQ's private data.
func (r CMDREQ) PrivateData() []byte { return r[12:MADDataLen:MADDataLen] }

// SetLocalCommID sets the sender's communication ID.
func (r CMDREQ) SetLocalCommID(id uint32) { cmIDs(r).setLocal(id) }

// SetRemoteCommID sets the receiver's communication ID.
func (r CMDREQ) SetRemoteCommID(id uint32) { cmIDs(r).setRemote(id) }

// SetRemoteQPN sets the receiver's QP number.
func (r CMDREQ) SetRemoteQPN(qpn uint32) { put24(r[8:], qpn) }

// ---- DREP (Table 113) ----

// CMDREP is the data of a DREP (DisconnectReply) MAD.
type CMDREP []byte

// CMDREPPrivateDataLen is the length of a DREP's private data.
const CMDREPPrivateDataLen = MADDataLen - 8

// LocalCommID returns the sender's communication ID.
func (r CMDREP) LocalCommID() uint32 { return cmIDs(r).local() }

// RemoteCommID returns the receiver's communication ID.
func (r CMDREP) RemoteCommID() uint32 { return cmIDs(r).remote() }

// PrivateData returns the DREP's private data.
func (r CMDREP) PrivateData() []byte { return r[8:MADDataLen:MADDataLen] }

// SetLocalCommID sets the sender's communication ID.
func (r CMDREP) SetLocalCommID(id uint32) { cmIDs(r).setLocal(id) }

// SetRemoteCommID sets the receiver's communication ID.
func (r CMDREP) SetRemoteCommID(id uint32) { cmIDs(r).setRemote(id) }

// ---- SIDR_REQ (Table 119) ----

// CMSIDRREQ is the data of a SIDR_REQ (ServiceIDResReq) MAD.
type CMSIDRREQ []byte

// CMSIDRREQPrivateDataLen is the length of a SIDR_REQ's private data.
const CMSIDRREQPrivateDataLen = MADDataLen - 16

// RequestID returns the request ID.
func (r CMSIDRREQ) RequestID() uint32 { return binary.BigEndian.Uint32(r[0:]) }

// PKey returns the partition key.
func (r CMSIDRREQ) PKey() uint16 { return binary.BigEndian.Uint16(r[4:]) }

// ServiceID returns the service ID.
func (r CMSIDRREQ) ServiceID() uint64 { return binary.BigEndian.Uint64(r[8:]) }

// PrivateData returns the SIDR_REQ's private data (rdma_cm puts a CMAHeader first).
func (r CMSIDRREQ) PrivateData() []byte { return r[16:MADDataLen:MADDataLen] }

// SetRequestID sets the request ID.
func (r CMSIDRREQ) SetRequestID(id uint32) { binary.BigEndian.PutUint32(r[0:], id) }

// SetPKey sets the partition key.
func (r CMSIDRREQ) SetPKey(k uint16) { binary.BigEndian.PutUint16(r[4:], k) }

// SetServiceID sets the service ID.
func (r CMSIDRREQ) SetServiceID(id uint64) { binary.BigEndian.PutUint64(r[8:], id) }

// ---- SIDR_REP (Table 120) ----

// CMSIDRREP is the data of a SIDR_REP (ServiceIDResReqResp) MAD.
type CMSIDRREP []byte

// CMSIDRREP layout.
const (
	cmSIDRREPInfo = 24
	// CMSIDRREPInfoLen is the room for additional information.
	CMSIDRREPInfoLen        = 72
	cmSIDRREPPrivateData    = cmSIDRREPInfo + CMSIDRREPInfoLen
	CMSIDRREPPrivateDataLen = MADDataLen - cmSIDRREPPrivateData // length of a SIDR_REP's private data
)

// RequestID returns the SIDR_REQ's request ID.
func (r CMSIDRREP) RequestID() uint32 { return binary.BigEndian.Uint32(r[0:]) }

// Status returns the status: 0 valid, 1 service ID not supported, 2 rejected, 3 no QP,
// 4 redirect, 5 unsupported class version.
func (r CMSIDRREP) Status() uint8 { return r[4] }

// AdditionalInfoLength returns the number of valid additional-information bytes.
func (r CMSIDRREP) AdditionalInfoLength() uint8 { return r[5] }

// QPN returns the QP number serving the service.
func (r CMSIDRREP) QPN() uint32 { return get24(r[8:]) }

// ServiceID returns the service ID.
func (r CMSIDRREP) ServiceID() uint64 { return binary.BigEndian.Uint64(r[12:]) }

// QKey returns the Q_Key of the serving QP.
func (r CMSIDRREP) QKey() uint32 { return binary.BigEndian.Uint32(r[20:]) }

// AdditionalInfo returns the valid additional information (at most 72 bytes).
func (r CMSIDRREP) AdditionalInfo() []byte {
	n := min(int(r.AdditionalInfoLength()), CMSIDRREPInfoLen)
	return r[cmSIDRREPInfo : cmSIDRREPInfo+n : cmSIDRREPInfo+n]
}

// PrivateData returns the SIDR_REP's private data.
func (r CMSIDRREP) PrivateData() []byte { return r[cmSIDRREPPrivateData:MADDataLen:MADDataLen] }

// SetRequestID sets the request ID.
func (r CMSIDRREP) SetRequestID(id uint32) { binary.BigEndian.PutUint32(r[0:], id) }

// SetStatus sets the status.
func (r CMSIDRREP) SetStatus(s uint8) { r[4] = s }

// SetAdditionalInfoLength sets the number of valid additional-information bytes.
func (r CMSIDRREP) SetAdditionalInfoLength(n uint8) { r[5] = n }

// SetQPN sets the QP number.
func (r CMSIDRREP) SetQPN(qpn uint32) { put24(r[8:], qpn) }

// SetServiceID sets the service ID.
func (r CMSIDRREP) SetServiceID(id uint64) { binary.BigEndian.PutUint64(r[12:], id) }

// SetQKey sets the Q_Key.
func (r CMSIDRREP) SetQKey(k uint32) { binary.BigEndian.PutUint32(r[20:], k) }

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
		return truncated("cma", "length", uint64(len(h)), CMAHeaderLen)
	}
	if v := h.Version(); v != CMAVersion {
		return &header.Error{Err: header.ErrUnsupported, Header: "cma", Field: "version", Value: uint64(v), Limit: CMAVersion, Rel: "!="}
	}
	if v := h.IPVersion(); v != 4 && v != 6 {
		return malformed("cma", "ip version", uint64(v), 0, "not 4 or 6")
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
