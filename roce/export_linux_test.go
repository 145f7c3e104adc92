//go:build linux

package roce

import (
	"encoding/binary"
	"net/netip"

	"golang.org/x/sys/unix"
)

// TestRTNL exposes the package's netlink client to the tests, with the few
// requests they need to build topologies (bridges) and watch the kernel's
// neighbour table. Open it inside the namespace it is for.
type TestRTNL struct{ r *rtnl }

// DialTestRTNL opens a route netlink socket in the calling thread's namespace.
func DialTestRTNL() (*TestRTNL, error) {
	r, err := dialRTNL()
	return &TestRTNL{r}, err
}

// Close closes the socket.
func (t *TestRTNL) Close() error { return t.r.Close() }

// Neighbor returns the kernel's neighbour entry for ip on interface index.
func (t *TestRTNL) Neighbor(ip netip.Addr, index int) (state uint16, mac [6]byte, err error) {
	return t.r.getNeighbor(ip, index)
}

// UseNeighbor makes the kernel resolve ip on interface index.
func (t *TestRTNL) UseNeighbor(ip netip.Addr, index int) error { return t.r.useNeighbor(ip, index) }

// AddAddress assigns p to interface index.
func (t *TestRTNL) AddAddress(index int, p netip.Prefix) error { return t.r.addAddress(index, p) }

// NUDValid is the mask of usable neighbour states.
const NUDValid = nudValid

func ifinfomsg(index int, flags, change uint32) []byte {
	b := make([]byte, unix.SizeofIfInfomsg)
	binary.NativeEndian.PutUint32(b[4:], uint32(int32(index)))
	binary.NativeEndian.PutUint32(b[8:], flags)
	binary.NativeEndian.PutUint32(b[12:], change)
	return b
}

// AddBridge creates a bridge without STP and with no forwarding delay, so
// that ports forward as soon as they are up.
func (t *TestRTNL) AddBridge(name string) error {
	const iflaBrForwardDelay = 1 // IFLA_BR_FORWARD_DELAY
	b := ifinfomsg(0, 0, 0)
	b = appendAttr(b, unix.IFLA_IFNAME, append([]byte(name), 0))
	info := appendAttr(nil, unix.IFLA_INFO_KIND, []byte("bridge"))
	info = appendAttr(info, unix.IFLA_INFO_DATA, appendAttr(nil, iflaBrForwardDelay, binary.NativeEndian.AppendUint32(nil, 0)))
	b = appendAttr(b, unix.IFLA_LINKINFO, info)
	_, err := t.r.request(unix.RTM_NEWLINK, unix.NLM_F_CREATE|unix.NLM_F_EXCL, b)
	return err
}

// SetMaster enslaves interface index to master (a bridge).
func (t *TestRTNL) SetMaster(index, master int) error {
	b := appendAttr(ifinfomsg(index, 0, 0), unix.IFLA_MASTER, binary.NativeEndian.AppendUint32(nil, uint32(master)))
	_, err := t.r.request(unix.RTM_NEWLINK, 0, b)
	return err
}

// SetUp brings interface index up.
func (t *TestRTNL) SetUp(index int) error {
	_, err := t.r.request(unix.RTM_NEWLINK, 0, ifinfomsg(index, unix.IFF_UP, unix.IFF_UP))
	return err
}
