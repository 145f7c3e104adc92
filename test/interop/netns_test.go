package interop_test

import (
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/softrdma/softrdma/netio/netnstest"
	"github.com/softrdma/softrdma/test/interop"
)

// TestPingpongNetns runs the softrdma binary against itself, one process in each
// of two network namespaces joined by a veth pair, for every QP type over IPv4
// and IPv6: the same checks as against rxe (output format, addresses, -c, the
// captures of both sides decode without error and without malformed frames in
// tshark), on the udp and afpacket backends, alike and mixed. It needs root
// but no VM.
func TestPingpongNetns(t *testing.T) {
	netnstest.Require(t)
	bin := interop.Softrdma(t)
	p := netnstest.NewPair(t, netnstest.PairConfig{})
	for _, tc := range []struct {
		pingpongCase
		backend, client string // the server's and the client's
	}{
		{pingpongCase{mode: "rc", size: 4096}, "udp", "udp"},
		{pingpongCase{mode: "rc", size: 10000, ipv6: true, events: true}, "udp", "udp"},
		{pingpongCase{mode: "uc", size: 3000}, "udp", "udp"},
		{pingpongCase{mode: "ud", size: 1024}, "udp", "udp"},
		{pingpongCase{mode: "ud", size: 200, ipv6: true}, "udp", "udp"},
		{pingpongCase{mode: "rc", size: 5000}, "afpacket", "afpacket"},
		{pingpongCase{mode: "rc", size: 10000, ipv6: true}, "afpacket", "afpacket"},
		{pingpongCase{mode: "ud", size: 1024, ipv6: true}, "afpacket", "udp"},
		{pingpongCase{mode: "uc", size: 3000}, "udp", "afpacket"},
	} {
		c := tc.pingpongCase
		t.Run(c.name("/"+tc.backend+"-"+tc.client), func(t *testing.T) {
			dir := t.TempDir()
			gid, srvIP := "1", p.A.IPv4.Addr().String()
			if c.ipv6 {
				gid, srvIP = "2", p.A.IPv6.Addr().String()
			}
			args := []string{"pingpong", c.mode, "-g", gid, "-n", strconv.Itoa(pingpongIters), "-s", strconv.Itoa(c.size), "-c", "--timeout", "60s"}
			if c.events {
				args = append(args, "-e")
			}
			srv := interop.Start(t, p.A.NS.Do, bin, append(args, "-d", p.A.Link, "--backend", tc.backend, "--pcap", filepath.Join(dir, "server.pcap"))...)
			if !srv.WaitOutput("local address:", 30*time.Second) {
				t.Fatalf("server did not start:\n%s", srv.Wait(time.Second))
			}
			cli := interop.Start(t, p.B.NS.Do, bin, append(args, "-d", p.B.Link, "--backend", tc.client, "--pcap", filepath.Join(dir, "client.pcap"), srvIP)...)
			cr, sr := cli.Wait(90*time.Second), srv.Wait(90*time.Second)
			if !cr.OK() || !sr.OK() {
				t.Fatalf("exchange failed\nclient:\n%s\nserver:\n%s", cr, sr)
			}
			cl, crem := checkPingpongOutput(t, "client", cr.Stdout, c)
			sl, srem := checkPingpongOutput(t, "server", sr.Stdout, c)
			if cl != srem || sl != crem {
				t.Errorf("addresses disagree: client %+v/%+v server %+v/%+v", cl, crem, sl, srem)
			}
			for _, f := range []string{"server.pcap", "client.pcap"} {
				checkCapture(t, filepath.Join(dir, f), c)
			}
		})
	}
}

// TestPingpongTAP runs softrdma pingpong with the tap backend, a host of its own
// behind a TAP device (answering ARP itself), against softrdma pingpong on a
// UDP socket on the kernel's side of that TAP device, in a fresh network
// namespace. The TCP exchange goes over the namespace's loopback.
func TestPingpongTAP(t *testing.T) {
	netnstest.Require(t)
	bin := interop.Softrdma(t)
	ns := netnstest.New(t)
	dir := t.TempDir()
	for _, c := range []pingpongCase{{mode: "rc", size: 4096}, {mode: "ud", size: 512}} {
		t.Run(c.name("/tap"), func(t *testing.T) {
			args := []string{"pingpong", c.mode, "-g", "1", "-n", strconv.Itoa(pingpongIters), "-s", strconv.Itoa(c.size), "-c", "--timeout", "60s"}
			srv := interop.Start(t, ns.Do, bin, append(args, "--backend", "tap", "-d", "srpp0",
				"--tap-addr", "10.98.0.2/24", "--tap-kernel-addr", "10.98.0.1/24", "--pcap", filepath.Join(dir, c.mode+"-server.pcap"))...)
			if !srv.WaitOutput("local address:", 30*time.Second) {
				t.Fatalf("server did not start:\n%s", srv.Wait(time.Second))
			}
			// The TAP device exists from now on; the kernel's side holds 10.98.0.1.
			cli := interop.Start(t, ns.Do, bin, append(args, "-d", "10.98.0.1", "--pcap", filepath.Join(dir, c.mode+"-client.pcap"), "127.0.0.1")...)
			cr, sr := cli.Wait(90*time.Second), srv.Wait(90*time.Second)
			if !cr.OK() || !sr.OK() {
				t.Fatalf("exchange failed\nclient:\n%s\nserver:\n%s", cr, sr)
			}
			cl, crem := checkPingpongOutput(t, "client", cr.Stdout, c)
			sl, srem := checkPingpongOutput(t, "server", sr.Stdout, c)
			if cl != srem || sl != crem || sl.gid != "::ffff:10.98.0.2" || cl.gid != "::ffff:10.98.0.1" {
				t.Errorf("addresses: client %+v/%+v server %+v/%+v", cl, crem, sl, srem)
			}
			for _, f := range []string{c.mode + "-server.pcap", c.mode + "-client.pcap"} {
				checkCapture(t, filepath.Join(dir, f), c)
			}
		})
	}
}
