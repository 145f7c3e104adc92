package device

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"

	"github.com/softrdma/softrdma/devspec"
	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/iwarp"
	"github.com/softrdma/softrdma/netio"
	"github.com/softrdma/softrdma/pcaptap"
	"github.com/softrdma/softrdma/rdmacm"
)

// IWARP is an open iWARP device: the engine, and the addresses and connection
// parameters its rdma_cm serves. An iWARP device is not bound to an address
// until it is told one (the spec's, or Attach's): its connections are TCP
// connections from whichever address the kernel picks.
type IWARP struct {
	spec   devspec.Spec
	dev    *iwarp.Device
	params iwarp.ConnParams
	addrs  []netip.Addr // the host's addresses, spec's first, for rdma_cm
	name   string
	mtu    int      // the active MTU in octets
	gid0   [16]byte // GID index 0

	file    *os.File     // Config.Pcap's
	tap     *pcaptap.Tap // Config.Tap
	capture *pcaptap.TCP // into file or tap
	once    sync.Once
	err     error

	unregister func() // takes it out of counters.Default (register)
}

var _ Device = (*IWARP)(nil)

// openIWARP opens an iWARP device. Its rdma_cm serves the spec's address
// first (if valid), then every other address of the host; the spec's iface,
// if given, is the interface whose name, MTU and MAC the device shows.
func openIWARP(s devspec.Spec, cfg Config) (*IWARP, error) {
	if s.Iface != "" {
		if _, err := net.InterfaceByName(s.Iface); err != nil {
			return nil, fmt.Errorf("device %v: iface %q: %w", s, s.Iface, err)
		}
	}
	d := &IWARP{spec: s, params: cfg.IWARP, name: "iwarp0", mtu: 1024}
	if s.Addr.IsValid() {
		d.addrs = append(d.addrs, s.Addr)
	}
	for _, ifi := range devspec.Interfaces() {
		for _, a := range ifi.Addrs {
			if a != s.Addr {
				d.addrs = append(d.addrs, a)
			}
		}
	}
	if len(d.addrs) == 0 {
		d.addrs = []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	}
	if s.Addr.IsValid() {
		d.Attach(s.Addr)
	}
	if cfg.Pcap != "" {
		f, err := os.Create(cfg.Pcap)
		if err != nil {
			return nil, err
		}
		if d.capture, err = pcaptap.NewTCP(f, netio.FormatForPath(cfg.Pcap)); err != nil {
			f.Close()
			return nil, err
		}
		d.file = f
	} else if cfg.Tap != nil {
		d.tap, d.capture = cfg.Tap, cfg.Tap.TCP()
	}
	if d.capture != nil {
		d.params.Observe = d.capture.Observe
	}
	eng := cfg.Engine
	eng.Seed = cfg.Seed
	dev, err := iwarp.Open(iwarp.DeviceConfig{Context: eng})
	if err != nil {
		d.closeCapture()
		return nil, err
	}
	d.dev = dev
	return d, nil
}

// IWARP returns the iwarp device.
func (d *IWARP) IWARP() *iwarp.Device { return d.dev }

// Params are the parameters of the device's connections: Config.IWARP, with
// Observe recording them into the capture (Config.Pcap). An rdma_cm manager
// made outside StartCM (the verbs libraries') gives them to AddIWARP, so that
// its connections are captured too.
func (d *IWARP) Params() iwarp.ConnParams { return d.params }

// Spec returns the device's description, with the address Attach bound.
func (d *IWARP) Spec() devspec.Spec { return d.spec }

// Context returns the verbs engine.
func (d *IWARP) Context() *ibtransport.Context { return d.dev.Context() }

// Name returns the interface of the device's address.
func (d *IWARP) Name() string { return d.name }

// Local returns the device's address, or an invalid one.
func (d *IWARP) Local() netip.Addr { return d.spec.Addr }

// GIDs returns siw's one GID: the interface's MAC.
func (d *IWARP) GIDs() []netip.Addr { return []netip.Addr{netip.AddrFrom16(d.gid0)} }

// PathMTU returns the active MTU: ib_mtu_int_to_enum of the interface's MTU
// as siw reports it (1024 on no interface).
func (d *IWARP) PathMTU() int { return d.mtu }

// Attach makes local, a connection's address, the device's: the name, MTU
// and GID of its interface (the spec's iface, if given).
func (d *IWARP) Attach(local netip.Addr) error {
	if !local.IsValid() {
		return errors.New("iWARP: the connection has no local address")
	}
	d.spec.Addr = local.Unmap()
	ifc := interfaceOf(d.spec.Addr)
	if d.spec.Iface != "" {
		ifc, _ = net.InterfaceByName(d.spec.Iface)
	}
	d.mtu = 1024
	if ifc == nil {
		return nil
	}
	d.name = ifc.Name
	d.mtu = IBMTU(ifc.MTU)
	d.gid0 = [16]byte{}
	copy(d.gid0[:], ifc.HardwareAddr)
	return nil
}

// IBMTU is ib_mtu_int_to_enum, in octets: the largest IB MTU not above a
// netdev MTU (siw's active MTU).
func IBMTU(netdev int) int {
	for _, m := range []int{4096, 2048, 1024, 512} {
		if netdev >= m {
			return m
		}
	}
	return 256
}

// StartCM makes the rdma_cm manager of the device: no agent, the TCP and MPA
// work runs in package iwarp's goroutines.
func (d *IWARP) StartCM(cfg CMConfig) (*CM, error) {
	m := rdmacm.NewManager(rdmacm.Config{})
	if err := m.AddIWARP(d.dev, rdmacm.IWARPConfig{Addrs: d.addrs, Params: d.params, ConnectTimeout: cfg.ConnectTimeout}); err != nil {
		m.Close()
		return nil, err
	}
	return &CM{Manager: m, close: func() { m.Close() }}, nil
}

// Close closes the capture: the engine has nothing to send, each connection
// is closed with its QP.
func (d *IWARP) Close() error {
	d.once.Do(func() {
		if d.unregister != nil {
			d.unregister()
		}
		d.err = d.closeCapture()
	})
	return d.err
}

// FlushCapture returns the capture's first write error: each segment is
// written out as it is seen (pcaptap.NewTCP), nothing is buffered. Without
// a capture it does nothing.
func (d *IWARP) FlushCapture() error {
	if d.capture == nil {
		return nil
	}
	return d.capture.Err()
}

// closeCapture closes Config.Pcap's file; Config.Tap stays open, given the
// capture's error (Tap.Fail) for its owner's Flush to report.
func (d *IWARP) closeCapture() error {
	if d.tap != nil {
		if err := d.capture.Err(); err != nil {
			d.tap.Fail(err)
		}
		return nil
	}
	if d.file == nil {
		return nil
	}
	err := d.capture.Err()
	if err != nil {
		err = fmt.Errorf("pcap: %w", err)
	}
	if cerr := d.file.Close(); err == nil {
		err = cerr
	}
	return err
}
