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

// BenchmarkRoCEWriteBW measures `softrdma perf write_bw` between two network
// namespaces joined by a veth pair (UDP backend, IB MTU 1024 on the 1500-byte
// link, 64 KiB messages), and in the same run a raw UDP baseline over the same
// path: a blaster sending datagrams of the size of the RoCE WRITE packets
// (BTH + 1024 bytes + ICRC), in batches of the UDP endpoint's batch size, as the
// device does, through the same netio.UDPEndpoint. It reports both rates, in
// MiB/s of payload, and their ratio; it asserts nothing about them. Needs root
// (namespaces); skipped otherwise.
func BenchmarkRoCEWriteBW(b *testing.B) {
	netnstest.Require(b)
	bin := interop.Softrdma(b)
	p := netnstest.NewPair(b, netnstest.PairConfig{})
	const size = 65536
	iters := 500 * b.N // 32 MiB a round: enough to time, short under -benchtime=1x

	// softrdma perf: the server in A, the client in B writing to it.
	args := []string{"perf", "write_bw", "-s", strconv.Itoa(size), "-n", strconv.Itoa(iters), "-x", "1", "-F", "--json"}
	srv := interop.Start(b, p.A.NS.Do, bin, append(args, "-d", p.A.Link)...)
	time.Sleep(200 * time.Millisecond) // the client also retries while the server starts
	cli := interop.Start(b, p.B.NS.Do, bin, append(args, "-d", p.B.Link, p.A.IPv4.Addr().String())...)
	cr, sr := cli.Wait(5*time.Minute), srv.Wait(time.Minute)
	if !cr.OK() || !sr.OK() {
		b.Fatalf("softrdma perf failed\nclient:\n%s\nserver:\n%s", cr, sr)
	}
	var res struct {
		MTU       int `json:"mtu"`
		Bandwidth []struct {
			BWAvg float64 `json:"bw_average"`
		} `json:"bandwidth"`
	}
	if err := json.Unmarshal([]byte(cr.Stdout), &res); err != nil || len(res.Bandwidth) != 1 {
		b.Fatalf("client's --json output: %v\n%s", err, cr.Stdout)
	}
	roceMiBs := res.Bandwidth[0].BWAvg

	// The baseline: the same bytes in datagrams of the WRITE Middle packets'
	// size, B to A, on the same endpoint type and batch size.
	payload := res.MTU
	if payload == 0 {
		payload = 1024
	}
	datagrams := iters * size / payload
	udpMiBs, err := blastUDP(p, payload, datagrams)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(roceMiBs, "roce-MiB/s")
	b.ReportMetric(udpMiBs, "udp-MiB/s")
	b.ReportMetric(roceMiBs/udpMiBs, "roce/udp")
	b.ReportMetric(0, "ns/op") // one transfer, not b.N operations of a fixed cost
}

// noPatch is the baseline's IPv4GSO hook: its datagrams carry no ICRC to fix
// for the segments' IPv4 IDs, but they go out in GSO sends as the device's do.
func noPatch([]byte, int, uint16) {}

// blastUDP sends datagrams UDP datagrams of a RoCE WRITE Middle packet's size
// (BTH, payload bytes, ICRC) from B to A through netio UDP endpoints, in
// batches of the endpoint's batch size, and returns the rate the receiver saw,
// in MiB/s of payload, from its first datagram to its last.
func blastUDP(p *netnstest.Pair, payload, datagrams int) (float64, error) {
	src, dst := p.B.IPv4.Addr(), p.A.IPv4.Addr()
	var rx, tx *netio.UDPEndpoint
	var err error
	if err := p.A.NS.Do(func() error {
		rx, err = netio.NewUDP(netio.UDPConfig{LocalAddr: netip.AddrPortFrom(dst, netio.RoCEv2Port), MTU: p.A.MTU, IPv4GSO: noPatch})
		return err
	}); err != nil {
		return 0, err
	}
	defer rx.Close()
	if err := p.B.NS.Do(func() error {
		tx, err = netio.NewUDP(netio.UDPConfig{LocalAddr: netip.AddrPortFrom(src, netio.RoCEv2Port), MTU: p.B.MTU, IPv4GSO: noPatch})
		return err
	}); err != nil {
		return 0, err
	}
	defer tx.Close()

	const bthLen = 12
	ibLen := bthLen + payload
	h := roce.FrameHeaders{Src: src, Dst: dst, HopLimit: 64, SrcPort: roce.UDPSourcePort(0x11)}
	batch := tx.BatchSize()
	frames := make([][]byte, batch)
	for i := range frames {
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
		return 0, errors.New("the UDP baseline received nothing")
	}
	secs := last.Sub(first).Seconds()
	return float64(got-1) * float64(payload) / secs / (1 << 20), nil
}
