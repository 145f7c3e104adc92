package main

// ibv_rereg_mr (verbs_c.go's C half): a region registered again with another
// PD, other access flags or other memory. The region changes in place and
// keeps its L_Key and R_Key, as with rxe (rxe_rereg_user_mr changes the PD
// and the access of the same MR): a peer that was given the R_Key goes on
// using it, which rdma-core's own tests (tests/test_mr.py's rereg cases)
// expect.

/*
#include <errno.h>
#include <stdint.h>
#include <stddef.h>
*/
import "C"

import (
	"unsafe"

	ib "github.com/softrdma/softrdma/ibtransport"
)

// Flags of ibv_rereg_mr (enum ibv_rereg_mr_flags).
const (
	reregTranslation = 1 << 0
	reregPD          = 1 << 1
	reregAccess      = 1 << 2
)

// srgo_rereg_mr changes the region of handle h: to the PD pdh, over
// [addr, addr+length) (its iova is addr with reregTranslation, the region's
// own otherwise), with access (the region's own without reregAccess). It
// returns h and the region's key, or 0 with *err set and the region
// untouched.
//
//export srgo_rereg_mr
func srgo_rereg_mr(h C.uintptr_t, flags C.int, pdh C.uintptr_t, addr unsafe.Pointer, length C.size_t,
	access C.int, key *C.uint32_t, err *C.int) C.uintptr_t {
	mr, ok := value[*ib.MR](h)
	pd, ok2 := value[*ib.PD](pdh)
	if !ok || !ok2 {
		*err = C.EINVAL
		return 0
	}
	r := ib.Rereg{PD: pd, ChangePD: flags&reregPD != 0, ChangeAccess: flags&reregAccess != 0, Access: ib.Access(access)}
	acc := mr.Access()
	if r.ChangeAccess {
		acc = r.Access
	}
	if flags&reregTranslation != 0 {
		buf, a, e := pinnable("rereg mr", addr, length, acc)
		if e != 0 {
			*err = e
			return 0
		}
		r.Buf, r.IOVA, r.ChangeTranslation, acc = buf, uint64(uintptr(addr)), true, a
	}
	r.Access = acc &^ optionalAccess
	if e := mr.Rereg(r); e != nil {
		debugf("rereg mr: %v", e)
		*err = errno(e) // EBUSY with windows bound
		return 0
	}
	*key = C.uint32_t(mr.LKey())
	return h
}
