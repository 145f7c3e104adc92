package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/softrdma/softrdma/netio"
	"github.com/softrdma/softrdma/netio/netns"
	"github.com/softrdma/softrdma/roce"
)

// raw is the raw path a transport's numbers are compared with: the same
// link, the same kind of socket, no RDMA. B sends to A.
type raw interface {
	// blast sends units of n bytes from B to A (fromA: from A to B) as fast
	// as the sender can, in batches where the path has them, for
	// warm+measure, and returns how many units arrived during the measured
	// part.
	blast(n int, fromA bool, warm, measure time.Duration) (int, error)
	// rtt runs exchanges of req bytes from B and resp bytes back from A, one
	// at a time, and returns the round-trip times of those after warm.
	rtt(req, resp int, warm, measure time.Duration) ([]time.Duration, error)
	// blastDesc and rttDesc say what blast and rtt measure.
	blastDesc(n int, fromA bool) string
	rttDesc(req, resp int) string
}

// window is a measurement's time line: warm-up, then the measured part.
type window struct{ start, from, to time.Time }

func newWindow(warm, measure time.Duration) window {
	s := time.Now()
	return window{start: s, from: s.Add(warm), to: s.Add(warm + measure)}
}

func (w window) in(t time.Time) bool { return !t.Before(w.from) && t.Before(w.to) }

// countFrames reads frames from ep until it closes, counting those read
// within w.
func countFrames(ep netio.Endpoint, w window, count *int, done chan<- error) {
	bufs := make([][]byte, ep.BatchSize())
	for i := range bufs {
		bufs[i] = make([]byte, netio.MaxFrameLen(ep.MTU())+64)
	}
	sizes := make([]int, len(bufs))
	for {
		n, err := ep.Read(bufs, sizes, 0)
		if w.in(time.Now()) {
			*count += n
		}
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				err = nil
			}
			done <- err
			return
		}
	}
}

// blastFrames writes frames to tx, a batch at a time, until w ends; then
// it closes rx, which ends the counting reader.
func blastFrames(tx, rx netio.Endpoint, frames [][]byte, w window) (int, error) {
	var count int
	done := make(chan error, 1)
	go countFrames(rx, w, &count, done)
	var werr error
	for time.Now().Before(w.to) {
		if _, err := tx.Write(frames, 0); err != nil {
			werr = err
			break
		}
	}
	time.Sleep(20 * time.Millisecond) // what is in flight lands after the window
	rx.Close()
	if err := <-done; err != nil {
		return 0, err
	}
	return count, werr
}

// pingPong runs exchanges of one frame each way between b (the client)
// and a (the echo), one at a time, and returns the round trips within w.
func pingPong(a, b netio.Endpoint, req, resp []byte, w window) ([]time.Duration, error) {
	echo := make(chan error, 1)
	go func() {
		bufs := [][]byte{make([]byte, netio.MaxFrameLen(a.MTU())+64)}
		sizes := []int{0}
		out := [][]byte{resp}
		for {
			n, err := a.Read(bufs, sizes, 0)
			if n > 0 {
				if _, werr := a.Write(out, 0); werr != nil && err == nil {
					err = werr
				}
			}
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					err = nil
				}
				echo <- err
				return
			}
		}
	}()
	bufs := [][]byte{make([]byte, netio.MaxFrameLen(b.MTU())+64)}
	sizes := []int{0}
	in := [][]byte{req}
	var rtts []time.Duration
	var err error
	for {
		t := time.Now()
		if !t.Before(w.to) {
			break
		}
		if _, err = b.Write(in, 0); err != nil {
			break
		}
		if _, err = readTimeout(b, bufs, sizes); err != nil {
			break
		}
		if d := time.Now(); w.in(t) {
			rtts = append(rtts, d.Sub(t))
		}
	}
	a.Close()
	b.Close()
	if e := <-echo; err == nil {
		err = e
	}
	return rtts, err
}

// readTimeout is a blocking Read that gives up (with an error) when a
// datagram was lost: UDP and raw frames have no retransmission.
func readTimeout(ep netio.Endpoint, bufs [][]byte, sizes []int) (int, error) {
	// A lost datagram would block Read for good; the reads are quick, so a
	// timer costs less than a goroutine per read: the caller closes ep at the
	// end, which ends a Read blocked after a loss.
	t := time.AfterFunc(time.Second, func() { ep.Close() })
	n, err := ep.Read(bufs, sizes, 0)
	if !t.Stop() {
		return n, errors.New("a datagram of the ping-pong was lost")
	}
	return n, err
}

// blastBetween blasts n-byte datagrams between a (on side sa) and b (on
// sb), from b to a or, fromA, from a to b. It closes the receiver.
func blastBetween(a, b netio.Endpoint, sa, sb *netns.Side, n int, fromA bool, w window) (int, error) {
	tx, rx, from, to := b, a, sb, sa
	if fromA {
		tx, rx, from, to = a, b, sa, sb
	}
	frames, err := frames(from, to, n, tx)
	if err != nil {
		return 0, err
	}
	return blastFrames(tx, rx, frames, w)
}

// pingPongBetween runs pingPong with b (on side sb) asking in
// req-byte datagrams and a (on sa) answering in resp-byte ones.
func pingPongBetween(a, b netio.Endpoint, sa, sb *netns.Side, req, resp int, w window) ([]time.Duration, error) {
	qf, err := frame(sb, sa, req)
	if err != nil {
		return nil, err
	}
	rf, err := frame(sa, sb, resp)
	if err != nil {
		return nil, err
	}
	return pingPong(a, b, qf, rf, w)
}

// udpRaw is the baseline of the udp backend: netio.UDPEndpoint on each
// side, as the devices use, on the baseline port.
type udpRaw struct{ pair *netns.Pair }

func (r *udpRaw) open() (a, b *netio.UDPFrames, err error) {
	if err := r.pair.A.NS.Do(func() (err error) {
		a, err = udpFrames(netio.UDPConfig{LocalAddr: addrPort(&r.pair.A), MTU: r.pair.A.MTU})
		return err
	}); err != nil {
		return nil, nil, err
	}
	if err := r.pair.B.NS.Do(func() (err error) {
		b, err = udpFrames(netio.UDPConfig{LocalAddr: addrPort(&r.pair.B), MTU: r.pair.B.MTU})
		return err
	}); err != nil {
		a.Close()
		return nil, nil, err
	}
	return a, b, nil
}

// udpFrames opens a UDP endpoint as a frame endpoint (MAC addresses 0):
// the baselines send and receive frames, as the other backends' do.
func udpFrames(cfg netio.UDPConfig) (*netio.UDPFrames, error) {
	e, err := netio.NewUDP(cfg)
	if err != nil {
		return nil, err
	}
	return netio.NewUDPFrames(e, [6]byte{}, [6]byte{}), nil
}

// frame returns an Ethernet frame from one side to the other whose UDP
// payload is n bytes: what a RoCE packet of that length looks like (the
// payload is a BTH of an RDMA WRITE Middle, then zeros, and an ICRC).
func frame(from, to *netns.Side, n int) ([]byte, error) { return frameID(from, to, n, 0) }

// frameID is frame with IPv4 Identification id.
func frameID(from, to *netns.Side, n int, id uint16) ([]byte, error) {
	if n < 16 {
		n = 16 // BTH and ICRC
	}
	h := roce.FrameHeaders{SrcMAC: [6]byte(from.MAC), DstMAC: [6]byte(to.MAC),
		Src: from.IPv4.Addr(), Dst: to.IPv4.Addr(), HopLimit: 64, IPID: id,
		SrcPort: baselinePort, DstPort: baselinePort}
	ibLen := n - roce.ICRCLen
	f := make([]byte, h.Len()+n)
	f[h.Len()] = 0x07
	m, err := h.EncodeFrame(f, ibLen)
	return f[:m], err
}

// frames returns a batch of tx's frames from one side to the other. For a
// UDP endpoint (a netio.DatagramWriter) their IPv4 IDs are runs 0, 1, ...
// as long as IPv4Run allows, so that they leave in GSO sends exactly as
// the device's datagrams do.
func frames(from, to *netns.Side, n int, tx netio.Endpoint) ([][]byte, error) {
	run := 1
	if dw, ok := tx.(netio.DatagramWriter); ok {
		k, bytes := dw.IPv4Run()
		run = max(1, min(k, bytes/max(n, 16)))
	}
	frames := make([][]byte, tx.BatchSize())
	for i := range frames {
		f, err := frameID(from, to, n, uint16(i%run))
		if err != nil {
			return nil, err
		}
		frames[i] = f
	}
	return frames, nil
}

func (r *udpRaw) blast(n int, fromA bool, warm, measure time.Duration) (int, error) {
	a, b, err := r.open()
	if err != nil {
		return 0, err
	}
	defer a.Close()
	defer b.Close()
	return blastBetween(a, b, &r.pair.A, &r.pair.B, n, fromA, newWindow(warm, measure))
}

func (r *udpRaw) rtt(req, resp int, warm, measure time.Duration) ([]time.Duration, error) {
	a, b, err := r.open()
	if err != nil {
		return nil, err
	}
	defer a.Close()
	defer b.Close()
	return pingPongBetween(a, b, &r.pair.A, &r.pair.B, req, resp, newWindow(warm, measure))
}

func (r *udpRaw) blastDesc(n int, _ bool) string {
	return fmt.Sprintf("UDP blaster, %d-B datagrams, batches of %d (GSO)", n, netio.DefaultUDPBatchSize)
}

func (r *udpRaw) rttDesc(req, resp int) string {
	return fmt.Sprintf("UDP ping-pong, %d B / %d B", req, resp)
}

// packetRaw is the baseline of the afpacket backend: netio.PacketEndpoint
// on each veth end, as the devices use, sending frames to the baseline port,
// which a socket that drops everything holds on each side (as roce.Open holds
// 4791 for an afpacket device) so that the kernel sends no ICMP errors.
type packetRaw struct{ pair *netns.Pair }

func (r *packetRaw) open() (a, b *netio.PacketEndpoint, closeAll func(), err error) {
	var closers []io.Closer
	closeAll = func() {
		for _, c := range closers {
			c.Close()
		}
	}
	for _, s := range []*netns.Side{&r.pair.A, &r.pair.B} {
		var ep *netio.PacketEndpoint
		var hold net.PacketConn
		err := s.NS.Do(func() (err error) {
			if hold, err = holdUDPPort(addrPort(s)); err != nil {
				return err
			}
			ep, err = netio.NewPacket(netio.PacketConfig{Interface: s.Link, UDPPort: baselinePort})
			if err != nil {
				hold.Close()
			}
			return err
		})
		if err != nil {
			closeAll()
			return nil, nil, nil, err
		}
		closers = append(closers, ep, hold)
		if a == nil {
			a = ep
		} else {
			b = ep
		}
	}
	return a, b, closeAll, nil
}

// holdUDPPort binds a UDP socket to ap that drops whatever it receives.
func holdUDPPort(ap netip.AddrPort) (net.PacketConn, error) {
	drop := []unix.SockFilter{{Code: 0x06, K: 0}} // ret #0
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			prog := unix.SockFprog{Len: 1, Filter: (*unix.SockFilter)(unsafe.Pointer(&drop[0]))}
			serr = unix.SetsockoptSockFprog(int(fd), unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &prog)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	return lc.ListenPacket(context.Background(), "udp4", ap.String())
}

func (r *packetRaw) blast(n int, fromA bool, warm, measure time.Duration) (int, error) {
	a, b, closeAll, err := r.open()
	if err != nil {
		return 0, err
	}
	defer closeAll()
	return blastBetween(a, b, &r.pair.A, &r.pair.B, n, fromA, newWindow(warm, measure))
}

func (r *packetRaw) rtt(req, resp int, warm, measure time.Duration) ([]time.Duration, error) {
	a, b, closeAll, err := r.open()
	if err != nil {
		return nil, err
	}
	defer closeAll()
	return pingPongBetween(a, b, &r.pair.A, &r.pair.B, req, resp, newWindow(warm, measure))
}

func (r *packetRaw) blastDesc(n int, _ bool) string {
	return fmt.Sprintf("AF_PACKET blaster, %d-B frames (%d-B datagrams), batches of %d",
		n+roce.EthernetLen+roce.IPv4Len+roce.UDPLen, n, netio.DefaultPacketBatchSize)
}

func (r *packetRaw) rttDesc(req, resp int) string {
	return fmt.Sprintf("AF_PACKET ping-pong, %d B / %d B datagrams", req, resp)
}

// tcpRaw is the baseline of iWARP: a TCP connection between the sides.
type tcpRaw struct{ pair *netns.Pair }

// dial returns both ends of a fresh TCP connection, A's first.
func (r *tcpRaw) dial() (a, b net.Conn, err error) {
	var ln net.Listener
	if err := r.pair.A.NS.Do(func() (err error) {
		ln, err = net.Listen("tcp4", addrPort(&r.pair.A).String())
		return err
	}); err != nil {
		return nil, nil, err
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	if err := r.pair.B.NS.Do(func() (err error) {
		b, err = net.DialTimeout("tcp4", addrPort(&r.pair.A).String(), 5*time.Second)
		return err
	}); err != nil {
		ln.Close()
		<-acc
		return nil, nil, err
	}
	a = <-acc
	if a == nil {
		b.Close()
		return nil, nil, errors.New("tcp accept failed")
	}
	return a, b, nil
}

func (r *tcpRaw) blast(n int, fromA bool, warm, measure time.Duration) (int, error) {
	a, b, err := r.dial()
	if err != nil {
		return 0, err
	}
	if fromA {
		a, b = b, a // a reads, b writes
	}
	defer a.Close()
	w := newWindow(warm, measure)
	var got int64
	var mu sync.Mutex
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, 1<<20)
		for {
			k, err := a.Read(buf)
			if w.in(time.Now()) {
				mu.Lock()
				got += int64(k)
				mu.Unlock()
			}
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				done <- err
				return
			}
		}
	}()
	// Batches, as the UDP blaster's: 64 units a write (at most 1 MiB).
	buf := make([]byte, n*max(1, min(64, (1<<20)/n)))
	var werr error
	for time.Now().Before(w.to) {
		if _, err := b.Write(buf); err != nil {
			werr = err
			break
		}
	}
	b.Close()
	if err := <-done; err != nil && werr == nil {
		werr = err
	}
	mu.Lock()
	defer mu.Unlock()
	return int(got / int64(n)), werr
}

func (r *tcpRaw) rtt(req, resp int, warm, measure time.Duration) ([]time.Duration, error) {
	a, b, err := r.dial()
	if err != nil {
		return nil, err
	}
	defer a.Close()
	defer b.Close()
	echo := make(chan error, 1)
	go func() {
		in, out := make([]byte, req), make([]byte, resp)
		for {
			if _, err := io.ReadFull(a, in); err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				echo <- err
				return
			}
			if _, err := a.Write(out); err != nil {
				echo <- err
				return
			}
		}
	}()
	w := newWindow(warm, measure)
	out, in := make([]byte, req), make([]byte, resp)
	var rtts []time.Duration
	for {
		t := time.Now()
		if !t.Before(w.to) {
			break
		}
		if _, err = b.Write(out); err != nil {
			break
		}
		if _, err = io.ReadFull(b, in); err != nil {
			break
		}
		if w.in(t) {
			rtts = append(rtts, time.Since(t))
		}
	}
	b.Close()
	if e := <-echo; err == nil {
		err = e
	}
	return rtts, err
}

func (r *tcpRaw) blastDesc(n int, _ bool) string {
	k := max(1, min(64, (1<<20)/n))
	if k == 1 {
		return fmt.Sprintf("TCP stream, %d-B writes", n)
	}
	return fmt.Sprintf("TCP stream, %d-B units in %d-B writes", n, n*k)
}

func (r *tcpRaw) rttDesc(req, resp int) string {
	return fmt.Sprintf("TCP ping-pong, %d B / %d B", req, resp)
}

// tapRaw is the baseline of the tap backend: a TAP device of its own in
// namespace A, frames read and written on its file descriptor by host .2
// (netio.TAPEndpoint, as the device uses), and a netio.UDPEndpoint on the
// kernel's side, .1 (as the UDP device uses). B, the UDP side, sends to A.
type tapRaw struct {
	ns  *netns.NS
	mtu int
}

// open creates the TAP device, gives the kernel's side its address and a
// permanent neighbour entry for the host (which answers no ARP), and binds
// the UDP endpoint. host and kernel describe the two ends for frame.
func (r *tapRaw) open() (a *netio.TAPEndpoint, b *netio.UDPFrames, host, kernel netns.Side, err error) {
	if err = r.ns.Do(func() (err error) {
		a, err = netio.NewTAP(tapRawName, r.mtu)
		return err
	}); err != nil {
		return nil, nil, host, kernel, err
	}
	host = netns.Side{NS: r.ns, Link: a.Name(), MAC: tapRawHostMAC, IPv4: tapRawHost, MTU: a.MTU()}
	kernel = netns.Side{NS: r.ns, Link: a.Name(), MAC: a.HardwareAddr(), IPv4: tapRawKernel, MTU: a.MTU()}
	if err = r.ns.AddAddress(a.Name(), tapRawKernel); err == nil {
		err = r.ns.AddNeighbor(a.Name(), tapRawHost.Addr(), tapRawHostMAC)
	}
	if err == nil {
		err = r.ns.Do(func() (err error) {
			b, err = udpFrames(netio.UDPConfig{LocalAddr: addrPort(&kernel), MTU: a.MTU()})
			return err
		})
	}
	if err != nil {
		a.Close()
		return nil, nil, host, kernel, err
	}
	return a, b, host, kernel, nil
}

func (r *tapRaw) blast(n int, fromA bool, warm, measure time.Duration) (int, error) {
	a, b, host, kernel, err := r.open()
	if err != nil {
		return 0, err
	}
	defer a.Close()
	defer b.Close()
	return blastBetween(a, b, &host, &kernel, n, fromA, newWindow(warm, measure))
}

func (r *tapRaw) rtt(req, resp int, warm, measure time.Duration) ([]time.Duration, error) {
	a, b, host, kernel, err := r.open()
	if err != nil {
		return nil, err
	}
	defer a.Close()
	defer b.Close()
	return pingPongBetween(a, b, &host, &kernel, req, resp, newWindow(warm, measure))
}

func (r *tapRaw) blastDesc(n int, fromA bool) string {
	if fromA {
		return fmt.Sprintf("TAP host blaster into a UDP socket, %d-B datagrams, one write each", n)
	}
	return fmt.Sprintf("UDP blaster into a TAP read by a host, %d-B datagrams, batches of %d (GSO)", n, netio.DefaultUDPBatchSize)
}

func (r *tapRaw) rttDesc(req, resp int) string {
	return fmt.Sprintf("UDP socket to TAP host ping-pong, %d B / %d B", req, resp)
}
