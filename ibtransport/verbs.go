package ibtransport

import (
	"strconv"
	"strings"
)

// This file holds the verbs enumerations. Their numeric values are libibverbs'
// (rdma-core's <infiniband/verbs.h>), so that a value printed by a C tool and one
// printed here mean the same thing.

// QPType is the transport service of a queue pair (enum ibv_qp_type).
type QPType uint8

// Queue pair types.
const (
	// QPTypeRC is the Reliable Connected service (IBV_QPT_RC).
	QPTypeRC QPType = 2
	// QPTypeUC is the Unreliable Connected service (IBV_QPT_UC).
	QPTypeUC QPType = 3
	// QPTypeUD is the Unreliable Datagram service (IBV_QPT_UD).
	QPTypeUD QPType = 4
	// QPTypeGSI is the General Services Interface QP, QP1: a UD QP that carries
	// management datagrams (IB_QPT_GSI in the kernel; not a libibverbs value).
	QPTypeGSI QPType = 0xf1
)

// String returns "RC", "UC", "UD", "GSI" or "QPType(N)".
func (t QPType) String() string {
	switch t {
	case QPTypeRC:
		return "RC"
	case QPTypeUC:
		return "UC"
	case QPTypeUD:
		return "UD"
	case QPTypeGSI:
		return "GSI"
	}
	return "QPType(" + strconv.Itoa(int(t)) + ")"
}

// datagram reports whether the type is a datagram service (UD or GSI).
func (t QPType) datagram() bool { return t == QPTypeUD || t == QPTypeGSI }

// QPState is a queue pair state (enum ibv_qp_state, IBTA Vol1 10.3.1).
type QPState uint8

// Queue pair states.
const (
	QPStateReset QPState = 0 // IBV_QPS_RESET
	QPStateInit  QPState = 1 // IBV_QPS_INIT
	QPStateRTR   QPState = 2 // IBV_QPS_RTR: ready to receive
	QPStateRTS   QPState = 3 // IBV_QPS_RTS: ready to send
	QPStateSQD   QPState = 4 // IBV_QPS_SQD: send queue drain(ed)
	QPStateSQE   QPState = 5 // IBV_QPS_SQE: send queue error (UC, UD)
	QPStateErr   QPState = 6 // IBV_QPS_ERR
)

var qpStateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

// String returns the state's short name: "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR".
func (s QPState) String() string {
	if int(s) < len(qpStateNames) {
		return qpStateNames[s]
	}
	return "QPState(" + strconv.Itoa(int(s)) + ")"
}

// Access is a set of memory access rights (enum ibv_access_flags).
type Access uint32

// Access rights of memory regions, memory windows and QPs.
const (
	AccessLocalWrite      Access = 1 << 0 // IBV_ACCESS_LOCAL_WRITE
	AccessRemoteWrite     Access = 1 << 1 // IBV_ACCESS_REMOTE_WRITE
	AccessRemoteRead      Access = 1 << 2 // IBV_ACCESS_REMOTE_READ
	AccessRemoteAtomic    Access = 1 << 3 // IBV_ACCESS_REMOTE_ATOMIC
	AccessMWBind          Access = 1 << 4 // IBV_ACCESS_MW_BIND
	AccessZeroBased       Access = 1 << 5 // IBV_ACCESS_ZERO_BASED
	AccessFlushGlobal     Access = 1 << 8 // IBV_ACCESS_FLUSH_GLOBAL
	AccessFlushPersistent Access = 1 << 9 // IBV_ACCESS_FLUSH_PERSISTENT

	accessRemote = AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic | AccessFlushGlobal | AccessFlushPersistent
	accessAll    = AccessLocalWrite | accessRemote | AccessMWBind | AccessZeroBased
)

var accessNames = []struct {
	a    Access
	name string
}{
	{AccessLocalWrite, "LocalWrite"}, {AccessRemoteWrite, "RemoteWrite"},
	{AccessRemoteRead, "RemoteRead"}, {AccessRemoteAtomic, "RemoteAtomic"},
	{AccessMWBind, "MWBind"}, {AccessZeroBased, "ZeroBased"},
	{AccessFlushGlobal, "FlushGlobal"}, {AccessFlushPersistent, "FlushPersistent"},
}

// String lists the rights, e.g. "LocalWrite|RemoteRead", or "0" for none.
func (a Access) String() string {
	if a == 0 {
		return "0"
	}
	var parts []string
	for _, n := range accessNames {
		if a&n.a != 0 {
			parts = append(parts, n.name)
			a &^= n.a
		}
	}
	if a != 0 {
		parts = append(parts, "0x"+strconv.FormatUint(uint64(a), 16))
	}
	return strings.Join(parts, "|")
}

// WROpcode is the operation of a send work request (enum ibv_wr_opcode, plus
// WRRegMR, which libibverbs lacks and the kernel calls IB_WR_REG_MR).
type WROpcode uint8

// Send work request opcodes.
const (
	WRRDMAWrite        WROpcode = 0  // IBV_WR_RDMA_WRITE
	WRRDMAWriteWithImm WROpcode = 1  // IBV_WR_RDMA_WRITE_WITH_IMM
	WRSend             WROpcode = 2  // IBV_WR_SEND
	WRSendWithImm      WROpcode = 3  // IBV_WR_SEND_WITH_IMM
	WRRDMARead         WROpcode = 4  // IBV_WR_RDMA_READ
	WRAtomicCmpAndSwp  WROpcode = 5  // IBV_WR_ATOMIC_CMP_AND_SWP
	WRAtomicFetchAdd   WROpcode = 6  // IBV_WR_ATOMIC_FETCH_AND_ADD
	WRLocalInv         WROpcode = 7  // IBV_WR_LOCAL_INV
	WRBindMW           WROpcode = 8  // IBV_WR_BIND_MW
	WRSendWithInv      WROpcode = 9  // IBV_WR_SEND_WITH_INV
	WRFlush            WROpcode = 14 // IBV_WR_FLUSH
	WRAtomicWrite      WROpcode = 15 // IBV_WR_ATOMIC_WRITE
	WRRegMR            WROpcode = 32 // fast-register a memory region (kernel IB_WR_REG_MR)
)

// WRRDMAReadWithInv is an RDMA READ that invalidates InvalidateRKey locally when it
// completes (the kernel's IB_WR_RDMA_READ_WITH_INV, uverbs value 11, which libibverbs
// leaves to IBV_WR_DRIVER1). iWARP only: external QPs.
const WRRDMAReadWithInv WROpcode = 11

var wrOpcodeNames = map[WROpcode]string{
	WRRDMAWrite: "RDMA_WRITE", WRRDMAWriteWithImm: "RDMA_WRITE_WITH_IMM", WRSend: "SEND",
	WRSendWithImm: "SEND_WITH_IMM", WRRDMARead: "RDMA_READ", WRAtomicCmpAndSwp: "ATOMIC_CMP_AND_SWP",
	WRAtomicFetchAdd: "ATOMIC_FETCH_AND_ADD", WRLocalInv: "LOCAL_INV", WRBindMW: "BIND_MW",
	WRSendWithInv: "SEND_WITH_INV", WRFlush: "FLUSH", WRAtomicWrite: "ATOMIC_WRITE", WRRegMR: "REG_MR",
	WRRDMAReadWithInv: "RDMA_READ_WITH_INV",
}

// String returns the libibverbs name without its prefix, e.g. "RDMA_WRITE".
func (o WROpcode) String() string {
	if s, ok := wrOpcodeNames[o]; ok {
		return s
	}
	return "WROpcode(" + strconv.Itoa(int(o)) + ")"
}

// local reports whether the operation executes at the requester without packets.
func (o WROpcode) local() bool { return o == WRLocalInv || o == WRBindMW || o == WRRegMR }

// readLike reports whether the operation is answered by RDMA READ responses or an
// atomic ACK and so counts against the QP's MaxRdAtomic (IBTA 9.7.5.1; FLUSH and
// ATOMIC WRITE are answered by a zero-length READ response, as rxe does).
func (o WROpcode) readLike() bool {
	switch o {
	case WRRDMARead, WRRDMAReadWithInv, WRAtomicCmpAndSwp, WRAtomicFetchAdd, WRFlush, WRAtomicWrite:
		return true
	}
	return false
}

// atomic reports whether the operation is a compare-and-swap or fetch-and-add.
func (o WROpcode) atomic() bool { return o == WRAtomicCmpAndSwp || o == WRAtomicFetchAdd }

// WCStatus is the status of a work completion (enum ibv_wc_status).
type WCStatus uint8

// Work completion statuses.
const (
	WCSuccess         WCStatus = 0  // IBV_WC_SUCCESS
	WCLocLenErr       WCStatus = 1  // IBV_WC_LOC_LEN_ERR
	WCLocQPOpErr      WCStatus = 2  // IBV_WC_LOC_QP_OP_ERR
	WCLocEECOpErr     WCStatus = 3  // IBV_WC_LOC_EEC_OP_ERR
	WCLocProtErr      WCStatus = 4  // IBV_WC_LOC_PROT_ERR
	WCWRFlushErr      WCStatus = 5  // IBV_WC_WR_FLUSH_ERR
	WCMWBindErr       WCStatus = 6  // IBV_WC_MW_BIND_ERR
	WCBadRespErr      WCStatus = 7  // IBV_WC_BAD_RESP_ERR
	WCLocAccessErr    WCStatus = 8  // IBV_WC_LOC_ACCESS_ERR
	WCRemInvReqErr    WCStatus = 9  // IBV_WC_REM_INV_REQ_ERR
	WCRemAccessErr    WCStatus = 10 // IBV_WC_REM_ACCESS_ERR
	WCRemOpErr        WCStatus = 11 // IBV_WC_REM_OP_ERR
	WCRetryExcErr     WCStatus = 12 // IBV_WC_RETRY_EXC_ERR
	WCRNRRetryExcErr  WCStatus = 13 // IBV_WC_RNR_RETRY_EXC_ERR
	WCLocRDDViolErr   WCStatus = 14 // IBV_WC_LOC_RDD_VIOL_ERR
	WCRemInvRdReqErr  WCStatus = 15 // IBV_WC_REM_INV_RD_REQ_ERR
	WCRemAbortErr     WCStatus = 16 // IBV_WC_REM_ABORT_ERR
	WCInvEECNErr      WCStatus = 17 // IBV_WC_INV_EECN_ERR
	WCInvEECStateErr  WCStatus = 18 // IBV_WC_INV_EEC_STATE_ERR
	WCFatalErr        WCStatus = 19 // IBV_WC_FATAL_ERR
	WCRespTimeoutErr  WCStatus = 20 // IBV_WC_RESP_TIMEOUT_ERR
	WCGeneralErr      WCStatus = 21 // IBV_WC_GENERAL_ERR
	WCTMErr           WCStatus = 22 // IBV_WC_TM_ERR
	WCTMRndvIncomplet WCStatus = 23 // IBV_WC_TM_RNDV_INCOMPLETE
)

var wcStatusNames = [...]string{
	"IBV_WC_SUCCESS", "IBV_WC_LOC_LEN_ERR", "IBV_WC_LOC_QP_OP_ERR", "IBV_WC_LOC_EEC_OP_ERR",
	"IBV_WC_LOC_PROT_ERR", "IBV_WC_WR_FLUSH_ERR", "IBV_WC_MW_BIND_ERR", "IBV_WC_BAD_RESP_ERR",
	"IBV_WC_LOC_ACCESS_ERR", "IBV_WC_REM_INV_REQ_ERR", "IBV_WC_REM_ACCESS_ERR", "IBV_WC_REM_OP_ERR",
	"IBV_WC_RETRY_EXC_ERR", "IBV_WC_RNR_RETRY_EXC_ERR", "IBV_WC_LOC_RDD_VIOL_ERR",
	"IBV_WC_REM_INV_RD_REQ_ERR", "IBV_WC_REM_ABORT_ERR", "IBV_WC_INV_EECN_ERR",
	"IBV_WC_INV_EEC_STATE_ERR", "IBV_WC_FATAL_ERR", "IBV_WC_RESP_TIMEOUT_ERR",
	"IBV_WC_GENERAL_ERR", "IBV_WC_TM_ERR", "IBV_WC_TM_RNDV_INCOMPLETE",
}

// String returns the libibverbs constant name, e.g. "IBV_WC_RETRY_EXC_ERR".
func (s WCStatus) String() string {
	if int(s) < len(wcStatusNames) {
		return wcStatusNames[s]
	}
	return "WCStatus(" + strconv.Itoa(int(s)) + ")"
}

// WCOpcode is the operation a work completion reports (enum ibv_wc_opcode).
type WCOpcode uint8

// Work completion opcodes.
const (
	WCSend            WCOpcode = 0   // IBV_WC_SEND
	WCRDMAWrite       WCOpcode = 1   // IBV_WC_RDMA_WRITE
	WCRDMARead        WCOpcode = 2   // IBV_WC_RDMA_READ
	WCCompSwap        WCOpcode = 3   // IBV_WC_COMP_SWAP
	WCFetchAdd        WCOpcode = 4   // IBV_WC_FETCH_ADD
	WCBindMW          WCOpcode = 5   // IBV_WC_BIND_MW
	WCLocalInv        WCOpcode = 6   // IBV_WC_LOCAL_INV
	WCFlush           WCOpcode = 8   // IBV_WC_FLUSH
	WCAtomicWrite     WCOpcode = 9   // IBV_WC_ATOMIC_WRITE
	WCRecv            WCOpcode = 128 // IBV_WC_RECV
	WCRecvRDMAWithImm WCOpcode = 129 // IBV_WC_RECV_RDMA_WITH_IMM
	// WCRegMR reports a fast-register WR (the kernel's IB_WC_REG_MR). libibverbs
	// has no such value; 136 is IBV_WC_DRIVER2, in its driver-private range.
	WCRegMR WCOpcode = 136
)

var wcOpcodeNames = map[WCOpcode]string{
	WCSend: "IBV_WC_SEND", WCRDMAWrite: "IBV_WC_RDMA_WRITE", WCRDMARead: "IBV_WC_RDMA_READ",
	WCCompSwap: "IBV_WC_COMP_SWAP", WCFetchAdd: "IBV_WC_FETCH_ADD", WCBindMW: "IBV_WC_BIND_MW",
	WCLocalInv: "IBV_WC_LOCAL_INV", WCFlush: "IBV_WC_FLUSH", WCAtomicWrite: "IBV_WC_ATOMIC_WRITE",
	WCRecv: "IBV_WC_RECV", WCRecvRDMAWithImm: "IBV_WC_RECV_RDMA_WITH_IMM", WCRegMR: "IBV_WC_REG_MR",
}

// String returns the libibverbs constant name, e.g. "IBV_WC_RDMA_READ".
func (o WCOpcode) String() string {
	if s, ok := wcOpcodeNames[o]; ok {
		return s
	}
	return "WCOpcode(" + strconv.Itoa(int(o)) + ")"
}

// wcOpcodeFor maps a send WR opcode to the opcode of its completion.
func wcOpcodeFor(o WROpcode) WCOpcode {
	switch o {
	case WRRDMAWrite, WRRDMAWriteWithImm:
		return WCRDMAWrite
	case WRSend, WRSendWithImm, WRSendWithInv:
		return WCSend
	case WRRDMARead, WRRDMAReadWithInv:
		return WCRDMARead
	case WRAtomicCmpAndSwp:
		return WCCompSwap
	case WRAtomicFetchAdd:
		return WCFetchAdd
	case WRLocalInv:
		return WCLocalInv
	case WRBindMW:
		return WCBindMW
	case WRFlush:
		return WCFlush
	case WRAtomicWrite:
		return WCAtomicWrite
	case WRRegMR:
		return WCRegMR
	}
	return WCSend
}

// WCFlags are the flags of a work completion (enum ibv_wc_flags).
type WCFlags uint8

// Work completion flags.
const (
	WCFlagGRH     WCFlags = 1 << 0 // IBV_WC_GRH: the first 40 bytes of the buffer hold a GRH
	WCFlagWithImm WCFlags = 1 << 1 // IBV_WC_WITH_IMM: Imm is valid
	WCFlagWithInv WCFlags = 1 << 3 // IBV_WC_WITH_INV: InvalidatedRKey is valid
)

// String lists the flags, e.g. "GRH|WITH_IMM".
func (f WCFlags) String() string {
	var parts []string
	if f&WCFlagGRH != 0 {
		parts = append(parts, "GRH")
	}
	if f&WCFlagWithImm != 0 {
		parts = append(parts, "WITH_IMM")
	}
	if f&WCFlagWithInv != 0 {
		parts = append(parts, "WITH_INV")
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, "|")
}

// AsyncEventType is the type of an asynchronous event (enum ibv_event_type).
type AsyncEventType uint8

// Asynchronous event types.
const (
	EventCQErr            AsyncEventType = 0  // IBV_EVENT_CQ_ERR
	EventQPFatal          AsyncEventType = 1  // IBV_EVENT_QP_FATAL
	EventQPReqErr         AsyncEventType = 2  // IBV_EVENT_QP_REQ_ERR
	EventQPAccessErr      AsyncEventType = 3  // IBV_EVENT_QP_ACCESS_ERR
	EventCommEst          AsyncEventType = 4  // IBV_EVENT_COMM_EST
	EventSQDrained        AsyncEventType = 5  // IBV_EVENT_SQ_DRAINED
	EventSRQErr           AsyncEventType = 14 // IBV_EVENT_SRQ_ERR
	EventSRQLimitReached  AsyncEventType = 15 // IBV_EVENT_SRQ_LIMIT_REACHED
	EventQPLastWQEReached AsyncEventType = 16 // IBV_EVENT_QP_LAST_WQE_REACHED
)

var asyncEventNames = map[AsyncEventType]string{
	EventCQErr: "IBV_EVENT_CQ_ERR", EventQPFatal: "IBV_EVENT_QP_FATAL",
	EventQPReqErr: "IBV_EVENT_QP_REQ_ERR", EventQPAccessErr: "IBV_EVENT_QP_ACCESS_ERR",
	EventCommEst: "IBV_EVENT_COMM_EST", EventSQDrained: "IBV_EVENT_SQ_DRAINED",
	EventSRQErr: "IBV_EVENT_SRQ_ERR", EventSRQLimitReached: "IBV_EVENT_SRQ_LIMIT_REACHED",
	EventQPLastWQEReached: "IBV_EVENT_QP_LAST_WQE_REACHED",
}

// String returns the libibverbs constant name, e.g. "IBV_EVENT_CQ_ERR".
func (t AsyncEventType) String() string {
	if s, ok := asyncEventNames[t]; ok {
		return s
	}
	return "AsyncEventType(" + strconv.Itoa(int(t)) + ")"
}

// AsyncEvent is an asynchronous event of a Context (struct ibv_async_event). Exactly
// one of QP, CQ and SRQ is set, as the type says.
type AsyncEvent struct {
	// Type says what happened.
	Type AsyncEventType
	// QP is the queue pair of a QP event.
	QP *QP
	// CQ is the completion queue of EventCQErr.
	CQ *CQ
	// SRQ is the shared receive queue of an SRQ event.
	SRQ *SRQ
}

// WCOpcode returns the opcode of the completion a WR with this opcode generates.
func (o WROpcode) WCOpcode() WCOpcode { return wcOpcodeFor(o) }
