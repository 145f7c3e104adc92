package main

/*
#include <stdint.h>
#include <errno.h>
*/
import "C"

import (
	"errors"
	"net/netip"
	"unsafe"

	ib "github.com/softrdma/softrdma/ibtransport"
)

// srgo_mcast is ibv_attach_mcast (attach 1) and ibv_detach_mcast (attach 0)
// of the QP h to the group gid (16 bytes): the RoCE device attaches the QP
// in the engine and, for the group's first QP, joins the IP group on its
// socket (roce.Device.AttachMulticast). The LID is not used: RoCE has none
// (ib_core's is_valid_mcast_lid checks it only on InfiniBand ports). The
// errnos are the kernel's: EINVAL for a QP that is not UD, a GID that is
// not multicast or (detach) a QP not attached (ib_attach_mcast,
// rxe_detach_mcast); EOPNOTSUPP on an iWARP device (siw has no multicast)
// and for an IPv6 group over the UDP backend; ENOMEM beyond rxe's limits.
//
//export srgo_mcast
func srgo_mcast(h C.uintptr_t, gid *C.uint8_t, lid C.uint16_t, attach C.int) C.int {
	q, ok := value[*qp](h)
	if !ok {
		return C.EINVAL
	}
	verb := "ibv_attach_mcast"
	if attach == 0 {
		verb = "ibv_detach_mcast"
	}
	g := *(*[16]byte)(unsafe.Pointer(gid))
	if q.eng == nil || q.eng.roce == nil {
		debugf("%s: qp 0x%x: the device is not RoCE: iWARP has no multicast (EOPNOTSUPP)", verb, q.qp.QPN())
		return C.EOPNOTSUPP
	}
	var err error
	if attach != 0 {
		err = q.eng.roce.AttachMulticast(q.qp, g)
	} else {
		err = q.eng.roce.DetachMulticast(q.qp, g)
	}
	switch {
	case err == nil:
		debugf("%s: qp 0x%x, group %v", verb, q.qp.QPN(), netip.AddrFrom16(g).Unmap())
		return 0
	case errors.Is(err, errors.ErrUnsupported):
		debugf("%s: qp 0x%x: %v (EOPNOTSUPP)", verb, q.qp.QPN(), err)
		return C.EOPNOTSUPP
	}
	debugf("%s: qp 0x%x: %v", verb, q.qp.QPN(), err)
	if errors.Is(err, ib.ErrInvalidArgument) || errors.Is(err, ib.ErrDestroyed) || errors.Is(err, ib.ErrNoResources) {
		return errno(err)
	}
	return C.EIO
}
