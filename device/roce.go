package device

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/softrdma/softrdma/devspec"
	"github.com/softrdma/softrdma/ibcm"
	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/netio"
	"github.com/softrdma/softrdma/pcaptap"
	"github.com/softrdma/softrdma/rdmacm"
	"github.com/softrdma/softrdma/roce"
)

// RoCE is an open RoCE device with its loop running.
type RoCE struct {
	spec devspec.Spec
	dev  *roce.Device
	name string

	file *os.File     // Config.Pcap's, nil with Config.Tap
	tap  *pcaptap.Tap // writes file, or Config.Tap

	cancel context.CancelFunc
	done   chan error // nil with Config.Idle
	once   sync.Once
	err    error

	unregister func() // takes it out of counters.Default (register)
}

var _ Device = (*RoCE)(nil)

// openRoCE opens the device with roce.Open on the spec's backend: udp binds
// the spec's address (the GID table is its interface's, or the address alone
// if no interface holds it), afpacket answers on it on the spec's interface,
// tap is the host with Config.TAPAddrs behind a TAP device named by the
// spec's iface (the kernel picks tapN without one), whose kernel side gets
// Config.TAPKernelAddrs and the spec's kernel-addr. Without an address, udp
// binds the interface's first and afpacket answers on all of them.
func openRoCE(s devspec.Spec, cfg Config) (*RoCE, error) {
	eng := cfg.Engine
	eng.Seed = cfg.Seed
	oc := roce.OpenConfig{Backend: roce.Backend(s.Backend), Interface: s.Iface, Engine: eng, UDPPort: cfg.UDPPort}
	if s.Addr.IsValid() {
		oc.Addrs = []netip.Addr{s.Addr}
	}
	switch s.Backend {
	case devspec.BackendUDP, "":
		oc.Backend = roce.BackendUDP
	case devspec.BackendAFPacket:
	case devspec.BackendTAP:
		if len(cfg.TAPAddrs) > 0 {
			if !slices.Contains(cfg.TAPAddrs, s.Addr) {
				return nil, fmt.Errorf("device %v: address %v is not among the TAP host's %v", s, s.Addr, cfg.TAPAddrs)
			}
			oc.Addrs = cfg.TAPAddrs
		}
		oc.TAPKernelAddrs, oc.MTU = cfg.TAPKernelAddrs, cfg.TAPMTU
		if s.KernelAddr.IsValid() && !slices.Contains(oc.TAPKernelAddrs, s.KernelAddr) {
			oc.TAPKernelAddrs = append(slices.Clip(oc.TAPKernelAddrs), s.KernelAddr)
		}
	default:
		return nil, fmt.Errorf("device %v: backend %q: want udp, afpacket or tap", s, s.Backend)
	}
	d := &RoCE{spec: s, name: s.Iface, tap: cfg.Tap}
	if cfg.Pcap != "" {
		f, err := os.Create(cfg.Pcap)
		if err != nil {
			return nil, err
		}
		if d.tap, err = pcaptap.New(f, netio.FormatForPath(cfg.Pcap), 0); err != nil {
			f.Close()
			return nil, err
		}
		d.file = f
	}
	if d.tap != nil {
		// A UDP socket hides the IPv4 ID of what it receives: the stream's
		// frames get it back from their ICRCs.
		d.tap.Record(&oc, oc.Backend == roce.BackendUDP)
	}
	dev, err := roce.Open(oc)
	if err != nil {
		d.closeCapture()
		if oc.Backend == roce.BackendUDP && errors.Is(err, syscall.EADDRINUSE) {
			return nil, AddrInUse(s.Addr, cfg.AddrFlag, err)
		}
		return nil, err
	}
	d.dev = dev
	if !d.spec.Addr.IsValid() && len(dev.Addrs()) > 0 {
		d.spec.Addr = dev.Addrs()[0]
	}
	if s.Backend == devspec.BackendTAP {
		if t, ok := unwrap(dev.Endpoint()).(interface{ Name() string }); ok {
			d.name = t.Name()
			d.spec.Iface = d.name
		}
	}
	if d.name == "" && d.spec.Addr.IsLoopback() {
		d.name = "lo"
	}
	d.cancel = func() {}
	if cfg.Idle {
		return d, nil
	}
	d.done = make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	go func() { d.done <- dev.Run(ctx, netio.SystemClock{}) }()
	return d, nil
}

// unwrap returns the endpoint under any capture wrapper.
func unwrap(ep netio.Link) netio.Link {
	for {
		u, ok := ep.(interface{ Unwrap() netio.Endpoint })
		if !ok {
			return ep
		}
		ep = u.Unwrap()
	}
}

// RoCE returns the roce device.
func (d *RoCE) RoCE() *roce.Device { return d.dev }

// Spec returns the device's description.
func (d *RoCE) Spec() devspec.Spec { return d.spec }

// Context returns the verbs engine.
func (d *RoCE) Context() *ibtransport.Context { return d.dev.Context() }

// Name returns the interface.
func (d *RoCE) Name() string { return d.name }

// Local returns the address the device sends from.
func (d *RoCE) Local() netip.Addr { return d.spec.Addr }

// GIDs returns the GID table.
func (d *RoCE) GIDs() []netip.Addr { return d.dev.GIDs() }

// PathMTU returns the port's active MTU.
func (d *RoCE) PathMTU() int { return d.dev.PathMTU() }

// Attach does nothing: a RoCE device's address is its spec's.
func (d *RoCE) Attach(netip.Addr) error { return nil }

// PcapFrames returns the number of frames in the --pcap file so far.
func (d *RoCE) PcapFrames() uint64 {
	if d.tap == nil {
		return 0
	}
	return d.tap.Frames()
}

// StartCM puts a CM agent on QP1 and a manager on it, and runs the agent.
func (d *RoCE) StartCM(CMConfig) (*CM, error) {
	agent, err := ibcm.NewAgent(ibcm.AgentConfig{Device: d.dev})
	if err != nil {
		return nil, err
	}
	m := rdmacm.NewManager(rdmacm.Config{})
	if err := m.AddRoCE(agent); err != nil {
		agent.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); agent.Run(ctx) }()
	return &CM{Manager: m, close: func() {
		// What the CM just queued on QP1 (a DREP, say) goes out before QP1 does.
		d.dev.Flush(time.Now())
		m.Close()
		cancel()
		<-done
		agent.Close()
	}}, nil
}

// Close sends what the engine still has queued (the ACK of the last message
// above all: the peer's send completes only when it arrives), stops the
// device loop and closes the endpoint and the capture.
func (d *RoCE) Close() error {
	d.once.Do(func() {
		if _, err := d.dev.Flush(time.Now()); err != nil && !errors.Is(err, net.ErrClosed) {
			d.err = err
		}
		if d.unregister != nil {
			d.unregister()
		}
		d.cancel()
		if err := d.dev.Close(); err != nil && d.err == nil {
			d.err = err
		}
		if d.done != nil {
			if err := <-d.done; err != nil && !errors.Is(err, context.Canceled) && d.err == nil {
				d.err = err
			}
		}
		if err := d.closeCapture(); err != nil && d.err == nil {
			d.err = err
		}
	})
	return d.err
}

// FlushCapture writes out what the capture (Config.Pcap) still buffers,
// leaving the device running: what a program that exits without closing its
// device (the verbs libraries') needs for a complete file. Without a
// capture it does nothing.
func (d *RoCE) FlushCapture() error {
	if d.tap == nil {
		return nil
	}
	return d.tap.Flush()
}

// closeCapture flushes the capture into the file, and closes it; a
// Config.Tap stays open (its owner's Flush reports its errors).
func (d *RoCE) closeCapture() error {
	if d.file == nil {
		return nil
	}
	err := d.tap.Flush()
	if cerr := d.file.Close(); err == nil {
		err = cerr
	}
	return err
}

// AddrInUse is the error of a udp device whose address:4791 another socket
// holds (err, EADDRINUSE, stays in the chain): most often the other side
// of a test on the same host that took the same default (perf or
// pingpong, server and client both on 127.0.0.1), else the kernel's
// rdma_rxe or another softrdma. It says what to type instead: the next
// loopback address (all of 127/8 is lo's, so each side may have its own)
// after flag, the flag that names the address ("-d"; one ending in ':' or
// '=', "--device roce:", takes it with no space; "" for the address alone).
func AddrInUse(addr netip.Addr, flag string, err error) error {
	alt := netip.AddrFrom4([4]byte{127, 0, 0, 2})
	if addr.Is4() && addr.IsLoopback() {
		if n := addr.Next(); n.IsLoopback() {
			alt = n
		}
	}
	what := alt.String()
	switch {
	case strings.HasSuffix(flag, ":") || strings.HasSuffix(flag, "="):
		what = flag + what
	case flag != "":
		what = flag + " " + what
	}
	return fmt.Errorf("address %v in use (the other side on this host, the kernel's rdma_rxe, or another softrdma has it): on one host give each side its own loopback address: %s: %w",
		netip.AddrPortFrom(addr, roce.UDPPort), what, err)
}
