package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/softrdma/softrdma/decode"
	"github.com/softrdma/softrdma/internal/rpingtext"
	"github.com/softrdma/softrdma/internal/tcploop"
	"github.com/softrdma/softrdma/iwarp"
	"github.com/softrdma/softrdma/pcaptap"
	"github.com/softrdma/softrdma/rping"
)

// TestRpingPersistentSelfQPSource runs, over each transport, softrdma rping
// -s -P -q and, at once against it, Debian's own rping as a client twice
// (plain and -q) over softrdma's libraries (built here with make lib) and
// softrdma rping -c -q -I SRC: every client prints its pings and exits 0; the
// persistent server serves them side by side, prints each one's pings and
// disconnect, and ends with no error when stopped. The -I client's capture
// comes from SRC only. Then the roles swap: Debian's rping -s -q on the
// libraries serves softrdma rping -c -q. Over iWARP rdma_cm moves a -q QP to
// RTS at the MPA exchange; rping's own modifies are siw's no-ops (the server's
// before rdma_accept, the client's after ESTABLISHED) and its rdma_establish
// does nothing; -q was refused there. It skips without gcc, rdma-core's
// headers or rdmacm-utils' rping.
func TestRpingPersistentSelfQPSource(t *testing.T) {
	for _, tool := range []string{"make", "gcc", "rping"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (scripts/deps.sh installs gcc and libibverbs-dev; apt-get install rdmacm-utils)", tool)
		}
	}
	if _, err := os.Stat("/usr/include/infiniband/verbs.h"); err != nil {
		t.Skip("needs rdma-core's headers, libibverbs-dev")
	}
	lib := t.TempDir()
	if out, err := exec.Command("make", "-s", "-C", filepath.Join("..", ".."), "lib", "LIBDIR="+lib).CombinedOutput(); err != nil {
		t.Fatalf("make lib: %v\n%s", err, out)
	}
	for i, tr := range []string{"roce", "iwarp"} {
		t.Run(tr, func(t *testing.T) {
			net3 := fmt.Sprintf("127.%d.%d.", 1+os.Getpid()%250, 83+2*i)
			port := 20000 + os.Getpid()%20000
			if tr == "iwarp" {
				port = tcploop.FreePort(t)
			}
			rpingPersistentSelfQP(t, lib, tr, net3, port)
			rpingDebianSelfQPServer(t, lib, tr, net3, tcploop.FreePort(t))
		})
	}
}

// rpingNotYet are what a client of a server not yet listening says: iWARP's
// TCP connection refused, RoCE's REJ (Debian's rping and softrdma's).
var rpingNotYet = []string{"REJECTED", "reject", "refused"}

// rpingDebian runs Debian's rping with args on the libraries in lib, its
// device tr on addr, and returns its output.
func rpingDebian(lib, tr, addr string, args ...string) (string, error) {
	cmd := exec.Command("rping", args...)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib, "SOFTRDMA_DEVICES="+tr+":"+addr)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// rpingPersistentSelfQP is TestRpingPersistentSelfQPSource's softrdma rping
// -s -P -q over tr on net3.1 and its three clients.
func rpingPersistentSelfQP(t *testing.T, lib, tr, net3 string, port int) {
	srvAddr := net3 + "1"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sOut, sErr bytes.Buffer
	done := make(chan error, 1)
	go func() {
		o := rping.Options{Server: true, Persistent: true, SelfQP: true, Transport: tr, Addr: srvAddr, Port: port,
			Size: 64, Verbose: true}
		done <- rping.Run(ctx, o, iwarp.CRCAccept, &sOut, &sErr)
	}()

	debian := func(dev string, extra ...string) func(count, size int) (string, error) {
		return func(count, size int) (string, error) {
			args := append(append([]string{"-c"}, extra...), "-a", srvAddr, "-p", strconv.Itoa(port), "-C", strconv.Itoa(count),
				"-S", strconv.Itoa(size), "-v")
			return rpingDebian(lib, tr, dev, args...)
		}
	}
	src := net3 + "4"
	pcap := filepath.Join(t.TempDir(), "client-I.pcap")
	clients := []struct {
		name        string
		count, size int
		run         func(count, size int) (string, error)
	}{
		{"debian rping", 3, 30, debian(net3 + "2")},
		{"debian rping -q", 4, 40, debian(net3+"3", "-q")},
		{"softrdma rping -q -I", 2, 64, func(count, size int) (string, error) {
			var out, errOut bytes.Buffer
			code := rpingCmd([]string{"--transport", tr, "-c", "-q", "-I", src, "-a", srvAddr, "-p", strconv.Itoa(port),
				"-C", strconv.Itoa(count), "-S", strconv.Itoa(size), "-v", "--pcap", pcap, "--timeout", "30s"}, &out, &errOut)
			if code != 0 {
				return out.String() + errOut.String(), fmt.Errorf("exit %d", code)
			}
			return out.String(), nil
		}},
	}
	var wg sync.WaitGroup
	outs := make([]string, len(clients))
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The server may not listen yet: a REJ, or iWARP's refused TCP
			// connection; retry a few times.
			for try := 0; ; try++ {
				out, err := c.run(c.count, c.size)
				if err == nil || try == 50 || !containsAny(out, rpingNotYet) {
					if err != nil {
						t.Errorf("%s: %v\n%s", c.name, err, out)
					}
					outs[i] = out
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("persistent server: %v\n%s%s", err, sOut.String(), sErr.String())
	}
	server := sOut.String() + sErr.String()
	for i, c := range clients {
		for p := range c.count {
			line := rpingtext.Data(p, c.size)
			if !strings.Contains(outs[i], "ping data: "+line+"\n") {
				t.Errorf("%s did not print ping %d:\n%s", c.name, p, outs[i])
			}
			if !strings.Contains(server, "server ping data: "+line+"\n") {
				t.Errorf("the server did not print %s's ping %d:\n%s", c.name, p, server)
			}
		}
	}
	if n := strings.Count(server, "server DISCONNECT EVENT...\n"); n != len(clients) {
		t.Errorf("the server saw %d disconnects, want %d:\n%s", n, len(clients), server)
	}
	if tr == "iwarp" {
		_, out := decodeFile(t, pcap, decode.Options{})
		if !regexp.MustCompile(` ` + regexp.QuoteMeta(src) + `:\d+ → ` + regexp.QuoteMeta(srvAddr) + `:` + strconv.Itoa(port) + ` iWARP MPA Request`).MatchString(out) {
			t.Errorf("-I %s: no MPA Request from it:\n%s", src, out)
		}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if strings.Contains(l, " → ") && !strings.Contains(l, src+":") {
				t.Fatalf("-I %s: a frame of another connection: %s", src, l)
			}
		}
		return
	}
	frames, err := pcaptap.ReadRoCEFrames(pcap)
	if err != nil {
		t.Fatal(err)
	}
	want := netip.MustParseAddr(src)
	sent := 0
	for _, f := range frames {
		s, d := netip.AddrFrom4([4]byte(f.IP[12:16])), netip.AddrFrom4([4]byte(f.IP[16:20]))
		switch {
		case s == want:
			sent++
		case d != want:
			t.Fatalf("-I %s: a frame from %v to %v", src, s, d)
		}
	}
	if sent < 10 {
		t.Errorf("-I %s: %d frames sent from it", src, sent)
	}
}

// rpingDebianSelfQPServer is TestRpingPersistentSelfQPSource's other role:
// Debian's rping -s -q on the libraries, its device tr on net3.5, and
// softrdma rping -c -q (from net3.6) against it; both print every ping and
// exit 0.
func rpingDebianSelfQPServer(t *testing.T, lib, tr, net3 string, port int) {
	const count = 3
	srvAddr, p := net3+"5", strconv.Itoa(port)
	done := make(chan string, 1)
	go func() {
		out, err := rpingDebian(lib, tr, srvAddr, "-s", "-q", "-a", srvAddr, "-p", p, "-v")
		if err != nil {
			out += fmt.Sprintf("(exit: %v)\n", err)
		}
		done <- out
	}()
	code, cOut, cErr := untilListening(50*time.Millisecond, rpingNotYet, func(stdout, stderr io.Writer) int {
		return rpingCmd([]string{"--transport", tr, "-c", "-q", "-I", net3 + "6", "-a", srvAddr, "-p", p, "-C", strconv.Itoa(count),
			"-v", "-V", "--timeout", "30s"}, stdout, stderr)
	})
	var server string
	select {
	case server = <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("Debian's rping -s -q did not end; softrdma rping -c -q exit %d\n%s%s", code, cOut.String(), cErr.String())
	}
	if code != 0 || strings.Contains(server, "(exit: ") {
		t.Fatalf("softrdma rping -c -q exit %d\n%s%s\nDebian's rping -s -q:\n%s", code, cOut.String(), cErr.String(), server)
	}
	for i := range count {
		line := rpingtext.Data(i, 64)
		if !strings.Contains(cOut.String(), "ping data: "+line+"\n") || !strings.Contains(server, "server ping data: "+line+"\n") {
			t.Errorf("ping %d not at both ends\nclient:\n%s\nserver:\n%s", i, cOut.String(), server)
		}
	}
}

// TestRpingPersistentFlags: -P is the server's, -I the client's.
func TestRpingPersistentFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-c", "-P", "-a", "127.0.0.1"}, "-P is the server's"},
		{[]string{"-s", "-I", "127.0.0.1"}, "-I is the client's"},
	} {
		var out, errOut bytes.Buffer
		if code := rpingCmd(c.args, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("rping %v: exit %d, %q; want 2 and %q", c.args, code, errOut.String(), c.want)
		}
	}
}

// TestRpingSourceIWARP: over iWARP, -I is the client's source address: its
// TCP connection, and so the MPA exchange and every FPDU, comes from there.
func TestRpingSourceIWARP(t *testing.T) {
	port := strconv.Itoa(tcploop.FreePort(t))
	src := fmt.Sprintf("127.%d.84.2", 1+os.Getpid()%250)
	pcap := filepath.Join(t.TempDir(), "rping.pcap")
	var sOut, sErr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- rpingCmd([]string{"-s", "-a", "127.0.0.1", "-p", port, "--timeout", "30s"}, &sOut, &sErr)
	}()
	code, cOut, cErr := untilListening(50*time.Millisecond, []string{"refused"}, func(stdout, stderr io.Writer) int {
		return rpingCmd([]string{"-c", "-I", src, "-a", "127.0.0.1", "-p", port, "-C", "2", "-V", "--pcap", pcap, "--timeout", "30s"}, stdout, stderr)
	})
	if code != 0 {
		t.Fatalf("client exit %d\n%s%s", code, cOut.String(), cErr.String())
	}
	if c := <-done; c != 0 {
		t.Fatalf("server exit %d\n%s%s", c, sOut.String(), sErr.String())
	}
	_, out := decodeFile(t, pcap, decode.Options{})
	if !strings.Contains(out, "→ "+src+":") || strings.Count(out, src) < 10 {
		t.Errorf("the connection is not from -I %s:\n%s", src, out)
	}
	if !regexp.MustCompile(` ` + regexp.QuoteMeta(src) + `:\d+ → 127\.0\.0\.1:` + port + ` iWARP MPA Request`).MatchString(out) {
		t.Errorf("no MPA Request from %s:\n%s", src, out)
	}
}
