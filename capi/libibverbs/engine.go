package main

import "C"

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	"github.com/softrdma/softrdma/capi/verbsdev"
	"github.com/softrdma/softrdma/devspec"
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
	registerCounters(d.Spec, e) // SOFTRDMA_METRICS (metrics.go)
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

func openEngine(d *verbsdev.Device) (*engine, error) {
	s := d.Spec
	cfg := d.Limits // rxe's or siw's, as ibv_query_device says
	cfg.Seed = rand.Uint64()
	if s.Transport == devspec.IWARP {
		dev, err := iwarp.Open(iwarp.DeviceConfig{Context: cfg})
		if err != nil {
			return nil, err
		}
		return &engine{ctx: dev.Context(), iw: dev}, nil
	}
	dev, err := roce.Open(roce.OpenConfig{
		Backend:   roce.Backend(s.Backend),
		Interface: s.Iface,
		Addrs:     []netip.Addr{s.Addr},
		Engine:    cfg,
	})
	if err != nil {
		return nil, openError(s, err)
	}
	go dev.Run(context.Background(), nil)
	return &engine{ctx: dev.Context(), roce: dev}, nil
}
