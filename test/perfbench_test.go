package test

import (
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/netio"
	"github.com/softrdma/softrdma/netio/netnstest"
	"github.com/softrdma/softrdma/roce"
	"github.com/softrdma/softrdma/test/interop"
)

// perfBackends are the RoCE backends BenchmarkRoCEWriteBW measures.
var perfBackends = []string{"udp", "afpacket", "tap"}

// BenchmarkRoCEWriteBW measures `softrdma perf write_bw` on each backend
// (IB MTU 1024 on 1500-byte links, 64 KiB messages) and in the same run a raw
// baseline over the same path: a blaster sending datagrams of the size of the
// RoCE WRITE packets (BTH + 1024 bytes + ICRC), in batches of the endpoint's
// batch size, through the endpoint type the device uses (see writeBW). It
// reports both rates, in MiB/s of payload, and their ratio; it asserts
// nothing about them. Needs root (namespaces); skipped otherwise.
func BenchmarkRoCEWriteBW(b *testing.B) {
	for _, backend := range perfBackends {
		b.Run(backend, func(b *testing.B) {
			r := writeBW(b, backend, 500*b.N) // 32 MiB a round: enough to time, short under -benchtime=1x
			b.ReportMetric(r.roce, "roce-MiB/s")
			b.ReportMetric(r.raw, "raw-MiB/s")
			b.ReportMetric(r.roce/r.raw, "roce/raw")
			b.ReportMetric(0, "ns/op") // one transfer, not b.N operations of a fixed cost
		})
	}
}

// TestRoCEWriteBWRuns runs BenchmarkRoCEWriteBW's measurement, small, on every
// backend: both numbers must come out; nothing is asserted about them.
func TestRoCEWriteBWRuns(t *testing.T) {
	for _, backend := range perfBackends {
		t.Run(backend, func(t *testing.T) {
			r := writeBW(t, backend, 40)
			if !(r.roce > 0) || !(r.raw > 0) {
				t.Fatalf("softrdma %v MiB/s, raw %v MiB/s", r.roce, r.raw)
			}
			t.Logf("softrdma perf write_bw %.0f MiB/s, raw %.0f MiB/s, ratio %.2f", r.roce, r.raw, r.roce/r.raw)
		})
	}
}

type writeBWResult struct{ roce, raw float64 }

// The TAP backend's hosts, in namespace A of the pair: the perf server is
// .2 behind a TAP device whose kernel side, .1, the client uses; the
// baseline has a TAP device of its own on another subnet.
var (
	tapKernel     = netip.MustParsePrefix("10.98.0.1/24")
	tapHost       = netip.MustParsePrefix("10.98.0.2/24")
	tapRawKernel  = netip.MustParsePrefix("10.97.0.1/24")
	tapRawHost    = netip.MustParsePrefix("10.97.0.2/24")
	tapRawHostMAC = net.HardwareAddr{0x02, 0x5f, 0x72, 0x62, 0x00, 0x02}
)

// writeBW runs softrdma perf write_bw with iters 64 KiB WRITEs between two
// processes over backend, then the raw baseline of that path with the same
// bytes: udp, UDP endpoints in two namespaces joined by a veth; afpacket,
// packet endpoints on the two veth ends; tap, in one namespace, a UDP
// endpoint on the kernel's side of a TAP device sending to the TAP endpoint
// (the device behind it, the perf server, is the target of the WRITEs).
func writeBW(tb testing.TB, backend string, iters int) writeBWResult {
	netnstest.Require(tb)
	bin := interop.Softrdma(tb)
	p := netnstest.NewPair(tb, netnstest.PairConfig{})
	const size = 65536
	args := []string{"perf", "write_bw", "-s", strconv.Itoa(size), "-n", strconv.Itoa(iters), "-x", "1", "-F", "--json"}
	srvNS, cliNS := p.A.NS, p.B.NS
	var srvArgs, cliArgs []string
	switch backend {
	case "udp":
		srvArgs = []string{"-d", p.A.Link}
		cliArgs = []string{"-d", p.B.Link, p.A.IPv4.Addr().String()}
	case "afpacket":
		srvArgs = []string{"--backend", "afpacket", "-d", p.A.Link}
		cliArgs = []string{"--backend", "afpacket", "-d", p.B.Link, p.A.IPv4.Addr().String()}
	case "tap":
		cliNS = p.A.NS
		srvArgs = []string{"--backend", "tap", "--tap-name", "srbw0", "-d", tapHost.String()}
		cliArgs = []string{"-d", tapKernel.Addr().String(), "127.0.0.1"}
	}
	if backend == "tap" {
		// A persistent TAP device with the kernel's address, which the
		// client needs before the server opens the device (after the
		// out-of-band exchange) and attaches to it. The tap backend (water)
		// clears the persistence, so it goes when the server closes it.
		for _, cmd := range [][]string{
			{"ip", "tuntap", "add", "dev", "srbw0", "mode", "tap"},
			{"ip", "addr", "add", tapKernel.String(), "dev", "srbw0"},
			{"ip", "link", "set", "srbw0", "up"},
		} {
			if r := interop.Start(tb, p.A.NS.Do, cmd[0], cmd[1:]...).Wait(30 * time.Second); !r.OK() {
				tb.Fatalf("setting up the TAP device:\n%s", r)
			}
		}
	}
	srv := interop.Start(tb, srvNS.Do, bin, append(args, srvArgs...)...)
	time.Sleep(200 * time.Millisecond) // the client also retries while the server starts
	cli := interop.Start(tb, cliNS.Do, bin, append(args, cliArgs...)...)
	cr, sr := cli.Wait(5*time.Minute), srv.Wait(time.Minute)
	if !cr.OK() || !sr.OK() {
		tb.Fatalf("softrdma perf failed\nclient:\n%s\nserver:\n%s", cr, sr)
	}
	var res struct {
		MTU       int `json:"mtu"`
		Bandwidth []struct {
			BWAvg float64 `json:"bw_average"`
		} `json:"bandwidth"`
	}
	if err := json.Unmarshal([]byte(cr.Stdout), &res); err != nil || len(res.Bandwidth) != 1 {
		tb.Fatalf("client's --json output: %v\n%s", err, cr.Stdout)
	}
	payload := res.MTU
	if payload == 0 {
		payload = 1024
	}
	raw, err := rawWriteBW(p, backend, payload, iters*size/payload)
	if err != nil {
		tb.Fatalf("%s baseline: %v", backend, err)
	}
	return writeBWResult{roce: res.Bandwidth[0].BWAvg, raw: raw}
}

// rawWriteBW opens backend's baseline endpoints and blasts datagrams of a
// WRITE Middle packet's size through them.
func rawWriteBW(p *netnstest.Pair, backend string, payload, datagrams int) (float64, error) {
	var tx, rx netio.Endpoint
	var from, to *netnstest.Side // for the frames' addresses
	defer func() {
		for _, e := range []netio.Endpoint{tx, rx} {
			if e != nil {
				e.Close()
			}
		}
	}()
	switch backend {
	case "udp":
		from, to = &p.B, &p.A
		if err := p.A.NS.Do(func() (err error) {
			rx, err = udpFrames(netio.UDPConfig{LocalAddr: netip.AddrPortFrom(p.A.IPv4.Addr(), netio.RoCEv2Port), MTU: p.A.MTU})
			return err
		}); err != nil {
			return 0, err
		}
		if err := p.B.NS.Do(func() (err error) {
			tx, err = udpFrames(netio.UDPConfig{LocalAddr: netip.AddrPortFrom(p.B.IPv4.Addr(), netio.RoCEv2Port), MTU: p.B.MTU})
			return err
		}); err != nil {
			return 0, err
		}
	case "afpacket":
		from, to = &p.B, &p.A
		// A socket on the port that never reads, so that A's kernel sends
		// no port unreachables (the packet socket sees the frames anyway).
		var hold net.PacketConn
		if err := p.A.NS.Do(func() (err error) {
			if hold, err = net.ListenPacket("udp4", netip.AddrPortFrom(p.A.IPv4.Addr(), netio.RoCEv2Port).String()); err != nil {
				return err
			}
			rx, err = netio.NewPacket(netio.PacketConfig{Interface: p.A.Link})
			return err
		}); err != nil {
			return 0, err
		}
		defer hold.Close()
		if err := p.B.NS.Do(func() (err error) {
			tx, err = netio.NewPacket(netio.PacketConfig{Interface: p.B.Link})
			return err
		}); err != nil {
			return 0, err
		}
	case "tap":
		var tap *netio.TAPEndpoint
		if err := p.A.NS.Do(func() (err error) {
			tap, err = netio.NewTAP("srbw1", p.A.MTU)
			return err
		}); err != nil {
			return 0, err
		}
		rx = tap
		if err := p.A.NS.AddAddress(tap.Name(), tapRawKernel); err != nil {
			return 0, err
		}
		// The host behind the TAP answers no ARP.
		if err := p.A.NS.AddNeighbor(tap.Name(), tapRawHost.Addr(), tapRawHostMAC); err != nil {
			return 0, err
		}
		from = &netnstest.Side{MAC: tap.HardwareAddr(), IPv4: tapRawKernel}
		to = &netnstest.Side{MAC: tapRawHostMAC, IPv4: tapRawHost}
		if err := p.A.NS.Do(func() (err error) {
			tx, err = udpFrames(netio.UDPConfig{LocalAddr: netip.AddrPortFrom(tapRawKernel.Addr(), netio.RoCEv2Port), MTU: tap.MTU()})
			return err
		}); err != nil {
			return 0, err
		}
	}
	return blast(tx, rx, from, to, payload, datagrams)
}

// blast sends datagrams frames from one side to the other, each a RoCE WRITE
// Middle packet's size (BTH, payload bytes, ICRC), through tx in batches of
// its batch size, and returns the rate rx saw, in MiB/s of payload, from its
// first datagram to its last. It closes rx.
// udpFrames opens a UDP endpoint as a frame endpoint (MAC addresses 0).
func udpFrames(cfg netio.UDPConfig) (netio.Endpoint, error) {
	e, err := netio.NewUDP(cfg)
	if err != nil {
		return nil, err
	}
	return netio.NewUDPFrames(e, [6]byte{}, [6]byte{}), nil
}

func blast(tx, rx netio.Endpoint, from, to *netnstest.Side, payload, datagrams int) (float64, error) {
	const bthLen = 12
	ibLen := bthLen + payload
	h := roce.FrameHeaders{SrcMAC: [6]byte(from.MAC), DstMAC: [6]byte(to.MAC), Src: from.IPv4.Addr(), Dst: to.IPv4.Addr(),
		HopLimit: 64, SrcPort: roce.UDPSourcePort(0x11)}
	batch := tx.BatchSize()
	run := 1 // IPv4 IDs in runs, so that a UDP endpoint sends GSO as the device does
	if dw, ok := tx.(netio.DatagramWriter); ok {
		k, bytes := dw.IPv4Run()
		run = max(1, min(k, bytes/(ibLen+roce.ICRCLen)))
	}
	frames := make([][]byte, batch)
	for i := range frames {
		h.IPID = uint16(i % run)
		f := make([]byte, h.Len()+ibLen+roce.ICRCLen)
		f[h.Len()] = 0x07 // an RC RDMA WRITE Middle opcode, for looks
		n, err := h.EncodeFrame(f, ibLen)
		if err != nil {
			return 0, err
		}
		frames[i] = f[:n]
	}

	var (
		mu          sync.Mutex
		got         int
		first, last time.Time
	)
	done := make(chan error, 1)
	go func() {
		bufs := make([][]byte, rx.BatchSize())
		for i := range bufs {
			bufs[i] = make([]byte, 65536)
		}
		sizes := make([]int, len(bufs))
		for {
			n, err := rx.Read(bufs, sizes, 0)
			now := time.Now()
			mu.Lock()
			if n > 0 {
				if got == 0 {
					first = now
				}
				got += n
				last = now
			}
			mu.Unlock()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					err = nil
				}
				done <- err
				return
			}
		}
	}()
	for sent := 0; sent < datagrams; {
		n, err := tx.Write(frames[:min(batch, datagrams-sent)], 0)
		if err != nil {
			return 0, err
		}
		sent += n
	}
	// Let the receiver drain, then stop it.
	for idle := 0; idle < 4; idle++ {
		mu.Lock()
		before := got
		mu.Unlock()
		time.Sleep(50 * time.Millisecond)
		mu.Lock()
		if got != before {
			idle = 0
		}
		mu.Unlock()
	}
	rx.Close()
	if err := <-done; err != nil {
		return 0, err
	}
	mu.Lock()
	defer mu.Unlock()
	if got < 2 {
		return 0, errors.New("the baseline received nothing")
	}
	secs := last.Sub(first).Seconds()
	return float64(got-1) * float64(payload) / secs / (1 << 20), nil
}
