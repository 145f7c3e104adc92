package perf

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/softrdma/softrdma/device"
	"github.com/softrdma/softrdma/devspec"
	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/oob/perftest"
)

// noProgress is how long a run waits for a completion before giving up on a
// vanished peer (device.NoProgress, WaitCQ's).
const noProgress = device.NoProgress

// DialWait is how long the client retries a refused connection by default
// (--wait): long enough to start both sides at once. (perftest's client gives
// up at once.)
const DialWait = 5 * time.Second

// run runs one test: the TCP connection, the device, perftest's exchange with
// the verbs work in its hooks, and the report.
func run(o *Options, p *params, stdout, stderr io.Writer) (err error) {
	ctx := o.context()
	res := &result{Test: p.test.String(), Title: title(p), Role: "client", Transport: o.Transport, Backend: o.Backend,
		Connection: p.conn, QPs: p.qps, Duration: p.duration}
	if p.server {
		res.Role = "server"
	}
	if o.JSON {
		jsonOut := stdout
		defer func() {
			if err != nil {
				res.Error = err.Error()
			}
			res.write(jsonOut)
		}()
		stdout = io.Discard
	}

	if p.infinite {
		// --run_infinitely ends when it is stopped: then the table is closed
		// and the run has succeeded (perftest itself dies by the signal).
		defer func() {
			if err != nil && ctx.Err() != nil {
				io.WriteString(stdout, resultLine)
				err = nil
			}
		}()
	}
	if o.RDMACM || o.UseCM {
		return runCM(o, p, res, stdout, stderr)
	}
	var conn net.Conn
	var dev device.Device
	defer func() {
		if dev == nil {
			return
		}
		if cerr := dev.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("closing the device: %w", cerr)
		}
	}()
	if p.server {
		// The server opens its device before it listens, as pingpong's and
		// -R's servers do: a bad -d, or a UDP port 4791 in use, ends it at
		// once with the cause, where it used to show only once a client had
		// connected, and there as the client's "EOF". Without -d the device
		// is the first interface's (IPv4, the exchange's family), since no
		// client is known yet.
		if dev, err = openDevice(o, p, netip.Addr{}); err != nil {
			return err
		}
		if err := checkInline(dev, p); err != nil {
			return err
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(o.Port)))
		if err != nil {
			return fmt.Errorf("Couldn't listen to port %d: %w", o.Port, err)
		}
		if o.Listening != nil {
			o.Listening(ln.Addr())
		}
		io.WriteString(stdout, waitingBanner)
		conn, err = ln.Accept()
		ln.Close() // perftest serves one client
		if err != nil {
			return err
		}
	} else {
		if conn, err = dial(ctx, o.Host, o.Port, o.Wait); err != nil {
			return err
		}
	}
	defer conn.Close()
	if !p.server {
		peer := conn.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
		if dev, err = openDevice(o, p, peer); err != nil {
			return err
		}
	}
	s := &session{p: p, dev: dev, stdout: stdout, stderr: stderr, res: res, outJSON: newOutJSON(o, stderr)}
	if err := s.init(); err != nil {
		return err
	}
	res.Device = s.devName

	cfg := s.perftestConfig()
	hooks := perftest.Hooks{Setup: s.setup, Connect: s.connect, PostReceives: s.postReceives, Run: s.run}
	var r *perftest.Result
	if p.server {
		r, err = perftest.RunServer(ctx, conn, cfg, hooks)
	} else {
		r, err = perftest.RunClient(ctx, conn, cfg, hooks)
	}
	if err != nil {
		return err
	}
	s.finish(r)
	if p.test == perftest.WriteLat {
		// ib_write_lat ends without a closing exchange: our last ACK must reach
		// the peer before the device goes, so hang up and wait (briefly) for
		// the peer to hang up too, which it does once its last WRITE completed.
		if tc, ok := conn.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
		conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		io.Copy(io.Discard, conn)
	}
	return nil
}

// dial connects to the server's perftest port, retrying refused
// connections for wait.
func dial(ctx context.Context, host string, port int, wait time.Duration) (net.Conn, error) {
	deadline := time.Now().Add(wait)
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	for {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return conn, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("Couldn't connect to %s: %w", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// session is one side's test resources: perftest's pingpong_context.
type session struct {
	p      *params
	dev    device.Device
	stdout io.Writer
	stderr io.Writer
	res    *result

	devName  string
	gidIndex int
	portMTU  perftest.MTU // the MTU this side offers: the port's, or -m
	mtu      int          // the MTU both use, in bytes (after the exchange)
	outReads int

	ctx    *ibtransport.Context
	pd     *ibtransport.PD
	sendCQ *ibtransport.CQ
	recvCQ *ibtransport.CQ
	qps    []*ibtransport.QP
	mr     *ibtransport.MR
	mem    []byte // the MR's memory

	cycle     uint64 // the cycle buffer both sides use (bytes one QP's WRs walk through)
	cacheLine uint64
	buffSize  uint64 // BUFF_SIZE(size, cycle_buffer): one QP's half of the buffer

	local, remote []perftest.Dest
	wc            []ibtransport.WC

	// -R (rdma_cm): the manager, the port and the server's address of the
	// test connections; the exchange's result (the keys, printed once known).
	cm          *cmSide
	cmPort      int
	cmPeer      netip.Addr
	cmResult    *perftest.Result
	keysPrinted bool

	// ah are the UD QPs' address handles, one per QP (-c UD); udMR is the
	// buffer of -R's UD connection parameters message (conn.go).
	ah   []ibtransport.AddressHandle
	udMR *ibtransport.MR

	// outJSON is --out_json's file, nil without it; its test information is
	// set by setup.
	outJSON *outJSONFile

	// credit is ib_send_bw's receive credit over iWARP (iwarp.go).
	credit *credit
	// noProgress, if not zero, replaces noProgress for a sender waiting
	// for credit (tests).
	noProgress time.Duration
}

// perftestConfig is the perftest exchange's configuration of this side's
// test, its role and rdma_cm fields unset (RunClient and RunServer set the
// role): the test, the MTU this side offers, the QPs, the sizes (UD's at
// most the MTU: conn.go), duplex, the duration mode, GIDs exchanged.
func (s *session) perftestConfig() perftest.Config {
	p := s.p
	return perftest.Config{
		Test:        p.test,
		MTU:         s.portMTU,
		NumQPs:      p.qps,
		Size:        p.size,
		RunAll:      p.all,
		RunAllSizes: p.udSizes(s.portMTU.Bytes()),
		Duplex:      p.duplex,
		Duration:    p.durationMode(),
		WithGID:     true,
	}
}

// init finds the GID index and the port MTU.
func (s *session) init() error {
	p := s.p
	s.devName = s.dev.Name()
	s.ctx = s.dev.Context()
	s.gidIndex = -1
	if s.dev.Spec().Transport == devspec.IWARP {
		s.gidIndex = 0 // siw's only GID
	} else {
		for i, g := range s.dev.GIDs() {
			if i > 0 && g.Unmap() == s.dev.Local() {
				s.gidIndex = i
				break
			}
		}
	}
	if s.gidIndex < 0 {
		return fmt.Errorf("no GID for the device's address %v", s.dev.Local())
	}
	if err := checkInline(s.dev, p); err != nil {
		return err
	}
	s.res.GIDIndex = s.gidIndex
	active := s.dev.PathMTU()
	mtu := active
	if p.mtu != 0 {
		mtu = p.mtu
		if mtu > active {
			fmt.Fprintf(s.stderr, " Requested mtu is higher than active mtu \n Changing to active mtu - %d\n", mtuEnum(active))
			mtu = active
		}
	}
	m, ok := perftest.MTUFromBytes(mtu)
	if !ok {
		return fmt.Errorf("the port's MTU %d is not an IB MTU", mtu)
	}
	s.portMTU = m
	s.outReads = 1
	if p.verb == verbRead || p.verb == verbAtomic {
		s.outReads = s.ctx.Config().MaxRdAtomic
		if p.outReads > 0 && p.outReads < s.outReads {
			s.outReads = p.outReads
		}
		if p.outReads > s.outReads {
			fmt.Fprintf(s.stderr, " Number of outstanding reads is above max = %d\n Changing to that max value\n", s.outReads)
		}
	}
	return nil
}

// mtuEnum returns the ibv_mtu number of an MTU in bytes.
func mtuEnum(n int) int {
	m, _ := perftest.MTUFromBytes(n)
	return int(m)
}

// inc is perftest's INC: size rounded up to a cache line.
func inc(size, cacheLine uint64) uint64 {
	if size <= cacheLine {
		return cacheLine
	}
	return (size + cacheLine - 1) / cacheLine * cacheLine
}

// setup creates the PD, CQs, QPs and the buffer (ctx_init), and returns the
// keys (set_up_connection): each QP's buffer is the second half of the region,
// where the peer writes and reads.
func (s *session) setup(_ context.Context, r *perftest.Result) ([]perftest.Dest, error) {
	p := s.p
	s.mtu = r.MTU.Bytes()
	s.res.MTU = s.mtu
	s.cycle = uint64(max(r.SysData.CycleBuffer, 1))
	s.cacheLine = uint64(max(r.SysData.CacheLineSize, 1))
	s.buffSize = max(p.size, s.cycle)
	total := inc(s.buffSize, s.cacheLine) * 2 * uint64(p.qps)
	if p.conn == "UD" {
		total += s.cacheLine // alloc_ctx: room for the GRH before the first receive (conn.go)
	}
	if total > 1<<34 {
		return nil, fmt.Errorf("a buffer of %d bytes is too large", total)
	}
	c := s.ctx
	var err error
	nqp := p.qps
	cmQPs := s.cm != nil && len(s.qps) == nqp // -R: rdma_cm made the QPs (connectCM)
	if !cmQPs {
		s.pd = c.AllocPD()
		if s.sendCQ, err = c.CreateCQ(max(p.txDepth*nqp, 1) + 16); err != nil {
			return nil, err
		}
		if s.recvCQ, err = c.CreateCQ(max(p.rxDepth*nqp, 1) + 16); err != nil {
			return nil, err
		}
	}
	access := ibtransport.AccessLocalWrite
	qpAccess := ibtransport.Access(0)
	switch p.verb {
	case verbWrite:
		access |= ibtransport.AccessRemoteWrite
		qpAccess = ibtransport.AccessRemoteWrite
	case verbRead:
		access |= ibtransport.AccessRemoteRead
		qpAccess = ibtransport.AccessRemoteRead
		if s.dev.Spec().Transport == devspec.IWARP {
			// perftest's ctx_init: an iWARP READ's sink must allow remote
			// writes (a Read Response is a tagged placement).
			access |= ibtransport.AccessRemoteWrite
		}
	case verbAtomic:
		access |= ibtransport.AccessRemoteAtomic
		qpAccess = ibtransport.AccessRemoteAtomic
	case verbSend:
		qpAccess = ibtransport.AccessRemoteWrite
	}
	s.mem = make([]byte, total)
	if p.verb != verbWrite || p.bw {
		// perftest fills its buffer with random bytes, except ib_write_lat's,
		// whose last byte of each message counts the iterations.
		for i := range s.mem {
			s.mem[i] = byte(rand.Uint32())
		}
	}
	if s.mr, err = s.pd.RegMR(s.mem, access); err != nil {
		return nil, err
	}
	if !cmQPs {
		s.qps = make([]*ibtransport.QP, nqp)
	}
	dests := make([]perftest.Dest, nqp)
	base := s.mr.Addr()
	rkey := s.mr.RKey()
	for i := range s.qps {
		if cmQPs {
			dests[i] = s.dest(i, s.qps[i], base, rkey)
			continue
		}
		qp, err := c.CreateQP(s.pd, ibtransport.QPInitAttr{Type: p.qpType(), SendCQ: s.sendCQ, RecvCQ: s.recvCQ,
			Cap: ibtransport.QPCap{MaxSendWR: max(p.txDepth, 1), MaxRecvWR: max(p.rxDepth, 1), MaxSendSGE: 1, MaxRecvSGE: 1,
				MaxInlineData: p.inline}})
		if err != nil {
			return nil, err
		}
		init, mask := &ibtransport.QPAttr{QPState: ibtransport.QPStateInit, Port: 1, AccessFlags: qpAccess},
			ibtransport.QPAttrState|ibtransport.QPAttrPKeyIndex|ibtransport.QPAttrPort|ibtransport.QPAttrAccessFlags
		if p.conn == "UD" {
			init, mask = &ibtransport.QPAttr{QPState: ibtransport.QPStateInit, Port: 1, QKey: defQKey},
				ibtransport.QPAttrState|ibtransport.QPAttrPKeyIndex|ibtransport.QPAttrPort|ibtransport.QPAttrQKey
		}
		if err := qp.Modify(init, mask); err != nil {
			return nil, err
		}
		s.qps[i] = qp
		dests[i] = s.dest(i, qp, base, rkey)
	}
	if err := s.setupCredit(dests); err != nil { // iwarp.go
		return nil, err
	}
	s.local = dests
	s.wc = make([]ibtransport.WC, 16) // CTX_POLL_BATCH
	s.res.TxDepth, s.res.CQModeration = p.txDepth, 0
	if p.bw {
		s.res.CQModeration = p.cqMod
	}
	if p.verb == verbSend {
		s.res.RxDepth = p.rxDepth
	}
	if p.verb == verbRead || p.verb == verbAtomic {
		s.res.OutReads = s.outReads
	}
	ti := testInfo{p: p, device: s.devName, mtu: s.mtu, gidIndex: s.gidIndex, outReads: s.outReads, iwarp: s.dev.Spec().Transport == devspec.IWARP}
	ti.write(s.stdout)
	if s.outJSON != nil {
		s.outJSON.info = &ti
	}
	return dests, nil
}

// dest returns QP i's keys.
func (s *session) dest(i int, qp *ibtransport.QP, base uint64, rkey uint32) perftest.Dest {
	return perftest.Dest{
		OutReads: uint32(s.outReads),
		QPN:      qp.QPN(),
		PSN:      rand.Uint32() & ibtransport.PSNMask,
		RKey:     rkey,
		VAddr:    base + s.targetOffset(i),
		GID:      s.dev.GIDs()[s.gidIndex].As16(),
		GIDIndex: int32(s.gidIndex),
	}
}

// sendOffset and targetOffset are where QP i's messages come from and where the
// peer's go (buf[i] and my_dest[i].vaddr in perftest); recvOffset is where its
// receives land (ctx_set_recv_wqes).
func (s *session) sendOffset(i int) uint64 { return uint64(i) * s.buffSize }
func (s *session) targetOffset(i int) uint64 {
	return uint64(s.p.qps+i) * s.buffSize
}
func (s *session) recvOffset(i int) uint64 {
	return uint64(s.p.qps+i) * inc(s.buffSize, s.cacheLine)
}

// slot returns the offset of message k within a QP's cycle buffer: successive
// messages move on by a cache-line-rounded size and wrap at the cycle buffer
// (increase_loc_addr, increase_rem_addr), if two fit in it.
func (s *session) slot(size uint64, k uint64) uint64 {
	if size > s.cycle/2 {
		return 0
	}
	inc := inc(size, s.cacheLine)
	return k % (s.cycle / inc) * inc
}

// connect moves the QPs to RTR, and to RTS if they send (ctx_connect), then
// prints both sides' keys and the table's header.
func (s *session) connect(_ context.Context, local, remote []perftest.Dest) error {
	p := s.p
	s.remote = remote
	for i, qp := range s.qps {
		rd := remote[i]
		if p.conn != "RC" {
			if err := s.connectUnreliable(qp, local[i], rd); err != nil { // conn.go
				return err
			}
			continue
		}
		ah := ibtransport.AddressHandle{DGID: rd.GID, SGIDIndex: uint8(s.gidIndex), HopLimit: hopLimit}
		if err := qp.Modify(&ibtransport.QPAttr{QPState: ibtransport.QPStateRTR, AH: ah, PathMTU: s.mtu,
			DestQPN: rd.QPN, RQPSN: rd.PSN, MaxDestRdAtomic: int(local[i].OutReads), MinRNRTimer: MinRNRTimer},
			ibtransport.QPAttrState|ibtransport.QPAttrAH|ibtransport.QPAttrPathMTU|ibtransport.QPAttrDestQPN|
				ibtransport.QPAttrRQPSN|ibtransport.QPAttrMaxDestRdAtomic|ibtransport.QPAttrMinRNRTimer); err != nil {
			return fmt.Errorf("Failed to modify QP %d to RTR: %w", qp.QPN(), err)
		}
		if !p.bw || !p.server || p.duplex {
			rd := min(max(int(rd.OutReads), 1), s.ctx.Config().MaxRdAtomic)
			if err := qp.Modify(&ibtransport.QPAttr{QPState: ibtransport.QPStateRTS, SQPSN: local[i].PSN, Timeout: p.qpTimeout,
				RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: rd},
				ibtransport.QPAttrState|ibtransport.QPAttrSQPSN|ibtransport.QPAttrTimeout|ibtransport.QPAttrRetryCnt|
					ibtransport.QPAttrRNRRetry|ibtransport.QPAttrMaxRdAtomic); err != nil {
				return fmt.Errorf("Failed to modify QP to RTS: %w", err)
			}
		}
	}
	s.printKeys(local, remote)
	return nil
}

// printKeys prints both sides' keys and the table's header (after ctx_connect,
// or with -R once the keys are known).
func (s *session) printKeys(local, remote []perftest.Dest) {
	p := s.p
	s.keysPrinted = true
	// ctx_print_pingpong_data decides what to print by the verb of the
	// exchange's parameters, which create_comm_struct sets to SEND when they
	// travel over rdma_cm (-R, -z): no OUT, RKey or VAddr then, whatever the
	// test (seen from ib_write_bw -R 4.5-0.17 against rxe).
	verb := p.verb
	if p.useCM {
		verb = verbSend
	}
	for _, d := range local {
		io.WriteString(s.stdout, destLines("local", d, verb))
	}
	for _, d := range remote {
		io.WriteString(s.stdout, destLines("remote", d, verb))
	}
	s.res.Local, s.res.Remote = jsonDests(local), jsonDests(remote)
	// ib_read_lat's server prints no table: only the client posts READs.
	if !(p.test == perftest.ReadLat && p.server) {
		s.printTableHeader()
	}
}

func (s *session) printTableHeader() {
	io.WriteString(s.stdout, tableHeader(s.p))
}

// finish prints what perftest prints after the exchange: the half-duplex
// server's copy of the client's report, -b's sums, and the closing line.
func (s *session) finish(r *perftest.Result) {
	p := s.p
	if p.bw {
		s.res.BWUnits = "MB/sec"
		if p.gbits {
			s.res.BWUnits = "Gb/sec"
		}
	} else {
		s.res.BWUnits = ""
	}
	switch {
	case p.bw && p.verb != verbSend && p.server && !p.duplex:
		for _, x := range r.Reports {
			s.printBW(x.Remote)
		}
	case p.bw && p.duplex:
		for _, x := range r.Reports {
			s.printBW(sum(x.Local, x.Remote))
		}
		// --report-both: each direction's row under a table of its own, after
		// the sum (write_bw.c and its siblings, RUN_REGULAR only: not -a).
		if p.reportBoth && !p.all && len(r.Reports) > 0 {
			x := r.Reports[len(r.Reports)-1]
			for _, dir := range []struct {
				name string
				rep  perftest.BWReport
				to   *[]jsonBW
			}{{"Local", x.Local, &s.res.BandwidthLocal}, {"Remote", x.Remote, &s.res.BandwidthRemote}} {
				io.WriteString(s.stdout, resultLine+"\n "+dir.name+" results: \n"+resultLine)
				io.WriteString(s.stdout, bwTableHeader(p.gbits)+"\n")
				io.WriteString(s.stdout, bwLine(dir.rep, p.gbits))
				s.outJSON.write(outJSONBW(dir.rep, p.gbits))
				*dir.to = append(*dir.to, toJSONBW(dir.rep))
			}
		}
	}
	io.WriteString(s.stdout, resultLine)
}

// printBW prints a bandwidth row (print_full_bw_report): the table's line,
// the --json result and the --out_json file.
func (s *session) printBW(rep perftest.BWReport) {
	io.WriteString(s.stdout, bwLine(rep, s.p.gbits))
	s.res.addBW(rep)
	s.outJSON.write(outJSONBW(rep, s.p.gbits))
}

// postReceives posts a send test's receives: rx depth per QP (ctx_set_recv_wqes).
func (s *session) postReceives(_ context.Context, size uint64) error {
	for i, qp := range s.qps {
		for j := 0; j < s.p.rxDepth; j++ {
			if err := s.postRecv(qp, i, size, uint64(j)); err != nil {
				return fmt.Errorf("Couldn't post recv Qp = %d: counter=%d: %w", i, j, err)
			}
		}
	}
	return nil
}

func (s *session) postRecv(qp *ibtransport.QP, i int, size, k uint64) error {
	off := s.recvOffset(i)
	if s.p.bw {
		off += s.slot(size, k)
	}
	n := size
	if s.p.conn == "UD" {
		// ctx_set_recv_wqes: the GRH's 40 bytes first, ending on the cache
		// line where the message starts.
		off += s.cacheLine - udGRH
		n += udGRH
	}
	return qp.PostRecv(ibtransport.RecvWR{WRID: uint64(i), SGL: []ibtransport.SGE{s.mr.SGE(int(off), int(n))}})
}

// run measures one message size.
func (s *session) run(ctx context.Context, size uint64) (perftest.BWReport, error) {
	p := s.p
	switch {
	case p.bw:
		rep, err := s.runBW(ctx, size)
		if err != nil {
			return rep, err
		}
		if !p.duplex || (p.verb == verbSend && p.durationMode()) {
			s.printBW(rep)
		}
		return rep, nil
	case p.test == perftest.WriteLat:
		return perftest.BWReport{}, s.runLatWrite(ctx, size)
	case p.test == perftest.SendLat:
		return perftest.BWReport{}, s.runLatSend(ctx, size)
	default:
		return perftest.BWReport{}, s.runLatRead(ctx, size)
	}
}

// clock reads the monotonic clock in nanoseconds since the run started.
type clock struct{ base time.Time }

func newPerfClock() clock             { return clock{base: time.Now()} }
func (c clock) now() int64            { return int64(time.Since(c.base)) }
func (c clock) at(ns int64) time.Time { return c.base.Add(time.Duration(ns)) }

// phase is a -D run's state (catch_alarm's states): warming up for the
// margin, sampling, cooling down for the margin, over.
type phase uint8

const (
	warmUp phase = iota
	sampling
	coolDown
	over
)

// timer divides a -D run into its phases, from when it starts.
type timer struct {
	start, sampleStart, sampleEnd, end int64 // clock nanoseconds
}

func newPerfTimer(p *params, start int64) timer {
	sec := int64(time.Second)
	return timer{start: start, sampleStart: start + int64(p.margin)*sec,
		sampleEnd: start + int64(p.duration-p.margin)*sec, end: start + int64(p.duration)*sec}
}

func (t *timer) phase(now int64) phase {
	switch {
	case now < t.sampleStart:
		return warmUp
	case now < t.sampleEnd:
		return sampling
	case now < t.end:
		return coolDown
	}
	return over
}

// completionError reports a completion with an error status as perftest
// does, followed by the engine's state of every QP (ibtransport StateReport:
// timeouts, retransmissions, NAKs and drops), which tells what a transport
// error such as retry exceeded ran into.
func (s *session) completionError(wc ibtransport.WC, what string, posted, done uint64) error {
	err := fmt.Errorf("Completion with error at %s: %s (status %d, wr %d, posted %d, completed %d)",
		what, wc.Status, int(wc.Status), wc.WRID, posted, done)
	return s.withReport(err)
}

// withReport appends the engine's state of each QP to err (a run that failed
// or made no progress); a cancelled run's error stays as it is.
func (s *session) withReport(err error) error {
	if s.ctx == nil || err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("%w\n%s", err, strings.TrimSuffix(s.ctx.StateReport(time.Now()), "\n"))
}

// sendWR returns QP i's work request for message k of the given size: the
// test's opcode from the QP's send buffer to the peer's buffer, both walking
// their cycle buffers.
func (s *session) sendWR(i int, size, k uint64, signaled bool) ibtransport.SendWR {
	p := s.p
	off := s.sendOffset(i)
	raddr := s.remote[i].VAddr
	if p.bw {
		off += s.slot(size, k)
		raddr += s.slot(size, k)
	}
	wr := ibtransport.SendWR{WRID: uint64(i), Signaled: signaled, SGL: []ibtransport.SGE{s.mr.SGE(int(off), int(size))},
		RemoteAddr: raddr, RKey: s.remote[i].RKey}
	wr.Inline = p.inlined(size)
	if p.conn == "UD" { // conn.go
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = &s.ah[i], s.remote[i].QPN, s.udQKey()
	}
	switch p.verb {
	case verbSend:
		wr.Opcode, wr.RemoteAddr, wr.RKey = ibtransport.WRSend, 0, 0
	case verbWrite:
		wr.Opcode = ibtransport.WRRDMAWrite
	case verbRead:
		wr.Opcode = ibtransport.WRRDMARead
	case verbAtomic:
		if p.atomic == 0 {
			wr.Opcode, wr.Swap = ibtransport.WRAtomicCmpAndSwp, 0 // ATOMIC_SWAP_VALUE
		} else {
			wr.Opcode, wr.CompareAdd = ibtransport.WRAtomicFetchAdd, 1 // ATOMIC_ADD_VALUE
		}
	}
	return wr
}

// runBW is a bandwidth run for one size: the sender's loop (run_iter_bw), the
// receiver's (run_iter_bw_server), or both at once (run_iter_bi, -b).
func (s *session) runBW(ctx context.Context, size uint64) (perftest.BWReport, error) {
	p := s.p
	if p.infinite { // infinite.go
		if p.verb == verbSend && p.server && !p.duplex {
			return s.runBWReceiverInfinitely(ctx, size)
		}
		return s.runBWInfinitely(ctx, size)
	}
	if p.verb == verbSend && p.server && !p.duplex {
		return s.runBWReceiver(ctx, size)
	}
	if p.verb == verbSend && p.duplex {
		rctx, cancel := context.WithCancel(ctx)
		defer cancel()
		rerr := make(chan error, 1)
		go func() {
			_, err := s.receiveLoop(rctx, size, false)
			rerr <- err
		}()
		rep, err := s.runBWSender(ctx, size)
		if err != nil {
			cancel()
			<-rerr
			return rep, err
		}
		if p.durationMode() {
			cancel()
		}
		if err := <-rerr; err != nil && !errors.Is(err, context.Canceled) {
			return rep, err
		}
		return rep, nil
	}
	return s.runBWSender(ctx, size)
}

// runBWSender keeps tx depth WRs in flight on every QP, signalling one in cq
// moderation, and times posts and completions.
func (s *session) runBWSender(ctx context.Context, size uint64) (perftest.BWReport, error) {
	p := s.p
	nqp := len(s.qps)
	iters := uint64(p.iters)
	tot := iters * uint64(nqp)
	cqMod := uint64(p.cqMod)
	samples := bwSamples{size: size, cqMod: cqMod, noPeak: p.noPeak}
	if p.noPeak {
		samples.tposted, samples.tcompleted = make([]int64, 1), make([]int64, 1)
	} else {
		samples.tposted, samples.tcompleted = make([]int64, tot), make([]int64, tot)
	}
	scnt := make([]uint64, nqp)
	ccnt := make([]uint64, nqp)
	var totscnt, totccnt, measured uint64
	if s.credit != nil {
		s.credit.reset() // send_bw.c zeroes credit_buf before each run
	}
	clock := newPerfClock()
	dur := p.durationMode()
	timer := newPerfTimer(p, 0)
	if dur {
		samples.tposted[0], samples.tcompleted[0] = timer.sampleStart, timer.sampleEnd
	} else if p.noPeak {
		samples.tposted[0] = clock.now()
	}
	// progress is when the sender last posted or reaped (clock time): a
	// sender waiting for credit gives up noProgress after it.
	var progress int64
	for {
		now := clock.now()
		over := dur && timer.phase(now) == over
		if !dur && totscnt >= tot && totccnt >= tot || over {
			break
		}
		creditBlocked := false
		postedBefore := totscnt
		for q, qp := range s.qps {
			for (dur || scnt[q] < iters) && scnt[q]-ccnt[q]+1 <= uint64(p.txDepth) {
				if s.credit != nil && !s.credit.mayPost(q, scnt[q]) {
					creditBlocked = true
					break
				}
				k := scnt[q]
				signaled := cqMod == 1 || k%cqMod == cqMod-1 || (!dur && k == iters-1)
				if !p.noPeak {
					samples.tposted[totscnt] = clock.now()
				}
				if err := qp.PostSend(s.sendWR(q, size, k, signaled)); err != nil {
					return perftest.BWReport{}, fmt.Errorf("Couldn't post send: qp %d scnt=%d: %w", q, k, err)
				}
				scnt[q]++
				totscnt++
			}
		}
		if totscnt != postedBefore {
			progress = now
		}
		if !dur && totccnt >= tot {
			continue
		}
		n := s.sendCQ.Poll(s.wc)
		if n == 0 {
			var deadline time.Time
			if dur {
				deadline = clock.at(timer.end)
			}
			if creditBlocked {
				if err := s.creditStalled(time.Duration(now-progress), totscnt, totccnt); err != nil {
					return perftest.BWReport{}, err
				}
				// The receiver's credit arrives as an RDMA WRITE, with no
				// completion here: look at the credit word again soon.
				deadline = time.Now().Add(creditPoll)
			}
			if err := device.WaitCQ(ctx, s.sendCQ, deadline); err != nil {
				return perftest.BWReport{}, s.withReport(err)
			}
			continue
		}
		now = clock.now()
		progress = now
		for _, wc := range s.wc[:n] {
			if wc.Status != ibtransport.WCSuccess {
				return perftest.BWReport{}, s.completionError(wc, "send", totscnt, totccnt)
			}
			q := int(wc.WRID)
			d := reaped(ccnt[q], iters, cqMod, dur)
			ccnt[q] += d
			totccnt += d
			if !p.noPeak {
				samples.tcompleted[min(totccnt, tot)-1] = now
			}
			if dur && timer.phase(now) == sampling {
				measured += cqMod
			}
		}
	}
	if p.noPeak && !dur {
		samples.tcompleted[0] = clock.now()
	}
	samples.iters = tot
	if dur {
		samples.iters = measured
	}
	return samples.report(p.gbits), nil
}

// reaped is how many WRs one completion of a QP stands for, with ccnt of its
// WRs counted before: cqMod (one WR in cqMod is signaled), but the last one of
// an iterations run covers only the WRs left. Counting cqMod there made a QP
// that finished early count up to cqMod-1 WRs too many: with several QPs the
// total reached the goal while a slower QP still had WRs to post, the sender
// stopped polling, and that QP's window never reopened (write_bw --transport
// iwarp -R -q 4 -n 512 spun for ever).
func reaped(ccnt, iters, cqMod uint64, dur bool) uint64 {
	if dur || ccnt >= iters {
		return cqMod
	}
	return min(cqMod, iters-ccnt)
}

// creditStalled says why a sender that waits for the receiver's credit, and
// has waited idle for this long, gives up: a QP in the error state (its peer
// ended the connection: no credit WRITE will come, and with nothing in
// flight no completion either), or nothing posted or completed for the
// session's no-progress limit. Each of the sender's waits for credit is short
// (creditPoll), so WaitCQ's own limit never runs out.
func (s *session) creditStalled(idle time.Duration, posted, done uint64) error {
	for q, qp := range s.qps {
		if st := qp.State(); st == ibtransport.QPStateErr {
			return fmt.Errorf("waiting for the receiver's credit: QP %d is in state %v (posted %d, completed %d)", q, st, posted, done)
		}
	}
	if limit := s.noProgressLimit(); idle >= limit {
		return fmt.Errorf("no credit from the receiver for %v (posted %d, completed %d): is the peer still there?", limit, posted, done)
	}
	return nil
}

// noProgressLimit is how long the session waits without progress:
// noProgress unless a test sets noProgress.
func (s *session) noProgressLimit() time.Duration {
	if s.noProgress > 0 {
		return s.noProgress
	}
	return noProgress
}

// runBWReceiver is ib_send_bw's server: it keeps the receives posted and times
// from the first message to the last.
func (s *session) runBWReceiver(ctx context.Context, size uint64) (perftest.BWReport, error) {
	return s.receiveLoop(ctx, size, true)
}

// receiveLoop consumes receive completions and reposts receives. With report
// it returns run_iter_bw_server's report: messages over the time from the first
// to the last (or, with -D, those of the sample period).
func (s *session) receiveLoop(ctx context.Context, size uint64, report bool) (perftest.BWReport, error) {
	p := s.p
	nqp := len(s.qps)
	iters := uint64(p.iters)
	tot := iters * uint64(nqp)
	posted := make([]uint64, nqp)
	for i := range posted {
		posted[i] = uint64(p.rxDepth)
	}
	wc := make([]ibtransport.WC, 16)
	clock := newPerfClock()
	dur := p.durationMode()
	var timer timer
	var rcnt, measured uint64
	if s.credit != nil {
		s.credit.start()
	}
	first := true
	var tstart, tend int64
	for dur || rcnt < tot {
		now := clock.now()
		if dur && !first && timer.phase(now) == over {
			break
		}
		n := s.recvCQ.Poll(wc)
		if n == 0 {
			var deadline time.Time
			if dur && !first {
				deadline = clock.at(timer.end)
			}
			if err := device.WaitCQ(ctx, s.recvCQ, deadline); err != nil {
				return perftest.BWReport{}, s.withReport(err)
			}
			continue
		}
		now = clock.now()
		if first {
			first = false
			tstart = now
			timer = newPerfTimer(p, now)
		}
		for _, w := range wc[:n] {
			if w.Status != ibtransport.WCSuccess {
				return perftest.BWReport{}, s.completionError(w, "receive", rcnt, rcnt)
			}
			q := int(w.WRID)
			rcnt++
			if dur && timer.phase(now) == sampling {
				measured++
			}
			if dur || posted[q]+1 <= iters {
				if err := s.postRecv(s.qps[q], q, size, posted[q]); err != nil {
					return perftest.BWReport{}, fmt.Errorf("Couldn't post recv Qp=%d rcnt=%d: %w", q, rcnt, err)
				}
				posted[q]++
			}
			if s.credit != nil {
				if err := s.credit.received(ctx, s, q); err != nil {
					return perftest.BWReport{}, err
				}
			}
		}
	}
	tend = clock.now()
	if s.credit != nil {
		if err := s.credit.drain(ctx, s); err != nil {
			return perftest.BWReport{}, err
		}
	}
	if !report {
		return perftest.BWReport{}, nil
	}
	samples := bwSamples{size: size, iters: tot, cqMod: 1, noPeak: true,
		tposted: []int64{tstart}, tcompleted: []int64{tend}}
	if dur {
		samples.iters = measured
		samples.tposted[0], samples.tcompleted[0] = timer.sampleStart, timer.sampleEnd
	}
	return samples.report(p.gbits), nil
}

// latRun collects a latency run's post times and prints its row.
type latRun struct {
	s       *session
	size    uint64
	clock   clock
	tposted []int64
	dur     bool
	timer   timer
	count   uint64 // -D: completions during the sample period
}

func (s *session) newLatRun(size uint64) *latRun {
	r := &latRun{s: s, size: size, clock: newPerfClock(), dur: s.p.durationMode()}
	if r.dur {
		r.timer = newPerfTimer(s.p, 0)
	} else {
		r.tposted = make([]int64, 0, s.p.iters)
	}
	return r
}

func (r *latRun) more(n int) bool {
	if r.dur {
		return r.timer.phase(r.clock.now()) != over
	}
	return n < r.s.p.iters
}

func (r *latRun) posted() {
	if !r.dur {
		r.tposted = append(r.tposted, r.clock.now())
	}
}

func (r *latRun) completed() {
	if r.dur && r.timer.phase(r.clock.now()) == sampling {
		r.count++
	}
}

func (r *latRun) deadline() time.Time {
	if r.dur {
		return r.clock.at(r.timer.end)
	}
	return time.Time{}
}

func (r *latRun) over() bool { return r.dur && r.timer.phase(r.clock.now()) == over }

// report prints the row: round-trip tests halve the intervals.
func (r *latRun) report(rttFactor int) {
	var st latStats
	if r.dur {
		st = latDuration(r.size, r.count, r.timer.sampleEnd-r.timer.sampleStart, rttFactor)
	} else {
		st = latency(r.size, r.tposted, rttFactor)
	}
	io.WriteString(r.s.stdout, latLine(st, r.dur))
	r.s.res.Latency = append(r.s.res.Latency, st)
	r.s.outJSON.write(outJSONLat(st, r.dur))
}

// waitSend waits for one send completion.
func (r *latRun) waitSend(ctx context.Context) (bool, error) {
	s := r.s
	for {
		if s.sendCQ.Poll(s.wc[:1]) == 1 {
			if s.wc[0].Status != ibtransport.WCSuccess {
				return false, s.completionError(s.wc[0], "send", 0, 0)
			}
			return true, nil
		}
		if r.over() {
			return false, nil
		}
		if err := device.WaitCQ(ctx, s.sendCQ, r.deadline()); err != nil {
			return false, s.withReport(err)
		}
	}
}

// runLatWrite is ib_write_lat (run_iter_lat_write): each side WRITEs a message
// whose last byte counts the iterations and spins on the last byte of its own
// buffer for the peer's. The server writes first.
func (s *session) runLatWrite(ctx context.Context, size uint64) error {
	p := s.p
	r := s.newLatRun(size)
	qp := s.qps[0]
	pollOff := s.targetOffset(0) + size - 1
	postOff := s.sendOffset(0) + size - 1
	var scnt, ccnt, rcnt int
	for r.more(scnt) || (!r.dur && (ccnt < p.iters || rcnt < p.iters)) {
		if (r.dur || rcnt < p.iters) && !(scnt < 1 && p.server) {
			rcnt++
			if err := s.spinFor(ctx, r, pollOff, byte(rcnt)); err != nil {
				return err
			}
		}
		if r.more(scnt) {
			r.posted()
			scnt++
			// The byte the peer spins on: our send buffer is not being read by the
			// engine now, since the previous WRITE has completed.
			s.mem[postOff] = byte(scnt)
			if err := qp.PostSend(s.sendWR(0, size, 0, true)); err != nil {
				return fmt.Errorf("Couldn't post send: scnt=%d: %w", scnt, err)
			}
		}
		if r.over() {
			break
		}
		if r.dur || ccnt < p.iters {
			ok, err := r.waitSend(ctx)
			if err != nil {
				return err
			}
			if ok {
				ccnt++
				r.completed()
			}
		}
	}
	r.report(2)
	return nil
}

// spinFor waits until the byte at off of the buffer holds want: the peer's
// WRITE has landed. Like perftest's CPU, it reads memory that the transport
// writes; each read is MR.ReadAt's, under the engine's lock, under which the
// transport writes the message's last byte (RoCE: the whole WRITE; iWARP:
// the last octets of each segment).
func (s *session) spinFor(ctx context.Context, r *latRun, off uint64, want byte) error {
	limit := time.Now().Add(noProgress)
	var b [1]byte
	for spins := 0; ; spins++ {
		if _, err := s.mr.ReadAt(b[:], int64(off)); err != nil {
			return err
		}
		if b[0] == want {
			return nil
		}
		if r.over() {
			return nil
		}
		if spins&1023 == 1023 {
			if err := ctx.Err(); err != nil {
				return err
			}
			if time.Now().After(limit) {
				return s.withReport(fmt.Errorf("no WRITE from the peer for %v: is it still there?", noProgress))
			}
			time.Sleep(20 * time.Microsecond)
		} else {
			runtime.Gosched()
		}
	}
}

// runLatSend is ib_send_lat (run_iter_lat_send): a SEND ping-pong; the client
// sends first.
func (s *session) runLatSend(ctx context.Context, size uint64) error {
	p := s.p
	r := s.newLatRun(size)
	qp := s.qps[0]
	var scnt, rcnt int
	cqMod := p.cqMod
	for r.more(scnt) || (!r.dur && rcnt < p.iters) {
		if (r.dur || rcnt < p.iters) && !(scnt < 1 && !p.server) {
			got := false
			for !got {
				if s.recvCQ.Poll(s.wc[:1]) == 1 {
					w := s.wc[0]
					if w.Status != ibtransport.WCSuccess {
						return s.completionError(w, "receive", uint64(scnt), uint64(rcnt))
					}
					got = true
					rcnt++
					r.completed()
					if r.dur || rcnt+p.rxDepth <= p.iters {
						if err := s.postRecv(qp, 0, size, 0); err != nil {
							return fmt.Errorf("Couldn't post recv: rcnt=%d: %w", rcnt, err)
						}
					}
					break
				}
				if r.over() {
					break
				}
				if err := device.WaitCQ(ctx, s.recvCQ, r.deadline()); err != nil {
					return s.withReport(err)
				}
			}
		}
		if r.over() {
			break
		}
		if r.more(scnt) {
			r.posted()
			scnt++
			signaled := scnt%cqMod == 0 || (!r.dur && scnt == p.iters)
			if err := qp.PostSend(s.sendWR(0, size, 0, signaled)); err != nil {
				return fmt.Errorf("Couldn't post send: scnt=%d: %w", scnt, err)
			}
			if signaled {
				if _, err := r.waitSend(ctx); err != nil {
					return err
				}
			}
		}
	}
	r.report(2)
	return nil
}

// runLatRead is ib_read_lat's client (run_iter_lat): one READ at a time; the
// interval between posts is the latency (no halving).
func (s *session) runLatRead(ctx context.Context, size uint64) error {
	r := s.newLatRun(size)
	qp := s.qps[0]
	for scnt := 0; r.more(scnt); scnt++ {
		r.posted()
		if err := qp.PostSend(s.sendWR(0, size, 0, true)); err != nil {
			return fmt.Errorf("Couldn't post send: scnt=%d: %w", scnt, err)
		}
		ok, err := r.waitSend(ctx)
		if err != nil {
			return err
		}
		if ok {
			r.completed()
		}
	}
	r.report(1)
	return nil
}
