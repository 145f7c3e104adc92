package neigh

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"sync"
	"time"

	"github.com/softrdma/softrdma/header"
)

// Errors of neighbour resolution (Resolver.Resolve).
var (
	// ErrPending says the address is being resolved: ask again later.
	ErrPending = errors.New("neigh: neighbour resolution in progress")
	// ErrUnreachable says the address did not resolve (no answer, no
	// route, or no source address to ask from).
	ErrUnreachable = errors.New("neigh: neighbour unreachable")
)

// Neighbour protocol wire constants (RFC 826 ARP, RFC 4861 NDP).
const (
	EtherTypeARP = header.EtherTypeARP // Ethertype of ARP

	arpLen          = 28 // ARP for IPv4 over Ethernet
	minFrameLen     = 60 // the shortest Ethernet frame without FCS: ARP is padded to it
	arpOpRequest    = 1
	arpOpReply      = 2
	ipProtoICMPv6   = header.IPProtocolICMPv6
	icmpv6NS        = 135 // neighbor solicitation
	icmpv6NA        = 136 // neighbor advertisement
	ndMsgLen        = 24  // type, code, checksum, flags/reserved, target address
	ndOptSourceLL   = 1   // source link-layer address option
	ndOptTargetLL   = 2   // target link-layer address option
	ndOptLLLen      = 8   // one link-layer address option for Ethernet
	ndHopLimit      = 255 // NDP messages are sent and accepted with hop limit 255 only
	naFlagSolicited = 0x40000000
	naFlagOverride  = 0x20000000
)

// Defaults of HostConfig, the Linux neighbour table's defaults.
const (
	// DefaultRetransTime is the time between two requests for one address
	// (the kernel's retrans_time_ms, RFC 4861 RETRANS_TIMER).
	DefaultRetransTime = time.Second
	// DefaultMaxProbes is the number of requests sent before an address is
	// given up (the kernel's mcast_solicit, RFC 4861 MAX_MULTICAST_SOLICIT).
	DefaultMaxProbes = 3
	// DefaultReachableTime is how long a learned address is used before it is
	// confirmed again (the kernel's base_reachable_time, RFC 4861
	// REACHABLE_TIME).
	DefaultReachableTime = 30 * time.Second
	// DefaultMaxNeighbors bounds the neighbour cache.
	DefaultMaxNeighbors = 1024
)

// maxQueuedNeighborFrames bounds the requests and replies waiting to be sent:
// a flood of requests costs at most this many frames of memory.
const maxQueuedNeighborFrames = 64

// neighborFrameLen is the longest frame Host sends: an NS or NA with
// one link-layer address option.
const neighborFrameLen = header.EthernetLen + header.IPv6Len + ndMsgLen + ndOptLLLen

// HostConfig configures NewHost.
type HostConfig struct {
	// MAC is the host's Ethernet address.
	MAC [6]byte
	// Addrs are the host's IP addresses (IPv4-mapped ones count as IPv4).
	// The IPv6 link-local address derived from MAC (the device's GID 0) is
	// the host's too.
	Addrs []netip.Addr
	// RetransTime, MaxProbes, ReachableTime and MaxEntries default to
	// DefaultRetransTime, DefaultMaxProbes, DefaultReachableTime and
	// DefaultMaxNeighbors.
	RetransTime   time.Duration
	MaxProbes     int
	ReachableTime time.Duration
	MaxEntries    int
}

// HostStats counts what a Host did.
type HostStats struct {
	ARPRequestsIn, ARPRepliesIn   uint64 // valid ARP frames received
	ARPRequestsOut, ARPRepliesOut uint64 // ARP frames sent
	NSIn, NAIn                    uint64 // valid neighbor solicitations and advertisements received
	NSOut, NAOut                  uint64 // solicitations and advertisements sent
	Learned                       uint64 // cache entries created or changed by a received frame
	Failed                        uint64 // resolutions given up after MaxProbes requests
	Invalid                       uint64 // ARP or NDP frames that failed validation
	QueueFull                     uint64 // frames not sent because the send queue was full
	CacheFull                     uint64 // resolutions refused because the cache was full
}

type neighborState uint8

const (
	neighborIncomplete neighborState = iota // requests sent, no answer yet
	neighborReachable                       // MAC known
	neighborFailed                          // no answer after MaxProbes requests
)

type hostNeighbor struct {
	state  neighborState
	mac    [6]byte
	until  time.Time // reachable: confirmed until; failed: given up until
	probes int       // requests sent in the current round; 0: no round
	next   time.Time // when the next request is due, if probes > 0
}

// Host makes a device an IP host on its own link, as it is behind a
// TAP device: it answers ARP requests (RFC 826) and neighbor solicitations
// (RFC 4861, sent to the host's address or its solicited-node multicast
// group) for the host's addresses, learns from the requests and replies it
// sees, and resolves other hosts by broadcasting ARP requests or multicasting
// neighbor solicitations, MaxProbes times RetransTime apart. Every
// destination is taken to be on the link (there is no router).
//
// It is sans-I/O, like the rest of the device: the device hands it every
// received frame that is not RoCE (HandleFrame), asks it for frames to send
// (AppendFrames) and for its next timer (NextDeadline). Time is what the
// caller says it is. It is safe for concurrent use.
type Host struct {
	mu    sync.Mutex
	cfg   HostConfig
	v4    []netip.Addr // IPv4 addresses, in order
	v6    []netip.Addr // IPv6 addresses, link-local last
	cache map[netip.Addr]*hostNeighbor
	stats HostStats

	queue [][]byte // frames to send
	sent  [][]byte // frames handed out by the last AppendFrames, reused next time
	free  [][]byte
	wake  chan struct{}
}

var (
	_ Protocol = (*Host)(nil)
	_ Waker    = (*Host)(nil)
)

// NewHost returns the neighbour protocol of a host with cfg's MAC and
// addresses.
func NewHost(cfg HostConfig) *Host {
	if cfg.RetransTime <= 0 {
		cfg.RetransTime = DefaultRetransTime
	}
	if cfg.MaxProbes <= 0 {
		cfg.MaxProbes = DefaultMaxProbes
	}
	if cfg.ReachableTime <= 0 {
		cfg.ReachableTime = DefaultReachableTime
	}
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = DefaultMaxNeighbors
	}
	h := &Host{cfg: cfg, cache: make(map[netip.Addr]*hostNeighbor), wake: make(chan struct{}, 1)}
	for _, a := range cfg.Addrs {
		a = a.Unmap()
		switch {
		case a.Is4() && !a.IsUnspecified():
			h.v4 = append(h.v4, a)
		case a.Is6() && !a.IsUnspecified() && !a.IsLinkLocalUnicast():
			h.v6 = append(h.v6, a)
		}
	}
	h.v6 = append(h.v6, LinkLocalAddr(cfg.MAC))
	for _, a := range cfg.Addrs {
		if a := a.Unmap(); a.IsLinkLocalUnicast() && a != LinkLocalAddr(cfg.MAC) {
			h.v6 = append(h.v6, a)
		}
	}
	return h
}

// LinkLocalAddr returns the IPv6 link-local address an interface with the
// given MAC derives (modified EUI-64, RFC 4291 appendix A): the default GID,
// index 0 of a RoCE GID table.
func LinkLocalAddr(mac [6]byte) netip.Addr {
	ll := [16]byte{0: 0xfe, 1: 0x80}
	ll[8], ll[9], ll[10] = mac[0]^0x02, mac[1], mac[2]
	ll[11], ll[12] = 0xff, 0xfe
	ll[13], ll[14], ll[15] = mac[3], mac[4], mac[5]
	return netip.AddrFrom16(ll)
}

// LinkLocalMAC returns the MAC an EUI-64 link-local address was derived from.
func LinkLocalMAC(a netip.Addr) ([6]byte, bool) {
	b := a.As16()
	if !a.Is6() || a.Is4In6() || !a.IsLinkLocalUnicast() || b[11] != 0xff || b[12] != 0xfe ||
		binary.BigEndian.Uint16(b[2:]) != 0 || binary.BigEndian.Uint32(b[4:]) != 0 {
		return [6]byte{}, false
	}
	return [6]byte{b[8] ^ 0x02, b[9], b[10], b[13], b[14], b[15]}, true
}

// MulticastMAC returns the Ethernet address of an IPv4 or IPv6 multicast
// address (RFC 1112 section 6.4, RFC 2464 section 7), or of the IPv4
// limited broadcast address.
func MulticastMAC(a netip.Addr) ([6]byte, bool) {
	a = a.Unmap()
	switch {
	case a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, true
	case a.Is4() && a.IsMulticast():
		b := a.As4()
		return [6]byte{0x01, 0x00, 0x5e, b[1] & 0x7f, b[2], b[3]}, true
	case a.Is6() && a.IsMulticast():
		b := a.As16()
		return [6]byte{0x33, 0x33, b[12], b[13], b[14], b[15]}, true
	}
	return [6]byte{}, false
}

// solicitedNode returns the solicited-node multicast address of a
// (ff02::1:ffXX:XXXX, RFC 4291 section 2.7.1).
func solicitedNode(a netip.Addr) netip.Addr {
	b := a.As16()
	return netip.AddrFrom16([16]byte{0: 0xff, 1: 0x02, 11: 0x01, 12: 0xff, 13: b[13], 14: b[14], 15: b[15]})
}

// Stats returns a snapshot of the counters.
func (h *Host) Stats() HostStats {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stats
}

// Wake returns a channel that receives a value whenever a frame is waiting to
// be sent or an address was resolved: the device's Run then flushes.
func (h *Host) Wake() <-chan struct{} { return h.wake }

func (h *Host) signal() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// isOurs reports whether a (unmapped) is one of the host's addresses.
func (h *Host) isOurs(a netip.Addr) bool {
	list := h.v6
	if a.Is4() {
		list = h.v4
	}
	for _, o := range list {
		if o == a {
			return true
		}
	}
	return false
}

// Resolve returns the MAC address of ip. An address not known yet is asked
// for (the request leaves with the next AppendFrames) and ErrPending
// is returned until an answer arrives; after MaxProbes unanswered requests it
// is ErrUnreachable for RetransTime, then asked for again. A known
// address is used for ReachableTime after it was last confirmed, then
// confirmed again with a unicast request while still in use.
func (h *Host) Resolve(now time.Time, ip netip.Addr) ([6]byte, error) {
	ip = ip.Unmap()
	if mac, ok := MulticastMAC(ip); ok {
		return mac, nil
	}
	if !ip.IsValid() || ip.IsUnspecified() {
		return [6]byte{}, ErrUnreachable
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.cache[ip]
	if e == nil {
		if len(h.cache) >= h.cfg.MaxEntries && !h.evictLocked(now) {
			h.stats.CacheFull++
			return [6]byte{}, ErrUnreachable
		}
		e = &hostNeighbor{state: neighborIncomplete}
		h.cache[ip] = e
		h.probeLocked(now, ip, e)
		return [6]byte{}, ErrPending
	}
	switch e.state {
	case neighborReachable:
		if !now.Before(e.until) && e.probes == 0 {
			h.probeLocked(now, ip, e) // confirm it while still using it
		}
		return e.mac, nil
	case neighborFailed:
		if now.Before(e.until) {
			return [6]byte{}, ErrUnreachable
		}
		e.state = neighborIncomplete
		h.probeLocked(now, ip, e)
	}
	return [6]byte{}, ErrPending
}

// evictLocked removes one entry that is not reachable, or whose confirmation
// is overdue, and reports whether it found one.
func (h *Host) evictLocked(now time.Time) bool {
	for ip, e := range h.cache {
		if e.state != neighborReachable || !now.Before(e.until.Add(h.cfg.ReachableTime)) {
			delete(h.cache, ip)
			return true
		}
	}
	return false
}

// probeLocked sends the first request of a round for ip.
func (h *Host) probeLocked(now time.Time, ip netip.Addr, e *hostNeighbor) {
	e.probes = 1
	e.next = now.Add(h.cfg.RetransTime)
	h.requestLocked(ip, e)
}

// requestLocked queues an ARP request or neighbor solicitation for ip:
// unicast to the known MAC when confirming a reachable entry, else broadcast
// (ARP) or to the solicited-node multicast group (NDP).
func (h *Host) requestLocked(ip netip.Addr, e *hostNeighbor) {
	unicast := e.state == neighborReachable
	if ip.Is4() {
		if len(h.v4) == 0 {
			return
		}
		dst := [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
		if unicast {
			dst = e.mac
		}
		if b := h.allocLocked(); b != nil {
			h.queueLocked(h.arp(b, arpOpRequest, dst, h.v4[0], [6]byte{}, ip))
			h.stats.ARPRequestsOut++
		}
		return
	}
	src := h.v6[0]
	if ip.IsLinkLocalUnicast() {
		src = LinkLocalAddr(h.cfg.MAC)
	}
	dstIP := solicitedNode(ip)
	dst, _ := MulticastMAC(dstIP)
	if unicast {
		dstIP, dst = ip, e.mac
	}
	if b := h.allocLocked(); b != nil {
		h.queueLocked(h.nd(b, icmpv6NS, dst, src, dstIP, ip, 0, ndOptSourceLL))
		h.stats.NSOut++
	}
}

// allocLocked returns a frame buffer, or nil (counted) if the send queue is
// full.
func (h *Host) allocLocked() []byte {
	if len(h.queue) >= maxQueuedNeighborFrames {
		h.stats.QueueFull++
		return nil
	}
	if n := len(h.free); n > 0 {
		b := h.free[n-1]
		h.free = h.free[:n-1]
		return b[:cap(b)]
	}
	return make([]byte, neighborFrameLen)
}

func (h *Host) queueLocked(frame []byte) {
	h.queue = append(h.queue, frame)
	h.signal()
}

// AppendFrames sends the requests that are due (and gives up on addresses that
// had MaxProbes of them), then appends every frame waiting to be sent to
// frames and returns it. The frames stay valid until the next call.
func (h *Host) AppendFrames(now time.Time, frames [][]byte) [][]byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.free = append(h.free, h.sent...)
	clear(h.sent)
	h.sent = h.sent[:0]
	for ip, e := range h.cache {
		if e.probes == 0 || now.Before(e.next) {
			continue
		}
		if e.probes >= h.cfg.MaxProbes {
			e.probes = 0
			e.state = neighborFailed
			e.until = now.Add(h.cfg.RetransTime)
			h.stats.Failed++
			h.signal() // frames waiting for ip are dropped at once
			continue
		}
		e.probes++
		e.next = now.Add(h.cfg.RetransTime)
		h.requestLocked(ip, e)
	}
	frames = append(frames, h.queue...)
	h.sent = append(h.sent, h.queue...)
	clear(h.queue)
	h.queue = h.queue[:0]
	return frames
}

// NextDeadline returns when the next request is due.
func (h *Host) NextDeadline() (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var t time.Time
	have := false
	for _, e := range h.cache {
		if e.probes > 0 && (!have || e.next.Before(t)) {
			t, have = e.next, true
		}
	}
	return t, have
}

// learnLocked records that ip is at mac. create says whether a new entry may
// be made (the frame was addressed to us); confirmed whether the frame proves
// ip reachable (a reply or solicited advertisement, or a request to us).
func (h *Host) learnLocked(now time.Time, ip netip.Addr, mac [6]byte, create, override, confirmed bool) {
	if !ip.IsValid() || ip.IsUnspecified() || ip.IsMulticast() || mac[0]&1 != 0 || mac == ([6]byte{}) {
		return
	}
	e := h.cache[ip]
	if e == nil {
		if !create || (len(h.cache) >= h.cfg.MaxEntries && !h.evictLocked(now)) {
			return
		}
		e = &hostNeighbor{}
		h.cache[ip] = e
	}
	if e.state == neighborReachable && e.mac != mac && !override {
		return
	}
	if e.state != neighborReachable || e.mac != mac {
		h.stats.Learned++
		h.signal()
	}
	e.state, e.mac = neighborReachable, mac
	if confirmed || e.until.IsZero() {
		e.until = now.Add(h.cfg.ReachableTime)
		e.probes = 0
	}
}

// HandleFrame takes a received frame that is not RoCE. It returns true if the
// frame is ARP or NDP (handled or, if invalid, counted and dropped) and false
// for anything else. Answers are queued for AppendFrames.
func (h *Host) HandleFrame(now time.Time, frame []byte) bool {
	if len(frame) < header.EthernetLen {
		return false
	}
	switch header.Ethernet(frame).Type() {
	case EtherTypeARP:
		h.mu.Lock()
		h.handleARPLocked(now, frame)
		h.mu.Unlock()
		return true
	case header.EtherTypeIPv6:
		p := header.IPv6(frame[header.EthernetLen:])
		if len(p) < header.IPv6Len+1 || p.Version() != 6 || p.NextHeader() != ipProtoICMPv6 ||
			(p[header.IPv6Len] != icmpv6NS && p[header.IPv6Len] != icmpv6NA) {
			return false
		}
		h.mu.Lock()
		h.handleNDLocked(now, frame)
		h.mu.Unlock()
		return true
	}
	return false
}

func (h *Host) handleARPLocked(now time.Time, frame []byte) {
	a := frame[header.EthernetLen:]
	be := binary.BigEndian
	if len(a) < arpLen || be.Uint16(a[0:]) != 1 || be.Uint16(a[2:]) != header.EtherTypeIPv4 || a[4] != 6 || a[5] != 4 {
		h.stats.Invalid++
		return
	}
	op := be.Uint16(a[6:])
	sha := [6]byte(a[8:14])
	spa := netip.AddrFrom4([4]byte(a[14:18]))
	tpa := netip.AddrFrom4([4]byte(a[24:28]))
	if (op != arpOpRequest && op != arpOpReply) || sha[0]&1 != 0 || sha == h.cfg.MAC {
		h.stats.Invalid++ // not a request or reply, or a multicast or our own sender address
		return
	}
	forUs := h.isOurs(tpa)
	if op == arpOpReply {
		h.stats.ARPRepliesIn++
	} else {
		h.stats.ARPRequestsIn++
	}
	if spa.IsUnspecified() {
		// An address probe (RFC 5227): nothing to learn; answer, so that
		// the prober sees the address is taken.
		if op == arpOpRequest && forUs {
			h.replyARPLocked(sha, tpa, sha, spa)
		}
		return
	}
	// RFC 826: update an entry we have; add one if the frame is for us.
	h.learnLocked(now, spa, sha, forUs, true, forUs || op == arpOpReply)
	if op == arpOpRequest && forUs {
		h.replyARPLocked(sha, tpa, sha, spa)
	}
}

func (h *Host) replyARPLocked(dst [6]byte, ours netip.Addr, tha [6]byte, tpa netip.Addr) {
	if b := h.allocLocked(); b != nil {
		h.queueLocked(h.arp(b, arpOpReply, dst, ours, tha, tpa))
		h.stats.ARPRepliesOut++
	}
}

// arp writes an ARP frame from the host into b and returns it.
func (h *Host) arp(b []byte, op uint16, dst [6]byte, spa netip.Addr, tha [6]byte, tpa netip.Addr) []byte {
	b = b[:minFrameLen]
	clear(b[header.EthernetLen+arpLen:])
	be := binary.BigEndian
	header.Ethernet(b).Encode(&header.EthernetFields{Dst: dst, Src: h.cfg.MAC, Type: EtherTypeARP})
	a := b[header.EthernetLen:]
	be.PutUint16(a[0:], 1) // hardware type Ethernet
	be.PutUint16(a[2:], header.EtherTypeIPv4)
	a[4], a[5] = 6, 4
	be.PutUint16(a[6:], op)
	copy(a[8:14], h.cfg.MAC[:])
	s, t := spa.As4(), tpa.As4()
	copy(a[14:18], s[:])
	copy(a[18:24], tha[:])
	copy(a[24:28], t[:])
	return b
}

// handleNDLocked validates a neighbor solicitation or advertisement as RFC
// 4861 sections 7.1.1 and 7.1.2 say, learns from it and answers a
// solicitation for one of our addresses.
func (h *Host) handleNDLocked(now time.Time, frame []byte) {
	be := binary.BigEndian
	ip := header.IPv6(frame[header.EthernetLen:])
	plen := int(ip.PayloadLength())
	if len(ip) < header.IPv6Len+plen || plen < ndMsgLen || ip.HopLimit() != ndHopLimit {
		h.stats.Invalid++
		return
	}
	src, dst := ip.Src(), ip.Dst()
	msg := ip[header.IPv6Len : header.IPv6Len+plen]
	if msg[1] != 0 || header.ICMPv6Checksum(src, dst, msg) != 0 {
		h.stats.Invalid++
		return
	}
	target := netip.AddrFrom16([16]byte(msg[8:24]))
	if target.IsMulticast() {
		h.stats.Invalid++
		return
	}
	// Options: type, length in units of 8 bytes (0 is invalid), data.
	var ll [6]byte
	haveLL := false
	want := byte(ndOptSourceLL)
	if msg[0] == icmpv6NA {
		want = ndOptTargetLL
	}
	for opts := msg[ndMsgLen:]; len(opts) > 0; {
		if len(opts) < 2 || opts[1] == 0 || int(opts[1])*8 > len(opts) {
			h.stats.Invalid++
			return
		}
		n := int(opts[1]) * 8
		if opts[0] == want && n >= 8 {
			ll, haveLL = [6]byte(opts[2:8]), true
		}
		opts = opts[n:]
	}
	if msg[0] == icmpv6NS {
		// A solicitation from the unspecified address (duplicate address
		// detection) goes to a solicited-node group and carries no
		// source link-layer address.
		if src.IsUnspecified() && (!dst.IsMulticast() || haveLL) {
			h.stats.Invalid++
			return
		}
		h.stats.NSIn++
		if !h.isOurs(target) {
			return
		}
		if src.IsUnspecified() {
			// Answer to all nodes, not solicited (RFC 4861 section 7.2.4).
			allNodes := netip.AddrFrom16([16]byte{0: 0xff, 1: 0x02, 15: 0x01})
			mac, _ := MulticastMAC(allNodes)
			h.advertiseLocked(mac, target, allNodes, naFlagOverride)
			return
		}
		mac := header.Ethernet(frame).SrcMAC()
		if haveLL {
			mac = ll
			h.learnLocked(now, src, ll, true, true, false)
		}
		h.advertiseLocked(mac, target, src, naFlagSolicited|naFlagOverride)
		return
	}
	flags := be.Uint32(msg[4:])
	if dst.IsMulticast() && flags&naFlagSolicited != 0 {
		h.stats.Invalid++
		return
	}
	h.stats.NAIn++
	if haveLL {
		h.learnLocked(now, target, ll, false, flags&naFlagOverride != 0, flags&naFlagSolicited != 0)
	}
}

func (h *Host) advertiseLocked(dstMAC [6]byte, target, dst netip.Addr, flags uint32) {
	if b := h.allocLocked(); b != nil {
		h.queueLocked(h.nd(b, icmpv6NA, dstMAC, target, dst, target, flags, ndOptTargetLL))
		h.stats.NAOut++
	}
}

// nd writes a neighbor solicitation or advertisement from the host into b,
// with our MAC in a link-layer address option of the given type, and returns
// it.
func (h *Host) nd(b []byte, typ uint8, dstMAC [6]byte, src, dst, target netip.Addr, flags uint32, opt uint8) []byte {
	b = b[:neighborFrameLen]
	be := binary.BigEndian
	header.Ethernet(b).Encode(&header.EthernetFields{Dst: dstMAC, Src: h.cfg.MAC, Type: header.EtherTypeIPv6})
	ip := header.IPv6(b[header.EthernetLen:])
	ip.Encode(&header.IPv6Fields{
		PayloadLength: ndMsgLen + ndOptLLLen,
		NextHeader:    ipProtoICMPv6,
		HopLimit:      ndHopLimit,
		Src:           src,
		Dst:           dst,
	})
	t := target.As16()
	msg := ip[header.IPv6Len:]
	msg[0], msg[1] = typ, 0
	be.PutUint16(msg[2:], 0)
	be.PutUint32(msg[4:], flags)
	copy(msg[8:24], t[:])
	msg[24], msg[25] = opt, 1
	copy(msg[26:32], h.cfg.MAC[:])
	be.PutUint16(msg[2:], header.ICMPv6Checksum(src, dst, msg))
	return b
}
