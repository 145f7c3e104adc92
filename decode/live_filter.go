package decode

import (
	"errors"
	"net/netip"
	"slices"
)

// A live capture (RunLive) has no first pass to number the flows over, so
// --flow and --qp are matched against each packet as it passes, by what its
// own headers and the capture so far say: --flow ADDR (ADDR:PORT) shows the
// packets with an end at that address (and, iWARP, port), as a file's flows
// with that end; --qp N the RoCE packets to QP N, from QP N (a UD packet's
// DETH), or from QP N by the CM REQ and REP seen before them (the QP pair a
// file's flow pairs). A flow number (--flow N) is refused: the numbers are
// given when the capture ends.

// errLiveFlowNumber refuses --flow N with -i.
var errLiveFlowNumber = errors.New("--flow N: flows are numbered when the capture ends; live, give --flow ADDR or ADDR:PORT, or --qp N (or write the frames with -w FILE and decode the file)")

// checkLive reports a filter part a live capture cannot match.
func (f *Filter) checkLive() error {
	for _, s := range f.Flows {
		if spec, err := parseFlowSpec(s); err == nil && spec.id != 0 {
			return errLiveFlowNumber
		}
	}
	return nil
}

// liveSelects reports whether p passes the filter's --flow and --qp parts,
// on a live capture.
func (d *decoder) liveSelects(p *Packet) bool {
	f := d.filter
	if len(f.Flows) > 0 && !liveEndsMatch(f.Flows, p.Src, p.Dst) {
		return false
	}
	if len(f.QPs) == 0 {
		return true
	}
	if p.DestQP == nil {
		return false // iWARP: no QP numbers on the wire
	}
	src, dst := parseEnd(p.Src), parseEnd(p.Dst)
	from := unknownQP
	if p.DETH != nil {
		from = p.DETH.SrcQP
	} else if src.IsValid() && dst.IsValid() {
		from = d.cmPeer(src.Addr(), dst.Addr(), *p.DestQP)
	}
	return slices.Contains(f.QPs, *p.DestQP) || from != unknownQP && slices.Contains(f.QPs, from)
}

// liveEndsMatch reports whether the end src or dst of a packet (ADDR, or
// ADDR:PORT for iWARP) is one of flows (ADDR or ADDR:PORT specs).
func liveEndsMatch(flows []string, src, dst string) bool {
	for _, s := range flows {
		spec, err := parseFlowSpec(s)
		if err != nil {
			continue
		}
		for _, e := range []string{src, dst} {
			ap := parseEnd(e)
			if ap.IsValid() && ap.Addr() == spec.addr && (spec.port < 0 || ap.Port() == uint16(spec.port) && isAddrPort(e)) {
				return true
			}
		}
	}
	return false
}

// parseEnd parses a packet's Src or Dst, ADDR (RoCE) or ADDR:PORT (iWARP),
// as an AddrPort (port 0 for an address alone); not valid for a GID that is
// no IP address (RoCEv1).
func parseEnd(s string) netip.AddrPort {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.AddrPortFrom(a.Unmap(), 0)
	}
	return netip.AddrPort{}
}

func isAddrPort(s string) bool {
	_, err := netip.ParseAddrPort(s)
	return err == nil
}

// cmPeer returns the QP that packets from src to dst's QP qp come from, by
// the CM REQ and REP seen so far (as roceFlows pairs them at the end), or
// unknownQP.
func (d *decoder) cmPeer(src, dst netip.Addr, qp uint32) uint32 {
	for i, req := range d.cmPairs {
		if req.rep {
			continue
		}
		for _, rep := range d.cmPairs[i+1:] {
			if !rep.rep || rep.from != req.to || rep.to != req.from {
				continue
			}
			switch {
			case req.from == src && req.to == dst && rep.localQPN == qp:
				return req.localQPN
			case rep.from == src && rep.to == dst && req.localQPN == qp:
				return rep.localQPN
			}
			break
		}
	}
	return unknownQP
}
