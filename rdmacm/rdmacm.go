package rdmacm

import (
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/softrdma/softrdma/ibcm"
	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/netio"
)

// EventType is an rdma_cm event type (enum rdma_cm_event_type; same values).
type EventType uint8

// Event types. DEVICE_REMOVAL, MULTICAST_JOIN, MULTICAST_ERROR and ADDR_CHANGE keep
// their rdma_cm values but are never reported: devices are not hot-removed, there is no
// multicast, and addresses are fixed when a device is added.
const (
	EventAddrResolved    EventType = 0
	EventAddrError       EventType = 1
	EventRouteResolved   EventType = 2
	EventRouteError      EventType = 3
	EventConnectRequest  EventType = 4
	EventConnectResponse EventType = 5
	EventConnectError    EventType = 6
	EventUnreachable     EventType = 7
	EventRejected        EventType = 8
	EventEstablished     EventType = 9
	EventDisconnected    EventType = 10
	EventDeviceRemoval   EventType = 11
	EventMulticastJoin   EventType = 12
	EventMulticastError  EventType = 13
	EventAddrChange      EventType = 14
	EventTimewaitExit    EventType = 15
)

var eventNames = [...]string{
	"ADDR_RESOLVED", "ADDR_ERROR", "ROUTE_RESOLVED", "ROUTE_ERROR", "CONNECT_REQUEST", "CONNECT_RESPONSE",
	"CONNECT_ERROR", "UNREACHABLE", "REJECTED", "ESTABLISHED", "DISCONNECTED", "DEVICE_REMOVAL",
	"MULTICAST_JOIN", "MULTICAST_ERROR", "ADDR_CHANGE", "TIMEWAIT_EXIT",
}

// String returns rdma_event_str's name, e.g. "RDMA_CM_EVENT_ESTABLISHED".
func (t EventType) String() string {
	if int(t) < len(eventNames) {
		return "RDMA_CM_EVENT_" + eventNames[t]
	}
	return "EventType(" + strconv.Itoa(int(t)) + ")"
}

// PortSpace is an rdma_cm port space (enum rdma_ucm_port_space).
type PortSpace uint16

// Port spaces.
const (
	// PortSpaceTCP is RDMA_PS_TCP: reliable connected QPs (rping, perftest -R).
	PortSpaceTCP PortSpace = 0x0106
	// PortSpaceUDP is RDMA_PS_UDP: UD QPs, resolved with SIDR on RoCE.
	PortSpaceUDP PortSpace = 0x0111
	// PortSpaceIB is RDMA_PS_IB: RC QPs (librdmacm's rdma_create_id gives
	// it RC) in a port space of its own, as the kernel's rdma_cm keeps it
	// (cma_pernet ib_ps): its ports are apart from TCP's, and on RoCE its
	// service IDs carry 0x013F (rdma_get_service_id: ps << 16 | port).
	PortSpaceIB PortSpace = 0x013F
	// PortSpaceIPoIB is RDMA_PS_IPOIB: UD QPs in a port space of their own
	// (the kernel's ucma_get_qp_type, cma_pernet ipoib_ps). Their Q_Key is
	// the IPoIB broadcast group's (cma_set_default_qkey), which a RoCE port
	// does not have: a QP cannot be given one (ErrNoDevice, the kernel's
	// ENODEV from ib_sa_get_mcmember_rec).
	PortSpaceIPoIB PortSpace = 0x0002
)

// String returns "TCP", "UDP", "IB" or "IPoIB".
func (ps PortSpace) String() string {
	switch ps {
	case PortSpaceTCP:
		return "TCP"
	case PortSpaceUDP:
		return "UDP"
	case PortSpaceIB:
		return "IB"
	case PortSpaceIPoIB:
		return "IPoIB"
	}
	return "PortSpace(0x" + strconv.FormatUint(uint64(ps), 16) + ")"
}

// UDPQKey is the Q_Key of rdma_cm's UD QPs (RDMA_UDP_QKEY).
const UDPQKey = 0x01234567

// Statuses of events: negative errnos, as rdma_cm reports them.
const (
	StatusInvalid     = -22  // EINVAL
	StatusNetUnreach  = -101 // ENETUNREACH
	StatusConnReset   = -104 // ECONNRESET
	StatusTimedOut    = -110 // ETIMEDOUT
	StatusConnRefused = -111 // ECONNREFUSED
	StatusHostUnreach = -113 // EHOSTUNREACH
	StatusIO          = -5   // EIO
)

// Transport names a device's transport.
type Transport uint8

// Transports.
const (
	TransportRoCE Transport = iota + 1
	TransportIWARP
)

// String returns "roce" or "iwarp".
func (t Transport) String() string {
	switch t {
	case TransportRoCE:
		return "roce"
	case TransportIWARP:
		return "iwarp"
	}
	return "Transport(" + strconv.Itoa(int(t)) + ")"
}

// ConnParam is rdma_conn_param: what Connect and Accept offer, and what an
// event reports of the peer's offer (from this side's point of view: the
// responder resources this side may grant, the initiator depth it may use).
type ConnParam struct {
	// PrivateData goes in the REQ or REP (RoCE: at most 56 bytes in a REQ, the
	// CMA header takes 36 of its 92; 196 in a REP) or the MPA frame (iWARP).
	PrivateData []byte
	// ResponderResources is how many RDMA READs and atomics this side's QP
	// accepts at once; InitiatorDepth how many it issues.
	ResponderResources, InitiatorDepth uint8
	// FlowControl is the IB CM end-to-end flow control bit.
	FlowControl bool
	// RetryCount is the transport retry count of the peer's QP, RNRRetryCount
	// its RNR retry count (7 = infinite). They are taken as given, as
	// rdma_cm does: 0 means no retries (DefaultConnParam has rping's 7).
	RetryCount, RNRRetryCount uint8
	// SRQ says the QP uses a shared receive queue.
	SRQ bool
	// QPNum is the peer's QP number (in events).
	QPNum uint32
}

// DefaultConnParam returns the parameters rping connects and accepts with: one
// READ each way, 7 retries, infinite RNR retries.
func DefaultConnParam() ConnParam {
	return ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}
}

// UDParam is rdma_ud_param: the peer of a UD exchange.
type UDParam struct {
	// PrivateData is the SIDR reply's (or request's) private data.
	PrivateData []byte
	// AH addresses the peer (for UD sends).
	AH ibtransport.AddressHandle
	// QPNum and QKey are the peer's QP and Q_Key (0 in a CONNECT_REQUEST: a
	// SIDR request does not say them).
	QPNum, QKey uint32
}

// Event is one rdma_cm event.
type Event struct {
	Type EventType
	// ID is the ID the event is about: for EventConnectRequest the new
	// connection's ID.
	ID *ID
	// Listener is the listening ID of an EventConnectRequest.
	Listener *ID
	// Status is 0, a negative errno, or (EventRejected over RoCE) the IB CM
	// reject reason; for EventUnreachable of a UD ID, a SIDR status.
	Status int
	// Param is the peer's connection parameters and private data
	// (EventConnectRequest, EventEstablished, EventRejected, EventConnectResponse).
	Param ConnParam
	// UD is the peer of a UD ID (EventConnectRequest, EventEstablished).
	UD UDParam
	// Err says more about a failure, when there is more to say.
	Err error
}

// Errors of calls.
var (
	ErrInvalidState = errors.New("rdmacm: not allowed in the ID's state")
	ErrNoDevice     = errors.New("rdmacm: no device for the address")
	ErrAddrInUse    = errors.New("rdmacm: address in use")
	ErrInvalid      = errors.New("rdmacm: invalid argument")
	ErrDestroyed    = errors.New("rdmacm: ID destroyed")
	ErrNotSupported = errors.New("rdmacm: not supported by the transport")
	// ErrConnected: Notify's communication-established on a connection that
	// is established already (the kernel's EISCONN).
	ErrConnected = errors.New("rdmacm: already connected")
)

// Config configures a Manager.
type Config struct {
	// Clock gives the time for resolution timeouts (default the system clock;
	// a simulation passes its virtual clock, as to its CM agents).
	Clock netio.Clock
	// Seed seeds the ephemeral ports and the starting PSNs; 0 picks a random seed.
	Seed uint64
	// EventDepth is the capacity of each ID's event channel (default 64).
	// Events that find it full wait, in order, until the consumer reads
	// (ID.pump): a burst of connection requests larger than the channel is
	// not lost.
	EventDepth int
}

// Counters count what a Manager did besides delivering events.
type Counters struct {
	// RequestsRefused counts connection requests dropped for a full backlog
	// (the RoCE peer's REQ retry asks again) or with no listener bound to their
	// address (rejected).
	RequestsRefused uint64
}

// Manager is the connection manager of one host: the devices it may use and
// the port spaces. Its methods and its IDs' methods are safe for concurrent use.
type Manager struct {
	cfg Config

	mu         sync.Mutex
	rng        *rand.Rand
	transports []transport
	ports      map[portKey][]*ID
	counters   Counters
	closed     bool
}

type portKey struct {
	ps   PortSpace
	port uint16
}

// transport is what the Manager needs from a device's transport.
type transport interface {
	kind() Transport
	context() *ibtransport.Context
	// addrs lists the device's IP addresses: those it may be bound to and
	// reached at.
	addrs() []netip.Addr
	// sources lists the addresses among addrs that the device can send
	// from: the candidates for an unbound ID's source address.
	sources() []netip.Addr
	// resolveAddr resolves dst's link address for id (then calls
	// id.m.addrResolved); resolveRoute makes the path.
	resolveAddr(id *ID, dst netip.Addr, timeout time.Duration)
	resolveRoute(id *ID) error
	// initQP brings a QP created on id to its first state.
	initQP(id *ID, qp *ibtransport.QP) error
	connect(id *ID, p *ConnParam) error
	listen(id *ID) error
	unlisten(id *ID)
	accept(id *ID, p *ConnParam) error
	reject(id *ID, pd []byte, reason ibcm.RejectReason) error
	disconnect(id *ID) error
	destroy(id *ID)
}

// NewManager returns a Manager with no devices.
func NewManager(cfg Config) *Manager {
	if cfg.Clock == nil {
		cfg.Clock = netio.SystemClock{}
	}
	if cfg.EventDepth <= 0 {
		cfg.EventDepth = 64
	}
	seed := cfg.Seed
	if seed == 0 {
		var b [8]byte
		crand.Read(b[:])
		seed = binary.LittleEndian.Uint64(b[:])
	}
	return &Manager{cfg: cfg, rng: rand.New(rand.NewPCG(seed, seed^0xbb67ae8584caa73b)), ports: map[portKey][]*ID{}}
}

// Counters returns a snapshot of the counters.
func (m *Manager) Counters() Counters {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.counters
}

// addTransport registers a device.
func (m *Manager) addTransport(t transport) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrDestroyed
	}
	m.transports = append(m.transports, t)
	return nil
}

// idState is an ID's state (the kernel's enum rdma_cm_state, with connected
// and accepted apart).
type idState uint8

const (
	stateIdle idState = iota
	stateAddrQuery
	stateAddrResolved
	stateRouteQuery
	stateRouteResolved
	stateConnect     // active: connecting; passive: request delivered, not answered
	stateAccepted    // passive: accepted, waiting for the RTU
	stateEstablished // connected
	stateDisconnect  // disconnected (or disconnecting)
	stateAddrBound
	stateListen
	stateDestroyed
)

var stateNames = [...]string{"IDLE", "ADDR_QUERY", "ADDR_RESOLVED", "ROUTE_QUERY", "ROUTE_RESOLVED",
	"CONNECT", "ACCEPTED", "ESTABLISHED", "DISCONNECT", "ADDR_BOUND", "LISTEN", "DESTROYED"}

func (s idState) String() string { return stateNames[s] }

// ID is an rdma_cm_id: one endpoint, listening or connecting, with its QP.
type ID struct {
	m      *Manager
	ps     PortSpace
	qpType ibtransport.QPType
	events chan Event

	// Guarded by m.mu.
	state        idState
	tr           transport
	local        netip.AddrPort
	remote       netip.AddrPort
	bound        bool
	ephemeral    bool // bound to a port bind picked
	qp           *ibtransport.QP
	qpAttached   bool // qp came from AttachQP: its creator destroys it
	listener     *ID  // a connection's listening ID
	backlog      int
	pending      int // listener: requests delivered and not answered
	counted      bool
	tos          uint8
	disconnected bool
	resolveGen   int
	mcast        map[netip.Addr]bool // groups joined (multicast.go): true for a full member
	overflow     []Event             // events that found the channel full, oldest first (pump)
	pumping      bool                // a pump goroutine runs

	roce  roceState
	iwarp iwarpState
}

// CreateID returns a new ID in the port space ps (rdma_create_id): RC QPs for
// PortSpaceTCP and PortSpaceIB, UD QPs for PortSpaceUDP and PortSpaceIPoIB.
func (m *Manager) CreateID(ps PortSpace) (*ID, error) {
	var t ibtransport.QPType
	switch ps {
	case PortSpaceTCP, PortSpaceIB:
		t = ibtransport.QPTypeRC
	case PortSpaceUDP, PortSpaceIPoIB:
		t = ibtransport.QPTypeUD
	default:
		return nil, fmt.Errorf("rdmacm: port space %v: %w", ps, ErrInvalid)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrDestroyed
	}
	return m.newID(ps, t), nil
}

func (m *Manager) newID(ps PortSpace, t ibtransport.QPType) *ID {
	return &ID{m: m, ps: ps, qpType: t, events: make(chan Event, m.cfg.EventDepth)}
}

// Events returns the ID's event channel. It is closed by Destroy.
func (id *ID) Events() <-chan Event { return id.events }

// PortSpace returns the ID's port space.
func (id *ID) PortSpace() PortSpace { return id.ps }

// QP returns the ID's QP (nil before CreateQP).
func (id *ID) QP() *ibtransport.QP {
	id.m.mu.Lock()
	defer id.m.mu.Unlock()
	return id.qp
}

// LocalAddr returns the local address and port.
func (id *ID) LocalAddr() netip.AddrPort {
	id.m.mu.Lock()
	defer id.m.mu.Unlock()
	return id.local
}

// RemoteAddr returns the peer's address and port.
func (id *ID) RemoteAddr() netip.AddrPort {
	id.m.mu.Lock()
	defer id.m.mu.Unlock()
	return id.remote
}

// Transport returns the transport of the ID's device (0 before it has one).
func (id *ID) Transport() Transport {
	id.m.mu.Lock()
	defer id.m.mu.Unlock()
	if id.tr == nil {
		return 0
	}
	return id.tr.kind()
}

// Context returns the verbs context of the ID's device (id->verbs): nil until
// BindAddr to a device address or ResolveAddr chose the device.
func (id *ID) Context() *ibtransport.Context {
	id.m.mu.Lock()
	defer id.m.mu.Unlock()
	if id.tr == nil {
		return nil
	}
	return id.tr.context()
}

// SetTOS sets the type of service (IP TOS / traffic class) of the ID's
// connection (rdma_set_option RDMA_OPTION_ID_TOS), before ResolveRoute.
func (id *ID) SetTOS(tos uint8) {
	id.m.mu.Lock()
	id.tos = tos
	id.m.mu.Unlock()
}

// push delivers ev to id's channel without blocking, or queues it for the
// pump when the channel is full; false for a destroyed ID. m.mu is held.
func (m *Manager) push(id *ID, ev Event) bool {
	if id.state == stateDestroyed {
		return false
	}
	if ev.ID == nil {
		ev.ID = id
	}
	if len(id.overflow) == 0 {
		select {
		case id.events <- ev:
			return true
		default:
		}
	}
	// The channel is full: the event waits its turn behind the ones before
	// it. rdma_cm's kernel queue has no bound of its own (ucma bounds only
	// the connection requests, by the listener's backlog); dropping here lost
	// the requests of a burst past the channel's depth, which then waited for
	// the peer's REQ retry (seconds) or, on iWARP, were refused.
	id.overflow = append(id.overflow, ev)
	if !id.pumping {
		id.pumping = true
		go id.pump()
	}
	return true
}

// pump moves the ID's overflow into its channel, oldest first, as the
// consumer makes room, and closes the channel if Destroy came meanwhile (the
// consumer reads the events left, as it would those in the channel's
// buffer). It ends when the overflow is empty.
func (id *ID) pump() {
	m := id.m
	for {
		m.mu.Lock()
		if len(id.overflow) == 0 {
			id.pumping = false
			id.overflow = nil
			if id.state == stateDestroyed {
				close(id.events)
			}
			m.mu.Unlock()
			return
		}
		ev := id.overflow[0]
		m.mu.Unlock()
		id.events <- ev
		m.mu.Lock()
		id.overflow[0] = Event{}
		id.overflow = id.overflow[1:]
		m.mu.Unlock()
	}
}

func (id *ID) errState(op string) error {
	return fmt.Errorf("rdmacm: %s in state %v: %w", op, id.state, ErrInvalidState)
}

// ---- Addresses and ports ----

// transportFor returns the device that owns addr.
func (m *Manager) transportFor(addr netip.Addr) transport {
	addr = addr.Unmap()
	for _, t := range m.transports {
		for _, a := range t.addrs() {
			if a.Unmap() == addr {
				return t
			}
		}
	}
	return nil
}

// routeTo picks the device and source address for dst: the device owning dst
// (loopback), else the first device that can send to dst's family (the
// devices in the order added). The source is one the device sends from
// (transport.sources): dst itself if it is one, else the first of dst's
// family (IPv6 link-local destinations take a link-local source). It is not
// dst merely because the device owns dst: a RoCE device on a UDP socket
// bound to 10.9.0.1 lists 10.9.0.2, another address of the interface, in
// its GID table, but its socket drops a REQ sent from 10.9.0.2 (the kernel
// too picks the route's source, not the destination, for a local address).
func (m *Manager) routeTo(dst netip.Addr) (transport, netip.Addr) {
	dst = dst.Unmap()
	if t := m.transportFor(dst); t != nil {
		if s, ok := sourceFor(t, dst); ok {
			return t, s
		}
	}
	for _, t := range m.transports {
		if s, ok := sourceFor(t, dst); ok {
			return t, s
		}
	}
	return nil, netip.Addr{}
}

// sourceFor returns the address t sends to dst from (see routeTo).
func sourceFor(t transport, dst netip.Addr) (netip.Addr, bool) {
	srcs := t.sources()
	for _, a := range srcs {
		if a.Unmap() == dst {
			return dst, true
		}
	}
	ll := dst.Is6() && dst.IsLinkLocalUnicast()
	for _, a := range srcs {
		a = a.Unmap()
		if a.Is4() == dst.Is4() && (a.Is6() && a.IsLinkLocalUnicast()) == ll && !a.IsUnspecified() {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// Ephemeral ports: Linux's default ip_local_port_range, which the captured
// rdma_cm ports (47139, 45259, 42204) fall in.
const (
	ephemeralLow  = 32768
	ephemeralHigh = 60999
)

// wildcard reports whether a is the unspecified address (or none).
func wildcard(a netip.Addr) bool { return !a.IsValid() || a.IsUnspecified() }

// conflicts reports whether binding a conflicts with an ID bound to b on the
// same port: a wildcard conflicts with everything, an address with itself.
func conflicts(a, b netip.Addr) bool {
	return wildcard(a) || wildcard(b) || a.Unmap() == b.Unmap()
}

// bind reserves (ps, port) for id at addr; port 0 picks an ephemeral one. m.mu is held.
func (m *Manager) bind(id *ID, addr netip.Addr, port uint16) error {
	ephemeral := port == 0
	free := func(p uint16) bool {
		for _, o := range m.ports[portKey{id.ps, p}] {
			if conflicts(addr, o.local.Addr()) {
				return false
			}
		}
		return true
	}
	if port == 0 {
		n := ephemeralHigh - ephemeralLow + 1
		start := m.rng.IntN(n)
		for i := range n {
			p := uint16(ephemeralLow + (start+i)%n)
			if free(p) {
				port = p
				break
			}
		}
		if port == 0 {
			return fmt.Errorf("rdmacm: no ephemeral port free: %w", ErrAddrInUse)
		}
	} else if !free(port) {
		return fmt.Errorf("rdmacm: %v port %d: %w", id.ps, port, ErrAddrInUse)
	}
	k := portKey{id.ps, port}
	m.ports[k] = append(m.ports[k], id)
	id.local = netip.AddrPortFrom(addr, port)
	id.bound, id.ephemeral = true, ephemeral
	return nil
}

// unbind releases id's port. m.mu is held.
func (m *Manager) unbind(id *ID) {
	if !id.bound {
		return
	}
	id.bound = false
	k := portKey{id.ps, id.local.Port()}
	ids := m.ports[k]
	for i, o := range ids {
		if o == id {
			ids = append(ids[:i], ids[i+1:]...)
			break
		}
	}
	if len(ids) == 0 {
		delete(m.ports, k)
	} else {
		m.ports[k] = ids
	}
}

// findListener returns the ID listening on (ps, port) through t that takes a
// request to dst: one bound to dst, else a wildcard one. m.mu is held.
func (m *Manager) findListener(t transport, ps PortSpace, port uint16, dst netip.Addr) *ID {
	var wild *ID
	for _, id := range m.ports[portKey{ps, port}] {
		if id.state != stateListen {
			continue
		}
		a := id.local.Addr()
		if wildcard(a) {
			if (id.tr == nil || id.tr == t) && (!a.IsValid() || a.Is6() || dst.Unmap().Is4()) {
				wild = id
			}
			continue
		}
		if id.tr == t && a.Unmap() == dst.Unmap() {
			return id
		}
	}
	return wild
}

// BindAddr binds the ID to a local address and port (rdma_bind_addr). An
// unspecified address (or none) listens on every device ("0.0.0.0" the IPv4
// addresses only); port 0 picks an ephemeral port.
func (id *ID) BindAddr(addr netip.AddrPort) error {
	m := id.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if id.state != stateIdle {
		return id.errState("bind")
	}
	a := addr.Addr()
	var t transport
	if !wildcard(a) {
		if t = m.transportFor(a); t == nil {
			return fmt.Errorf("rdmacm: bind %v: %w", a, ErrNoDevice)
		}
		a = a.Unmap()
	}
	if err := m.bind(id, a, addr.Port()); err != nil {
		return err
	}
	id.tr = t
	id.state = stateAddrBound
	return nil
}

// ResolveAddr chooses the device and source address for dst (src, if valid,
// names the source) and resolves dst's link address within timeout
// (rdma_resolve_addr). EventAddrResolved or EventAddrError follows. An ID
// not bound yet gets an ephemeral port. A wildcard dst (0.0.0.0, ::) is the
// source device's own address, as the kernel resolves it to loopback; the
// ID's remote address is then that address, where the kernel's stays dst.
func (id *ID) ResolveAddr(src netip.Addr, dst netip.AddrPort, timeout time.Duration) error {
	m := id.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if id.state != stateIdle && id.state != stateAddrBound {
		return id.errState("resolve address")
	}
	// The destination's port is not looked at here, as the kernel's
	// rdma_resolve_addr does not: port 0 resolves (mckey resolves a group
	// address with port 0; a connection to port 0 is refused at connect).
	if !dst.Addr().IsValid() {
		return fmt.Errorf("rdmacm: resolve address %v: %w", dst, ErrInvalid)
	}
	d := dst.Addr().Unmap()
	// A wildcard destination is the kernel's loopback (cma_resolve_loopback):
	// the source device itself, unbound the first one of the family (the
	// kernel takes its first active device and the source 127.0.0.1 or ::1).
	loop := d.IsUnspecified()
	route := d
	if loop {
		route = netip.IPv6Loopback()
		if d.Is4() {
			route = netip.AddrFrom4([4]byte{127, 0, 0, 1})
		}
	}
	var t transport
	var s netip.Addr
	switch {
	case id.bound && !wildcard(id.local.Addr()):
		t, s = id.tr, id.local.Addr()
	case src.IsValid() && !src.IsUnspecified():
		if t = m.transportFor(src); t == nil {
			return fmt.Errorf("rdmacm: source %v: %w", src, ErrNoDevice)
		}
		s = src.Unmap()
	default:
		t, s = m.routeTo(route)
		if t == nil {
			return fmt.Errorf("rdmacm: no device reaches %v: %w", d, ErrNoDevice)
		}
	}
	if s.Is4() != d.Is4() {
		return fmt.Errorf("rdmacm: source %v and destination %v: %w", s, d, ErrInvalid)
	}
	if loop {
		d = s
	}
	if id.bound {
		// A wildcard bind now gets its address, keeping its port.
		id.local = netip.AddrPortFrom(s, id.local.Port())
	} else if err := m.bind(id, s, 0); err != nil {
		return err
	}
	id.tr = t
	id.remote = netip.AddrPortFrom(d, dst.Port())
	id.state = stateAddrQuery
	id.resolveGen++
	t.resolveAddr(id, d, timeout)
	return nil
}

// addrResolved ends ResolveAddr. m.mu is held.
func (m *Manager) addrResolved(id *ID, gen int, err error) {
	if id.state != stateAddrQuery || id.resolveGen != gen {
		return
	}
	if err != nil {
		id.state = stateAddrBound
		m.push(id, Event{Type: EventAddrError, Status: StatusHostUnreach, Err: err})
		return
	}
	id.state = stateAddrResolved
	m.push(id, Event{Type: EventAddrResolved})
}

// ResolveRoute makes the path to the resolved address (rdma_resolve_route):
// EventRouteResolved or EventRouteError follows. The timeout is accepted for
// rdma_cm's signature: on RoCE and iWARP the route needs no query.
func (id *ID) ResolveRoute(timeout time.Duration) error {
	m := id.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if id.state != stateAddrResolved {
		return id.errState("resolve route")
	}
	if err := id.tr.resolveRoute(id); err != nil {
		m.push(id, Event{Type: EventRouteError, Status: StatusNetUnreach, Err: err})
		return nil
	}
	id.state = stateRouteResolved
	m.push(id, Event{Type: EventRouteResolved})
	return nil
}

// CreateQP creates the ID's QP on the ID's device (rdma_create_qp): attr.Type
// is the port space's (RC or UD; 0 takes it). The QP is moved to its first
// state (see the package documentation).
func (id *ID) CreateQP(pd *ibtransport.PD, attr ibtransport.QPInitAttr) (*ibtransport.QP, error) {
	m := id.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if id.state == stateDestroyed {
		return nil, ErrDestroyed
	}
	if id.tr == nil {
		return nil, fmt.Errorf("rdmacm: create qp before the ID has a device: %w", ErrInvalidState)
	}
	if id.qp != nil {
		return nil, fmt.Errorf("rdmacm: the ID has a QP: %w", ErrInvalidState)
	}
	if pd == nil || pd.Context() != id.tr.context() {
		return nil, fmt.Errorf("rdmacm: the PD is not of the ID's device: %w", ErrInvalid)
	}
	if attr.Type == 0 {
		attr.Type = id.qpType
	}
	if attr.Type != id.qpType {
		return nil, fmt.Errorf("rdmacm: %s QP on a %v ID: %w", attr.Type, id.ps, ErrInvalid)
	}
	qp, err := id.tr.context().CreateQP(pd, attr)
	if err != nil {
		return nil, err
	}
	if err := id.tr.initQP(id, qp); err != nil {
		qp.Destroy()
		return nil, err
	}
	id.qp = qp
	return qp, nil
}

// AttachQP makes qp, created by the caller on the ID's device, the ID's QP,
// and moves it to its first state as CreateQP does. librdmacm's replacement
// creates the QP through libibverbs' (so that the program's ibv_qp is the
// library's) and hands it over here. The ID never destroys an attached QP:
// ReleaseQP gives it back, and Destroy forgets it (rdma_destroy_id leaves the
// QP to rdma_destroy_qp).
func (id *ID) AttachQP(qp *ibtransport.QP) error {
	m := id.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if id.state == stateDestroyed {
		return ErrDestroyed
	}
	if id.tr == nil {
		return fmt.Errorf("rdmacm: attach qp before the ID has a device: %w", ErrInvalidState)
	}
	if id.qp != nil {
		return fmt.Errorf("rdmacm: the ID has a QP: %w", ErrInvalidState)
	}
	if qp == nil || qp.Context() != id.tr.context() {
		return fmt.Errorf("rdmacm: the QP is not of the ID's device: %w", ErrInvalid)
	}
	if qp.Type() != id.qpType {
		return fmt.Errorf("rdmacm: %s QP on a %v ID: %w", qp.Type(), id.ps, ErrInvalid)
	}
	if err := id.tr.initQP(id, qp); err != nil {
		return err
	}
	id.qp, id.qpAttached = qp, true
	return nil
}

// ReleaseQP makes the ID forget its QP without destroying it and returns it
// (nil if it has none): rdma_destroy_qp of a QP given with AttachQP.
func (id *ID) ReleaseQP() *ibtransport.QP {
	m := id.m
	m.mu.Lock()
	defer m.mu.Unlock()
	qp := id.qp
	id.qp, id.qpAttached = nil, false
	return qp
}

// DestroyQP destroys the ID's QP (rdma_destroy_qp).
func (id *ID) DestroyQP() error {
	m := id.m
	m.mu.Lock()
	defer m.mu.Unlock()
	return id.destroyQP()
}

func (id *ID) destroyQP() error {
	if id.qp == nil {
		return nil
	}
	if id.qpAttached {
		id.qp, id.qpAttached = nil, false
		return nil
	}
	err := id.qp.Destroy()
	id.qp = nil
	return err
}

// Connect connects to the resolved route (rdma_connect): RoCE sends the REQ
// (a SIDR_REQ for UD), iWARP dials and sends the MPA request. EventEstablished,
// EventRejected, EventUnreachable or EventConnectError follows.
func (id *ID) Connect(p ConnParam) error {
	m := id.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if id.state != stateRouteResolved {
		return id.errState("connect")
	}
	if err := id.checkQP("connect", p.QPNum); err != nil {
		return err
	}
	if err := id.tr.connect(id, &p); err != nil {
		return err
	}
	id.state = stateConnect
	return nil
}

// Listen listens for connection requests on the bound address (rdma_listen):
// each comes as EventConnectRequest with a new ID. backlog bounds the requests
// delivered and not yet accepted or rejected (0 or more than MaxBacklog:
// MaxBacklog, as ucma_listen); more are dropped (RoCE:
// the peer's REQ retry asks again) or rejected (iWARP). An ID not bound yet is
// bound to every device on an ephemeral port.
func (id *ID) Listen(backlog int) error {
	m := id.m
	m.mu.Lock()
	defer m.mu.Unlock()
	switch id.state {
	case stateIdle:
		if err := m.bind(id, netip.Addr{}, 0); err != nil {
			return err
		}
	case stateAddrBound:
	default:
		return id.errState("listen")
	}
	if backlog <= 0 || backlog > MaxBacklog {
		backlog = MaxBacklog
	}
	id.backlog = backlog
	id.state = stateListen
	var errs []error
	ok := 0
	for _, t := range m.transports {
		if id.tr != nil && id.tr != t {
			continue
		}
		err := t.listen(id)
		// A port picked here (port 0) is in the kernel's ephemeral range,
		// from which it gives TCP connections their local ports: iWARP's
		// listening socket may find it taken (seen in perf -R's tests). While
		// no transport listens on it yet, another port is picked.
		for try := 0; err != nil && errors.Is(err, syscall.EADDRINUSE) && id.ephemeral && ok == 0 && try < 16; try++ {
			addr := id.local.Addr()
			m.unbind(id)
			if err = m.bind(id, addr, 0); err == nil {
				err = t.listen(id)
			}
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ok++
	}
	if ok == 0 {
		id.state = stateAddrBound
		if len(errs) == 0 {
			return fmt.Errorf("rdmacm: listen: %w", ErrNoDevice)
		}
		return errors.Join(errs...)
	}
	return nil
}

// MaxBacklog is the backlog of a listener asked for none or more: the
// kernel's rdma_ucm max_backlog (1024), which ucma_listen puts in place of a
// backlog <= 0 or above it.
const MaxBacklog = 1024

// newConn makes the ID of an incoming request on listener l. m.mu is held.
func (m *Manager) newConn(l *ID, t transport, local, remote netip.AddrPort) *ID {
	c := m.newID(l.ps, l.qpType)
	c.tr, c.listener, c.state = t, l, stateConnect
	c.local, c.remote = local, remote
	c.tos = l.tos
	return c
}

// deliverRequest hands a new connection's request to its listener; it reports
// false (and counts) when the backlog is full. m.mu is held.
func (m *Manager) deliverRequest(l, c *ID, ev Event) bool {
	if l.pending >= l.backlog {
		m.counters.RequestsRefused++
		return false
	}
	ev.Type, ev.ID, ev.Listener = EventConnectRequest, c, l
	l.pending++
	c.counted = true
	m.push(l, ev)
	return true
}

// answered releases a connection's place in its listener's backlog. m.mu is held.
func (id *ID) answered() {
	if id.counted && id.listener != nil {
		id.counted = false
		id.listener.pending--
	}
}

// Accept accepts a connection request (rdma_accept). RoCE moves the QP to RTS
// and sends the REP (EventEstablished follows at the RTU), or for UD the
// SIDR_REP; iWARP sends the MPA reply (EventEstablished follows).
func (id *ID) Accept(p ConnParam) error {
	m := id.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if id.state != stateConnect || id.listener == nil {
		return id.errState("accept")
	}
	if err := id.checkQP("accept", p.QPNum); err != nil {
		return err
	}
	id.answered()
	return id.tr.accept(id, &p)
}

// Reject rejects a connection request with private data (rdma_reject): RoCE
// sends a REJ with the reason "consumer reject" (28; a SIDR_REP "rejected" for
// UD), iWARP an MPA reply with the Reject bit.
func (id *ID) Reject(privateData []byte) error {
	return id.RejectReason(privateData, ibcm.RejConsumer)
}

// RejectReason is Reject with the REJ's reason: the kernel's rdma_cm lets
// a program give RejConsumer or RejVendorOptionNotSupported (35,
// rdma_reject_ece); other reasons are ErrInvalid. The reason is RoCE's RC
// REJ's only: a SIDR_REP and an MPA reject carry none.
func (id *ID) RejectReason(privateData []byte, reason ibcm.RejectReason) error {
	if reason != ibcm.RejConsumer && reason != ibcm.RejVendorOptionNotSupported {
		return fmt.Errorf("rdmacm: reject reason %d: %w", reason, ErrInvalid)
	}
	m := id.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if id.state != stateConnect || id.listener == nil {
		return id.errState("reject")
	}
	id.answered()
	if err := id.tr.reject(id, privateData, reason); err != nil {
		return err
	}
	id.state = stateDisconnect
	return nil
}

// NotifyEvent is an asynchronous event of a connection's QP that the program
// reports to the CM (rdma_notify; the values are enum ibv_event_type's).
type NotifyEvent int

// The events Notify tells apart; any other is NotifyEvent(n) as well.
const (
	NotifyCommEst NotifyEvent = 4 // IBV_EVENT_COMM_EST: the QP received before the RTU
	NotifyPathMig NotifyEvent = 6 // IBV_EVENT_PATH_MIG: the QP moved to its alternate path
)

// Notify answers rdma_notify as the kernel's rdma_cm does. An iWARP ID that
// connects, was requested or listens takes any event and does nothing
// (iw_cm has no use for them). On RoCE (ib_cm_notify): NotifyCommEst on an
// accepted connection whose RTU has not come establishes it (its QP got the
// peer's packets first: EventEstablished follows, as for the RTU), and is
// ErrConnected once established; an established RC connection takes
// NotifyPathMig, which changes nothing (there is no alternate path); any
// other event, and any event on an ID without a connection, is
// ErrInvalidState.
func (id *ID) Notify(ev NotifyEvent) error {
	m := id.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if id.tr == nil {
		return id.errState("notify")
	}
	if id.tr.kind() == TransportIWARP {
		switch id.state {
		case stateConnect, stateAccepted, stateEstablished, stateDisconnect, stateListen:
			return nil
		}
		return id.errState("notify")
	}
	if cm := id.roce.cm; cm != nil && id.state == stateAccepted && ev == NotifyCommEst {
		switch err := cm.Establish(); {
		case errors.Is(err, ibcm.ErrEstablished):
			return ErrConnected // the RTU came: its event is on its way
		case err != nil:
			return fmt.Errorf("rdmacm: notify: %w: %w", ErrInvalidState, err)
		}
		id.state = stateEstablished
		m.push(id, Event{Type: EventEstablished})
		return nil
	}
	// The CM's own state: a disconnect in progress (DREQ sent) is no longer
	// established there, though the ID is until DISCONNECTED.
	if cm := id.roce.cm; cm != nil && cm.State() == ibcm.StateEstablished && id.qpType == ibtransport.QPTypeRC {
		switch ev {
		case NotifyCommEst:
			return ErrConnected
		case NotifyPathMig:
			return nil
		}
	}
	return fmt.Errorf("rdmacm: notify %d in state %v: %w", ev, id.state, ErrInvalidState)
}

// Disconnect ends the connection (rdma_disconnect): the QP moves to ERR
// (its WRs flush), RoCE sends the DREQ (or the DREP to the peer's DREQ),
// iWARP closes the TCP connection. EventDisconnected follows unless it came
// already.
func (id *ID) Disconnect() error {
	m := id.m
	m.mu.Lock()
	defer m.mu.Unlock()
	switch id.state {
	case stateConnect, stateAccepted, stateEstablished, stateDisconnect:
	default:
		return id.errState("disconnect")
	}
	if id.qpType == ibtransport.QPTypeUD {
		return nil
	}
	return id.tr.disconnect(id)
}

// disconnected reports EventDisconnected once. m.mu is held.
func (m *Manager) disconnected(id *ID, status int) {
	if id.disconnected {
		return
	}
	id.disconnected = true
	id.state = stateDisconnect
	m.push(id, Event{Type: EventDisconnected, Status: status})
}

// qpToError moves the ID's QP to ERR. m.mu is held.
func (id *ID) qpToError() {
	if id.qp != nil {
		id.qp.Modify(&ibtransport.QPAttr{QPState: ibtransport.QPStateErr}, ibtransport.QPAttrState)
	}
}

// Destroy ends the ID (rdma_destroy_qp and rdma_destroy_id): a listener stops
// listening, a connection is torn down as its state requires (the peer is
// told), the QP is destroyed, the port released and the event channel closed.
func (id *ID) Destroy() error {
	m := id.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if id.state == stateDestroyed {
		return nil
	}
	if id.state == stateListen {
		for _, t := range m.transports {
			if id.tr == nil || id.tr == t {
				t.unlisten(id)
			}
		}
	}
	id.answered()
	if id.tr != nil {
		id.tr.destroy(id)
	}
	err := id.destroyQP()
	if id.listener == nil {
		m.unbind(id)
	}
	id.state = stateDestroyed
	if !id.pumping { // else the pump closes it after the overflow
		close(id.events)
	}
	return err
}

// Close destroys nothing but stops the Manager taking devices and IDs.
func (m *Manager) Close() error {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	return nil
}

// randomPSN returns a starting PSN (rdma_cm picks a random 24-bit one). m.mu is held.
func (m *Manager) randomPSN() uint32 { return m.rng.Uint32() & ibtransport.PSNMask }
