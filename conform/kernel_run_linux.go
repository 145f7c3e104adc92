package conform

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/softrdma/softrdma/netio"
	"github.com/softrdma/softrdma/roce"
)

// KernelRun runs a catalogue against a kernel peer (rxe with perftest servers, or
// siw with rping's server; see kernel.go) from this host: RoCE frames over a UDP
// socket on port 4791, iWARP over TCP.
type KernelRun struct {
	// Transport is "roce" or "iwarp".
	Transport string
	// Peer is the peer's IPv4 address.
	Peer string
	// Local is the tester's address (default: the one that routes to Peer).
	Local string
	// AnswerTimeout and Silence override the environments' (under emulation the
	// kernel answers slowly: seconds, not milliseconds).
	AnswerTimeout, Silence time.Duration
	// Pattern selects cases (see Match).
	Pattern string
	// CaseTimeout bounds each case (default 3 minutes: a perftest server may
	// take a while to listen again).
	CaseTimeout time.Duration
	// Progress is called after each case.
	Progress func(CaseReport)
	// Logf logs the sessions with the peer's tools.
	Logf func(format string, args ...any)
	// WrapLink, if not nil, wraps the RoCE tester's link before its wire uses
	// it, and WrapConn each TCP connection the iWARP tester opens to the peer
	// (captures, say); the wrappers' Close is not needed: Run closes what is
	// under them.
	WrapLink func(Link) Link
	WrapConn func(net.Conn) net.Conn
}

// Run runs the suite and returns its report.
func (k KernelRun) Run(ctx context.Context) (*Report, error) {
	timeout := k.CaseTimeout
	if timeout <= 0 {
		timeout = 3 * time.Minute
	}
	r := &Runner{Suite: k.Transport, Pattern: k.Pattern, CaseTimeout: timeout, Progress: k.Progress}
	switch k.Transport {
	case "iwarp":
		ctl := &RpingControl{Host: k.Peer}
		env, err := NewIWARPEnv(ctx, ctl)
		if err != nil {
			return nil, err
		}
		if k.AnswerTimeout > 0 {
			env.AnswerTimeout = k.AnswerTimeout
		}
		if k.Silence > 0 {
			env.Silence = k.Silence
		}
		r.Peer = fmt.Sprintf("Linux siw at %s (rping server, port %d)", k.Peer, DefaultRpingPort)
		r.Cases = KernelIWARPCases(env, ctl)
		if wrap, dial := k.WrapConn, env.Dial; wrap != nil {
			env.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
				c, err := dial(ctx, addr)
				if err != nil {
					return nil, err
				}
				return wrap(c), nil
			}
		}
		return r.Run(ctx)
	case "roce":
	default:
		return nil, fmt.Errorf("conform: transport %q: want roce or iwarp", k.Transport)
	}
	peer, err := netip.ParseAddr(k.Peer)
	if err != nil {
		return nil, fmt.Errorf("conform: peer %q: %w", k.Peer, err)
	}
	peer = peer.Unmap()
	local, err := kernelLocalIP(k.Local, peer)
	if err != nil {
		return nil, err
	}
	dev, err := roce.Open(roce.OpenConfig{Backend: roce.BackendUDP, Addrs: []netip.Addr{local}, UDPPort: roce.UDPPort})
	if err != nil {
		return nil, err
	}
	defer dev.Close()
	// The tester writes frames: the UDP endpoint's, as UDPFrames makes them.
	el := NewEndpointLink(netio.FramesOf(dev.Endpoint(), dev.MAC(), [6]byte{}))
	defer el.Close()
	var link Link = el
	if k.WrapLink != nil {
		link = k.WrapLink(link)
	}
	wire, err := NewWire(WireConfig{Link: link, LocalIP: local, PeerIP: peer, UDPSocket: true})
	if err != nil {
		return nil, err
	}
	ctl := &PerftestControl{Host: peer.String(), Wire: wire, Logf: k.Logf}
	defer ctl.Close()
	env, err := NewRoCEEnv(ctx, wire, ctl)
	if err != nil {
		return nil, err
	}
	if k.AnswerTimeout > 0 {
		env.AnswerTimeout = k.AnswerTimeout
	}
	if k.Silence > 0 {
		env.Silence = k.Silence
	}
	r.Peer = fmt.Sprintf("Linux rxe at %v (perftest servers)", peer)
	r.Cases = KernelRoCECases(env, ctl)
	return r.Run(ctx)
}

// kernelLocalIP returns given, or the address the kernel sends from to reach
// peer (a connected UDP socket sends nothing).
func kernelLocalIP(given string, peer netip.Addr) (netip.Addr, error) {
	if given != "" {
		a, err := netip.ParseAddr(given)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("conform: local address %q: %w", given, err)
		}
		return a.Unmap(), nil
	}
	c, err := net.Dial("udp", netip.AddrPortFrom(peer, roce.UDPPort).String())
	if err != nil {
		return netip.Addr{}, fmt.Errorf("conform: no route to %v: %w", peer, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}
