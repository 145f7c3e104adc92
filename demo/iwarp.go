package demo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/softrdma/softrdma/device"
	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/iwarp"
	"github.com/softrdma/softrdma/netio"
	"github.com/softrdma/softrdma/pcaptap"
)

// newIWARPNode is one side of the iWARP demo: the same verbs objects as the
// RoCE demo's, on an iwarp device. Its receive queue holds a receive for every
// message of a phase: iWARP has no RNR flow control (a SEND that finds no receive
// ends the connection), so the responder posts them all before the phase.
func newIWARPNode(o Options, seed uint64) (*node, error) {
	dev, err := iwarp.Open(iwarp.DeviceConfig{Context: ibtransport.ContextConfig{Seed: seed}})
	if err != nil {
		return nil, err
	}
	recvDepth := max(o.Depth, o.Messages)
	return newVerbs(dev.Context(), o, 2*o.Depth+recvDepth, recvDepth)
}

// runIWARP runs the demo's phases between two iwarp devices in this process,
// connected over loopback TCP (Listen/Accept and Dial, as rdma_cm would), with
// the RFC 7306 atomics softrdma offers its own peers.
func runIWARP(o Options) (*Result, error) {
	start := time.Now()
	crc, err := device.ParseCRCPolicy(o.CRC)
	if err != nil {
		return nil, err
	}
	res := &Result{Transport: "iWARP (RDMAP/DDP/MPA over TCP)", Link: "loopback TCP, CRC " + crc.String()}
	params := iwarp.ConnParams{CRC: crc}
	dialParams := params
	var capture *pcaptap.TCP
	if o.Pcap != "" {
		f, err := os.Create(o.Pcap)
		if err != nil {
			return res, err
		}
		defer f.Close()
		if capture, err = pcaptap.NewTCP(f, netio.FormatForPath(o.Pcap)); err != nil {
			return res, err
		}
		// One side's view has both directions: capture the initiator's.
		dialParams.Observe = capture.Observe
	}
	a, err := newIWARPNode(o, o.Seed*2+1)
	if err != nil {
		return res, err
	}
	b, err := newIWARPNode(o, o.Seed*2+2)
	if err != nil {
		return res, err
	}
	ln, err := iwarp.Listen("127.0.0.1:0", params)
	if err != nil {
		return res, err
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	accepted := make(chan error, 1)
	var bConn *iwarp.Conn
	go func() {
		var err error
		bConn, err = ln.Accept(ctx, b.qp)
		accepted <- err
	}()
	aConn, derr := iwarp.Dial(ctx, a.qp, ln.Addr().String(), dialParams)
	aerr := <-accepted
	if derr != nil || aerr != nil {
		if aConn != nil {
			aConn.Abort()
		}
		if bConn != nil {
			bConn.Abort()
		}
		return res, fmt.Errorf("connect: %w", errors.Join(derr, aerr))
	}
	neg := aConn.Negotiated()
	res.Notes = append(res.Notes, fmt.Sprintf("MPA revision %d, CRC %v, markers %v, IRD %d ORD %d, RFC 7306 extensions %v, MULPDU %d",
		neg.Revision, neg.CRC, neg.SendMarkers || neg.RecvMarkers, neg.IRD, neg.ORD, neg.Extensions, neg.MULPDU))

	res.Verified = true
	for _, ph := range phases(a, b, o) {
		err := runPhaseLive(a, b, ph, o)
		if err == nil {
			// An iWARP WRITE completes when it is handed to TCP, not when it is
			// placed: check the responder's memory after a SEND has followed
			// (RFC 5040 §5.5: a Send is delivered after every earlier message
			// of the stream is placed).
			err = barrier(a, b)
		}
		err = res.addPhase(OpStats{Operation: ph.name, Messages: o.Messages, Bytes: ph.bytes}, err, ph.verify)
		if err != nil && a.qp.State() == ibtransport.QPStateErr {
			break
		}
	}
	res.Counters = nodeCounters("iwarp", []*node{a, b}, nil, nil)
	aConn.Close()
	select {
	case <-bConn.Done():
	case <-time.After(5 * time.Second):
	}
	bConn.Close()
	<-aConn.Done()
	if e := bConn.Err(); e != nil && !errors.Is(e, iwarp.ErrPeerClosed) {
		res.Notes = append(res.Notes, "responder's connection ended with: "+e.Error())
	}
	if capture != nil {
		if err := capture.Err(); err != nil {
			return res, fmt.Errorf("pcap: %w", err)
		}
	}
	res.WallTime = time.Since(start)
	return res, nil
}

// runPhaseLive runs one phase on QPs driven by their own goroutines: it polls
// both CQs, and sleeps on their completion events when nothing happened.
func runPhaseLive(a, b *node, ph phase, o Options) error {
	r := newPhaseRun(a, b, ph, o, o.Messages)
	deadline := time.Now().Add(2 * time.Minute)
	idle := time.NewTimer(time.Hour)
	defer idle.Stop()
	for !r.done() {
		if r.step() {
			continue
		}
		a.cq.Notify(false)
		b.cq.Notify(false)
		if r.step() {
			continue
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out: %d of %d completed, %d received", r.completed, o.Messages, r.received)
		}
		idle.Reset(100 * time.Millisecond)
		select {
		case <-a.cq.Events():
		case <-b.cq.Events():
		case <-idle.C:
		}
	}
	return r.failure
}

// barrier sends a zero-length SEND from a to b and waits for both
// completions.
func barrier(a, b *node) error {
	const id = 1 << 62
	if err := b.qp.PostRecv(ibtransport.RecvWR{WRID: id}); err != nil {
		return err
	}
	if err := a.qp.PostSend(ibtransport.SendWR{WRID: id, Opcode: ibtransport.WRSend, Signaled: true}); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, n := range []*node{a, b} {
		var wc [1]ibtransport.WC
		for n.cq.Poll(wc[:]) == 0 {
			if err := n.cq.Wait(ctx); err != nil {
				return fmt.Errorf("barrier: %w", err)
			}
		}
		if wc[0].Status != ibtransport.WCSuccess || wc[0].WRID != id {
			return fmt.Errorf("barrier: completion %v", wc[0])
		}
	}
	return nil
}
