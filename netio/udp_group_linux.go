package netio

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"
)

// UDPGroup receives the datagrams a UDP endpoint's port gets from one IPv4
// multicast group: a RoCE device's member socket for a group its QPs are
// attached to (what rxe does with IGMP on its netdev: cma.c
// cma_iboe_join_multicast calls cma_igmp_send for a RoCEv2 IPv4 group).
//
// Why a socket of its own: Linux delivers a multicast datagram only to
// sockets bound to the group address or the wildcard (udp.c
// __udp_is_mcast_sock compares the bound address with the destination), and
// the endpoint's socket is bound to the device's own address. The member
// socket is bound to group:port with SO_REUSEADDR, so that every device on
// the host (several processes on 127.0.0.x, say) can have one, and joins
// with IP_ADD_MEMBERSHIP on the interface of the endpoint's address. The
// endpoint's send sockets leave IP_MULTICAST_LOOP at the kernel's default
// (on): a group's members on the same host get its datagrams.
//
// Multicast is not the hot path: datagrams are read one per system call,
// without GRO.
type UDPGroup struct {
	conn  *net.UDPConn
	group netip.AddrPort
	buf   []byte
	oob   []byte
}

// JoinGroup opens the member socket of group, an IPv4 multicast address,
// on the endpoint's port, in the endpoint's network namespace. Closing the
// UDPGroup leaves the group. IPv6 groups are not supported (nor are they
// by the kernel's rdma_cm over RoCEv2: cma_iboe_join_multicast returns
// -ENOTSUPP).
func (e *UDPEndpoint) JoinGroup(group netip.Addr) (*UDPGroup, error) {
	group = group.Unmap()
	switch {
	case !group.IsMulticast():
		return nil, fmt.Errorf("netio: udp: join %v: not a multicast address: %w", group, unix.EINVAL)
	case !group.Is4() || e.is6:
		return nil, fmt.Errorf("netio: udp: join %v: IPv6 multicast groups: %w", group, errors.ErrUnsupported)
	}
	ifaddr := [4]byte{}
	if !e.wildcard {
		ifaddr = e.local.Addr().As4()
	}
	g := &UDPGroup{group: netip.AddrPortFrom(group, e.local.Port()), buf: make([]byte, 65536), oob: make([]byte, udpOOBLen)}
	// Not net.ListenPacket: for a multicast address Go binds the wildcard
	// (net/sock_posix.go listenDatagram), which would collide with the
	// endpoints bound to the same port on the host's own addresses.
	err := e.netns.do(func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.IPPROTO_UDP)
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(fd), "udp-group-"+group.String())
		defer f.Close() // FilePacketConn dups it
		for _, o := range []struct{ level, name int }{
			{unix.SOL_SOCKET, unix.SO_REUSEADDR},
			{unix.IPPROTO_IP, unix.IP_PKTINFO},
			{unix.IPPROTO_IP, unix.IP_RECVTTL},
			{unix.IPPROTO_IP, unix.IP_RECVTOS},
		} {
			if err := unix.SetsockoptInt(fd, o.level, o.name, 1); err != nil {
				return fmt.Errorf("setsockopt(%d, %d): %w", o.level, o.name, err)
			}
		}
		if e.bufSize > 0 {
			setSocketBuffer(fd, unix.SO_RCVBUF, unix.SO_RCVBUFFORCE, e.bufSize)
		}
		if err := unix.Bind(fd, &unix.SockaddrInet4{Port: int(g.group.Port()), Addr: group.As4()}); err != nil {
			return fmt.Errorf("bind %v: %w", g.group, err)
		}
		if err := unix.SetsockoptIPMreq(fd, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP,
			&unix.IPMreq{Multiaddr: group.As4(), Interface: ifaddr}); err != nil {
			return fmt.Errorf("IP_ADD_MEMBERSHIP %v on %v: %w", group, netip.AddrFrom4(ifaddr), err)
		}
		pc, err := net.FilePacketConn(f)
		if err != nil {
			return err
		}
		g.conn = pc.(*net.UDPConn)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("netio: udp: join %v: %w", group, err)
	}
	return g, nil
}

// Group returns the group and port the socket receives on.
func (g *UDPGroup) Group() netip.AddrPort { return g.group }

// ReadDatagram blocks until a datagram arrives and returns it; its Payload
// stays valid until the next ReadDatagram. Dst is the group. After Close it
// returns net.ErrClosed.
func (g *UDPGroup) ReadDatagram() (Datagram, error) {
	n, oobn, _, src, err := g.conn.ReadMsgUDPAddrPort(g.buf, g.oob)
	if err != nil {
		return Datagram{}, err
	}
	var m rxMeta
	parseRxControl(g.oob[:oobn], &m)
	return Datagram{Payload: g.buf[:n:n], Src: netip.AddrPortFrom(src.Addr().Unmap(), src.Port()), Dst: g.group, TOS: m.tos, TTL: m.ttl}, nil
}

// Close leaves the group (the kernel drops a socket's memberships when it
// closes) and makes a blocked ReadDatagram return net.ErrClosed.
func (g *UDPGroup) Close() error { return g.conn.Close() }
