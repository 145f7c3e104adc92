package conform

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"

	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/iwarp"
)

// PeerDevice is what the control server needs of a softrdma device: its verbs
// engine. A RoCE device (*roce.Device) is also a RoCEPeerDevice; an iWARP device
// (*iwarp.Device) needs Server.Transport "iwarp".
type PeerDevice interface {
	Context() *ib.Context
}

// RoCEPeerDevice is a PeerDevice with RoCE addressing: address handles to the
// tester, the port's MTU, the GID table.
type RoCEPeerDevice interface {
	PeerDevice
	AddressHandle(dst netip.Addr) (ib.AddressHandle, error)
	PathMTU() int
	GIDs() []netip.Addr
}

// Server serves the control protocol for a softrdma device. Each connection is
// a session with its own PD; what a session creates is destroyed by reset and
// when its connection closes.
type Server struct {
	// Device is the peer under test.
	Device PeerDevice
	// Transport is "roce" (the default: Device must be a RoCEPeerDevice) or
	// "iwarp" (Device's QPs are run by package iwarp).
	Transport string
	// ListenHost is the address an iWARP QP's listener binds (default
	// 127.0.0.1); create_qp returns the address with the port the system chose.
	ListenHost string
	// Observe, if not nil, is the iWARP QPs' connections' stream observer
	// (iwarp.ConnParams.Observe): a capture of what they send and receive.
	Observe func(local, remote net.Addr) iwarp.StreamObserver
	// MaxSessionMemory bounds the octets of the regions one session holds
	// registered at once (0: DefaultMaxSessionMemory): a reg_mr beyond it is
	// refused with ErrSessionMemory, so that whoever reaches the control port
	// cannot make the server allocate without limit (16 MiB a reg_mr).
	MaxSessionMemory int64

	// For a deliberately broken peer (Fault): editQP changes what create_qp
	// asked for, reportMTU is the MTU the server claims instead of the real one.
	editQP    func(*QPSpec)
	reportMTU int
}

// pathMTU is the MTU the server reports.
func (s *Server) pathMTU() int {
	if s.reportMTU > 0 {
		return s.reportMTU
	}
	if d, ok := s.Device.(RoCEPeerDevice); ok {
		return d.PathMTU()
	}
	return s.Device.Context().Config().PortMTU
}

func (s *Server) iwarp() bool { return s.Transport == "iwarp" }

// DefaultMaxSessionMemory is Server.MaxSessionMemory's default: 256 MiB, far
// more than a case needs (a few regions of a few KiB).
const DefaultMaxSessionMemory = 256 << 20

// ErrSessionMemory is reg_mr's error when the session's regions would exceed
// Server.MaxSessionMemory.
var ErrSessionMemory = errors.New("session memory limit")

// maxSessionMemory is the limit in force.
func (s *Server) maxSessionMemory() int64 {
	if s.MaxSessionMemory > 0 {
		return s.MaxSessionMemory
	}
	return DefaultMaxSessionMemory
}

// Serve accepts connections on l and serves each in its own goroutine until l
// is closed.
func (s *Server) Serve(l net.Listener) error {
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go s.ServeConn(c)
	}
}

// ServeConn serves one session on conn until it closes, then destroys what the
// session created and closes conn.
func (s *Server) ServeConn(conn net.Conn) error {
	defer conn.Close()
	ses := &session{srv: s, ctx: s.Device.Context(), qps: map[uint32]*sessionQP{}, mrs: map[int]*ib.MR{}}
	defer ses.reset()
	r := bufio.NewReaderSize(conn, 64<<10)
	w := bufio.NewWriter(conn)
	for {
		line, err := readLine(r)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, io.ErrClosedPipe) {
				return nil
			}
			return err
		}
		var req ControlRequest
		resp := ControlResponse{}
		if err := json.Unmarshal(line, &req); err != nil {
			resp.Error = "bad request: " + err.Error()
		} else {
			resp.ID = req.ID
			result, err := ses.dispatch(req.Op, req.Args)
			if err != nil {
				resp.Error = err.Error()
			} else {
				resp.OK = true
				if result != nil {
					b, err := json.Marshal(result)
					if err != nil {
						resp.OK, resp.Error = false, err.Error()
					} else {
						resp.Result = b
					}
				}
			}
		}
		b, _ := json.Marshal(resp)
		w.Write(b)
		w.WriteByte('\n')
		if err := w.Flush(); err != nil {
			return err
		}
	}
}

// session is one connection's objects.
type session struct {
	srv    *Server
	ctx    *ib.Context
	mu     sync.Mutex
	pd     *ib.PD
	qps    map[uint32]*sessionQP
	mrs    map[int]*ib.MR
	nextMR int
	memory int64 // octets of the regions in mrs
	ahs    map[netip.Addr]*ib.AddressHandle
}

type sessionQP struct {
	qp       *ib.QP
	scq, rcq *ib.CQ
	iw       *iwarpQP // an iWARP QP's listener and connection
}

var serverOps = []string{OpHello, OpCreateQP, OpDestroyQP, OpRegMR, OpWriteMR, OpReadMR,
	OpPostRecv, OpPostSend, OpPollCQ, OpQueryQP, OpReset}

func (s *session) dispatch(op string, raw json.RawMessage) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	decode := func(v any) error {
		if len(raw) == 0 {
			return nil
		}
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			return fmt.Errorf("bad arguments: %w", err)
		}
		return nil
	}
	switch op {
	case OpHello:
		return s.hello(), nil
	case OpCreateQP:
		var a QPSpec
		if err := decode(&a); err != nil {
			return nil, err
		}
		if s.srv.editQP != nil {
			s.srv.editQP(&a)
		}
		return s.createQP(a)
	case OpDestroyQP:
		var a QPArgs
		if err := decode(&a); err != nil {
			return nil, err
		}
		q, err := s.qp(a.QPN)
		if err != nil {
			return nil, err
		}
		s.destroyQP(a.QPN, q)
		return nil, nil
	case OpRegMR:
		var a MRSpec
		if err := decode(&a); err != nil {
			return nil, err
		}
		return s.regMR(a)
	case OpWriteMR, OpReadMR:
		var a MemArgs
		if err := decode(&a); err != nil {
			return nil, err
		}
		return s.mem(op == OpWriteMR, a)
	case OpPostRecv:
		var a RecvSpec
		if err := decode(&a); err != nil {
			return nil, err
		}
		return nil, s.postRecv(a)
	case OpPostSend:
		var a SendSpec
		if err := decode(&a); err != nil {
			return nil, err
		}
		return nil, s.postSend(a)
	case OpPollCQ:
		var a PollArgs
		if err := decode(&a); err != nil {
			return nil, err
		}
		return s.poll(a)
	case OpQueryQP:
		var a QPArgs
		if err := decode(&a); err != nil {
			return nil, err
		}
		return s.query(a.QPN)
	case OpReset:
		s.resetLocked()
		return nil, nil
	}
	return nil, ErrUnsupportedOp
}

func (s *session) hello() *Hello {
	h := &Hello{Protocol: ControlProtocol, Implementation: "softrdma", Transport: s.srv.Transport,
		PathMTU: s.srv.pathMTU(), PKeys: s.ctx.Config().PKeys, ByteOrder: nativeByteOrder(), Ops: serverOps}
	if h.Transport == "" {
		h.Transport = "roce"
	}
	if d, ok := s.srv.Device.(RoCEPeerDevice); ok {
		for _, g := range d.GIDs() {
			h.Addrs = append(h.Addrs, g.Unmap().String())
		}
	}
	if s.srv.iwarp() {
		h.Addrs = []string{s.srv.listenHost()}
	}
	return h
}

// nativeByteOrder names the byte order the engine keeps atomic operands in.
func nativeByteOrder() string {
	var b [2]byte
	binary.NativeEndian.PutUint16(b[:], 1)
	if b[0] == 1 {
		return "little"
	}
	return "big"
}

func parseAccess(names []string) (ib.Access, error) {
	var a ib.Access
	for _, n := range names {
		switch n {
		case AccessRemoteWrite:
			a |= ib.AccessRemoteWrite
		case AccessRemoteRead:
			a |= ib.AccessRemoteRead
		case AccessRemoteAtomic:
			a |= ib.AccessRemoteAtomic
		default:
			return 0, fmt.Errorf("unknown access right %q", n)
		}
	}
	return a, nil
}

func (s *session) ensurePD() *ib.PD {
	if s.pd == nil {
		s.pd = s.ctx.AllocPD()
	}
	return s.pd
}

func (s *session) ah(ip string) (*ib.AddressHandle, error) {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return nil, fmt.Errorf("remote_ip %q: %w", ip, err)
	}
	if s.ahs == nil {
		s.ahs = map[netip.Addr]*ib.AddressHandle{}
	}
	if ah, ok := s.ahs[a]; ok {
		return ah, nil
	}
	d, ok := s.srv.Device.(RoCEPeerDevice)
	if !ok {
		return nil, errors.New("the device has no RoCE address handles")
	}
	h, err := d.AddressHandle(a)
	if err != nil {
		return nil, err
	}
	s.ahs[a] = &h
	return &h, nil
}

func (s *session) createQP(a QPSpec) (*QPInfo, error) {
	var typ ib.QPType
	switch a.Type {
	case "rc":
		typ = ib.QPTypeRC
	case "uc":
		typ = ib.QPTypeUC
	case "ud":
		typ = ib.QPTypeUD
	default:
		return nil, fmt.Errorf("type %q: want rc, uc or ud", a.Type)
	}
	access, err := parseAccess(a.Access)
	if err != nil {
		return nil, err
	}
	if a.MaxSendWR > maxQueueDepth || a.MaxRecvWR > maxQueueDepth {
		return nil, fmt.Errorf("queue depths %d/%d: at most %d", a.MaxSendWR, a.MaxRecvWR, maxQueueDepth)
	}
	depth := func(n int) int {
		if n <= 0 {
			return 16
		}
		return n
	}
	pd := s.ensurePD()
	scq, err := s.ctx.CreateCQ(depth(a.MaxSendWR) + 16)
	if err != nil {
		return nil, err
	}
	rcq, err := s.ctx.CreateCQ(depth(a.MaxRecvWR) + 16)
	if err != nil {
		scq.Destroy()
		return nil, err
	}
	qp, err := s.ctx.CreateQP(pd, ib.QPInitAttr{Type: typ, SendCQ: scq, RecvCQ: rcq, SignalAll: true,
		Cap: ib.QPCap{MaxSendWR: depth(a.MaxSendWR), MaxRecvWR: depth(a.MaxRecvWR), MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		rcq.Destroy()
		scq.Destroy()
		return nil, err
	}
	q := &sessionQP{qp: qp, scq: scq, rcq: rcq}
	fail := func(err error) (*QPInfo, error) {
		q.destroy()
		return nil, err
	}
	if s.srv.iwarp() {
		return s.listenQP(q, a, access)
	}
	mtu := a.PathMTU
	if mtu == 0 {
		mtu = s.srv.pathMTU()
	}
	type step struct {
		attr ib.QPAttr
		mask ib.QPAttrMask
	}
	var steps []step
	if typ == ib.QPTypeUD {
		steps = []step{
			{ib.QPAttr{QPState: ib.QPStateInit, Port: 1, QKey: a.QKey}, ib.QPAttrState | ib.QPAttrPKeyIndex | ib.QPAttrPort | ib.QPAttrQKey},
			{ib.QPAttr{QPState: ib.QPStateRTR}, ib.QPAttrState},
			{ib.QPAttr{QPState: ib.QPStateRTS, SQPSN: a.SQPSN}, ib.QPAttrState | ib.QPAttrSQPSN},
		}
	} else {
		ah, err := s.ah(a.RemoteIP)
		if err != nil {
			return fail(err)
		}
		rtr := ib.QPAttr{QPState: ib.QPStateRTR, AH: *ah, PathMTU: mtu, DestQPN: a.RemoteQPN, RQPSN: a.RQPSN}
		rtrMask := ib.QPAttrState | ib.QPAttrAH | ib.QPAttrPathMTU | ib.QPAttrDestQPN | ib.QPAttrRQPSN
		rts := ib.QPAttr{QPState: ib.QPStateRTS, SQPSN: a.SQPSN}
		rtsMask := ib.QPAttrState | ib.QPAttrSQPSN
		if typ == ib.QPTypeRC {
			rtr.MaxDestRdAtomic, rtr.MinRNRTimer = a.MaxDestRdAtomic, a.MinRNRTimer
			rtrMask |= ib.QPAttrMaxDestRdAtomic | ib.QPAttrMinRNRTimer
			rts.Timeout, rts.RetryCnt, rts.RNRRetry, rts.MaxRdAtomic = a.Timeout, a.RetryCnt, a.RNRRetry, a.MaxRdAtomic
			rtsMask |= ib.QPAttrTimeout | ib.QPAttrRetryCnt | ib.QPAttrRNRRetry | ib.QPAttrMaxRdAtomic
		}
		steps = []step{
			{ib.QPAttr{QPState: ib.QPStateInit, Port: 1, AccessFlags: access},
				ib.QPAttrState | ib.QPAttrPKeyIndex | ib.QPAttrPort | ib.QPAttrAccessFlags},
			{rtr, rtrMask},
			{rts, rtsMask},
		}
	}
	for _, st := range steps {
		if err := qp.Modify(&st.attr, st.mask); err != nil {
			return fail(err)
		}
	}
	s.qps[qp.QPN()] = q
	pkeys := s.ctx.Config().PKeys
	qmtu := qp.Query().PathMTU
	if qmtu == 0 { // a UD QP: the port's MTU
		qmtu = s.srv.pathMTU()
	}
	return &QPInfo{QPN: qp.QPN(), State: qp.State().String(), PathMTU: qmtu, PKey: pkeys[0]}, nil
}

func (q *sessionQP) destroy() {
	if q.iw != nil {
		q.iw.close()
	}
	q.qp.Destroy()
	q.scq.Destroy()
	q.rcq.Destroy()
}

func (s *session) qp(qpn uint32) (*sessionQP, error) {
	q, ok := s.qps[qpn]
	if !ok {
		return nil, fmt.Errorf("no QP 0x%x in this session", qpn)
	}
	return q, nil
}

func (s *session) destroyQP(qpn uint32, q *sessionQP) {
	q.destroy()
	delete(s.qps, qpn)
}

// Bounds of what one request may ask for.
const (
	maxQueueDepth = 4096
	maxRegion     = 16 << 20
)

func (s *session) regMR(a MRSpec) (*MRInfo, error) {
	if a.Length <= 0 || a.Length > maxRegion {
		return nil, fmt.Errorf("length %d: want 1..%d", a.Length, maxRegion)
	}
	if limit := s.srv.maxSessionMemory(); s.memory+int64(a.Length) > limit {
		return nil, fmt.Errorf("length %d: %w: the session's regions hold %d octets, at most %d (reset frees them)",
			a.Length, ErrSessionMemory, s.memory, limit)
	}
	access, err := parseAccess(a.Access)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, a.Length)
	for i := range buf {
		buf[i] = a.Fill
	}
	mr, err := s.ensurePD().RegMR(buf, access|ib.AccessLocalWrite)
	if err != nil {
		return nil, err
	}
	s.nextMR++
	s.mrs[s.nextMR] = mr
	s.memory += int64(a.Length)
	return &MRInfo{MR: s.nextMR, VA: mr.Addr(), RKey: mr.RKey(), LKey: mr.LKey(), Length: a.Length}, nil
}

func (s *session) mr(h int) (*ib.MR, error) {
	mr, ok := s.mrs[h]
	if !ok {
		return nil, fmt.Errorf("no region %d in this session", h)
	}
	return mr, nil
}

// mem reads or writes a region's bytes. MR.Buf takes the engine's lock, so what
// the engine wrote before is visible; the copy itself runs while the engine may
// run, like an application touching its own buffer.
func (s *session) mem(write bool, a MemArgs) (any, error) {
	mr, err := s.mr(a.MR)
	if err != nil {
		return nil, err
	}
	buf := mr.Buf()
	n := a.Length
	if write {
		n = len(a.Data)
	}
	if a.Offset < 0 || n < 0 || a.Offset > len(buf) || n > len(buf)-a.Offset {
		return nil, fmt.Errorf("range %d+%d outside region of %d bytes", a.Offset, n, len(buf))
	}
	if write {
		copy(buf[a.Offset:], a.Data)
		mr.Len() // publish the write to the engine (its lock)
		return nil, nil
	}
	return &MemArgs{MR: a.MR, Offset: a.Offset, Length: n, Data: append([]byte(nil), buf[a.Offset:a.Offset+n]...)}, nil
}

func (s *session) postRecv(a RecvSpec) error {
	q, err := s.qp(a.QPN)
	if err != nil {
		return err
	}
	mr, err := s.mr(a.MR)
	if err != nil {
		return err
	}
	n := max(a.Count, 1)
	if n > maxQueueDepth || a.Offset < 0 || a.Length < 0 || int64(a.Offset)+int64(n)*int64(a.Length) > int64(mr.Len()) {
		return fmt.Errorf("%d receives of %d bytes from offset %d do not fit the region of %d bytes", n, a.Length, a.Offset, mr.Len())
	}
	wrs := make([]ib.RecvWR, n)
	for i := range wrs {
		wrs[i] = ib.RecvWR{WRID: a.WRID + uint64(i), SGL: []ib.SGE{mr.SGE(a.Offset+i*a.Length, a.Length)}}
	}
	return q.qp.PostRecv(wrs...)
}

var sendOpcodes = map[string]ib.WROpcode{
	"send": ib.WRSend, "send_imm": ib.WRSendWithImm, "write": ib.WRRDMAWrite, "write_imm": ib.WRRDMAWriteWithImm,
	"read": ib.WRRDMARead, "cmp_swap": ib.WRAtomicCmpAndSwp, "fetch_add": ib.WRAtomicFetchAdd,
}

func (s *session) postSend(a SendSpec) error {
	q, err := s.qp(a.QPN)
	if err != nil {
		return err
	}
	op, ok := sendOpcodes[a.Opcode]
	if !ok {
		return fmt.Errorf("opcode %q: unknown", a.Opcode)
	}
	mr, err := s.mr(a.MR)
	if err != nil {
		return err
	}
	if a.Offset < 0 || a.Length < 0 || int64(a.Offset)+int64(a.Length) > int64(mr.Len()) {
		return fmt.Errorf("%d bytes at offset %d do not fit the region of %d bytes", a.Length, a.Offset, mr.Len())
	}
	wr := ib.SendWR{WRID: a.WRID, Opcode: op, SGL: []ib.SGE{mr.SGE(a.Offset, a.Length)}, Signaled: true,
		Imm: a.Imm, RemoteAddr: a.RemoteVA, RKey: a.RKey, CompareAdd: a.CompareAdd, Swap: a.Swap}
	if q.qp.Type() == ib.QPTypeUD {
		ah, err := s.ah(a.RemoteIP)
		if err != nil {
			return err
		}
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = ah, a.RemoteQPN, a.RemoteQKey
	}
	return q.qp.PostSend(wr)
}

func (s *session) poll(a PollArgs) (any, error) {
	q, err := s.qp(a.QPN)
	if err != nil {
		return nil, err
	}
	n := a.Max
	if n <= 0 || n > 1024 {
		n = 64
	}
	cq := q.scq
	if a.Recv {
		cq = q.rcq
	}
	wcs := make([]ib.WC, n)
	k := cq.Poll(wcs)
	out := struct {
		Completions []Completion `json:"completions"`
	}{Completions: []Completion{}}
	for _, wc := range wcs[:k] {
		c := Completion{WRID: wc.WRID, Status: wc.Status.String(), Opcode: wc.Opcode.String(), ByteLen: wc.ByteLen,
			Imm: wc.Imm, SrcQP: wc.SrcQP}
		if wc.Flags != 0 {
			c.Flags = wc.Flags.String()
		}
		out.Completions = append(out.Completions, c)
	}
	return out, nil
}

func (s *session) query(qpn uint32) (any, error) {
	q, err := s.qp(qpn)
	if err != nil {
		return nil, err
	}
	c := q.qp.Counters()
	st := &QPStatus{QPN: qpn, State: q.qp.State().String(), Counters: map[string]uint64{
		"packets_in": c.PacketsIn, "packets_out": c.PacketsOut, "acks_sent": c.AcksSent,
		"rnr_naks_sent": c.RNRNAKsSent, "duplicate_requests": c.DuplicateRequests,
		"retransmissions": c.Retransmissions, "timeouts": c.Timeouts,
	}}
	for i, n := range c.NAKsSent {
		st.Counters[fmt.Sprintf("naks_sent_%d", i)] = n
	}
	for i, n := range c.Drops {
		if n != 0 {
			st.Counters["drops_"+strings.ReplaceAll(ib.DropReason(i).String(), " ", "_")] = n
		}
	}
	if q.iw != nil {
		st.ConnError = q.iw.connError()
	}
	return st, nil
}

func (s *session) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resetLocked()
}

func (s *session) resetLocked() {
	for qpn, q := range s.qps {
		s.destroyQP(qpn, q)
	}
	for h, mr := range s.mrs {
		mr.Dereg()
		delete(s.mrs, h)
	}
	s.memory = 0
	s.ahs = nil
	if s.pd != nil {
		s.pd.Dealloc()
		s.pd = nil
	}
}
