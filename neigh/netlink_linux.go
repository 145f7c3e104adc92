//go:build linux

package neigh

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Netlink is a small route netlink client: one request at a time (serialised
// by mu), each answered by its acknowledgement, one reply or a dump. The
// socket belongs to the network namespace it was opened in, whichever thread
// uses it later, and sits in Go's poller so that Close wakes a waiting
// request.
type Netlink struct {
	mu   sync.Mutex
	file *os.File
	rc   syscall.RawConn
	seq  uint32
	buf  []byte
}

// rtnlTimeout bounds the wait for the kernel's answer to one request.
const rtnlTimeout = 5 * time.Second

// DialNetlink opens a route netlink socket in the calling thread's network namespace.
func DialNetlink() (*Netlink, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("neigh: netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("neigh: netlink bind: %w", err)
	}
	// Errors in answers to requests with NLM_F_ACK come without the request
	// echoed (they would not fit the buffer for a long one).
	unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_CAP_ACK, 1)
	f := os.NewFile(uintptr(fd), "netlink-route")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &Netlink{file: f, rc: rc, buf: make([]byte, 1<<16)}, nil
}

// Close closes the socket; a request under way fails.
func (r *Netlink) Close() error { return r.file.Close() }

// nlMessage is one netlink message of an answer: its type and payload.
type nlMessage struct {
	typ  uint16
	data []byte
}

// request sends a message of type typ with body, and returns the messages
// answering it (for a dump, all of them; else the one reply, if any) once the
// kernel has finished: NLMSG_DONE, or the acknowledgement. A negative
// acknowledgement is returned as its unix.Errno.
func (r *Netlink) request(typ, flags uint16, body []byte) ([]nlMessage, error) {
	// NLM_F_DUMP is two bits, one of which NLM_F_REPLACE shares.
	dump := flags&unix.NLM_F_DUMP == unix.NLM_F_DUMP
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	seq := r.seq
	ne := binary.NativeEndian
	msg := make([]byte, unix.SizeofNlMsghdr, unix.SizeofNlMsghdr+len(body))
	msg = append(msg, body...)
	ne.PutUint32(msg[0:], uint32(len(msg)))
	ne.PutUint16(msg[4:], typ)
	ne.PutUint16(msg[6:], flags|unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	ne.PutUint32(msg[8:], seq)
	var serr error
	err := r.rc.Write(func(fd uintptr) bool {
		serr = unix.Sendto(int(fd), msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
		return serr != unix.EAGAIN
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return nil, fmt.Errorf("neigh: netlink send: %w", err)
	}
	r.file.SetReadDeadline(time.Now().Add(rtnlTimeout))
	var out []nlMessage
	for {
		var n int
		var rerr error
		err := r.rc.Read(func(fd uintptr) bool {
			n, _, rerr = unix.Recvfrom(int(fd), r.buf, 0)
			return rerr != unix.EAGAIN
		})
		if err == nil {
			err = rerr
		}
		if err != nil {
			return nil, fmt.Errorf("neigh: netlink receive: %w", err)
		}
		for b := r.buf[:n]; len(b) >= unix.SizeofNlMsghdr; {
			l := int(ne.Uint32(b[0:]))
			if l < unix.SizeofNlMsghdr || l > len(b) {
				return nil, fmt.Errorf("neigh: netlink: message length %d > %d left", l, len(b))
			}
			mtyp, mseq := ne.Uint16(b[4:]), ne.Uint32(b[8:])
			data := b[unix.SizeofNlMsghdr:l]
			b = b[min(nlAlign(l), len(b)):]
			if mseq != seq {
				continue // a late answer to an earlier request
			}
			switch mtyp {
			case unix.NLMSG_DONE:
				return out, nil
			case unix.NLMSG_ERROR:
				if len(data) < 4 {
					return nil, errors.New("neigh: netlink: short error message")
				}
				if code := int32(ne.Uint32(data)); code != 0 {
					return out, unix.Errno(-code)
				}
				if !dump {
					return out, nil
				}
			default:
				out = append(out, nlMessage{typ: mtyp, data: append([]byte(nil), data...)})
			}
		}
	}
}

func nlAlign(n int) int { return (n + 3) &^ 3 }

// nlAttrs calls f for each route attribute in b.
func nlAttrs(b []byte, f func(typ uint16, data []byte)) {
	ne := binary.NativeEndian
	for len(b) >= 4 {
		l := int(ne.Uint16(b[0:]))
		if l < 4 || l > len(b) {
			return
		}
		f(ne.Uint16(b[2:])&^unix.NLA_F_NESTED, b[4:l])
		b = b[min(nlAlign(l), len(b)):]
	}
}

// appendAttr appends a route attribute.
func appendAttr(b []byte, typ uint16, data []byte) []byte {
	b = binary.NativeEndian.AppendUint16(b, uint16(4+len(data)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func family(a netip.Addr) byte {
	if a.Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

// InterfaceAddrs returns the IPv4 and the IPv6 addresses of the interface,
// each in the kernel's list order (RTM_GETADDR dumps in_dev->ifa_list and
// inet6_dev->addr_list as they are, the lists roce_gid_mgmt.c walks).
func (r *Netlink) InterfaceAddrs(index int) (v4, v6 []netip.Addr, err error) {
	for _, fam := range []byte{unix.AF_INET, unix.AF_INET6} {
		body := make([]byte, unix.SizeofIfAddrmsg)
		body[0] = fam
		msgs, err := r.request(unix.RTM_GETADDR, unix.NLM_F_DUMP, body)
		if err != nil {
			return nil, nil, fmt.Errorf("neigh: RTM_GETADDR: %w", err)
		}
		for _, m := range msgs {
			if m.typ != unix.RTM_NEWADDR || len(m.data) < unix.SizeofIfAddrmsg ||
				int(binary.NativeEndian.Uint32(m.data[4:])) != index || m.data[0] != fam {
				continue
			}
			var local, addr netip.Addr
			nlAttrs(m.data[unix.SizeofIfAddrmsg:], func(typ uint16, d []byte) {
				a, ok := netip.AddrFromSlice(d)
				switch {
				case !ok:
				case typ == unix.IFA_LOCAL:
					local = a
				case typ == unix.IFA_ADDRESS:
					addr = a
				}
			})
			if local.IsValid() {
				addr = local // differs from IFA_ADDRESS on point-to-point links only
			}
			switch {
			case !addr.IsValid():
			case fam == unix.AF_INET:
				v4 = append(v4, addr.Unmap())
			default:
				v6 = append(v6, addr)
			}
		}
	}
	return v4, v6, nil
}

// route is the answer to a route lookup.
type route struct {
	gateway netip.Addr // next hop, if not on-link
	oif     int        // output interface
	typ     uint8      // RTN_UNICAST, RTN_LOCAL, ...
}

// getRoute asks the kernel how it would send to dst out of interface oif
// (RTM_GETROUTE, as `ip route get DST oif IF`).
func (r *Netlink) getRoute(dst netip.Addr, oif int) (route, error) {
	body := make([]byte, 12) // struct rtmsg
	body[0] = family(dst)
	body[1] = byte(dst.BitLen())
	body = appendAttr(body, unix.RTA_DST, dst.AsSlice())
	body = appendAttr(body, unix.RTA_OIF, binary.NativeEndian.AppendUint32(nil, uint32(oif)))
	msgs, err := r.request(unix.RTM_GETROUTE, 0, body)
	if err != nil {
		return route{}, err
	}
	for _, m := range msgs {
		if m.typ != unix.RTM_NEWROUTE || len(m.data) < 12 {
			continue
		}
		rt := route{typ: m.data[7]}
		nlAttrs(m.data[12:], func(typ uint16, d []byte) {
			switch typ {
			case unix.RTA_GATEWAY:
				if a, ok := netip.AddrFromSlice(d); ok {
					rt.gateway = a.Unmap()
				}
			case unix.RTA_OIF:
				if len(d) == 4 {
					rt.oif = int(binary.NativeEndian.Uint32(d))
				}
			}
		})
		return rt, nil
	}
	return route{}, errors.New("neigh: RTM_GETROUTE: no route in the answer")
}

// Neighbour states (NUD_* of include/uapi/linux/neighbour.h) and flags.
const (
	nudIncomplete = 0x01
	nudReachable  = 0x02
	nudStale      = 0x04
	nudDelay      = 0x08
	nudProbe      = 0x10
	nudFailed     = 0x20
	nudNoARP      = 0x40
	nudPermanent  = 0x80
	// NUDValid is the mask of usable neighbour states (Neighbor's state).
	NUDValid = nudReachable | nudStale | nudDelay | nudProbe | nudNoARP | nudPermanent

	ntfUse = 0x01 // NTF_USE: "use" the entry, making the kernel resolve it

	ndaDst    = 1 // NDA_DST
	ndaLLAddr = 2 // NDA_LLADDR
	ndmsgLen  = 12
)

func ndmsg(ip netip.Addr, index int, state uint16, flags uint8) []byte {
	b := make([]byte, ndmsgLen)
	b[0] = family(ip)
	binary.NativeEndian.PutUint32(b[4:], uint32(int32(index)))
	binary.NativeEndian.PutUint16(b[8:], state)
	b[10] = flags
	return appendAttr(b, ndaDst, ip.AsSlice())
}

// Neighbor returns the kernel's neighbour entry for ip on the interface:
// its state and link-layer address. No entry is state 0.
func (r *Netlink) Neighbor(ip netip.Addr, index int) (state uint16, mac [6]byte, err error) {
	msgs, err := r.request(unix.RTM_GETNEIGH, 0, ndmsg(ip, index, 0, 0))
	if errors.Is(err, unix.ENOENT) {
		return 0, mac, nil
	}
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) {
		// Kernels before 4.20 answer only dumps.
		body := make([]byte, ndmsgLen)
		body[0] = family(ip)
		msgs, err = r.request(unix.RTM_GETNEIGH, unix.NLM_F_DUMP, body)
	}
	if err != nil {
		return 0, mac, fmt.Errorf("neigh: RTM_GETNEIGH %v: %w", ip, err)
	}
	for _, m := range msgs {
		if m.typ != unix.RTM_NEWNEIGH || len(m.data) < ndmsgLen || int(int32(binary.NativeEndian.Uint32(m.data[4:]))) != index {
			continue
		}
		var dst netip.Addr
		var ll []byte
		nlAttrs(m.data[ndmsgLen:], func(typ uint16, d []byte) {
			switch typ {
			case ndaDst:
				dst, _ = netip.AddrFromSlice(d)
			case ndaLLAddr:
				ll = d
			}
		})
		if dst.Unmap() != ip {
			continue
		}
		state = binary.NativeEndian.Uint16(m.data[8:])
		if len(ll) == 6 {
			mac = [6]byte(ll)
		} else if state&NUDValid != 0 && state&nudNoARP == 0 {
			state = nudIncomplete // valid without an address: not usable
		}
		return state, mac, nil
	}
	return 0, mac, nil
}

// UseNeighbor tells the kernel the entry for ip is in use (RTM_NEWNEIGH with
// NTF_USE), creating it if need be: the kernel then resolves it (ARP or NDP)
// as if it had a packet to send, or confirms a stale entry.
func (r *Netlink) UseNeighbor(ip netip.Addr, index int) error {
	_, err := r.request(unix.RTM_NEWNEIGH, unix.NLM_F_CREATE|unix.NLM_F_REPLACE, ndmsg(ip, index, 0, ntfUse))
	if err != nil {
		return fmt.Errorf("neigh: RTM_NEWNEIGH %v NTF_USE: %w", ip, err)
	}
	return nil
}

// AddAddress assigns p to the interface (RTM_NEWADDR); IPv6 addresses skip
// duplicate address detection.
func (r *Netlink) AddAddress(index int, p netip.Prefix) error {
	addr := p.Addr().Unmap()
	b := make([]byte, unix.SizeofIfAddrmsg)
	b[0] = family(addr)
	b[1] = byte(p.Bits())
	if addr.Is6() {
		b[2] = unix.IFA_F_NODAD
	}
	b[3] = unix.RT_SCOPE_UNIVERSE
	if addr.Is6() && addr.IsLinkLocalUnicast() {
		b[3] = unix.RT_SCOPE_LINK
	}
	binary.NativeEndian.PutUint32(b[4:], uint32(index))
	b = appendAttr(b, unix.IFA_LOCAL, addr.AsSlice())
	b = appendAttr(b, unix.IFA_ADDRESS, addr.AsSlice())
	_, err := r.request(unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_REPLACE, b)
	if err != nil {
		return fmt.Errorf("neigh: adding %v: %w", p, err)
	}
	return nil
}

// Timing of Kernel.
const (
	// KernelTTL is how long a resolved address is used before the
	// kernel's entry is read again (the kernel's base_reachable_time).
	KernelTTL = 30 * time.Second
	// KernelFailedTTL is how long an address that did not resolve
	// is reported unreachable before it is tried again.
	KernelFailedTTL = time.Second
	// KernelWait bounds one resolution: the kernel's three probes
	// one second apart, and a little.
	KernelWait = 3500 * time.Millisecond
	// maxKernelResolutions bounds the resolutions under way at once.
	maxKernelResolutions = 16
)

// KernelStats counts what a Kernel did.
type KernelStats struct {
	Lookups    uint64 // RTM_GETNEIGH requests
	Uses       uint64 // RTM_NEWNEIGH NTF_USE requests: resolutions the kernel was asked for
	Routes     uint64 // RTM_GETROUTE requests
	ViaGateway uint64 // resolutions whose next hop was a gateway
	Resolved   uint64 // resolutions that found a MAC
	Failed     uint64 // resolutions that did not
	LastError  string // the last netlink error, if any
}

type kernelNeighbor struct {
	mac      [6]byte
	ok       bool      // mac is usable
	until    time.Time // ok: read the kernel's entry again after; !ok: unreachable until
	resolved bool      // the entry has been resolved at least once (ok or failed)
	busy     bool      // a resolution is under way
}

// Kernel resolves next hops through the kernel of the network
// namespace it was made in, as a raw (AF_PACKET) device needs: a route lookup
// (RTM_GETROUTE out of the interface) picks the gateway when the destination
// is not on the link; the kernel's neighbour table (RTM_GETNEIGH) gives the
// gateway's or destination's MAC; an address it lacks is resolved by the
// kernel itself, asked with RTM_NEWNEIGH and NTF_USE to send its ARP request
// or neighbor solicitation, and the table is read again (every few
// milliseconds, for up to KernelWait) until the entry is usable or
// failed. A stale entry is used and the kernel asked to confirm it.
//
// Resolve never blocks: lookups run on goroutines (at most 16 at once) and
// results are cached for KernelTTL (KernelFailedTTL for
// failures), DefaultMaxNeighbors entries at most; Wake signals the device
// when one ends. Time is the system's:
// the now passed to Resolve is not used.
type Kernel struct {
	nl      *Netlink
	ifindex int
	ifname  string

	mu     sync.Mutex
	cache  map[netip.Addr]*kernelNeighbor
	busy   int
	stats  KernelStats
	closed bool
	wg     sync.WaitGroup
	done   chan struct{}
	wake   chan struct{}
}

var (
	_ Resolver = (*Kernel)(nil)
	_ Waker    = (*Kernel)(nil)
)

// NewKernel returns neighbour resolution for the named interface,
// through a netlink socket opened in the calling thread's network namespace.
func NewKernel(ifname string) (*Kernel, error) {
	ifi, err := net.InterfaceByName(ifname)
	if err != nil {
		return nil, fmt.Errorf("neigh: %w", err)
	}
	nl, err := DialNetlink()
	if err != nil {
		return nil, err
	}
	return NewKernelOn(nl, ifi), nil
}

// NewKernelOn is NewKernel over an open netlink socket, which the Kernel
// takes over (its Close closes it), for interface ifi.
func NewKernelOn(nl *Netlink, ifi *net.Interface) *Kernel {
	return &Kernel{
		nl: nl, ifindex: ifi.Index, ifname: ifi.Name,
		cache: make(map[netip.Addr]*kernelNeighbor),
		done:  make(chan struct{}), wake: make(chan struct{}, 1),
	}
}

// Wake returns a channel that receives a value when a resolution ends.
func (k *Kernel) Wake() <-chan struct{} { return k.wake }

// Stats returns a snapshot of the counters.
func (k *Kernel) Stats() KernelStats {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.stats
}

// Close stops the resolutions under way, waits for them and closes the
// netlink socket. Resolve reports ErrUnreachable afterwards.
func (k *Kernel) Close() error {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return nil
	}
	k.closed = true
	close(k.done)
	k.mu.Unlock()
	err := k.nl.Close() // fails a request under way
	k.wg.Wait()
	return err
}

// Resolve returns ip's next-hop MAC if known; otherwise it starts resolving
// it and returns ErrPending. See Kernel.
func (k *Kernel) Resolve(_ time.Time, ip netip.Addr) ([6]byte, error) {
	ip = ip.Unmap()
	now := time.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return [6]byte{}, ErrUnreachable
	}
	e := k.cache[ip]
	if e == nil {
		if len(k.cache) >= DefaultMaxNeighbors {
			k.sweepLocked(now)
		}
		e = &kernelNeighbor{}
		k.cache[ip] = e
	}
	expired := !now.Before(e.until)
	if expired && !e.busy && k.busy < maxKernelResolutions {
		e.busy = true
		k.busy++
		k.wg.Add(1)
		go k.resolve(ip, e)
	}
	switch {
	case e.ok:
		return e.mac, nil // while being confirmed, too
	case e.resolved && !expired:
		return [6]byte{}, ErrUnreachable
	}
	return [6]byte{}, ErrPending
}

// sweepLocked forgets the entries not being resolved whose time is up, and if
// that frees nothing, any entry not being resolved: the cache stays bounded.
func (k *Kernel) sweepLocked(now time.Time) {
	for ip, e := range k.cache {
		if !e.busy && !now.Before(e.until) {
			delete(k.cache, ip)
		}
	}
	for ip, e := range k.cache {
		if len(k.cache) < DefaultMaxNeighbors {
			return
		}
		if !e.busy {
			delete(k.cache, ip)
		}
	}
}

// resolve finds ip's next hop and its MAC, and records the result in e.
func (k *Kernel) resolve(ip netip.Addr, e *kernelNeighbor) {
	defer k.wg.Done()
	mac, err := k.lookup(ip)
	k.mu.Lock()
	e.busy = false
	k.busy--
	e.resolved = true
	if err == nil {
		e.mac, e.ok = mac, true
		e.until = time.Now().Add(KernelTTL)
		k.stats.Resolved++
	} else {
		e.ok = false
		e.until = time.Now().Add(KernelFailedTTL)
		k.stats.Failed++
		if !errors.Is(err, ErrUnreachable) {
			k.stats.LastError = err.Error()
		}
	}
	k.mu.Unlock()
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

func (k *Kernel) count(c *uint64) {
	k.mu.Lock()
	*c++
	k.mu.Unlock()
}

// lookup does the netlink work of one resolution.
func (k *Kernel) lookup(ip netip.Addr) ([6]byte, error) {
	nextHop := ip
	k.count(&k.stats.Routes)
	rt, err := k.nl.getRoute(ip, k.ifindex)
	switch {
	case err != nil:
		return [6]byte{}, fmt.Errorf("%w: %v: %w", ErrUnreachable, ip, err)
	case rt.typ != unix.RTN_UNICAST:
		// Local, broadcast, unreachable...: nothing to send a frame to.
		return [6]byte{}, fmt.Errorf("%w: %v: route type %d", ErrUnreachable, ip, rt.typ)
	case rt.gateway.IsValid() && rt.oif == k.ifindex:
		nextHop = rt.gateway
		k.count(&k.stats.ViaGateway)
	}
	deadline := time.Now().Add(KernelWait)
	asked := false
	wait := time.Millisecond
	for {
		k.count(&k.stats.Lookups)
		state, mac, err := k.nl.Neighbor(nextHop, k.ifindex)
		if err != nil {
			return [6]byte{}, err
		}
		usable := state&NUDValid != 0
		switch {
		case usable && state&nudStale != 0 && !asked:
			// Usable, but confirm it: the kernel sees none of our
			// traffic, so the entry only ages.
			k.count(&k.stats.Uses)
			if err := k.nl.UseNeighbor(nextHop, k.ifindex); err != nil {
				return [6]byte{}, err
			}
			return mac, nil
		case usable:
			return mac, nil
		case state&nudFailed != 0 && asked:
			return [6]byte{}, fmt.Errorf("%w: %v: the kernel's resolution failed", ErrUnreachable, nextHop)
		case !asked || state == 0:
			// No entry, or a failed or stale one from before: ask the
			// kernel to resolve it now.
			k.count(&k.stats.Uses)
			if err := k.nl.UseNeighbor(nextHop, k.ifindex); err != nil {
				return [6]byte{}, err
			}
			asked = true
		}
		if time.Now().After(deadline) {
			return [6]byte{}, fmt.Errorf("%w: %v: no answer in %v", ErrUnreachable, nextHop, KernelWait)
		}
		select {
		case <-k.done:
			return [6]byte{}, ErrUnreachable
		case <-time.After(wait):
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}

func ifinfomsg(index int, flags, change uint32) []byte {
	b := make([]byte, unix.SizeofIfInfomsg)
	binary.NativeEndian.PutUint32(b[4:], uint32(int32(index)))
	binary.NativeEndian.PutUint32(b[8:], flags)
	binary.NativeEndian.PutUint32(b[12:], change)
	return b
}

// AddBridge creates a bridge (for building test topologies) without STP and with no forwarding delay, so
// that ports forward as soon as they are up.
func (r *Netlink) AddBridge(name string) error {
	const iflaBrForwardDelay = 1 // IFLA_BR_FORWARD_DELAY
	b := ifinfomsg(0, 0, 0)
	b = appendAttr(b, unix.IFLA_IFNAME, append([]byte(name), 0))
	info := appendAttr(nil, unix.IFLA_INFO_KIND, []byte("bridge"))
	info = appendAttr(info, unix.IFLA_INFO_DATA, appendAttr(nil, iflaBrForwardDelay, binary.NativeEndian.AppendUint32(nil, 0)))
	b = appendAttr(b, unix.IFLA_LINKINFO, info)
	_, err := r.request(unix.RTM_NEWLINK, unix.NLM_F_CREATE|unix.NLM_F_EXCL, b)
	return err
}

// SetMaster enslaves interface index to master (a bridge).
func (r *Netlink) SetMaster(index, master int) error {
	b := appendAttr(ifinfomsg(index, 0, 0), unix.IFLA_MASTER, binary.NativeEndian.AppendUint32(nil, uint32(master)))
	_, err := r.request(unix.RTM_NEWLINK, 0, b)
	return err
}

// SetUp brings interface index up.
func (r *Netlink) SetUp(index int) error {
	_, err := r.request(unix.RTM_NEWLINK, 0, ifinfomsg(index, unix.IFF_UP, unix.IFF_UP))
	return err
}
