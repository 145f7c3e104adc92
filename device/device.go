// Package device opens a softrdma device by its description, whichever its
// transport: a devspec.Spec (roce:ADDR[,backend=udp|afpacket|tap][,iface=...],
// iwarp:ADDR[,iface=...]) becomes a running RoCE device (roce.Open, its loop
// started) or an iWARP device (iwarp.Open and the addresses its rdma_cm
// serves), behind one interface, Device, with rdma_cm on it (StartCM). It is
// the one way the softrdma commands open devices; Choose turns the tools'
// -d/-g conventions (an interface or one of its addresses, a GID index, the
// peer) into a Spec.
package device

import (
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"

	"github.com/softrdma/softrdma/devspec"
	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/iwarp"
	"github.com/softrdma/softrdma/pcaptap"
	"github.com/softrdma/softrdma/rdmacm"
)

// Device is an open device, RoCE or iWARP.
type Device interface {
	// Spec is the description the device was opened by (for iWARP with
	// Addr the address Attach bound, if any).
	Spec() devspec.Spec
	// Context is the device's verbs engine.
	Context() *ibtransport.Context
	// Name is the interface the device is on, as perftest's "Device" shows
	// it (RoCE: the interface of the spec or the TAP's; iWARP: the
	// interface of its address, or "iwarp0" while it has none).
	Name() string
	// Local is the address the device sends from (iWARP: invalid until it
	// has one).
	Local() netip.Addr
	// GIDs is the GID table: RoCE's derived from the interface's addresses
	// as rxe's (roce.GIDTable); iWARP's one GID, siw's (the interface's MAC
	// in the first six octets).
	GIDs() []netip.Addr
	// PathMTU is the port's active MTU in octets.
	PathMTU() int
	// Attach binds an iWARP device to local, the address of a connection it
	// runs on (the name, MTU and GID of its interface); a RoCE device's
	// address is fixed when it opens and Attach does nothing.
	Attach(local netip.Addr) error
	// StartCM puts rdma_cm on the device: a CM agent on RoCE's QP1, the
	// TCP and MPA exchange on iWARP.
	StartCM(cfg CMConfig) (*CM, error)
	// Close sends what the engine still has queued, stops the device and
	// its loop, and closes the capture.
	Close() error
}

// Config is what Open needs besides the Spec.
type Config struct {
	// Seed seeds the engine (QPNs, keys, region addresses); 0 takes one
	// from crypto/rand, so that runs do not repeat them.
	Seed uint64
	// Pcap, if not "", is the file the device's traffic is written to:
	// RoCE's frames (over udp with the IPv4 IDs the socket hides recovered,
	// pcaptap.IPv4IDRestorer), iWARP's connections as synthesised TCP
	// segments (pcaptap.TCP).
	Pcap string
	// Tap, if not nil, is a --pcap file other captures write too (a command
	// that records several devices): the device records into it as into
	// Pcap's, and Close leaves it open (a capture error goes to Tap.Fail).
	// At most one of Pcap and Tap.
	Tap *pcaptap.Tap
	// UDPPort is a RoCE device's RoCEv2 UDP port (0: 4791).
	UDPPort uint16
	// Idle leaves a RoCE device's loop unstarted: its endpoint is the
	// caller's to read and write (conform's tester, which sends frames of
	// its own and uses the device for its endpoint and neighbours alone).
	Idle bool
	// TAPAddrs are, for backend=tap, the addresses of the host the device
	// is, in GID order (default: the Spec's address alone; the Spec's must
	// be among them).
	TAPAddrs []netip.Addr
	// TAPKernelAddrs go to the kernel's side of a TAP device (backend=tap).
	TAPKernelAddrs []netip.Prefix
	// TAPMTU is the MTU of backend=tap's TAP device (0: the kernel's, 1500).
	TAPMTU int
	// AddrFlag is the flag that names the device's address (-d, say): an
	// address already in use gets a hint that says what to type with it
	// (without one the hint names the address alone).
	AddrFlag string
	// Engine configures the verbs engine (its limits: the C libraries give
	// rxe's or siw's, as ibv_query_device reports them); Config.Seed, not
	// Engine.Seed, seeds it.
	Engine ibtransport.ContextConfig
	// IWARP are the parameters of an iWARP device's connections (the MPA
	// CRC policy, IRD and ORD, ...); Pcap sets Observe.
	IWARP iwarp.ConnParams
}

// CMConfig configures StartCM.
type CMConfig struct {
	// ConnectTimeout bounds an iWARP connection's TCP connect and MPA
	// exchange (rdmacm.IWARPConfig's; 0: its default).
	ConnectTimeout time.Duration
}

// CM is rdma_cm on a device.
type CM struct {
	// Manager is the rdma_cm manager over the device.
	Manager *rdmacm.Manager
	close   func()
}

// Close flushes what the CM queued (a DREP, say), closes the manager and
// stops the CM agent.
func (c *CM) Close() { c.close() }

// Open opens the device s describes and, for RoCE, starts its loop.
func Open(s devspec.Spec, cfg Config) (Device, error) {
	if cfg.Seed == 0 {
		var b [8]byte
		if _, err := crand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("device seed: %w", err)
		}
		cfg.Seed = binary.LittleEndian.Uint64(b[:])
	}
	if cfg.Pcap != "" && cfg.Tap != nil {
		return nil, fmt.Errorf("device %v: give Config.Pcap or Config.Tap, not both", s)
	}
	// Each case returns a nil Device, not a nil pointer in one, on failure.
	switch s.Transport {
	case devspec.RoCE:
		if d, err := openRoCE(s, cfg); err == nil {
			d.unregister = register(d)
			return d, nil
		} else {
			return nil, err
		}
	case devspec.IWARP:
		if d, err := openIWARP(s, cfg); err == nil {
			d.unregister = register(d)
			return d, nil
		} else {
			return nil, err
		}
	}
	return nil, fmt.Errorf("device %v: transport %q: want roce or iwarp", s, s.Transport)
}
