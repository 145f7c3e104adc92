package rping

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/softrdma/softrdma/device"
	"github.com/softrdma/softrdma/devspec"
	"github.com/softrdma/softrdma/iwarp"
)

// rping's device (device.Open) and its rdma_cm.
//
// Over iWARP (--transport iwarp, the default) the connections are TCP to the
// server's port and the MPA exchange of revision 2 with the RFC 6581 IRD/ORD
// words. --crc is the MPA CRC policy of both sides' start frames; --pcap
// records the connection's TCP octets. The device's rdma_cm serves the host's
// addresses: a client's first is the source the kernel picks towards the
// server (where rdma_resolve_addr puts the ID: the TCP connection's own
// replaces it); a server's -a address comes first, so that binding it is left
// to the kernel's listen, as without rdma_cm.
//
// Over RoCE (--transport roce) the device is on the UDP backend, with a CM
// agent on its QP1. --pcap records the RoCE frames (the MADs included). The
// server's -a names the device (its address); the client's is the peer's.

// openDevice opens the device and its rdma_cm; addr is -a's address, src
// the client's -I (the device's address then), or invalid.
func openDevice(o Options, crc iwarp.CRCPolicy, addr, src netip.Addr) (*cmSide, error) {
	var spec devspec.Spec
	cfg := device.Config{Pcap: o.Pcap}
	var cmc device.CMConfig
	settle := time.Duration(0)
	switch o.Transport {
	case "iwarp":
		spec.Transport = devspec.IWARP
		if addr.IsValid() && !addr.IsUnspecified() {
			if o.Server {
				spec.Addr = addr
			} else if a, err := device.RouteSource(addr); err == nil {
				spec.Addr = a
			}
		}
		if src.IsValid() {
			spec.Addr = src
		}
		// The calls set IRD and ORD (rping's 1 and 1) on each connection; the
		// listener's own are those of the Reply of a request its policy rejects.
		cfg.IWARP = iwarp.ConnParams{CRC: crc, IRD: irdOrd, ORD: irdOrd,
			// rping uses neither atomics nor immediate data nor large FPDUs, so
			// its start frames carry siw's own flags only. (siw as a responder
			// echoes the Request's reserved bits in its Reply; that enables
			// nothing, since softrdma acknowledges with a bit of its own.)
			NoExtensions: true}
		cmc.ConnectTimeout = 15 * time.Second
		settle = o.Settle
	default:
		c := device.Choice{Backend: devspec.BackendUDP, GIDIndex: -1}
		if !o.Server {
			c.Peer = addr
			if src.IsValid() {
				c.Name = src.String() // -I: the device on the source address
			}
		} else {
			cfg.AddrFlag = "-a" // the server's -a names its device
			if addr.IsValid() && !addr.IsUnspecified() {
				c.Name = addr.String()
			}
		}
		var err error
		if spec, err = c.Spec(); err != nil {
			return nil, err
		}
	}
	d, err := device.Open(spec, cfg)
	if err != nil {
		return nil, err
	}
	cm, err := d.StartCM(cmc)
	if err != nil {
		d.Close()
		return nil, err
	}
	return &cmSide{m: cm.Manager, verbs: d.Context(), settle: settle, close: func() error {
		cm.Close()
		if err := d.Close(); err != nil {
			if spec.Transport == devspec.IWARP {
				return err
			}
			return fmt.Errorf("closing the device: %w", err)
		}
		return nil
	}}, nil
}
