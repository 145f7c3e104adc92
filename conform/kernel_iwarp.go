package conform

import (
	"context"
	"net"
	"strconv"
	"sync"
	"time"
)

// DefaultRpingPort is the port of the rping server a kernel iWARP peer runs
// (rping -s -P -p 7174: persistent, it serves one connection after another).
const DefaultRpingPort = 7174

// rpingRecvLen is the receive rping's server posts before it accepts: its
// struct rping_rdma_info (buffer address, R_Key, length: 16 octets).
const rpingRecvLen = 16

// fakeSTag is the region KernelIWARPPlan's cases get: rping tells its client no
// STag, so the cases that run need only an STag that names no region; this one's
// index (0xbadd) is far above what siw hands out to a handful of regions.
const fakeSTag = 0x00badd00

const (
	naIWMem    = "needs the peer's memory read back or written (read_mr, write_mr); rping does not offer it"
	naIWSTag   = "needs a valid STag of the peer's region; rping's server never tells its client one"
	naIWNoRecv = "needs a QP with no receive posted; rping's server posts one before it accepts"
)

// KernelIWARPPlan says which iWARP cases run against rping's server on siw.
var KernelIWARPPlan = map[string]KernelPlan{
	"mpa.reply.accept":       {"rping", "any rdma_cm listener: siw answers the MPA Request"},
	"mpa.reply.rev1":         {"rping", "any rdma_cm listener"},
	"mpa.req.bad-key":        {"rping", "any rdma_cm listener"},
	"mpa.req.pd-too-long":    {"rping", "any rdma_cm listener"},
	"mpa.crc.used":           {"", naIWMem},
	"mpa.crc.unused":         {"", naIWMem},
	"mpa.fpdu.bad-crc":       {"rping", "rping posts one receive; that nothing is delivered is not observable"},
	"ddp.version.untagged":   {"rping", "rping posts one receive"},
	"ddp.version.tagged":     {"rping", "the version is checked before the STag (RFC 5041 §7.2 order), so an invalid STag does not matter"},
	"ddp.qn.invalid":         {"rping", "rping posts one receive"},
	"ddp.msn.range":          {"rping", "rping posts one receive (the case posts 2): MSN 5 is out of range either way"},
	"ddp.msn.no-buffer":      {"", naIWNoRecv},
	"ddp.mo.invalid":         {"rping", "rping posts one receive"},
	"ddp.too-long":           {"rping", "rping's receive is 16 octets, as the case wants"},
	"ddp.stag.invalid":       {"rping", "any STag that names no region"},
	"ddp.stag.bounds":        {"", naIWSTag},
	"rdmap.version":          {"rping", "rping posts one receive"},
	"rdmap.opcode.reserved":  {"rping", "rping posts one receive"},
	"rdmap.opcode.model":     {"rping", "the opcode is checked before the STag, so an invalid STag does not matter"},
	"rdmap.write.rights":     {"", naIWSTag},
	"rdmap.read.stag":        {"rping", "any STag that names no region"},
	"rdmap.read.bounds":      {"", naIWSTag},
	"rdmap.read.response":    {"", naIWMem},
	"rdmap.write.place":      {"", naIWMem},
	"rdmap.send.deliver":     {"", naIWMem},
	"rdmap.terminate.header": {"rping", "any STag that names no region"},
	"rdmap.terminate.close":  {"", naIWNoRecv},
	"rdmap.send.after-write": {"", naIWSTag},
}

// RpingControl is the Control of a kernel iWARP peer (siw) that runs rping's
// persistent server: create_qp names the server's address as the QP's listen
// address (siw then answers the tester's MPA Request itself, and rping accepts),
// reg_mr a region with an STag that names none, post_recv the one receive rping
// posts itself. Completions and QP states are not observable.
type RpingControl struct {
	// Host is the peer's address, Port rping's (default DefaultRpingPort).
	Host string
	Port int
	// Settle is how long the tester waits after the MPA Reply before its first
	// FPDU (default 300ms): siw 6.1 sends its Reply before its QP is in RTS and
	// leaves data that comes in that window unread (test/interop/README.md).
	Settle time.Duration

	cur kernelSession
}

var _ Control = (*RpingControl)(nil)

// KernelIWARPCases returns the iWARP catalogue bound to e, whose Peer is p, with
// the cases KernelIWARPPlan rules out not applicable. It sets e.Dial to wait out
// siw's settling time (see RpingControl.Settle).
func KernelIWARPCases(e *IWARPEnv, p *RpingControl) []Case {
	settle := p.Settle
	if settle <= 0 {
		settle = 300 * time.Millisecond
	}
	e.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
		// rping's server runs in a loop; while it restarts, connections are
		// refused for a moment.
		deadline := time.Now().Add(30 * time.Second)
		for {
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp4", addr)
			if err == nil {
				return &settlingConn{Conn: c, settle: settle}, nil
			}
			if ctx.Err() != nil || time.Now().After(deadline) {
				return nil, err
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	return kernelCases(IWARPCases(e), KernelIWARPPlan, func(s kernelSession) { p.cur = s })
}

// SettleDial wraps dial (nil: net.Dialer) so that on each connection the
// tester's second write, its first FPDU after the MPA Request, waits settle:
// siw 6.1 sends its MPA Reply before its QP is in RTS and leaves data that
// comes in that window unread (test/interop/README.md), whatever serves its
// side channel (rping, conform-ctl).
func SettleDial(dial func(ctx context.Context, addr string) (net.Conn, error), settle time.Duration) func(ctx context.Context, addr string) (net.Conn, error) {
	if dial == nil {
		var d net.Dialer
		dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	return func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := dial(ctx, addr)
		if err != nil {
			return nil, err
		}
		return &settlingConn{Conn: c, settle: settle}, nil
	}
}

// settlingConn delays the second write (the first FPDU after the MPA Request) by
// settle.
type settlingConn struct {
	net.Conn
	settle time.Duration
	mu     sync.Mutex
	writes int
}

func (c *settlingConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	c.writes++
	n := c.writes
	c.mu.Unlock()
	if n == 2 {
		time.Sleep(c.settle)
	}
	return c.Conn.Write(b)
}

func (p *RpingControl) port() int {
	if p.Port > 0 {
		return p.Port
	}
	return DefaultRpingPort
}

// Hello describes the peer: siw behind rping.
func (p *RpingControl) Hello(ctx context.Context) (*Hello, error) {
	return &Hello{Protocol: ControlProtocol, Implementation: "Linux siw (rping server)", Transport: "iwarp",
		Addrs: []string{p.Host}, ByteOrder: "little",
		Ops: []string{OpHello, OpCreateQP, OpRegMR, OpPostRecv, OpPollCQ, OpQueryQP, OpReset}}, nil
}

// CreateQP returns rping's listener.
func (p *RpingControl) CreateQP(ctx context.Context, s QPSpec) (*QPInfo, error) {
	if s.MPACRC == "require" || s.MPACRC == "request" {
		return nil, notApplicable("the case needs the peer to ask for CRCs itself; siw's policy is fixed at build time")
	}
	return &QPInfo{State: "INIT", ListenAddr: net.JoinHostPort(p.Host, strconv.Itoa(p.port()))}, nil
}

// DestroyQP does nothing: rping's server ends its side when the connection does.
func (p *RpingControl) DestroyQP(ctx context.Context, qpn uint32) error { return nil }

// RegMR returns a region whose STag names none (see fakeSTag).
func (p *RpingControl) RegMR(ctx context.Context, s MRSpec) (*MRInfo, error) {
	return &MRInfo{MR: 1, VA: 0x10000, RKey: fakeSTag, LKey: fakeSTag, Length: s.Length}, nil
}

// WriteMR is not offered.
func (p *RpingControl) WriteMR(ctx context.Context, mr, offset int, data []byte) error {
	return notApplicable("rping offers no write_mr")
}

// ReadMR is not offered.
func (p *RpingControl) ReadMR(ctx context.Context, mr, offset, length int) ([]byte, error) {
	return nil, notApplicable("rping offers no read_mr")
}

// PostRecv accepts the one receive rping posts (KernelIWARPPlan vets the cases).
func (p *RpingControl) PostRecv(ctx context.Context, s RecvSpec) error {
	if s.Length < rpingRecvLen && s.Length != 0 {
		return notApplicable("the case needs a receive of %d octets; rping's is %d", s.Length, rpingRecvLen)
	}
	return nil
}

// PostSend is not offered.
func (p *RpingControl) PostSend(ctx context.Context, s SendSpec) error {
	return notApplicable("rping's server does not post sends on demand")
}

// PollCQ cannot be observed.
func (p *RpingControl) PollCQ(ctx context.Context, a PollArgs) ([]Completion, error) {
	return nil, unobservable("its completions")
}

// QueryQP cannot be observed.
func (p *RpingControl) QueryQP(ctx context.Context, qpn uint32) (*QPStatus, error) {
	return nil, unobservable("its QP states")
}

// Reset does nothing (the tester's connections are closed by the environment).
func (p *RpingControl) Reset(ctx context.Context) error { return nil }

// Close does nothing.
func (p *RpingControl) Close() error { return nil }
