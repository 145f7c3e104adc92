// Package conformctl_test tests conform-ctl (capi/conformctl, make conform-ctl):
// the conformance control protocol (conform/CONTROL.md) served in C over
// libibverbs for any verbs device. Here the device is softrdma's own library
// (lib/, on loopback, no root); test/interop runs it against the kernel's rxe.
package conformctl_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/softrdma/softrdma/internal/syncbuf"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/softrdma/softrdma/conform"
	"github.com/softrdma/softrdma/conform/cli"
	"github.com/softrdma/softrdma/roce"
)

// built is conform-ctl and lib/ built once for the package's tests: dir holds
// conform-ctl and libibverbs.so.1 (softrdma's), asan a conform-ctl built with
// AddressSanitizer and UBSan (empty if the compiler cannot).
var built struct {
	once      sync.Once
	dir, asan string
	skip      string
	err       error
	out       []byte
}

// TestMain removes what build made: a directory of about 15 MB under the
// system's temporary directory, which every run of this package left behind.
func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

func build(t *testing.T) (dir, asan string) {
	t.Helper()
	built.once.Do(func() {
		if _, err := exec.LookPath("gcc"); err != nil {
			built.skip = "no gcc (make lib installs it)"
			return
		}
		for _, h := range []string{"/usr/include/infiniband/verbs.h", "/usr/include/rdma/rdma_cma.h"} {
			if _, err := os.Stat(h); err != nil {
				built.skip = "no rdma-core header " + h + " (libibverbs-dev, librdmacm-dev; make lib installs them)"
				return
			}
		}
		root, err := filepath.Abs("../..")
		if err != nil {
			built.err = err
			return
		}
		if built.dir, built.err = os.MkdirTemp("", "softrdma-ctl"); built.err != nil {
			return
		}
		cmd := exec.Command("make", "-s", "-C", root, "lib-build", "conform-ctl-build", "LIBDIR="+built.dir, "CTLDIR="+built.dir)
		if built.out, built.err = cmd.CombinedOutput(); built.err != nil {
			return
		}
		asan := filepath.Join(built.dir, "asan")
		cmd = exec.Command("make", "-s", "-C", root, "conform-ctl-build", "CTLDIR="+asan,
			"CTLCFLAGS=-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer")
		if out, err := cmd.CombinedOutput(); err == nil {
			built.asan = asan
		} else {
			built.out = out
		}
	})
	if built.skip != "" {
		t.Skip(built.skip)
	}
	if built.err != nil {
		t.Fatalf("make lib-build conform-ctl-build: %v\n%s", built.err, built.out)
	}
	return built.dir, built.asan
}

// ctlLineRE is conform-ctl's line saying where it listens.
var ctlLineRE = regexp.MustCompile(`control protocol \S+ on (\S+) for`)

// ctl is a running conform-ctl.
type ctl struct {
	addr   string
	cmd    *exec.Cmd
	stderr *bytes.Buffer
	mu     *sync.Mutex
	wrote  chan struct{} // a token after each write to stderr
}

// startCtl runs bin on softrdma's library with one RoCE device at devAddr,
// listening on devAddr, port chosen by the system. It is killed at the end of
// the test.
func startCtl(t *testing.T, bin, lib, devAddr string, args ...string) *ctl {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--listen", devAddr + ":0"}, args...)...)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib, "SOFTRDMA_DEVICES=roce:"+devAddr, "SOFTRDMA_DEBUG=",
		"ASAN_OPTIONS=detect_leaks=0")
	return startCmd(t, cmd)
}

// startCmd starts a conform-ctl command and waits for its line saying where
// it listens; it is killed at the end of the test.
func startCmd(t *testing.T, cmd *exec.Cmd) *ctl {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &ctl{cmd: cmd, stderr: &bytes.Buffer{}, mu: &sync.Mutex{}, wrote: make(chan struct{}, 1)}
	cmd.Stderr = lockedWriter{c.mu, c.stderr, c.wrote}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line := make(chan string, 1)
	go func() {
		r := bufio.NewReader(stdout)
		l, _ := r.ReadString('\n')
		line <- l
		io.Copy(io.Discard, r)
	}()
	select {
	case l := <-line:
		m := ctlLineRE.FindStringSubmatch(l)
		if m == nil {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("conform-ctl did not start: %q\n%s", l, c.errText())
		}
		c.addr = m[1]
	case <-time.After(30 * time.Second):
		t.Fatalf("conform-ctl said nothing in 30s\n%s", c.errText())
	}
	return c
}

func (c *ctl) errText() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stderr.String()
}

// waitErr waits until conform-ctl's stderr, as copied so far, contains sub,
// for at most d; it reports whether it does. What the program wrote before an
// event the test sees (a socket closed) is in the pipe then, but exec's
// goroutine copies it into the buffer when it next runs: reading the buffer
// at once can miss it.
func (c *ctl) waitErr(sub string, d time.Duration) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for !strings.Contains(c.errText(), sub) {
		select {
		case <-c.wrote:
		case <-deadline.C:
			return strings.Contains(c.errText(), sub)
		}
	}
	return true
}

// alive reports whether the process still runs.
func (c *ctl) alive() bool {
	return c.cmd.Process.Signal(syscall.Signal(0)) == nil
}

type lockedWriter struct {
	mu    *sync.Mutex
	w     io.Writer
	wrote chan struct{} // if not nil, a token is left here after each write
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, err := l.w.Write(p)
	if l.wrote != nil {
		select {
		case l.wrote <- struct{}{}:
		default:
		}
	}
	return n, err
}

// runTester runs softrdma conform --peer against the control server at addr
// (the peer's RoCE address peerIP) from local, and returns its report.
func runTester(t *testing.T, transport, addr, peerIP, local string) *conform.Report {
	t.Helper()
	var out, errOut bytes.Buffer
	code := cli.Run(cli.Options{Transport: transport, Peer: addr, PeerIP: peerIP, Local: local, PeerKind: "control",
		JSON: true, UDPPort: roce.UDPPort, Timeout: 2 * time.Second}, &out, &errOut)
	var rep conform.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("tester exit %d, report: %v\n%s%s", code, err, out.String(), errOut.String())
	}
	return &rep
}

// TestCtlLoopback runs the RoCE and iWARP catalogues against conform-ctl over
// softrdma's library (lib/, one device on loopback) and against softrdma's own
// Go control side (conform serve) on the same kind of device: every case, all
// of which need the control side (without one every case is not applicable),
// runs and passes against both, with the same verdicts.
func TestCtlLoopback(t *testing.T) {
	dir, _ := build(t)
	for _, tc := range []struct {
		transport, spec string
		n               int
	}{
		{"roce", "roce", len(conform.RoCECases(nil))},
		{"iwarp", "iwarp", len(conform.IWARPCases(nil))},
	} {
		t.Run(tc.transport, func(t *testing.T) {
			ip := map[string]string{"roce": "127.0.86.", "iwarp": "127.0.87."}[tc.transport]
			cmd := exec.Command(filepath.Join(dir, "conform-ctl"), "--listen", ip+"3:0")
			cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+dir, "SOFTRDMA_DEVICES="+tc.spec+":"+ip+"3", "SOFTRDMA_DEBUG=")
			c := startCmd(t, cmd)
			cRep := runTester(t, tc.transport, c.addr, ip+"3", ip+"4")

			ctx, cancel := context.WithCancel(context.Background())
			var srvOut, srvErr syncBuffer
			done := make(chan int, 1)
			go func() {
				done <- cli.Serve(ctx, cli.ServeOptions{Listen: ip + "5:0", Transport: tc.transport, Backend: "udp",
					Addr: ip + "5", UDPPort: roce.UDPPort}, &srvOut, &srvErr)
			}()
			defer func() {
				cancel()
				<-done
			}()
			var goAddr string
			for deadline := time.Now().Add(10 * time.Second); goAddr == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				if m := ctlLineRE.FindStringSubmatch(srvOut.String()); m != nil {
					goAddr = m[1]
				}
			}
			if goAddr == "" {
				t.Fatalf("conform serve did not start:\n%s%s", srvOut.String(), srvErr.String())
			}
			goRep := runTester(t, tc.transport, goAddr, ip+"5", ip+"6")

			// Without a control side the same cases are not applicable:
			// they are the ones that need it.
			if none := runTester(t, tc.transport, ip+"7:1", ip+"7", ip+"8"); none.NotApplicable != tc.n {
				t.Errorf("without a control server: %d of %d cases not applicable", none.NotApplicable, tc.n)
			}

			for _, r := range []struct {
				name string
				rep  *conform.Report
			}{{"conform-ctl", cRep}, {"conform serve", goRep}} {
				if len(r.rep.Cases) != tc.n || r.rep.Passed != tc.n {
					t.Errorf("%s (%s): %d cases, %d passed, %d failed, %d not applicable; want all %d passed", r.name, r.rep.Peer,
						len(r.rep.Cases), r.rep.Passed, r.rep.Failed, r.rep.NotApplicable, tc.n)
				}
				for _, cs := range r.rep.Cases {
					if cs.Result != conform.Pass {
						t.Errorf("%s: %s: %s: %s", r.name, cs.ID, cs.Result, cs.Reason)
					}
				}
			}
			goVerdict := map[string]conform.Result{}
			for _, cs := range goRep.Cases {
				goVerdict[cs.ID] = cs.Result
			}
			for _, cs := range cRep.Cases {
				if goVerdict[cs.ID] != cs.Result {
					t.Errorf("%s: %s against conform-ctl, %s against conform serve", cs.ID, cs.Result, goVerdict[cs.ID])
				}
			}
			if !strings.HasPrefix(cRep.Peer, "conform-ctl") {
				t.Errorf("peer %q: want conform-ctl's hello", cRep.Peer)
			}
			if !c.alive() {
				t.Errorf("conform-ctl exited:\n%s", c.errText())
			}
		})
	}
}

// syncBuffer is a buffer the test reads while the command writes it.
type syncBuffer = syncbuf.Buffer

// session is a raw connection to conform-ctl.
type session struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

func dial(t *testing.T, addr string) *session {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &session{t: t, conn: conn, r: bufio.NewReaderSize(conn, 1<<16)}
}

// answer is one answer line, decoded.
type answer struct {
	ID     *uint64         `json:"id"`
	OK     *bool           `json:"ok"`
	Result json.RawMessage `json:"result"`
	Error  string          `json:"error"`
}

// do sends line (a newline is added) and reads the one answer it must get,
// which must be a JSON object with an id and ok, and an error when not ok.
func (s *session) do(line []byte) answer {
	s.t.Helper()
	s.conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := s.conn.Write(append(append([]byte(nil), line...), '\n')); err != nil {
		s.t.Fatalf("sending %.200q: %v", line, err)
	}
	got, err := s.r.ReadBytes('\n')
	if err != nil {
		s.t.Fatalf("no answer to %.200q: %v", line, err)
	}
	var a answer
	dec := json.NewDecoder(bytes.NewReader(got))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil || a.ID == nil || a.OK == nil || (!*a.OK && a.Error == "") {
		s.t.Fatalf("answer %q to %.200q: not a protocol answer (%v)", got, line, err)
	}
	return a
}

// regMR registers a region of 4 KiB and returns its handle.
func (s *session) regMR() int {
	s.t.Helper()
	a := s.do([]byte(`{"id":1,"op":"reg_mr","args":{"length":4096}}`))
	var m struct{ MR int }
	if !*a.OK || json.Unmarshal(a.Result, &m) != nil || m.MR == 0 {
		s.t.Fatalf("reg_mr: %+v", a)
	}
	return m.MR
}

// TestCtlHostile feeds conform-ctl (built with AddressSanitizer and UBSan where
// the compiler can) malformed control messages on its control socket: broken
// JSON, wrong types, out-of-range numbers and handles, bad base64, deep
// nesting, random bytes and thousands of mutations of valid requests. Every
// line gets exactly one well-formed answer (an error where the line is bad), a
// line over the protocol's 4 MiB bound closes that session only, and the
// program neither crashes nor reports a memory error.
func TestCtlHostile(t *testing.T) {
	dir, asan := build(t)
	bin := filepath.Join(dir, "conform-ctl")
	if asan != "" {
		bin = filepath.Join(asan, "conform-ctl")
	} else {
		t.Logf("no sanitizer build (%s): the plain build is fed", strings.TrimSpace(string(built.out)))
	}
	c := startCtl(t, bin, dir, "127.0.86.9", "--max-session-memory", "33554432")
	s := dial(t, c.addr)

	valid := []string{
		`{"id":1,"op":"hello"}`,
		`{"id":2,"op":"create_qp","args":{"type":"rc","remote_ip":"127.0.86.10","remote_qpn":4660,"rq_psn":100,"sq_psn":200,"access":["remote_write","remote_read","remote_atomic"],"min_rnr_timer":14,"timeout":14,"retry_cnt":7,"rnr_retry":7,"max_rd_atomic":4,"max_dest_rd_atomic":4}}`,
		`{"id":3,"op":"create_qp","args":{"type":"ud","qkey":291,"sq_psn":5}}`,
		`{"id":4,"op":"reg_mr","args":{"length":4096,"access":["remote_write"],"fill":170}}`,
		`{"id":5,"op":"write_mr","args":{"mr":1,"offset":8,"data":"AAECAwQFBgc="}}`,
		`{"id":6,"op":"read_mr","args":{"mr":1,"offset":4,"length":16}}`,
		`{"id":7,"op":"post_recv","args":{"qpn":1,"mr":1,"offset":0,"length":64,"count":4,"wr_id":9}}`,
		`{"id":8,"op":"post_send","args":{"qpn":1,"opcode":"write_imm","mr":1,"offset":0,"length":8,"remote_va":4096,"rkey":1,"imm":7,"wr_id":1}}`,
		`{"id":9,"op":"post_send","args":{"qpn":1,"opcode":"send","mr":1,"length":8,"remote_ip":"127.0.86.10","remote_qpn":1,"remote_qkey":291}}`,
		`{"id":10,"op":"poll_cq","args":{"qpn":1,"recv":true,"max":8}}`,
		`{"id":11,"op":"query_qp","args":{"qpn":1}}`,
		`{"id":12,"op":"destroy_qp","args":{"qpn":1}}`,
		`{"id":13,"op":"reset"}`,
	}
	for _, l := range valid {
		s.do([]byte(l))
	}
	if a := s.do([]byte(valid[0])); !*a.OK || !bytes.Contains(a.Result, []byte(conform.ControlProtocol)) {
		t.Fatalf("hello: %+v", a)
	}

	bad := []struct {
		line string
		want string // in the error
	}{
		{``, "bad request"},
		{`garbage`, "bad request"},
		{`{`, "bad request"},
		{`[1,2`, "bad request"},
		{`{"id":`, "bad request"},
		{`"\u12"`, "bad request"},
		{"\"\x00\x01\xff\"", "bad request"},
		{`[1]`, "bad request"},
		{`{"id":-1,"op":"hello"}`, "id"},
		{`{"id":1e999,"op":"hello"}`, "id"},
		{`{"id":18446744073709551616,"op":"hello"}`, "id"},
		{`{"id":1,"op":7}`, "op"},
		{`{"id":1,"op":"format_disk"}`, "unsupported operation"},
		{`{"id":1,"op":"reg_mr","args":{"length":16777217}}`, "length"},
		{`{"id":1,"op":"reg_mr","args":{"length":0}}`, "length"},
		{`{"id":1,"op":"reg_mr","args":{"length":-5}}`, "length"},
		{`{"id":1,"op":"reg_mr","args":{"length":16,"fill":256}}`, "fill"},
		{`{"id":1,"op":"reg_mr","args":{"length":16,"access":"remote_write"}}`, "access"},
		{`{"id":1,"op":"reg_mr","args":{"length":16,"access":[1]}}`, "access"},
		{`{"id":1,"op":"reg_mr","args":{"length":16,"access":["format"]}}`, "access right"},
		{`{"id":1,"op":"reg_mr","args":[16]}`, "bad arguments"},
		{`{"id":1,"op":"reg_mr","args":"x"}`, "bad arguments"},
		{`{"id":1,"op":"reg_mr","args":{"length":16,"lenght":16}}`, "unknown field"},
		{`{"id":1,"op":"read_mr","args":{"mr":99,"offset":0,"length":1}}`, "no region 99"},
		{`{"id":1,"op":"read_mr","args":{"mr":1,"offset":18446744073709551615,"length":2}}`, "outside region"},
		{`{"id":1,"op":"write_mr","args":{"mr":1,"data":"%%%%"}}`, "base64"},
		{`{"id":1,"op":"write_mr","args":{"mr":1,"data":"===="}}`, "base64"},
		{`{"id":1,"op":"post_recv","args":{"qpn":7,"mr":1,"count":9223372036854775807,"length":4294967295}}`, "no QP"},
		{`{"id":1,"op":"post_send","args":{"qpn":7,"opcode":"teleport"}}`, "no QP"},
		{`{"id":1,"op":"poll_cq","args":{"qpn":7,"recv":"yes"}}`, "recv"},
		{`{"id":1,"op":"query_qp","args":{"qpn":7}}`, "no QP 0x7"},
		{`{"id":1,"op":"destroy_qp","args":{"qpn":4294967296}}`, "qpn"},
		{`{"id":1,"op":"create_qp","args":{"type":"xx"}}`, "type"},
		{`{"id":1,"op":"create_qp","args":{"type":"rc","remote_ip":"999.1.1.1"}}`, "remote_ip"},
		{`{"id":1,"op":"create_qp","args":{"type":"rc","remote_ip":"127.0.86.10","path_mtu":3000}}`, "path_mtu"},
		{`{"id":1,"op":"create_qp","args":{"type":"rc","remote_ip":"127.0.86.10","max_send_wr":1000000}}`, "queue depths"},
		{`{"id":1,"op":"create_qp","args":{"type":"rc","remote_ip":"127.0.86.10","retry_cnt":8}}`, "retry_cnt"},
		{`{"id":1,"op":"create_qp","args":{"type":"rc","remote_qpn":16777216}}`, "remote_qpn"},
		{strings.Repeat("[", 100000) + strings.Repeat("]", 100000), "nested"},
		{`{"a":` + strings.Repeat(`{"a":`, 5000), "bad request"},
		{"{\"id\":1,\"op\":\"hello\",\"op\":\"nope\"}", "unsupported operation"},
	}
	// A region for the cases that need one to get past the handle checks.
	mr := s.regMR()
	for _, b := range bad {
		a := s.do([]byte(strings.ReplaceAll(b.line, `"mr":1,`, fmt.Sprintf(`"mr":%d,`, mr))))
		if *a.OK || !strings.Contains(a.Error, b.want) {
			t.Errorf("%.80q: ok %v, error %q; want an error about %q", b.line, *a.OK, a.Error, b.want)
		}
	}
	s.do([]byte(`{"id":1,"op":"reset"}`))
	// The range checks on a real region and QP.
	qp := s.do([]byte(valid[1]))
	var q struct{ QPN uint32 }
	if !*qp.OK || json.Unmarshal(qp.Result, &q) != nil {
		t.Fatalf("create_qp: %+v", qp)
	}
	mr = s.regMR()
	for _, l := range []string{
		`{"id":1,"op":"read_mr","args":{"mr":%d,"offset":4095,"length":2}}`,
		`{"id":1,"op":"read_mr","args":{"mr":%d,"offset":18446744073709551615,"length":2}}`,
		`{"id":1,"op":"write_mr","args":{"mr":%d,"offset":4090,"data":"AAECAwQFBgc="}}`,
		`{"id":1,"op":"post_recv","args":{"qpn":QPN,"mr":%d,"count":4097,"length":1}}`,
		`{"id":1,"op":"post_recv","args":{"qpn":QPN,"mr":%d,"count":4096,"length":16777216}}`,
		`{"id":1,"op":"post_recv","args":{"qpn":QPN,"mr":%d,"offset":18446744073709551615,"length":1}}`,
		`{"id":1,"op":"post_send","args":{"qpn":QPN,"opcode":"send","mr":%d,"offset":4000,"length":97}}`,
		`{"id":1,"op":"post_send","args":{"qpn":QPN,"opcode":"teleport","mr":%d}}`,
		`{"id":1,"op":"reg_mr","args":{"length":16777216}}{"x":%d}`,
	} {
		line := strings.ReplaceAll(fmt.Sprintf(l, mr), "QPN", fmt.Sprint(q.QPN))
		if a := s.do([]byte(line)); *a.OK {
			t.Errorf("%s: accepted", line)
		}
	}
	// The session memory limit (--max-session-memory 32 MiB here).
	s.do([]byte(`{"id":1,"op":"reset"}`))
	for k := 0; k < 2; k++ {
		if a := s.do([]byte(`{"id":1,"op":"reg_mr","args":{"length":16777216}}`)); !*a.OK {
			t.Fatalf("reg_mr %d of 16 MiB under a 32 MiB limit: %s", k, a.Error)
		}
	}
	if a := s.do([]byte(`{"id":1,"op":"reg_mr","args":{"length":1}}`)); *a.OK || !strings.Contains(a.Error, "session memory limit") {
		t.Errorf("reg_mr past the session memory limit: %+v", a)
	}
	s.do([]byte(`{"id":1,"op":"reset"}`))

	feedMutations(s, valid, 3000)

	// A line over 4 MiB ends its session (as the Go side), not the server.
	long := bytes.Repeat([]byte("x"), 4<<20+100)
	s.conn.SetDeadline(time.Now().Add(20 * time.Second))
	s.conn.Write(long)
	if _, err := s.r.ReadBytes('\n'); err == nil {
		t.Errorf("a line over 4 MiB was answered")
	}
	s2 := dial(t, c.addr)
	if a := s2.do([]byte(valid[0])); !*a.OK {
		t.Errorf("hello after the long line: %+v", a)
	}
	if !c.alive() {
		t.Fatalf("conform-ctl exited:\n%s", c.errText())
	}
	if e := c.errText(); strings.Contains(e, "Sanitizer") || strings.Contains(e, "runtime error") {
		t.Errorf("conform-ctl reported:\n%s", e)
	}
}

// feedMutations sends n lines: random bytes, and lines of valid with bytes
// changed, dropped or repeated (a fixed seed: the same lines every run), each
// of which must be answered; every 100 lines a reset frees what they created.
func feedMutations(s *session, valid []string, n int) {
	s.t.Helper()
	rng := rand.New(rand.NewPCG(23, 7471))
	for k := 0; k < n; k++ {
		var line []byte
		if k%3 == 0 {
			line = make([]byte, rng.IntN(200))
			for i := range line {
				line[i] = byte(rng.IntN(256))
			}
		} else {
			line = []byte(valid[rng.IntN(len(valid))])
			for m := 1 + rng.IntN(4); m > 0; m-- {
				i := rng.IntN(len(line))
				switch rng.IntN(4) {
				case 0:
					line[i] = byte(rng.IntN(256))
				case 1:
					line = append(line[:i:i], line[i+1:]...)
				case 2:
					line = append(line[:i:i], append([]byte{line[i]}, line[i:]...)...)
				case 3:
					const chars = `{}[]":,0123456789-.e"\u`
					line[i] = chars[rng.IntN(len(chars))]
				}
			}
		}
		line = bytes.ReplaceAll(line, []byte("\n"), nil)
		s.do(line)
		if k%100 == 99 {
			s.do([]byte(`{"id":1,"op":"reset"}`))
		}
	}
}

// TestCtlHostileIWARP is TestCtlHostile for conform-ctl on an iWARP device
// (softrdma's): create_qp's iWARP checks, mutated requests, and connections to
// a QP's listener that send random bytes or a valid MPA Request (accepted onto
// the QP: a second one to the same QP is rejected), then vanish. The program
// answers every line, keeps serving, and reports no memory error.
func TestCtlHostileIWARP(t *testing.T) {
	dir, asan := build(t)
	bin := filepath.Join(dir, "conform-ctl")
	if asan != "" {
		bin = filepath.Join(asan, "conform-ctl")
	}
	cmd := exec.Command(bin, "--listen", "127.0.86.12:0")
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+dir, "SOFTRDMA_DEVICES=iwarp:127.0.86.12", "SOFTRDMA_DEBUG=",
		"ASAN_OPTIONS=detect_leaks=0")
	c := startCmd(t, cmd)
	s := dial(t, c.addr)
	if a := s.do([]byte(`{"id":1,"op":"hello"}`)); !*a.OK || !bytes.Contains(a.Result, []byte(`"transport":"iwarp"`)) ||
		!bytes.Contains(a.Result, []byte(`"addrs":["127.0.86.12"]`)) {
		t.Fatalf("hello: %+v %s", a, a.Result)
	}
	for _, b := range []struct{ line, want string }{
		{`{"id":1,"op":"create_qp","args":{"type":"ud"}}`, "RC QPs only"},
		{`{"id":1,"op":"create_qp","args":{"type":"rc","mpa_crc":"require"}}`, "mpa_crc"},
		{`{"id":1,"op":"create_qp","args":{"type":"rc","mpa_crc":7}}`, "mpa_crc"},
	} {
		if a := s.do([]byte(b.line)); *a.OK || !strings.Contains(a.Error, b.want) {
			t.Errorf("%s: ok %v, error %q; want an error about %q", b.line, *a.OK, a.Error, b.want)
		}
	}
	create := `{"id":2,"op":"create_qp","args":{"type":"rc","access":["remote_write","remote_read"],"max_rd_atomic":4,"max_dest_rd_atomic":4,"max_recv_wr":8}}`
	rng := rand.New(rand.NewPCG(5040, 5044))
	for k := 0; k < 20; k++ {
		a := s.do([]byte(create))
		var q struct {
			QPN        uint32 `json:"qpn"`
			ListenAddr string `json:"listen_addr"`
		}
		if !*a.OK || json.Unmarshal(a.Result, &q) != nil || !strings.HasPrefix(q.ListenAddr, "127.0.86.12:") {
			t.Fatalf("create_qp: %+v %s", a, a.Result)
		}
		conn, err := net.Dial("tcp", q.ListenAddr)
		if err != nil {
			t.Fatalf("connecting to %s: %v", q.ListenAddr, err)
		}
		var junk []byte
		if k%2 == 0 {
			// A valid MPA Request, revision 2, IRD/ORD words, CRC asked for.
			junk = append([]byte("MPA ID Req Frame"), 0x50, 2, 0, 4, 0x80, 4, 0x80, 4)
		} else {
			junk = make([]byte, 1+rng.IntN(300))
			for i := range junk {
				junk[i] = byte(rng.IntN(256))
			}
		}
		conn.Write(junk)
		if k%4 == 0 {
			conn.SetReadDeadline(time.Now().Add(2 * time.Second))
			conn.Read(make([]byte, 64))
			// A second request to the same QP: rejected.
			if c2, err := net.Dial("tcp", q.ListenAddr); err == nil {
				c2.Write(junk)
				c2.SetReadDeadline(time.Now().Add(2 * time.Second))
				rep := make([]byte, 20)
				if n, _ := io.ReadFull(c2, rep); n == 20 && rep[16]&0x20 == 0 {
					t.Errorf("a second connection to QP 0x%x was accepted: %x", q.QPN, rep)
				}
				c2.Close()
			}
		}
		conn.Close()
		if a := s.do([]byte(fmt.Sprintf(`{"id":3,"op":"query_qp","args":{"qpn":%d}}`, q.QPN))); !*a.OK {
			t.Errorf("query_qp: %+v", a)
		}
		if k%5 == 4 {
			s.do([]byte(`{"id":4,"op":"reset"}`))
		}
	}
	feedMutations(s, []string{create, `{"id":5,"op":"reg_mr","args":{"length":64}}`, `{"id":6,"op":"poll_cq","args":{"qpn":1}}`,
		`{"id":7,"op":"query_qp","args":{"qpn":1}}`}, 600)
	s.conn.Close() // one session at a time: the next is served once this one ends
	if a := dial(t, c.addr).do([]byte(`{"id":1,"op":"hello"}`)); !*a.OK {
		t.Errorf("hello on a new session: %+v", a)
	}
	if !c.alive() {
		t.Fatalf("conform-ctl exited:\n%s", c.errText())
	}
	if e := c.errText(); strings.Contains(e, "Sanitizer") || strings.Contains(e, "runtime error") {
		t.Errorf("conform-ctl reported:\n%s", e)
	}
}

// TestCtlIdleSession: conform-ctl serves one session at a time, so a client
// that connects and says nothing must not hold it: after --idle-timeout its
// session is closed and the next client, waiting meanwhile, is served.
func TestCtlIdleSession(t *testing.T) {
	dir, _ := build(t)
	c := startCtl(t, filepath.Join(dir, "conform-ctl"), dir, "127.0.86.13", "--idle-timeout", "1")
	silent := dial(t, c.addr)
	next := dial(t, c.addr)
	if a := next.do([]byte(`{"id":1,"op":"hello"}`)); !*a.OK {
		t.Fatalf("hello behind a silent session: %+v", a)
	}
	silent.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := silent.r.ReadByte(); err != io.EOF {
		t.Errorf("the silent session: %v, want closed (EOF)", err)
	}
	if !c.waitErr("idle", 30*time.Second) {
		t.Errorf("conform-ctl did not say why it closed the session:\n%s", c.errText())
	}
}
