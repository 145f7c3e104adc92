// Package cmsends extracts, for the tests of the oob packages, the messages perftest -R
// exchanges as SENDs on its rdma_cm QP, from RoCEv2 and iWARP captures.
package cmsends

import (
	"bytes"
	"fmt"
	"net/netip"

	"github.com/google/gopacket/layers"

	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/iwarp"
	"github.com/softrdma/softrdma/oob/internal/capture"
)

// RoCESends returns the payloads of the RC SEND Only packets of a RoCEv2 capture that
// go to the QP the first RC SEND went to (in each direction: each side's comm QP), in
// capture order. The client is the sender of the capture's first frame.
func RoCESends(path string) ([]capture.Event, error) {
	pkts, err := capture.ReadAll(path)
	if err != nil {
		return nil, err
	}
	var client netip.Addr
	qp := map[netip.Addr]uint32{} // per destination address
	var out []capture.Event
	for i, pk := range pkts {
		p, src, dst := capture.Decode(pk.Data)
		if i == 0 {
			client = src
		}
		udp, ok := p.TransportLayer().(*layers.UDP)
		if !ok || udp.DstPort != 4791 {
			continue
		}
		b := udp.Payload
		if len(b) < 12+4 {
			return nil, fmt.Errorf("%s: frame %d: short RoCE packet", path, pk.Frame)
		}
		bth := ibtransport.BTH(b[:12])
		op := bth.Opcode()
		if op != ibtransport.OpcodeRCSendOnly && op != ibtransport.OpcodeRCSendFirst &&
			op != ibtransport.OpcodeRCSendMiddle && op != ibtransport.OpcodeRCSendLast {
			continue
		}
		want, seen := qp[dst]
		if !seen {
			qp[dst], want = bth.DestQP(), bth.DestQP()
		}
		if bth.DestQP() != want {
			continue
		}
		if op != ibtransport.OpcodeRCSendOnly {
			return nil, fmt.Errorf("%s: frame %d: multi-packet SEND %v on the comm QP", path, pk.Frame, op)
		}
		end := len(b) - 4 - int(bth.PadCount())
		if end < 12 {
			return nil, fmt.Errorf("%s: frame %d: pad count %d too large", path, pk.Frame, bth.PadCount())
		}
		out = append(out, capture.Event{Frame: pk.Frame, FromClient: src == client, Data: bytes.Clone(b[12:end])})
	}
	return out, nil
}

// IWARPSends returns the payloads of the RDMAP Send messages on the first TCP connection
// to port of an iWARP capture (the rdma_cm connection perftest exchanges its messages
// on), in capture order.
func IWARPSends(path string, port uint16) ([]capture.Event, error) {
	conns, err := capture.TCP(path, port)
	if err != nil {
		return nil, err
	}
	if len(conns) == 0 {
		return nil, fmt.Errorf("%s: no TCP connection to port %d", path, port)
	}
	var out []capture.Event
	var frame int
	var derr error
	neg := new(iwarp.Negotiation)
	mk := func(fromClient bool) *iwarp.StreamDecoder {
		return iwarp.NewStreamDecoder(neg, func(r *iwarp.Record) {
			switch {
			case r.Kind == iwarp.RecordError && derr == nil:
				derr = fmt.Errorf("frame %d: %w", frame, r.Err)
			case r.Kind == iwarp.RecordFPDU && r.RDMAP != nil && r.RDMAP.Opcode() == iwarp.OpSend:
				if !r.DDP.Last() {
					derr = fmt.Errorf("frame %d: multi-FPDU Send", frame)
				}
				out = append(out, capture.Event{Frame: frame, FromClient: fromClient, Data: bytes.Clone(r.Payload)})
			}
		})
	}
	dc, ds := mk(true), mk(false)
	for _, e := range conns[0].Events {
		frame = e.Frame
		if e.FromClient {
			_, _ = dc.Write(e.Data)
		} else {
			_, _ = ds.Write(e.Data)
		}
	}
	_ = dc.Close()
	_ = ds.Close()
	if derr != nil {
		return nil, fmt.Errorf("%s: %w", path, derr)
	}
	return out, nil
}
