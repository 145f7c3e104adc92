// Package demo is softrdma demo: two nodes, each with one RC QP, run SEND,
// WRITE, READ and atomics and verify every byte, over the deterministic
// simulator (package sim: loss, corruption, latency, bandwidth, seeded) for
// RoCE, or two iWARP devices over loopback TCP. Run runs it; cmd/softrdma
// holds the flags.
package demo

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"net/netip"
	"os"
	"text/tabwriter"
	"time"

	"github.com/softrdma/softrdma/counters"
	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/netio"
	"github.com/softrdma/softrdma/roce"
	"github.com/softrdma/softrdma/sim"
)

// Options are softrdma demo's flags.
type Options struct {
	Transport string
	Messages  int
	Size      int
	Depth     int
	Loss      float64
	Corrupt   float64
	Latency   time.Duration
	Bandwidth float64
	MTU       int
	Seed      uint64
	Pcap      string
	PcapView  string // --pcap-view: received or sent
	JSON      bool
	CRC       string
}

// Result is what softrdma demo reports.
type Result struct {
	Transport   string        `json:"transport"`
	Link        string        `json:"link"`
	Operations  []OpStats     `json:"operations"`
	VirtualTime time.Duration `json:"virtual_time_ns"`
	WallTime    time.Duration `json:"wall_time_ns"`
	Frames      uint64        `json:"frames"`
	Dropped     uint64        `json:"frames_dropped"`
	Corrupted   uint64        `json:"frames_corrupted"`
	BadICRC     uint64        `json:"bad_icrc_dropped"`
	Verified    bool          `json:"verified"`
	Error       string        `json:"error,omitempty"`
	// Notes are transport-specific lines (iwarp: what MPA negotiated).
	Notes []string `json:"notes,omitempty"`
	// Counters are both nodes' counters after the last operation, node a
	// (the requester) and node b, as softrdma stat, --dump-counters and
	// perf --report-counters give them (package counters: per device and
	// per QP, NAKs by code, RNR, retransmissions, drops by reason).
	Counters counters.Snapshot `json:"counters"`
}

// OpStats is one row of the demo's table.
type OpStats struct {
	Operation       string `json:"operation"`
	Messages        int    `json:"messages"`
	Bytes           int64  `json:"bytes"`
	Retransmissions uint64 `json:"retransmissions"`
	Verified        bool   `json:"verified"`
	Detail          string `json:"detail,omitempty"`
}

// addPhase records one phase's outcome in res: err, the phase's error, or
// verify's (if not nil) when the phase ran clean, marks the phase and the run
// not verified and is the phase's Detail. It returns that error.
func (res *Result) addPhase(st OpStats, err error, verify func() error) error {
	if err == nil && verify != nil {
		err = verify()
	}
	st.Verified = err == nil
	if err != nil {
		st.Detail = err.Error()
		res.Verified = false
	}
	res.Operations = append(res.Operations, st)
	return err
}

// Print writes the result as the demo's table.
func (r *Result) Print(w io.Writer) {
	if r.Notes != nil {
		fmt.Fprintf(w, "softrdma demo: %s, two devices in one process (%s)\n\n", r.Transport, r.Link)
	} else {
		fmt.Fprintf(w, "softrdma demo: %s, two nodes on a simulated link (%s)\n\n", r.Transport, r.Link)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "operation\tmessages\tbytes\tretransmissions\tverified\t")
	for _, op := range r.Operations {
		v := "yes"
		if !op.Verified {
			v = "NO"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t\n", op.Operation, op.Messages, op.Bytes, op.Retransmissions, v)
	}
	tw.Flush()
	for _, op := range r.Operations {
		if op.Detail != "" {
			fmt.Fprintf(w, "%s: %s\n", op.Operation, op.Detail)
		}
	}
	if r.Notes != nil {
		fmt.Fprintln(w)
		for _, n := range r.Notes {
			fmt.Fprintln(w, n)
		}
		fmt.Fprintf(w, "wall time %v\n", r.WallTime.Round(time.Millisecond))
	} else {
		fmt.Fprintf(w, "\nframes on the link %d, dropped %d, corrupted %d (ICRC rejected %d)\n", r.Frames, r.Dropped, r.Corrupted, r.BadICRC)
		fmt.Fprintf(w, "virtual time %v, wall time %v\n", r.VirtualTime.Round(time.Microsecond), r.WallTime.Round(time.Millisecond))
	}
	if len(r.Counters.Devices) > 0 {
		fmt.Fprintln(w, "\ncounters (as softrdma stat):")
		counters.WriteText(w, r.Counters)
	}
	if r.Verified {
		fmt.Fprintln(w, "every byte verified")
	} else {
		fmt.Fprintln(w, "VERIFICATION FAILED")
	}
}

// node is one side of the demo: a RoCE device on a simulated port, with
// one RC QP, its CQ and the memory regions the operations use.
type node struct {
	dev   *roce.Device // RoCE; nil for iWARP
	ctx   *ibtransport.Context
	pd    *ibtransport.PD
	cq    *ibtransport.CQ
	qp    *ibtransport.QP
	data  *ibtransport.MR // message buffers
	atom  *ibtransport.MR // 8-byte atomic target (responder) / results (requester)
	psn   uint32
	wcBuf []ibtransport.WC
}

func newNode(port netio.Endpoint, mac [6]byte, ip netip.Addr, nbrs roce.StaticNeighbors, o Options, seed uint64) (*node, error) {
	dev, err := roce.NewDevice(roce.DeviceConfig{
		Endpoint:  port,
		MAC:       mac,
		Addrs:     []netip.Addr{ip},
		Neighbors: nbrs,
		Engine:    ibtransport.ContextConfig{Seed: seed},
	})
	if err != nil {
		return nil, err
	}
	n, err := newVerbs(dev.Context(), o, 4*o.Depth, o.Depth)
	if err != nil {
		return nil, err
	}
	n.dev = dev
	n.psn = uint32(seed*0x9e3779b9) & ibtransport.PSNMask
	return n, nil
}

// newVerbs makes a node's verbs objects on ctx, the same for both demos: a
// PD, a CQ of cqDepth entries, an RC QP (o.Depth sends, recvDepth receives,
// one SGE each), and the data and atomic regions every phase uses, with
// every remote access.
func newVerbs(ctx *ibtransport.Context, o Options, cqDepth, recvDepth int) (*node, error) {
	n := &node{ctx: ctx, pd: ctx.AllocPD(), wcBuf: make([]ibtransport.WC, 64)}
	var err error
	if n.cq, err = ctx.CreateCQ(cqDepth); err != nil {
		return nil, err
	}
	if n.qp, err = ctx.CreateQP(n.pd, ibtransport.QPInitAttr{
		Type: ibtransport.QPTypeRC, SendCQ: n.cq, RecvCQ: n.cq,
		Cap: ibtransport.QPCap{MaxSendWR: o.Depth, MaxRecvWR: recvDepth, MaxSendSGE: 1, MaxRecvSGE: 1},
	}); err != nil {
		return nil, err
	}
	access := ibtransport.AccessLocalWrite | ibtransport.AccessRemoteWrite | ibtransport.AccessRemoteRead | ibtransport.AccessRemoteAtomic
	if n.data, err = n.pd.RegMR(make([]byte, o.Messages*o.Size), access); err != nil {
		return nil, err
	}
	if n.atom, err = n.pd.RegMR(make([]byte, 8*o.Messages), access); err != nil {
		return nil, err
	}
	return n, nil
}

// connect moves the QP to RTS towards the peer, as ibv_rc_pingpong does.
func (n *node) connect(peer *node, peerIP netip.Addr) error {
	ah, err := n.dev.AddressHandle(peerIP)
	if err != nil {
		return err
	}
	steps := []struct {
		attr ibtransport.QPAttr
		mask ibtransport.QPAttrMask
	}{
		{ibtransport.QPAttr{QPState: ibtransport.QPStateInit, Port: 1,
			AccessFlags: ibtransport.AccessRemoteWrite | ibtransport.AccessRemoteRead | ibtransport.AccessRemoteAtomic},
			ibtransport.QPAttrState | ibtransport.QPAttrPKeyIndex | ibtransport.QPAttrPort | ibtransport.QPAttrAccessFlags},
		{ibtransport.QPAttr{QPState: ibtransport.QPStateRTR, AH: ah, PathMTU: n.dev.PathMTU(),
			DestQPN: peer.qp.QPN(), RQPSN: peer.psn, MaxDestRdAtomic: 16, MinRNRTimer: 12},
			ibtransport.QPAttrState | ibtransport.QPAttrAH | ibtransport.QPAttrPathMTU | ibtransport.QPAttrDestQPN |
				ibtransport.QPAttrRQPSN | ibtransport.QPAttrMaxDestRdAtomic | ibtransport.QPAttrMinRNRTimer},
		{ibtransport.QPAttr{QPState: ibtransport.QPStateRTS, SQPSN: n.psn, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
			ibtransport.QPAttrState | ibtransport.QPAttrSQPSN | ibtransport.QPAttrTimeout | ibtransport.QPAttrRetryCnt |
				ibtransport.QPAttrRNRRetry | ibtransport.QPAttrMaxRdAtomic},
	}
	for _, s := range steps {
		if err := n.qp.Modify(&s.attr, s.mask); err != nil {
			return err
		}
	}
	return nil
}

// Pattern fills b with bytes that depend on the message number and the seed.
func Pattern(b []byte, msg int, seed uint64) {
	x := uint32(msg)*2654435761 ^ uint32(seed)
	for i := range b {
		x = x*1664525 + 1013904223
		b[i] = byte(x >> 24)
	}
}

// phase is one operation of the demo: how to post message i, what to check
// when it completes, and what to check at the end.
type phase struct {
	name   string
	bytes  int64
	post   func(i int) error             // post the requester's WR for message i
	recv   func(i int) error             // post a receive for message i at the responder, if any
	done   func(wc ibtransport.WC) error // requester completion check
	got    func(wc ibtransport.WC) error // responder completion check
	verify func() error
}

func runSim(o Options) (_ *Result, err error) {
	start := time.Now()
	res := &Result{Transport: "RoCEv2 (RC)",
		Link: fmt.Sprintf("%v latency, %.0f Gbit/s, MTU %d, loss %g, corruption %g, seed %d",
			o.Latency, o.Bandwidth/1e9, o.MTU, o.Loss, o.Corrupt, o.Seed)}
	net := sim.New(o.Seed)
	macA, macB := [6]byte{0x02, 0x53, 0x52, 0, 0, 1}, [6]byte{0x02, 0x53, 0x52, 0, 0, 2}
	ipA, ipB := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	pa, pb := net.AddNode("a", macA), net.AddNode("b", macB)
	link := net.Connect(pa, pb, sim.LinkConfig{
		Latency: o.Latency, Bandwidth: int64(o.Bandwidth), MTU: o.MTU, Loss: o.Loss, Corrupt: o.Corrupt,
	})
	if o.Pcap != "" {
		f, err := os.Create(o.Pcap)
		if err != nil {
			return res, err
		}
		// The default view is the receivers' (sim.CaptureDelivered), so that
		// a decode of the file agrees with the summary: lost frames absent
		// (PSN gaps), corrupted ones failing their ICRC. The senders' view
		// records every frame before the link's loss and corruption.
		point := sim.CaptureDelivered
		if o.PcapView == "sent" {
			point = sim.CaptureTransmitted
		}
		if _, err := net.CaptureLinkAt(link, f, netio.FormatForPath(o.Pcap), point); err != nil {
			f.Close()
			return res, err
		}
		defer func() {
			if ferr := net.FlushCaptures(); ferr != nil && err == nil {
				err = fmt.Errorf("--pcap: %w", ferr)
			}
			if cerr := f.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("--pcap: %w", cerr)
			}
		}()
	}
	nbrs := roce.StaticNeighbors{ipA: macA, ipB: macB}
	a, err := newNode(pa, macA, ipA, nbrs, o, o.Seed*2+1)
	if err != nil {
		return res, err
	}
	b, err := newNode(pb, macB, ipB, nbrs, o, o.Seed*2+2)
	if err != nil {
		return res, err
	}
	if err := a.connect(b, ipB); err != nil {
		return res, err
	}
	if err := b.connect(a, ipA); err != nil {
		return res, err
	}

	res.Verified = true
	for _, ph := range phases(a, b, o) {
		before := a.qp.Counters().Retransmissions
		err := runPhase(net, a, b, ph, o)
		err = res.addPhase(OpStats{Operation: ph.name, Messages: o.Messages, Bytes: ph.bytes,
			Retransmissions: a.qp.Counters().Retransmissions - before}, err, ph.verify)
		if err != nil && a.qp.State() == ibtransport.QPStateErr {
			break // the QP is gone: later phases cannot run
		}
	}
	for _, dir := range []sim.Direction{sim.AtoB, sim.BtoA} {
		s := link.Stats(dir)
		res.Frames += s.Sent
		res.Dropped += s.TotalDropped()
		res.Corrupted += s.Corrupted
	}
	ca, cb := a.dev.Counters(), b.dev.Counters()
	res.Counters = nodeCounters("roce", []*node{a, b}, []*roce.DeviceCounters{&ca, &cb}, []netip.Addr{ipA, ipB})
	for _, d := range res.Counters.Devices {
		res.BadICRC += d.Counters.Drops["bad_icrc"]
	}
	res.VirtualTime = net.Now().Sub(sim.Epoch)
	res.WallTime = time.Since(start)
	return res, nil
}

// nodeCounters is the counters snapshot of the demo's nodes, named a and b
// (links: the RoCE devices' frame counts, nil for iWARP).
func nodeCounters(transport string, nodes []*node, links []*roce.DeviceCounters, addrs []netip.Addr) counters.Snapshot {
	s := counters.Snapshot{Devices: []counters.Device{}}
	for i, n := range nodes {
		info := counters.Info{Name: string(rune('a' + i)), Transport: transport}
		if i < len(addrs) {
			info.Address = addrs[i]
		}
		var link *roce.DeviceCounters
		if i < len(links) {
			link = links[i]
		}
		s.Devices = append(s.Devices, counters.Collect(info, n.ctx, link))
	}
	return s
}

// runPhase posts every message of one phase, keeping o.Depth in flight, and
// drives the network until all have completed on both sides.
func runPhase(net *sim.Network, a, b *node, ph phase, o Options) error {
	r := newPhaseRun(a, b, ph, o, min(o.Depth, o.Messages))
	if r.failure != nil {
		return r.failure
	}
	if err := net.Drive(10*time.Minute, r.done, func(time.Time) bool { return r.step() }, a.dev, b.dev); err != nil {
		return err
	}
	return r.failure
}

// phaseRun is the progress of one phase: what is posted, completed and received.
type phaseRun struct {
	a, b                                    *node
	ph                                      phase
	o                                       Options
	posted, completed, recvPosted, received int
	failure                                 error
}

// newPhaseRun starts a phase with recvDepth receives posted at the responder
// (if the phase has receives).
func newPhaseRun(a, b *node, ph phase, o Options, recvDepth int) *phaseRun {
	r := &phaseRun{a: a, b: b, ph: ph, o: o}
	if ph.recv != nil {
		for r.recvPosted < recvDepth {
			if err := ph.recv(r.recvPosted); err != nil {
				r.failure = err
				return r
			}
			r.recvPosted++
		}
	}
	return r
}

// done reports whether the phase has ended, by success or failure.
func (r *phaseRun) done() bool {
	return r.failure != nil || (r.completed == r.o.Messages && (r.ph.recv == nil || r.received == r.o.Messages))
}

// step posts what the depth allows and polls both CQs; it reports whether
// anything happened.
func (r *phaseRun) step() bool {
	a, b, ph, o := r.a, r.b, r.ph, r.o
	moved := false
	for r.posted < o.Messages && r.posted-r.completed < o.Depth {
		if err := ph.post(r.posted); err != nil {
			r.failure = err
			return true
		}
		r.posted++
		moved = true
	}
	for _, wc := range a.wcBuf[:a.cq.Poll(a.wcBuf)] {
		moved = true
		if wc.Status != ibtransport.WCSuccess {
			r.failure = fmt.Errorf("requester completion: %v", wc)
			return true
		}
		if err := ph.done(wc); err != nil {
			r.failure = err
			return true
		}
		r.completed++
	}
	for _, wc := range b.wcBuf[:b.cq.Poll(b.wcBuf)] {
		moved = true
		if wc.Status != ibtransport.WCSuccess {
			r.failure = fmt.Errorf("responder completion: %v", wc)
			return true
		}
		if ph.got != nil {
			if err := ph.got(wc); err != nil {
				r.failure = err
				return true
			}
		}
		r.received++
		if r.recvPosted < o.Messages {
			if err := ph.recv(r.recvPosted); err != nil {
				r.failure = err
				return true
			}
			r.recvPosted++
		}
	}
	return moved
}

func phases(a, b *node, o Options) []phase {
	size := o.Size
	msgBytes := int64(o.Messages) * int64(size)
	off := func(i int) int { return i * size }
	// expect[i] is the content of message i; filled lazily in the requester's buffer.
	fill := func(mr *ibtransport.MR, i int, salt uint64) { Pattern(mr.Buf()[off(i):off(i)+size], i, o.Seed^salt) }
	same := func(mr *ibtransport.MR, i int, salt uint64) error {
		want := make([]byte, size)
		Pattern(want, i, o.Seed^salt)
		got := mr.Buf()[off(i) : off(i)+size]
		if crc32.ChecksumIEEE(got) != crc32.ChecksumIEEE(want) || string(got) != string(want) {
			return fmt.Errorf("message %d: bytes differ", i)
		}
		return nil
	}
	inOrder := func(next *int) func(wc ibtransport.WC) error {
		return func(wc ibtransport.WC) error {
			if wc.WRID != uint64(*next) {
				return fmt.Errorf("completion for wr %d, want %d (out of order)", wc.WRID, *next)
			}
			*next++
			return nil
		}
	}
	var sendNext, recvNext, writeNext, readNext, faddNext, casNext int
	sendPhase := phase{
		name: "SEND", bytes: msgBytes,
		post: func(i int) error {
			fill(a.data, i, 1)
			return a.qp.PostSend(ibtransport.SendWR{WRID: uint64(i), Opcode: ibtransport.WRSend, Signaled: true,
				SGL: []ibtransport.SGE{a.data.SGE(off(i), size)}})
		},
		recv: func(i int) error {
			return b.qp.PostRecv(ibtransport.RecvWR{WRID: uint64(i), SGL: []ibtransport.SGE{b.data.SGE(off(i), size)}})
		},
		done: inOrder(&sendNext),
		got: func(wc ibtransport.WC) error {
			if err := inOrder(&recvNext)(wc); err != nil {
				return err
			}
			if wc.ByteLen != uint32(size) {
				return fmt.Errorf("received %d bytes, want %d", wc.ByteLen, size)
			}
			return same(b.data, int(wc.WRID), 1)
		},
	}
	writePhase := phase{
		name: "RDMA_WRITE", bytes: msgBytes,
		post: func(i int) error {
			fill(a.data, i, 2)
			return a.qp.PostSend(ibtransport.SendWR{WRID: uint64(i), Opcode: ibtransport.WRRDMAWrite, Signaled: true,
				SGL: []ibtransport.SGE{a.data.SGE(off(i), size)}, RemoteAddr: b.data.Addr() + uint64(off(i)), RKey: b.data.RKey()})
		},
		done: inOrder(&writeNext),
		verify: func() error {
			for i := 0; i < o.Messages; i++ {
				if err := same(b.data, i, 2); err != nil {
					return err
				}
			}
			return nil
		},
	}
	readPhase := phase{
		name: "RDMA_READ", bytes: msgBytes,
		post: func(i int) error {
			fill(b.data, i, 3) // the responder's memory holds what is read
			return a.qp.PostSend(ibtransport.SendWR{WRID: uint64(i), Opcode: ibtransport.WRRDMARead, Signaled: true,
				SGL: []ibtransport.SGE{a.data.SGE(off(i), size)}, RemoteAddr: b.data.Addr() + uint64(off(i)), RKey: b.data.RKey()})
		},
		done: func(wc ibtransport.WC) error {
			if err := inOrder(&readNext)(wc); err != nil {
				return err
			}
			return same(a.data, int(wc.WRID), 3)
		},
	}
	// FETCH_AND_ADD: message i adds i+1 to one counter; its original value must
	// be the sum of the earlier addends, so an atomic executed twice shows.
	faddPhase := phase{
		name: "ATOMIC_FETCH_ADD", bytes: int64(o.Messages) * 8,
		post: func(i int) error {
			return a.qp.PostSend(ibtransport.SendWR{WRID: uint64(i), Opcode: ibtransport.WRAtomicFetchAdd, Signaled: true,
				SGL: []ibtransport.SGE{a.atom.SGE(8*i, 8)}, RemoteAddr: b.atom.Addr(), RKey: b.atom.RKey(), CompareAdd: uint64(i + 1)})
		},
		done: func(wc ibtransport.WC) error {
			if err := inOrder(&faddNext)(wc); err != nil {
				return err
			}
			i := int(wc.WRID)
			got := binary.LittleEndian.Uint64(a.atom.Buf()[8*i:])
			if want := uint64(i * (i + 1) / 2); got != want {
				return fmt.Errorf("fetch-add %d returned %d, want %d", i, got, want)
			}
			return nil
		},
		verify: func() error {
			n := uint64(o.Messages)
			if got := binary.LittleEndian.Uint64(b.atom.Buf()); got != n*(n+1)/2 {
				return fmt.Errorf("counter is %d after %d fetch-adds, want %d", got, n, n*(n+1)/2)
			}
			return nil
		},
	}
	// CMP_AND_SWP: a chain i → i+1 on a fresh counter; each must find i.
	casPhase := phase{
		name: "ATOMIC_CMP_SWAP", bytes: int64(o.Messages) * 8,
		post: func(i int) error {
			if i == 0 {
				binary.LittleEndian.PutUint64(b.atom.Buf(), 0)
			}
			return a.qp.PostSend(ibtransport.SendWR{WRID: uint64(i), Opcode: ibtransport.WRAtomicCmpAndSwp, Signaled: true,
				SGL: []ibtransport.SGE{a.atom.SGE(8*i, 8)}, RemoteAddr: b.atom.Addr(), RKey: b.atom.RKey(),
				CompareAdd: uint64(i), Swap: uint64(i + 1)})
		},
		done: func(wc ibtransport.WC) error {
			if err := inOrder(&casNext)(wc); err != nil {
				return err
			}
			i := int(wc.WRID)
			if got := binary.LittleEndian.Uint64(a.atom.Buf()[8*i:]); got != uint64(i) {
				return fmt.Errorf("cmp-swap %d found %d, want %d", i, got, i)
			}
			return nil
		},
		verify: func() error {
			if got := binary.LittleEndian.Uint64(b.atom.Buf()); got != uint64(o.Messages) {
				return fmt.Errorf("counter is %d after the cmp-swap chain, want %d", got, o.Messages)
			}
			return nil
		},
	}
	return []phase{sendPhase, writePhase, readPhase, faddPhase, casPhase}
}

// Run runs the demo: over the simulated link (roce), or two iWARP devices
// over loopback TCP (iwarp). The result is not nil when err is, and says
// how far it got.
func Run(o Options) (*Result, error) {
	if o.Transport == "iwarp" {
		return runIWARP(o)
	}
	return runSim(o)
}
