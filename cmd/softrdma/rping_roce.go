package main

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
)

// rping over RoCE (--transport roce): the Manager's device is a RoCE device on
// the UDP backend, with a CM agent on its QP1 (perfStartCM). --pcap records
// the RoCE frames (the MADs included). The server's -a names the device (its
// address); the client's is the peer's.

// rpingOpenRoCE opens the RoCE device and its rdma_cm; addr is -a's address.
func rpingOpenRoCE(o rpingOptions, addr netip.Addr) (*rpingCM, error) {
	cfg := ppDeviceConfig{gidx: -1, backend: "udp", pcap: o.pcap, seed: rand.Uint64()}
	if o.server {
		if addr.IsValid() && !addr.IsUnspecified() {
			cfg.name = addr.String()
		}
	} else {
		cfg.peer = addr
	}
	d, err := ppOpenDevice(cfg)
	if err != nil {
		return nil, err
	}
	cm, err := perfStartCM(d.dev)
	if err != nil {
		d.Close()
		return nil, err
	}
	return &rpingCM{m: cm.m, verbs: d.dev.Context(), close: func() error {
		cm.close()
		if err := d.Close(); err != nil {
			return fmt.Errorf("closing the device: %w", err)
		}
		return nil
	}}, nil
}
