//go:build linux

package conform

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/softrdma/softrdma/netio"
	"github.com/softrdma/softrdma/roce"
)

// LoopbackConfig configures NewLoopbackRoCE.
type LoopbackConfig struct {
	// TesterIP and PeerIP are two loopback addresses (default 127.0.0.1 and
	// 127.0.0.2: Linux routes all of 127.0.0.0/8 to lo).
	TesterIP, PeerIP netip.Addr
	// UDPPort is the RoCEv2 port both ends use (default 4791).
	UDPPort uint16
	// WrapLink, if not nil, wraps the tester's link before its wire uses it
	// (a capture, say); the wrapper's Close is not called: Close closes the
	// link under it.
	WrapLink func(Link) Link
}

// LoopbackRoCE is an in-process softrdma peer on real UDP sockets over the
// loopback interface, run by its own goroutines on the wall clock, with the
// tester on another loopback address.
type LoopbackRoCE struct {
	// Env is the tester's environment.
	Env *RoCEEnv
	// Device is the peer under test.
	Device *roce.Device

	tester *roce.Device // only its endpoint is used
	link   *EndpointLink
	client *Client
	cancel context.CancelFunc
	done   chan struct{}
}

// NewLoopbackRoCE opens the peer and the tester on UDP sockets.
func NewLoopbackRoCE(ctx context.Context, cfg LoopbackConfig) (*LoopbackRoCE, error) {
	if !cfg.TesterIP.IsValid() {
		cfg.TesterIP = netip.MustParseAddr("127.0.0.1")
	}
	if !cfg.PeerIP.IsValid() {
		cfg.PeerIP = netip.MustParseAddr("127.0.0.2")
	}
	if cfg.UDPPort == 0 {
		cfg.UDPPort = roce.UDPPort
	}
	peer, err := roce.Open(roce.OpenConfig{Backend: roce.BackendUDP, Addrs: []netip.Addr{cfg.PeerIP}, UDPPort: cfg.UDPPort})
	if err != nil {
		return nil, fmt.Errorf("conform: loopback peer: %w", err)
	}
	tester, err := roce.Open(roce.OpenConfig{Backend: roce.BackendUDP, Addrs: []netip.Addr{cfg.TesterIP}, UDPPort: cfg.UDPPort})
	if err != nil {
		peer.Close()
		return nil, fmt.Errorf("conform: loopback tester: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	l := &LoopbackRoCE{Device: peer, tester: tester, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		peer.Run(runCtx, nil)
	}()
	a, b := net.Pipe()
	l.client = NewClient(a)
	go (&Server{Device: peer}).ServeConn(b)
	// The tester writes frames: the UDP endpoint's, as UDPFrames makes them.
	l.link = NewEndpointLink(netio.FramesOf(tester.Endpoint(), tester.MAC(), [6]byte{}))
	var link Link = l.link
	if cfg.WrapLink != nil {
		link = cfg.WrapLink(link)
	}
	wire, err := NewWire(WireConfig{Link: link, LocalIP: cfg.TesterIP, PeerIP: cfg.PeerIP, UDPSocket: true,
		SrcPort: cfg.UDPPort, DstPort: cfg.UDPPort})
	if err != nil {
		l.Close()
		return nil, err
	}
	if l.Env, err = NewRoCEEnv(ctx, wire, l.client); err != nil {
		l.Close()
		return nil, err
	}
	l.Env.AnswerTimeout, l.Env.Silence = 500*time.Millisecond, 30*time.Millisecond
	return l, nil
}

// Close stops the peer and closes both ends.
func (l *LoopbackRoCE) Close() error {
	l.client.Close()
	l.cancel()
	err := l.Device.Close()
	<-l.done
	if e := l.link.Close(); err == nil && !errors.Is(e, net.ErrClosed) {
		err = e
	}
	l.tester.Close()
	return err
}
