// Package neigh resolves the IP address of a next hop to the MAC address
// frames to it go to, for devices that write whole Ethernet frames (the RoCE
// AF_PACKET and TAP backends): Host speaks ARP (RFC 826) and NDP (RFC 4861)
// itself, as a host behind a TAP device must; Kernel asks the kernel's
// neighbour table over route netlink, as a raw socket on a real interface
// does; Static is a fixed table. Netlink is the small route netlink client
// Kernel uses, which also lists an interface's addresses in the kernel's order.
//
// The interfaces below are what a device needs of a resolver. roce calls them
// Neighbors, NeighborWaker and NeighborProtocol (aliases of these).
package neigh

import (
	"net/netip"
	"time"
)

// Resolver resolves the IP address of a next hop to the MAC address frames to
// it go to, like the kernel's neighbour table. A device calls Resolve for
// every output frame (multicast destinations and RoCEv1 link-local GIDs map to
// a MAC without it), so it must be quick and must not block: an address being
// resolved returns ErrPending, and the device keeps the frame in a small
// queue and asks again on each flush; an address that cannot be resolved
// returns ErrUnreachable (or another error), and the frame is dropped.
type Resolver interface {
	Resolve(now time.Time, ip netip.Addr) (mac [6]byte, err error)
}

// Waker is implemented by Resolvers that finish resolving outside the
// device's calls (in the background, or from received frames): Wake's channel
// receives a value when a resolution ended or a frame is waiting, so that the
// device flushes at once.
type Waker interface {
	Wake() <-chan struct{}
}

// Protocol is a Resolver that speaks the link's neighbour protocol itself, as
// a host behind a TAP device must (see Host). The device offers it every
// received frame that is not its own, sends the frames it appends on each
// flush, and includes its deadline in its own.
type Protocol interface {
	Resolver
	// HandleFrame takes a received non-RoCE frame and reports whether it
	// belonged to the protocol.
	HandleFrame(now time.Time, frame []byte) bool
	// AppendFrames appends the frames to send (requests, replies) to frames;
	// they stay valid until the next call.
	AppendFrames(now time.Time, frames [][]byte) [][]byte
	// NextDeadline returns the protocol's next timer.
	NextDeadline() (time.Time, bool)
}

// Static is a fixed neighbour table.
type Static map[netip.Addr][6]byte

// Resolve looks ip up; an IPv4-mapped address is looked up as IPv4. An
// address not in the table is ErrUnreachable.
func (s Static) Resolve(_ time.Time, ip netip.Addr) ([6]byte, error) {
	mac, ok := s[ip.Unmap()]
	if !ok {
		return mac, ErrUnreachable
	}
	return mac, nil
}
