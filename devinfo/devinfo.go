// Package devinfo describes softrdma's devices the way `ibv_devinfo -v`
// and iproute2's `rdma link` describe kernel ones, for softrdma devices:
// name, transport, port state, MTUs, the GID table with each entry's type,
// and the interface and address under the device. The description is
// capi/verbsdev's, the one softrdma's libibverbs gives C programs, so that
// `softrdma devices` and `ibv_devinfo` run on the libraries agree.
package devinfo

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"

	"github.com/softrdma/softrdma/capi/verbsdev"
	"github.com/softrdma/softrdma/devspec"
	"github.com/softrdma/softrdma/roce"
)

// Device is one device's description.
type Device struct {
	Name string `json:"name"`
	// Spec is the device's description (devspec), as SOFTRDMA_DEVICES or
	// --device take it.
	Spec string `json:"spec"`
	// Transport is "roce" or "iwarp"; TransportType is what ibv_devinfo
	// calls it: "InfiniBand" (rxe's, RoCE's) or "iWARP".
	Transport     string `json:"transport"`
	TransportType string `json:"transport_type"`
	// Backend is the RoCE backend: udp, afpacket or tap ("" for iWARP).
	Backend string `json:"backend,omitempty"`
	// Interface is the network interface holding the address (lo for any
	// loopback address, listed or not; "" on none), InterfaceMTU its MTU.
	Interface    string `json:"interface"`
	InterfaceMTU int    `json:"interface_mtu"`
	Address      string `json:"address"`
	NodeGUID     string `json:"node_guid"`
	// State and PhysicalState are the port's, as `rdma link` prints them.
	State         string `json:"state"`
	PhysicalState string `json:"physical_state"`
	LinkLayer     string `json:"link_layer"`
	// MaxMTU and ActiveMTU are the port's, in octets.
	MaxMTU    int `json:"max_mtu"`
	ActiveMTU int `json:"active_mtu"`
	// GIDs are the non-zero entries of the GID table (ibv_devinfo -v's).
	GIDs        []GID `json:"gids"`
	GIDTableLen int   `json:"gid_table_len"`
	// Attributes are the device's and port's limits and capabilities (-v).
	Attributes *Attributes `json:"attributes,omitempty"`
}

// GID is one entry of the GID table.
type GID struct {
	Index int    `json:"index"`
	GID   string `json:"gid"`
	// Type is ibv_query_gid_ex's: "RoCE v2" for every RoCE entry (rxe's
	// with RoCE v2 only), "IB" for iWARP's one (siw's).
	Type string `json:"type"`
}

// Attributes are ibv_query_device's and ibv_query_port's answers, with
// ibv_devinfo's key names.
type Attributes struct {
	FWVer           string `json:"fw_ver"`
	VendorID        uint32 `json:"vendor_id"`
	VendorPartID    uint32 `json:"vendor_part_id"`
	MaxMRSize       uint64 `json:"max_mr_size"`
	PageSizeCap     uint64 `json:"page_size_cap"`
	MaxQP           int    `json:"max_qp"`
	MaxQPWR         int    `json:"max_qp_wr"`
	DeviceCapFlags  uint32 `json:"device_cap_flags"`
	MaxSGE          int    `json:"max_sge"`
	MaxSGERd        int    `json:"max_sge_rd"`
	MaxCQ           int    `json:"max_cq"`
	MaxCQE          int    `json:"max_cqe"`
	MaxMR           int    `json:"max_mr"`
	MaxPD           int    `json:"max_pd"`
	MaxQPRdAtom     int    `json:"max_qp_rd_atom"`
	MaxResRdAtom    int    `json:"max_res_rd_atom"`
	AtomicCap       string `json:"atomic_cap"`
	MaxMW           int    `json:"max_mw"`
	MaxAH           int    `json:"max_ah"`
	MaxSRQ          int    `json:"max_srq"`
	MaxSRQWR        int    `json:"max_srq_wr"`
	MaxSRQSGE       int    `json:"max_srq_sge"`
	MaxPKeys        int    `json:"max_pkeys"`
	LocalCAAckDelay int    `json:"local_ca_ack_delay"`
	MaxMsgSize      uint32 `json:"max_msg_sz"`
	PortCapFlags    uint32 `json:"port_cap_flags"`
	PKeyTableLen    int    `json:"pkey_tbl_len"`
	MaxVLNum        int    `json:"max_vl_num"`
	ActiveWidth     string `json:"active_width"`
	ActiveSpeed     string `json:"active_speed"`
	PhysPortCnt     int    `json:"phys_port_cnt"`
	ActiveMTUEnum   int    `json:"active_mtu_enum"`
	MaxMTUEnum      int    `json:"max_mtu_enum"`
}

// Resolve returns the specs of args (SPECs, as --device takes them; named
// as SOFTRDMA_DEVICES names them) or, with none, devspec.Resolve's (the
// environment, the config file, the defaults), and where they came from.
func Resolve(args []string, getenv func(string) string) ([]devspec.Spec, string, error) {
	if len(args) > 0 {
		specs, err := devspec.ParseList(strings.Join(args, ";"))
		return specs, "--device", err
	}
	specs, src, err := devspec.Resolve(getenv)
	return specs, src.String(), err
}

// Describe describes the devices of specs: verbsdev.Describe's view, the
// one softrdma's libibverbs gives; with verbose, the attributes too.
func Describe(specs []devspec.Spec, verbose bool) ([]Device, error) {
	out := make([]Device, 0, len(specs))
	for _, s := range specs {
		d, err := verbsdev.Describe(s)
		if err != nil {
			return nil, err
		}
		out = append(out, describe(d, verbose))
	}
	return out, nil
}

func describe(d *verbsdev.Device, verbose bool) Device {
	s, p := d.Spec, d.Port()
	spec := s
	spec.Name = ""
	dev := Device{
		Name: s.Name, Spec: spec.String(), Transport: string(s.Transport), TransportType: "InfiniBand",
		Backend: string(s.Backend), Interface: s.Iface, InterfaceMTU: d.IfaceMTU, Address: s.Addr.String(),
		NodeGUID: guid(d.NodeGUID()), State: "ACTIVE", PhysicalState: "LINK_UP", LinkLayer: "Ethernet",
		MaxMTU: mtuBytes(p.MaxMTU), ActiveMTU: d.ActiveMTU(), GIDs: []GID{}, GIDTableLen: d.GIDTableLen(),
	}
	if dev.Interface == "" && d.IfIndex > 0 {
		if ifi, err := net.InterfaceByIndex(d.IfIndex); err == nil {
			dev.Interface = ifi.Name
		}
	}
	if dev.Interface == "" && s.Addr.IsLoopback() {
		// A loopback address on no interface (127.0.0.2): Linux routes all
		// of 127/8 over lo, whose MTU the device has, and perf's "Device"
		// says lo too; "-" told a user it was on none.
		if lo := roce.LoopbackInterface(); lo != nil {
			dev.Interface = lo.Name
		}
	}
	typ := "RoCE v2"
	if s.Transport == devspec.IWARP {
		dev.TransportType, typ = "iWARP", "IB"
	}
	for i, g := range d.GIDs {
		if g.As16() == ([16]byte{}) {
			continue
		}
		dev.GIDs = append(dev.GIDs, GID{Index: i, GID: gidString(g), Type: typ})
	}
	if verbose {
		a := d.Attr()
		atomic := "ATOMIC_NONE"
		if a.AtomicCap == 1 {
			atomic = "ATOMIC_HCA"
		}
		dev.Attributes = &Attributes{
			FWVer: a.FWVer, VendorID: a.VendorID, VendorPartID: a.VendorPartID, MaxMRSize: a.MaxMRSize, PageSizeCap: a.PageSizeCap,
			MaxQP: a.MaxQP, MaxQPWR: a.MaxQPWR, DeviceCapFlags: a.DeviceCapFlags, MaxSGE: a.MaxSGE, MaxSGERd: a.MaxSGERd,
			MaxCQ: a.MaxCQ, MaxCQE: a.MaxCQE, MaxMR: a.MaxMR, MaxPD: a.MaxPD, MaxQPRdAtom: a.MaxQPRdAtom, MaxResRdAtom: a.MaxResRdAtom,
			AtomicCap: atomic, MaxMW: a.MaxMW, MaxAH: a.MaxAH, MaxSRQ: a.MaxSRQ, MaxSRQWR: a.MaxSRQWR, MaxSRQSGE: a.MaxSRQSGE,
			MaxPKeys: a.MaxPKeys, LocalCAAckDelay: a.LocalCAAckDelay, MaxMsgSize: p.MaxMsgSize, PortCapFlags: p.CapFlags,
			PKeyTableLen: p.PKeyTableLen, MaxVLNum: p.MaxVLNum, ActiveWidth: "1X", ActiveSpeed: "2.5 Gbps", PhysPortCnt: 1,
			ActiveMTUEnum: p.ActiveMTU, MaxMTUEnum: p.MaxMTU,
		}
	}
	return dev
}

// gidString writes a GID as ibv_devinfo does: an IPv6 address, with an
// IPv4-mapped one as ::ffff:a.b.c.d.
func gidString(g netip.Addr) string { return netip.AddrFrom16(g.As16()).String() }

// guid writes a GUID as ibv_devinfo does: four groups of four hex digits.
func guid(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48, g>>32&0xffff, g>>16&0xffff, g&0xffff)
}

// mtuBytes turns enum ibv_mtu into octets.
func mtuBytes(e int) int {
	if e < 1 || e > 5 {
		return 0
	}
	return 128 << e
}

// WriteJSON writes devs as indented JSON, snake_case keys.
func WriteJSON(w io.Writer, devs []Device) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Devices []Device `json:"devices"`
	}{devs})
}

// WriteText writes each device as `rdma link` does (a "link NAME/1" line)
// followed by its transport, node GUID, MTUs, interface and address, and
// its GID table as ibv_devinfo -v prints it; verbose adds the attributes.
func WriteText(w io.Writer, devs []Device, verbose bool) error {
	var b strings.Builder
	if len(devs) == 0 {
		b.WriteString("no devices\n")
	}
	for i, d := range devs {
		if i > 0 {
			b.WriteByte('\n')
		}
		netdev := d.Interface
		if netdev == "" {
			netdev = "-"
		}
		fmt.Fprintf(&b, "link %s/1 state %s physical_state %s netdev %s\n", d.Name, d.State, d.PhysicalState, netdev)
		fmt.Fprintf(&b, "\tspec:\t\t%s\n", d.Spec)
		fmt.Fprintf(&b, "\ttransport:\t%s (%s)\n", d.TransportType, d.Transport)
		if d.Backend != "" {
			fmt.Fprintf(&b, "\tbackend:\t%s\n", d.Backend)
		}
		fmt.Fprintf(&b, "\taddress:\t%s\n", d.Address)
		fmt.Fprintf(&b, "\tinterface:\t%s (mtu %d)\n", netdev, d.InterfaceMTU)
		fmt.Fprintf(&b, "\tnode_guid:\t%s\n", d.NodeGUID)
		fmt.Fprintf(&b, "\tlink_layer:\t%s\n", d.LinkLayer)
		fmt.Fprintf(&b, "\tmax_mtu:\t%d\n\tactive_mtu:\t%d\n", d.MaxMTU, d.ActiveMTU)
		if a := d.Attributes; a != nil {
			for _, kv := range []struct {
				k string
				v any
			}{
				{"fw_ver", a.FWVer}, {"vendor_id", fmt.Sprintf("0x%04x", a.VendorID)}, {"vendor_part_id", a.VendorPartID},
				{"phys_port_cnt", a.PhysPortCnt}, {"max_mr_size", fmt.Sprintf("0x%x", a.MaxMRSize)}, {"page_size_cap", fmt.Sprintf("0x%x", a.PageSizeCap)},
				{"max_qp", a.MaxQP}, {"max_qp_wr", a.MaxQPWR}, {"device_cap_flags", fmt.Sprintf("0x%08x", a.DeviceCapFlags)},
				{"max_sge", a.MaxSGE}, {"max_sge_rd", a.MaxSGERd}, {"max_cq", a.MaxCQ}, {"max_cqe", a.MaxCQE}, {"max_mr", a.MaxMR},
				{"max_pd", a.MaxPD}, {"max_qp_rd_atom", a.MaxQPRdAtom}, {"max_res_rd_atom", a.MaxResRdAtom}, {"atomic_cap", a.AtomicCap},
				{"max_mw", a.MaxMW}, {"max_ah", a.MaxAH}, {"max_srq", a.MaxSRQ}, {"max_srq_wr", a.MaxSRQWR}, {"max_srq_sge", a.MaxSRQSGE},
				{"max_pkeys", a.MaxPKeys}, {"local_ca_ack_delay", a.LocalCAAckDelay}, {"max_msg_sz", fmt.Sprintf("0x%x", a.MaxMsgSize)},
				{"port_cap_flags", fmt.Sprintf("0x%08x", a.PortCapFlags)}, {"pkey_tbl_len", a.PKeyTableLen}, {"max_vl_num", a.MaxVLNum},
				{"active_width", a.ActiveWidth}, {"active_speed", a.ActiveSpeed},
			} {
				tabs := "\t"
				if len(kv.k) < 7 {
					tabs = "\t\t"
				}
				fmt.Fprintf(&b, "\t%s:%s%v\n", kv.k, tabs, kv.v)
			}
		}
		fmt.Fprintf(&b, "\tgid_tbl_len:\t%d\n", d.GIDTableLen)
		for _, g := range d.GIDs {
			fmt.Fprintf(&b, "\tGID[%3d]:\t%s, %s\n", g.Index, g.GID, g.Type)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
