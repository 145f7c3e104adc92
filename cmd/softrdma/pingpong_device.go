package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/netio"
	"github.com/softrdma/softrdma/pcaptap"
	"github.com/softrdma/softrdma/roce"
)

// ppDeviceConfig says which device softrdma pingpong opens: what -d, -g,
// --backend and --pcap asked for, and the peer's address when it is known.
type ppDeviceConfig struct {
	name    string     // -d: an interface name or one of its IP addresses; "" chooses
	gidx    int        // -g: the GID index the QP sends from; -1: none given
	backend string     // --backend
	pcap    string     // --pcap FILE, or ""
	peer    netip.Addr // the server's TCP address (client side), or invalid
	seed    uint64     // engine seed (QPNs, keys)

	// tapAddrs are the device's own addresses behind a TAP device (--backend
	// tap); tapKernelAddrs go to the kernel's side of it.
	tapAddrs, tapKernelAddrs []netip.Prefix
}

// ppDevice is an open RoCE device with its endpoint running.
type ppDevice struct {
	dev     *roce.Device
	ifname  string
	local   netip.Addr // the address RoCE traffic leaves from (the endpoint's)
	capture *ppCapture // nil without --pcap

	cancel context.CancelFunc
	done   chan error
	close  func() error
	once   sync.Once
	err    error
}

// ppOpenDevice opens the device: it finds the interface -d names (or the one that
// routes to the peer), makes the GID table from its addresses as rxe does (0 the
// link-local address derived from its MAC, then each IPv4 address, then each
// global IPv6 address), picks the address of the GID index -g (without -g: the
// first one of the peer's family, IPv4 on a server), opens the backend on it and
// starts the device loop. With -g the TCP exchange and the RoCE traffic may use
// different IP versions, as with the tools: the GIDs carry the RoCE addresses.
//
// The udp backend is opened here rather than by roce.Open so that the capture
// can be a ppCapture (received IPv4 IDs recovered, see there); afpacket and tap
// see the real frames and go through roce.Open with its own capture.
func ppOpenDevice(cfg ppDeviceConfig) (*ppDevice, error) {
	var pcapFile *os.File
	if cfg.pcap != "" {
		var err error
		if pcapFile, err = os.Create(cfg.pcap); err != nil {
			return nil, err
		}
	}
	d, err := ppOpenBackend(cfg, pcapFile)
	if err != nil {
		if pcapFile != nil {
			pcapFile.Close()
		}
		return nil, err
	}
	close := d.close
	d.close = func() error {
		err := close()
		if pcapFile != nil {
			if e := pcapFile.Close(); err == nil {
				err = e
			}
		}
		return err
	}
	d.done = make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	go func() { d.done <- d.dev.Run(ctx, netio.SystemClock{}) }()
	return d, nil
}

// ppOpenBackend opens the device (not yet running) on cfg's backend, with its
// capture going to pcapFile if that is not nil.
func ppOpenBackend(cfg ppDeviceConfig, pcapFile *os.File) (*ppDevice, error) {
	engine := ibtransport.ContextConfig{Seed: cfg.seed}
	var capture io.Writer
	if pcapFile != nil {
		capture = pcapFile
	}
	switch cfg.backend {
	case "udp", "afpacket":
	case "tap":
		if len(cfg.tapAddrs) == 0 {
			return nil, errors.New("--backend tap: give the device's addresses with --tap-addr (and the kernel side's with --tap-kernel-addr)")
		}
		oc := roce.OpenConfig{Backend: roce.BackendTAP, Interface: cfg.name, TAPKernelAddrs: cfg.tapKernelAddrs, Engine: engine, Capture: capture}
		for _, p := range cfg.tapAddrs {
			oc.Addrs = append(oc.Addrs, p.Addr())
		}
		dev, err := roce.Open(oc)
		if err != nil {
			return nil, err
		}
		d := &ppDevice{dev: dev, ifname: cfg.name, close: dev.Close}
		if t, ok := ppUnwrap(dev.Endpoint()).(*netio.TAPEndpoint); ok {
			d.ifname = t.Name()
		}
		if d.local, err = ppPickLocal(dev.GIDs(), oc.Addrs, cfg); err != nil {
			dev.Close()
			return nil, err
		}
		return d, nil
	default:
		return nil, fmt.Errorf("--backend %q: want udp, afpacket or tap", cfg.backend)
	}

	ifc, addrs, err := ppFindInterface(cfg.name, cfg.peer)
	if err != nil {
		return nil, err
	}
	if cfg.backend == "afpacket" {
		oc := roce.OpenConfig{Backend: roce.BackendAFPacket, Interface: ifc.Name, Engine: engine, Capture: capture}
		if ip, err := netip.ParseAddr(cfg.name); err == nil {
			oc.Addrs = []netip.Addr{ip.Unmap()} // -d ADDR: that address alone
		}
		dev, err := roce.Open(oc)
		if err != nil {
			return nil, err
		}
		d := &ppDevice{dev: dev, ifname: ifc.Name, close: dev.Close}
		if d.local, err = ppPickLocal(dev.GIDs(), addrs, cfg); err != nil {
			dev.Close()
			return nil, err
		}
		return d, nil
	}

	var mac [6]byte
	copy(mac[:], ifc.HardwareAddr)
	local, err := ppPickLocal(roce.GIDTable(mac, addrs), addrs, cfg)
	if err != nil {
		return nil, err
	}
	var ep netio.Endpoint
	ep, err = netio.NewUDP(netio.UDPConfig{
		LocalAddr: netip.AddrPortFrom(local, netio.RoCEv2Port),
		LocalMAC:  ifc.HardwareAddr,
		MTU:       ifc.MTU,
		IPv4GSO:   roce.PatchICRCIPv4ID, // as roce.Open
	})
	if err != nil {
		return nil, fmt.Errorf("udp backend on %v: %w", local, err)
	}
	d := &ppDevice{ifname: ifc.Name, local: local}
	if pcapFile != nil {
		if d.capture, err = newPPCapture(ep, pcapFile); err != nil {
			ep.Close()
			return nil, err
		}
		ep = d.capture
	}
	d.close = ep.Close
	// The socket sends from local alone: that is the device's address (its
	// source GIDs, and rdma_cm's source for an unbound ID), while the GID
	// table lists every address of the interface, as rxe's does, for -g. With
	// every address as the device's, rdma_cm took a destination on the same
	// interface (10.9.0.2 beside 10.9.0.1 on lo) as its own source, and the
	// socket dropped the REQ.
	d.dev, err = roce.NewDevice(roce.DeviceConfig{Endpoint: ep, MAC: mac, Addrs: []netip.Addr{local},
		GIDs: roce.GIDTable(mac, addrs), Engine: engine})
	if err != nil {
		ep.Close()
		return nil, err
	}
	return d, nil
}

// ppPickLocal returns the address RoCE traffic leaves from: that of GID index
// -g, or without -g the first of addrs of the peer's family (IPv4 on a
// server, where the peer is not known yet).
func ppPickLocal(gids, addrs []netip.Addr, cfg ppDeviceConfig) (netip.Addr, error) {
	switch {
	case cfg.gidx == 0 && len(gids) > 0:
		return netip.Addr{}, fmt.Errorf("GID index 0 is the link-local address %v: softrdma pingpong needs a routable one (-g 1 and up)", gids[0])
	case cfg.gidx >= 0:
		if cfg.gidx >= len(gids) {
			return netip.Addr{}, fmt.Errorf("can't read sgid of index %d (the device has %d GIDs)", cfg.gidx, len(gids))
		}
		return gids[cfg.gidx].Unmap(), nil
	}
	want4 := !cfg.peer.IsValid() || cfg.peer.Unmap().Is4()
	for _, a := range addrs {
		if a.Unmap().Is4() == want4 {
			return a.Unmap(), nil
		}
	}
	if len(addrs) == 0 {
		return netip.Addr{}, errors.New("the device has no IP address")
	}
	return addrs[0].Unmap(), nil
}

// ppUnwrap returns the endpoint under any capture wrapper.
func ppUnwrap(ep netio.Endpoint) netio.Endpoint {
	for {
		u, ok := ep.(interface{ Unwrap() netio.Endpoint })
		if !ok {
			return ep
		}
		ep = u.Unwrap()
	}
}

// Close sends what the engine still has queued (the ACK of the last message
// above all: the peer's send completes only when it arrives), stops the
// device loop and closes the endpoint and the capture.
func (d *ppDevice) Close() error {
	d.once.Do(func() {
		if _, err := d.dev.Flush(time.Now()); err != nil && !errors.Is(err, net.ErrClosed) {
			d.err = err
		}
		d.cancel()
		if err := d.close(); err != nil && d.err == nil {
			d.err = err
		}
		if err := <-d.done; err != nil && !errors.Is(err, context.Canceled) && d.err == nil {
			d.err = err
		}
	})
	return d.err
}

// ppFindInterface returns the interface -d names and its addresses, IPv4 first,
// then global IPv6 (link-local IPv6 is GID index 0, derived from the MAC).
// name may also be one of an interface's addresses: then that address alone is
// used. With no name, the interface the kernel would route to peer through is
// used; without a peer (a server), the first interface that is up, is not a
// loopback and has an address, else the loopback.
func ppFindInterface(name string, peer netip.Addr) (*net.Interface, []netip.Addr, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, nil, err
	}
	if ip, err := netip.ParseAddr(name); err == nil {
		ip = ip.Unmap()
		for i := range ifs {
			for _, a := range ppInterfaceAddrs(&ifs[i]) {
				if a == ip {
					return &ifs[i], []netip.Addr{ip}, nil
				}
			}
		}
		if ip.IsLoopback() {
			// 127.0.0.0/8 is local without being on lo: any of it will do.
			for i := range ifs {
				if ifs[i].Flags&net.FlagLoopback != 0 {
					return &ifs[i], []netip.Addr{ip}, nil
				}
			}
		}
		return nil, nil, fmt.Errorf("IB device %s not found (no interface has that address)", name)
	}
	if name == "" && peer.IsValid() {
		if c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(peer, netio.RoCEv2Port))); err == nil {
			src := c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap()
			c.Close()
			for i := range ifs {
				for _, a := range ppInterfaceAddrs(&ifs[i]) {
					if a == src {
						return &ifs[i], ppInterfaceAddrs(&ifs[i]), nil
					}
				}
			}
		}
	}
	if name == "" {
		var lo *net.Interface
		for i := range ifs {
			ifc := &ifs[i]
			if ifc.Flags&net.FlagUp == 0 || len(ppInterfaceAddrs(ifc)) == 0 {
				continue
			}
			if ifc.Flags&net.FlagLoopback != 0 {
				if lo == nil {
					lo = ifc
				}
				continue
			}
			return ifc, ppInterfaceAddrs(ifc), nil
		}
		if lo != nil {
			return lo, ppInterfaceAddrs(lo), nil
		}
		return nil, nil, errors.New("No IB devices found (no interface is up with an IP address)")
	}
	for i := range ifs {
		if ifs[i].Name == name {
			addrs := ppInterfaceAddrs(&ifs[i])
			if len(addrs) == 0 {
				return nil, nil, fmt.Errorf("IB device %s has no IP address", name)
			}
			return &ifs[i], addrs, nil
		}
	}
	return nil, nil, fmt.Errorf("IB device %s not found (no such interface)", name)
}

// ppInterfaceAddrs returns an interface's IPv4 addresses, then its IPv6
// addresses other than link-local ones.
func ppInterfaceAddrs(ifc *net.Interface) []netip.Addr {
	as, err := ifc.Addrs()
	if err != nil {
		return nil
	}
	var v4, v6 []netip.Addr
	for _, a := range as {
		n, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(n.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		switch {
		case ip.Is4():
			v4 = append(v4, ip)
		case !ip.IsLinkLocalUnicast():
			v6 = append(v6, ip)
		}
	}
	return append(v4, v6...)
}

// ppCapture records what an endpoint sends and receives in a pcap file, like
// netio.Capture, with one difference: on a UDP socket the kernel never tells
// the IPv4 Identification of a received datagram, so the backend writes 0,
// although the sender's ID was on the wire and its ICRC covers it. The
// capture recovers the ID from the ICRC (roce.RecoverIPv4ID), as the device
// does, and records the frame as it was on the wire, so that the ICRC in the
// capture verifies. It passes the endpoint's IPv4 ID policy on to the device.
type ppCapture struct {
	ep      netio.Endpoint
	w       *netio.CaptureWriter
	unknown bool // the endpoint reports received IPv4 IDs as unknown

	mu  sync.Mutex
	ids pcaptap.IPv4IDRestorer
}

func newPPCapture(ep netio.Endpoint, f *os.File) (*ppCapture, error) {
	w, err := netio.NewCaptureWriter(f, netio.FormatPcap)
	if err != nil {
		return nil, err
	}
	c := &ppCapture{ep: ep, w: w}
	if p, ok := ep.(netio.IPv4IDPolicy); ok {
		c.unknown = p.UnknownIPv4ID()
	}
	return c, nil
}

// Read reads frames and records them with their IPv4 IDs recovered.
func (c *ppCapture) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	n, err := c.ep.Read(bufs, sizes, offset)
	if n > 0 {
		now := time.Now()
		c.mu.Lock()
		for i := range n {
			_ = c.w.WriteFrame(now, c.wireFrame(bufs[i][offset:offset+sizes[i]]))
		}
		c.mu.Unlock()
	}
	return n, err
}

// wireFrame returns b, or a copy of it with the IPv4 ID recovered. mu is held.
func (c *ppCapture) wireFrame(b []byte) []byte {
	if !c.unknown {
		return b
	}
	return c.ids.Restore(b)
}

// Write writes frames and records the ones written, as they left: a UDP
// endpoint that sends IPv4 datagrams in GSO sends changes their ICRCs for the
// IDs the kernel gives the segments (netio.UDPConfig.IPv4GSO), and the
// capture recovers those IDs as it does for received frames.
func (c *ppCapture) Write(bufs [][]byte, offset int) (int, error) {
	now := time.Now()
	n, err := c.ep.Write(bufs, offset)
	if n > 0 {
		c.mu.Lock()
		for _, b := range bufs[:n] {
			_ = c.w.WriteFrame(now, c.wireFrame(b[offset:]))
		}
		c.mu.Unlock()
	}
	return n, err
}

// BatchSize returns the endpoint's batch size.
func (c *ppCapture) BatchSize() int { return c.ep.BatchSize() }

// MTU returns the endpoint's MTU.
func (c *ppCapture) MTU() int { return c.ep.MTU() }

// IPv4IDZero passes the endpoint's policy on.
func (c *ppCapture) IPv4IDZero() bool {
	p, ok := c.ep.(netio.IPv4IDPolicy)
	return ok && p.IPv4IDZero()
}

// UnknownIPv4ID passes the endpoint's policy on.
func (c *ppCapture) UnknownIPv4ID() bool { return c.unknown }

// Frames returns the number of frames recorded.
func (c *ppCapture) Frames() uint64 { return c.w.Frames() }

// Close closes the endpoint and flushes the capture.
func (c *ppCapture) Close() error {
	err := c.ep.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	if ferr := c.w.Flush(); err == nil {
		err = ferr
	}
	return err
}

var (
	_ netio.Endpoint     = (*ppCapture)(nil)
	_ netio.IPv4IDPolicy = (*ppCapture)(nil)
)
