package perf

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/softrdma/softrdma/device"
	"github.com/softrdma/softrdma/devspec"
	"github.com/softrdma/softrdma/iwarp"
)

// openDevice opens the device --transport and --backend name for traffic
// with peer (device.Choice: the interface -d names, or the one towards the
// peer; its addresses as rxe's GID table). afpacket runs on the interface -d
// names; tap creates a TAP device (or attaches to the persistent one
// --tap-name names) whose far side is a host of its own, with the address -d
// gives (ADDR or ADDR/PREFIX; the kernel's side of the TAP gets --tap-peer, if
// given). iWARP's device is bound to -d's address, or learns it from the comm
// connection (Attach).
func openDevice(o *Options, p *params, peer netip.Addr) (device.Device, error) {
	if o.Transport == "iwarp" {
		return openIWARP(o, peer)
	}
	c := device.Choice{Backend: devspec.Backend(o.Backend), Name: o.Device, GIDIndex: p.gidIndex, GIDFlag: "-x", Peer: peer}
	cfg := device.Config{Pcap: o.Pcap, AddrFlag: "-d"}
	switch o.Backend {
	case "udp":
		if p.gidIndex > 0 && o.Device != "" {
			// perftest's exchange is IPv4 only, while -x may pick an IPv6 GID:
			// the device and the GID index say it all; the peer's GID must be
			// of the same family, which the exchange checks.
			c.Peer = netip.Addr{}
		}
	case "afpacket":
		if o.Device == "" {
			return nil, errors.New("--backend afpacket needs -d INTERFACE")
		}
	case "tap":
		pfx, err := parsePrefix(o.Device)
		if err != nil {
			return nil, fmt.Errorf("--backend tap needs -d ADDR[/PREFIX], the device's own address: %w", err)
		}
		c.Name, c.TAPAddrs = o.TAPName, []netip.Addr{pfx.Addr()}
		cfg.TAPAddrs = c.TAPAddrs
		if o.TAPPeer != "" {
			kp, err := netip.ParsePrefix(o.TAPPeer)
			if err != nil {
				return nil, fmt.Errorf("--tap-peer %q: %w", o.TAPPeer, err)
			}
			cfg.TAPKernelAddrs = []netip.Prefix{kp}
		}
	}
	spec, err := c.Spec()
	if err != nil {
		return nil, err
	}
	return device.Open(spec, cfg)
}

// openIWARP opens an iWARP device. -d is an IP address (the client's
// source) or an interface name; without an address it takes the source the
// kernel picks towards the peer, and the rest is learnt from the comm
// connection (Device.Attach).
func openIWARP(o *Options, peer netip.Addr) (device.Device, error) {
	crc, err := device.ParseCRCPolicy(o.CRC)
	if err != nil {
		return nil, err
	}
	spec := devspec.Spec{Transport: devspec.IWARP}
	if o.Device != "" {
		if a, err := netip.ParseAddr(o.Device); err == nil {
			spec.Addr = a.Unmap()
		} else if _, err := net.InterfaceByName(o.Device); err == nil {
			spec.Iface = o.Device
		} else {
			return nil, fmt.Errorf("-d %q: neither an IP address nor an interface", o.Device)
		}
	}
	if !spec.Addr.IsValid() && peer.IsValid() {
		if a, err := device.RouteSource(peer); err == nil {
			spec.Addr = a
		}
	}
	// Toward another softrdma the connections take the extensions, FPDUs of
	// up to 64 KiB among them (MPAFlagSoftRDMALargeFPDU); siw echoes the
	// offer without the acknowledgement, so toward it nothing changes.
	return device.Open(spec, device.Config{Pcap: o.Pcap, IWARP: iwarp.ConnParams{CRC: crc}})
}

// parsePrefix reads ADDR or ADDR/PREFIX.
func parsePrefix(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}
