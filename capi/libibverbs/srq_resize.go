package main

/*
#include <stdint.h>
#include <errno.h>
*/
import "C"

import (
	ib "github.com/softrdma/softrdma/ibtransport"
)

// srgo_resize_srq is ibv_modify_srq's IBV_SRQ_MAX_WR: the engine's
// SRQ.Resize, whose refusals (0, beyond max_srq_wr, below the WRs posted or
// the armed limit) are EINVAL, as rxe's.
//
//export srgo_resize_srq
func srgo_resize_srq(h C.uintptr_t, maxWR C.uint32_t) C.int {
	s, ok := value[*ib.SRQ](h)
	if !ok {
		return C.EINVAL
	}
	if maxWR > 1<<30 {
		debugf("modify srq: max_wr %d too large", maxWR)
		return C.EINVAL
	}
	if err := s.Resize(int(maxWR)); err != nil {
		debugf("modify srq: %v", err)
		return errno(err)
	}
	return 0
}
