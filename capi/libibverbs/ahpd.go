package main

// #include <stdint.h>
import "C"

import (
	"sync"

	ib "github.com/softrdma/softrdma/ibtransport"
)

// ahUses counts the address handles of each PD. The engine has no AH object
// (an AH is an address a UD WR carries), but the kernel's does hold its PD:
// rdma_create_user_ah takes a use of it (pd->usecnt), and ibv_dealloc_pd of a
// PD that still has an AH is -EBUSY (uverbs_free_pd), as with an MR or a QP.
var ahUses struct {
	sync.Mutex
	pd map[C.uintptr_t]*ib.PD // by AH handle
	n  map[*ib.PD]int
}

// ahHold records the AH h as a use of pd.
func ahHold(h C.uintptr_t, pd *ib.PD) {
	ahUses.Lock()
	defer ahUses.Unlock()
	if ahUses.pd == nil {
		ahUses.pd, ahUses.n = map[C.uintptr_t]*ib.PD{}, map[*ib.PD]int{}
	}
	ahUses.pd[h] = pd
	ahUses.n[pd]++
}

// ahRelease drops the use the AH h made of its PD.
func ahRelease(h C.uintptr_t) {
	ahUses.Lock()
	defer ahUses.Unlock()
	pd, ok := ahUses.pd[h]
	if !ok {
		return
	}
	delete(ahUses.pd, h)
	if ahUses.n[pd]--; ahUses.n[pd] == 0 {
		delete(ahUses.n, pd)
	}
}

// ahCount returns the number of AHs pd has.
func ahCount(pd *ib.PD) int {
	ahUses.Lock()
	defer ahUses.Unlock()
	return ahUses.n[pd]
}
