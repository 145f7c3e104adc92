package devspec

import (
	"net"
	"net/netip"
)

// Iface is what Defaults needs to know of a network interface.
type Iface struct {
	Name string
	// Up is true when the interface is up and running (IFF_UP and
	// IFF_RUNNING: `ip link` shows it UP, or UNKNOWN for lo, and it has a
	// carrier), the state in which rxe's port is ACTIVE.
	Up bool
	// Loopback is true for lo.
	Loopback bool
	// Addrs are its addresses, in the kernel's order.
	Addrs []netip.Addr
}

// Defaults returns the devices a program sees when neither SOFTRDMA_DEVICES
// nor a config file names any: DefaultsFrom the host's interfaces.
func Defaults() []Spec { return DefaultsFrom(Interfaces()) }

// DefaultsFrom returns one roce and one iwarp spec (the roce ones first,
// then the iwarp ones, each in interface order: with Name they become
// sr_roce0, sr_roce1..., sr_iwarp0...) for each interface that is up, is not
// loopback and has a usable address: its first IPv4 address, else its first
// IPv6 address that is not link-local (a link-local one needs a zone, which
// a SPEC does not carry). This is what a user of `rdma link add` sets up:
// one rxe and one siw device per NIC.
//
// Loopback: rxe and siw cannot be bound to lo, so a host with a NIC gets no
// device on lo, as with rxe. But softrdma needs no NIC: on a host (or
// container) where no other interface qualifies, lo's address (127.0.0.1)
// gets the pair instead, so that a program finds a device anywhere. Two
// programs on one host need a device each on distinct addresses (each binds
// its address's port): give them --device/SOFTRDMA_DEVICES (127.0.0.1 and
// 127.0.0.2, say).
func DefaultsFrom(ifs []Iface) []Spec {
	pick := func(loopback bool) (roce, iwarp []Spec) {
		for _, ifi := range ifs {
			if !ifi.Up || ifi.Loopback != loopback {
				continue
			}
			a := defaultAddr(ifi.Addrs)
			if !a.IsValid() {
				continue
			}
			roce = append(roce, Spec{Transport: RoCE, Addr: a, Backend: BackendUDP, Iface: ifi.Name})
			iwarp = append(iwarp, Spec{Transport: IWARP, Addr: a, Iface: ifi.Name})
		}
		return roce, iwarp
	}
	roce, iwarp := pick(false)
	if len(roce) == 0 {
		roce, iwarp = pick(true)
	}
	return append(roce, iwarp...)
}

// defaultAddr returns the first IPv4 address of addrs, else the first IPv6
// one that is neither link-local nor unspecified, else the zero Addr.
func defaultAddr(addrs []netip.Addr) netip.Addr {
	for _, a := range addrs {
		if a = a.Unmap(); a.Is4() && !a.IsUnspecified() && !a.IsMulticast() {
			return a
		}
	}
	for _, a := range addrs {
		if a.Is6() && !a.Is4In6() && !a.IsLinkLocalUnicast() && !a.IsUnspecified() && !a.IsMulticast() && a.Zone() == "" {
			return a
		}
	}
	return netip.Addr{}
}

// Interfaces returns the host's network interfaces (nil if they cannot be
// listed).
func Interfaces() []Iface {
	nifs, err := net.Interfaces()
	if err != nil {
		return nil
	}
	ifs := make([]Iface, 0, len(nifs))
	for _, n := range nifs {
		ifi := Iface{
			Name:     n.Name,
			Up:       n.Flags&net.FlagUp != 0 && n.Flags&net.FlagRunning != 0,
			Loopback: n.Flags&net.FlagLoopback != 0,
		}
		as, _ := n.Addrs()
		for _, x := range as {
			if p, ok := x.(*net.IPNet); ok {
				if a, ok := netip.AddrFromSlice(p.IP); ok {
					ifi.Addrs = append(ifi.Addrs, a.Unmap())
				}
			}
		}
		ifs = append(ifs, ifi)
	}
	return ifs
}
