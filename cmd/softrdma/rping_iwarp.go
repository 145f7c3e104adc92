package main

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/softrdma/softrdma/iwarp"
	"github.com/softrdma/softrdma/pcaptap"
	"github.com/softrdma/softrdma/rdmacm"
)

// rping over iWARP (--transport iwarp, the default): the Manager's device is
// an iWARP device (rdmacm.Manager.AddIWARP), whose connections are TCP to the
// server's port and the MPA exchange of revision 2 with the RFC 6581 IRD/ORD
// words. --crc is the MPA CRC policy of both sides' start frames; --pcap
// records the connection's TCP octets.

// rpingOpenIWARP opens the iWARP device and its rdma_cm; addr is -a's address.
func rpingOpenIWARP(o rpingOptions, crc iwarp.CRCPolicy, addr netip.Addr) (*rpingCM, error) {
	// The calls set IRD and ORD (rping's 1 and 1) on each connection; the
	// listener's own are those of the Reply of a request its policy rejects.
	params := iwarp.ConnParams{CRC: crc, IRD: rpingIRDORD, ORD: rpingIRDORD,
		// rping uses neither atomics nor immediate data nor large FPDUs, so
		// its start frames carry siw's own flags only. (siw as a responder
		// echoes the Request's reserved bits in its Reply; that enables
		// nothing, since softrdma acknowledges with a bit of its own.)
		NoExtensions: true}
	var f *os.File
	var capture *pcaptap.TCP
	if o.pcap != "" {
		var err error
		if f, err = os.Create(o.pcap); err != nil {
			return nil, err
		}
		if capture, err = pcaptap.NewTCP(f); err != nil {
			f.Close()
			return nil, err
		}
		params.Observe = capture.Observe
	}
	closeAll := func() error {
		if f == nil {
			return nil
		}
		err := capture.Err()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("pcap: %w", err)
		}
		return nil
	}
	dev, err := openIWARPDevice()
	if err != nil {
		closeAll()
		return nil, err
	}
	m := rdmacm.NewManager(rdmacm.Config{})
	if err := m.AddIWARP(dev, rdmacm.IWARPConfig{Addrs: rpingHostAddrs(o, addr), Params: params,
		ConnectTimeout: 15 * time.Second}); err != nil {
		m.Close()
		closeAll()
		return nil, err
	}
	return &rpingCM{m: m, verbs: dev.Context(), settle: o.settle, close: func() error {
		m.Close()
		return closeAll()
	}}, nil
}

// rpingHostAddrs lists the addresses the iWARP device serves: the host's. A
// client's first is the source the kernel picks towards the server (where
// rdma_resolve_addr puts the ID: the TCP connection's own replaces it); a
// server's -a address comes first, so that binding it is left to the kernel's
// listen, as without rdma_cm.
func rpingHostAddrs(o rpingOptions, addr netip.Addr) []netip.Addr {
	var as []netip.Addr
	if addr.IsValid() && !addr.IsUnspecified() {
		if o.server {
			as = append(as, addr)
		} else if a, err := perfRouteSource(addr); err == nil {
			as = append(as, a)
		}
	}
	if ifas, err := net.InterfaceAddrs(); err == nil {
		for _, x := range ifas {
			if n, ok := x.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok {
					as = append(as, ip.Unmap())
				}
			}
		}
	}
	if len(as) == 0 {
		as = []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	}
	return as
}
