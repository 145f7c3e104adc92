package ibcm

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/netio"
	"github.com/softrdma/softrdma/roce"
)

// The CM agent is the IB Communication Manager of IBTA Vol. 1 chapter 12 on a
// device's QP1, in the role the kernel's ib_cm plays for rdma_cm: it sends and
// receives the CM MADs, runs the connection state machines of both sides with
// their timers and retries, answers duplicates and stale requests, and hands
// what the consumer must decide (accept a REQ, finish with RTU, disconnect)
// to it as events. The rdma_cm conventions on top of it (service IDs from
// port numbers, the CMA header in the REQ's private data, moving the QP
// through its states) are the consumer's: package rdmacm.
//
// Active side (Connect):
//
//	IDLE → REQ_SENT ─MRA→ MRA_REQ_RCVD ─(timer)→ REQ again
//	REQ_SENT/MRA_REQ_RCVD ─REP→ REP_RCVD ─SendRTU→ ESTABLISHED
//	REQ_SENT/MRA_REQ_RCVD ─REJ→ IDLE;  ─timer, no retries left→ REJ(timeout), IDLE
//	REP_RCVD ─SendMRA→ MRA_REP_SENT ─SendRTU→ ESTABLISHED
//
// Passive side (Listen):
//
//	LISTEN ─REQ→ REQ_RCVD ─dup REQ→ MRA_REQ_SENT;  REQ_RCVD/MRA_REQ_SENT ─Accept→ REP_SENT
//	REP_SENT ─MRA→ MRA_REP_RCVD;  REP_SENT/MRA_REP_RCVD ─RTU (or data on the QP)→ ESTABLISHED
//	REQ_RCVD ─Reject→ TIMEWAIT (the REJ is resent to duplicate REQs), IDLE
//	REP_SENT ─timer, no retries left→ REJ(timeout), IDLE
//
// Both sides:
//
//	ESTABLISHED ─Disconnect→ DREQ_SENT ─DREP or timeout→ TIMEWAIT ─timer→ IDLE (TimeWaitExit)
//	ESTABLISHED ─DREQ→ DREQ_RCVD ─Disconnect→ (DREP) TIMEWAIT
//	DREQ_SENT ─DREQ→ (DREP) TIMEWAIT
//
// SIDR (UD): IDLE → SIDR_REQ_SENT ─SIDR_REP→ IDLE; LISTEN ─SIDR_REQ→
// SIDR_REQ_RCVD ─SIDRReply→ (the reply is resent to duplicates for a while) IDLE.

// State is the state of a ID (the state diagrams of IBTA Vol. 1 ch. 12; the
// kernel's enum ib_cm_state).
type State uint8

// CM states.
const (
	StateIdle State = iota
	StateListen
	StateREQSent
	StateREQRcvd
	StateMRAREQSent
	StateMRAREQRcvd
	StateREPSent
	StateREPRcvd
	StateMRAREPSent
	StateMRAREPRcvd
	StateEstablished
	StateDREQSent
	StateDREQRcvd
	StateTimeWait
	StateSIDRREQSent
	StateSIDRREQRcvd
)

var cmStateNames = [...]string{
	"IDLE", "LISTEN", "REQ_SENT", "REQ_RCVD", "MRA_REQ_SENT", "MRA_REQ_RCVD", "REP_SENT", "REP_RCVD",
	"MRA_REP_SENT", "MRA_REP_RCVD", "ESTABLISHED", "DREQ_SENT", "DREQ_RCVD", "TIMEWAIT",
	"SIDR_REQ_SENT", "SIDR_REQ_RCVD",
}

// String returns the state's IBTA name, e.g. "REQ_SENT".
func (s State) String() string {
	if int(s) < len(cmStateNames) {
		return cmStateNames[s]
	}
	return "CMState(" + strconv.Itoa(int(s)) + ")"
}

// Defaults of AgentConfig: the values the kernel's rdma_cm puts in its REQs
// (checked against the captures).
const (
	// DefaultResponseTimeout is CMA_CM_RESPONSE_TIMEOUT: the REQ's local and
	// remote CM response timeouts, 4.096 µs × 2^20 ≈ 4.3 s.
	DefaultResponseTimeout = 20
	// DefaultMaxRetries is CMA_MAX_CM_RETRIES.
	DefaultMaxRetries = 15
	// DefaultPacketLifeTime is the packet lifetime exponent rdma_cm assumes on
	// RoCE; with rxe's ACK delay it makes the local ACK timeout 19 of the
	// captured REQs.
	DefaultPacketLifeTime = 18
	// DefaultCAACKDelay is rxe's CA ACK delay exponent, the REP's Target ACK Delay.
	DefaultCAACKDelay = 15
	// DefaultMRAServiceTimeout is CMA_CM_MRA_SETTING's timeout, what an MRA announces.
	DefaultMRAServiceTimeout = 24
)

// Timeout returns the time an IBTA timeout exponent stands for: 4.096 µs × 2^exp
// (exponents above 31 count as 31).
func Timeout(exp uint8) time.Duration {
	return time.Duration(4096) << min(exp, 31)
}

// LocalACKTimeout returns the local ACK timeout exponent of a path (IBTA Vol. 1
// ch. 12, the REQ's Local ACK Timeout: at least twice the packet lifetime plus
// the CA's ACK delay), in
// exponents: the larger of PLT+1 and caACKDelay, plus one when the smaller is
// within one of it; at most 31.
func LocalACKTimeout(packetLifeTime, caACKDelay uint8) uint8 {
	hi, lo := packetLifeTime+1, caACKDelay
	if lo > hi {
		hi, lo = lo, hi
	}
	if lo+1 >= hi {
		hi++
	}
	return min(hi, 31)
}

// NodeGUID returns the EUI-64 node GUID of a port with Ethernet address mac (the
// U/L bit flipped, FF:FE in the middle), as rxe derives it: 52:54:00:77:00:02
// gives 0x505400fffe770002.
func NodeGUID(mac [6]byte) uint64 {
	return uint64(mac[0]^2)<<56 | uint64(mac[1])<<48 | uint64(mac[2])<<40 | 0xFF<<32 | 0xFE<<24 |
		uint64(mac[3])<<16 | uint64(mac[4])<<8 | uint64(mac[5])
}

// AgentConfig configures NewAgent.
type AgentConfig struct {
	// roce.Device is the RoCE device whose QP1 the agent opens.
	Device *roce.Device
	// Clock gives the time to calls made outside Poll (Connect, Accept...);
	// default the system clock. A simulation passes its virtual clock.
	Clock netio.Clock
	// GSI sizes QP1.
	GSI GSIConfig
	// CMResponseTimeout is the exponent of the REQ's CM response timeouts
	// (default DefaultResponseTimeout).
	CMResponseTimeout uint8
	// MaxCMRetries is how often a REQ, REP, DREQ or SIDR_REQ is resent
	// (default DefaultMaxRetries).
	MaxCMRetries uint8
	// PacketLifeTime is the exponent of the paths' packet lifetime (default
	// DefaultPacketLifeTime). Each wait for an answer adds twice of it.
	PacketLifeTime uint8
	// CAACKDelay is the CA's ACK delay exponent (default DefaultCAACKDelay).
	CAACKDelay uint8
	// MRAServiceTimeout is the service timeout of the MRAs the agent sends
	// (default DefaultMRAServiceTimeout).
	MRAServiceTimeout uint8
	// TimeWait is how long a connection stays in TIMEWAIT (default: the local
	// ACK timeout, Timeout(LocalACKTimeout(PacketLifeTime, CAACKDelay)), as
	// the kernel's ib_cm; ≈ 2.1 s).
	TimeWait time.Duration
	// Seed seeds communication IDs and transaction IDs; 0 picks a random seed.
	Seed uint64
}

// Errors of the CM agent. Drops wrap ErrDropped in a *DropError.
var (
	// ErrState: the call is not allowed in the ID's state.
	ErrState = errors.New("ibcm: not allowed in this state")
	// ErrClosed: the agent (or the ID) is closed.
	ErrClosed = errors.New("ibcm: closed")
	// ErrBusy: the service ID is already listened on.
	ErrBusy = errors.New("ibcm: service ID in use")
	// ErrInvalid: a parameter is out of range (private data too long...).
	ErrInvalid = errors.New("ibcm: invalid argument")
	// ErrDropped: HandleMAD dropped the MAD (see DropError).
	ErrDropped = errors.New("ibcm: MAD dropped")
	// ErrEstablished: Establish on a connection established already.
	ErrEstablished = errors.New("ibcm: already established")
)

// DropReason says why the agent dropped a MAD.
type DropReason uint8

// Drop reasons.
const (
	DropMalformed    DropReason = iota // not one MAD: length, base version
	DropNotCM                          // another management class (a Get/Set is answered "unsupported")
	DropClassVersion                   // CM class version other than 2
	DropMethod                         // not method Send
	DropAttribute                      // unknown or unsupported CM attribute (ClassPortInfo, LAP, APR)
	DropUnknownID                      // names a communication ID the agent does not know
	DropWrongPeer                      // from another address or instance than the connection's peer
	DropState                          // not expected in the connection's state
	DropRefused                        // a REQ or SIDR_REQ the consumer dropped (backlog full)
	DropBadMessage                     // a field the message cannot have (a DREQ for another QP...)
	numCMDropReasons
)

var cmDropNames = [...]string{"malformed", "not CM", "class version", "method", "attribute",
	"unknown comm ID", "wrong peer", "state", "refused", "bad message"}

// String names the reason, e.g. "unknown comm ID".
func (r DropReason) String() string {
	if int(r) < len(cmDropNames) {
		return cmDropNames[r]
	}
	return "CMDropReason(" + strconv.Itoa(int(r)) + ")"
}

// DropError is a MAD the agent dropped, with why.
type DropError struct {
	Reason DropReason
	Attr   Attribute // the CM attribute, if the MAD got that far
	State  State     // the connection's state, for DropState
	Err    error     // the decoder's error, if any
}

// Error reads e.g. "ibcm: MAD dropped: ConnectReply: unknown comm ID".
func (e *DropError) Error() string {
	s := ErrDropped.Error()
	if e.Attr != 0 {
		s += ": " + e.Attr.String()
	}
	s += ": " + e.Reason.String()
	if e.Reason == DropState {
		s += " " + e.State.String()
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns ErrDropped and the decoder's error.
func (e *DropError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrDropped, e.Err}
	}
	return []error{ErrDropped}
}

// numCMAttrs is the number of CM message attributes, REQ (0x10) to APR (0x1A).
const numCMAttrs = int(AttrAPR-AttrREQ) + 1

// Counters count what the agent did. Sent and Received are indexed by
// attribute minus AttrREQ (Sent[0] REQs, Sent[3] REPs ...).
type Counters struct {
	MADsIn, MADsOut uint64
	Sent, Received  [numCMAttrs]uint64
	Drops           [numCMDropReasons]uint64
	Unsupported     uint64 // Get/Set MADs answered with status "unsupported"
	Duplicates      uint64 // duplicate REQ, REP, RTU, DREQ, SIDR_REQ answered or ignored
	Stale           uint64 // REQs and REPs rejected as stale connections
	Retries         uint64 // messages resent after a timeout
	Timeouts        uint64 // exchanges given up after the last retry
	Rejects         uint64 // REJs sent
	SendErrors      uint64 // MADs QP1 refused
	IDs             int    // CMIDs alive (TIMEWAIT included), a snapshot
}

// Handler receives a ID's events. It is called from Poll or HandleMAD
// (never from the consumer's calls on a ID) without the agent's lock held,
// one event at a time and in order; it may call the agent's methods, and must
// not block.
type Handler func(ev *Event)

// EventType says what a Event reports.
type EventType uint8

// Event types (the kernel's enum ib_cm_event_type).
const (
	// EventREQ: a REQ for a listened service ID: ID is a new ID in
	// REQ_RCVD, Listener the listener. Accept, Reject or Drop it.
	EventREQ EventType = iota + 1
	// EventREQError: the REQ went unanswered through every retry.
	EventREQError
	// EventMRA: the peer needs more time (ServiceTimeout).
	EventMRA
	// EventREJ: the peer rejected (Reason, ARI, PrivateData).
	EventREJ
	// EventREP: the REP of an active connection: move the QP to RTR and RTS
	// and call SendRTU, or Reject.
	EventREP
	// EventREPError: the REP went unanswered (no RTU) through every retry.
	EventREPError
	// EventRTU: the RTU arrived: the connection is established (passive side).
	EventRTU
	// EventUserEstablished: the RTU was overdue but the QP had received
	// packets: the connection is established (IBTA's communication-established
	// event).
	EventUserEstablished
	// EventDREQ: the peer disconnects: call Disconnect to answer with a DREP.
	EventDREQ
	// EventDREQError: the DREQ went unanswered: the connection is in TIMEWAIT.
	EventDREQError
	// EventDREP: the DREP of this side's DREQ: the connection is in TIMEWAIT.
	EventDREP
	// EventTimeWaitExit: TIMEWAIT is over; the ID is gone.
	EventTimeWaitExit
	// EventSIDRREQ: a SIDR_REQ for a listened service ID: ID is a new ID
	// in SIDR_REQ_RCVD. Answer with SIDRReply.
	EventSIDRREQ
	// EventSIDRREP: the answer to this side's SIDR_REQ; the ID is gone.
	EventSIDRREP
	// EventSIDRREQError: the SIDR_REQ went unanswered; the ID is gone.
	EventSIDRREQError
)

var cmEventNames = [...]string{"", "REQ", "REQ_ERROR", "MRA", "REJ", "REP", "REP_ERROR", "RTU",
	"USER_ESTABLISHED", "DREQ", "DREQ_ERROR", "DREP", "TIMEWAIT_EXIT", "SIDR_REQ", "SIDR_REP", "SIDR_REQ_ERROR"}

// String returns the event's name, e.g. "REQ_ERROR".
func (t EventType) String() string {
	if t > 0 && int(t) < len(cmEventNames) {
		return cmEventNames[t]
	}
	return "CMEventType(" + strconv.Itoa(int(t)) + ")"
}

// Event is one event of a ID. Slices are copies owned by the receiver.
type Event struct {
	Type     EventType
	ID       *ID
	Listener *Listener // EventREQ, EventSIDRREQ
	// From is where the message came from (EventREQ, EventSIDRREQ: the
	// address answers go to).
	From MADAddress
	// REQ is the request (EventREQ).
	REQ *REQFields
	// REP is the reply (EventREP).
	REP *REPFields
	// SIDRREQ and SIDRREP are the SIDR messages (EventSIDRREQ, EventSIDRREP).
	SIDRREQ *SIDRRequest
	SIDRREP *SIDRReply
	// Reason and ARI are a REJ's (EventREJ).
	Reason RejectReason
	ARI    []byte
	// ServiceTimeout is an MRA's (EventMRA).
	ServiceTimeout uint8
	// PrivateData is the message's private data (REJ, RTU, DREQ, DREP, MRA; the
	// REQ's, REP's and SIDR messages' are in their structs).
	PrivateData []byte
}

// SIDRRequest is a SIDR_REQ (IBTA Vol. 1 ch. 12, Service ID Resolution).
type SIDRRequest struct {
	RequestID   uint32
	PKey        uint16
	ServiceID   uint64
	PrivateData []byte
}

// SIDRStatus is the status of a SIDR_REP (IBTA Vol. 1 Table 120).
type SIDRStatus uint8

// SIDR_REP statuses.
const (
	SIDRSuccess            SIDRStatus = 0 // QPN and Q_Key are valid
	SIDRUnsupported        SIDRStatus = 1 // service ID not supported
	SIDRReject             SIDRStatus = 2 // rejected by the service provider
	SIDRNoQP               SIDRStatus = 3 // no QP available
	SIDRRedirect           SIDRStatus = 4 // redirect (ClassPortInfo in the additional information)
	SIDRUnsupportedVersion SIDRStatus = 5 // unsupported class version
)

// SIDRReply is a SIDR_REP.
type SIDRReply struct {
	RequestID      uint32
	Status         SIDRStatus
	QPN            uint32
	QKey           uint32
	ServiceID      uint64
	AdditionalInfo []byte // at most SIDRREPInfoLen bytes
	PrivateData    []byte // at most SIDRREPPrivateDataLen bytes
}

// ConnectParams is what Connect puts in the REQ.
type ConnectParams struct {
	// ServiceID names the service (CMAServiceID for rdma_cm's).
	ServiceID uint64
	// Path is the primary path; its RemoteGID is where the REQ goes. On RoCE
	// both LIDs are 0xFFFF (the permissive LID). A zero LocalACKTimeout is
	// LocalACKTimeout(PacketLifeTime, CAACKDelay) of the agent's configuration.
	Path PathFields
	// PathMTU is the path MTU in bytes (0: the device's).
	PathMTU int
	// PKey is the partition key (0: 0xFFFF).
	PKey uint16
	// QPN is the local QP; QPType RC (default) or UC.
	QPN    uint32
	QPType ibtransport.QPType
	// StartingPSN is the first PSN the local QP expects to receive: the
	// passive side starts sending with it.
	StartingPSN uint32
	// ResponderResources and InitiatorDepth are the local QP's READ/atomic
	// depths as responder and requester.
	ResponderResources, InitiatorDepth uint8
	// RetryCount and RNRRetryCount are the transport retries the passive side's
	// QP is to use (0..7; RNR 7 = infinite).
	RetryCount, RNRRetryCount uint8
	// SRQ says the local QP uses a shared receive queue.
	SRQ bool
	// FlowControl is the end-to-end flow control bit.
	FlowControl bool
	// PrivateData is up to REQPrivateDataLen bytes.
	PrivateData []byte
	// ResponseTimeout and MaxCMRetries override the agent's (0: the agent's).
	ResponseTimeout, MaxCMRetries uint8
}

// ReplyParams is what Accept puts in the REP.
type ReplyParams struct {
	// QPN is the local QP.
	QPN uint32
	// StartingPSN is the first PSN the local QP expects: the active side starts
	// sending with it.
	StartingPSN uint32
	// ResponderResources and InitiatorDepth are the local QP's depths.
	ResponderResources, InitiatorDepth uint8
	// RNRRetryCount is the RNR retry count the active side's QP is to use.
	RNRRetryCount uint8
	// FailoverAccepted is the REP's failover field (0, as rdma_cm sends).
	FailoverAccepted uint8
	// SRQ and FlowControl as in ConnectParams.
	SRQ, FlowControl bool
	// PrivateData is up to REPPrivateDataLen bytes.
	PrivateData []byte
	// QP, if set, is the connection's QP: when the RTU is overdue but the QP
	// has received packets, the connection counts as established
	// (EventUserEstablished), as IBTA's communication-established event does.
	QP *ibtransport.QP
}

// SIDRRequestParams is what SIDRRequest sends.
type SIDRRequestParams struct {
	ServiceID uint64
	// To is the peer's address.
	To MADAddress
	// PKey is the partition key (0: 0xFFFF).
	PKey uint16
	// PrivateData is up to SIDRREQPrivateDataLen bytes.
	PrivateData []byte
	// Timeout per try (0: 4.096 ms × 2^(CMResponseTimeout-8) ≈ 4 s, rdma_cm's)
	// and MaxCMRetries (0: the agent's).
	Timeout      time.Duration
	MaxCMRetries uint8
}

// Listener receives the REQs and SIDR_REQs of one service ID.
type Listener struct {
	agent     *Agent
	serviceID uint64
	handler   Handler
}

// ServiceID returns the listened service ID.
func (l *Listener) ServiceID() uint64 { return l.serviceID }

// Close stops listening. Connections already made are not affected.
func (l *Listener) Close() error {
	a := l.agent
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.listeners[l.serviceID] == l {
		delete(a.listeners, l.serviceID)
	}
	return nil
}

// cmKey names a peer's communication ID or QP: the value and its CA GUID.
type cmKey struct {
	v    uint32
	guid uint64
}

// sidrKey names a peer's SIDR request.
type sidrKey struct {
	id   uint32
	from netip.Addr
}

// ID is one connection (or SIDR exchange) of the agent: the kernel's
// ib_cm_id. It outlives the consumer's Destroy through DREQ_SENT and TIMEWAIT.
type ID struct {
	agent   *Agent
	handler Handler
	state   State
	active  bool
	gone    bool // removed from the agent

	localID, remoteID uint32
	remoteGUID        uint64
	localQPN          uint32
	remoteQPN         uint32
	serviceID         uint64
	tid               uint64
	peer              MADAddress
	ah                *ibtransport.AddressHandle

	// The message resent on timeout (REQ, REP, DREQ, SIDR_REQ) and the last
	// answer resent to duplicates (MRA, RTU, DREP, REJ, SIDR_REP).
	msg, resp []byte

	deadline   time.Time
	timerOn    bool
	tries      int // sends of msg so far
	maxRetries int
	timeout    time.Duration // per try
	mraWait    bool          // the current timer is an MRA's service timeout

	peerTimeout uint8         // exponent: how long the peer takes to answer
	activeWait  time.Duration // passive: how long the active side waits before resending its REQ
	plt         uint8         // packet lifetime exponent of the path
	ackTimeout  uint8
	watchQP     *ibtransport.QP
	notifyExit  bool // report TimeWaitExit
	sidrReq     sidrKey
	drepTID     uint64 // the TID of the DREQ a DREP answers
	listener    *Listener
}

// Agent is a device's IB CM: see the comment at the top of this file.
// Methods are safe for concurrent use.
type Agent struct {
	cfg   AgentConfig
	dev   *roce.Device
	gsi   *GSI
	guid  uint64
	clock netio.Clock

	mu        sync.Mutex
	rng       *rand.Rand
	tidHigh   uint32
	ids       map[uint32]*ID
	timed     map[*ID]struct{} // every ID with timerOn (and some without: dropped when next looked at)
	byRemote  map[cmKey]*ID    // passive connections by the REQ's comm ID
	byQPN     map[cmKey]*ID    // connections by the peer's QPN (stale detection)
	sidr      map[sidrKey]*ID
	listeners map[uint64]*Listener
	queries   []*neighborQuery
	counters  Counters
	closed    bool
	newCommID func() uint32 // tests set it
	scratch   [MADLen]byte

	queue      []cmDelivery
	delivering bool

	kick chan struct{}
	done chan struct{}
}

type cmDelivery struct {
	h  Handler
	ev Event
}

type neighborQuery struct {
	ip       netip.Addr
	deadline time.Time
	next     time.Time
	done     func(mac [6]byte, err error)
}

// neighborPollInterval is how often a pending neighbour resolution is asked again.
const neighborPollInterval = 10 * time.Millisecond

// NewAgent opens the device's QP1 and returns its CM agent. Drive it with
// Poll and NextDeadline (a simulation) or Run.
func NewAgent(cfg AgentConfig) (*Agent, error) {
	if cfg.Device == nil {
		return nil, fmt.Errorf("ibcm: cm agent needs a device: %w", ErrInvalid)
	}
	if cfg.Clock == nil {
		cfg.Clock = netio.SystemClock{}
	}
	def := func(v *uint8, d uint8) {
		if *v == 0 {
			*v = d
		}
	}
	def(&cfg.CMResponseTimeout, DefaultResponseTimeout)
	def(&cfg.MaxCMRetries, DefaultMaxRetries)
	def(&cfg.PacketLifeTime, DefaultPacketLifeTime)
	def(&cfg.CAACKDelay, DefaultCAACKDelay)
	def(&cfg.MRAServiceTimeout, DefaultMRAServiceTimeout)
	cfg.CMResponseTimeout = min(cfg.CMResponseTimeout, 31)
	cfg.MaxCMRetries = min(cfg.MaxCMRetries, 15)
	if cfg.TimeWait <= 0 {
		cfg.TimeWait = Timeout(LocalACKTimeout(cfg.PacketLifeTime, cfg.CAACKDelay))
	}
	seed := cfg.Seed
	if seed == 0 {
		var b [8]byte
		crand.Read(b[:])
		seed = binary.LittleEndian.Uint64(b[:]) | 1
	}
	g, err := OpenGSI(cfg.Device, cfg.GSI)
	if err != nil {
		return nil, err
	}
	a := &Agent{
		cfg: cfg, dev: cfg.Device, gsi: g, guid: NodeGUID(cfg.Device.MAC()), clock: cfg.Clock,
		rng:       rand.New(rand.NewPCG(seed, seed^0x6a09e667f3bcc908)),
		ids:       map[uint32]*ID{},
		timed:     map[*ID]struct{}{},
		byRemote:  map[cmKey]*ID{},
		byQPN:     map[cmKey]*ID{},
		sidr:      map[sidrKey]*ID{},
		listeners: map[uint64]*Listener{},
		kick:      make(chan struct{}, 1),
		done:      make(chan struct{}),
	}
	a.tidHigh = a.rng.Uint32()
	return a, nil
}

// roce.Device returns the agent's device.
func (a *Agent) Device() *roce.Device { return a.dev }

// GSI returns the agent's QP1.
func (a *Agent) GSI() *GSI { return a.gsi }

// GUID returns the node GUID the agent puts in its REQs and REPs.
func (a *Agent) GUID() uint64 { return a.guid }

// Config returns the configuration with its defaults filled in.
func (a *Agent) Config() AgentConfig { return a.cfg }

// Clock returns the agent's clock.
func (a *Agent) Clock() netio.Clock { return a.clock }

// Counters returns a snapshot of the counters.
func (a *Agent) Counters() Counters {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.counters
	c.IDs = len(a.ids)
	return c
}

// Close destroys QP1 and forgets every connection, without messages. Run
// returns. Idempotent.
func (a *Agent) Close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	for _, id := range a.ids {
		id.gone = true
		id.handler = nil
	}
	clear(a.ids)
	clear(a.timed)
	clear(a.byRemote)
	clear(a.byQPN)
	clear(a.sidr)
	clear(a.listeners)
	a.queries = nil
	close(a.done)
	a.mu.Unlock()
	return a.gsi.Close()
}

// signal wakes Run to recompute its deadline.
func (a *Agent) signal() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// Poll handles the MADs QP1 received and the timers that are due, and reports
// whether it did anything. Events are delivered before it returns.
func (a *Agent) Poll(now time.Time) (bool, error) {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return false, nil
	}
	n := a.gsi.Poll(func(b []byte, from MADAddress) { a.handleMAD(now, b, from) })
	fired := a.runTimers(now)
	a.mu.Unlock()
	a.deliver()
	return n > 0 || fired, nil
}

// NextDeadline returns the earliest timer of the agent.
func (a *Agent) NextDeadline() (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var t time.Time
	ok := false
	for id := range a.timed {
		if !id.timerOn || id.gone {
			delete(a.timed, id)
			continue
		}
		if !ok || id.deadline.Before(t) {
			t, ok = id.deadline, true
		}
	}
	for _, q := range a.queries {
		if !ok || q.next.Before(t) {
			t, ok = q.next, true
		}
	}
	return t, ok
}

// Run drives the agent with its clock until ctx ends or the agent is closed:
// it handles MADs as QP1 completes them and fires timers when due. The device
// must be driven too (roce.Device.Run).
func (a *Agent) Run(ctx context.Context) error {
	cq := a.gsi.CQ()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		cq.Notify(false)
		a.Poll(a.clock.Now())
		wait := time.Hour
		if t, ok := a.NextDeadline(); ok {
			wait = max(t.Sub(a.clock.Now()), 0)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-a.done:
			return nil
		case <-cq.Events():
		case <-a.kick:
		case <-timer.C:
		}
	}
}

// HandleMAD handles one received MAD from from, as Poll does for each MAD QP1
// receives: a way to feed MADs from elsewhere (a capture, a fuzzer). It
// returns a *DropError if the MAD was dropped, else nil (answered, handled,
// or a duplicate answered).
func (a *Agent) HandleMAD(now time.Time, mad []byte, from MADAddress) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return ErrClosed
	}
	err := a.handleMAD(now, mad, from)
	a.mu.Unlock()
	a.deliver()
	return err
}

// queueEvent queues ev for id's handler. mu is held.
func (a *Agent) queueEvent(id *ID, ev Event) {
	if id.handler == nil {
		return
	}
	ev.ID = id
	a.queue = append(a.queue, cmDelivery{h: id.handler, ev: ev})
}

// deliver calls the handlers of the queued events, in order, without mu. One
// goroutine delivers at a time; events queued meanwhile (by a handler's own
// calls, or another goroutine) are delivered by it.
func (a *Agent) deliver() {
	a.mu.Lock()
	if a.delivering {
		a.mu.Unlock()
		return
	}
	a.delivering = true
	for len(a.queue) > 0 {
		d := a.queue[0]
		a.queue[0] = cmDelivery{}
		a.queue = a.queue[1:]
		a.mu.Unlock()
		d.h(&d.ev)
		a.mu.Lock()
	}
	a.queue = nil
	a.delivering = false
	a.mu.Unlock()
}

// ResolveNeighbor asks the device's neighbour resolution for ip's MAC address
// every few milliseconds until it answers or timeout passes, and then calls
// done (from Poll, without the agent's lock). A device without neighbour
// resolution (one on a UDP socket) answers at once with a zero MAC.
func (a *Agent) ResolveNeighbor(ip netip.Addr, timeout time.Duration, done func(mac [6]byte, err error)) {
	a.mu.Lock()
	now := a.clock.Now()
	a.queries = append(a.queries, &neighborQuery{ip: ip, deadline: now.Add(timeout), next: now, done: done})
	a.mu.Unlock()
	a.signal()
}

// ErrNeighborTimeout is what ResolveNeighbor reports when the address did not
// resolve in time.
var ErrNeighborTimeout = errors.New("ibcm: neighbour resolution timed out")

// runQueries asks the pending neighbour resolutions again. mu is held; the
// results are delivered through the event queue.
func (a *Agent) runQueries(now time.Time) bool {
	if len(a.queries) == 0 {
		return false
	}
	nb := a.dev.Neighbors()
	kept := a.queries[:0]
	fired := false
	for _, q := range a.queries {
		if q.next.After(now) {
			kept = append(kept, q)
			continue
		}
		var mac [6]byte
		var err error
		if nb != nil {
			mac, err = nb.Resolve(now, q.ip)
		}
		if errors.Is(err, roce.ErrNeighborPending) {
			if now.Before(q.deadline) {
				q.next = now.Add(neighborPollInterval)
				if q.deadline.Before(q.next) {
					q.next = q.deadline
				}
				kept = append(kept, q)
				continue
			}
			err = fmt.Errorf("%w: %v", ErrNeighborTimeout, q.ip)
		}
		fired = true
		done := q.done
		a.queue = append(a.queue, cmDelivery{h: func(*Event) { done(mac, err) }})
	}
	clear(a.queries[len(kept):])
	a.queries = kept
	return fired
}

// ---- Listening and connecting ----

// Listen delivers the REQs and SIDR_REQs for serviceID to h (EventREQ,
// EventSIDRREQ); the new CMIDs' events go to h too until SetHandler.
func (a *Agent) Listen(serviceID uint64, h Handler) (*Listener, error) {
	if h == nil {
		return nil, fmt.Errorf("ibcm: listen without a handler: %w", ErrInvalid)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, ErrClosed
	}
	if _, ok := a.listeners[serviceID]; ok {
		return nil, fmt.Errorf("ibcm: listen on %#016x: %w", serviceID, ErrBusy)
	}
	l := &Listener{agent: a, serviceID: serviceID, handler: h}
	a.listeners[serviceID] = l
	return l, nil
}

// allocID makes a ID with a fresh local communication ID. mu is held.
func (a *Agent) allocID(h Handler) *ID {
	var lid uint32
	for {
		if a.newCommID != nil {
			lid = a.newCommID()
		} else {
			lid = a.rng.Uint32()
		}
		if _, used := a.ids[lid]; lid != 0 && !used {
			break
		}
	}
	id := &ID{agent: a, handler: h, localID: lid, msg: make([]byte, MADLen)}
	id.tid = uint64(a.tidHigh)<<32 | uint64(lid)
	a.ids[lid] = id
	return id
}

// cmTry is the time to wait for an answer to a message the peer answers within
// 4.096 µs × 2^peerTimeout, over a path with packet lifetime plt: the peer's
// time plus the round trip.
func cmTry(peerTimeout, plt uint8) time.Duration {
	return Timeout(peerTimeout) + 2*Timeout(plt)
}

// Connect sends a REQ with p and returns the active ID in REQ_SENT; its
// events go to h.
func (a *Agent) Connect(p *ConnectParams, h Handler) (*ID, error) {
	if len(p.PrivateData) > REQPrivateDataLen {
		return nil, fmt.Errorf("ibcm: REQ private data %d > %d: %w", len(p.PrivateData), REQPrivateDataLen, ErrInvalid)
	}
	tst := uint8(0)
	switch p.QPType {
	case 0, ibtransport.QPTypeRC:
	case ibtransport.QPTypeUC:
		tst = 1
	default:
		return nil, fmt.Errorf("ibcm: connect a %s QP: %w", p.QPType, ErrInvalid)
	}
	mtu := p.PathMTU
	if mtu == 0 {
		mtu = a.dev.PathMTU()
	}
	code, ok := mtuCode(mtu)
	if !ok {
		return nil, fmt.Errorf("ibcm: path MTU %d: %w", mtu, ErrInvalid)
	}
	remote := netip.AddrFrom16(p.Path.RemoteGID).Unmap()
	local := netip.AddrFrom16(p.Path.LocalGID).Unmap()
	to := MADAddress{Remote: remote, Local: local}
	ah, err := a.gsi.AddressHandle(to)
	if err != nil {
		return nil, fmt.Errorf("ibcm: connect to %v: %w", remote, err)
	}
	a.mu.Lock()
	defer a.signal()
	defer a.mu.Unlock()
	id, err := a.allocActive(h, p.ServiceID, to, ah)
	if err != nil {
		return nil, err
	}
	id.localQPN = p.QPN
	rt := p.ResponseTimeout
	if rt == 0 {
		rt = a.cfg.CMResponseTimeout
	}
	retries := a.cmRetries(p.MaxCMRetries)
	id.peerTimeout, id.plt = rt, a.cfg.PacketLifeTime
	path := p.Path
	if path.LocalACKTimeout == 0 {
		path.LocalACKTimeout = LocalACKTimeout(a.cfg.PacketLifeTime, a.cfg.CAACKDelay)
	}
	id.ackTimeout = path.LocalACKTimeout
	m := MAD(id.msg)
	Encode(m, AttrREQ, id.tid)
	m.REQ().Encode(&REQFields{
		LocalCommID:             id.localID,
		ServiceID:               p.ServiceID,
		LocalCAGUID:             a.guid,
		LocalQPN:                p.QPN,
		ResponderResources:      p.ResponderResources,
		InitiatorDepth:          p.InitiatorDepth,
		RemoteCMResponseTimeout: rt,
		TransportServiceType:    tst,
		EndToEndFlowControl:     p.FlowControl,
		StartingPSN:             p.StartingPSN & ibtransport.PSNMask,
		LocalCMResponseTimeout:  a.cfg.CMResponseTimeout,
		RetryCount:              min(p.RetryCount, 7),
		PKey:                    pkeyOrDefault(p.PKey),
		PathMTU:                 code,
		RNRRetryCount:           min(p.RNRRetryCount, 7),
		MaxCMRetries:            retries,
		SRQ:                     p.SRQ,
		Primary:                 path,
		PrivateData:             p.PrivateData,
	})
	id.state = StateREQSent
	id.maxRetries = int(retries)
	id.timeout = cmTry(rt, id.plt)
	a.sendMsg(id, a.clock.Now())
	return id, nil
}

// SIDRRequest sends a SIDR_REQ with p and returns the ID in SIDR_REQ_SENT.
func (a *Agent) SIDRRequest(p *SIDRRequestParams, h Handler) (*ID, error) {
	if len(p.PrivateData) > SIDRREQPrivateDataLen {
		return nil, fmt.Errorf("ibcm: SIDR_REQ private data %d > %d: %w", len(p.PrivateData), SIDRREQPrivateDataLen, ErrInvalid)
	}
	ah, err := a.gsi.AddressHandle(p.To)
	if err != nil {
		return nil, fmt.Errorf("ibcm: SIDR to %v: %w", p.To.Remote, err)
	}
	a.mu.Lock()
	defer a.signal()
	defer a.mu.Unlock()
	id, err := a.allocActive(h, p.ServiceID, p.To, ah)
	if err != nil {
		return nil, err
	}
	m := MAD(id.msg)
	Encode(m, AttrSIDRREQ, id.tid)
	r := m.SIDRREQ()
	r.SetRequestID(id.localID)
	r.SetPKey(pkeyOrDefault(p.PKey))
	r.SetServiceID(p.ServiceID)
	copy(r.PrivateData(), p.PrivateData)
	id.maxRetries = int(a.cmRetries(p.MaxCMRetries))
	id.timeout = p.Timeout
	if id.timeout <= 0 {
		id.timeout = a.sidrTimeout()
	}
	id.state = StateSIDRREQSent
	a.sendMsg(id, a.clock.Now())
	return id, nil
}

// allocActive makes the ID of an active exchange (Connect's REQ, SIDRRequest's
// SIDR_REQ) for service serviceID with the peer at to, reached through ah; or
// ErrClosed once the agent is closed. mu is held.
func (a *Agent) allocActive(h Handler, serviceID uint64, to MADAddress, ah *ibtransport.AddressHandle) (*ID, error) {
	if a.closed {
		return nil, ErrClosed
	}
	id := a.allocID(h)
	id.active = true
	id.serviceID = serviceID
	id.peer, id.ah = to, ah
	return id, nil
}

// cmRetries is a request's MaxCMRetries: its own, or the agent's for 0.
func (a *Agent) cmRetries(n uint8) uint8 {
	if n == 0 {
		return a.cfg.MaxCMRetries
	}
	return n
}

// pkeyOrDefault is a request's P_Key: its own, or the default full-member
// 0xFFFF for 0.
func pkeyOrDefault(pkey uint16) uint16 {
	if pkey == 0 {
		return 0xFFFF
	}
	return pkey
}

// mtuCode returns the IBTA MTU code of an MTU in bytes.
func mtuCode(mtu int) (uint8, bool) {
	for c, m := uint8(1), 256; c <= 5; c, m = c+1, m*2 {
		if m == mtu {
			return c, true
		}
	}
	return 0, false
}

// MTUFromCode returns the MTU in bytes of an IBTA MTU code (1 = 256 ... 5 =
// 4096), or 0 for another code.
func MTUFromCode(code uint8) int {
	if code < 1 || code > 5 {
		return 0
	}
	return 128 << code
}

// ---- Sending ----

// send posts m to id's peer. mu is held.
func (a *Agent) send(id *ID, m []byte) {
	a.sendTo(m, id.ah, id.peer.RemoteQPN)
}

// sendTo posts m to ah. mu is held.
func (a *Agent) sendTo(m []byte, ah *ibtransport.AddressHandle, qpn uint32) {
	a.counters.MADsOut++
	if attr := MAD(m).Attribute(); attr >= AttrREQ && attr <= AttrAPR && MAD(m).MgmtClass() == MgmtClassCM {
		a.counters.Sent[attr-AttrREQ]++
	}
	if err := a.gsi.SendAH(m, ah, qpn); err != nil {
		a.counters.SendErrors++
	}
}

// reply posts m to from (an address of a received MAD). mu is held.
func (a *Agent) reply(m []byte, from MADAddress) {
	ah, err := a.gsi.AddressHandle(from)
	if err != nil {
		a.counters.SendErrors++
		return
	}
	a.sendTo(m, ah, from.RemoteQPN)
}

// sendMsg sends id.msg and arms the retry timer. mu is held.
func (a *Agent) sendMsg(id *ID, now time.Time) {
	id.tries = 1
	id.mraWait = false
	a.send(id, id.msg)
	a.arm(id, now, id.timeout)
}

func (a *Agent) arm(id *ID, now time.Time, d time.Duration) {
	id.deadline = now.Add(d)
	id.timerOn = true
	a.timed[id] = struct{}{}
}

// setResp records m as id's answer to duplicates and sends it. mu is held.
func (a *Agent) sendResp(id *ID, m []byte) {
	if id.resp == nil {
		id.resp = make([]byte, MADLen)
	}
	copy(id.resp, m)
	a.send(id, id.resp)
}

// buildREJ writes a REJ into a.scratch. mu is held.
func (a *Agent) buildREJ(tid uint64, local, remote uint32, msg uint8, reason RejectReason, ari, pd []byte) MAD {
	m := MAD(a.scratch[:])
	Encode(m, AttrREJ, tid)
	j := m.REJ()
	j.SetLocalCommID(local)
	j.SetRemoteCommID(remote)
	j.SetMessageRejected(msg)
	j.SetReason(reason)
	j.SetARI(ari)
	copy(j.PrivateData(), pd)
	a.counters.Rejects++
	return m
}

// REJ's Message Rejected values.
const (
	cmRejectedREQ   = 0
	cmRejectedREP   = 1
	cmRejectedOther = 2
)

// rejectID sends a REJ for id and records it as id's answer. mu is held.
func (a *Agent) rejectID(id *ID, reason RejectReason, ari, pd []byte) {
	msg := uint8(cmRejectedOther)
	switch id.state {
	case StateREQRcvd, StateMRAREQSent:
		msg = cmRejectedREQ
	case StateREPRcvd, StateMRAREPSent:
		msg = cmRejectedREP
	}
	a.sendResp(id, a.buildREJ(id.tid, id.localID, id.remoteID, msg, reason, ari, pd))
}

func (a *Agent) guidARI() []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], a.guid)
	return b[:]
}

// ---- State changes ----

// remove forgets id. mu is held.
func (a *Agent) remove(id *ID) {
	if id.gone {
		return
	}
	id.gone = true
	id.timerOn = false
	id.state = StateIdle
	if a.ids[id.localID] == id {
		delete(a.ids, id.localID)
	}
	if k := (cmKey{id.remoteID, id.remoteGUID}); !id.active && a.byRemote[k] == id {
		delete(a.byRemote, k)
	}
	if k := (cmKey{id.remoteQPN, id.remoteGUID}); a.byQPN[k] == id {
		delete(a.byQPN, k)
	}
	if a.sidr[id.sidrReq] == id {
		delete(a.sidr, id.sidrReq)
	}
}

// enterTimeWait moves id to TIMEWAIT. mu is held.
func (a *Agent) enterTimeWait(id *ID, now time.Time) {
	id.state = StateTimeWait
	a.arm(id, now, a.cfg.TimeWait)
}

// runTimers fires the timers that are due. mu is held.
func (a *Agent) runTimers(now time.Time) bool {
	fired := a.runQueries(now)
	var due []*ID
	for id := range a.timed {
		if !id.timerOn || id.gone {
			delete(a.timed, id) // disarmed since: only armed IDs are scanned
			continue
		}
		if !id.deadline.After(now) {
			due = append(due, id)
		}
	}
	// Map order is random: fire in deadline order, then by ID, to stay deterministic.
	sortIDs(due)
	for _, id := range due {
		if id.timerOn && !id.gone {
			fired = true
			a.expire(id, now)
		}
	}
	return fired
}

func sortIDs(ids []*ID) {
	for i := 1; i < len(ids); i++ {
		for j := i; j > 0 && idBefore(ids[j], ids[j-1]); j-- {
			ids[j], ids[j-1] = ids[j-1], ids[j]
		}
	}
}

func idBefore(x, y *ID) bool {
	if !x.deadline.Equal(y.deadline) {
		return x.deadline.Before(y.deadline)
	}
	return x.localID < y.localID
}

// expire handles id's timer. mu is held.
func (a *Agent) expire(id *ID, now time.Time) {
	id.timerOn = false
	retry := func() bool {
		if id.tries > id.maxRetries {
			return false
		}
		id.tries++
		id.mraWait = false
		a.counters.Retries++
		a.send(id, id.msg)
		a.arm(id, now, id.timeout)
		return true
	}
	switch id.state {
	case StateREQSent, StateMRAREQRcvd:
		if retry() {
			return
		}
		a.counters.Timeouts++
		// IBTA Vol. 1 ch. 12: the active side that gives up says so with REJ(timeout),
		// its CA GUID as the ARI.
		a.rejectID(id, RejTimeout, a.guidARI(), nil)
		a.queueEvent(id, Event{Type: EventREQError})
		a.remove(id)
	case StateREPSent, StateMRAREPRcvd:
		if id.watchQP != nil && id.watchQP.Counters().PacketsIn > 0 {
			id.state = StateEstablished
			id.notifyExit = true
			a.queueEvent(id, Event{Type: EventUserEstablished})
			return
		}
		if retry() {
			return
		}
		a.counters.Timeouts++
		a.rejectID(id, RejTimeout, a.guidARI(), nil)
		a.queueEvent(id, Event{Type: EventREPError})
		a.remove(id)
	case StateDREQSent:
		if retry() {
			return
		}
		a.counters.Timeouts++
		a.enterTimeWait(id, now)
		a.queueEvent(id, Event{Type: EventDREQError})
	case StateSIDRREQSent:
		if retry() {
			return
		}
		a.counters.Timeouts++
		a.queueEvent(id, Event{Type: EventSIDRREQError})
		a.remove(id)
	case StateTimeWait, StateSIDRREQRcvd, StateIdle:
		notify := id.notifyExit
		a.remove(id)
		if notify {
			a.queueEvent(id, Event{Type: EventTimeWaitExit})
		}
	}
}

// ---- Receiving ----

func (a *Agent) drop(reason DropReason, attr Attribute, state State, err error) error {
	a.counters.Drops[reason]++
	return &DropError{Reason: reason, Attr: attr, State: state, Err: err}
}

// MAD status codes (IBTA Vol. 1 ch. 13, the MAD Status field's invalid-field code
// in bits 2-4).
const (
	madStatusBadVersion        = 1 << 2
	madStatusUnsupportedMethod = 2 << 2
	madStatusUnsupportedAttr   = 3 << 2
)

// answerUnsupported answers a Get or Set nobody serves with a GetResp of
// status, as a GSI must (IBTA Vol. 1 ch. 13; the kernel's MAD layer answers
// every unmatched Get and Set so). Other methods get no answer. mu is held.
func (a *Agent) answerUnsupported(m MAD, from MADAddress, status uint16) {
	if meth := m.Method(); meth != MADMethodGet && meth != MADMethodSet {
		return
	}
	r := MAD(a.scratch[:])
	copy(r, m)
	r.SetMethod(MADMethodGetResp)
	r.SetStatus(status)
	a.counters.Unsupported++
	a.reply(r, from)
}

// handleMAD dispatches one received MAD. mu is held.
func (a *Agent) handleMAD(now time.Time, b []byte, from MADAddress) error {
	a.counters.MADsIn++
	m, err := DecodeMAD(b)
	if err != nil {
		return a.drop(DropMalformed, 0, 0, err)
	}
	if m.MgmtClass() != MgmtClassCM {
		a.answerUnsupported(m, from, madStatusUnsupportedAttr)
		return a.drop(DropNotCM, 0, 0, nil)
	}
	if m.ClassVersion() != ClassVersion {
		a.answerUnsupported(m, from, madStatusBadVersion)
		return a.drop(DropClassVersion, 0, 0, Check(m))
	}
	attr := m.Attribute()
	if m.Method() != MADMethodSend {
		status := uint16(madStatusUnsupportedMethod)
		if attr.Known() {
			status = madStatusUnsupportedAttr
		}
		a.answerUnsupported(m, from, status)
		return a.drop(DropMethod, attr, 0, nil)
	}
	if attr >= AttrREQ && attr <= AttrAPR {
		a.counters.Received[attr-AttrREQ]++
	}
	switch attr {
	case AttrREQ:
		return a.handleREQ(now, m, from)
	case AttrMRA, AttrREJ, AttrREP, AttrRTU, AttrDREP:
		// These start with the sender's and our communication IDs (cmIDs):
		// the ID they address is found, and checked, first.
		ids := cmIDs(m.Data())
		id, err := a.lookup(attr, ids.remote(), ids.local(), from)
		if err != nil {
			return err
		}
		switch attr {
		case AttrMRA:
			return a.handleMRA(now, id, m.MRA())
		case AttrREJ:
			return a.handleREJ(now, id, m.REJ())
		case AttrREP:
			return a.handleREP(id, m.REP())
		case AttrRTU:
			return a.handleRTU(id, m.RTU())
		default:
			return a.handleDREP(now, id, m.DREP())
		}
	case AttrDREQ:
		return a.handleDREQ(now, m, from)
	case AttrSIDRREQ:
		return a.handleSIDRREQ(now, m, from)
	case AttrSIDRREP:
		return a.handleSIDRREP(m, from)
	}
	// ClassPortInfo, LAP and APR (alternate paths do not exist on RoCE), and
	// attributes IBTA does not define.
	return a.drop(DropAttribute, attr, 0, Check(m))
}

// lookup finds the ID a message addresses: by its Remote Comm ID (our
// local ID), checking the sender's Local Comm ID (if the ID knows the
// peer's) and its address. mu is held.
func (a *Agent) lookup(attr Attribute, ours, theirs uint32, from MADAddress) (*ID, error) {
	id := a.ids[ours]
	if id == nil {
		return nil, a.drop(DropUnknownID, attr, 0, nil)
	}
	if id.remoteID != 0 && theirs != 0 && theirs != id.remoteID {
		return nil, a.drop(DropWrongPeer, attr, id.state, nil)
	}
	if from.Remote.IsValid() && id.peer.Remote.IsValid() && from.Remote != id.peer.Remote {
		return nil, a.drop(DropWrongPeer, attr, id.state, nil)
	}
	return id, nil
}

func (a *Agent) ours(gid [16]byte) (int, bool) {
	g := netip.AddrFrom16(gid)
	for i, o := range a.dev.GIDs() {
		if o == g || (o.Unmap() == g.Unmap() && o.Unmap().Is4()) {
			return i, true
		}
	}
	return 0, false
}

func (a *Agent) handleREQ(now time.Time, m MAD, from MADAddress) error {
	r := m.REQ()
	key := cmKey{r.LocalCommID(), r.LocalCAGUID()}
	if id := a.byRemote[key]; id != nil {
		return a.duplicateREQ(now, id)
	}
	qk := cmKey{r.LocalQPN(), r.LocalCAGUID()}
	if old := a.byQPN[qk]; old != nil {
		// IBTA Vol. 1 ch. 12 (stale connections): a REQ from a QP that still
		// has a connection here is stale: reject it, and end the old
		// connection if it is up.
		a.counters.Stale++
		a.reply(a.buildREJ(m.TransactionID(), 0, r.LocalCommID(), cmRejectedREQ, RejStaleConnection, nil, nil), from)
		if old.state == StateEstablished {
			a.sendDREQ(old, now, nil)
		}
		return nil
	}
	rej := func(reason RejectReason, ari []byte) error {
		a.reply(a.buildREJ(m.TransactionID(), 0, r.LocalCommID(), cmRejectedREQ, reason, ari, nil), from)
		return nil
	}
	l := a.listeners[r.ServiceID()]
	if l == nil {
		return rej(RejInvalidServiceID, nil)
	}
	if tst := r.TransportServiceType(); tst > 1 || r.ExtendedTransportType() != 0 {
		return rej(RejInvalidTransportType, nil)
	}
	if mtu := MTUFromCode(r.PathMTU()); mtu == 0 || mtu > a.dev.PathMTU() {
		code, _ := mtuCode(a.dev.PathMTU())
		return rej(RejInvalidMTU, []byte{code << 4})
	}
	path := r.PrimaryPath()
	local := path.RemoteGID()
	sgid, ok := a.ours(local)
	if !ok {
		return rej(RejInvalidGID, local[:])
	}
	id := a.allocID(l.handler)
	id.listener = l
	id.serviceID = r.ServiceID()
	id.remoteID, id.remoteGUID = r.LocalCommID(), r.LocalCAGUID()
	id.remoteQPN = r.LocalQPN()
	id.tid = m.TransactionID()
	id.peer = from
	if !id.peer.Remote.IsValid() {
		id.peer.Remote = netip.AddrFrom16(path.LocalGID()).Unmap()
	}
	id.peer.Local = netip.AddrFrom16(local).Unmap()
	ah, err := a.gsi.AddressHandle(id.peer)
	if err != nil {
		a.remove(id)
		return rej(RejInvalidGID, local[:])
	}
	if a.dev.GIDs()[sgid].Unmap().Is4() == id.peer.Remote.Is4() {
		ah.SGIDIndex = uint8(sgid)
	}
	id.ah = ah
	id.peerTimeout = r.LocalCMResponseTimeout()
	id.ackTimeout = path.LocalACKTimeout()
	// The kernel derives the path's packet lifetime from the REQ's local ACK
	// timeout the same way (one less).
	id.plt = id.ackTimeout - min(id.ackTimeout, 1)
	id.maxRetries = int(r.MaxCMRetries())
	id.activeWait = cmTry(r.RemoteCMResponseTimeout(), id.plt)
	id.state = StateREQRcvd
	a.byRemote[key] = id
	a.byQPN[qk] = id
	f := r.Fields()
	f.PrivateData = bytes.Clone(f.PrivateData)
	a.queueEvent(id, Event{Type: EventREQ, Listener: l, From: id.peer, REQ: &f})
	return nil
}

// duplicateREQ answers a REQ seen before (IBTA Vol. 1 ch. 12; the kernel's
// cm_dup_req_handler). mu is held.
func (a *Agent) duplicateREQ(now time.Time, id *ID) error {
	a.counters.Duplicates++
	switch id.state {
	case StateREQRcvd:
		// The consumer has not answered in the active side's time: ask it for
		// more with an MRA.
		a.sendMRA(id, 0, a.cfg.MRAServiceTimeout, nil)
		id.state = StateMRAREQSent
	case StateMRAREQSent:
		a.send(id, id.resp)
	case StateREPSent, StateMRAREPRcvd:
		a.send(id, id.msg)
	case StateTimeWait:
		if id.resp != nil && MAD(id.resp).Attribute() == AttrREJ {
			a.send(id, id.resp) // the REJ it got before
		} else {
			a.counters.Stale++
			a.send(id, a.buildREJ(id.tid, id.localID, id.remoteID, cmRejectedREQ, RejStaleConnection, nil, nil))
		}
	}
	return nil
}

func (a *Agent) sendMRA(id *ID, which uint8, timeout uint8, pd []byte) {
	m := MAD(a.scratch[:])
	Encode(m, AttrMRA, id.tid)
	r := m.MRA()
	r.SetLocalCommID(id.localID)
	r.SetRemoteCommID(id.remoteID)
	r.SetMessageMRAed(which)
	r.SetServiceTimeout(timeout)
	copy(r.PrivateData(), pd)
	a.sendResp(id, m)
}

func (a *Agent) handleMRA(now time.Time, id *ID, r MRA) error {
	switch {
	case r.MessageMRAed() == 0 && (id.state == StateREQSent || id.state == StateMRAREQRcvd):
		id.state = StateMRAREQRcvd
	case r.MessageMRAed() == 1 && (id.state == StateREPSent || id.state == StateMRAREPRcvd):
		id.state = StateMRAREPRcvd
	default:
		return a.drop(DropState, AttrMRA, id.state, nil)
	}
	if id.remoteID == 0 {
		id.remoteID = r.LocalCommID()
	}
	// The message is resent (retries continue) only after the time the peer
	// asked for.
	id.mraWait = true
	a.arm(id, now, Timeout(r.ServiceTimeout())+2*Timeout(id.plt))
	a.queueEvent(id, Event{Type: EventMRA, ServiceTimeout: r.ServiceTimeout(), PrivateData: bytes.Clone(r.PrivateData())})
	return nil
}

func (a *Agent) handleREJ(now time.Time, id *ID, r REJ) error {
	ev := Event{Type: EventREJ, Reason: r.Reason(), ARI: bytes.Clone(r.ARI()), PrivateData: bytes.Clone(r.PrivateData())}
	switch id.state {
	case StateREQSent, StateMRAREQRcvd, StateREQRcvd, StateMRAREQSent, StateREPRcvd, StateMRAREPSent:
		a.queueEvent(id, ev)
		if r.Reason() == RejStaleConnection {
			a.enterTimeWait(id, now)
		} else {
			a.remove(id)
		}
	case StateREPSent, StateMRAREPRcvd, StateEstablished:
		a.queueEvent(id, ev)
		a.enterTimeWait(id, now)
	default:
		return a.drop(DropState, AttrREJ, id.state, nil)
	}
	return nil
}

func (a *Agent) handleREP(id *ID, r REP) error {
	switch id.state {
	case StateREQSent, StateMRAREQRcvd:
	case StateEstablished:
		a.counters.Duplicates++
		if id.resp != nil {
			a.send(id, id.resp) // the RTU it missed
		}
		return nil
	case StateMRAREPSent:
		a.counters.Duplicates++
		a.send(id, id.resp)
		return nil
	default:
		return a.drop(DropState, AttrREP, id.state, nil)
	}
	qk := cmKey{r.LocalQPN(), r.LocalCAGUID()}
	if old := a.byQPN[qk]; old != nil && old != id {
		a.counters.Stale++
		id.remoteID = r.LocalCommID()
		id.state = StateREPRcvd
		a.rejectID(id, RejStaleConnection, nil, nil)
		a.queueEvent(id, Event{Type: EventREJ, Reason: RejStaleConnection})
		a.remove(id)
		return nil
	}
	id.remoteID, id.remoteGUID, id.remoteQPN = r.LocalCommID(), r.LocalCAGUID(), r.LocalQPN()
	a.byQPN[qk] = id
	id.state = StateREPRcvd
	id.timerOn = false
	f := r.Fields()
	f.PrivateData = bytes.Clone(f.PrivateData)
	a.queueEvent(id, Event{Type: EventREP, REP: &f})
	return nil
}

func (a *Agent) handleRTU(id *ID, r RTU) error {
	switch id.state {
	case StateREPSent, StateMRAREPRcvd:
		id.state = StateEstablished
		id.timerOn = false
		id.notifyExit = true
		a.queueEvent(id, Event{Type: EventRTU, PrivateData: bytes.Clone(r.PrivateData())})
	case StateEstablished:
		a.counters.Duplicates++
	default:
		return a.drop(DropState, AttrRTU, id.state, nil)
	}
	return nil
}

func (a *Agent) handleDREQ(now time.Time, m MAD, from MADAddress) error {
	r := m.DREQ()
	id := a.ids[r.RemoteCommID()]
	if id == nil {
		// The kernel answers a DREQ for a connection it no longer knows with a
		// DREP all the same, so that the peer's disconnect completes.
		a.counters.Drops[DropUnknownID]++
		d := MAD(a.scratch[:])
		Encode(d, AttrDREP, m.TransactionID())
		d.DREP().SetLocalCommID(r.RemoteCommID())
		d.DREP().SetRemoteCommID(r.LocalCommID())
		a.reply(d, from)
		return &DropError{Reason: DropUnknownID, Attr: AttrDREQ}
	}
	id, err := a.lookup(AttrDREQ, r.RemoteCommID(), r.LocalCommID(), from)
	if err != nil {
		return err
	}
	if r.RemoteQPN() != id.localQPN {
		return a.drop(DropBadMessage, AttrDREQ, id.state, nil)
	}
	ev := Event{Type: EventDREQ, PrivateData: bytes.Clone(r.PrivateData())}
	switch id.state {
	case StateEstablished, StateREPSent, StateMRAREPRcvd:
		id.state = StateDREQRcvd
		id.timerOn = false
		id.notifyExit = true
		id.drepTID = m.TransactionID()
		a.queueEvent(id, ev)
	case StateDREQSent:
		// Both sides disconnect at once: answer, and wait out the time.
		id.drepTID = m.TransactionID()
		a.sendDREP(id, nil)
		a.enterTimeWait(id, now)
		a.queueEvent(id, ev)
	case StateDREQRcvd:
		a.counters.Duplicates++
	case StateTimeWait:
		a.counters.Duplicates++
		id.drepTID = m.TransactionID()
		if id.resp != nil && MAD(id.resp).Attribute() == AttrDREP {
			a.send(id, id.resp)
		} else {
			a.sendDREP(id, nil)
		}
	default:
		return a.drop(DropState, AttrDREQ, id.state, nil)
	}
	return nil
}

func (a *Agent) handleDREP(now time.Time, id *ID, r DREP) error {
	switch id.state {
	case StateDREQSent:
		a.enterTimeWait(id, now)
		a.queueEvent(id, Event{Type: EventDREP, PrivateData: bytes.Clone(r.PrivateData())})
	case StateTimeWait:
		a.counters.Duplicates++
	default:
		return a.drop(DropState, AttrDREP, id.state, nil)
	}
	return nil
}

// sidrHold is how long a passive SIDR exchange stays to answer duplicates:
// the whole retry budget of a requester that times out as this agent does
// (a SIDR_REQ does not say its timeout).
func (a *Agent) sidrHold() time.Duration {
	return time.Duration(a.cfg.MaxCMRetries+1) * a.sidrTimeout()
}

// sidrTimeout is the time a SIDR_REQ waits for its reply: rdma_cm's
// 1 << (CMA_CM_RESPONSE_TIMEOUT - 8) milliseconds.
func (a *Agent) sidrTimeout() time.Duration {
	return time.Millisecond << max(int(a.cfg.CMResponseTimeout)-8, 0)
}

func (a *Agent) handleSIDRREQ(now time.Time, m MAD, from MADAddress) error {
	r := m.SIDRREQ()
	key := sidrKey{r.RequestID(), from.Remote}
	if id := a.sidr[key]; id != nil {
		a.counters.Duplicates++
		if id.resp != nil {
			a.send(id, id.resp)
		}
		return nil
	}
	l := a.listeners[r.ServiceID()]
	if l == nil {
		p := MAD(a.scratch[:])
		Encode(p, AttrSIDRREP, m.TransactionID())
		p.SIDRREP().SetRequestID(r.RequestID())
		p.SIDRREP().SetStatus(uint8(SIDRUnsupported))
		p.SIDRREP().SetServiceID(r.ServiceID())
		a.reply(p, from)
		return nil
	}
	ah, err := a.gsi.AddressHandle(from)
	if err != nil {
		return a.drop(DropBadMessage, AttrSIDRREQ, 0, err)
	}
	id := a.allocID(l.handler)
	id.listener = l
	id.serviceID = r.ServiceID()
	id.remoteID = r.RequestID()
	id.tid = m.TransactionID()
	id.peer, id.ah = from, ah
	id.sidrReq = key
	id.state = StateSIDRREQRcvd
	a.sidr[key] = id
	req := &SIDRRequest{RequestID: r.RequestID(), PKey: r.PKey(), ServiceID: r.ServiceID(), PrivateData: bytes.Clone(r.PrivateData())}
	a.queueEvent(id, Event{Type: EventSIDRREQ, Listener: l, From: from, SIDRREQ: req})
	return nil
}

func (a *Agent) handleSIDRREP(m MAD, from MADAddress) error {
	r := m.SIDRREP()
	id, err := a.lookup(AttrSIDRREP, r.RequestID(), 0, from)
	if err != nil {
		return err
	}
	if id.state != StateSIDRREQSent {
		return a.drop(DropState, AttrSIDRREP, id.state, nil)
	}
	rep := &SIDRReply{RequestID: r.RequestID(), Status: SIDRStatus(r.Status()), QPN: r.QPN(), QKey: r.QKey(),
		ServiceID: r.ServiceID(), AdditionalInfo: bytes.Clone(r.AdditionalInfo()), PrivateData: bytes.Clone(r.PrivateData())}
	a.queueEvent(id, Event{Type: EventSIDRREP, From: from, SIDRREP: rep})
	a.remove(id)
	return nil
}

// ---- The consumer's calls on a ID ----

// lockLive locks the agent for a call on id. The caller unlocks.
func (id *ID) lockLive() error {
	a := id.agent
	a.mu.Lock()
	if a.closed || id.gone {
		a.mu.Unlock()
		return ErrClosed
	}
	return nil
}

// unlock ends a call on id. The consumer's calls cause no events of their
// own, and do not deliver others': a consumer may call them while holding a
// lock its handler takes.
func (id *ID) unlock() {
	a := id.agent
	a.mu.Unlock()
	a.signal()
}

func (id *ID) badState(op string) error {
	return fmt.Errorf("ibcm: %s in %s: %w", op, id.state, ErrState)
}

// State returns the current state.
func (id *ID) State() State {
	id.agent.mu.Lock()
	defer id.agent.mu.Unlock()
	return id.state
}

// LocalCommID returns this side's communication ID (the request ID for SIDR).
func (id *ID) LocalCommID() uint32 { return id.localID }

// RemoteCommID returns the peer's communication ID (0 until it is known).
func (id *ID) RemoteCommID() uint32 {
	id.agent.mu.Lock()
	defer id.agent.mu.Unlock()
	return id.remoteID
}

// Peer returns the peer's address.
func (id *ID) Peer() MADAddress { return id.peer }

// ServiceID returns the connection's service ID.
func (id *ID) ServiceID() uint64 { return id.serviceID }

// SetHandler sends id's later events to h (nil: none).
func (id *ID) SetHandler(h Handler) {
	id.agent.mu.Lock()
	id.handler = h
	id.agent.mu.Unlock()
}

// Accept answers the REQ with a REP (REQ_RCVD or MRA_REQ_SENT → REP_SENT).
func (id *ID) Accept(p *ReplyParams) error {
	if len(p.PrivateData) > REPPrivateDataLen {
		return fmt.Errorf("ibcm: REP private data %d > %d: %w", len(p.PrivateData), REPPrivateDataLen, ErrInvalid)
	}
	if err := id.lockLive(); err != nil {
		return err
	}
	defer id.unlock()
	a := id.agent
	if id.state != StateREQRcvd && id.state != StateMRAREQSent {
		return id.badState("accept")
	}
	id.localQPN = p.QPN
	m := MAD(id.msg)
	Encode(m, AttrREP, id.tid)
	m.REP().Encode(&REPFields{
		LocalCommID:         id.localID,
		RemoteCommID:        id.remoteID,
		LocalQPN:            p.QPN,
		StartingPSN:         p.StartingPSN & ibtransport.PSNMask,
		ResponderResources:  p.ResponderResources,
		InitiatorDepth:      p.InitiatorDepth,
		TargetACKDelay:      a.cfg.CAACKDelay,
		FailoverAccepted:    p.FailoverAccepted,
		EndToEndFlowControl: p.FlowControl,
		RNRRetryCount:       min(p.RNRRetryCount, 7),
		SRQ:                 p.SRQ,
		LocalCAGUID:         a.guid,
		PrivateData:         p.PrivateData,
	})
	id.watchQP = p.QP
	id.state = StateREPSent
	id.timeout = cmTry(id.peerTimeout, id.plt)
	a.sendMsg(id, a.clock.Now())
	return nil
}

// SendRTU finishes an active connection (REP_RCVD or MRA_REP_SENT →
// ESTABLISHED). privateData is up to RTUPrivateDataLen bytes.
func (id *ID) SendRTU(privateData []byte) error {
	if len(privateData) > RTUPrivateDataLen {
		return fmt.Errorf("ibcm: RTU private data %d > %d: %w", len(privateData), RTUPrivateDataLen, ErrInvalid)
	}
	if err := id.lockLive(); err != nil {
		return err
	}
	defer id.unlock()
	a := id.agent
	if id.state != StateREPRcvd && id.state != StateMRAREPSent {
		return id.badState("send RTU")
	}
	m := MAD(a.scratch[:])
	Encode(m, AttrRTU, id.tid)
	m.RTU().SetLocalCommID(id.localID)
	m.RTU().SetRemoteCommID(id.remoteID)
	copy(m.RTU().PrivateData(), privateData)
	a.sendResp(id, m)
	id.state = StateEstablished
	id.notifyExit = true
	return nil
}

// Establish is the consumer's communication-established (the kernel's
// ib_cm_notify with IB_EVENT_COMM_EST, cm_establish): a passive connection
// whose REP waits for its RTU (REP_SENT, MRA_REP_RCVD) is established now and
// its REP is no longer resent; a later RTU is a duplicate. Like the
// consumer's other calls it makes no event: the caller reports it.
// ErrEstablished once established, ErrState in any other state.
func (id *ID) Establish() error {
	if err := id.lockLive(); err != nil {
		return err
	}
	defer id.unlock()
	switch id.state {
	case StateREPSent, StateMRAREPRcvd:
	case StateEstablished:
		return ErrEstablished
	default:
		return id.badState("establish")
	}
	id.state = StateEstablished
	id.timerOn = false
	id.notifyExit = true
	return nil
}

// SendMRA asks the peer for serviceTimeout (an exponent) more time to answer
// its REQ (REQ_RCVD → MRA_REQ_SENT) or REP (REP_RCVD → MRA_REP_SENT).
func (id *ID) SendMRA(serviceTimeout uint8, privateData []byte) error {
	if len(privateData) > MRAPrivateDataLen {
		return fmt.Errorf("ibcm: MRA private data %d > %d: %w", len(privateData), MRAPrivateDataLen, ErrInvalid)
	}
	if err := id.lockLive(); err != nil {
		return err
	}
	defer id.unlock()
	switch id.state {
	case StateREQRcvd, StateMRAREQSent:
		id.agent.sendMRA(id, 0, serviceTimeout, privateData)
		id.state = StateMRAREQSent
	case StateREPRcvd, StateMRAREPSent:
		id.agent.sendMRA(id, 1, serviceTimeout, privateData)
		id.state = StateMRAREPSent
	default:
		return id.badState("send MRA")
	}
	return nil
}

// Reject rejects the peer's REQ (REQ_RCVD, MRA_REQ_SENT) or REP (REP_RCVD,
// MRA_REP_SENT) with reason, ari (up to REJARILen bytes) and privateData (up
// to REJPrivateDataLen bytes). A rejected REQ's ID stays in TIMEWAIT to
// answer duplicates of the REQ with the same REJ.
func (id *ID) Reject(reason RejectReason, ari, privateData []byte) error {
	if len(privateData) > REJPrivateDataLen || len(ari) > REJARILen {
		return fmt.Errorf("ibcm: REJ private data %d > %d or ARI %d > %d: %w",
			len(privateData), REJPrivateDataLen, len(ari), REJARILen, ErrInvalid)
	}
	if err := id.lockLive(); err != nil {
		return err
	}
	defer id.unlock()
	a := id.agent
	switch id.state {
	case StateREQRcvd, StateMRAREQSent:
		a.rejectID(id, reason, ari, privateData)
		id.notifyExit = false
		// Keep answering duplicates of the REQ, but let the peer's QP connect
		// again at once (no stale-connection record).
		if k := (cmKey{id.remoteQPN, id.remoteGUID}); a.byQPN[k] == id {
			delete(a.byQPN, k)
		}
		// Hold the REJ for as long as the active side may resend its REQ.
		id.state = StateTimeWait
		a.arm(id, a.clock.Now(), max(a.cfg.TimeWait, time.Duration(id.maxRetries+1)*id.activeWait))
	case StateREPRcvd, StateMRAREPSent:
		a.rejectID(id, reason, ari, privateData)
		a.remove(id)
	default:
		return id.badState("reject")
	}
	return nil
}

// Drop forgets a ID of a REQ without answering it (a full backlog): the
// active side's retry asks again.
func (id *ID) Drop() error {
	if err := id.lockLive(); err != nil {
		return err
	}
	defer id.unlock()
	if id.state != StateREQRcvd && id.state != StateSIDRREQRcvd {
		return id.badState("drop")
	}
	id.agent.counters.Drops[DropRefused]++
	id.agent.remove(id)
	return nil
}

// sendDREQ sends a DREQ (ESTABLISHED → DREQ_SENT). mu is held.
func (a *Agent) sendDREQ(id *ID, now time.Time, pd []byte) {
	m := MAD(id.msg)
	tid := id.tid
	if !id.active {
		// The passive side's own messages carry its own transaction ID.
		tid = uint64(a.tidHigh)<<32 | uint64(id.localID)
	}
	Encode(m, AttrDREQ, tid)
	m.DREQ().SetLocalCommID(id.localID)
	m.DREQ().SetRemoteCommID(id.remoteID)
	m.DREQ().SetRemoteQPN(id.remoteQPN)
	copy(m.DREQ().PrivateData(), pd)
	id.state = StateDREQSent
	id.notifyExit = true
	if id.peerTimeout == 0 {
		id.peerTimeout = a.cfg.CMResponseTimeout
	}
	id.timeout = cmTry(id.peerTimeout, id.plt)
	if id.maxRetries == 0 {
		id.maxRetries = int(a.cfg.MaxCMRetries)
	}
	a.sendMsg(id, now)
}

// sendDREP answers a DREQ. mu is held.
func (a *Agent) sendDREP(id *ID, pd []byte) {
	m := MAD(a.scratch[:])
	Encode(m, AttrDREP, id.drepTID)
	m.DREP().SetLocalCommID(id.localID)
	m.DREP().SetRemoteCommID(id.remoteID)
	copy(m.DREP().PrivateData(), pd)
	a.sendResp(id, m)
}

// Disconnect sends a DREQ (ESTABLISHED, or REP_SENT/MRA_REP_RCVD → DREQ_SENT)
// or answers the peer's with a DREP (DREQ_RCVD → TIMEWAIT). privateData is up
// to DREQPrivateDataLen bytes. In DREQ_SENT and TIMEWAIT it does nothing.
func (id *ID) Disconnect(privateData []byte) error {
	if len(privateData) > DREQPrivateDataLen {
		return fmt.Errorf("ibcm: DREQ private data %d > %d: %w", len(privateData), DREQPrivateDataLen, ErrInvalid)
	}
	if err := id.lockLive(); err != nil {
		return err
	}
	defer id.unlock()
	a := id.agent
	now := a.clock.Now()
	switch id.state {
	case StateEstablished, StateREPSent, StateMRAREPRcvd:
		a.sendDREQ(id, now, privateData)
	case StateDREQRcvd:
		a.sendDREP(id, privateData)
		a.enterTimeWait(id, now)
	case StateDREQSent, StateTimeWait:
	default:
		return id.badState("disconnect")
	}
	return nil
}

// SIDRReply answers a SIDR_REQ (SIDR_REQ_RCVD). The reply is resent to
// duplicates of the request for a while, then the ID is gone.
func (id *ID) SIDRReply(p *SIDRReply) error {
	if len(p.PrivateData) > SIDRREPPrivateDataLen || len(p.AdditionalInfo) > SIDRREPInfoLen {
		return fmt.Errorf("ibcm: SIDR_REP private data %d > %d: %w", len(p.PrivateData), SIDRREPPrivateDataLen, ErrInvalid)
	}
	if err := id.lockLive(); err != nil {
		return err
	}
	defer id.unlock()
	a := id.agent
	if id.state != StateSIDRREQRcvd || id.resp != nil {
		return id.badState("SIDR reply")
	}
	a.sidrReply(id, p)
	return nil
}

func (a *Agent) sidrReply(id *ID, p *SIDRReply) {
	m := MAD(a.scratch[:])
	Encode(m, AttrSIDRREP, id.tid)
	r := m.SIDRREP()
	r.SetRequestID(id.remoteID)
	r.SetStatus(uint8(p.Status))
	r.SetQPN(p.QPN)
	r.SetServiceID(id.serviceID)
	r.SetQKey(p.QKey)
	copy(r[cmSIDRREPInfo:cmSIDRREPInfo+SIDRREPInfoLen], p.AdditionalInfo)
	r.SetAdditionalInfoLength(uint8(len(p.AdditionalInfo)))
	copy(r.PrivateData(), p.PrivateData)
	a.sendResp(id, m)
	a.arm(id, a.clock.Now(), a.sidrHold())
}

// Destroy is the consumer's end of id (the kernel's ib_destroy_cm_id): no more
// events; the peer is told as the state requires — REJ for a connection being
// set up, DREQ for an established one, DREP for a DREQ received, a rejecting
// SIDR_REP — and the ID stays through DREQ_SENT and TIMEWAIT on its own.
func (id *ID) Destroy() {
	if id.lockLive() != nil {
		return
	}
	defer id.unlock()
	a := id.agent
	id.handler = nil
	now := a.clock.Now()
	switch id.state {
	case StateREQSent, StateMRAREQRcvd:
		a.rejectID(id, RejTimeout, a.guidARI(), nil)
		a.remove(id)
	case StateREQRcvd, StateMRAREQSent, StateREPRcvd, StateMRAREPSent:
		a.rejectID(id, RejConsumer, nil, nil)
		a.remove(id)
	case StateREPSent, StateMRAREPRcvd:
		a.rejectID(id, RejConsumer, nil, nil)
		a.enterTimeWait(id, now)
	case StateEstablished:
		a.sendDREQ(id, now, nil)
	case StateDREQRcvd:
		a.sendDREP(id, nil)
		a.enterTimeWait(id, now)
	case StateSIDRREQRcvd:
		if id.resp == nil {
			a.sidrReply(id, &SIDRReply{Status: SIDRReject})
		}
	case StateDREQSent, StateTimeWait:
	default:
		a.remove(id)
	}
}
