package verbsdev

import (
	"github.com/softrdma/softrdma/devspec"
	"github.com/softrdma/softrdma/ibtransport"
)

// Device capability flags of ibv_device_attr.device_cap_flags (enum
// ibv_device_cap_flags), the ones the engine honours.
const (
	CapBadPKeyCntr      = 1 << 1
	CapBadQKeyCntr      = 1 << 2
	CapChangePhyPort    = 1 << 5
	CapUDAVPortEnforce  = 1 << 6
	CapPortActiveEvent  = 1 << 10
	CapSysImageGUID     = 1 << 11
	CapRCRNRNAKGen      = 1 << 12
	CapSRQResize        = 1 << 13
	CapMemWindow        = 1 << 17
	CapMemMgtExtensions = 1 << 21
	CapMemWindowType2B  = 1 << 24
)

// Attr is ibv_query_device's answer (struct ibv_device_attr), host order.
type Attr struct {
	FWVer                                         string
	NodeGUID                                      uint64
	MaxMRSize, PageSizeCap                        uint64
	VendorID, VendorPartID                        uint32
	MaxQP, MaxQPWR                                int
	DeviceCapFlags                                uint32
	MaxSGE, MaxSGERd, MaxCQ, MaxCQE, MaxMR, MaxPD int
	MaxQPRdAtom, MaxResRdAtom                     int
	AtomicCap                                     int // IBV_ATOMIC_NONE 0, IBV_ATOMIC_HCA 1
	MaxMW                                         int
	MaxMcastGrp, MaxMcastQPAttach                 int
	MaxTotalMcastQPAttach                         int
	MaxAH, MaxSRQ, MaxSRQWR, MaxSRQSGE            int
	MaxPKeys                                      int
	LocalCAAckDelay                               int
}

// Attr returns the device attributes: the kernel driver's (profile), whose
// limits the engine enforces (Engine). A RoCE device offers UD multicast
// with rxe's limits (ibtransport.MaxMulticastGroups...); siw offers none.
func (d *Device) Attr() Attr {
	e, p := d.Engine, profiles[d.Spec.Transport]
	a := Attr{
		// The kernel's firmware version, 0, as libibverbs prints it.
		FWVer:        "0.0.0",
		NodeGUID:     d.NodeGUID(),
		MaxMRSize:    ^uint64(0),
		PageSizeCap:  p.pageSizeCap,
		VendorID:     d.Vendor(),
		VendorPartID: p.vendorPartID,
		MaxQP:        e.MaxQP,
		MaxQPWR:      e.MaxQPWR,
		MaxSGE:       e.MaxSGE,
		MaxSGERd:     p.maxSGERd,
		MaxCQ:        e.MaxCQ,
		MaxCQE:       p.maxCQE,
		MaxMR:        e.MaxMR,
		MaxPD:        p.maxPD,
		MaxQPRdAtom:  e.MaxRdAtomic,
		MaxResRdAtom: p.maxResRdAtom,
		MaxMW:        p.maxMW,
		MaxAH:        p.maxAH,
		MaxSRQ:       e.MaxSRQ,
		MaxSRQWR:     e.MaxSRQWR,
		MaxSRQSGE:    e.MaxSRQSGE,
		MaxPKeys:     p.maxPKeys,

		LocalCAAckDelay: p.localCAAckDelay,
		DeviceCapFlags:  p.capFlags,
		AtomicCap:       p.atomic,
	}
	if d.Spec.Transport == devspec.RoCE {
		a.MaxMcastGrp, a.MaxMcastQPAttach = ibtransport.MaxMulticastGroups, ibtransport.MaxMulticastQPAttach
		a.MaxTotalMcastQPAttach = ibtransport.MaxTotalMulticastAttach
	}
	return a
}

// Port attribute values (verbs.h enums).
const (
	PortActive     = 4 // IBV_PORT_ACTIVE
	PhysLinkUp     = 5 // LINK_UP
	LinkLayerEther = 2 // IBV_LINK_LAYER_ETHERNET
	PortCapCMSup   = 1 << 16
	PortCapDevMgmt = 1 << 19
	Width1X        = 1
	SpeedSDR       = 1
	MTUEnum4096    = 5
)

// Port is ibv_query_port's answer for port 1 (struct ibv_port_attr).
type Port struct {
	State, PhysState, LinkLayer int
	MaxMTU, ActiveMTU           int // enum ibv_mtu: 1 = 256 ... 5 = 4096
	GIDTableLen, PKeyTableLen   int
	CapFlags                    uint32
	MaxMsgSize                  uint32
	MaxVLNum                    int
	ActiveWidth, ActiveSpeed    int
}

// MTUEnum returns enum ibv_mtu for an MTU of n bytes (256..4096), 0 otherwise.
func MTUEnum(n int) int {
	for e, m := 1, 256; m <= 4096; e, m = e+1, m*2 {
		if n == m {
			return e
		}
	}
	return 0
}

// Port returns port 1's attributes: ACTIVE, Ethernet, the active MTU rxe would
// derive from the interface MTU, a maximum MTU of 4096 for RoCE (rxe's) and the
// active one for iWARP (siw's); 1X SDR, what the kernel reports for a link whose
// speed it does not know; the rest the kernel driver's (profile).
func (d *Device) Port() Port {
	pr := profiles[d.Spec.Transport]
	p := Port{
		State:        PortActive,
		PhysState:    PhysLinkUp,
		LinkLayer:    LinkLayerEther,
		MaxMTU:       MTUEnum4096,
		ActiveMTU:    MTUEnum(d.ActiveMTU()),
		GIDTableLen:  d.GIDTableLen(),
		PKeyTableLen: pr.pkeyTableLen,
		CapFlags:     pr.portCapFlags,
		MaxMsgSize:   d.Engine.MaxMsgSize,
		MaxVLNum:     pr.maxVLNum,
		ActiveWidth:  Width1X,
		ActiveSpeed:  SpeedSDR,
	}
	if d.Spec.Transport == devspec.IWARP {
		p.MaxMTU = p.ActiveMTU
	}
	return p
}
