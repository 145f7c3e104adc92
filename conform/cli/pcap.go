package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/softrdma/softrdma/conform"
	"github.com/softrdma/softrdma/iwarp"
	"github.com/softrdma/softrdma/netio"
	"github.com/softrdma/softrdma/pcaptap"
)

// conformPcap is the --pcap file of softrdma conform and conform serve: for RoCE
// the frames the tester's link (or the serving device) sends and receives, for
// iWARP the TCP octets of the connections as synthesised segments (pcaptap.TCP), in
// one pcap or pcapng file (pcaptap.Tap). For a conformance run the capture is the
// evidence of each verdict, so what the tester sends is recorded exactly as it
// went out, deliberately broken frames (a flipped ICRC bit, a wrong P_Key, TVer
// 1 ...) included.
type conformPcap struct {
	name string
	file *os.File
	tap  *pcaptap.Tap
	tcp  *pcaptap.TCP // iWARP, made on first use
	mu   sync.Mutex   // guards tcp
	link []*conformCapture
}

// newConformPcap creates the file; name "" returns nil (no capture), on which
// every method is a no-op.
func newConformPcap(name string) (*conformPcap, error) {
	if name == "" {
		return nil, nil
	}
	f, err := os.Create(name)
	if err != nil {
		return nil, err
	}
	tap, err := pcaptap.New(f, netio.FormatForPath(name), 0)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &conformPcap{name: name, file: f, tap: tap}, nil
}

// wrapLink returns a conform.Link that records into the file every frame link
// carries. udpSocket says the link is a UDP socket endpoint, which hides the
// IPv4 ID of received frames: it is recovered (pcaptap.IPv4IDRestorer).
func (p *conformPcap) wrapLink(link conform.Link, udpSocket bool) conform.Link {
	if p == nil {
		return link
	}
	c := &conformCapture{link: link, tap: p.tap, restoreIDs: udpSocket}
	p.link = append(p.link, c)
	return c
}

// linkWrapper is wrapLink as a hook (conform.SelfConfig.WrapLink and the like),
// nil without a capture.
func (p *conformPcap) linkWrapper(udpSocket bool) func(conform.Link) conform.Link {
	if p == nil {
		return nil
	}
	return func(l conform.Link) conform.Link { return p.wrapLink(l, udpSocket) }
}

// observer returns the iWARP stream observer writing synthesised TCP segments
// into the file (iwarp.ConnParams.Observe), nil without a capture.
func (p *conformPcap) observer() (func(local, remote net.Addr) iwarp.StreamObserver, error) {
	if p == nil {
		return nil, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tcp == nil {
		p.tcp = p.tap.TCP()
	}
	return p.tcp.Observe, nil
}

// wrapConn returns nc recording its octets (the tester's connections, which it
// writes and reads itself, MPA and all).
func (p *conformPcap) wrapConn(nc net.Conn) (net.Conn, error) {
	obs, err := p.observer()
	if obs == nil || err != nil {
		return nc, err
	}
	return &conformObservedConn{Conn: nc, obs: obs(nc.LocalAddr(), nc.RemoteAddr())}, nil
}

// wrapDial returns dial (nil: a net.Dialer's) with each connection recorded.
func (p *conformPcap) wrapDial(dial func(context.Context, string) (net.Conn, error)) func(context.Context, string) (net.Conn, error) {
	if p == nil {
		return dial
	}
	if dial == nil {
		var d net.Dialer
		dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	return func(ctx context.Context, addr string) (net.Conn, error) {
		nc, err := dial(ctx, addr)
		if err != nil {
			return nil, err
		}
		w, err := p.wrapConn(nc)
		if err != nil {
			nc.Close()
			return nil, err
		}
		return w, nil
	}
}

// connWrapper is wrapConn for conform.KernelRun.WrapConn (a connection whose
// capture cannot start is used unrecorded, the error kept for close).
func (p *conformPcap) connWrapper() func(net.Conn) net.Conn {
	if p == nil {
		return nil
	}
	return func(nc net.Conn) net.Conn {
		w, _ := p.wrapConn(nc) // a failure is sticky in the tap, reported by close
		return w
	}
}

// close flushes the file (after whatever records into it has stopped), closes it
// and reports how many frames it holds to w.
func (p *conformPcap) close(w io.Writer, who string) error {
	if p == nil {
		return nil
	}
	var err error
	keep := func(e error) {
		if e != nil && err == nil {
			err = e
		}
	}
	p.mu.Lock()
	if p.tcp != nil {
		keep(p.tcp.Err())
	}
	p.mu.Unlock()
	keep(p.tap.Flush())
	keep(p.file.Close())
	var sent, received uint64
	for _, c := range p.link {
		s, r := c.counts()
		sent, received = sent+s, received+r
	}
	if len(p.link) > 0 {
		fmt.Fprintf(w, "%s: --pcap %s: %d frames (%d sent, %d received)\n", who, p.name, p.tap.Frames(), sent, received)
	} else {
		fmt.Fprintf(w, "%s: --pcap %s: %d frames\n", who, p.name, p.tap.Frames())
	}
	return err
}

// conformCapture is a conform.Link that records what it carries: each frame
// the tester writes as it was handed over (a copy taken before the write, kept
// if the write succeeded), each frame it reads as it came (with the IPv4 ID a
// UDP socket hid put back), timestamped on the link's clock (virtual time on the
// simulator).
type conformCapture struct {
	link       conform.Link
	tap        *pcaptap.Tap
	restoreIDs bool

	mu             sync.Mutex
	out            []byte
	ids            pcaptap.IPv4IDRestorer
	sent, received uint64
}

var _ conform.Link = (*conformCapture)(nil)

// WriteFrame sends frame and records it.
func (c *conformCapture) WriteFrame(frame []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	at := c.link.Now()
	c.out = append(c.out[:0], frame...) // as handed over, whatever the link does with frame
	if err := c.link.WriteFrame(frame); err != nil {
		return err
	}
	c.sent++
	_ = c.tap.WriteFrame(at, c.out) // sticky in the tap, reported when it is closed
	return nil
}

// ReadFrame receives a frame and records it.
func (c *conformCapture) ReadFrame(deadline time.Time) ([]byte, time.Time, error) {
	frame, at, err := c.link.ReadFrame(deadline)
	if err != nil {
		return frame, at, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.received++
	rec := frame
	if c.restoreIDs {
		rec = c.ids.Restore(frame) // a copy if it changes: frame stays as the wire decodes it
	}
	_ = c.tap.WriteFrame(at, rec)
	return frame, at, nil
}

// Now returns the link's time.
func (c *conformCapture) Now() time.Time { return c.link.Now() }

// Close closes the link.
func (c *conformCapture) Close() error { return c.link.Close() }

func (c *conformCapture) counts() (sent, received uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sent, c.received
}

// conformObservedConn is a TCP connection whose octets a StreamObserver sees,
// as they crossed the socket: what was written, what was read.
type conformObservedConn struct {
	net.Conn
	obs iwarp.StreamObserver
}

// Read reads and shows the observer what was read.
func (c *conformObservedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.obs.Received(b[:n])
	}
	return n, err
}

// Write writes and shows the observer what was written.
func (c *conformObservedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if n > 0 {
		c.obs.Sent(b[:n])
	}
	return n, err
}
