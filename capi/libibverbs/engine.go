package main

import "C"

import (
	"fmt"
	"sync"
	"time"

	"github.com/softrdma/softrdma/capi/verbsdev"
	softdevice "github.com/softrdma/softrdma/device"
	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/iwarp"
	"github.com/softrdma/softrdma/roce"
)

// engine is a device opened for traffic: its verbs engine and, for RoCE, the
// device whose loop runs it. It is opened at the first verb that needs it (not
// at ibv_open_device, so that ibv_devinfo does not take the device's UDP port
// from a program already using it) and stays open for the process's life.
type engine struct {
	ctx  *ibtransport.Context
	roce *roce.Device
	iw   *iwarp.Device // an iWARP device: its connections are rdma_cm's (cm.go)
	// iwParams are the iWARP device's connection parameters (with
	// SOFTRDMA_PCAP, the hook that captures them), for rdma_cm (cm.go).
	iwParams iwarp.ConnParams
	// rxMu serialises the program's threads' reads of a RoCE device's
	// socket (srgo_rx: roce.Device.PollInput's buffers are the device's).
	rxMu sync.Mutex
}

var engines struct {
	mu sync.Mutex
	m  map[C.int]*engine
}

func engineOf(i C.int, d *verbsdev.Device) (*engine, error) {
	engines.mu.Lock()
	defer engines.mu.Unlock()
	if e := engines.m[i]; e != nil {
		return e, nil
	}
	e, err := openEngine(d)
	if err != nil {
		return nil, err
	}
	if engines.m == nil {
		engines.m = map[C.int]*engine{}
	}
	engines.m[i] = e
	go e.forwardAsync()
	return e, nil
}

// engineFor returns the open engine whose verbs context is c, or nil.
func engineFor(c *ibtransport.Context) *engine {
	engines.mu.Lock()
	defer engines.mu.Unlock()
	for _, e := range engines.m {
		if e.ctx == c {
			return e
		}
	}
	return nil
}

// flush sends now what the engine has queued (the ACKs of what the program
// has just received, above all), as the device loop would shortly: before a
// QP goes, so that a program that exits as soon as it has its last completion
// (ibv_rc_pingpong does) has acknowledged what it received. The kernel's rxe
// acknowledges before the completion is even visible; without this the peer
// retried into "transport retry counter exceeded". Device.Flush is safe
// beside the loop (one mutex).
func (e *engine) flush() {
	if e.roce != nil {
		e.roce.Flush(time.Now())
	}
}

// openEngine opens d's device as the softrdma commands do (package device:
// the RoCE device's loop started, the device in counters.Default for
// SOFTRDMA_METRICS, its capture SOFTRDMA_PCAP's), with the engine limits ibv_query_device reports.
func openEngine(d *verbsdev.Device) (*engine, error) {
	pcap := pcapFile() // SOFTRDMA_PCAP (pcap.go)
	// Seed 0: device.Open seeds the engine from crypto/rand (getrandom).
	// math/rand's seed in a library is the process's AT_RANDOM, which a
	// forked child shares with its parent and its siblings: the children of
	// a forking server (qperf) all drew the same QPNs, keys and PSNs.
	dev, err := softdevice.Open(d.Spec, softdevice.Config{Engine: d.Limits, AddrFlag: "--device roce:", Pcap: pcap})
	if err != nil {
		return nil, openError(d.Spec, err)
	}
	if pcap != "" {
		addCapture(dev)
	}
	switch dev := dev.(type) {
	case *softdevice.RoCE:
		return &engine{ctx: dev.Context(), roce: dev.RoCE()}, nil
	case *softdevice.IWARP:
		return &engine{ctx: dev.Context(), iw: dev.IWARP(), iwParams: dev.Params()}, nil
	}
	dev.Close()
	return nil, fmt.Errorf("open %s: device of type %T", d.Spec, dev)
}
