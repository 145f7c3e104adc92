package main

// Memory windows (ibv_alloc_mw, ibv_dealloc_mw, ibv_bind_mw and the BIND_MW
// work request) over the engine's PD.AllocMW and WRBindMW; the C side is in
// verbs_c.go, the BIND_MW work request's conversion in qp.go (bindInfo).

/*
#include <errno.h>
#include <stdint.h>
#include <infiniband/verbs.h>
*/
import "C"

import (
	ib "github.com/softrdma/softrdma/ibtransport"
)

//export srgo_alloc_mw
func srgo_alloc_mw(pdh C.uintptr_t, typ C.int, rkey *C.uint32_t, err *C.int) C.uintptr_t {
	pd, ok := value[*ib.PD](pdh)
	if !ok {
		*err = C.EINVAL
		return 0
	}
	// ib_uverbs_alloc_mw: a type other than 1 and 2 is -EINVAL.
	if typ != C.IBV_MW_TYPE_1 && typ != C.IBV_MW_TYPE_2 {
		debugf("alloc mw: type %d is neither IBV_MW_TYPE_1 nor IBV_MW_TYPE_2", typ)
		*err = C.EINVAL
		return 0
	}
	mw, e := pd.AllocMW(ib.MWType(typ))
	if e != nil {
		debugf("alloc mw: %v", e)
		*err = errno(e)
		return 0
	}
	*rkey = C.uint32_t(mw.RKey())
	return newHandle(mw)
}

//export srgo_dealloc_mw
func srgo_dealloc_mw(h C.uintptr_t) C.int {
	mw, ok := value[*ib.MW](h)
	if !ok {
		return C.EINVAL
	}
	if err := mw.Dealloc(); err != nil {
		debugf("dealloc mw: %v", err)
		return errno(err)
	}
	deleteHandle(h)
	return 0
}
