//go:build linux

package netns

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultPrefix starts the name of every namespace New creates when given
// no prefix.
const DefaultPrefix = "softrdma-"

// MountEnv is the environment variable that, set to "1", makes New also
// bind-mount each namespace at /run/netns/NAME (see the package comment).
const MountEnv = "SOFTRDMA_NETNS_MOUNT"

// netnsRunDir is where iproute2 keeps named namespaces.
const netnsRunDir = "/run/netns"

// Check reports whether the process may create network namespaces: it runs
// as root and unshare(CLONE_NEWNET) works. The answer is computed once.
func Check() error {
	probeOnce.Do(func() {
		if os.Geteuid() != 0 {
			probeErr = errors.New("not running as root")
			return
		}
		ns, err := create("")
		if err != nil {
			probeErr = err
			return
		}
		ns.Close()
	})
	return probeErr
}

var (
	probeOnce sync.Once
	probeErr  error
)

// NS is a network namespace made by New. Its methods are safe for
// concurrent use.
type NS struct {
	name  string
	file  *os.File // the namespace itself (nsfs), open for as long as NS lives
	mount string   // bind mount path under /run/netns, or ""

	closeOnce sync.Once
}

// New creates a fresh, empty network namespace named prefix (DefaultPrefix
// if empty) followed by random hex digits, with its loopback interface up
// and IPv6 duplicate address detection off. Close it to let it go.
func New(prefix string) (*NS, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	name := prefix + randomHex(4)
	ns, err := create(name)
	if err != nil {
		return nil, fmt.Errorf("netns: creating namespace %s: %w", name, err)
	}
	if err := ns.Do(quietIPv6); err != nil {
		ns.Close()
		return nil, fmt.Errorf("netns: %s: %w", name, err)
	}
	if err := ns.LinkUp("lo"); err != nil {
		ns.Close()
		return nil, fmt.Errorf("netns: %s: bringing lo up: %w", name, err)
	}
	return ns, nil
}

// quietIPv6 turns off, for interfaces created later in the calling thread's
// namespace, IPv6 duplicate address detection (so link-local addresses are
// usable at once and the first neighbour solicitation is not lost) and
// router solicitations (less traffic for tests to ignore).
func quietIPv6() error {
	for _, kv := range [][2]string{
		{"default/accept_dad", "0"},
		{"all/accept_dad", "0"},
		{"default/router_solicitations", "0"},
	} {
		path := "/proc/sys/net/ipv6/conf/" + kv[0]
		if err := os.WriteFile(path, []byte(kv[1]), 0o644); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	return nil
}

// create makes a namespace on a dedicated OS thread (see onThread).
func create(name string) (*NS, error) {
	var ns *NS
	err := onThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare(CLONE_NEWNET): %w", err)
		}
		return nil
	}, func() error {
		self := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		f, err := os.Open(self)
		if err != nil {
			return err
		}
		n := &NS{name: name, file: f}
		if name != "" && os.Getenv(MountEnv) == "1" {
			if err := n.bindMount(self); err != nil {
				f.Close()
				return err
			}
		}
		ns = n
		return nil
	})
	return ns, err
}

// onThread runs enter, which moves the calling OS thread into a namespace,
// then f, on a new goroutine locked to its thread, and moves the thread back
// into the namespace it started in before the goroutine ends. The thread is
// never unlocked, so the Go runtime terminates it instead of reusing a
// thread whose state f may have changed. The main thread is the exception:
// the runtime parks it for good instead, and the process's own /proc/net,
// /proc/self/net and the namespace of children forked from it are the main
// thread's; moving it back keeps them the process's namespace.
func onThread(enter, f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: see above
		home, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			done <- fmt.Errorf("netns: opening this thread's namespace: %w", err)
			return
		}
		defer home.Close()
		if err := enter(); err != nil {
			done <- err
			return
		}
		err = f()
		if e := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); e != nil && err == nil {
			err = fmt.Errorf("netns: setns back into the thread's own namespace: %w", e)
		}
		done <- err
	}()
	return <-done
}

// bindMount makes the namespace visible to `ip netns` as ns.name.
func (ns *NS) bindMount(self string) error {
	if err := os.MkdirAll(netnsRunDir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(netnsRunDir, ns.name)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return err
	}
	f.Close()
	if err := unix.Mount(self, path, "none", unix.MS_BIND, ""); err != nil {
		os.Remove(path)
		return fmt.Errorf("bind-mounting %s on %s: %w", self, path, err)
	}
	ns.mount = path
	return nil
}

// Current returns the namespace this process runs in, as an NS whose Do runs
// f directly (no thread switch, so no privilege needed) and whose Close does
// nothing: code written for namespaces that New made can then run on this
// host's own addresses instead (softrdma bench --addrs).
func Current() *NS { return &NS{name: "(this namespace)"} }

// Name returns the namespace's name, NamePrefix followed by random digits.
func (ns *NS) Name() string { return ns.name }

// Close drops this process's handle on the namespace (and its bind mount,
// if any). The kernel destroys the namespace, with the virtual interfaces
// in it, once no socket or process refers to it any more. Close is
// idempotent.
func (ns *NS) Close() error {
	var err error
	ns.closeOnce.Do(func() {
		if ns.mount != "" {
			if e := unix.Unmount(ns.mount, unix.MNT_DETACH); e != nil {
				err = fmt.Errorf("netns: unmounting %s: %w", ns.mount, e)
			}
			os.Remove(ns.mount)
		}
		if ns.file == nil {
			return // Current's
		}
		if e := ns.file.Close(); e != nil && err == nil {
			err = e
		}
	})
	return err
}

// Do runs f on an OS thread switched into the namespace and returns f's
// error. Sockets, TAP devices and netlink sockets that f creates belong to
// the namespace for their whole life, wherever they are used afterwards;
// goroutines that f starts do not run in the namespace. The thread is
// discarded afterwards, never returned to the Go scheduler (see onThread).
func (ns *NS) Do(f func() error) error {
	if ns.file == nil {
		return f() // Current's: already in it
	}
	return onThread(func() error {
		if err := unix.Setns(int(ns.file.Fd()), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("netns: setns into %s: %w", ns.name, err)
		}
		return nil
	}, f)
}

// Fataler is the part of testing.TB that MustDo uses.
type Fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

// MustDo is Do that fails the test (or other Fataler) if f returns an error.
func (ns *NS) MustDo(tb Fataler, f func() error) {
	tb.Helper()
	if err := ns.Do(f); err != nil {
		tb.Fatalf("netns: in %s: %v", ns.name, err)
	}
}

// LinkUp sets the interface called name inside the namespace up.
func (ns *NS) LinkUp(name string) error {
	return ns.withRTNL(func(r *rtnl) error {
		idx, err := interfaceIndex(name)
		if err != nil {
			return err
		}
		return r.setLink(idx, unix.IFF_UP, 0)
	})
}

// SetMTU sets the MTU of the interface called name inside the namespace.
func (ns *NS) SetMTU(name string, mtu int) error {
	return ns.withRTNL(func(r *rtnl) error {
		idx, err := interfaceIndex(name)
		if err != nil {
			return err
		}
		return r.setLink(idx, 0, mtu)
	})
}

// AddAddress assigns p (for example 10.99.1.1/24 or fd99::1/64) to the
// interface called name inside the namespace. IPv6 addresses skip duplicate
// address detection, so they can be bound at once.
func (ns *NS) AddAddress(name string, p netip.Prefix) error {
	return ns.withRTNL(func(r *rtnl) error {
		idx, err := interfaceIndex(name)
		if err != nil {
			return err
		}
		return r.addAddress(idx, p)
	})
}

// AddNeighbor adds a permanent neighbour (ARP or NDP) entry mapping ip to
// mac on the interface called name inside the namespace, so that the
// kernel sends to ip without resolving it first.
func (ns *NS) AddNeighbor(name string, ip netip.Addr, mac net.HardwareAddr) error {
	return ns.withRTNL(func(r *rtnl) error {
		idx, err := interfaceIndex(name)
		if err != nil {
			return err
		}
		return r.addNeighbor(idx, ip, mac)
	})
}

// WaitRunning waits until the interface called name inside the namespace
// is running (IFF_RUNNING) and its operational state is up (IF_OPER_UP), or
// unknown with its carrier never changed (a TAP with its reader, lo).
// The kernel handles carrier changes asynchronously (linkwatch), up to a
// second later, and IFF_RUNNING comes before that work has run: until it
// has, the device's queue is the noop one, which drops every frame sent
// (tests that sent their frames once then read nothing, under load). The
// operational state is set by the same work, just before the queue is
// attached.
func (ns *NS) WaitRunning(name string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ifi, err := ns.Interface(name)
		if err != nil {
			return err
		}
		var oper byte
		var changes uint32
		if ifi.Flags&net.FlagRunning != 0 {
			if err := ns.Do(func() error {
				r, err := dialRTNL()
				if err != nil {
					return err
				}
				defer r.close()
				oper, changes, err = r.linkState(ifi.Index)
				return err
			}); err != nil {
				return err
			}
			// A TAP up with its reader attached (like lo) never changed
			// its carrier: no linkwatch work is due, its queue was attached
			// when it came up, and its state stays IF_OPER_UNKNOWN. A veth's
			// carrier goes off when it is made (counted at once), so an
			// UNKNOWN veth is one whose linkwatch work has not run yet.
			if oper == ifOperUp || oper == ifOperUnknown && changes == 0 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %s not running after %v (flags %v, operational state %d)", ns.name, name, timeout, ifi.Flags, oper)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// IF_OPER_UNKNOWN and IF_OPER_UP from linux/if.h (RFC 2863 operational state).
const (
	ifOperUnknown = 0
	ifOperUp      = 6
)

// Interface looks up the interface called name inside the namespace.
func (ns *NS) Interface(name string) (*net.Interface, error) {
	var ifi *net.Interface
	err := ns.Do(func() error {
		var err error
		ifi, err = net.InterfaceByName(name)
		return err
	})
	return ifi, err
}

// withRTNL runs f with a route netlink socket opened inside the namespace.
// Every caller changes the namespace, which Current's refuses: the host's
// own interfaces are not ours to configure.
func (ns *NS) withRTNL(f func(*rtnl) error) error {
	if ns.file == nil {
		return fmt.Errorf("netns: %s: will not change the interfaces of this process's own namespace", ns.name)
	}
	return ns.Do(func() error {
		r, err := dialRTNL()
		if err != nil {
			return err
		}
		defer r.close()
		return f(r)
	})
}

// interfaceIndex returns the index of the named interface in the calling
// thread's namespace.
func interfaceIndex(name string) (int, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return 0, err
	}
	return ifi.Index, nil
}

// Side is one end of a Pair: a namespace and the veth interface in it.
type Side struct {
	NS    *NS
	Link  string           // interface name inside NS
	Index int              // interface index inside NS
	MAC   net.HardwareAddr // the interface's Ethernet address
	IPv4  netip.Prefix     // IPv4 address and prefix, e.g. 10.99.7.1/24
	IPv6  netip.Prefix     // IPv6 address and prefix, e.g. fd99:0:0:7::1/64
	MTU   int              // the interface MTU
}

// Pair is two namespaces joined by a veth pair, each end up and addressed.
type Pair struct {
	A, B Side
}

// PairConfig tunes NewPair. The zero value is valid.
type PairConfig struct {
	// MTU of both veth ends; 0 keeps the kernel default (1500).
	MTU int
	// Prefix starts the namespaces' names (default DefaultPrefix).
	Prefix string
}

// Veth interface names in the two namespaces of a Pair.
const (
	LinkA = "veth0"
	LinkB = "veth1"
)

// NewPair creates two namespaces (see New) joined by a veth pair: LinkA in
// A with 10.99.X.1/24 and fd99:0:0:X::1/64, LinkB in B with 10.99.X.2/24 and
// fd99:0:0:X::2/64, X random, both links up. It returns once both links are
// running. Close the pair to remove everything.
func NewPair(cfg PairConfig) (p *Pair, err error) {
	a, err := New(cfg.Prefix)
	if err != nil {
		return nil, err
	}
	b, err := New(cfg.Prefix)
	if err != nil {
		a.Close()
		return nil, err
	}
	x := randomByte()
	p = &Pair{
		A: Side{NS: a, Link: LinkA,
			IPv4: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 99, x, 1}), 24),
			IPv6: netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, 0x99, 6: 0, 7: x, 15: 1}), 64)},
		B: Side{NS: b, Link: LinkB,
			IPv4: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 99, x, 2}), 24),
			IPv6: netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, 0x99, 6: 0, 7: x, 15: 2}), 64)},
	}
	defer func() {
		if err != nil {
			p.Close()
			p = nil
		}
	}()
	err = a.withRTNL(func(r *rtnl) error {
		return r.addVeth(LinkA, LinkB, int(b.file.Fd()), cfg.MTU)
	})
	if err != nil {
		return p, fmt.Errorf("netns: creating veth pair %s/%s: %w", a.name, b.name, err)
	}
	for _, s := range []*Side{&p.A, &p.B} {
		for _, pfx := range []netip.Prefix{s.IPv4, s.IPv6} {
			if err := s.NS.AddAddress(s.Link, pfx); err != nil {
				return p, fmt.Errorf("netns: %s: adding %v to %s: %w", s.NS.name, pfx, s.Link, err)
			}
		}
		if err := s.NS.LinkUp(s.Link); err != nil {
			return p, fmt.Errorf("netns: %s: bringing %s up: %w", s.NS.name, s.Link, err)
		}
	}
	for _, s := range []*Side{&p.A, &p.B} {
		if err := s.NS.WaitRunning(s.Link, 5*time.Second); err != nil {
			return p, fmt.Errorf("netns: %w", err)
		}
		ifi, err := s.NS.Interface(s.Link)
		if err != nil {
			return p, fmt.Errorf("netns: %s: %w", s.NS.name, err)
		}
		s.Index, s.MAC, s.MTU = ifi.Index, ifi.HardwareAddr, ifi.MTU
	}
	return p, nil
}

// Close closes both namespaces, which removes the veth pair once nothing
// else refers to them. It returns the first error.
func (p *Pair) Close() error {
	errA := p.A.NS.Close()
	errB := p.B.NS.Close()
	if errA != nil {
		return errA
	}
	return errB
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func randomByte() byte {
	var b [1]byte
	rand.Read(b[:])
	return b[0]
}

// rtnl is a minimal route netlink client: one request at a time, each
// acknowledged.
type rtnl struct {
	fd  int
	seq uint32
}

func dialRTNL() (*rtnl, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netlink bind: %w", err)
	}
	return &rtnl{fd: fd}, nil
}

func (r *rtnl) close() { unix.Close(r.fd) }

// request sends one message of type typ with body and waits for its
// acknowledgement.
func (r *rtnl) request(typ uint16, flags uint16, body []byte) error {
	return r.exchange(typ, flags|unix.NLM_F_ACK, body, nil)
}

// exchange sends one message of type typ with body and reads the replies to
// it (its sequence number): an NLMSG_ERROR ends the exchange with its error
// (nil for an acknowledgement); every other reply goes to each, if not nil,
// which ends the exchange by returning done or an error.
func (r *rtnl) exchange(typ, flags uint16, body []byte, each func(typ uint16, msg []byte) (done bool, err error)) error {
	r.seq++
	msg := make([]byte, unix.SizeofNlMsghdr, unix.SizeofNlMsghdr+len(body))
	msg = append(msg, body...)
	ne := binary.NativeEndian
	ne.PutUint32(msg[0:], uint32(len(msg)))
	ne.PutUint16(msg[4:], typ)
	ne.PutUint16(msg[6:], flags|unix.NLM_F_REQUEST)
	ne.PutUint32(msg[8:], r.seq)
	if err := unix.Sendto(r.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("netlink send: %w", err)
	}
	buf := make([]byte, 65536)
	for {
		n, _, err := unix.Recvfrom(r.fd, buf, 0)
		if err != nil {
			return fmt.Errorf("netlink receive: %w", err)
		}
		for b := buf[:n]; len(b) >= unix.SizeofNlMsghdr; {
			l := int(ne.Uint32(b[0:]))
			if l < unix.SizeofNlMsghdr || l > len(b) {
				return fmt.Errorf("netlink: bad message length %d", l)
			}
			mtyp, seq := ne.Uint16(b[4:]), ne.Uint32(b[8:])
			switch {
			case seq != r.seq:
			case mtyp == unix.NLMSG_ERROR:
				if l < unix.SizeofNlMsghdr+4 {
					return fmt.Errorf("netlink: error message of %d bytes", l)
				}
				if code := int32(ne.Uint32(b[unix.SizeofNlMsghdr:])); code != 0 {
					return unix.Errno(-code)
				}
				return nil
			case each != nil:
				if done, err := each(mtyp, b[:l]); done || err != nil {
					return err
				}
			}
			b = b[min(nlAlign(l), len(b)):]
		}
	}
}

// operState returns the IFLA_OPERSTATE of the link with index (RTM_GETLINK).
func (r *rtnl) operState(index int) (byte, error) {
	oper, _, err := r.linkState(index)
	return oper, err
}

// linkState returns the IFLA_OPERSTATE and IFLA_CARRIER_CHANGES of the link
// with index (RTM_GETLINK); changes is 0 if the kernel gives none.
func (r *rtnl) linkState(index int) (oper byte, changes uint32, err error) {
	ne := binary.NativeEndian
	found := false
	err = r.exchange(unix.RTM_GETLINK, 0, ifInfoMsg(index, 0, 0), func(typ uint16, m []byte) (bool, error) {
		if typ != unix.RTM_NEWLINK || len(m) < unix.SizeofNlMsghdr+unix.SizeofIfInfomsg {
			return false, nil
		}
		for a := m[unix.SizeofNlMsghdr+unix.SizeofIfInfomsg:]; len(a) >= 4; {
			alen, atyp := int(ne.Uint16(a[0:])), ne.Uint16(a[2:])
			if alen < 4 || alen > len(a) {
				break
			}
			switch {
			case atyp == unix.IFLA_OPERSTATE && alen >= 5:
				oper, found = a[4], true
			case atyp == unix.IFLA_CARRIER_CHANGES && alen >= 8:
				changes = ne.Uint32(a[4:])
			}
			a = a[min(nlAlign(alen), len(a)):]
		}
		return true, nil
	})
	switch {
	case err != nil:
		return 0, 0, fmt.Errorf("netlink: RTM_GETLINK %d: %w", index, err)
	case !found:
		return 0, 0, fmt.Errorf("netlink: link %d has no IFLA_OPERSTATE", index)
	}
	return oper, changes, nil
}

func nlAlign(n int) int { return (n + 3) &^ 3 }

// appendAttr appends a route attribute.
func appendAttr(b []byte, typ uint16, data []byte) []byte {
	var h [4]byte
	binary.NativeEndian.PutUint16(h[0:], uint16(4+len(data)))
	binary.NativeEndian.PutUint16(h[2:], typ)
	b = append(b, h[:]...)
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// appendNested appends a route attribute whose payload fill writes.
func appendNested(b []byte, typ uint16, fill func([]byte) []byte) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0)
	b = fill(b)
	binary.NativeEndian.PutUint16(b[start:], uint16(len(b)-start))
	binary.NativeEndian.PutUint16(b[start+2:], typ)
	return b
}

func u32(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }

func cstr(s string) []byte { return append([]byte(s), 0) }

// ifInfoMsg returns a struct ifinfomsg.
func ifInfoMsg(index int, flags, change uint32) []byte {
	b := make([]byte, unix.SizeofIfInfomsg)
	b[0] = unix.AF_UNSPEC
	binary.NativeEndian.PutUint32(b[4:], uint32(int32(index)))
	binary.NativeEndian.PutUint32(b[8:], flags)
	binary.NativeEndian.PutUint32(b[12:], change)
	return b
}

// Interface indices of the veth ends of a Pair.
const (
	vethIndexA = 10
	vethIndexB = 11
)

// vethInfoPeer is VETH_INFO_PEER from linux/veth.h.
const vethInfoPeer = 1

// addVeth creates a veth pair: name here, peer in the namespace peerNS (a
// namespace file descriptor).
func (r *rtnl) addVeth(name, peer string, peerNS int, mtu int) error {
	// Distinct interface indices (the namespaces are fresh, so both are
	// free): the kernel then treats carrier changes of the pair as urgent
	// instead of batching them for up to a second (linkwatch_urgent_event).
	b := ifInfoMsg(vethIndexA, 0, 0)
	b = appendAttr(b, unix.IFLA_IFNAME, cstr(name))
	if mtu > 0 {
		b = appendAttr(b, unix.IFLA_MTU, u32(uint32(mtu)))
	}
	b = appendNested(b, unix.IFLA_LINKINFO, func(b []byte) []byte {
		b = appendAttr(b, unix.IFLA_INFO_KIND, []byte("veth"))
		return appendNested(b, unix.IFLA_INFO_DATA, func(b []byte) []byte {
			return appendNested(b, vethInfoPeer, func(b []byte) []byte {
				b = append(b, ifInfoMsg(vethIndexB, 0, 0)...)
				b = appendAttr(b, unix.IFLA_IFNAME, cstr(peer))
				b = appendAttr(b, unix.IFLA_NET_NS_FD, u32(uint32(peerNS)))
				if mtu > 0 {
					b = appendAttr(b, unix.IFLA_MTU, u32(uint32(mtu)))
				}
				return b
			})
		})
	})
	return r.request(unix.RTM_NEWLINK, unix.NLM_F_CREATE|unix.NLM_F_EXCL, b)
}

// setLink sets the given interface flags (IFF_UP) and, if mtu > 0, the MTU.
func (r *rtnl) setLink(index int, flags uint32, mtu int) error {
	b := ifInfoMsg(index, flags, flags)
	if mtu > 0 {
		b = appendAttr(b, unix.IFLA_MTU, u32(uint32(mtu)))
	}
	return r.request(unix.RTM_NEWLINK, 0, b)
}

func (r *rtnl) addAddress(index int, p netip.Prefix) error {
	addr := p.Addr().Unmap()
	b := make([]byte, unix.SizeofIfAddrmsg)
	family := byte(unix.AF_INET)
	var flags uint32
	if addr.Is6() {
		family = unix.AF_INET6
		flags = unix.IFA_F_NODAD
	}
	b[0] = family
	b[1] = byte(p.Bits())
	b[2] = byte(flags)
	b[3] = unix.RT_SCOPE_UNIVERSE
	binary.NativeEndian.PutUint32(b[4:], uint32(index))
	raw := addr.AsSlice()
	b = appendAttr(b, unix.IFA_LOCAL, raw)
	b = appendAttr(b, unix.IFA_ADDRESS, raw)
	if flags != 0 {
		b = appendAttr(b, unix.IFA_FLAGS, u32(flags))
	}
	return r.request(unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_EXCL, b)
}

// Neighbour table constants from linux/neighbour.h.
const (
	ndaDst       = 1
	ndaLLAddr    = 2
	nudPermanent = 0x80
)

func (r *rtnl) addNeighbor(index int, ip netip.Addr, mac net.HardwareAddr) error {
	ip = ip.Unmap()
	b := make([]byte, 12) // struct ndmsg
	b[0] = unix.AF_INET
	if ip.Is6() {
		b[0] = unix.AF_INET6
	}
	binary.NativeEndian.PutUint32(b[4:], uint32(int32(index)))
	binary.NativeEndian.PutUint16(b[8:], nudPermanent)
	b = appendAttr(b, ndaDst, ip.AsSlice())
	b = appendAttr(b, ndaLLAddr, mac)
	return r.request(unix.RTM_NEWNEIGH, unix.NLM_F_CREATE|unix.NLM_F_REPLACE, b)
}
