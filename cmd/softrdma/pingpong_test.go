package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/cmd/softrdma/decode"
)

// freeTCPPort returns a TCP port that was free a moment ago.
func freeTCPPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// safeBuffer is a bytes.Buffer for one writer goroutine and a polling reader.
type safeBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

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
			port := strconv.Itoa(freeTCPPort(t))
			dir := t.TempDir()
			common := append([]string{tc.mode, "-g", "1", "-n", "20", "-c", "-p", port, "--timeout", "60s"}, tc.extra...)
			var srvOut, srvErr safeBuffer
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
	port := strconv.Itoa(freeTCPPort(t))
	common := []string{"ud", "-g", "1", "-n", "5", "-s", "64", "-p", port, "--timeout", "30s", "--json"}
	var srvOut, srvErr safeBuffer
	srvDone := make(chan int, 1)
	go func() { srvDone <- pingpongCmd(append(common, "-d", "127.0.78.101"), &srvOut, &srvErr) }()
	var cliOut, cliErr bytes.Buffer
	code := pingpongCmd(append(common, "-d", "127.0.78.102", "--wait", "10s", "127.0.78.101"), &cliOut, &cliErr)
	if srvCode := <-srvDone; code != 0 || srvCode != 0 {
		t.Fatalf("exit %d/%d: %s %s", code, srvCode, cliErr.String(), srvErr.String())
	}
	var cli, srv pingpongResult
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
}

// TestPingpongFlags checks the refusals: bad flags exit like the tools (1),
// iWARP says "not yet" (2).
func TestPingpongFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--transport", "iwarp"}, 2, "not yet"},
		{[]string{"-m", "1000"}, 1, ""},
		{[]string{"-i", "2"}, 1, "port 1 only"},
		{[]string{"a", "b"}, 1, ""},
		{[]string{"--backend", "carrier-pigeon", "-d", "127.0.0.1", "-p", "1"}, 1, "want udp"},
		{[]string{"-d", "no-such-interface0", "-p", "1"}, 1, "not found"},
		{[]string{"ud", "-s", "5000", "-d", "127.0.0.1", "-g", "1", "-p", "1"}, 1, "larger than port MTU"},
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

func TestPPCFloat(t *testing.T) {
	zero := 0.0
	for v, want := range map[float64]string{1.005: "1.00", 8192000 * 8.0 / 12345: "5308.71", 1 / zero: "inf", -1 / zero: "-inf"} {
		if got := ppCFloat(v); got != want {
			t.Errorf("ppCFloat(%v) = %q, want %q", v, got, want)
		}
	}
	if got := ppCFloat(zero / zero); got != "-nan" {
		t.Errorf("NaN: %q", got)
	}
}
