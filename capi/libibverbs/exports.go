package main

/*
#include <stdint.h>
#include <infiniband/verbs.h>

*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"github.com/softrdma/softrdma/capi/verbsdev"
	"github.com/softrdma/softrdma/devspec"
	"github.com/softrdma/softrdma/ibtransport"
)

// devices is the device table, loaded once from SOFTRDMA_DEVICES.
var devices struct {
	once sync.Once
	list []*verbsdev.Device
}

func loadDevices() []*verbsdev.Device {
	devices.once.Do(func() {
		l, err := verbsdev.Load()
		if err != nil {
			fmt.Fprintf(os.Stderr, "softrdma: %v\n", err)
			return
		}
		devices.list = l
		debugf("%s", banner(l))
	})
	return devices.list
}

func device(i C.int) *verbsdev.Device {
	l := loadDevices()
	if i < 0 || int(i) >= len(l) {
		return nil
	}
	return l[i]
}

// debugf prints to stderr when SOFTRDMA_DEBUG is set: why a verb was refused.
func debugf(format string, a ...any) {
	if debugOn() {
		fmt.Fprintf(os.Stderr, "softrdma: "+format+"\n", a...)
	}
}

// debugOn reports whether SOFTRDMA_DEBUG is set.
func debugOn() bool { return os.Getenv("SOFTRDMA_DEBUG") != "" }

//export srgo_ndevices
func srgo_ndevices() C.int { return C.int(len(loadDevices())) }

//export srgo_device_name
func srgo_device_name(i C.int, buf *C.char, n C.int, iwarp *C.int) C.int {
	d := device(i)
	if d == nil || n <= 0 {
		return C.EINVAL
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
	k := copy(b[:len(b)-1], d.Spec.Name)
	b[k] = 0
	if d.Spec.Transport == devspec.IWARP {
		*iwarp = 1
	}
	return 0
}

//export srgo_node_guid
func srgo_node_guid(i C.int) C.uint64_t {
	if d := device(i); d != nil {
		return C.uint64_t(d.NodeGUID())
	}
	return 0
}

//export srgo_ifindex
func srgo_ifindex(i C.int) C.uint32_t {
	if d := device(i); d != nil {
		return C.uint32_t(d.IfIndex)
	}
	return 0
}

// htobe64 returns v in network order, as C code stores a __be64.
func htobe64(v uint64) C.__be64 {
	var b [8]byte
	for k := range b {
		b[k] = byte(v >> (56 - 8*k))
	}
	return *(*C.__be64)(unsafe.Pointer(&b))
}

//export srgo_query_device
func srgo_query_device(i C.int, a *C.struct_ibv_device_attr) C.int {
	d := device(i)
	if d == nil {
		return C.EINVAL
	}
	v := d.Attr()
	fw := unsafe.Slice((*byte)(unsafe.Pointer(&a.fw_ver[0])), len(a.fw_ver))
	fw[copy(fw[:len(fw)-1], v.FWVer)] = 0
	a.node_guid = htobe64(v.NodeGUID)
	a.sys_image_guid = htobe64(v.NodeGUID)
	a.max_mr_size = C.uint64_t(v.MaxMRSize)
	a.page_size_cap = C.uint64_t(v.PageSizeCap)
	a.vendor_id = C.uint32_t(v.VendorID)
	a.vendor_part_id = C.uint32_t(v.VendorPartID)
	a.max_qp = C.int(v.MaxQP)
	a.max_qp_wr = C.int(v.MaxQPWR)
	a.device_cap_flags = C.uint(v.DeviceCapFlags)
	a.max_sge = C.int(v.MaxSGE)
	a.max_sge_rd = C.int(v.MaxSGERd)
	a.max_cq = C.int(v.MaxCQ)
	a.max_cqe = C.int(v.MaxCQE)
	a.max_mr = C.int(v.MaxMR)
	a.max_pd = C.int(v.MaxPD)
	a.max_qp_rd_atom = C.int(v.MaxQPRdAtom)
	a.max_res_rd_atom = C.int(v.MaxResRdAtom)
	a.max_qp_init_rd_atom = C.int(v.MaxQPRdAtom)
	a.atomic_cap = uint32(v.AtomicCap)
	a.max_mw = C.int(v.MaxMW)
	a.max_mcast_grp = C.int(v.MaxMcastGrp)
	a.max_mcast_qp_attach = C.int(v.MaxMcastQPAttach)
	a.max_total_mcast_qp_attach = C.int(v.MaxTotalMcastQPAttach)
	a.max_ah = C.int(v.MaxAH)
	a.max_srq = C.int(v.MaxSRQ)
	a.max_srq_wr = C.int(v.MaxSRQWR)
	a.max_srq_sge = C.int(v.MaxSRQSGE)
	a.max_pkeys = C.uint16_t(v.MaxPKeys)
	a.local_ca_ack_delay = C.uint8_t(v.LocalCAAckDelay)
	a.phys_port_cnt = 1
	return 0
}

//export srgo_query_port
func srgo_query_port(i C.int, port C.uint8_t, a *C.struct_ibv_port_attr) C.int {
	d := device(i)
	if d == nil || port != 1 {
		debugf("query port %d of device %d: no such port", port, i)
		return C.EINVAL
	}
	p := d.Port()
	a.state = uint32(p.State)
	a.max_mtu = uint32(p.MaxMTU)
	a.active_mtu = uint32(p.ActiveMTU)
	a.gid_tbl_len = C.int(p.GIDTableLen)
	a.port_cap_flags = C.uint32_t(p.CapFlags)
	a.max_msg_sz = C.uint32_t(p.MaxMsgSize)
	a.pkey_tbl_len = C.uint16_t(p.PKeyTableLen)
	a.max_vl_num = C.uint8_t(p.MaxVLNum)
	a.active_width = C.uint8_t(p.ActiveWidth)
	a.active_speed = C.uint8_t(p.ActiveSpeed)
	a.phys_state = C.uint8_t(p.PhysState)
	a.link_layer = C.uint8_t(p.LinkLayer)
	return 0
}

//export srgo_query_gid
func srgo_query_gid(i C.int, port C.uint32_t, index C.int, raw *C.uint8_t) C.int {
	d := device(i)
	if d == nil || port != 1 {
		debugf("query gid: device %d port %d: no such port", i, port)
		return C.EINVAL
	}
	g, ok := d.GID(int(index))
	if !ok {
		debugf("query gid: device %s index %d: outside the table (%d entries)", d.Spec.Name, index, d.GIDTableLen())
		return C.EINVAL
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(raw)), 16), g[:])
	return 0
}

//export srgo_query_pkey
func srgo_query_pkey(i C.int, port C.uint8_t, index C.int) C.int {
	d := device(i)
	if d == nil || port != 1 || index < 0 || int(index) >= len(d.Engine.PKeys) {
		return -1
	}
	return C.int(d.Engine.PKeys[index])
}

// errno maps an engine error to the errno libibverbs returns for it.
func errno(err error) C.int {
	switch {
	case errors.Is(err, ibtransport.ErrInvalidArgument), errors.Is(err, ibtransport.ErrDestroyed),
		errors.Is(err, ibtransport.ErrModifyQP), errors.Is(err, ibtransport.ErrBadState):
		// ib_modify_qp_is_ok and rxe_qp_chk_attr refuse a transition,
		// mask or attribute with -EINVAL.
		return C.EINVAL
	case errors.Is(err, ibtransport.ErrNoResources), errors.Is(err, ibtransport.ErrQueueFull):
		return C.ENOMEM
	case errors.Is(err, ibtransport.ErrBusy):
		return C.EBUSY
	}
	return C.EIO
}

//export srgo_alloc_pd
func srgo_alloc_pd(i C.int, err *C.int) C.uintptr_t {
	d := device(i)
	if d == nil {
		*err = C.EINVAL
		return 0
	}
	e, oerr := engineOf(i, d)
	if oerr != nil {
		debugf("alloc pd: device %s: %v", d.Spec.Name, oerr)
		*err = C.EIO
		return 0
	}
	return newHandle(e.ctx.AllocPD())
}

//export srgo_dealloc_pd
func srgo_dealloc_pd(h C.uintptr_t) C.int {
	pd, ok := value[*ibtransport.PD](h)
	if !ok {
		return C.EINVAL
	}
	if n := ahCount(pd); n > 0 {
		debugf("dealloc pd: %d address handles still use it", n)
		return C.EBUSY
	}
	if err := pd.Dealloc(); err != nil {
		debugf("dealloc pd: %v", err)
		return errno(err)
	}
	deleteHandle(h)
	return 0
}

func main() {}
