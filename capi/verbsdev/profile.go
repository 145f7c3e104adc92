package verbsdev

import (
	"fmt"
	"math/bits"

	"github.com/softrdma/softrdma/devspec"
	"github.com/softrdma/softrdma/ibtransport"
)

// profile is what the kernel's driver reports for one of its devices: rxe for
// RoCE (drivers/infiniband/sw/rxe/rxe_param.h), siw for iWARP (siw.h,
// siw_verbs.c siw_query_device), Linux 6.1 as Debian 12 ships it, checked
// against `ibv_devinfo -v` of rxe0 and siw0 (testdata/kernel, TestKernelDevinfo).
// softrdma's devices report the same, so that tools and scripts see no
// difference but the names, GUIDs and addresses; the limits the engine
// enforces (limits) are these same numbers, but for MaxCQE (see maxCQE).
type profile struct {
	// limits are the engine's limits (only these fields are set: the rest
	// take the engine's and the device's defaults).
	limits ibtransport.ContextConfig

	// maxCQE is the driver's max_cqe, the most entries ibv_create_cq takes;
	// the engine's MaxCQE is the depth that many gives (CQDepth): siw
	// rounds a CQ up to a power of two, past its max_cqe.
	maxCQE int

	vendorPartID              uint32
	pageSizeCap               uint64
	capFlags                  uint32
	maxSGERd                  int
	maxPD, maxAH, maxMW       int
	maxResRdAtom              int
	maxPKeys, localCAAckDelay int
	atomic                    int
	maxVLNum                  int
	pkeyTableLen              int
	portCapFlags              uint32
}

var profiles = map[devspec.Transport]profile{
	devspec.RoCE: {
		limits: ibtransport.ContextConfig{
			MaxQP:       1048560, // RXE_MAX_QP less RXE_MIN_QP_INDEX
			MaxQPWR:     1048576, // RXE_MAX_QP_WR
			MaxSGE:      32,      // RXE_MAX_SGE
			MaxCQ:       1048576, // RXE_MAX_CQ
			MaxCQE:      32767,   // RXE_MAX_CQE: rxe's queue of that many holds that many
			MaxMR:       524287,  // RXE_MAX_MR (the engine counts windows too)
			MaxSRQ:      917503,  // RXE_MAX_SRQ
			MaxSRQWR:    1048576, // RXE_MAX_SRQ_WR
			MaxSRQSGE:   27,      // RXE_MAX_SRQ_SGE
			MaxRdAtomic: 128,     // RXE_MAX_QP_RD_ATOM
			MaxMsgSize:  0x800000,
		},
		maxCQE:      32767, // RXE_MAX_CQE
		pageSizeCap: 0xfffff000,
		// rxe's RXE_DEVICE_CAP_FLAGS but AUTO_PATH_MIG, which the engine
		// does not do (no alternate path). CHANGE_PHY_PORT and
		// UD_AV_PORT_ENFORCE hold with one port, which modify_qp checks;
		// SRQ_RESIZE is ibtransport.SRQ.Resize.
		capFlags: CapBadPKeyCntr | CapBadQKeyCntr | CapChangePhyPort | CapUDAVPortEnforce |
			CapPortActiveEvent | CapSysImageGUID | CapRCRNRNAKGen | CapSRQResize | CapMemWindow |
			CapMemMgtExtensions | CapMemWindowType2B,
		maxSGERd: 32,
		maxPD:    1048576, maxAH: 32767, maxMW: 524287,
		maxResRdAtom: 258048, maxPKeys: 64, localCAAckDelay: 15,
		atomic: 1, maxVLNum: 1, pkeyTableLen: 1,
		portCapFlags: PortCapCMSup,
	},
	devspec.IWARP: {
		limits: ibtransport.ContextConfig{
			MaxQP:         102400,     // SIW_MAX_QP
			MaxQPWR:       32768,      // SIW_MAX_QP_WR
			MaxSGE:        6,          // SIW_MAX_SGE
			MaxInlineData: 80,         // SIW_MAX_INLINE: 16 bytes × (SIW_MAX_SGE - 1)
			MaxCQ:         102400,     // SIW_MAX_CQ
			MaxCQE:        1 << 22,    // SIW_MAX_CQE rounded up to a power of two (siw_create_cq)
			MaxMR:         1024000,    // SIW_MAX_MR
			MaxSRQ:        102400,     // SIW_MAX_SRQ
			MaxSRQWR:      327680,     // SIW_MAX_SRQ_WR
			MaxRdAtomic:   128,        // SIW_MAX_ORD_QP
			MaxMsgSize:    0xffffffff, // siw_query_port: max_msg_sz -1
			ExternalQPs:   true,       // iwarp.Open's: RDMAP's limit, not IBTA's 2^31
		},
		maxCQE:       3276800, // SIW_MAX_CQE
		vendorPartID: 1,       // siw numbers its devices from 1
		pageSizeCap:  0x1000,
		capFlags:     CapMemMgtExtensions,
		maxSGERd:     1,
		maxPD:        102400, maxResRdAtom: 13107200,
		portCapFlags: PortCapCMSup | PortCapDevMgmt,
	},
}

// CQDepth returns how many completions a CQ asked for with cqe entries holds,
// which ibv_create_cq reports in cq->cqe, sized as the kernel's driver sizes
// it: on RoCE rxe's queue (RXEQueueDepth), on iWARP siw's, cqe rounded up to
// a power of two (siw_create_cq). A cqe out of 1..max_cqe is refused, as
// rxe_cq_chk_attr and siw_create_cq refuse it (-EINVAL).
func (d *Device) CQDepth(cqe int) (int, error) {
	p := profiles[d.Spec.Transport]
	if cqe < 1 || cqe > p.maxCQE {
		return 0, fmt.Errorf("create cq: cqe %d not in 1..%d (max_cqe)", cqe, p.maxCQE)
	}
	if d.Spec.Transport == devspec.IWARP {
		return 1 << bits.Len(uint(cqe-1)), nil
	}
	return RXEQueueDepth(cqe), nil
}

// RXEQueueDepth is the number of entries rxe's queue of n entries holds
// (rxe_queue_init): n+1 slots rounded up to a power of two, one slot kept
// empty. It sizes rxe's CQs at create and resize.
func RXEQueueDepth(n int) int {
	return 1<<bits.Len(uint(n)) - 1
}
