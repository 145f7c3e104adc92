package main

// ibv_rereg_mr (verbs_c.go's C half): a region registered again with another
// PD, other access flags or other memory. A region is the program's memory
// in place, so re-registering is registering anew and deregistering the old
// registration, as the verb is defined ("conceptually, dereg followed by
// reg"); the keys change, as they may with the kernel's drivers (the
// command's response carries the new L_Key and R_Key, which libibverbs
// writes into the ibv_mr).

/*
#include <errno.h>
#include <stdint.h>
#include <stddef.h>
*/
import "C"

import (
	"runtime/cgo"
	"unsafe"

	ib "github.com/softrdma/softrdma/ibtransport"
)

// Flags of ibv_rereg_mr (enum ibv_rereg_mr_flags).
const (
	reregTranslation = 1 << 0
	reregPD          = 1 << 1
	reregAccess      = 1 << 2
)

// srgo_rereg_mr registers again the region of handle h on the PD pdh, over
// [addr, addr+length) (its iova is addr with reregTranslation, the region's
// own otherwise) with access (the region's own without reregAccess), then
// deregisters the old registration. It returns the new handle and its key,
// or 0 with *err set and the old registration untouched.
//
//export srgo_rereg_mr
func srgo_rereg_mr(h C.uintptr_t, flags C.int, pdh C.uintptr_t, addr unsafe.Pointer, length C.size_t,
	access C.int, key *C.uint32_t, err *C.int) C.uintptr_t {
	old, ok := value[*ib.MR](h)
	pd, ok2 := value[*ib.PD](pdh)
	if !ok || !ok2 {
		*err = C.EINVAL
		return 0
	}
	iova, acc := old.Addr(), old.Access()
	if flags&reregTranslation != 0 {
		iova = uint64(uintptr(addr))
	}
	if flags&reregAccess != 0 {
		acc = ib.Access(access)
	}
	mr, e := regMR("rereg mr", pd, addr, length, iova, acc)
	if e != 0 {
		*err = e
		return 0
	}
	if de := old.Dereg(); de != nil {
		// Memory windows bound to the old registration: it stays.
		debugf("rereg mr: the old registration: %v", de)
		*err = errno(de) // EBUSY
		mr.Dereg()
		return 0
	}
	cgo.Handle(h).Delete()
	*key = C.uint32_t(mr.LKey())
	return C.uintptr_t(cgo.NewHandle(mr))
}
