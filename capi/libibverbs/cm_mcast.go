package main

/*
#include <stdint.h>
#include <errno.h>
#include <sys/socket.h>
*/
import "C"

import (
	"github.com/softrdma/softrdma/rdmacm"
)

// srcm_join_mcast is rdma_join_multicast(_ex) (rdmacm.ID.JoinMulticast):
// flags is the join_flags of rdma_cm_join_mc_attr_ex. The MULTICAST_JOIN
// event follows on the ID's channel; librdmacm gives it the program's
// context as its private data.
//
//export srcm_join_mcast
func srcm_join_mcast(h C.uintptr_t, sa *C.struct_sockaddr, flags C.int) C.int {
	id, ok := cmIDOf(h)
	ap, ok2 := sockaddr(sa)
	if !ok || !ok2 {
		return C.EINVAL
	}
	if err := id.JoinMulticast(ap.Addr(), rdmacm.JoinFlag(flags)); err != nil {
		debugf("rdma_join_multicast %v: %v", ap.Addr(), err)
		return cmErrno(err)
	}
	return 0
}

// srcm_leave_mcast is rdma_leave_multicast (rdmacm.ID.LeaveMulticast).
//
//export srcm_leave_mcast
func srcm_leave_mcast(h C.uintptr_t, sa *C.struct_sockaddr) C.int {
	id, ok := cmIDOf(h)
	ap, ok2 := sockaddr(sa)
	if !ok || !ok2 {
		return C.EINVAL
	}
	if err := id.LeaveMulticast(ap.Addr()); err != nil {
		debugf("rdma_leave_multicast %v: %v", ap.Addr(), err)
		return cmErrno(err)
	}
	return 0
}
