// Package cli is softrdma conform's command (softrdma conform and conform serve)
// after its flags: it sets up the tester's environment (in process, a control
// server's peer or a kernel peer), runs the suite, writes the report and the
// --pcap capture, and serves the control protocol for a softrdma device. It is a
// package of its own because it opens devices (device, pcaptap) that package
// conform's engine does not import.
package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"time"

	"github.com/softrdma/softrdma/conform"
	"github.com/softrdma/softrdma/device"
	"github.com/softrdma/softrdma/devspec"
	"github.com/softrdma/softrdma/netio"
	"github.com/softrdma/softrdma/roce"
)

// Options are the flags of softrdma conform (the command's flag set fills them).
type Options struct {
	Transport string        // --transport: roce or iwarp
	Self      bool          // --self
	Peer      string        // --peer HOST[:PORT]
	PeerIP    string        // --peer-ip
	Backend   string        // --backend; "": sim with --self, else udp
	Local     string        // --local
	Interface string        // --interface
	Pattern   string        // --case
	JUnit     string        // --junit FILE
	JSON      bool          // --json
	List      bool          // --list
	Verbose   bool          // --verbose
	Timeout   time.Duration // --timeout
	Silence   time.Duration // --silence
	Settle    time.Duration // --settle: iWARP, the wait after the MPA Reply
	Seed      uint64        // --seed
	UDPPort   uint16        // --udp-port
	PeerKind  string        // --peer-kind: control or kernel
	Pcap      string        // --pcap FILE
	Waivers   string        // --waivers FILE
}

// Run checks o (the checks the flag set cannot make), runs the suite (or lists
// the catalogue) and writes the report to stdout; it returns the command's exit
// status: 0 only if every applicable case passed, 1 if one failed, 2 for usage
// errors.
func Run(o Options, stdout, stderr io.Writer) int {
	switch o.Transport {
	case "roce", "iwarp":
	default:
		fmt.Fprintf(stderr, "softrdma conform: --transport %q: want roce or iwarp\n", o.Transport)
		return 2
	}
	if o.List {
		return conformList(o, stdout, stderr)
	}
	if o.Self == (o.Peer != "") {
		fmt.Fprintln(stderr, "softrdma conform: give exactly one of --self and --peer")
		return 2
	}
	if o.Backend == "" && o.Transport == "roce" {
		o.Backend = "udp"
		if o.Self {
			o.Backend = "sim"
		}
	}
	switch o.PeerKind {
	case "control", "kernel":
	default:
		fmt.Fprintf(stderr, "softrdma conform: --peer-kind %q: want control or kernel\n", o.PeerKind)
		return 2
	}
	pcap, err := newConformPcap(o.Pcap)
	if err != nil {
		fmt.Fprintf(stderr, "softrdma conform: --pcap: %v\n", err)
		return 2
	}
	code := conformRun(o, pcap, stdout, stderr)
	if err := pcap.close(stderr, "softrdma conform"); err != nil {
		fmt.Fprintf(stderr, "softrdma conform: --pcap: %v\n", err)
		code = max(code, 1)
	}
	return code
}

// conformRun runs the suite (its capture, if any, is closed by the caller after
// everything that records into it has stopped).
func conformRun(o Options, pcap *conformPcap, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if o.PeerKind == "kernel" {
		return conformKernel(ctx, o, pcap, stdout, stderr)
	}

	var (
		cases    []conform.Case
		peerName string
		cleanup  func()
		err      error
	)
	if o.Transport == "iwarp" {
		cases, peerName, cleanup, err = conformSetupIWARP(ctx, o, pcap, stderr)
	} else {
		cases, peerName, cleanup, err = conformSetupRoCE(ctx, o, pcap, stderr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "softrdma conform: %v\n", err)
		return 2
	}
	defer cleanup()
	r := &conform.Runner{Suite: o.Transport, Peer: peerName, Cases: cases, Pattern: o.Pattern}
	if o.Waivers != "" {
		if r.Waivers, err = conform.ReadWaiversFile(o.Waivers); err != nil {
			fmt.Fprintf(stderr, "softrdma conform: %v\n", err)
			return 2
		}
		for _, w := range conform.Unused(r.Waivers, cases) {
			fmt.Fprintf(stderr, "softrdma conform: %s line %d: %q matches no case\n", o.Waivers, w.Line, w.Pattern)
		}
	}
	total := 0
	if sel, err := conform.Select(cases, o.Pattern); err == nil {
		total = len(sel)
	}
	var progressDone func()
	r.Progress, progressDone = caseProgress(stderr, total, o.Verbose) // progress.go
	rep, err := r.Run(ctx)
	progressDone()
	if err != nil {
		fmt.Fprintf(stderr, "softrdma conform: %v\n", err)
		if rep == nil {
			return 2
		}
	}
	if len(rep.Cases) == 0 {
		fmt.Fprintf(stderr, "softrdma conform: no case matches --case %q (see --list)\n", o.Pattern)
		return 2
	}
	if o.JSON {
		err = rep.WriteJSON(stdout)
	} else {
		err = rep.WriteTable(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "softrdma conform: %v\n", err)
		return 1
	}
	if o.JUnit != "" {
		if err := writeJUnit(o.JUnit, rep); err != nil {
			fmt.Fprintf(stderr, "softrdma conform: --junit: %v\n", err)
			return 1
		}
	}
	if !rep.OK() {
		return 1
	}
	return 0
}

// conformKernel runs the suite against a kernel peer (--peer-kind kernel).
func conformKernel(ctx context.Context, o Options, pcap *conformPcap, stdout, stderr io.Writer) int {
	if o.Self {
		fmt.Fprintln(stderr, "softrdma conform: --peer-kind kernel needs --peer, not --self")
		return 2
	}
	host := o.Peer
	if h, _, err := net.SplitHostPort(o.Peer); err == nil {
		host = h
	}
	if o.PeerIP != "" {
		host = o.PeerIP
	}
	k := conform.KernelRun{Transport: o.Transport, Peer: host, Local: o.Local, AnswerTimeout: o.Timeout,
		Silence: o.Silence, Pattern: o.Pattern, WrapLink: pcap.linkWrapper(true), WrapConn: pcap.connWrapper()}
	var progressDone func()
	k.Progress, progressDone = caseProgress(stderr, 0, o.Verbose)
	rep, err := k.Run(ctx)
	progressDone()
	if err != nil {
		fmt.Fprintf(stderr, "softrdma conform: %v\n", err)
		if rep == nil {
			return 2
		}
	}
	if o.JSON {
		err = rep.WriteJSON(stdout)
	} else {
		err = rep.WriteTable(stdout)
	}
	if err == nil && o.JUnit != "" {
		err = writeJUnit(o.JUnit, rep)
	}
	if err != nil {
		fmt.Fprintf(stderr, "softrdma conform: %v\n", err)
		return 1
	}
	if !rep.OK() {
		return 1
	}
	return 0
}

func writeJUnit(name string, rep *conform.Report) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := rep.WriteJUnit(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// catalogue returns the transport's catalogue, unbound (for listing).
func catalogue(transport string) []conform.Case {
	if transport == "iwarp" {
		return conform.IWARPCases(nil)
	}
	return conform.RoCECases(nil)
}

// conformList prints the catalogue: ID, section, what it checks.
func conformList(o Options, stdout, stderr io.Writer) int {
	cases, err := conform.Select(catalogue(o.Transport), o.Pattern)
	if err != nil {
		fmt.Fprintf(stderr, "softrdma conform: %v\n", err)
		return 2
	}
	rep := &conform.Report{Suite: o.Transport, Peer: "(not run)"}
	for _, c := range cases {
		rep.Cases = append(rep.Cases, c.Describe())
	}
	if o.JSON {
		rep.WriteJSON(stdout)
		return 0
	}
	for _, c := range cases {
		fmt.Fprintf(stdout, "%s\n  section: %s (%s)\n  checks:  %s\n  sends:   %s\n  expects: %s\n", c.ID, c.Citation(), c.Level, c.Summary, c.Sends, c.Expects)
	}
	fmt.Fprintf(stdout, "%d cases\n", len(cases))
	return 0
}

// conformSetupRoCE binds the RoCE catalogue to its environment and applies the
// timeouts.
func conformSetupRoCE(ctx context.Context, o Options, pcap *conformPcap, stderr io.Writer) ([]conform.Case, string, func(), error) {
	env, name, cleanup, err := conformSetup(ctx, o, pcap, stderr)
	if err != nil {
		return nil, "", nil, err
	}
	if o.Timeout > 0 {
		env.AnswerTimeout = o.Timeout
	}
	if o.Silence > 0 {
		env.Silence = o.Silence
	}
	return conform.RoCECases(env), name, cleanup, nil
}

// conformSetupIWARP binds the iWARP catalogue: an in-process peer on loopback TCP
// (--self) or the control server of a remote one, whose QPs listen for the
// tester's TCP connections.
func conformSetupIWARP(ctx context.Context, o Options, pcap *conformPcap, stderr io.Writer) ([]conform.Case, string, func(), error) {
	var (
		env     *conform.IWARPEnv
		name    string
		cleanup func()
	)
	if o.Self {
		if o.Backend != "" && o.Backend != "sim" && o.Backend != "tcp" {
			return nil, "", nil, fmt.Errorf("--transport iwarp --self --backend %q: iWARP runs on loopback TCP (leave --backend out)", o.Backend)
		}
		s, err := conform.NewSelfIWARP(ctx, o.Seed, nil)
		if err != nil {
			return nil, "", nil, err
		}
		env, name, cleanup = s.Env, "softrdma (in-process, loopback TCP)", func() { s.Close() }
	} else {
		host, port, err := net.SplitHostPort(o.Peer)
		if err != nil {
			host, port = o.Peer, strconv.Itoa(conform.DefaultControlPort)
		}
		addr := net.JoinHostPort(host, port)
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		client, err := conform.DialControl(dctx, addr)
		cancel()
		var peer conform.Control
		name = fmt.Sprintf("%s (no control protocol)", host)
		cleanup = func() {}
		if err != nil {
			fmt.Fprintf(stderr, "softrdma conform: no control protocol at %s (%v): cases that need it are not applicable\n", addr, err)
		} else {
			peer, cleanup = client, func() { client.Close() }
		}
		if env, err = conform.NewIWARPEnv(ctx, peer); err != nil {
			cleanup()
			return nil, "", nil, err
		}
		if env.Hello != nil {
			name = fmt.Sprintf("%s at %s (control %s)", env.Hello.Implementation, host, addr)
		}
	}
	if o.Timeout > 0 {
		env.AnswerTimeout = o.Timeout
	}
	if o.Silence > 0 {
		env.Silence = o.Silence
	}
	env.Dial = pcap.wrapDial(env.Dial)
	if o.Settle > 0 {
		env.Dial = conform.SettleDial(env.Dial, o.Settle)
	}
	return conform.IWARPCases(env), name, cleanup, nil
}

// conformSetup builds the RoCE tester's environment: an in-process peer (--self)
// or a wire to a remote one and its control channel.
func conformSetup(ctx context.Context, o Options, pcap *conformPcap, stderr io.Writer) (*conform.RoCEEnv, string, func(), error) {
	if o.Self {
		switch o.Backend {
		case "sim":
			s, err := conform.NewSelfRoCE(ctx, conform.SelfConfig{Seed: o.Seed, WrapLink: pcap.linkWrapper(false)})
			if err != nil {
				return nil, "", nil, err
			}
			return s.Env, "softrdma (in-process, simulated link)", func() { s.Close() }, nil
		case "udp":
			l, err := conform.NewLoopbackRoCE(ctx, conform.LoopbackConfig{UDPPort: o.UDPPort, WrapLink: pcap.linkWrapper(true)})
			if err != nil {
				return nil, "", nil, err
			}
			return l.Env, "softrdma (in-process, loopback UDP)", func() { l.Close() }, nil
		}
		return nil, "", nil, fmt.Errorf("--self --backend %q: want sim or udp", o.Backend)
	}
	if o.Backend != "udp" && o.Backend != "afpacket" {
		return nil, "", nil, fmt.Errorf("--peer --backend %q: want udp or afpacket", o.Backend)
	}
	host, port, err := net.SplitHostPort(o.Peer)
	if err != nil {
		host, port = o.Peer, strconv.Itoa(conform.DefaultControlPort)
	}
	ipText := o.PeerIP
	if ipText == "" {
		ipText = host
	}
	peerIP, err := device.ResolveHost(ctx, ipText)
	if err != nil {
		return nil, "", nil, fmt.Errorf("peer address %q: %w", ipText, err)
	}
	local, err := localAddr(o.Local, peerIP)
	if err != nil {
		return nil, "", nil, err
	}
	// The tester reads and writes the endpoint itself: the device's loop
	// stays unstarted (Idle).
	d, err := device.Open(devspec.Spec{Transport: devspec.RoCE, Backend: devspec.Backend(o.Backend), Iface: o.Interface, Addr: local},
		device.Config{UDPPort: o.UDPPort, Idle: true, AddrFlag: "--local"})
	if err != nil {
		return nil, "", nil, err
	}
	dev := d.(*device.RoCE).RoCE()
	var peerMAC [6]byte
	if o.Backend == "afpacket" {
		if peerMAC, err = resolveMAC(ctx, dev, peerIP); err != nil {
			d.Close()
			return nil, "", nil, err
		}
	}
	mac := dev.MAC()
	// The tester writes frames: over udp, those UDPFrames makes of the
	// endpoint's datagrams (a capture's endpoint is one already).
	link := conform.NewEndpointLink(netio.FramesOf(dev.Endpoint(), mac, [6]byte{}))
	wire, err := conform.NewWire(conform.WireConfig{Link: pcap.wrapLink(link, o.Backend == "udp"), LocalIP: local, PeerIP: peerIP, LocalMAC: mac,
		PeerMAC: peerMAC, UDPSocket: o.Backend == "udp", SrcPort: o.UDPPort, DstPort: o.UDPPort})
	if err != nil {
		d.Close()
		return nil, "", nil, err
	}
	cleanup := func() {
		link.Close()
		d.Close()
	}
	addr := net.JoinHostPort(host, port)
	var peer conform.Control
	name := fmt.Sprintf("%v (control %s)", peerIP, addr)
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	client, err := conform.DialControl(dctx, addr)
	cancel()
	if err != nil {
		fmt.Fprintf(stderr, "softrdma conform: no control protocol at %s (%v): cases that need it are not applicable\n", addr, err)
		name = fmt.Sprintf("%v (no control protocol)", peerIP)
	} else {
		peer = client
		prev := cleanup
		cleanup = func() { client.Close(); prev() }
	}
	env, err := conform.NewRoCEEnv(ctx, wire, peer)
	if err != nil {
		cleanup()
		return nil, "", nil, err
	}
	if env.Hello != nil {
		name = fmt.Sprintf("%s at %v (control %s)", env.Hello.Implementation, peerIP, addr)
	}
	return env, name, cleanup, nil
}

// localAddr returns the tester's address: given (--local), or the one the
// kernel sends from towards peer.
func localAddr(given string, peer netip.Addr) (netip.Addr, error) {
	if given == "" {
		a, err := device.RouteSource(peer)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("no route to %v: %w", peer, err)
		}
		return a, nil
	}
	a, err := netip.ParseAddr(given)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("--local %q: %w", given, err)
	}
	return a.Unmap(), nil
}

// resolveMAC asks the device's neighbour resolution for the peer's MAC.
func resolveMAC(ctx context.Context, dev *roce.Device, ip netip.Addr) ([6]byte, error) {
	n := dev.Neighbors()
	if n == nil {
		return [6]byte{}, errors.New("the device resolves no neighbours")
	}
	deadline := time.Now().Add(roce.PendingTimeout)
	for {
		mac, err := n.Resolve(time.Now(), ip)
		if !errors.Is(err, roce.ErrNeighborPending) {
			if err != nil {
				return mac, fmt.Errorf("the MAC address of %v: %w", ip, err)
			}
			return mac, nil
		}
		if time.Now().After(deadline) {
			return mac, fmt.Errorf("the MAC address of %v: no answer", ip)
		}
		select {
		case <-ctx.Done():
			return mac, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ServeOptions are the flags of softrdma conform serve.
type ServeOptions struct {
	Listen, Transport, Backend, Addr, Interface, Pcap string
	UDPPort                                           uint16
	MaxSessionMemory                                  int64 // --max-session-memory; 0: conform.DefaultMaxSessionMemory
}

// Serve serves the control protocol for a softrdma device until ctx ends and
// returns the exit status of softrdma conform serve.
func Serve(ctx context.Context, o ServeOptions, stdout, stderr io.Writer) int {
	switch o.Transport {
	case "roce":
	case "iwarp":
		if o.Addr == "" {
			fmt.Fprintln(stderr, "softrdma conform serve --transport iwarp: give --addr (where the QPs listen for the tester)")
			return 2
		}
		if _, err := netip.ParseAddr(o.Addr); err != nil {
			fmt.Fprintf(stderr, "softrdma conform serve: --addr %q: %v\n", o.Addr, err)
			return 2
		}
	default:
		fmt.Fprintf(stderr, "softrdma conform serve: --transport %q: want roce or iwarp\n", o.Transport)
		return 2
	}
	// The name is the device's in softrdma stat and --metrics.
	spec := devspec.Spec{Transport: devspec.RoCE, Backend: devspec.Backend(o.Backend), Iface: o.Interface, Name: cmp.Or(o.Interface, "conform")}
	if o.Transport == "roce" {
		if o.Addr != "" {
			a, err := netip.ParseAddr(o.Addr)
			if err != nil {
				fmt.Fprintf(stderr, "softrdma conform serve: --addr %q: %v\n", o.Addr, err)
				return 2
			}
			spec.Addr = a.Unmap()
		}
		if o.Addr == "" && o.Interface == "" {
			fmt.Fprintln(stderr, "softrdma conform serve: give --addr or --interface")
			return 2
		}
	}
	pcap, err := newConformPcap(o.Pcap)
	if err != nil {
		fmt.Fprintf(stderr, "softrdma conform serve: --pcap: %v\n", err)
		return 2
	}
	var code int
	if o.Transport == "iwarp" {
		code = conformServeIWARP(ctx, o.Listen, o.Addr, o.MaxSessionMemory, pcap, stdout, stderr)
	} else {
		code = conformServeRoCE(ctx, o.Listen, o.MaxSessionMemory, spec, o.UDPPort, pcap, stdout, stderr)
	}
	if err := pcap.close(stderr, "softrdma conform serve"); err != nil {
		fmt.Fprintf(stderr, "softrdma conform serve: --pcap: %v\n", err)
		code = max(code, 1)
	}
	return code
}

// conformServeRoCE serves the control protocol for the RoCE device spec
// describes, its frames recorded into pcap (if not nil), with the IPv4 IDs a
// UDP socket hides recovered (device.Config.Tap).
func conformServeRoCE(ctx context.Context, listen string, maxMem int64, spec devspec.Spec, udpPort uint16, pcap *conformPcap, stdout, stderr io.Writer) int {
	cfg := device.Config{UDPPort: udpPort, AddrFlag: "--addr"}
	if pcap != nil {
		cfg.Tap = pcap.tap
	}
	d, err := device.Open(spec, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "softrdma conform serve: %v\n", err)
		return 1
	}
	// The device stops before its capture is closed: nothing records after.
	defer d.Close()
	dev := d.(*device.RoCE).RoCE()
	return serveControl(ctx, listen, &conform.Server{Device: dev, MaxSessionMemory: maxMem},
		fmt.Sprintf("for the RoCE device at %v (path MTU %d)", dev.GIDs(), dev.PathMTU()), stdout, stderr)
}

// serveControl serves srv on a TCP listener on listen until ctx ends, once
// it has printed "softrdma conform serve: control protocol VERSION on ADDR"
// and what (the device served) on stdout: the exit code.
func serveControl(ctx context.Context, listen string, srv *conform.Server, what string, stdout, stderr io.Writer) int {
	l, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintf(stderr, "softrdma conform serve: %v\n", err)
		return 1
	}
	go func() {
		<-ctx.Done()
		l.Close()
	}()
	fmt.Fprintf(stdout, "softrdma conform serve: control protocol %s on %s %s\n", conform.ControlProtocol, l.Addr(), what)
	if err := srv.Serve(l); err != nil && ctx.Err() == nil {
		fmt.Fprintf(stderr, "softrdma conform serve: %v\n", err)
		return 1
	}
	return 0
}

// conformServeIWARP serves the control protocol for an iWARP device whose QPs
// listen on addr (any port) for the tester's connections, their octets recorded
// into pcap (if not nil).
func conformServeIWARP(ctx context.Context, listen, addr string, maxMem int64, pcap *conformPcap, stdout, stderr io.Writer) int {
	observe, err := pcap.observer()
	if err != nil {
		fmt.Fprintf(stderr, "softrdma conform serve: --pcap: %v\n", err)
		return 1
	}
	d, err := device.Open(devspec.Spec{Transport: devspec.IWARP}, device.Config{})
	if err != nil {
		fmt.Fprintf(stderr, "softrdma conform serve: %v\n", err)
		return 1
	}
	dev := d.(*device.IWARP).IWARP()
	return serveControl(ctx, listen, &conform.Server{Device: dev, Transport: "iwarp", ListenHost: addr, Observe: observe, MaxSessionMemory: maxMem},
		"for an iWARP device whose QPs listen on "+addr, stdout, stderr)
}
