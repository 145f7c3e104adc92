// Package verbsdev describes the devices softrdma's libibverbs.so.1 replacement
// (capi/libibverbs) shows to C programs: which devices there are (the
// SOFTRDMA_DEVICES list, devspec), and what ibv_query_device, ibv_query_port and
// ibv_query_gid say about each, in the shape the kernel's rxe (RoCE) and siw
// (iWARP) give them, so that tools and scripts written for those see the same
// thing with only the device name changed. It is pure Go: the cgo layer only
// copies these values into rdma-core's structs.
package verbsdev

import (
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/softrdma/softrdma/devspec"
	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/roce"
)

// Vendor IDs ibv_query_device reports: rxe's (0xFFFFFF, which perftest and
// UCX treat as "not a vendor we know": ibv_post_send, no vendor extensions)
// and siw's (SIW_VENDOR_ID, "bmt").
const (
	VendorRoCE  = 0xFFFFFF
	VendorIWARP = 0x626d74
)

// GIDTableLen is the length of a port's GID table: rxe's
// (RXE_PORT_GID_TBL_LEN); entries past the device's GIDs are zero. siw has one.
const (
	GIDTableLenRoCE  = 1024
	GIDTableLenIWARP = 1
)

// Device is one device as a verbs program sees it.
type Device struct {
	Spec devspec.Spec
	// MAC is the interface's Ethernet address (zero for loopback or no
	// interface).
	MAC [6]byte
	// IfaceMTU is the interface MTU (lo's for a loopback address on no
	// interface, else 1500 when the address is on no interface).
	IfaceMTU int
	// IfIndex is the interface's index (0 when on none).
	IfIndex int
	// GIDs is the GID table before the device is opened: what roce.Open will
	// derive (roce.GIDTable) for RoCE; the MAC padded with zeros, siw's one
	// GID, for iWARP.
	GIDs []netip.Addr
	// Limits are the limits the engine must enforce, the kernel driver's
	// (rxe's, siw's): the engine configuration to open the device with (the
	// other fields zero, for the engine and the device to choose).
	Limits ibtransport.ContextConfig
	// Engine is the engine configuration Limits give, with its defaults: the
	// limits ibv_query_device reports.
	Engine ibtransport.ContextConfig
}

// NodeGUID returns the node GUID in host order: the EUI-64 of the MAC as rxe
// and siw make it (addrconf_addr_eui48). Loopback has no MAC; a device there
// takes the EUI-64 of 02:00 and its IPv4 address (or the low 4 bytes of its
// IPv6 one), so that two devices on lo differ.
func (d *Device) NodeGUID() uint64 {
	mac := d.MAC
	if mac == ([6]byte{}) {
		a := d.Spec.Addr.As16()
		mac = [6]byte{0x02, 0x00, a[12], a[13], a[14], a[15]}
	}
	g := [8]byte{mac[0] ^ 0x02, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]}
	var v uint64
	for _, b := range g {
		v = v<<8 | uint64(b)
	}
	return v
}

// ActiveMTU returns the port's active MTU in bytes: rxe's derivation from the
// interface MTU (roce.PathMTUFor) for both transports.
func (d *Device) ActiveMTU() int { return roce.PathMTUFor(d.IfaceMTU) }

// GIDTableLen returns the port's GID table length.
func (d *Device) GIDTableLen() int {
	if d.Spec.Transport == devspec.IWARP {
		return GIDTableLenIWARP
	}
	return GIDTableLenRoCE
}

// Vendor returns the vendor ID.
func (d *Device) Vendor() uint32 {
	if d.Spec.Transport == devspec.IWARP {
		return VendorIWARP
	}
	return VendorRoCE
}

// GID returns entry i of the port's GID table (zero past the device's GIDs)
// and whether i is inside the table.
func (d *Device) GID(i int) ([16]byte, bool) {
	if i < 0 || i >= d.GIDTableLen() {
		return [16]byte{}, false
	}
	if i < len(d.GIDs) {
		return d.GIDs[i].As16(), true
	}
	return [16]byte{}, true
}

// Load returns the devices a program sees: devspec.Resolve's list
// ($SOFTRDMA_DEVICES, else the config file, else one roce and one iwarp
// device per interface that is up), described.
func Load() ([]*Device, error) {
	specs, _, err := devspec.Resolve(os.Getenv)
	if err != nil {
		return nil, err
	}
	devs := make([]*Device, 0, len(specs))
	for _, s := range specs {
		d, err := Describe(s)
		if err != nil {
			return nil, err
		}
		devs = append(devs, d)
	}
	return devs, nil
}

// Describe returns what a program sees of the device s: the interface that
// holds s's address (or s.Iface) gives the MAC, the MTU and the addresses of
// the GID table, as roce.Open would take them; a tap device has none yet.
func Describe(s devspec.Spec) (*Device, error) {
	d := &Device{Spec: s, IfaceMTU: 1500}
	var ifi *net.Interface
	if s.Backend == devspec.BackendTAP {
		// The TAP device, named by iface, is made when the device opens:
		// the table is the address alone, the MTU the TAP's 1500, and GID
		// 0 the zero MAC's until then (the TAP host's MAC is random).
	} else if s.Iface != "" {
		var err error
		if ifi, err = net.InterfaceByName(s.Iface); err != nil {
			return nil, fmt.Errorf("device %s: iface %q: %w", s.Name, s.Iface, err)
		}
	} else {
		ifi = roce.InterfaceWithAddr(s.Addr)
	}
	gids := roce.GIDTable(d.MAC, []netip.Addr{s.Addr})
	if ifi != nil {
		if len(ifi.HardwareAddr) == 6 {
			d.MAC = [6]byte(ifi.HardwareAddr)
		}
		d.IfaceMTU, d.IfIndex = ifi.MTU, ifi.Index
		if s.Transport != devspec.IWARP {
			// The table roce.Open gives a device on ifi, from the same lister.
			var err error
			if gids, err = roce.InterfaceGIDTable(ifi.Name); err != nil {
				return nil, fmt.Errorf("device %s: %w", s.Name, err)
			}
		}
	} else if lo := roce.LoopbackInterface(); lo != nil && s.Addr.IsLoopback() {
		// Linux routes all of 127.0.0.0/8 to lo: a loopback address on no
		// interface has lo's MTU, as roce.Open gives its device; the GID
		// table is the address alone.
		d.IfaceMTU = lo.MTU
	}
	if s.Transport == devspec.IWARP {
		var g [16]byte
		copy(g[:], d.MAC[:])
		d.GIDs = []netip.Addr{netip.AddrFrom16(g)}
	} else {
		d.GIDs = gids
	}
	d.Limits = profiles[s.Transport].limits
	cfg := d.Limits
	cfg.PortMTU = d.ActiveMTU()
	d.Engine = ibtransport.NewContext(cfg).Config()
	return d, nil
}
