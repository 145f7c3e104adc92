package main

import (
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
	"github.com/softrdma/softrdma/pcaptap"
	"github.com/softrdma/softrdma/roce"
)

const conformUsage = `usage: softrdma conform [flags] (--self | --peer HOST[:PORT])
       softrdma conform serve [flags]
       softrdma conform --list

A protocol conformance suite: a scripted peer sends exactly the packets each case
asks for (good ones and wrong ones: a bad ICRC, a wrong P_Key or Q_Key, a PSN from
the future, an opcode out of sequence, an impossible pad count ...), captures the
answer, and judges it against the specification: IBTA Vol. 1 chapter 9 for RoCE
(--transport roce, the default), RFC 5044/6581 (MPA), 5041 (DDP) and 5040 (RDMAP)
for iWARP (--transport iwarp, where the tester speaks MPA on TCP connections to the
QPs the peer's control server makes listen). Each case passes, fails (with the
bytes seen, in hex), or is not applicable (the peer lacks a control the case needs).

--self runs the suite against softrdma itself, in process: RoCE on the simulator
(--backend sim, the default: deterministic, virtual time, a few milliseconds) or
over UDP sockets on the loopback interface (--backend udp, 127.0.0.1 and
127.0.0.2); iWARP on loopback TCP.

--peer HOST[:PORT] tests another machine. The cases get their side channel (a QP
connected to the tester's QPN and PSN, a registered region, receives, memory read
back, a QP's state) from the control protocol of conform/CONTROL.md, which
"softrdma conform serve" speaks on TCP port 7471 (of 127.0.0.1 unless told
otherwise with its --listen); the peer's RoCE address is HOST
(or --peer-ip). Without a control server at HOST every case is not applicable.
The tester's frames go out over --backend udp (a UDP socket on port 4791 of
--local, by default the address that routes to the peer) or afpacket (raw frames
on --interface, CAP_NET_RAW).

--peer-kind kernel --peer IP tests the Linux kernel's rxe (--transport roce) or
siw (--transport iwarp) at IP, which serve no control protocol: the side channel
comes from the kernel's own tools, which must be running there in a loop. For
RoCE, perftest servers (the tester is their client over perftest's TCP exchange,
on the ports and with the options of conform.DefaultPerftestServers):
  while :; do ib_write_bw -d rxe0 -x GIDX -p 18515 -n 5 -s 16384; done &
  while :; do ib_read_bw -d rxe0 -x GIDX -p 18516 -n 5 -s 16384; done &
  while :; do ib_atomic_bw -d rxe0 -x GIDX -p 18517 -n 5 -A FETCH_AND_ADD; done &
  while :; do ib_send_bw -d rxe0 -x GIDX -p 18518 -n 16 -s 4096; done &
  while :; do ib_send_bw -d rxe0 -x GIDX -p 18519 -n 16 -s 16; done &
For iWARP, rping's persistent server: rping -s -P -a IP -p 7174. The cases that
need what those tools cannot give (memory read back, the peer as requester, a
given QP configuration) are not applicable, with the reason; completions and QP
states are not observable, and a case that needs them passes on its wire checks
alone, saying so (test/conform/kernel-results.md).

The exit status is 0 only if every applicable case passed (and at least one did),
1 if one failed, 2 for usage errors.

flags:
`

const conformServeUsage = `usage: softrdma conform serve [--transport roce|iwarp] [--listen ADDR] [--backend udp|afpacket] [--addr IP] [--interface IF] [--max-session-memory SIZE] [--pcap FILE]

Opens a softrdma RoCE device (or an iWARP device, whose QPs then listen on --addr
for the tester's TCP connections) and serves the conformance control protocol for
it on TCP, so that "softrdma conform --peer HOST" can test it. Each connection is a
session: what it creates is destroyed when it ends.

The protocol has no authentication: whoever reaches the port creates QPs and
registers memory the device's peers can write. So it listens on 127.0.0.1:7471
unless --listen says otherwise: for a tester on another machine, give the
address it reaches (--listen 10.0.0.2:7471, or --listen :7471 for every
interface) on a network you trust. The regions one session holds are at most
--max-session-memory (a reg_mr beyond it is refused; reset frees them).

flags:
`

// conformOptions are the flags of softrdma conform.
type conformOptions struct {
	transport string
	self      bool
	peer      string
	peerIP    string
	backend   string
	local     string
	iface     string
	pattern   string
	junit     string
	json      bool
	list      bool
	verbose   bool
	timeout   time.Duration
	silence   time.Duration
	seed      uint64
	udpPort   uint16
	peerKind  string
	pcap      string // --pcap FILE
	waivers   string // --waivers FILE
}

func conformCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "serve" {
		return conformServeCmd(args[1:], stdout, stderr)
	}
	var o conformOptions
	fs := newFlagSet("conform", conformUsage, stderr)
	fs.SortFlags = false
	fs.StringVar(&o.transport, "transport", "roce", "transport under test: roce or iwarp")
	fs.BoolVar(&o.self, "self", false, "test an in-process softrdma peer")
	fs.StringVar(&o.peer, "peer", "", "control address HOST[:PORT] of the peer under test (port 7471 by default)")
	fs.StringVar(&o.peerKind, "peer-kind", "control", "what serves the peer's side channel: control (conform serve) or kernel (rxe/siw with perftest/rping servers)")
	fs.StringVar(&o.peerIP, "peer-ip", "", "the peer's RoCE address (default: HOST of --peer)")
	fs.StringVar(&o.backend, "backend", "", "how the tester's frames travel: sim (--self only), udp or afpacket (default sim with --self, else udp)")
	fs.StringVar(&o.local, "local", "", "the tester's address (default: the one that routes to the peer)")
	fs.StringVarP(&o.iface, "interface", "d", "", "network interface (afpacket: required)")
	fs.StringVar(&o.pattern, "case", "", "run only the cases whose IDs match these comma-separated globs, e.g. 'rc.dup.*,ud.*'")
	fs.StringVar(&o.junit, "junit", "", "also write the report as JUnit XML to `FILE`")
	fs.BoolVar(&o.json, "json", false, "print the report as JSON instead of a table")
	fs.BoolVar(&o.list, "list", false, "list the catalogue and exit")
	fs.StringVar(&o.waivers, "waivers", "", "the peer's expected failures: a `FILE` of lines 'CASE-GLOB reason'; a listed case that fails reports XFAIL and does not fail the run")
	fs.BoolVarP(&o.verbose, "verbose", "v", false, "print each case's result as it finishes (to stderr)")
	fs.DurationVar(&o.timeout, "timeout", 0, "how long to wait for an answer the specification requires (default 200ms; 1s virtual on the simulator)")
	fs.DurationVar(&o.silence, "silence", 0, "how long no answer must come where the specification requires none (default 100ms)")
	fs.Uint64Var(&o.seed, "seed", 1, "simulator seed (--self --backend sim)")
	fs.Uint16Var(&o.udpPort, "udp-port", roce.UDPPort, "RoCEv2 UDP port")
	fs.StringVar(&o.pcap, "pcap", "", "write every frame the tester sends and receives (iWARP: the TCP octets of its connections, as synthesised segments), the deliberately broken ones exactly as sent, to this pcap `FILE`")
	if err := parseFlags(fs, args, stderr); err != nil {
		return flagsExit(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "softrdma conform: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	switch o.transport {
	case "roce", "iwarp":
	default:
		fmt.Fprintf(stderr, "softrdma conform: --transport %q: want roce or iwarp\n", o.transport)
		return 2
	}
	if o.list {
		return conformList(o, stdout, stderr)
	}
	if o.self == (o.peer != "") {
		fmt.Fprintln(stderr, "softrdma conform: give exactly one of --self and --peer")
		return 2
	}
	if o.backend == "" && o.transport == "roce" {
		o.backend = "udp"
		if o.self {
			o.backend = "sim"
		}
	}
	switch o.peerKind {
	case "control", "kernel":
	default:
		fmt.Fprintf(stderr, "softrdma conform: --peer-kind %q: want control or kernel\n", o.peerKind)
		return 2
	}
	pcap, err := newConformPcap(o.pcap)
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
func conformRun(o conformOptions, pcap *conformPcap, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if o.peerKind == "kernel" {
		return conformKernel(ctx, o, pcap, stdout, stderr)
	}

	var (
		cases    []conform.Case
		peerName string
		cleanup  func()
		err      error
	)
	if o.transport == "iwarp" {
		cases, peerName, cleanup, err = conformSetupIWARP(ctx, o, pcap, stderr)
	} else {
		cases, peerName, cleanup, err = conformSetupRoCE(ctx, o, pcap, stderr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "softrdma conform: %v\n", err)
		return 2
	}
	defer cleanup()
	r := &conform.Runner{Suite: o.transport, Peer: peerName, Cases: cases, Pattern: o.pattern}
	if o.waivers != "" {
		if r.Waivers, err = conform.ReadWaiversFile(o.waivers); err != nil {
			fmt.Fprintf(stderr, "softrdma conform: %v\n", err)
			return 2
		}
		for _, w := range conform.Unused(r.Waivers, cases) {
			fmt.Fprintf(stderr, "softrdma conform: %s line %d: %q matches no case\n", o.waivers, w.Line, w.Pattern)
		}
	}
	if o.verbose {
		r.Progress = func(c conform.CaseReport) {
			fmt.Fprintf(stderr, "%-14s %-26s %s\n", c.Result, c.ID, c.Reason)
		}
	}
	rep, err := r.Run(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "softrdma conform: %v\n", err)
		if rep == nil {
			return 2
		}
	}
	if len(rep.Cases) == 0 {
		fmt.Fprintf(stderr, "softrdma conform: no case matches --case %q (see --list)\n", o.pattern)
		return 2
	}
	if o.json {
		err = rep.WriteJSON(stdout)
	} else {
		err = rep.WriteTable(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "softrdma conform: %v\n", err)
		return 1
	}
	if o.junit != "" {
		if err := writeJUnit(o.junit, rep); err != nil {
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
func conformKernel(ctx context.Context, o conformOptions, pcap *conformPcap, stdout, stderr io.Writer) int {
	if o.self {
		fmt.Fprintln(stderr, "softrdma conform: --peer-kind kernel needs --peer, not --self")
		return 2
	}
	host := o.peer
	if h, _, err := net.SplitHostPort(o.peer); err == nil {
		host = h
	}
	if o.peerIP != "" {
		host = o.peerIP
	}
	k := conform.KernelRun{Transport: o.transport, Peer: host, Local: o.local, AnswerTimeout: o.timeout,
		Silence: o.silence, Pattern: o.pattern, WrapLink: pcap.linkWrapper(true), WrapConn: pcap.connWrapper()}
	if o.verbose {
		k.Progress = func(c conform.CaseReport) { fmt.Fprintf(stderr, "%-14s %-26s %s\n", c.Result, c.ID, c.Reason) }
	}
	rep, err := k.Run(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "softrdma conform: %v\n", err)
		if rep == nil {
			return 2
		}
	}
	if o.json {
		err = rep.WriteJSON(stdout)
	} else {
		err = rep.WriteTable(stdout)
	}
	if err == nil && o.junit != "" {
		err = writeJUnit(o.junit, rep)
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
func conformList(o conformOptions, stdout, stderr io.Writer) int {
	cases, err := conform.Select(catalogue(o.transport), o.pattern)
	if err != nil {
		fmt.Fprintf(stderr, "softrdma conform: %v\n", err)
		return 2
	}
	rep := &conform.Report{Suite: o.transport, Peer: "(not run)"}
	for _, c := range cases {
		rep.Cases = append(rep.Cases, c.Describe())
	}
	if o.json {
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
func conformSetupRoCE(ctx context.Context, o conformOptions, pcap *conformPcap, stderr io.Writer) ([]conform.Case, string, func(), error) {
	env, name, cleanup, err := conformSetup(ctx, o, pcap, stderr)
	if err != nil {
		return nil, "", nil, err
	}
	if o.timeout > 0 {
		env.AnswerTimeout = o.timeout
	}
	if o.silence > 0 {
		env.Silence = o.silence
	}
	return conform.RoCECases(env), name, cleanup, nil
}

// conformSetupIWARP binds the iWARP catalogue: an in-process peer on loopback TCP
// (--self) or the control server of a remote one, whose QPs listen for the
// tester's TCP connections.
func conformSetupIWARP(ctx context.Context, o conformOptions, pcap *conformPcap, stderr io.Writer) ([]conform.Case, string, func(), error) {
	var (
		env     *conform.IWARPEnv
		name    string
		cleanup func()
	)
	if o.self {
		if o.backend != "" && o.backend != "sim" && o.backend != "tcp" {
			return nil, "", nil, fmt.Errorf("--transport iwarp --self --backend %q: iWARP runs on loopback TCP (leave --backend out)", o.backend)
		}
		s, err := conform.NewSelfIWARP(ctx, o.seed, nil)
		if err != nil {
			return nil, "", nil, err
		}
		env, name, cleanup = s.Env, "softrdma (in-process, loopback TCP)", func() { s.Close() }
	} else {
		host, port, err := net.SplitHostPort(o.peer)
		if err != nil {
			host, port = o.peer, strconv.Itoa(conform.DefaultControlPort)
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
	if o.timeout > 0 {
		env.AnswerTimeout = o.timeout
	}
	if o.silence > 0 {
		env.Silence = o.silence
	}
	env.Dial = pcap.wrapDial(env.Dial)
	return conform.IWARPCases(env), name, cleanup, nil
}

// conformSetup builds the RoCE tester's environment: an in-process peer (--self)
// or a wire to a remote one and its control channel.
func conformSetup(ctx context.Context, o conformOptions, pcap *conformPcap, stderr io.Writer) (*conform.RoCEEnv, string, func(), error) {
	if o.self {
		switch o.backend {
		case "sim":
			s, err := conform.NewSelfRoCE(ctx, conform.SelfConfig{Seed: o.seed, WrapLink: pcap.linkWrapper(false)})
			if err != nil {
				return nil, "", nil, err
			}
			return s.Env, "softrdma (in-process, simulated link)", func() { s.Close() }, nil
		case "udp":
			l, err := conform.NewLoopbackRoCE(ctx, conform.LoopbackConfig{UDPPort: o.udpPort, WrapLink: pcap.linkWrapper(true)})
			if err != nil {
				return nil, "", nil, err
			}
			return l.Env, "softrdma (in-process, loopback UDP)", func() { l.Close() }, nil
		}
		return nil, "", nil, fmt.Errorf("--self --backend %q: want sim or udp", o.backend)
	}
	if o.backend != "udp" && o.backend != "afpacket" {
		return nil, "", nil, fmt.Errorf("--peer --backend %q: want udp or afpacket", o.backend)
	}
	host, port, err := net.SplitHostPort(o.peer)
	if err != nil {
		host, port = o.peer, strconv.Itoa(conform.DefaultControlPort)
	}
	ipText := o.peerIP
	if ipText == "" {
		ipText = host
	}
	peerIP, err := resolveIP(ctx, ipText)
	if err != nil {
		return nil, "", nil, fmt.Errorf("peer address %q: %w", ipText, err)
	}
	local, err := localIPFor(o.local, peerIP, o.udpPort)
	if err != nil {
		return nil, "", nil, err
	}
	dev, err := roce.Open(roce.OpenConfig{Backend: roce.Backend(o.backend), Interface: o.iface,
		Addrs: []netip.Addr{local}, UDPPort: o.udpPort})
	if err != nil {
		return nil, "", nil, err
	}
	var peerMAC [6]byte
	if o.backend == "afpacket" {
		if peerMAC, err = resolveMAC(ctx, dev, peerIP); err != nil {
			dev.Close()
			return nil, "", nil, err
		}
	}
	var mac [6]byte
	if hw := macOfInterface(o.iface); hw != nil {
		copy(mac[:], hw)
	}
	link := conform.NewEndpointLink(dev.Endpoint())
	wire, err := conform.NewWire(conform.WireConfig{Link: pcap.wrapLink(link, o.backend == "udp"), LocalIP: local, PeerIP: peerIP, LocalMAC: mac,
		PeerMAC: peerMAC, UDPSocket: o.backend == "udp", SrcPort: o.udpPort, DstPort: o.udpPort})
	if err != nil {
		dev.Close()
		return nil, "", nil, err
	}
	cleanup := func() {
		link.Close()
		dev.Close()
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

func resolveIP(ctx context.Context, s string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), nil
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", s)
	if err != nil {
		return netip.Addr{}, err
	}
	for _, a := range addrs {
		if a.Unmap().Is4() {
			return a.Unmap(), nil
		}
	}
	if len(addrs) == 0 {
		return netip.Addr{}, fmt.Errorf("no address")
	}
	return addrs[0], nil
}

// localIPFor returns the tester's address: given, or the one the kernel would
// send from to reach peer (a connected UDP socket sends nothing).
func localIPFor(given string, peer netip.Addr, port uint16) (netip.Addr, error) {
	if given != "" {
		a, err := netip.ParseAddr(given)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("--local %q: %w", given, err)
		}
		return a.Unmap(), nil
	}
	c, err := net.Dial("udp", netip.AddrPortFrom(peer, port).String())
	if err != nil {
		return netip.Addr{}, fmt.Errorf("no route to %v: %w", peer, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
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

func macOfInterface(name string) net.HardwareAddr {
	if name == "" {
		return nil
	}
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return nil
	}
	return ifi.HardwareAddr
}

// conformServeOptions are the flags of softrdma conform serve.
type conformServeOptions struct {
	listen, transport, backend, addr, iface, pcap string
	udpPort                                       uint16
	maxSessionMemory                              byteSize // --max-session-memory; 0: conform.DefaultMaxSessionMemory
}

// conformServeCmd serves the control protocol for a softrdma device.
func conformServeCmd(args []string, stdout, stderr io.Writer) int {
	o, err := conformServeParse(args, stderr)
	if err != nil {
		return flagsExit(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	return conformServe(ctx, o, stdout, stderr)
}

// conformServeParse reads conform serve's flags (parseFlags).
func conformServeParse(args []string, stderr io.Writer) (conformServeOptions, error) {
	var o conformServeOptions
	fs := newFlagSet("conform serve", conformServeUsage, stderr)
	fs.StringVar(&o.listen, "listen", "127.0.0.1:"+strconv.Itoa(conform.DefaultControlPort), "TCP address of the control protocol (loopback only unless given: the protocol has no authentication)")
	o.maxSessionMemory = conform.DefaultMaxSessionMemory
	fs.Var(&o.maxSessionMemory, "max-session-memory", "octets of memory regions one session may hold registered (K, M, G suffixes)")
	fs.StringVar(&o.transport, "transport", "roce", "the device: roce or iwarp")
	fs.StringVar(&o.backend, "backend", "udp", "the device's backend: udp or afpacket")
	fs.StringVar(&o.addr, "addr", "", "the device's RoCE address (udp: the address to bind; default the interface's first)")
	fs.StringVarP(&o.iface, "interface", "d", "", "network interface (afpacket: required; udp: where the address comes from)")
	fs.Uint16Var(&o.udpPort, "udp-port", roce.UDPPort, "RoCEv2 UDP port")
	fs.StringVar(&o.pcap, "pcap", "", "write every frame the device sends and receives (iWARP: the TCP octets of its QPs' connections, as synthesised segments) to this pcap `FILE`")
	if err := parseFlags(fs, args, stderr); err != nil {
		return o, err
	}
	if o.maxSessionMemory < 1 {
		fmt.Fprintf(stderr, "softrdma conform serve: --max-session-memory %d: want 1 or more\n", o.maxSessionMemory)
		return o, &flagsError{errors.New("--max-session-memory")}
	}
	return o, nil
}

// conformServe serves until ctx ends.
func conformServe(ctx context.Context, o conformServeOptions, stdout, stderr io.Writer) int {
	switch o.transport {
	case "roce":
	case "iwarp":
		if o.addr == "" {
			fmt.Fprintln(stderr, "softrdma conform serve --transport iwarp: give --addr (where the QPs listen for the tester)")
			return 2
		}
		if _, err := netip.ParseAddr(o.addr); err != nil {
			fmt.Fprintf(stderr, "softrdma conform serve: --addr %q: %v\n", o.addr, err)
			return 2
		}
	default:
		fmt.Fprintf(stderr, "softrdma conform serve: --transport %q: want roce or iwarp\n", o.transport)
		return 2
	}
	cfg := roce.OpenConfig{Backend: roce.Backend(o.backend), Interface: o.iface, UDPPort: o.udpPort}
	if o.transport == "roce" {
		if o.addr != "" {
			a, err := netip.ParseAddr(o.addr)
			if err != nil {
				fmt.Fprintf(stderr, "softrdma conform serve: --addr %q: %v\n", o.addr, err)
				return 2
			}
			cfg.Addrs = []netip.Addr{a}
		}
		if o.addr == "" && o.iface == "" {
			fmt.Fprintln(stderr, "softrdma conform serve: give --addr or --interface")
			return 2
		}
	}
	pcap, err := newConformPcap(o.pcap)
	if err != nil {
		fmt.Fprintf(stderr, "softrdma conform serve: --pcap: %v\n", err)
		return 2
	}
	var code int
	if o.transport == "iwarp" {
		code = conformServeIWARP(ctx, o.listen, o.addr, int64(o.maxSessionMemory), pcap, stdout, stderr)
	} else {
		code = conformServeRoCE(ctx, o.listen, int64(o.maxSessionMemory), cfg, pcap, stdout, stderr)
	}
	if err := pcap.close(stderr, "softrdma conform serve"); err != nil {
		fmt.Fprintf(stderr, "softrdma conform serve: --pcap: %v\n", err)
		code = max(code, 1)
	}
	return code
}

// conformServeRoCE serves the control protocol for a RoCE device opened with
// cfg, its frames recorded into pcap (if not nil): the device's own capture
// (roce.OpenConfig.Capture) merged into the file, with the IPv4 IDs a UDP
// socket hides recovered (as pingpong's ppCapture does).
func conformServeRoCE(ctx context.Context, listen string, maxMem int64, cfg roce.OpenConfig, pcap *conformPcap, stdout, stderr io.Writer) int {
	var src *pcaptap.Source
	if pcap != nil {
		src = pcap.tap.Source(cfg.Backend == "" || cfg.Backend == roce.BackendUDP)
		cfg.Capture, cfg.CaptureFormat = src, netio.FormatPcap
		defer func() {
			if err := src.Close(); err != nil {
				fmt.Fprintf(stderr, "softrdma conform serve: --pcap: %v\n", err)
			}
		}()
	}
	dev, err := roce.Open(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "softrdma conform serve: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	defer func() {
		// The device stops before its capture is closed: nothing records after.
		cancel()
		dev.Close()
		<-done
	}()
	go func() {
		defer close(done)
		dev.Run(ctx, nil)
	}()
	l, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintf(stderr, "softrdma conform serve: %v\n", err)
		return 1
	}
	go func() {
		<-ctx.Done()
		l.Close()
	}()
	fmt.Fprintf(stdout, "softrdma conform serve: control protocol %s on %s for the RoCE device at %v (path MTU %d)\n",
		conform.ControlProtocol, l.Addr(), dev.GIDs(), dev.PathMTU())
	if err := (&conform.Server{Device: dev, MaxSessionMemory: maxMem}).Serve(l); err != nil && ctx.Err() == nil {
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
	l, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintf(stderr, "softrdma conform serve: %v\n", err)
		return 1
	}
	go func() {
		<-ctx.Done()
		l.Close()
	}()
	fmt.Fprintf(stdout, "softrdma conform serve: control protocol %s on %s for an iWARP device whose QPs listen on %s\n",
		conform.ControlProtocol, l.Addr(), addr)
	if err := (&conform.Server{Device: dev, Transport: "iwarp", ListenHost: addr, Observe: observe, MaxSessionMemory: maxMem}).Serve(l); err != nil && ctx.Err() == nil {
		fmt.Fprintf(stderr, "softrdma conform serve: %v\n", err)
		return 1
	}
	return 0
}
