//go:build linux

package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cmd/softrdma/decode"
	"github.com/softrdma/softrdma/netio"
	"github.com/softrdma/softrdma/netio/netnstest"
)

// rpingAcross runs softrdma rping --transport roce between the two
// namespaces of p: the server in A (writing its frames to pcap, if not ""),
// the client in B, count pings. Both must exit 0.
func rpingAcross(t *testing.T, p *netnstest.Pair, count int, pcap string) {
	t.Helper()
	srv := p.A.IPv4.Addr().String()
	port := strconv.Itoa(20000 + os.Getpid()%20000)
	args := []string{"--transport", "roce", "-s", "-a", srv, "-p", port, "--timeout", "30s"}
	if pcap != "" {
		args = append(args, "--pcap", pcap)
	}
	var sOut, sErr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		code := -1
		p.A.NS.MustDo(t, func() error { code = rpingCmd(args, &sOut, &sErr); return nil })
		done <- code
	}()
	var cOut, cErr bytes.Buffer
	code := -1
	for try := 0; try < 50; try++ { // the server may not listen yet: a REJ
		cOut.Reset()
		cErr.Reset()
		p.B.NS.MustDo(t, func() error {
			code = rpingCmd([]string{"--transport", "roce", "-c", "-a", srv, "-p", port, "-C", strconv.Itoa(count), "-V", "--timeout", "20s"}, &cOut, &cErr)
			return nil
		})
		if code == 0 || !strings.Contains(cErr.String(), "REJECTED") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code != 0 {
		t.Fatalf("rping client exit %d\n%s%s", code, cOut.String(), cErr.String())
	}
	if c := <-done; c != 0 {
		t.Fatalf("rping server exit %d\n%s%s", c, sOut.String(), sErr.String())
	}
}

// packetLine is decode's line for one RDMA packet; the frame number and the
// time (since the first frame of the capture) are the columns before it.
var packetLine = regexp.MustCompile(`(?m)^ *\d+ +\d+\.\d{6} (.*)$`)

func packetLines(out string) []string {
	var l []string
	for _, m := range packetLine.FindAllStringSubmatch(out, -1) {
		l = append(l, m[1])
	}
	slices.Sort(l)
	return l
}

// TestDecodeLive captures live on the veth end of a namespace the test
// creates while softrdma rping runs over RoCE across the pair: every RDMA
// packet the rping server's own capture (--pcap) holds is printed by the live
// decode, the same line for the same frame (frame numbers and times aside:
// the live capture also counts ARP), and nothing else is an RDMA packet.
// Stopping the capture (its context) decodes what the socket holds first.
// Skips, saying why, without root.
func TestDecodeLive(t *testing.T) {
	p := netnstest.NewPair(t, netnstest.PairConfig{})
	var lc *netio.LiveCapture
	p.A.NS.MustDo(t, func() (err error) { lc, err = netio.OpenLiveCapture(p.A.Link); return err })
	defer lc.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var live bytes.Buffer
	type result struct {
		res decode.Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := decode.RunLive(ctx, lc, &live, decode.Options{Summary: true, Flows: true}, decode.LiveOptions{})
		done <- result{res, err}
	}()
	pcap := filepath.Join(t.TempDir(), "server.pcap")
	rpingAcross(t, p, 5, pcap)
	cancel()
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if len(r.res.Errors) != 0 || r.res.Format != "live" {
		t.Errorf("live: format %q, errors %v", r.res.Format, r.res.Errors)
	}
	var file bytes.Buffer
	f, err := os.Open(pcap)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fres, err := decode.Run(f, &file, decode.Options{Summary: true, Flows: true})
	if err != nil {
		t.Fatal(err)
	}
	// Every packet of the server's capture, the same line live; the wire
	// also carries what the server never read: a client's REQ sent before
	// the server listened (the client tries again).
	got, want := packetLines(live.String()), packetLines(file.String())
	var extra []string
	i := 0
	for _, l := range got {
		if i < len(want) && l == want[i] {
			i++
			continue
		}
		extra = append(extra, l)
	}
	if len(want) < 5*7 || i != len(want) {
		t.Errorf("live decode lacks packets of the server's capture (%d of %d found):\nlive:\n%s\nfile:\n%s",
			i, len(want), strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, l := range extra {
		if !strings.Contains(l, " CM REQ ") {
			t.Errorf("live decode has a packet the server's capture has not: %s", l)
		}
	}
	// Frames may differ: the veth's GRO hands the capture one frame for
	// several datagrams, which decode splits into their packets.
	if r.res.Packets != fres.Packets+len(extra) {
		t.Errorf("live: %d packets; the capture: %d, and %d REQs before the server listened", r.res.Packets, fres.Packets, len(extra))
	}
}

// TestDecodeLiveCommand: softrdma decode -i IFACE -c N stops by itself after
// N frames with the usual summary and exit status; -c without -i, and
// --annotate or --flow with -i, are refused; without root the capture says
// it needs it.
func TestDecodeLiveCommand(t *testing.T) {
	for _, args := range [][]string{{"-c", "3", "x.pcap"}, {"-i", "lo", "--annotate", "a.pcapng"}, {"-i", "lo", "--flow", "1"},
		{"-i", "lo", "x.pcap"}, {"-i", "no-such-interface-x"}} {
		var out, errOut bytes.Buffer
		if code := runDecode(args, &out, &errOut); code != 2 || errOut.Len() == 0 {
			t.Errorf("decode %v: exit %d, stderr %q", args, code, errOut.String())
		}
	}
	if os.Geteuid() != 0 {
		var out, errOut bytes.Buffer
		if code := runDecode([]string{"-i", "lo", "-c", "1"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "CAP_NET_RAW") {
			t.Errorf("without root: exit %d, %q", code, errOut.String())
		}
		t.Skip("live capture needs root (CAP_NET_RAW)")
	}
	p := netnstest.NewPair(t, netnstest.PairConfig{})
	var out, errOut bytes.Buffer
	done := make(chan int, 1)
	go func() {
		code := -1
		p.A.NS.MustDo(t, func() error {
			code = runDecode([]string{"-i", p.A.Link, "-c", "12"}, &out, &errOut)
			return nil
		})
		done <- code
	}()
	// Traffic until the capture has its 12 frames (one rping is well over:
	// the capture may not be open for the first).
	for round := 0; round < 20; round++ {
		rpingAcross(t, p, 3, "")
		select {
		case code := <-done:
			if code != 0 || !strings.Contains(out.String(), "12 frames (live)") {
				t.Errorf("exit %d\n%s%s", code, out.String(), errOut.String())
			}
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatalf("decode -i -c 12 did not stop after 20 rping runs\n%s%s", out.String(), errOut.String())
}
