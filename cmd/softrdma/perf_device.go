package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/iwarp"
	"github.com/softrdma/softrdma/netio"
	"github.com/softrdma/softrdma/roce"
)

// perfDevice is the RoCE device a perf test runs on, with its loop running,
// or (--transport iwarp) the iWARP device (perf_iwarp.go).
type perfDevice struct {
	dev   *roce.Device
	name  string     // the interface, as "Device" in the header
	local netip.Addr // the address the test's GID is
	close func() error

	iw *iwarp.Device // --transport iwarp: dev is nil
	iwarpDevice
}

// context returns the device's verbs engine.
func (d *perfDevice) context() *ibtransport.Context {
	if d.iw != nil {
		return d.iw.Context()
	}
	return d.dev.Context()
}

// pathMTU returns the port's active MTU in bytes.
func (d *perfDevice) pathMTU() int {
	if d.iw != nil {
		return d.mtu
	}
	return d.dev.PathMTU()
}

// gid returns GID index i: RoCE's GID table derived from the addresses, or
// iWARP's one GID (siw's: the interface's MAC address).
func (d *perfDevice) gid(i int) [16]byte {
	if d.iw != nil {
		return d.gid0
	}
	return d.dev.GIDs()[i].As16()
}

// perfOpenDevice opens the device --backend names for traffic with peer. The
// UDP backend is pingpong's (ppOpenDevice: the interface -d names or the one
// towards the peer, its addresses as rxe's GID table, and a capture that
// restores the IPv4 IDs a UDP socket hides, so that every ICRC in it
// verifies). The raw backends come from roce.Open: afpacket on the interface
// -d names; tap creates a TAP device (or attaches to the persistent one
// --tap-name names) whose far side is a host of its own, with the address -d
// gives (ADDR or ADDR/PREFIX; the kernel's side of the TAP gets --tap-peer, if
// given).
func perfOpenDevice(o *perfOptions, p *perfParams, peer netip.Addr) (*perfDevice, error) {
	if o.transport == "iwarp" {
		return perfOpenIWARP(o, peer)
	}
	if o.backend == "udp" {
		if p.gidIndex > 0 && o.device != "" {
			// perftest's exchange is IPv4 only, while -x may pick an IPv6 GID:
			// the device and the GID index say it all; the peer's GID must be
			// of the same family, which the exchange checks.
			peer = netip.Addr{}
		}
		d, err := ppOpenDevice(ppDeviceConfig{name: o.device, gidx: p.gidIndex, backend: o.backend, pcap: o.pcap, peer: peer, seed: rand.Uint64()})
		if err != nil {
			return nil, err
		}
		return &perfDevice{dev: d.dev, name: d.ifname, local: d.local, close: d.Close}, nil
	}
	cfg := roce.OpenConfig{Backend: roce.Backend(o.backend), Engine: ibtransport.ContextConfig{Seed: rand.Uint64()}}
	name := o.device
	switch o.backend {
	case "afpacket":
		if o.device == "" {
			return nil, errors.New("--backend afpacket needs -d INTERFACE")
		}
		cfg.Interface = o.device
	case "tap":
		pfx, err := perfParsePrefix(o.device)
		if err != nil {
			return nil, fmt.Errorf("--backend tap needs -d ADDR[/PREFIX], the device's own address: %w", err)
		}
		cfg.Addrs = []netip.Addr{pfx.Addr()}
		cfg.Interface = o.tapName
		if o.tapPeer != "" {
			kp, err := netip.ParsePrefix(o.tapPeer)
			if err != nil {
				return nil, fmt.Errorf("--tap-peer %q: %w", o.tapPeer, err)
			}
			cfg.TAPKernelAddrs = []netip.Prefix{kp}
		}
	}
	var pcap *os.File
	if o.pcap != "" {
		f, err := os.Create(o.pcap)
		if err != nil {
			return nil, err
		}
		pcap = f
		cfg.Capture, cfg.CaptureFormat = f, netio.FormatPcap
	}
	dev, err := roce.Open(cfg)
	if err != nil {
		if pcap != nil {
			pcap.Close()
		}
		return nil, err
	}
	if o.backend == "tap" {
		if t, ok := dev.Endpoint().(interface{ Name() string }); ok {
			name = t.Name()
		} else if u, ok := dev.Endpoint().(interface{ Unwrap() netio.Endpoint }); ok {
			if t, ok := u.Unwrap().(interface{ Name() string }); ok {
				name = t.Name()
			}
		}
	}
	local, err := perfPickGID(dev.GIDs(), p.gidIndex, peer)
	if err != nil {
		dev.Close()
		if pcap != nil {
			pcap.Close()
		}
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- dev.Run(ctx, netio.SystemClock{}) }()
	var once sync.Once
	var cerr error
	closeFn := func() error {
		once.Do(func() {
			if _, err := dev.Flush(time.Now()); err != nil && !errors.Is(err, net.ErrClosed) {
				cerr = err
			}
			cancel()
			if err := dev.Close(); err != nil && cerr == nil {
				cerr = err
			}
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) && cerr == nil {
				cerr = err
			}
			if pcap != nil {
				if err := pcap.Close(); err != nil && cerr == nil {
					cerr = err
				}
			}
		})
		return cerr
	}
	return &perfDevice{dev: dev, name: name, local: local, close: closeFn}, nil
}

// perfParsePrefix reads ADDR or ADDR/PREFIX.
func perfParsePrefix(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// perfPickGID returns the address of GID index gidx, or without one (-1) the
// first routable GID of the peer's family.
func perfPickGID(gids []netip.Addr, gidx int, peer netip.Addr) (netip.Addr, error) {
	switch {
	case gidx == 0:
		return netip.Addr{}, fmt.Errorf("GID index 0 is the link-local address %v: use a routable one (-x 1 and up)", gids[0])
	case gidx > 0:
		if gidx >= len(gids) {
			return netip.Addr{}, fmt.Errorf("can't read sgid of index %d (the device has %d GIDs)", gidx, len(gids))
		}
		return gids[gidx].Unmap(), nil
	}
	want4 := !peer.IsValid() || peer.Unmap().Is4()
	for _, g := range gids[1:] {
		if a := g.Unmap(); a.Is4() == want4 && !a.IsLinkLocalUnicast() {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("the device has no GID of the family of %v", peer)
}
