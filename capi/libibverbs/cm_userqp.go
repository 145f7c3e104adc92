package main

// rdma_init_qp_attr and rdma_establish (librdmacm.so.1) for a QP the program
// creates and moves itself (rping -q): the engine's rdmacm.ID.InitQPAttr and
// Establish, reached through srcm.h.

/*
#include <errno.h>
#include <string.h>
#include <infiniband/verbs.h>
*/
import "C"

import (
	"unsafe"

	ib "github.com/softrdma/softrdma/ibtransport"
)

// srcm_init_qp_attr fills a's attributes for a.qp_state (rdma_init_qp_attr)
// and *mask with the ibv_qp_attr_mask bits set.
//
//export srcm_init_qp_attr
func srcm_init_qp_attr(h C.uintptr_t, a *C.struct_ibv_qp_attr, mask *C.int) C.int {
	id, ok := cmIDOf(h)
	if !ok || a == nil || mask == nil {
		return C.EINVAL
	}
	state := ib.QPState(a.qp_state)
	at, m, err := id.InitQPAttr(state)
	if err != nil {
		debugf("rdma_init_qp_attr %v: %v", state, err)
		return cmErrno(err)
	}
	*a = C.struct_ibv_qp_attr{}
	a.qp_state = uint32(at.QPState)
	a.qp_access_flags = C.uint(at.AccessFlags)
	a.pkey_index, a.port_num = C.uint16_t(at.PKeyIndex), C.uint8_t(at.Port)
	a.qkey = C.uint32_t(at.QKey)
	for e := 1; e <= 5; e++ {
		if 128<<e == at.PathMTU {
			a.path_mtu = uint32(e)
		}
	}
	a.dest_qp_num, a.rq_psn, a.sq_psn = C.uint32_t(at.DestQPN), C.uint32_t(at.RQPSN), C.uint32_t(at.SQPSN)
	a.timeout, a.retry_cnt, a.rnr_retry = C.uint8_t(at.Timeout), C.uint8_t(at.RetryCnt), C.uint8_t(at.RNRRetry)
	a.min_rnr_timer = C.uint8_t(at.MinRNRTimer)
	a.max_rd_atomic, a.max_dest_rd_atomic = C.uint8_t(at.MaxRdAtomic), C.uint8_t(at.MaxDestRdAtomic)
	if m&ib.QPAttrAH != 0 {
		ah := &a.ah_attr
		ah.is_global, ah.port_num, ah.sl = 1, 1, C.uint8_t(at.AH.SL)
		ah.grh.sgid_index, ah.grh.hop_limit = C.uint8_t(at.AH.SGIDIndex), C.uint8_t(at.AH.HopLimit)
		ah.grh.traffic_class, ah.grh.flow_label = C.uint8_t(at.AH.TrafficClass), C.uint32_t(at.AH.FlowLabel)
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&ah.grh.dgid)), 16), at.AH.DGID[:])
	}
	*mask = C.int(m)
	return 0
}

// srcm_establish sends the RTU of an active connection whose QP the program
// moved itself (rdma_establish).
//
//export srcm_establish
func srcm_establish(h C.uintptr_t) C.int {
	id, ok := cmIDOf(h)
	if !ok {
		return C.EINVAL
	}
	if err := id.Establish(); err != nil {
		debugf("rdma_establish: %v", err)
		return cmErrno(err)
	}
	return 0
}
