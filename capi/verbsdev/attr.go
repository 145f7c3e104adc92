package verbsdev

import "github.com/softrdma/softrdma/devspec"

// Device capability flags of ibv_device_attr.device_cap_flags (enum
// ibv_device_cap_flags), the ones the engine honours.
const (
	CapBadPKeyCntr      = 1 << 1
	CapBadQKeyCntr      = 1 << 2
	CapPortActiveEvent  = 1 << 10
	CapSysImageGUID     = 1 << 11
	CapRCRNRNAKGen      = 1 << 12
	CapMemWindow        = 1 << 17
	CapMemMgtExtensions = 1 << 21
	CapMemWindowType2B  = 1 << 24
)

// Attr is ibv_query_device's answer (struct ibv_device_attr), host order.
type Attr struct {
	FWVer                                         string
	NodeGUID                                      uint64
	MaxMRSize, PageSizeCap                        uint64
	VendorID                                      uint32
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

// Attr returns the device attributes: the engine's limits (which it enforces),
// and rxe's values (rxe_param.h) where the engine has no limit of its own
// (max_mr_size, page_size_cap, max_pd, max_ah, max_res_rd_atom,
// local_ca_ack_delay). Multicast is not offered.
func (d *Device) Attr() Attr {
	e := d.Engine
	a := Attr{
		NodeGUID:     d.NodeGUID(),
		MaxMRSize:    ^uint64(0),
		PageSizeCap:  0xfffff000,
		VendorID:     d.Vendor(),
		MaxQP:        e.MaxQP,
		MaxQPWR:      e.MaxQPWR,
		MaxSGE:       e.MaxSGE,
		MaxSGERd:     e.MaxSGE,
		MaxCQ:        e.MaxCQ,
		MaxCQE:       e.MaxCQE,
		MaxMR:        e.MaxMR,
		MaxPD:        0x7ffc,
		MaxQPRdAtom:  e.MaxRdAtomic,
		MaxResRdAtom: 0x3f000,
		MaxMW:        e.MaxMR,
		MaxAH:        0x7ffc,
		MaxSRQ:       e.MaxSRQ,
		MaxSRQWR:     e.MaxSRQWR,
		MaxSRQSGE:    e.MaxSGE,
		MaxPKeys:     len(e.PKeys),

		LocalCAAckDelay: 15,
		DeviceCapFlags: CapBadPKeyCntr | CapBadQKeyCntr | CapPortActiveEvent | CapSysImageGUID |
			CapRCRNRNAKGen | CapMemWindow | CapMemMgtExtensions | CapMemWindowType2B,
	}
	if d.Spec.Transport == devspec.RoCE {
		a.AtomicCap = 1
	}
	return a
}

// Port attribute values (verbs.h enums).
const (
	PortActive       = 4 // IBV_PORT_ACTIVE
	PhysLinkUp       = 5 // LINK_UP
	LinkLayerEther   = 2 // IBV_LINK_LAYER_ETHERNET
	PortCapCMSup     = 1 << 16
	PortCapDevMgmt   = 1 << 19
	Width1X          = 1
	SpeedSDR         = 1
	MTUEnum4096      = 5
	PortMaxVLNum     = 1
	portCapFlagsRoCE = PortCapCMSup
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
// speed it does not know.
func (d *Device) Port() Port {
	p := Port{
		State:        PortActive,
		PhysState:    PhysLinkUp,
		LinkLayer:    LinkLayerEther,
		MaxMTU:       MTUEnum4096,
		ActiveMTU:    MTUEnum(d.ActiveMTU()),
		GIDTableLen:  d.GIDTableLen(),
		PKeyTableLen: len(d.Engine.PKeys),
		CapFlags:     portCapFlagsRoCE,
		MaxMsgSize:   d.Engine.MaxMsgSize,
		MaxVLNum:     PortMaxVLNum,
		ActiveWidth:  Width1X,
		ActiveSpeed:  SpeedSDR,
	}
	if d.Spec.Transport == devspec.IWARP {
		p.MaxMTU = p.ActiveMTU
		p.CapFlags = PortCapCMSup | PortCapDevMgmt
	}
	return p
}
