package conform

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/oob/perftest"
)

// PerftestServer is one perftest server a kernel RoCE peer keeps listening (in a
// loop: each serves one client, then exits).
type PerftestServer struct {
	// Test is the tool.
	Test perftest.Test
	// Port is its TCP port (-p).
	Port int
	// Size is its message size (-s); ib_atomic_bw's is 8.
	Size int
	// Iters is -n; for ib_send_bw it is also the number of receives posted.
	Iters int
}

// Args returns the tool's command line for device dev and GID index gid.
func (s PerftestServer) Args(dev, gid string) []string {
	a := []string{s.Test.String(), "-d", dev, "-x", gid, "-p", strconv.Itoa(s.Port), "-n", strconv.Itoa(s.Iters)}
	if s.Test == perftest.AtomicBW {
		return append(a, "-A", "FETCH_AND_ADD")
	}
	return append(a, "-s", strconv.Itoa(s.Size))
}

// RegionLen is the length of the server's region from the address it announces to
// the end of its MR. perftest 4.5 (perftest_resources.c, alloc_ctx and
// set_up_connection) registers one MR of 2 × max(size, cycle buffer) octets (cache
// line aligned; the cycle buffer is the 4 KiB page) and announces, for its one QP,
// the start of the second half.
func (s PerftestServer) RegionLen() int {
	n := s.Size
	if s.Test == perftest.AtomicBW {
		n = 8
	}
	return max(n, 4096)
}

// DefaultPerftestServers are the servers KernelRoCEPlan names, by plan server name.
var DefaultPerftestServers = map[string]PerftestServer{
	"write":  {Test: perftest.WriteBW, Port: 18515, Size: 16384, Iters: 5},
	"read":   {Test: perftest.ReadBW, Port: 18516, Size: 16384, Iters: 5},
	"atomic": {Test: perftest.AtomicBW, Port: 18517, Size: 8, Iters: 5},
	"send":   {Test: perftest.SendBW, Port: 18518, Size: 4096, Iters: 16},
	"send16": {Test: perftest.SendBW, Port: 18519, Size: 16, Iters: 16},
}

// rights of the servers' QPs and regions as the cases need them: write_bw's
// region is remote-writable, read_bw's remote-readable, atomic_bw's
// atomic-capable (perftest_resources.c, create_single_mr).
var perftestRights = map[string][]string{
	"write":  {AccessRemoteWrite},
	"read":   {AccessRemoteRead},
	"atomic": {AccessRemoteAtomic},
}

const (
	naMem    = "needs the peer's memory read back or written (read_mr, write_mr); perftest does not offer it"
	naSender = "needs the peer to post sends (post_send); a perftest server only responds"
	naUD     = "needs a UD QP with the case's own Q_Key; perftest's UD QP has Q_Key 0x11111111 and its delivery shows only in completions"
)

// KernelRoCEPlan says which perftest server each RoCE case runs against, or why
// it cannot.
var KernelRoCEPlan = map[string]KernelPlan{
	"rc.psn.gap":              {"send", "ib_send_bw has receives posted (the case posts 2)"},
	"rc.psn.gap-once":         {"send", "ib_send_bw has receives posted; the receive completion is not observable"},
	"rc.dup.send":             {"send", "ib_send_bw has receives posted; that it delivers once is not observable"},
	"rc.dup.write":            {"", naMem},
	"rc.dup.read":             {"", naMem},
	"rc.dup.fetch-add":        {"", naMem},
	"rc.dup.cmp-swap":         {"", naMem},
	"rc.access.rkey":          {"write", "ib_write_bw's region is remote-writable; the error state is probed on the wire"},
	"rc.access.bounds-write":  {"write", "ib_write_bw's region length is known from perftest's buffer layout"},
	"rc.access.bounds-read":   {"read", "ib_read_bw's region is remote-readable, its length known"},
	"rc.access.mr-rights":     {"", "needs a QP that allows remote writes with a region that does not; perftest grants QP and region the same rights"},
	"rc.access.qp-rights":     {"", "needs a QP whose access flags lack remote read; perftest's QP access flags are not the case's to choose"},
	"rc.atomic.misaligned":    {"atomic", "ib_atomic_bw's region is atomic-capable"},
	"rc.rnr.send":             {"", "needs a QP with no receive posted and min_rnr_timer 18, then a receive posted on demand (post_recv)"},
	"rc.rnr.write-imm":        {"", "needs a QP with no receive posted and min_rnr_timer 7, then a receive posted on demand (post_recv)"},
	"rc.write.recv-untouched": {"", "needs one region that takes both an RDMA WRITE and a SEND, and the receive completions"},
	"rc.write.zero-len":       {"write", "any connected QP"},
	"rc.read.multi":           {"", naMem},
	"rc.read.zero-len":        {"read", "any connected QP that allows READs"},
	"rc.seq.middle":           {"send", "ib_send_bw has receives posted; the error state is probed on the wire"},
	"rc.seq.last-missing":     {"send", "ib_send_bw has receives posted; the error state is probed on the wire"},
	"rc.len.oversize":         {"send", "ib_send_bw's receives (4096 octets) hold more than the path MTU + 4"},
	"rc.len.first-short":      {"send", "ib_send_bw has receives posted"},
	"rc.pad.write":            {"write", "ib_write_bw's region is remote-writable"},
	"rc.recv.too-long":        {"send16", "ib_send_bw -s 16 posts 16-octet receives; the receive's status is not observable"},
	"roce.icrc.bad":           {"send", "ib_send_bw has receives posted; that the good SEND is delivered once is not observable"},
	"roce.icrc.answers":       {"", "needs one region that allows WRITE, READ and atomics; perftest's regions allow one of them each"},
	"rc.pkey.wrong":           {"send", "ib_send_bw has receives posted"},
	"rc.tver.bad":             {"send", "ib_send_bw has receives posted"},
	"rc.qpn.unknown":          {"send", "ib_send_bw has receives posted"},
	"rc.ack.coalesce":         {"send", "ib_send_bw has receives posted"},
	"rc.ack.msn-read":         {"", "needs one region that allows both WRITE and READ; perftest's regions allow one of them each"},
	"rc.ack.credits":          {"send", "ib_send_bw posts 16 receives (the case posts 3): a credit count of up to 15 would be right here, the case accepts up to 2 or 31 (none)"},
	"ud.qkey.wrong":           {"", naUD},
	"ud.pkey.wrong":           {"", naUD},
	"ud.len.oversize":         {"", naUD},
	"ud.recv.grh":             {"", naUD},
	"rc.req.nak-seq":          {"", naSender},
	"rc.req.rnr":              {"", naSender},
	"rc.req.implicit-ack":     {"", naSender},
	"rc.req.timeout":          {"", naSender},
	"rc.req.read-resp":        {"", naSender},
}

// PerftestControl is the Control of a kernel RoCE peer (rxe) that runs perftest
// servers in a loop (DefaultPerftestServers; see the interop test for the
// script). For each case, CreateQP connects to the server the case's plan names
// as perftest's client, announcing the tester's QPN, PSN and address; RegMR
// returns the server's region; PostRecv accepts the receives the server posted
// itself. Reset ends the session, after first driving the server's QP to the
// error state on the wire (ib_send_bw's server polls its receive CQ until its
// receives flush; the others wait on TCP and end when it closes).
type PerftestControl struct {
	// Host is the peer's address for the TCP exchange.
	Host string
	// Servers overrides DefaultPerftestServers.
	Servers map[string]PerftestServer
	// Wire is the tester's wire (for Reset).
	Wire *Wire
	// MTU is the path MTU the tester announces (default 1024).
	MTU int
	// DialTimeout bounds the wait for a server to listen again (default 90s).
	DialTimeout time.Duration
	// Logf, if set, logs each session.
	Logf func(format string, args ...any)

	cur  kernelSession
	sess *perftestSession
}

var _ Control = (*PerftestControl)(nil)

type perftestSession struct {
	server  PerftestServer
	conn    net.Conn
	remote  perftest.Dest
	mtu     int
	release chan struct{}
	done    chan error
	rqpsn   uint32
}

// KernelRoCECases returns the RoCE catalogue bound to e, whose Peer is p, with the
// cases KernelRoCEPlan rules out not applicable.
func KernelRoCECases(e *RoCEEnv, p *PerftestControl) []Case {
	return kernelCases(RoCECases(e), KernelRoCEPlan, func(s kernelSession) { p.cur = s })
}

func (p *PerftestControl) servers() map[string]PerftestServer {
	if p.Servers != nil {
		return p.Servers
	}
	return DefaultPerftestServers
}

func (p *PerftestControl) mtu() int {
	if p.MTU > 0 {
		return p.MTU
	}
	return 1024
}

// Hello describes the peer: rxe behind perftest.
func (p *PerftestControl) Hello(ctx context.Context) (*Hello, error) {
	return &Hello{Protocol: ControlProtocol, Implementation: "Linux rxe (perftest servers)", Transport: "roce",
		Addrs: []string{p.Host}, PathMTU: p.mtu(), PKeys: []uint16{0xffff}, ByteOrder: "little",
		Ops: []string{OpHello, OpCreateQP, OpRegMR, OpPostRecv, OpPollCQ, OpQueryQP, OpReset}}, nil
}

// CreateQP connects to the case's perftest server as its client.
func (p *PerftestControl) CreateQP(ctx context.Context, s QPSpec) (*QPInfo, error) {
	if p.sess != nil {
		return nil, notApplicable("the case needs a second QP; a perftest server has one")
	}
	if s.Type != "rc" {
		return nil, notApplicable("perftest servers are driven for RC only here")
	}
	srv, ok := p.servers()[p.cur.plan.Server]
	if !ok {
		return nil, fmt.Errorf("kernel plan names an unknown server %q", p.cur.plan.Server)
	}
	local, err := netip.ParseAddr(s.RemoteIP)
	if err != nil {
		return nil, fmt.Errorf("tester address %q: %w", s.RemoteIP, err)
	}
	mtu, ok := perftest.MTUFromBytes(p.mtu())
	if !ok {
		return nil, fmt.Errorf("MTU %d", p.mtu())
	}
	conn, err := p.dial(ctx, srv.Port)
	if err != nil {
		return nil, err
	}
	ss := &perftestSession{server: srv, conn: conn, release: make(chan struct{}), done: make(chan error, 1), rqpsn: s.RQPSN}
	ready := make(chan struct{})
	cfg := perftest.Config{Test: srv.Test, MTU: mtu, Size: uint64(srv.Size), WithGID: true}
	outReads := uint32(1)
	if srv.Test == perftest.ReadBW || srv.Test == perftest.AtomicBW {
		outReads = 16
	}
	gid := local.As16() // an IPv4 address as ::ffff:a.b.c.d, its RoCEv2 GID
	hooks := perftest.Hooks{
		Setup: func(ctx context.Context, r *perftest.Result) ([]perftest.Dest, error) {
			ss.mtu = r.MTU.Bytes()
			return []perftest.Dest{{QPN: s.RemoteQPN, PSN: s.RQPSN, OutReads: outReads, GID: gid}}, nil
		},
		Connect: func(ctx context.Context, local, remote []perftest.Dest) error {
			ss.remote = remote[0]
			return nil
		},
		Run: func(ctx context.Context, size uint64) (perftest.BWReport, error) {
			close(ready)
			select {
			case <-ss.release:
			case <-ctx.Done():
			}
			return perftest.BWReport{}, errors.New("the conformance case ended")
		},
	}
	go func() {
		_, err := perftest.RunClient(context.WithoutCancel(ctx), conn, cfg, hooks)
		ss.done <- err
	}()
	select {
	case <-ready:
	case err := <-ss.done:
		conn.Close()
		return nil, fmt.Errorf("perftest exchange with %s on port %d: %w", srv.Test, srv.Port, err)
	case <-ctx.Done():
		conn.Close()
		<-ss.done
		return nil, ctx.Err()
	}
	p.sess = ss
	if p.Logf != nil {
		p.Logf("kernel: %s: %s on port %d: QPN 0x%06x PSN 0x%06x R_Key 0x%08x VA 0x%x, path MTU %d", p.cur.id, srv.Test, srv.Port,
			ss.remote.QPN, ss.remote.PSN, ss.remote.RKey, ss.remote.VAddr, ss.mtu)
	}
	if ss.mtu == 0 {
		ss.mtu = p.mtu()
	}
	return &QPInfo{QPN: ss.remote.QPN, State: "RTS", PathMTU: ss.mtu, PKey: 0xffff}, nil
}

// dial connects to port, retrying while the server's loop restarts it.
func (p *PerftestControl) dial(ctx context.Context, port int) (net.Conn, error) {
	timeout := p.DialTimeout
	if timeout <= 0 {
		timeout = 90 * time.Second
	}
	deadline := time.Now().Add(timeout)
	addr := net.JoinHostPort(p.Host, strconv.Itoa(port))
	for {
		var d net.Dialer
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		c, err := d.DialContext(dctx, "tcp4", addr)
		cancel()
		if err == nil {
			return c, nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return nil, fmt.Errorf("perftest server at %s: %w", addr, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// DestroyQP ends the session (as Reset).
func (p *PerftestControl) DestroyQP(ctx context.Context, qpn uint32) error { return p.Reset(ctx) }

// RegMR returns the server's region, if it has the rights asked for.
func (p *PerftestControl) RegMR(ctx context.Context, s MRSpec) (*MRInfo, error) {
	if p.sess == nil {
		return nil, errors.New("reg_mr before create_qp")
	}
	if s.Fill != 0 {
		return nil, notApplicable("the case needs the region filled with 0x%02x; perftest fills its own", s.Fill)
	}
	name := p.cur.plan.Server
	length := p.sess.server.RegionLen()
	if want, ok := perftestRights[name]; ok {
		for _, w := range want {
			if !has(s.Access, w) {
				return nil, notApplicable("%s's region has %s, which the case does not want", p.sess.server.Test, w)
			}
		}
		// A shorter region than the case asked for is fine: the cases
		// address it by offsets well inside it, and the bounds cases by
		// the length returned here.
	} else {
		// ib_send_bw's region is addressed by no case (SENDs land in the
		// receives it posted): any length will do for the offsets of the
		// receives the case posts.
		length = s.Length
	}
	return &MRInfo{MR: 1, VA: p.sess.remote.VAddr, RKey: p.sess.remote.RKey, LKey: p.sess.remote.RKey, Length: length}, nil
}

func has(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// WriteMR is not offered.
func (p *PerftestControl) WriteMR(ctx context.Context, mr, offset int, data []byte) error {
	return notApplicable("perftest offers no write_mr")
}

// ReadMR is not offered.
func (p *PerftestControl) ReadMR(ctx context.Context, mr, offset, length int) ([]byte, error) {
	return nil, notApplicable("perftest offers no read_mr")
}

// PostRecv accepts receives the server has posted already: ib_send_bw posts
// Iters receives of Size octets before it lets its client start.
func (p *PerftestControl) PostRecv(ctx context.Context, s RecvSpec) error {
	if p.sess == nil || p.sess.server.Test != perftest.SendBW {
		return notApplicable("the case needs receives posted on demand; only ib_send_bw's server posts receives, all at its start")
	}
	if n := max(1, s.Count); n > p.sess.server.Iters {
		return notApplicable("the case needs %d receives; ib_send_bw posted %d", n, p.sess.server.Iters)
	}
	return nil
}

// PostSend is not offered.
func (p *PerftestControl) PostSend(ctx context.Context, s SendSpec) error {
	return notApplicable("a perftest server does not post sends on demand")
}

// PollCQ cannot be observed.
func (p *PerftestControl) PollCQ(ctx context.Context, a PollArgs) ([]Completion, error) {
	return nil, unobservable("its completions")
}

// QueryQP cannot be observed.
func (p *PerftestControl) QueryQP(ctx context.Context, qpn uint32) (*QPStatus, error) {
	return nil, unobservable("its QP states")
}

// Reset ends the session: it sends RDMA WRITEs with an R_Key of 0 at the first 16
// PSNs the server's QP may expect (one of them is the expected PSN and puts the QP
// in the error state, the others are duplicates or out of sequence), so that an
// ib_send_bw server sees its receives flushed and exits, then closes the TCP
// exchange, which ends the others.
func (p *PerftestControl) Reset(ctx context.Context) error {
	ss := p.sess
	if ss == nil {
		return nil
	}
	p.sess = nil
	if p.Wire != nil && ss.server.Test == perftest.SendBW {
		for k := 0; k < 16; k++ {
			f := ib.PacketFields{BTH: ib.BTHFields{Opcode: ib.OpcodeRCRDMAWriteOnly, PKey: 0xffff, DestQP: ss.remote.QPN,
				PSN: ib.PSNAdd(ss.rqpsn, k), AckReq: true}}
			f.RETH = ib.RETHFields{VA: ss.remote.VAddr, DMALen: 8}
			p.Wire.Send(NewPacket(f, make([]byte, 8)))
		}
	}
	close(ss.release)
	ss.conn.Close()
	select {
	case <-ss.done:
	case <-time.After(5 * time.Second):
	}
	return nil
}

// Close ends any session.
func (p *PerftestControl) Close() error { return p.Reset(context.Background()) }
