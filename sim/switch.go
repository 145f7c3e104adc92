package sim

import (
	"fmt"

	"github.com/softrdma/softrdma/header"
)

// Switch is a learning Ethernet switch joining any number of nodes' Ports,
// each over its own Link. It forwards a frame the instant it arrives
// (cut-through, no internal delay): broadcast and multicast destinations
// and unknown unicast ones go to every other port; a known unicast
// destination goes to its one port. It knows the MAC of every Port attached
// with ConnectSwitch from the start and learns source MACs from traffic.
type Switch struct {
	n     *Network
	nm    string
	ports []*switchPort
	table map[[6]byte]*switchPort

	stats SwitchStats // guarded by n.mu
}

// SwitchStats counts a Switch's forwarding decisions.
type SwitchStats struct {
	Forwarded uint64 // frames sent to their known destination's port
	Flooded   uint64 // frames sent to every other port
	Filtered  uint64 // frames whose destination is on the port they came from
	Runts     uint64 // frames shorter than two MAC addresses, discarded
}

// switchPort is the switch's end of one link.
type switchPort struct {
	sw   *Switch
	link *Link
	out  *linkDir // the direction leaving the switch
}

// AddSwitch adds an empty switch.
func (n *Network) AddSwitch(name string) *Switch {
	n.mu.Lock()
	defer n.mu.Unlock()
	sw := &Switch{n: n, nm: name, table: make(map[[6]byte]*switchPort)}
	n.switches = append(n.switches, sw)
	return sw
}

// ConnectSwitch joins port p to switch sw with a link whose directions both
// start with cfg; AtoB is p→sw. It panics like Connect.
func (n *Network) ConnectSwitch(p *Port, sw *Switch, cfg LinkConfig) *Link {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.checkFreeLocked(p)
	if sw.n != n {
		panic(fmt.Sprintf("sim: switch %s belongs to another Network", sw.nm))
	}
	sp := &switchPort{sw: sw}
	l := n.newLinkLocked(p, sp, cfg)
	p.link, p.out = l, l.dirs[AtoB]
	sp.link, sp.out = l, l.dirs[BtoA]
	sw.ports = append(sw.ports, sp)
	sw.table[p.mac] = sp
	return l
}

// Name returns the name given to AddSwitch.
func (sw *Switch) Name() string { return sw.nm }

// Stats returns a snapshot of the switch's counters.
func (sw *Switch) Stats() SwitchStats {
	sw.n.mu.Lock()
	defer sw.n.mu.Unlock()
	return sw.stats
}

func (sp *switchPort) name() string { return sp.sw.nm }

// arriveLocked forwards a frame that reached the switch over sp's link.
func (sp *switchPort) arriveLocked(dir *linkDir, data []byte, origin *Port, sentAt int64) func() {
	sw := sp.sw
	dir.deliveredLocked(data)
	defer sw.n.putBufLocked(data)
	if len(data) < 12 {
		sw.stats.Runts++
		return nil
	}
	eth := header.Ethernet(data)
	dst, src := eth.DstMAC(), eth.SrcMAC()
	if src[0]&1 == 0 {
		sw.table[src] = sp
	}
	if dst[0]&1 == 0 {
		if out, ok := sw.table[dst]; ok {
			if out == sp {
				sw.stats.Filtered++
				return nil
			}
			sw.stats.Forwarded++
			out.out.transmitLocked(data, origin, sentAt)
			return nil
		}
	}
	sw.stats.Flooded++
	for _, out := range sw.ports {
		if out != sp {
			out.out.transmitLocked(data, origin, sentAt)
		}
	}
	return nil
}
