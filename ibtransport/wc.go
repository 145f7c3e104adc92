package ibtransport

import "fmt"

// WC is a work completion (struct ibv_wc).
type WC struct {
	// WRID is the WRID of the work request that completed.
	WRID uint64
	// Status is the completion status; anything but WCSuccess is an error.
	Status WCStatus
	// Opcode is the completed operation. For errors other than on a receive, only
	// Status, WRID and QPNum are meaningful (as in verbs).
	Opcode WCOpcode
	// ByteLen is the number of bytes transferred: received bytes for receives
	// (including the 40-byte GRH area for UD), the READ length, 8 for atomics.
	ByteLen uint32
	// Imm is the immediate data, in host order, when Flags has WCFlagWithImm.
	Imm uint32
	// InvalidatedRKey is the key a SEND with invalidate invalidated, when Flags has
	// WCFlagWithInv.
	InvalidatedRKey uint32
	// QPNum is the local QP's number.
	QPNum uint32
	// SrcQP is the sender's QPN (UD receives).
	SrcQP uint32
	// Flags are the completion flags.
	Flags WCFlags
	// PKeyIndex is the partition key index (GSI receives).
	PKeyIndex uint16
}

// String describes the completion briefly, e.g.
// "wr 7 IBV_WC_RDMA_READ IBV_WC_SUCCESS len 4096 qp 0x11".
func (w WC) String() string {
	s := fmt.Sprintf("wr %d %s %s len %d qp 0x%x", w.WRID, w.Opcode, w.Status, w.ByteLen, w.QPNum)
	if w.Flags&WCFlagWithImm != 0 {
		s += fmt.Sprintf(" imm 0x%x", w.Imm)
	}
	if w.Flags&WCFlagWithInv != 0 {
		s += fmt.Sprintf(" inv 0x%x", w.InvalidatedRKey)
	}
	if w.SrcQP != 0 {
		s += fmt.Sprintf(" src 0x%x", w.SrcQP)
	}
	return s
}
