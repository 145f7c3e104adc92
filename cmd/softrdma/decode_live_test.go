//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket/pcapgo"
	"github.com/softrdma/softrdma/decode"
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
	code, cOut, cErr := untilListening(50*time.Millisecond, []string{"REJECTED"}, func(stdout, stderr io.Writer) (code int) {
		p.B.NS.MustDo(t, func() error {
			code = rpingCmd([]string{"--transport", "roce", "-c", "-a", srv, "-p", port, "-C", strconv.Itoa(count), "-V", "--timeout", "20s"}, stdout, stderr)
			return nil
		})
		return code
	})
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
	fres, file := decodeFile(t, pcap, decode.Options{Summary: true, Flows: true})
	// Every packet of the server's capture, the same line live; the wire
	// also carries what the server never read: a client's REQ sent before
	// the server listened (the client tries again).
	got, want := packetLines(live.String()), packetLines(file)
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
// --annotate with -i, are refused; without root the capture says
// it needs it.
func TestDecodeLiveCommand(t *testing.T) {
	for _, args := range [][]string{{"-c", "3", "x.pcap"}, {"-i", "lo", "--annotate", "a.pcapng"},
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

// pcapFrames is a decode.FrameReader over a capture file: what a live
// capture of its frames reads, then io.EOF.
type pcapFrames struct{ r *pcapgo.NgReader }

func (p *pcapFrames) ReadFrame() ([]byte, time.Time, int, error) {
	data, ci, err := p.r.ReadPacketData()
	return data, ci.Timestamp, ci.Length, err
}
func (p *pcapFrames) TryReadFrame() ([]byte, time.Time, int, bool, error) {
	return nil, time.Time{}, 0, false, nil
}
func (p *pcapFrames) SetReadDeadline(time.Time) error { return nil }

// TestDecodeLiveFilterWrite: decode -i IFACE -w FILE.pcapng --flow ADDR, in a
// namespace the test creates while softrdma rping runs across it, writes every
// frame it read to FILE (pcapng), and prints the packets that a decode of FILE
// with the same --flow prints (the same frames: the same lines). --qp on those
// frames, read as a live capture, shows what the file's --qp shows: both
// directions of the QP pair, the other QP's by the CM REQ and REP.
// Skips, saying why, without root.
func TestDecodeLiveFilterWrite(t *testing.T) {
	for _, args := range [][]string{{"-w", "x.pcapng", "x.pcap"}, {"-i", "lo", "--flow", "1"}} {
		var out, errOut bytes.Buffer
		if code := runDecode(args, &out, &errOut); code != 2 || errOut.Len() == 0 {
			t.Errorf("decode %v: exit %d, stderr %q", args, code, errOut.String())
		}
	}
	if os.Geteuid() != 0 {
		t.Skip("live capture needs root (CAP_NET_RAW)")
	}
	p := netnstest.NewPair(t, netnstest.PairConfig{})
	file := filepath.Join(t.TempDir(), "live.pcapng")
	client := p.B.IPv4.Addr().String()
	const frames = 150 // several rping runs: one whole, CM REQ and REP with it
	var out, errOut bytes.Buffer
	done := make(chan int, 1)
	go func() {
		code := -1
		p.A.NS.MustDo(t, func() error {
			code = runDecode([]string{"-i", p.A.Link, "-w", file, "--flow", client, "-c", strconv.Itoa(frames)}, &out, &errOut)
			return nil
		})
		done <- code
	}()
	var code int
wait:
	for round := 0; ; round++ {
		if round == 20 {
			t.Fatalf("decode -i -c %d did not stop after 20 rping runs\n%s%s", frames, out.String(), errOut.String())
		}
		rpingAcross(t, p, 3, "")
		select {
		case code = <-done:
			break wait
		case <-time.After(100 * time.Millisecond):
		}
	}
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errOut.String())
	}
	var fileOut, fileErr bytes.Buffer
	if code := runDecode([]string{file, "--flow", client}, &fileOut, &fileErr); code != 0 {
		t.Fatalf("decode of the -w file: exit %d\n%s", code, fileErr.String())
	}
	live, saved := packetLines(out.String()), packetLines(fileOut.String())
	if len(live) == 0 || !slices.Equal(live, saved) || !strings.Contains(fileOut.String(), strconv.Itoa(frames)+" frames (pcapng)") {
		t.Errorf("live --flow %s:\n%s\nthe -w file, --flow %s:\n%s", client, out.String(), client, fileOut.String())
	}

	// --qp: the file's frames read as a live capture.
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// A QP pair whose CM REQ and REP the capture holds (it may have begun
	// in the middle of an rping): REQ's sender QP qa, REP's qb.
	var js bytes.Buffer
	if _, err := decode.Run(f, &js, decode.Options{JSON: true}); err != nil {
		t.Fatal(err)
	}
	reqs := map[uint32]uint32{} // REQ's LocalCommID: its QPN
	var qa, qb uint32
	for _, line := range strings.Split(js.String(), "\n") {
		var pk decode.Packet
		if json.Unmarshal([]byte(line), &pk) != nil || pk.MAD == nil || pk.MAD.CM == nil || pk.MAD.CM.LocalQPN == nil {
			continue
		}
		switch cm := pk.MAD.CM; cm.Message {
		case "REQ":
			if cm.LocalCommID != nil {
				reqs[*cm.LocalCommID] = *cm.LocalQPN
			}
		case "REP":
			if cm.RemoteCommID == nil || qa != 0 {
				continue
			}
			if q, ok := reqs[*cm.RemoteCommID]; ok && q != *cm.LocalQPN {
				qa, qb = q, *cm.LocalQPN
			}
		}
	}
	if qa == 0 {
		t.Fatalf("no CM REQ and REP of two QPs in the capture:\n%s", fileOut.String())
	}
	filter := &decode.Filter{QPs: []uint32{qa}}
	var fromFile, fromLive bytes.Buffer
	f.Seek(0, io.SeekStart)
	if _, err := decode.Run(f, &fromFile, decode.Options{Filter: filter}); err != nil {
		t.Fatal(err)
	}
	f.Seek(0, io.SeekStart)
	ng, err := pcapgo.NewNgReader(f, pcapgo.DefaultNgReaderOptions)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := decode.RunLive(context.Background(), &pcapFrames{ng}, &fromLive, decode.Options{Filter: filter}, decode.LiveOptions{}); err != nil {
		t.Fatal(err)
	}
	want := packetLines(fromFile.String())
	if got := packetLines(fromLive.String()); !slices.Equal(got, want) || !strings.Contains(fromLive.String(), fmt.Sprintf("QP=0x%06x", qb)) {
		t.Errorf("--qp 0x%06x (pair of 0x%06x) live:\n%s\nfile:\n%s", qa, qb, fromLive.String(), fromFile.String())
	}
}
