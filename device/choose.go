package device

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/softrdma/softrdma/devspec"
	"github.com/softrdma/softrdma/roce"
)

// Choice is what the RDMA tools' flags say about the device: rdma-core's and
// perftest's -d (a device, here an interface or one of its addresses) and
// GID index (-g, -x), and the peer when it is known.
type Choice struct {
	// Backend is the RoCE backend.
	Backend devspec.Backend
	// Name is an interface, one of the addresses of one, or "": the
	// interface the kernel routes to Peer through, else (a server) the first
	// interface that is up, is not a loopback and has an address, else the
	// loopback. A loopback address no interface holds (Linux routes all of
	// 127/8 to lo) is a device on that address alone. With backend=tap it
	// names the TAP device to create.
	Name string
	// GIDIndex is the index of the GID the device sends from; -1 for the
	// first address of Peer's family (IPv4 on a server).
	GIDIndex int
	// GIDFlag is the flag that gave GIDIndex (-g, -x), for the errors.
	GIDFlag string
	// Peer is the other side's address, or invalid.
	Peer netip.Addr
	// TAPAddrs are backend=tap's host addresses.
	TAPAddrs []netip.Addr
}

// Spec returns the RoCE device c names. The GID table that GIDIndex indexes
// is the one the device will have (roce.InterfaceGIDTable, Linux's order
// for rxe on the same interface; on a lone loopback address, the link-local
// GID and that address).
func (c Choice) Spec() (devspec.Spec, error) {
	s := devspec.Spec{Transport: devspec.RoCE, Backend: c.Backend}
	var gids []netip.Addr
	switch c.Backend {
	case devspec.BackendUDP, devspec.BackendAFPacket:
		ifc, lone, err := findInterface(c.Name, c.Peer)
		if err != nil {
			return devspec.Spec{}, err
		}
		if lone.IsValid() && ifc == nil {
			gids = roce.GIDTable([6]byte{}, []netip.Addr{lone})
		} else {
			s.Iface = ifc.Name
			if gids, err = roce.InterfaceGIDTable(ifc.Name); err != nil {
				return devspec.Spec{}, err
			}
		}
		if lone.IsValid() && c.GIDIndex < 0 {
			s.Addr = lone // -d ADDR: that address
			return s, nil
		}
	case devspec.BackendTAP:
		if len(c.TAPAddrs) == 0 {
			return devspec.Spec{}, errors.New("--backend tap: give the device's addresses with --tap-addr (and the kernel side's with --tap-kernel-addr)")
		}
		s.Iface = c.Name
		// The MAC (GID 0's) is not known before the TAP is made: indexes
		// from 1 do not depend on it.
		gids = roce.GIDTable([6]byte{}, c.TAPAddrs)
	default:
		return devspec.Spec{}, fmt.Errorf("--backend %q: want udp, afpacket or tap", c.Backend)
	}
	a, err := PickGID(gids, c.GIDIndex, c.GIDFlag, c.Peer)
	if err != nil {
		return devspec.Spec{}, err
	}
	s.Addr = a
	return s, nil
}

// PickGID returns the address of GID index gidx (given by flag), or without
// one (-1) the first routable GID of peer's family (IPv4 without a peer),
// else the first routable GID.
func PickGID(gids []netip.Addr, gidx int, flag string, peer netip.Addr) (netip.Addr, error) {
	switch {
	case gidx == 0 && len(gids) > 0:
		return netip.Addr{}, fmt.Errorf("GID index 0 is the link-local address %v: use a routable one (%s 1 and up)", gids[0], flag)
	case gidx >= 0:
		if gidx >= len(gids) {
			return netip.Addr{}, fmt.Errorf("can't read sgid of index %d (the device has %d GIDs)", gidx, len(gids))
		}
		return gids[gidx].Unmap(), nil
	}
	want4 := !peer.IsValid() || peer.Unmap().Is4()
	var first netip.Addr
	for i, g := range gids {
		a := g.Unmap()
		if i == 0 || a.IsLinkLocalUnicast() {
			continue
		}
		if a.Is4() == want4 {
			return a, nil
		}
		if !first.IsValid() {
			first = a
		}
	}
	if !first.IsValid() {
		return netip.Addr{}, errors.New("the device has no IP address")
	}
	return first, nil
}

// findInterface returns the interface name names (see Choice.Name). When
// name is an address, that is lone too; a loopback address on no interface
// is lone with a nil interface.
func findInterface(name string, peer netip.Addr) (ifc *net.Interface, lone netip.Addr, err error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, netip.Addr{}, err
	}
	if ip, err := netip.ParseAddr(name); err == nil {
		ip = ip.Unmap()
		if i := roce.InterfaceWithAddr(ip); i != nil {
			return i, ip, nil
		}
		if ip.IsLoopback() {
			return nil, ip, nil
		}
		return nil, netip.Addr{}, fmt.Errorf("IB device %s not found (no interface has that address)", name)
	}
	if name == "" && peer.IsValid() {
		if src, err := RouteSource(peer); err == nil {
			if i := roce.InterfaceWithAddr(src); i != nil {
				return i, netip.Addr{}, nil
			}
		}
	}
	if name == "" {
		var lo *net.Interface
		for i := range ifs {
			ifc := &ifs[i]
			if ifc.Flags&net.FlagUp == 0 || !routable(ifc) {
				continue
			}
			if ifc.Flags&net.FlagLoopback != 0 {
				if lo == nil {
					lo = ifc
				}
				continue
			}
			return ifc, netip.Addr{}, nil
		}
		if lo != nil {
			return lo, netip.Addr{}, nil
		}
		//lint:ignore ST1005 ibv_rc_pingpong's message ("No IB devices found"), which the tools' users match
		return nil, netip.Addr{}, errors.New("No IB devices found (no interface is up with an IP address)")
	}
	for i := range ifs {
		if ifs[i].Name == name {
			if !routable(&ifs[i]) {
				return nil, netip.Addr{}, fmt.Errorf("IB device %s has no IP address", name)
			}
			return &ifs[i], netip.Addr{}, nil
		}
	}
	return nil, netip.Addr{}, fmt.Errorf("IB device %s not found (no such interface)", name)
}

// routable says whether ifc has an IPv4 or a global IPv6 address.
func routable(ifc *net.Interface) bool {
	gids, err := roce.InterfaceGIDTable(ifc.Name)
	if err != nil {
		return false
	}
	for _, g := range gids[1:] {
		if !g.Unmap().IsLinkLocalUnicast() {
			return true
		}
	}
	return false
}

// RouteSource returns the source address the kernel picks towards dst (a UDP
// socket's connect sends nothing).
func RouteSource(dst netip.Addr) (netip.Addr, error) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 9)))
	if err != nil {
		return netip.Addr{}, err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

// interfaceOf returns the interface with address a (roce.InterfaceWithAddr;
// the loopback interface for any loopback address), or nil.
func interfaceOf(a netip.Addr) *net.Interface {
	if i := roce.InterfaceWithAddr(a); i != nil {
		return i
	}
	if a.IsLoopback() {
		return roce.LoopbackInterface()
	}
	return nil
}
