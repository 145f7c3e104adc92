// Package pingpong is softrdma pingpong: rdma-core's ibv_rc_pingpong,
// ibv_ud_pingpong and ibv_uc_pingpong (v44) over a softrdma RoCE device
// (package device), with the tools' TCP exchange (package oob/pingpong),
// their output and their exit statuses, so that either side can be the real
// tool. Run runs one side with Options; cmd/softrdma holds the flags.
package pingpong

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strconv"
	"time"

	"github.com/softrdma/softrdma/device"
	"github.com/softrdma/softrdma/devspec"
	"github.com/softrdma/softrdma/ibtransport"
	oobpp "github.com/softrdma/softrdma/oob/pingpong"
	"github.com/softrdma/softrdma/roce"
)

// Options are the flags of softrdma pingpong.
type Options struct {
	Mode      string // rc, ud or uc
	Port      int
	Device    string
	IBPort    int
	Size      int
	MTU       int
	RxDepth   int
	Iters     int
	SL        int
	Events    bool
	GIDIndex  int
	Check     bool
	Transport string
	Backend   string
	Pcap      string
	JSON      bool
	Wait      time.Duration
	Timeout   time.Duration
	Server    string

	TAPAddrs, TAPKernelAddrs []netip.Prefix
}

// Result is what softrdma pingpong reports with --json.
type Result struct {
	Mode         string  `json:"mode"`
	Role         string  `json:"role"`
	Interface    string  `json:"interface"`
	LocalAddr    string  `json:"local_ip"`
	Local        Dest    `json:"local"`
	Remote       Dest    `json:"remote"`
	Size         int     `json:"size"`
	Iters        int     `json:"iters"`
	Bytes        int64   `json:"bytes"`
	Seconds      float64 `json:"seconds"`
	MbitPerSec   float64 `json:"mbit_per_sec"`
	UsecPerIter  float64 `json:"usec_per_iter"`
	InvalidPages []int   `json:"invalid_pages,omitempty"`
	PcapFrames   uint64  `json:"pcap_frames,omitempty"`
	// Device counts what the device dropped (bad ICRC, not RoCE, ...).
	Device *roce.DeviceCounters `json:"device_counters,omitempty"`
	Error  string               `json:"error,omitempty"`
}

// Dest is one side's address as printed by the tools.
type Dest struct {
	LID uint16 `json:"lid"`
	QPN uint32 `json:"qpn"`
	PSN uint32 `json:"psn"`
	GID string `json:"gid"`
}

// Work request IDs, as the tools use them: also bits of the pending mask.
const (
	recvWRID = 1
	sendWRID = 2
)

// grhLen is the space a UD receive leaves for the GRH (ud_pingpong's "+ 40").
const grhLen = 40

// qKey is the Q_Key of ibv_ud_pingpong's QPs and sends.
const qKey = 0x11111111

// session is one pingpong run: the device, the QP and its buffer.
type session struct {
	o    Options
	dev  *device.RoCE
	cq   *ibtransport.CQ
	qp   *ibtransport.QP
	mr   *ibtransport.MR
	buf  []byte
	ah   *ibtransport.AddressHandle
	rqpn uint32
}

func Run(o Options, stdout io.Writer, res *Result) (err error) {
	ctx := context.Background()
	if o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Timeout)
		defer cancel()
	}
	res.Mode, res.Size, res.Iters = o.Mode, o.Size, o.Iters
	res.Role = "server"
	if o.Server != "" {
		res.Role = "client"
	}
	text := func(format string, args ...any) {
		if !o.JSON {
			fmt.Fprintf(stdout, format, args...)
		}
	}

	// The client resolves the server first: the device is chosen by the route to it.
	var peer netip.Addr
	if o.Server != "" {
		if peer, err = resolve(ctx, o.Server); err != nil {
			return err
		}
	}
	dev, err := OpenDevice(o, peer, 0)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := dev.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("closing the device: %w", cerr)
		}
		if o.Pcap != "" {
			res.PcapFrames = dev.PcapFrames()
		}
		c := dev.RoCE().Counters()
		res.Device = &c
	}()
	res.Interface, res.LocalAddr = dev.Name(), dev.Local().String()
	s := &session{o: o, dev: dev}
	if err := s.init(); err != nil {
		return err
	}
	if n := s.postRecv(o.RxDepth); n < o.RxDepth {
		return fmt.Errorf("Couldn't post receive (%d)", n)
	}
	if o.Events {
		s.cq.Notify(false)
	}

	local := oobpp.Dest{QPN: s.qp.QPN(), PSN: rand.Uint32() & 0xffffff}
	if o.GIDIndex >= 0 {
		local.GID = dev.GIDs()[o.GIDIndex].As16()
	}
	res.Local = jsonDest(local)
	gidSep := ","
	if o.Mode == "ud" {
		gidSep = ":" // ud_pingpong.c prints "PSN 0x%06x: GID" for the local address
	}

	var remote oobpp.Dest
	if o.Server != "" {
		text("  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x%s GID %s\n", local.LID, local.QPN, local.PSN, gidSep, netip.AddrFrom16(local.GID))
		conn, err := dial(ctx, o.Server, o.Port, o.Wait, dialSource(o, dev.Local(), peer))
		if err != nil {
			return err
		}
		remote, err = oobpp.Client(ctx, conn, local)
		conn.Close()
		if err != nil {
			return fmt.Errorf("Couldn't read/write remote address: %w", err)
		}
		text("  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", remote.LID, remote.QPN, remote.PSN, netip.AddrFrom16(remote.GID))
		if err := s.connect(local.PSN, remote, peer); err != nil {
			return err
		}
	} else {
		// Listen before printing the local address: whoever waits for that line
		// (a script, a test) may connect at once. The tools print first.
		ln, err := net.Listen("tcp", ":"+strconv.Itoa(o.Port))
		if err != nil {
			return fmt.Errorf("Couldn't listen to port %d: %w", o.Port, err)
		}
		text("  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x%s GID %s\n", local.LID, local.QPN, local.PSN, gidSep, netip.AddrFrom16(local.GID))
		conn, err := accept(ctx, ln)
		ln.Close()
		if err != nil {
			return fmt.Errorf("accept() failed: %w", err)
		}
		tcpPeer := conn.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
		remote, err = oobpp.Server(ctx, conn, local, func(ctx context.Context, remote oobpp.Dest) error {
			return s.connect(local.PSN, remote, tcpPeer)
		})
		conn.Close()
		if err != nil {
			return fmt.Errorf("Couldn't send/recv local address: %w", err)
		}
		text("  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", remote.LID, remote.QPN, remote.PSN, netip.AddrFrom16(remote.GID))
	}
	res.Remote = jsonDest(remote)

	start, err := s.run(ctx)
	if err != nil {
		return err
	}
	// The tools' arithmetic: microseconds as a C float, bytes as long long.
	usec := float32((time.Since(start)).Microseconds())
	bytes := int64(o.Size) * int64(o.Iters) * 2
	mbit := float64(bytes) * 8 / float64(usec)
	perIter := float64(usec / float32(o.Iters))
	text("%d bytes in %s seconds = %s Mbit/sec\n", bytes, cFloat(float64(usec)/1e6), cFloat(mbit))
	text("%d iters in %s seconds = %s usec/iter\n", o.Iters, cFloat(float64(usec)/1e6), cFloat(perIter))
	res.Bytes, res.Seconds, res.MbitPerSec, res.UsecPerIter = bytes, float64(usec)/1e6, jsonFloat(mbit), jsonFloat(perIter)
	if o.Server == "" && o.Check {
		off := 0
		if o.Mode == "ud" {
			off = grhLen
		}
		page := os.Getpagesize()
		for i := 0; i < o.Size; i += page {
			// rdma-core compares with i / page_size % sizeof(char), which is 0.
			if s.buf[off+i] != 0 {
				text("invalid data in page %d\n", i/page)
				res.InvalidPages = append(res.InvalidPages, i/page)
			}
		}
	}
	return nil
}

// init creates the CQ, the QP and the buffer and moves the QP to INIT, as
// pp_init_ctx does.
func (s *session) init() error {
	c := s.dev.Context()
	pd := c.AllocPD()
	n := s.o.Size
	if s.o.Mode == "ud" {
		if mtu := s.dev.PathMTU(); s.o.Size > mtu {
			return fmt.Errorf("Requested size larger than port MTU (%d)", mtu)
		}
		n += grhLen
	}
	s.buf = make([]byte, n)
	for i := range s.buf {
		s.buf[i] = 0x7b
	}
	var err error
	if s.mr, err = pd.RegMR(s.buf, ibtransport.AccessLocalWrite); err != nil {
		return fmt.Errorf("Couldn't register MR: %w", err)
	}
	if s.cq, err = c.CreateCQ(s.o.RxDepth + 1); err != nil {
		return fmt.Errorf("Couldn't create CQ: %w", err)
	}
	typ := map[string]ibtransport.QPType{"rc": ibtransport.QPTypeRC, "uc": ibtransport.QPTypeUC, "ud": ibtransport.QPTypeUD}[s.o.Mode]
	if s.qp, err = c.CreateQP(pd, ibtransport.QPInitAttr{Type: typ, SendCQ: s.cq, RecvCQ: s.cq,
		Cap: ibtransport.QPCap{MaxSendWR: 1, MaxRecvWR: s.o.RxDepth, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return fmt.Errorf("Couldn't create QP: %w", err)
	}
	attr := ibtransport.QPAttr{QPState: ibtransport.QPStateInit, PKeyIndex: 0, Port: uint8(s.o.IBPort)}
	mask := ibtransport.QPAttrState | ibtransport.QPAttrPKeyIndex | ibtransport.QPAttrPort
	if s.o.Mode == "ud" {
		attr.QKey = qKey
		mask |= ibtransport.QPAttrQKey
	} else {
		mask |= ibtransport.QPAttrAccessFlags
	}
	if err := s.qp.Modify(&attr, mask); err != nil {
		return fmt.Errorf("Failed to modify QP to INIT: %w", err)
	}
	return nil
}

// addressHandle is the AH to the remote side: its GID when it sent one (the
// tools' is_global when the GID's interface ID is not zero), else the address
// the TCP exchange came from. The tools ask for hop limit 1, but rxe puts TTL
// 64 on the wire whatever the AH says (rxe-*-oobpp.pcap); softrdma leaves
// the hop limit to the device, which uses 64 too.
func (s *session) addressHandle(remote oobpp.Dest, peer netip.Addr) (ibtransport.AddressHandle, error) {
	dst := peer
	var iid [8]byte
	copy(iid[:], remote.GID[8:])
	if iid != [8]byte{} {
		dst = netip.AddrFrom16(remote.GID)
	}
	if !dst.IsValid() {
		return ibtransport.AddressHandle{}, errors.New("remote sent no GID and its address is unknown")
	}
	if iid == ([8]byte{}) && dst.Unmap() == s.dev.Local().Unmap() {
		// Without -g the remote's RoCE address is taken to be its TCP
		// address; when that is this side's own, the remote's device is on
		// another address (a server without -d takes the first interface
		// up, not lo) and every packet would come back here, retried until
		// the QP fails.
		return ibtransport.AddressHandle{}, fmt.Errorf("remote sent no GID (no -g) and its TCP address %v is this side's own RoCE address, so its device is on another one: give -g 1 on both sides (on one host, also -d 127.0.0.2 on one side if both are on %v)", peer, s.dev.Local())
	}
	if dst.Unmap().Is4() != s.dev.Local().Is4() {
		return ibtransport.AddressHandle{}, fmt.Errorf("remote GID %v is not of the local address %v's family (give -g the same IP version on both sides)", netip.AddrFrom16(remote.GID), s.dev.Local())
	}
	ah := ibtransport.AddressHandle{DGID: dst.As16(), SL: uint8(s.o.SL)}
	if s.o.GIDIndex > 0 {
		ah.SGIDIndex = uint8(s.o.GIDIndex)
		return ah, nil
	}
	for i, g := range s.dev.GIDs() {
		if i > 0 && g.Unmap() == s.dev.Local() {
			ah.SGIDIndex = uint8(i)
			return ah, nil
		}
	}
	return ibtransport.AddressHandle{}, fmt.Errorf("no GID for %v", s.dev.Local())
}

// connect moves the QP to RTR and RTS towards remote (pp_connect_ctx); for UD
// it creates the address handle.
func (s *session) connect(myPSN uint32, remote oobpp.Dest, peer netip.Addr) error {
	ah, err := s.addressHandle(remote, peer)
	if err != nil {
		return fmt.Errorf("Failed to modify QP to RTR: %w", err)
	}
	s.rqpn = remote.QPN
	var rtr, rts ibtransport.QPAttr
	var rtrMask, rtsMask ibtransport.QPAttrMask
	switch s.o.Mode {
	case "rc":
		rtr = ibtransport.QPAttr{QPState: ibtransport.QPStateRTR, AH: ah, PathMTU: s.o.MTU, DestQPN: remote.QPN,
			RQPSN: remote.PSN, MaxDestRdAtomic: 1, MinRNRTimer: 12}
		rtrMask = ibtransport.QPAttrState | ibtransport.QPAttrAH | ibtransport.QPAttrPathMTU | ibtransport.QPAttrDestQPN |
			ibtransport.QPAttrRQPSN | ibtransport.QPAttrMaxDestRdAtomic | ibtransport.QPAttrMinRNRTimer
		rts = ibtransport.QPAttr{QPState: ibtransport.QPStateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, SQPSN: myPSN, MaxRdAtomic: 1}
		rtsMask = ibtransport.QPAttrState | ibtransport.QPAttrTimeout | ibtransport.QPAttrRetryCnt |
			ibtransport.QPAttrRNRRetry | ibtransport.QPAttrSQPSN | ibtransport.QPAttrMaxRdAtomic
	case "uc":
		rtr = ibtransport.QPAttr{QPState: ibtransport.QPStateRTR, AH: ah, PathMTU: s.o.MTU, DestQPN: remote.QPN, RQPSN: remote.PSN}
		rtrMask = ibtransport.QPAttrState | ibtransport.QPAttrAH | ibtransport.QPAttrPathMTU | ibtransport.QPAttrDestQPN | ibtransport.QPAttrRQPSN
		rts = ibtransport.QPAttr{QPState: ibtransport.QPStateRTS, SQPSN: myPSN}
		rtsMask = ibtransport.QPAttrState | ibtransport.QPAttrSQPSN
	case "ud":
		rtr = ibtransport.QPAttr{QPState: ibtransport.QPStateRTR}
		rtrMask = ibtransport.QPAttrState
		rts = ibtransport.QPAttr{QPState: ibtransport.QPStateRTS, SQPSN: myPSN}
		rtsMask = ibtransport.QPAttrState | ibtransport.QPAttrSQPSN
		s.ah = &ah
	}
	if err := s.qp.Modify(&rtr, rtrMask); err != nil {
		return fmt.Errorf("Failed to modify QP to RTR: %w", err)
	}
	if err := s.qp.Modify(&rts, rtsMask); err != nil {
		return fmt.Errorf("Failed to modify QP to RTS: %w", err)
	}
	return nil
}

// postRecv posts n receives of the whole buffer and returns how many it posted.
func (s *session) postRecv(n int) int {
	wr := ibtransport.RecvWR{WRID: recvWRID, SGL: []ibtransport.SGE{s.mr.SGE(0, len(s.buf))}}
	for i := range n {
		if s.qp.PostRecv(wr) != nil {
			return i
		}
	}
	return n
}

// postSend sends the message: the buffer, or for UD the buffer after the GRH area.
func (s *session) postSend() error {
	wr := ibtransport.SendWR{WRID: sendWRID, Opcode: ibtransport.WRSend, Signaled: true,
		SGL: []ibtransport.SGE{s.mr.SGE(0, s.o.Size)}}
	if s.o.Mode == "ud" {
		wr.SGL[0] = s.mr.SGE(grhLen, s.o.Size)
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = s.ah, s.rqpn, qKey
	}
	return s.qp.PostSend(wr)
}

// run is the tools' main loop: the client sends first; each side sends its next
// message once its previous send and a receive have completed. It returns when
// the loop started (after the first send was posted).
func (s *session) run(ctx context.Context) (time.Time, error) {
	o := s.o
	pending := recvWRID
	if o.Server != "" {
		if o.Check {
			off := 0
			if o.Mode == "ud" {
				off = grhLen
			}
			page := os.Getpagesize()
			for i := 0; i < o.Size; i += page {
				s.buf[off+i] = 0 // i / page_size % sizeof(char)
			}
		}
		if err := s.postSend(); err != nil {
			return time.Time{}, fmt.Errorf("Couldn't post send: %w", err)
		}
		pending |= sendWRID
	}
	start := time.Now()
	routs := o.RxDepth
	rcnt, scnt := 0, 0
	wcs := make([]ibtransport.WC, 2)
	for rcnt < o.Iters || scnt < o.Iters {
		if o.Events {
			select {
			case <-s.cq.Events():
			case <-ctx.Done():
				return start, fmt.Errorf("Failed to get cq_event: %w", ctx.Err())
			}
			s.cq.Notify(false)
		}
		ne := s.cq.Poll(wcs)
		if ne == 0 {
			if err := s.cq.Err(); err != nil {
				return start, fmt.Errorf("poll CQ failed: %w", err)
			}
			if !o.Events {
				// rdma-core spins on ibv_poll_cq; softrdma blocks until a
				// completion is there, which is the same to the peer.
				if err := s.cq.Wait(ctx); err != nil {
					return start, fmt.Errorf("poll CQ failed: %w", err)
				}
			}
			continue
		}
		for _, wc := range wcs[:ne] {
			if wc.Status != ibtransport.WCSuccess {
				return start, fmt.Errorf("Failed status %s (%d) for wr_id %d", wcStatusString(wc.Status), wc.Status, int(wc.WRID))
			}
			switch wc.WRID {
			case sendWRID:
				scnt++
			case recvWRID:
				routs--
				if routs <= 1 {
					routs += s.postRecv(o.RxDepth - routs)
					if routs < o.RxDepth {
						return start, fmt.Errorf("Couldn't post receive (%d)", routs)
					}
				}
				rcnt++
			default:
				return start, fmt.Errorf("Completion for unknown wr_id %d", int(wc.WRID))
			}
			pending &^= int(wc.WRID)
			if scnt < o.Iters && pending == 0 {
				if err := s.postSend(); err != nil {
					return start, fmt.Errorf("Couldn't post send: %w", err)
				}
				pending = recvWRID | sendWRID
			}
		}
	}
	return start, nil
}

// resolve looks host up and returns its first address.
func resolve(ctx context.Context, host string) (netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.Unmap(), nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%v for %s", err, host)
	}
	if len(ips) == 0 {
		return netip.Addr{}, fmt.Errorf("no address for %s", host)
	}
	return ips[0].Unmap(), nil
}

// dialSource is the address the client's TCP connection comes from, or the
// zero Addr for the route's choice. Without -g the client sends no GID and
// the server addresses its packets to the connection's source address
// (addressHandle), so that must be the client's RoCE address: on one host, a
// client on -d 127.0.0.2 towards a server on 127.0.0.1 would otherwise
// connect from 127.0.0.1 (the route's source for all of 127/8), and the
// server's ACKs would go to the server's own address, the client's requests
// retried until the QP failed ("transport retry counter exceeded"). The udp
// backend's address is bound by its socket, so it is this host's; a link-local
// address (which needs a zone) or another family is left to the route.
func dialSource(o Options, local, peer netip.Addr) netip.Addr {
	if o.GIDIndex >= 0 || (o.Backend != "" && o.Backend != string(devspec.BackendUDP)) {
		return netip.Addr{}
	}
	if local = local.Unmap(); !local.IsValid() || local.IsLinkLocalUnicast() || local.Is4() != peer.Unmap().Is4() {
		return netip.Addr{}
	}
	return local
}

// dial connects to the server from src (any address if zero), retrying
// refused connections for up to wait.
func dial(ctx context.Context, host string, port int, wait time.Duration, src netip.Addr) (net.Conn, error) {
	deadline := time.Now().Add(wait)
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	for {
		var d net.Dialer
		if src.IsValid() {
			d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0))
		}
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return conn, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("Couldn't connect to %s:%d: %w", host, port, err)
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}

// accept accepts one connection, giving up when ctx ends.
func accept(ctx context.Context, ln net.Listener) (net.Conn, error) {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	conn, err := ln.Accept()
	if err != nil && ctx.Err() != nil {
		err = errors.Join(ctx.Err(), err)
	}
	return conn, err
}

func jsonDest(d oobpp.Dest) Dest {
	return Dest{LID: d.LID, QPN: d.QPN, PSN: d.PSN, GID: netip.AddrFrom16(d.GID).String()}
}

// jsonFloat keeps infinities and NaN (a run too short to time) out of JSON.
func jsonFloat(v float64) float64 {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return 0
	}
	return v
}

// cFloat formats v as glibc's printf("%.2f") does, infinities and NaN
// included (0.0/0.0 is a negative NaN on x86, printed "-nan").
func cFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "inf"
	case math.IsInf(v, -1):
		return "-inf"
	case math.IsNaN(v):
		return "-nan"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// wcStatusNames are libibverbs' ibv_wc_status_str texts.
var wcStatusNames = [...]string{
	"success", "local length error", "local QP operation error", "local EE context operation error",
	"local protection error", "Work Request Flushed Error", "memory management operation error",
	"bad response error", "local access error", "invalid request error", "remote access error",
	"remote operation error", "transport retry counter exceeded", "RNR retry counter exceeded",
	"local RDD violation error", "remote invalid RD request", "aborted error", "invalid EE context number",
	"invalid EE context state", "fatal error", "response timeout error", "general error",
	"TM error", "TM software rendezvous",
}

func wcStatusString(s ibtransport.WCStatus) string {
	if int(s) < len(wcStatusNames) {
		return wcStatusNames[s]
	}
	return s.String()
}

// OpenDevice opens the RoCE device -d, -g and --backend name (device.Choice:
// the interface -d names or the one that routes to the peer; the address of
// GID index -g, without -g the first one of the peer's family, IPv4 on a
// server) and starts its loop. With -g the TCP exchange and the RoCE traffic
// may use different IP versions, as with the tools: the GIDs carry the RoCE
// addresses. seed 0 seeds the engine from crypto/rand.
func OpenDevice(o Options, peer netip.Addr, seed uint64) (*device.RoCE, error) {
	c := device.Choice{Backend: devspec.Backend(o.Backend), Name: o.Device, GIDIndex: o.GIDIndex, GIDFlag: "-g", Peer: peer}
	for _, p := range o.TAPAddrs {
		c.TAPAddrs = append(c.TAPAddrs, p.Addr())
	}
	spec, err := c.Spec()
	if err != nil {
		return nil, err
	}
	d, err := device.Open(spec, device.Config{Seed: seed, Pcap: o.Pcap, AddrFlag: "-d", TAPAddrs: c.TAPAddrs, TAPKernelAddrs: o.TAPKernelAddrs})
	if err != nil {
		return nil, err
	}
	return d.(*device.RoCE), nil
}
