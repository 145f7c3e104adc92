package main

import (
	"context"
	"encoding/json"
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
	"github.com/softrdma/softrdma/oob/pingpong"
	"github.com/softrdma/softrdma/roce"
)

const pingpongUsage = `usage: softrdma pingpong [rc|ud|uc] [flags] [HOST]

rdma-core's ibv_rc_pingpong, ibv_ud_pingpong and ibv_uc_pingpong (v44), over softrdma's
user-space RoCEv2: the same TCP exchange (port 18515), flags and output, so either side
can be the real tool. Without HOST it is the server and waits for one client. The first
word picks the QP type (default rc). HOST must not be called rc, ud or uc.

-d names a network interface instead of an IB device (or one of an interface's
addresses, to use that address alone); its GID table is rxe's: index 0 the link-local
address from the MAC, then its IPv4 addresses (as ::ffff:a.b.c.d), then its global IPv6
addresses, so -g 1 is RoCEv2 over IPv4 and -g 2 over IPv6 as with rxe. Without -d the
client uses the interface that routes to HOST and the server the first one up.
Without -g the tools send a zero GID; softrdma then addresses the peer by the IP address
of the TCP connection (the kernel tools need -g on RoCE).

Backends: udp (default) needs no privileges: RoCEv2 datagrams on a UDP socket bound to
the address of the GID index, port 4791. afpacket sends and receives raw frames on the
interface -d names (CAP_NET_RAW), sharing its addresses with the kernel. tap creates a
TAP device (-d its name, optional) and is a host of its own behind it, with the
addresses --tap-addr gives (CAP_NET_ADMIN); --tap-kernel-addr addresses the kernel's side.

flags:
`

// pingpongOptions are the flags of softrdma pingpong.
type pingpongOptions struct {
	mode      string // rc, ud or uc
	port      int
	device    string
	ibPort    int
	size      int
	mtu       int
	rxDepth   int
	iters     int
	sl        int
	events    bool
	gidx      int
	check     bool
	transport string
	backend   string
	pcap      string
	json      bool
	wait      time.Duration
	timeout   time.Duration
	server    string

	tapAddrs, tapKernelAddrs []netip.Prefix
}

// pingpongResult is what softrdma pingpong reports with --json.
type pingpongResult struct {
	Mode         string       `json:"mode"`
	Role         string       `json:"role"`
	Interface    string       `json:"interface"`
	LocalAddr    string       `json:"local_ip"`
	Local        pingpongDest `json:"local"`
	Remote       pingpongDest `json:"remote"`
	Size         int          `json:"size"`
	Iters        int          `json:"iters"`
	Bytes        int64        `json:"bytes"`
	Seconds      float64      `json:"seconds"`
	MbitPerSec   float64      `json:"mbit_per_sec"`
	UsecPerIter  float64      `json:"usec_per_iter"`
	InvalidPages []int        `json:"invalid_pages,omitempty"`
	PcapFrames   uint64       `json:"pcap_frames,omitempty"`
	// Device counts what the device dropped (bad ICRC, not RoCE, ...).
	Device *roce.DeviceCounters `json:"device_counters,omitempty"`
	Error  string               `json:"error,omitempty"`
}

// pingpongDest is one side's address as printed by the tools.
type pingpongDest struct {
	LID uint16 `json:"lid"`
	QPN uint32 `json:"qpn"`
	PSN uint32 `json:"psn"`
	GID string `json:"gid"`
}

func pingpongCmd(args []string, stdout, stderr io.Writer) int {
	o := pingpongOptions{mode: "rc"}
	if len(args) > 0 {
		switch args[0] {
		case "rc", "ud", "uc":
			o.mode, args = args[0], args[1:]
		}
	}
	fs := newFlagSet("pingpong", pingpongUsage, stderr)
	fs.SortFlags = false
	fs.IntVarP(&o.port, "port", "p", pingpong.DefaultPort, "listen on/connect to TCP `port`")
	fs.StringVarP(&o.device, "ib-dev", "d", "", "use network interface `dev` (or the interface address dev)")
	fs.IntVarP(&o.ibPort, "ib-port", "i", 1, "use `port` of the device (softrdma devices have port 1 only)")
	fs.IntVarP(&o.size, "size", "s", 0, "`size` of message to exchange (default 4096; ud 1024)")
	fs.IntVarP(&o.mtu, "mtu", "m", 1024, "path MTU (rc, uc)")
	fs.IntVarP(&o.rxDepth, "rx-depth", "r", 500, "number of receives to post at a time")
	fs.IntVarP(&o.iters, "iters", "n", 1000, "number of exchanges")
	fs.IntVarP(&o.sl, "sl", "l", 0, "service level value")
	fs.BoolVarP(&o.events, "events", "e", false, "sleep on CQ events (default poll)")
	fs.IntVarP(&o.gidx, "gid-idx", "g", -1, "local port gid `index`")
	fs.BoolVarP(&o.check, "chk", "c", false, "validate received buffer (as rdma-core: the server checks the first byte of each page)")
	fs.StringVar(&o.transport, "transport", "roce", "transport: roce (iwarp: not yet)")
	fs.StringVar(&o.backend, "backend", "udp", "RoCE backend: udp (a UDP socket, no privileges), afpacket, tap")
	fs.StringVar(&o.pcap, "pcap", "", "write every RoCE frame sent and received to this pcap `file`")
	tapAddrs := fs.StringSlice("tap-addr", nil, "--backend tap: the device's own address `prefix` behind the TAP device, e.g. 10.99.0.2/24 (repeatable)")
	tapKernelAddrs := fs.StringSlice("tap-kernel-addr", nil, "--backend tap: an address `prefix` for the kernel's side of the TAP device (repeatable)")
	fs.BoolVar(&o.json, "json", false, "print the result as JSON instead of the tools' lines")
	fs.DurationVar(&o.wait, "wait", 0, "client: keep retrying the TCP connection this long (the tools try once)")
	fs.DurationVar(&o.timeout, "timeout", 0, "give up after this long (0: never, as the tools)")
	if err := parseFlags(fs, args, stderr); err != nil {
		return flagsExit(err)
	}
	for _, l := range []struct {
		in  []string
		out *[]netip.Prefix
	}{{*tapAddrs, &o.tapAddrs}, {*tapKernelAddrs, &o.tapKernelAddrs}} {
		for _, a := range l.in {
			p, err := netip.ParsePrefix(a)
			if err != nil {
				fmt.Fprintf(stderr, "softrdma pingpong: %v\n", err)
				return 1
			}
			*l.out = append(*l.out, p)
		}
	}
	switch fs.NArg() {
	case 0:
	case 1:
		o.server = fs.Arg(0)
	default:
		fs.Usage()
		return 1
	}
	if o.transport != "roce" {
		if o.transport == "iwarp" {
			fmt.Fprintln(stderr, "softrdma pingpong: --transport iwarp: not yet: the pingpong tools need RC/UC/UD QPs over RoCE; iWARP pingpong is not implemented")
		} else {
			fmt.Fprintf(stderr, "softrdma pingpong: --transport %q: want roce or iwarp\n", o.transport)
		}
		return 2
	}
	if !fs.Changed("size") {
		o.size = 4096
		if o.mode == "ud" {
			// ud_pingpong.c's default; its usage text says 2048.
			o.size = 1024
		}
	}
	if err := o.validate(); err != nil {
		fmt.Fprintf(stderr, "softrdma pingpong: %v\n", err)
		return 2
	}
	if o.ibPort != 1 {
		fmt.Fprintf(stderr, "Couldn't get port info (softrdma devices have port 1 only, not %d)\n", o.ibPort)
		return 1
	}
	var res pingpongResult
	err := runPingpong(o, stdout, &res)
	if o.json {
		if err != nil {
			res.Error = err.Error()
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(&res)
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

// ppMTUValid accepts the IB MTUs pp_mtu_to_enum knows.
// ppMaxSize is the largest -s: the message buffer is allocated (and
// registered) whole before anything is exchanged.
const ppMaxSize = 1 << 30

// validate reports the first numeric flag out of its range, before anything
// starts. -r has no upper bound here: the QP's creation names the engine's
// (MaxQPWR), as the tools' "Couldn't create QP".
func (o pingpongOptions) validate() error {
	return checkFlags(
		intRange("-p", o.port, 0, 65535),
		intRange("-i", o.ibPort, 1, 255),
		intRange("-s", o.size, 1, ppMaxSize),
		flagRange{"-m", o.mtu, ppMTUValid(o.mtu) == nil, "256, 512, 1024, 2048 or 4096"},
		intRange("-r", o.rxDepth, 1, math.MaxInt32),
		intRange("-n", o.iters, 0, math.MaxInt32),
		intRange("-l", o.sl, 0, 15),
		intRange("-g", o.gidx, -1, 255),
		durationNonNegative("--wait", o.wait),
		durationNonNegative("--timeout", o.timeout),
	)
}

func ppMTUValid(m int) error {
	switch m {
	case 256, 512, 1024, 2048, 4096:
		return nil
	}
	return fmt.Errorf("mtu %d: want 256, 512, 1024, 2048 or 4096", m)
}

// Work request IDs, as the tools use them: also bits of the pending mask.
const (
	ppRecvWRID = 1
	ppSendWRID = 2
)

// ppGRHLen is the space a UD receive leaves for the GRH (ud_pingpong's "+ 40").
const ppGRHLen = 40

// ppQKey is the Q_Key of ibv_ud_pingpong's QPs and sends.
const ppQKey = 0x11111111

// ppSession is one pingpong run: the device, the QP and its buffer.
type ppSession struct {
	o    pingpongOptions
	dev  *device.RoCE
	cq   *ibtransport.CQ
	qp   *ibtransport.QP
	mr   *ibtransport.MR
	buf  []byte
	ah   *ibtransport.AddressHandle
	rqpn uint32
}

func runPingpong(o pingpongOptions, stdout io.Writer, res *pingpongResult) (err error) {
	ctx := context.Background()
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	res.Mode, res.Size, res.Iters = o.mode, o.size, o.iters
	res.Role = "server"
	if o.server != "" {
		res.Role = "client"
	}
	text := func(format string, args ...any) {
		if !o.json {
			fmt.Fprintf(stdout, format, args...)
		}
	}

	// The client resolves the server first: the device is chosen by the route to it.
	var peer netip.Addr
	if o.server != "" {
		if peer, err = ppResolve(ctx, o.server); err != nil {
			return err
		}
	}
	dev, err := ppOpenDevice(o, peer, 0)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := dev.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("closing the device: %w", cerr)
		}
		if o.pcap != "" {
			res.PcapFrames = dev.PcapFrames()
		}
		c := dev.RoCE().Counters()
		res.Device = &c
	}()
	res.Interface, res.LocalAddr = dev.Name(), dev.Local().String()
	s := &ppSession{o: o, dev: dev}
	if err := s.init(); err != nil {
		return err
	}
	if n := s.postRecv(o.rxDepth); n < o.rxDepth {
		return fmt.Errorf("Couldn't post receive (%d)", n)
	}
	if o.events {
		s.cq.Notify(false)
	}

	local := pingpong.Dest{QPN: s.qp.QPN(), PSN: rand.Uint32() & 0xffffff}
	if o.gidx >= 0 {
		local.GID = dev.GIDs()[o.gidx].As16()
	}
	res.Local = ppJSONDest(local)
	gidSep := ","
	if o.mode == "ud" {
		gidSep = ":" // ud_pingpong.c prints "PSN 0x%06x: GID" for the local address
	}

	var remote pingpong.Dest
	if o.server != "" {
		text("  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x%s GID %s\n", local.LID, local.QPN, local.PSN, gidSep, netip.AddrFrom16(local.GID))
		conn, err := ppDial(ctx, o.server, o.port, o.wait)
		if err != nil {
			return err
		}
		remote, err = pingpong.Client(ctx, conn, local)
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
		ln, err := net.Listen("tcp", ":"+strconv.Itoa(o.port))
		if err != nil {
			return fmt.Errorf("Couldn't listen to port %d: %w", o.port, err)
		}
		text("  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x%s GID %s\n", local.LID, local.QPN, local.PSN, gidSep, netip.AddrFrom16(local.GID))
		conn, err := ppAccept(ctx, ln)
		ln.Close()
		if err != nil {
			return fmt.Errorf("accept() failed: %w", err)
		}
		tcpPeer := conn.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
		remote, err = pingpong.Server(ctx, conn, local, func(ctx context.Context, remote pingpong.Dest) error {
			return s.connect(local.PSN, remote, tcpPeer)
		})
		conn.Close()
		if err != nil {
			return fmt.Errorf("Couldn't send/recv local address: %w", err)
		}
		text("  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", remote.LID, remote.QPN, remote.PSN, netip.AddrFrom16(remote.GID))
	}
	res.Remote = ppJSONDest(remote)

	start, err := s.run(ctx)
	if err != nil {
		return err
	}
	// The tools' arithmetic: microseconds as a C float, bytes as long long.
	usec := float32((time.Since(start)).Microseconds())
	bytes := int64(o.size) * int64(o.iters) * 2
	mbit := float64(bytes) * 8 / float64(usec)
	perIter := float64(usec / float32(o.iters))
	text("%d bytes in %s seconds = %s Mbit/sec\n", bytes, ppCFloat(float64(usec)/1e6), ppCFloat(mbit))
	text("%d iters in %s seconds = %s usec/iter\n", o.iters, ppCFloat(float64(usec)/1e6), ppCFloat(perIter))
	res.Bytes, res.Seconds, res.MbitPerSec, res.UsecPerIter = bytes, float64(usec)/1e6, ppJSONFloat(mbit), ppJSONFloat(perIter)
	if o.server == "" && o.check {
		off := 0
		if o.mode == "ud" {
			off = ppGRHLen
		}
		page := os.Getpagesize()
		for i := 0; i < o.size; i += page {
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
func (s *ppSession) init() error {
	c := s.dev.Context()
	pd := c.AllocPD()
	n := s.o.size
	if s.o.mode == "ud" {
		if mtu := s.dev.PathMTU(); s.o.size > mtu {
			return fmt.Errorf("Requested size larger than port MTU (%d)", mtu)
		}
		n += ppGRHLen
	}
	s.buf = make([]byte, n)
	for i := range s.buf {
		s.buf[i] = 0x7b
	}
	var err error
	if s.mr, err = pd.RegMR(s.buf, ibtransport.AccessLocalWrite); err != nil {
		return fmt.Errorf("Couldn't register MR: %w", err)
	}
	if s.cq, err = c.CreateCQ(s.o.rxDepth + 1); err != nil {
		return fmt.Errorf("Couldn't create CQ: %w", err)
	}
	typ := map[string]ibtransport.QPType{"rc": ibtransport.QPTypeRC, "uc": ibtransport.QPTypeUC, "ud": ibtransport.QPTypeUD}[s.o.mode]
	if s.qp, err = c.CreateQP(pd, ibtransport.QPInitAttr{Type: typ, SendCQ: s.cq, RecvCQ: s.cq,
		Cap: ibtransport.QPCap{MaxSendWR: 1, MaxRecvWR: s.o.rxDepth, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return fmt.Errorf("Couldn't create QP: %w", err)
	}
	attr := ibtransport.QPAttr{QPState: ibtransport.QPStateInit, PKeyIndex: 0, Port: uint8(s.o.ibPort)}
	mask := ibtransport.QPAttrState | ibtransport.QPAttrPKeyIndex | ibtransport.QPAttrPort
	if s.o.mode == "ud" {
		attr.QKey = ppQKey
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
// 64 on the wire whatever the AH says (rxe-*-pingpong.pcap); softrdma leaves
// the hop limit to the device, which uses 64 too.
func (s *ppSession) addressHandle(remote pingpong.Dest, peer netip.Addr) (ibtransport.AddressHandle, error) {
	dst := peer
	var iid [8]byte
	copy(iid[:], remote.GID[8:])
	if iid != [8]byte{} {
		dst = netip.AddrFrom16(remote.GID)
	}
	if !dst.IsValid() {
		return ibtransport.AddressHandle{}, errors.New("remote sent no GID and its address is unknown")
	}
	if dst.Unmap().Is4() != s.dev.Local().Is4() {
		return ibtransport.AddressHandle{}, fmt.Errorf("remote GID %v is not of the local address %v's family (give -g the same IP version on both sides)", netip.AddrFrom16(remote.GID), s.dev.Local())
	}
	ah := ibtransport.AddressHandle{DGID: dst.As16(), SL: uint8(s.o.sl)}
	if s.o.gidx > 0 {
		ah.SGIDIndex = uint8(s.o.gidx)
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
func (s *ppSession) connect(myPSN uint32, remote pingpong.Dest, peer netip.Addr) error {
	ah, err := s.addressHandle(remote, peer)
	if err != nil {
		return fmt.Errorf("Failed to modify QP to RTR: %w", err)
	}
	s.rqpn = remote.QPN
	var rtr, rts ibtransport.QPAttr
	var rtrMask, rtsMask ibtransport.QPAttrMask
	switch s.o.mode {
	case "rc":
		rtr = ibtransport.QPAttr{QPState: ibtransport.QPStateRTR, AH: ah, PathMTU: s.o.mtu, DestQPN: remote.QPN,
			RQPSN: remote.PSN, MaxDestRdAtomic: 1, MinRNRTimer: 12}
		rtrMask = ibtransport.QPAttrState | ibtransport.QPAttrAH | ibtransport.QPAttrPathMTU | ibtransport.QPAttrDestQPN |
			ibtransport.QPAttrRQPSN | ibtransport.QPAttrMaxDestRdAtomic | ibtransport.QPAttrMinRNRTimer
		rts = ibtransport.QPAttr{QPState: ibtransport.QPStateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, SQPSN: myPSN, MaxRdAtomic: 1}
		rtsMask = ibtransport.QPAttrState | ibtransport.QPAttrTimeout | ibtransport.QPAttrRetryCnt |
			ibtransport.QPAttrRNRRetry | ibtransport.QPAttrSQPSN | ibtransport.QPAttrMaxRdAtomic
	case "uc":
		rtr = ibtransport.QPAttr{QPState: ibtransport.QPStateRTR, AH: ah, PathMTU: s.o.mtu, DestQPN: remote.QPN, RQPSN: remote.PSN}
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
func (s *ppSession) postRecv(n int) int {
	wr := ibtransport.RecvWR{WRID: ppRecvWRID, SGL: []ibtransport.SGE{s.mr.SGE(0, len(s.buf))}}
	for i := range n {
		if s.qp.PostRecv(wr) != nil {
			return i
		}
	}
	return n
}

// postSend sends the message: the buffer, or for UD the buffer after the GRH area.
func (s *ppSession) postSend() error {
	wr := ibtransport.SendWR{WRID: ppSendWRID, Opcode: ibtransport.WRSend, Signaled: true,
		SGL: []ibtransport.SGE{s.mr.SGE(0, s.o.size)}}
	if s.o.mode == "ud" {
		wr.SGL[0] = s.mr.SGE(ppGRHLen, s.o.size)
		wr.AH, wr.RemoteQPN, wr.RemoteQKey = s.ah, s.rqpn, ppQKey
	}
	return s.qp.PostSend(wr)
}

// run is the tools' main loop: the client sends first; each side sends its next
// message once its previous send and a receive have completed. It returns when
// the loop started (after the first send was posted).
func (s *ppSession) run(ctx context.Context) (time.Time, error) {
	o := s.o
	pending := ppRecvWRID
	if o.server != "" {
		if o.check {
			off := 0
			if o.mode == "ud" {
				off = ppGRHLen
			}
			page := os.Getpagesize()
			for i := 0; i < o.size; i += page {
				s.buf[off+i] = 0 // i / page_size % sizeof(char)
			}
		}
		if err := s.postSend(); err != nil {
			return time.Time{}, fmt.Errorf("Couldn't post send: %w", err)
		}
		pending |= ppSendWRID
	}
	start := time.Now()
	routs := o.rxDepth
	rcnt, scnt := 0, 0
	wcs := make([]ibtransport.WC, 2)
	for rcnt < o.iters || scnt < o.iters {
		if o.events {
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
			if !o.events {
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
				return start, fmt.Errorf("Failed status %s (%d) for wr_id %d", ppWCStatusString(wc.Status), wc.Status, int(wc.WRID))
			}
			switch wc.WRID {
			case ppSendWRID:
				scnt++
			case ppRecvWRID:
				routs--
				if routs <= 1 {
					routs += s.postRecv(o.rxDepth - routs)
					if routs < o.rxDepth {
						return start, fmt.Errorf("Couldn't post receive (%d)", routs)
					}
				}
				rcnt++
			default:
				return start, fmt.Errorf("Completion for unknown wr_id %d", int(wc.WRID))
			}
			pending &^= int(wc.WRID)
			if scnt < o.iters && pending == 0 {
				if err := s.postSend(); err != nil {
					return start, fmt.Errorf("Couldn't post send: %w", err)
				}
				pending = ppRecvWRID | ppSendWRID
			}
		}
	}
	return start, nil
}

// ppResolve looks host up and returns its first address.
func ppResolve(ctx context.Context, host string) (netip.Addr, error) {
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

// ppDial connects to the server, retrying refused connections for up to wait.
func ppDial(ctx context.Context, host string, port int, wait time.Duration) (net.Conn, error) {
	deadline := time.Now().Add(wait)
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	for {
		var d net.Dialer
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

// ppAccept accepts one connection, giving up when ctx ends.
func ppAccept(ctx context.Context, ln net.Listener) (net.Conn, error) {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	conn, err := ln.Accept()
	if err != nil && ctx.Err() != nil {
		err = errors.Join(ctx.Err(), err)
	}
	return conn, err
}

func ppJSONDest(d pingpong.Dest) pingpongDest {
	return pingpongDest{LID: d.LID, QPN: d.QPN, PSN: d.PSN, GID: netip.AddrFrom16(d.GID).String()}
}

// ppJSONFloat keeps infinities and NaN (a run too short to time) out of JSON.
func ppJSONFloat(v float64) float64 {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return 0
	}
	return v
}

// ppCFloat formats v as glibc's printf("%.2f") does, infinities and NaN
// included (0.0/0.0 is a negative NaN on x86, printed "-nan").
func ppCFloat(v float64) string {
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

// ppWCStatusNames are libibverbs' ibv_wc_status_str texts.
var ppWCStatusNames = [...]string{
	"success", "local length error", "local QP operation error", "local EE context operation error",
	"local protection error", "Work Request Flushed Error", "memory management operation error",
	"bad response error", "local access error", "invalid request error", "remote access error",
	"remote operation error", "transport retry counter exceeded", "RNR retry counter exceeded",
	"local RDD violation error", "remote invalid RD request", "aborted error", "invalid EE context number",
	"invalid EE context state", "fatal error", "response timeout error", "general error",
	"TM error", "TM software rendezvous",
}

func ppWCStatusString(s ibtransport.WCStatus) string {
	if int(s) < len(ppWCStatusNames) {
		return ppWCStatusNames[s]
	}
	return s.String()
}

// ppOpenDevice opens the RoCE device -d, -g and --backend name (device.Choice:
// the interface -d names or the one that routes to the peer; the address of
// GID index -g, without -g the first one of the peer's family, IPv4 on a
// server) and starts its loop. With -g the TCP exchange and the RoCE traffic
// may use different IP versions, as with the tools: the GIDs carry the RoCE
// addresses. seed 0 seeds the engine from crypto/rand.
func ppOpenDevice(o pingpongOptions, peer netip.Addr, seed uint64) (*device.RoCE, error) {
	c := device.Choice{Backend: devspec.Backend(o.backend), Name: o.device, GIDIndex: o.gidx, GIDFlag: "-g", Peer: peer}
	for _, p := range o.tapAddrs {
		c.TAPAddrs = append(c.TAPAddrs, p.Addr())
	}
	spec, err := c.Spec()
	if err != nil {
		return nil, err
	}
	d, err := device.Open(spec, device.Config{Seed: seed, Pcap: o.pcap, TAPAddrs: c.TAPAddrs, TAPKernelAddrs: o.tapKernelAddrs})
	if err != nil {
		return nil, err
	}
	return d.(*device.RoCE), nil
}
