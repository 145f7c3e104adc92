package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/counters"
	"github.com/softrdma/softrdma/decode"
	"github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/internal/syncbuf"
	"github.com/softrdma/softrdma/internal/tcploop"
	"github.com/softrdma/softrdma/pcaptap"
	"github.com/softrdma/softrdma/pingpong"
	"github.com/softrdma/softrdma/roce"
)

var (
	ppLocalRE  = regexp.MustCompile(`(?m)^  local address:  LID 0x0000, QPN 0x([0-9a-f]{6}), PSN 0x([0-9a-f]{6})[,:] GID (\S+)$`)
	ppRemoteRE = regexp.MustCompile(`(?m)^  remote address: LID 0x0000, QPN 0x([0-9a-f]{6}), PSN 0x([0-9a-f]{6}), GID (\S+)$`)
	ppBytesRE  = regexp.MustCompile(`(?m)^(\d+) bytes in \d+\.\d\d seconds = (\d+\.\d\d|inf) Mbit/sec$`)
	ppItersRE  = regexp.MustCompile(`(?m)^(\d+) iters in \d+\.\d\d seconds = (\d+\.\d\d|inf) usec/iter$`)
)

// TestPingpongLoopback runs softrdma pingpong against itself over UDP sockets on
// loopback addresses (no root needed) for each QP type: both sides exit 0 with
// the tools' four output lines, each side's remote address is the other's
// local one, the -c check passes, and both captures decode without error.
func TestPingpongLoopback(t *testing.T) {
	for i, tc := range []struct {
		mode  string
		extra []string
	}{
		{"rc", []string{"-s", "5000"}},    // 5 packets per message
		{"rc", []string{"-s", "1", "-e"}}, // CQ events
		{"uc", []string{"-s", "3000", "-m", "2048"}},
		{"ud", []string{"-s", "1024"}},
		{"ud", []string{"-s", "100", "-e"}},
	} {
		t.Run(tc.mode+strings.Join(tc.extra, ""), func(t *testing.T) {
			srvIP, cliIP := fmt.Sprintf("127.0.78.%d", 2*i+1), fmt.Sprintf("127.0.78.%d", 2*i+2)
			port := strconv.Itoa(tcploop.FreePort(t))
			dir := t.TempDir()
			common := append([]string{tc.mode, "-g", "1", "-n", "20", "-c", "-p", port, "--timeout", "60s"}, tc.extra...)
			var srvOut, srvErr syncbuf.Buffer
			srvDone := make(chan int, 1)
			go func() {
				srvDone <- pingpongCmd(append(common, "-d", srvIP, "--pcap", filepath.Join(dir, "server.pcap")), &srvOut, &srvErr)
			}()
			deadline := time.Now().Add(10 * time.Second)
			for !strings.Contains(srvOut.String(), "local address") && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			var cliOut, cliErr bytes.Buffer
			code := pingpongCmd(append(common, "-d", cliIP, "--pcap", filepath.Join(dir, "client.pcap"), srvIP), &cliOut, &cliErr)
			srvCode := <-srvDone
			if code != 0 || srvCode != 0 {
				t.Fatalf("client exit %d:\n%s%s\nserver exit %d:\n%s%s", code, cliOut.String(), cliErr.String(), srvCode, srvOut.String(), srvErr.String())
			}
			for name, out := range map[string]string{"client": cliOut.String(), "server": srvOut.String()} {
				if n := strings.Count(out, "\n"); n != 4 {
					t.Errorf("%s printed %d lines, want 4:\n%s", name, n, out)
				}
				if !ppBytesRE.MatchString(out) || !ppItersRE.MatchString(out) {
					t.Errorf("%s: no result lines:\n%s", name, out)
				}
				if m := ppItersRE.FindStringSubmatch(out); m != nil && m[1] != "20" {
					t.Errorf("%s: %s iters", name, m[1])
				}
				if strings.Contains(out, "invalid data") {
					t.Errorf("%s: -c check failed:\n%s", name, out)
				}
			}
			cl, sl := ppLocalRE.FindStringSubmatch(cliOut.String()), ppLocalRE.FindStringSubmatch(srvOut.String())
			cr, sr := ppRemoteRE.FindStringSubmatch(cliOut.String()), ppRemoteRE.FindStringSubmatch(srvOut.String())
			if cl == nil || sl == nil || cr == nil || sr == nil {
				t.Fatalf("address lines missing:\n%s\n%s", cliOut.String(), srvOut.String())
			}
			if strings.Join(cl[1:], " ") != strings.Join(sr[1:], " ") || strings.Join(sl[1:], " ") != strings.Join(cr[1:], " ") {
				t.Errorf("addresses do not match:\nclient %v / %v\nserver %v / %v", cl[1:], cr[1:], sl[1:], sr[1:])
			}
			if cl[3] != "::ffff:"+cliIP || sl[3] != "::ffff:"+srvIP {
				t.Errorf("GIDs %s, %s", cl[3], sl[3])
			}
			for _, name := range []string{"client.pcap", "server.pcap"} {
				f, err := os.Open(filepath.Join(dir, name))
				if err != nil {
					t.Fatal(err)
				}
				var out bytes.Buffer
				res, err := decode.Run(f, &out, decode.Options{Summary: true})
				f.Close()
				if err != nil || len(res.Errors) != 0 || res.RDMAFrames < 40 {
					t.Errorf("%s: %v, %+v\n%s", name, err, res, out.String())
				}
			}
		})
	}
}

// TestPingpongJSON checks --json: one object with both addresses and the
// figures, and nothing else on stdout.
func TestPingpongJSON(t *testing.T) {
	port := strconv.Itoa(tcploop.FreePort(t))
	common := []string{"ud", "-g", "1", "-n", "5", "-s", "64", "-p", port, "--timeout", "30s", "--json"}
	var srvOut, srvErr syncbuf.Buffer
	srvDone := make(chan int, 1)
	go func() { srvDone <- pingpongCmd(append(common, "-d", "127.0.78.101"), &srvOut, &srvErr) }()
	var cliOut, cliErr bytes.Buffer
	code := pingpongCmd(append(common, "-d", "127.0.78.102", "--wait", "10s", "127.0.78.101"), &cliOut, &cliErr)
	if srvCode := <-srvDone; code != 0 || srvCode != 0 {
		t.Fatalf("exit %d/%d: %s %s", code, srvCode, cliErr.String(), srvErr.String())
	}
	var cli, srv pingpong.Result
	if err := json.Unmarshal(cliOut.Bytes(), &cli); err != nil {
		t.Fatalf("%v:\n%s", err, cliOut.String())
	}
	if err := json.Unmarshal([]byte(srvOut.String()), &srv); err != nil {
		t.Fatalf("%v:\n%s", err, srvOut.String())
	}
	if cli.Local != srv.Remote || srv.Local != cli.Remote || cli.Role != "client" || srv.Role != "server" {
		t.Errorf("client %+v\nserver %+v", cli, srv)
	}
	if cli.Bytes != 5*64*2 || cli.Iters != 5 || cli.Mode != "ud" || cli.Local.GID != "::ffff:127.0.78.102" {
		t.Errorf("client %+v", cli)
	}
	// The counters of the run's device, as softrdma stat --json gives them:
	// each side sent its 5 UD SENDs of 64 bytes (and received the other's).
	for name, out := range map[string][]byte{"client": cliOut.Bytes(), "server": []byte(srvOut.String())} {
		var c struct {
			Counters *counters.Snapshot `json:"counters"`
		}
		if err := json.Unmarshal(out, &c); err != nil || c.Counters == nil {
			t.Fatalf("%s: no counters (%v):\n%s", name, err, out)
		}
		if len(c.Counters.Devices) != 1 {
			t.Fatalf("%s: %d devices in the counters, want the run's one: %+v", name, len(c.Counters.Devices), c.Counters)
		}
		d := c.Counters.Devices[0]
		if d.Transport != "roce" || d.Counters.PacketsOut < 5 || d.Counters.PacketsIn < 5 {
			t.Errorf("%s: counters %+v, want roce with 5 packets or more each way", name, d)
		}
	}
}

// TestPingpongFlags checks the refusals: bad flags exit like the tools (1),
// iWARP says "not yet" (2).
func TestPingpongFlags(t *testing.T) {
	dev := loopbackNet() + "1" // the MTU row opens its device
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--transport", "iwarp"}, 2, "not yet"},
		{[]string{"-m", "1000"}, 2, "-m 1000: want 256, 512, 1024, 2048 or 4096"},
		{[]string{"-i", "2"}, 1, "port 1 only"},
		{[]string{"a", "b"}, 1, ""},
		{[]string{"--backend", "carrier-pigeon", "-d", "127.0.0.1", "-p", "1"}, 1, "want udp"},
		{[]string{"-d", "no-such-interface0", "-p", "1"}, 1, "not found"},
		{[]string{"ud", "-s", "5000", "-d", dev, "-g", "1", "-p", "1"}, 1, "larger than port MTU"},
		{[]string{"-d", "127.0.0.1", "-g", "0", "-p", "1"}, 1, "link-local"},
		{[]string{"-d", "127.0.0.1", "-g", "7", "-p", "1"}, 1, "can't read sgid of index 7"},
	} {
		var out, errOut bytes.Buffer
		code := pingpongCmd(tc.args, &out, &errOut)
		if code != tc.code || !strings.Contains(errOut.String(), tc.msg) {
			t.Errorf("%v: exit %d, stderr %q; want %d, %q", tc.args, code, errOut.String(), tc.code, tc.msg)
		}
	}
}

// ppPairRun is what a server and a client of one pingpong run printed.
type ppPairRun struct {
	srvCode, cliCode int
	srv, cli         string // stdout
	srvErr, cliErr   string
}

func (r ppPairRun) String() string {
	return fmt.Sprintf("server exit %d:\n%s%s\nclient exit %d:\n%s%s", r.srvCode, r.srv, r.srvErr, r.cliCode, r.cli, r.cliErr)
}

// runPingpongPair runs a pingpong server on srvIP and a client on cliIP in this
// process, over UDP on loopback, with common flags on both and srvExtra,
// cliExtra on one each.
func runPingpongPair(t *testing.T, srvIP, cliIP string, common, srvExtra, cliExtra []string) ppPairRun {
	t.Helper()
	port := strconv.Itoa(tcploop.FreePort(t))
	common = append(append([]string(nil), common...), "-p", port, "--timeout", "60s")
	var srvOut, srvErr syncbuf.Buffer
	srvDone := make(chan int, 1)
	go func() {
		srvDone <- pingpongCmd(append(append(append([]string(nil), common...), "-d", srvIP), srvExtra...), &srvOut, &srvErr)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(srvOut.String(), "local address") && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	var cliOut, cliErr bytes.Buffer
	args := append(append(append([]string(nil), common...), "-d", cliIP, "--wait", "10s"), cliExtra...)
	r := ppPairRun{cliCode: pingpongCmd(append(args, srvIP), &cliOut, &cliErr)}
	r.srvCode = <-srvDone
	r.srv, r.srvErr, r.cli, r.cliErr = srvOut.String(), srvErr.String(), cliOut.String(), cliErr.String()
	return r
}

// TestPingpongRxDepth runs -r at values other than the default 500. With -r 1
// each side has a single receive posted, so every iteration must post the next
// one before the peer's message arrives: on UD a message that finds no receive
// is dropped and the run would stall (on RC it would cost RNR NAKs, which the
// capture shows). -r sizes the QP's receive queue: 16384 (MaxQPWR) runs, 16385
// fails to create the QP as ibv_create_qp does, naming MaxRecvWR.
func TestPingpongRxDepth(t *testing.T) {
	for i, tc := range []struct {
		mode  string
		depth string
		iters string
	}{
		{"ud", "1", "50"},
		{"rc", "1", "50"},
		{"uc", "2", "30"},
		{"ud", "16384", "3"},
	} {
		t.Run(tc.mode+"-r"+tc.depth, func(t *testing.T) {
			srvIP, cliIP := fmt.Sprintf("127.0.78.%d", 120+2*i), fmt.Sprintf("127.0.78.%d", 121+2*i)
			dir := t.TempDir()
			pcap := filepath.Join(dir, "server.pcap")
			r := runPingpongPair(t, srvIP, cliIP, []string{tc.mode, "-g", "1", "-n", tc.iters, "-s", ppTestSize(tc.mode), "-r", tc.depth, "-c"},
				[]string{"--pcap", pcap}, nil)
			if r.srvCode != 0 || r.cliCode != 0 {
				t.Fatalf("exchange failed\n%s", r)
			}
			for name, out := range map[string]string{"client": r.cli, "server": r.srv} {
				if m := ppItersRE.FindStringSubmatch(out); m == nil || m[1] != tc.iters || strings.Contains(out, "invalid data") {
					t.Errorf("%s output:\n%s", name, out)
				}
			}
			// The server's capture holds every message both ways and no RNR NAK.
			// A message is counted once by its last packet's QP and PSN: an RC
			// requester may send one again (a tail-loss probe when an ACK is
			// late on a loaded machine).
			type msgID struct{ qp, psn uint32 }
			seen := map[msgID]bool{}
			sends, rnr := 0, 0
			for _, f := range readPPFrames(t, pcap) {
				bth := ibtransport.BTH(f.IB)
				op := bth.Opcode()
				switch {
				case op == ibtransport.OpcodeRCAcknowledge && ibtransport.AETH(f.IB[ibtransport.BTHLen:]).Syndrome().Kind() == ibtransport.AETHKindRNRNAK:
					rnr++
				case op == ibtransport.OpcodeRCSendLast || op == ibtransport.OpcodeUCSendLast || op == ibtransport.OpcodeUDSendOnly:
					if id := (msgID{bth.DestQP(), bth.PSN()}); !seen[id] {
						seen[id] = true
						sends++ // the last packet of each message
					}
				}
			}
			if n, _ := strconv.Atoi(tc.iters); sends != 2*n || rnr != 0 {
				t.Errorf("server capture: %d SENDs (want %d), %d RNR NAKs", sends, 2*n, rnr)
			}
		})
	}
	t.Run("above MaxQPWR", func(t *testing.T) {
		var out, errOut bytes.Buffer
		code := pingpongCmd([]string{"ud", "-g", "1", "-d", "127.0.78.140", "-p", strconv.Itoa(tcploop.FreePort(t)), "-r", "16385", "--timeout", "10s"}, &out, &errOut)
		if code != 1 || !strings.Contains(errOut.String(), "Couldn't create QP") || !strings.Contains(errOut.String(), "MaxRecvWR 16385") {
			t.Errorf("-r 16385: exit %d, stderr %q; want 1, Couldn't create QP ... MaxRecvWR 16385", code, errOut.String())
		}
	})
}

// TestPingpongServiceLevel runs -l 7 on both sides. The SL goes into the
// address handle of the QP (RC, UC) or of the UD sends, as ibv_*_pingpong put
// it in ibv_ah_attr.sl. RoCEv2 headers have no SL field and rxe drops it
// (TOS comes from the GRH traffic class, 0 here), so on the wire it shows
// nowhere: the capture must look as with -l 0 (TOS 0), and the run complete.
// (pingpong.TestServiceLevelAddressHandle checks the address handles.)
func TestPingpongServiceLevel(t *testing.T) {
	for i, mode := range []string{"rc", "ud"} {
		t.Run(mode, func(t *testing.T) {
			srvIP, cliIP := fmt.Sprintf("127.0.78.%d", 150+2*i), fmt.Sprintf("127.0.78.%d", 151+2*i)
			pcap := filepath.Join(t.TempDir(), "client.pcap")
			r := runPingpongPair(t, srvIP, cliIP, []string{mode, "-g", "1", "-n", "10", "-s", ppTestSize(mode), "-l", "7"}, nil, []string{"--pcap", pcap})
			if r.srvCode != 0 || r.cliCode != 0 {
				t.Fatalf("exchange failed\n%s", r)
			}
			frames := readPPFrames(t, pcap)
			if len(frames) < 20 {
				t.Fatalf("captured %d frames", len(frames))
			}
			for j, f := range frames {
				if f.IPv6 || f.IP[1] != 0 {
					t.Fatalf("frame %d: TOS %#x, want 0 (the SL is not carried in RoCEv2)", j, f.IP[1])
				}
			}
		})
	}
}

// ppTestSize is the message size of the -r and -l runs: several packets for
// RC and UC, one of 1024 bytes for UD.
//
// (With single-packet RC messages, go test -race reports the receive landing
// in the buffer the previous send was read from: the pingpong tools send from
// and receive into one buffer, and the race detector does not see that the
// peer's message cannot arrive before ours left, as netio's sendmmsg and
// recvmmsg calls carry no happens-before edge. Larger messages hide that.)
func ppTestSize(mode string) string {
	if mode == "ud" {
		return "1024"
	}
	return "5000"
}

// readPPFrames decodes the RoCE frames of a capture (pcaptap.ReadRoCEFrames).
func readPPFrames(t *testing.T, name string) []roce.Frame {
	t.Helper()
	frames, err := pcaptap.ReadRoCEFrames(name)
	if err != nil {
		t.Fatal(err)
	}
	return frames
}

// TestPingpongNoGIDOneHost: the README's two terminals on one host without -g
// (pingpong -d A; pingpong -d B A). The client sends no GID, so the server
// answers the address its TCP connection came from: the client connects from
// its own device's address B, not from the route's 127.0.0.1, and both sides
// finish (before, the server's ACKs went to 127.0.0.1 and the client failed
// with "transport retry counter exceeded").
func TestPingpongNoGIDOneHost(t *testing.T) {
	for _, mode := range []string{"rc", "uc", "ud"} {
		t.Run(mode, func(t *testing.T) {
			net := loopbackNet()
			srvIP, cliIP := net+"1", net+"2"
			port := strconv.Itoa(tcploop.FreePort(t))
			common := []string{mode, "-n", "20", "-s", "1024", "-p", port, "--timeout", "30s"}
			var srvOut, srvErr syncbuf.Buffer
			srvDone := make(chan int, 1)
			go func() { srvDone <- pingpongCmd(append(common, "-d", srvIP), &srvOut, &srvErr) }()
			deadline := time.Now().Add(10 * time.Second)
			for !strings.Contains(srvOut.String(), "local address") && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			var cliOut, cliErr bytes.Buffer
			code := pingpongCmd(append(common, "-d", cliIP, srvIP), &cliOut, &cliErr)
			srvCode := <-srvDone
			if code != 0 || srvCode != 0 {
				t.Fatalf("client exit %d:\n%s%s\nserver exit %d:\n%s%s", code, cliOut.String(), cliErr.String(), srvCode, srvOut.String(), srvErr.String())
			}
			for name, out := range map[string]string{"client": cliOut.String(), "server": srvOut.String()} {
				if m := ppItersRE.FindStringSubmatch(out); m == nil || m[1] != "20" {
					t.Errorf("%s: no result of 20 iterations:\n%s", name, out)
				}
			}
		})
	}
}
