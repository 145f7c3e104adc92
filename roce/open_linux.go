//go:build linux

package roce

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"syscall"
	"unsafe"

	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/neigh"
	"github.com/softrdma/softrdma/netio"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Backend selects the endpoint a device opened by Open sits on.
type Backend string

// The backends.
const (
	// BackendUDP carries RoCEv2 over ordinary UDP sockets: no privileges
	// needed, the kernel routes and resolves (netio.UDPEndpoint).
	BackendUDP Backend = "udp"
	// BackendAFPacket sends and receives raw Ethernet frames on an existing
	// interface (netio.PacketEndpoint, CAP_NET_RAW), sharing its addresses
	// with the kernel and resolving MACs through the kernel's neighbour
	// table (KernelNeighbors). RoCEv1 and RoCEv2.
	BackendAFPacket Backend = "afpacket"
	// BackendTAP creates a TAP device and is the host behind it, with its own
	// MAC and addresses, answering ARP and NDP itself (HostNeighbors;
	// netio.TAPEndpoint, CAP_NET_ADMIN). RoCEv1 and RoCEv2.
	BackendTAP Backend = "tap"
)

// OpenConfig configures Open. The zero value opens nothing useful: UDP needs
// an Interface or an address.
type OpenConfig struct {
	// Backend is BackendUDP (the default), BackendAFPacket or BackendTAP.
	Backend Backend

	// Interface is, for udp, the interface whose addresses make the GID
	// table (optional: by default the one holding the bind address); for
	// afpacket, the interface to use (required); for tap, the name of the
	// TAP device to create (empty: the kernel picks tapN).
	Interface string

	// Addrs are, for udp, the address to bind (at most one; default the
	// Interface's first IPv4 address, else its first global IPv6 one); for
	// afpacket, the interface addresses the device answers on (default all;
	// the GID table always has all of them); for tap, the addresses of the
	// host the device is (required).
	Addrs []netip.Addr

	// MAC is the tap host's Ethernet address (default: random, locally
	// administered). The other backends use the interface's.
	MAC net.HardwareAddr

	// TAPKernelAddrs are addresses to give the kernel's side of the TAP
	// device (optional), so that the kernel and the device are two hosts on
	// one link.
	TAPKernelAddrs []netip.Prefix

	// UDPPort is the RoCEv2 UDP port (default 4791).
	UDPPort uint16

	// MTU is the tap device's MTU (default the kernel's, 1500).
	MTU int

	// Engine configures the verbs engine; a zero PortMTU is derived from
	// the interface MTU as rxe derives it (PathMTUFor), and one above that
	// is refused (see DeviceConfig.Engine).
	Engine ibtransport.ContextConfig

	// Version is the encapsulation of AddressHandle's handles: RoCEv2 (the
	// default) or RoCEv1, which needs raw frames (afpacket or tap).
	Version Version

	// HopLimit is the IPv4 TTL / IPv6 hop limit of address handles that give
	// none (default 64).
	HopLimit uint8

	// CaptureWriter, if not nil, records every frame the device sends and
	// receives (a command's --pcap file, which other captures may share),
	// timestamped by CaptureClock (default the system clock). Over udp the
	// frames are the ones netio.UDPFrames synthesises around each datagram
	// of the endpoint (netio.UDPEndpoint). CaptureReceived, if not nil, rewrites each
	// received frame before it is recorded (netio.NewCaptureInto).
	CaptureWriter   *netio.CaptureWriter
	CaptureClock    netio.Clock
	CaptureReceived func([]byte) []byte
}

// Open opens a RoCE device on a real link, in the network namespace of the
// calling thread. Close the device to close its endpoint and stop the
// neighbour resolution Open started. The GID table is derived from the
// interface's addresses in the order Linux gives an rxe device on the same
// interface (GIDTable, InterfaceGIDTable), so a GID index means the same on
// both ends; the port MTU is the interface MTU less rxe's header allowance.
func Open(cfg OpenConfig) (*Device, error) {
	if cfg.Backend == "" {
		cfg.Backend = BackendUDP
	}
	if cfg.UDPPort == 0 {
		cfg.UDPPort = UDPPort
	}
	if cfg.Version == 0 {
		cfg.Version = RoCEv2
	}
	if cfg.Version != RoCEv1 && cfg.Version != RoCEv2 {
		return nil, fmt.Errorf("roce: open: unknown RoCE version %d", cfg.Version)
	}
	if cfg.Version == RoCEv1 && cfg.Backend == BackendUDP {
		return nil, errors.New("roce: open: RoCEv1 needs raw Ethernet frames: use the afpacket or tap backend")
	}
	var (
		dc  *deviceSetup
		err error
	)
	switch cfg.Backend {
	case BackendUDP:
		dc, err = openUDP(&cfg)
	case BackendAFPacket:
		dc, err = openPacket(&cfg)
	case BackendTAP:
		dc, err = openTAP(&cfg)
	default:
		return nil, fmt.Errorf("roce: open: unknown backend %q (want udp, afpacket or tap)", cfg.Backend)
	}
	if err != nil {
		return nil, err
	}
	closers := dc.closers
	fail := func(err error) (*Device, error) {
		dc.Endpoint.Close()
		for _, c := range closers {
			c.Close()
		}
		return nil, err
	}
	if cfg.CaptureWriter != nil {
		// A capture records frames: over udp, those UDPFrames makes of the
		// datagrams (from the zero MAC to the device's); the device still
		// reads and writes datagrams through it.
		dc.Endpoint = netio.NewCaptureInto(netio.FramesOf(dc.Endpoint, dc.MAC, [6]byte{}), cfg.CaptureWriter, cfg.CaptureClock, cfg.CaptureReceived)
	}
	dc.UDPPort, dc.Version, dc.HopLimit, dc.Engine = cfg.UDPPort, cfg.Version, cfg.HopLimit, cfg.Engine
	d, err := NewDevice(dc.DeviceConfig)
	if err != nil {
		return fail(err)
	}
	d.closers = closers
	return d, nil
}

// deviceSetup is a DeviceConfig and what Close must stop besides the endpoint.
type deviceSetup struct {
	DeviceConfig
	closers []io.Closer
}

func macOf(ifi *net.Interface) (mac [6]byte) {
	if ifi != nil && len(ifi.HardwareAddr) == 6 {
		mac = [6]byte(ifi.HardwareAddr)
	}
	return mac
}

// interfaceAddrs returns the addresses of ifi, IPv4 first, each family in the
// kernel's order.
func interfaceAddrs(ifi *net.Interface) (v4, v6 []netip.Addr, err error) {
	nl, err := neigh.DialNetlink()
	if err != nil {
		return nil, nil, err
	}
	defer nl.Close()
	return nl.InterfaceAddrs(ifi.Index)
}

// InterfaceGIDTable returns the RoCEv2 GID table Linux gives an rxe device
// created on the named interface (in the calling thread's network
// namespace): see GIDTable.
func InterfaceGIDTable(name string) ([]netip.Addr, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return nil, fmt.Errorf("roce: %w", err)
	}
	v4, v6, err := interfaceAddrs(ifi)
	if err != nil {
		return nil, err
	}
	return GIDTable(macOf(ifi), append(v4, v6...)), nil
}

// InterfaceWithAddr returns the interface holding a, or nil: the interface
// whose GID table (InterfaceGIDTable) a udp device bound to a has.
func InterfaceWithAddr(a netip.Addr) *net.Interface { return interfaceWithAddr(a) }

// interfaceWithAddr returns the interface holding a, or nil.
func interfaceWithAddr(a netip.Addr) *net.Interface {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil
	}
	for i := range ifs {
		addrs, err := ifs[i].Addrs()
		if err != nil {
			continue
		}
		for _, x := range addrs {
			if n, ok := x.(*net.IPNet); ok {
				if b, ok := netip.AddrFromSlice(n.IP); ok && b.Unmap() == a {
					return &ifs[i]
				}
			}
		}
	}
	return nil
}

// LoopbackInterface returns the loopback interface, or nil. Linux routes all
// of 127.0.0.0/8 to it, so a loopback address on no interface takes its MTU.
func LoopbackInterface() *net.Interface {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil
	}
	for i := range ifs {
		if ifs[i].Flags&net.FlagLoopback != 0 {
			return &ifs[i]
		}
	}
	return nil
}

func openUDP(cfg *OpenConfig) (*deviceSetup, error) {
	if len(cfg.Addrs) > 1 {
		return nil, fmt.Errorf("roce: open: the udp backend binds one address, not %d", len(cfg.Addrs))
	}
	var bind netip.Addr
	if len(cfg.Addrs) == 1 {
		bind = cfg.Addrs[0].Unmap()
	}
	var ifi *net.Interface
	if cfg.Interface != "" {
		var err error
		if ifi, err = net.InterfaceByName(cfg.Interface); err != nil {
			return nil, fmt.Errorf("roce: open: %w", err)
		}
	} else if bind.IsValid() && !bind.IsUnspecified() {
		ifi = interfaceWithAddr(bind)
	}
	if ifi == nil && !bind.IsValid() {
		return nil, errors.New("roce: open: the udp backend needs an interface or an address to bind")
	}
	var v4, v6 []netip.Addr
	if ifi != nil {
		var err error
		if v4, v6, err = interfaceAddrs(ifi); err != nil {
			return nil, err
		}
	}
	if !bind.IsValid() {
		switch {
		case len(v4) > 0:
			bind = v4[0]
		default:
			for _, a := range v6 {
				if !a.IsLinkLocalUnicast() {
					bind = a
					break
				}
			}
		}
		if !bind.IsValid() {
			return nil, fmt.Errorf("roce: open: %s has no IPv4 or global IPv6 address to bind", ifi.Name)
		}
	}
	addrs := []netip.Addr{bind}
	if bind.IsUnspecified() {
		if ifi == nil {
			return nil, fmt.Errorf("roce: open: binding %v needs an interface for the addresses", bind)
		}
		addrs = v4
		if bind.Is6() {
			addrs = v6
		}
		if len(addrs) == 0 {
			return nil, fmt.Errorf("roce: open: %s has no address of the family of %v", ifi.Name, bind)
		}
	}
	mac := macOf(ifi)
	gids := GIDTable(mac, addrs)
	mtu := netio.DefaultMTU
	if ifi != nil {
		gids = GIDTable(mac, append(v4, v6...))
		mtu = ifi.MTU
	} else if lo := LoopbackInterface(); lo != nil && bind.IsLoopback() {
		// 127.0.0.0/8 is local without being on lo (Linux routes all of it
		// to lo): a loopback address on no interface has lo's MTU, while the
		// GID table is the bound address alone.
		mtu = lo.MTU
	}
	ep, err := netio.NewUDP(netio.UDPConfig{
		LocalAddr: netip.AddrPortFrom(bind, cfg.UDPPort),
		MTU:       mtu,
		// UDP GSO for IPv4 too: the device gives runs of datagrams the IDs
		// the kernel gives GSO segments, and computes each ICRC for its ID.
		// A veth hands the super-packet unsegmented to an AF_PACKET peer,
		// which splits it (netio.PacketEndpoint).
	})
	if err != nil {
		return nil, fmt.Errorf("roce: open: %w", err)
	}
	// The device reads and writes datagrams (DatagramReader, DatagramWriter).
	return &deviceSetup{DeviceConfig: DeviceConfig{Endpoint: ep, MAC: mac, Addrs: addrs, GIDs: gids}}, nil
}

func openPacket(cfg *OpenConfig) (*deviceSetup, error) {
	if cfg.Interface == "" {
		return nil, errors.New("roce: open: the afpacket backend needs an interface")
	}
	ifi, err := net.InterfaceByName(cfg.Interface)
	if err != nil {
		return nil, fmt.Errorf("roce: open: %w", err)
	}
	if len(ifi.HardwareAddr) != 6 {
		return nil, fmt.Errorf("roce: open: %s is not an Ethernet interface", ifi.Name)
	}
	nl, err := neigh.DialNetlink()
	if err != nil {
		return nil, err
	}
	v4, v6, err := nl.InterfaceAddrs(ifi.Index)
	if err != nil {
		nl.Close()
		return nil, err
	}
	all := append(v4, v6...)
	addrs := all
	if len(cfg.Addrs) > 0 {
		addrs = nil
		for _, a := range cfg.Addrs {
			if !containsAddr(all, a.Unmap()) {
				nl.Close()
				return nil, fmt.Errorf("roce: open: %v is not an address of %s", a, ifi.Name)
			}
			addrs = append(addrs, a.Unmap())
		}
	}
	if len(addrs) == 0 {
		nl.Close()
		return nil, fmt.Errorf("roce: open: %s has no IP address", ifi.Name)
	}
	ep, err := netio.NewPacket(netio.PacketConfig{Interface: ifi.Name, UDPPort: cfg.UDPPort})
	if err != nil {
		nl.Close()
		return nil, fmt.Errorf("roce: open: %w", err)
	}
	nb := neigh.NewKernelOn(nl, ifi)
	mac := macOf(ifi)
	s := &deviceSetup{DeviceConfig: DeviceConfig{Endpoint: ep, MAC: mac, Addrs: addrs, GIDs: GIDTable(mac, all), Neighbors: nb}}
	s.closers = append(s.closers, nb)
	s.closers = append(s.closers, reserveUDPPort(cfg.UDPPort)...)
	return s, nil
}

func openTAP(cfg *OpenConfig) (*deviceSetup, error) {
	if len(cfg.Addrs) == 0 {
		return nil, errors.New("roce: open: the tap backend needs the host's addresses")
	}
	var mac [6]byte
	switch len(cfg.MAC) {
	case 0:
		rand.Read(mac[:])
		mac[0] = mac[0]&^0x01 | 0x02 // unicast, locally administered
	case 6:
		mac = [6]byte(cfg.MAC)
	default:
		return nil, fmt.Errorf("roce: open: MAC %v is not a 6-byte Ethernet address", cfg.MAC)
	}
	if mac[0]&1 != 0 {
		return nil, fmt.Errorf("roce: open: MAC %v is a multicast address", net.HardwareAddr(mac[:]))
	}
	addrs := make([]netip.Addr, len(cfg.Addrs))
	for i, a := range cfg.Addrs {
		addrs[i] = a.Unmap()
	}
	ep, err := netio.NewTAP(cfg.Interface, cfg.MTU)
	if err != nil {
		return nil, fmt.Errorf("roce: open: %w", err)
	}
	if len(cfg.TAPKernelAddrs) > 0 {
		if err := addKernelAddrs(ep.Name(), cfg.TAPKernelAddrs); err != nil {
			ep.Close()
			return nil, err
		}
	}
	nb := neigh.NewHost(neigh.HostConfig{MAC: mac, Addrs: addrs})
	return &deviceSetup{DeviceConfig: DeviceConfig{Endpoint: ep, MAC: mac, Addrs: addrs, Neighbors: nb}}, nil
}

func addKernelAddrs(name string, prefixes []netip.Prefix) error {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return fmt.Errorf("roce: open: %w", err)
	}
	nl, err := neigh.DialNetlink()
	if err != nil {
		return err
	}
	defer nl.Close()
	for _, p := range prefixes {
		if err := nl.AddAddress(ifi.Index, p); err != nil {
			return fmt.Errorf("roce: open: %s: %w", name, err)
		}
	}
	return nil
}

// reserveUDPPort binds the RoCEv2 port on every local address, IPv4 and IPv6,
// with sockets that drop whatever they receive (a filter that accepts
// nothing): a raw device shares its addresses with the kernel, which would
// otherwise answer every RoCEv2 datagram with an ICMP port unreachable.
// Ports already taken (by rxe, say) are left alone.
func reserveUDPPort(port uint16) []io.Closer {
	prog, err := bpf.Assemble([]bpf.Instruction{bpf.RetConstant{Val: 0}})
	if err != nil {
		return nil
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			fp := unix.SockFprog{Len: uint16(len(prog)), Filter: (*unix.SockFilter)(unsafe.Pointer(&prog[0]))}
			serr = unix.SetsockoptSockFprog(int(fd), unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &fp)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	var out []io.Closer
	for _, network := range []string{"udp4", "udp6"} {
		addr := fmt.Sprintf(":%d", port)
		if pc, err := lc.ListenPacket(context.Background(), network, addr); err == nil {
			out = append(out, pc)
		}
	}
	return out
}
