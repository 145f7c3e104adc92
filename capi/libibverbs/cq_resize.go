package main

/*
#include <stdint.h>
#include <errno.h>
*/
import "C"

import "github.com/softrdma/softrdma/capi/verbsdev"

// srgo_resize_cq is ibv_resize_cq on RoCE: rxe_cq_chk_attr's refusals (cqe
// out of 1..max_cqe, or below the completions waiting) are EINVAL, and the CQ
// then holds what rxe's queue holds, cqe+1 rounded up to a power of two, less
// one (rxe_queue_init), which *depth reports as the new cq->cqe.
//
//export srgo_resize_cq
func srgo_resize_cq(h C.uintptr_t, cqe C.int, depth *C.int) C.int {
	c, ok := value[*cq](h)
	if !ok {
		return C.EINVAL
	}
	n := int(cqe)
	if waiting := c.cq.Len(); n > 0 && n < waiting {
		debugf("resize cq: cqe %d below the %d completions waiting", n, waiting)
		return C.EINVAL
	}
	if n > 0 && n <= 1<<30 {
		n = verbsdev.RXEQueueDepth(n)
	}
	if err := c.cq.Resize(n); err != nil {
		debugf("resize cq: cqe %d: %v", cqe, err)
		return errno(err)
	}
	*depth = C.int(c.cq.Depth())
	return 0
}
