//go:build cgo

package main

import ib "github.com/softrdma/softrdma/ibtransport"

// sgeSize is the size of one scatter/gather entry in a send WQE (struct
// ib_sge / ibv_sge: address, length, key).
const sgeSize = 16

// sendCap returns the send queue capabilities a QP gets for those the program
// asked for, as rxe gives them (kernel rxe_qp.c, rxe_init_sq: "return actual
// capabilities to caller which may be larger than requested"): a send WQE has
// room for max(max_send_sge entries, max_inline_data bytes), and the QP gets
// all of it, max_inline_data = that room and max_send_sge = room / 16.
// Programs count on it: rdma-core's rdma_xclient asks for one SGE and no
// inline data and posts 16 bytes with IBV_SEND_INLINE, which rxe takes. An
// iWARP device's QP (cfg.ExternalQPs) takes inline data as siw does (kernel
// siw_verbs.c): up to the device's limit (SIW_MAX_INLINE, 80 bytes)
// whatever was asked (siw_copy_inline_sgl checks no other; siw_query_qp
// reports it), the SGEs as asked. What is beyond the device's limits is
// left as asked, for CreateQP to refuse (siw_create_qp: EINVAL).
func sendCap(c ib.QPCap, cfg ib.ContextConfig) ib.QPCap {
	if c.MaxSendSGE < 0 || c.MaxSendSGE > cfg.MaxSGE || c.MaxInlineData < 0 || c.MaxInlineData > cfg.MaxInlineData {
		return c
	}
	if cfg.ExternalQPs {
		c.MaxInlineData = cfg.MaxInlineData
		return c
	}
	room := max(c.MaxSendSGE*sgeSize, c.MaxInlineData)
	c.MaxInlineData = min(room, cfg.MaxInlineData)
	c.MaxSendSGE = min(room/sgeSize, cfg.MaxSGE)
	return c
}
