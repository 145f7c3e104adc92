package interop_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/test/interop"
)

// libPort is the out-of-band TCP port of rdma-core's pingpongs and perftest
// (their default): the guest and the namespace each have their own.
const libPort = 18515

// libDevice is the host side's device on softrdma's libraries: a RoCE device on
// the bridge's address, whose GID index 1 is its IPv4-mapped address, as rxe's.
var libDevice = "roce:" + interop.HostIPv4

// libCase is one exchange of an unmodified Debian tool with itself: one end on
// softrdma's libraries on the host, the other on the kernel's rxe in a guest.
type libCase struct {
	tool      string
	pp        *pingpongCase // a pingpong: its size and mode
	perf      *perfCase     // a perftest tool: its options
	libServer bool          // the libraries' end is the server
	opcode    string        // a message the capture must show (decode's opcode name)
}

func (c libCase) String() string {
	dir := "rxe-server"
	if c.libServer {
		dir = "lib-server"
	}
	if c.perf != nil {
		return fmt.Sprintf("%s/%s/%s", c.tool, dir, strings.Join(c.perf.args(), ""))
	}
	return fmt.Sprintf("%s/%s/s%d", c.tool, dir, c.pp.size)
}

// libIters bounds each exchange: the guest runs under TCG emulation.
const libIters = 5

// TestLibsRXE runs Debian's unmodified ibv_rc_pingpong, ibv_uc_pingpong,
// ibv_ud_pingpong, ibv_srq_pingpong (two QPs on a shared receive queue each
// side), ib_write_bw, ib_read_bw, ib_send_bw, ib_write_lat,
// ib_read_lat, ib_send_lat, ib_atomic_bw and ib_atomic_lat, and over rdma_cm
// (when the libraries have librdmacm.so.1) rping, ib_write_bw, ib_read_bw and
// ib_send_bw -R (as TestLibsSiw runs them), ucmatose (RDMA_PS_TCP and
// RDMA_PS_IB, whose service IDs the capture shows) and udaddy (UD, SIDR), with one end on
// softrdma's libibverbs.so.1 on the host (LD_LIBRARY_PATH, SOFTRDMA_DEVICES,
// in the harness's namespace) and the other on the kernel's rxe in one guest,
// the libraries as client and as server. Both ends must succeed with the
// tools' own output, agree on each other's QPNs, PSNs, keys and GIDs (the
// IPv4-mapped ones, GID index 1 on both); the pingpongs' -c check must pass.
// The capture on the guest's tap, the frames as on the wire between the two
// stacks, must decode with no error in softrdma decode (every ICRC, rxe's and
// the libraries', verified), show the exchange's messages, and hold no frame
// tshark calls malformed, every RoCE frame dissected as InfiniBand; the
// rdma_cm ones also hold the IB CM's REQ, REP and RTU (udaddy's SIDR_REQ
// and SIDR_REP).
func TestLibsRXE(t *testing.T) {
	h := interop.Require(t)
	interop.Libs(t)
	g := h.Boot(t, "libs81", interop.BootOptions{IP: "10.77.0.81", NoIPv6: true, Links: "rxe"})
	var cases []libCase
	for _, server := range []bool{false, true} {
		for _, c := range []libCase{
			{tool: "ibv_rc_pingpong", pp: &pingpongCase{mode: "rc", size: 4096}, opcode: "SEND"},
			{tool: "ibv_uc_pingpong", pp: &pingpongCase{mode: "uc", size: 3000}, opcode: "SEND"},
			{tool: "ibv_ud_pingpong", pp: &pingpongCase{mode: "ud", size: 1024}, opcode: "UD SEND"},
			{tool: "ibv_srq_pingpong", pp: &pingpongCase{mode: "srq", size: 1024}, opcode: "SEND"},
			{tool: "ib_write_bw", perf: &perfCase{tool: "ib_write_bw", size: 65536}, opcode: "RDMA WRITE"},
			{tool: "ib_read_bw", perf: &perfCase{tool: "ib_read_bw", size: 65536}, opcode: "RDMA READ"},
			{tool: "ib_send_bw", perf: &perfCase{tool: "ib_send_bw", size: 65536}, opcode: "SEND"},
			{tool: "ib_write_lat", perf: &perfCase{tool: "ib_write_lat", size: 2}, opcode: "RDMA WRITE"},
			{tool: "ib_read_lat", perf: &perfCase{tool: "ib_read_lat", size: 2}, opcode: "RDMA READ"},
			{tool: "ib_send_lat", perf: &perfCase{tool: "ib_send_lat", size: 2}, opcode: "SEND"},
			{tool: "ib_atomic_bw", perf: &perfCase{tool: "ib_atomic_bw", atomic: "FETCH_AND_ADD"}, opcode: "FetchAdd"},
			{tool: "ib_atomic_bw", perf: &perfCase{tool: "ib_atomic_bw", atomic: "CMP_AND_SWAP"}, opcode: "CmpSwap"},
			{tool: "ib_atomic_lat", perf: &perfCase{tool: "ib_atomic_lat", atomic: "FETCH_AND_ADD"}, opcode: "FetchAdd"},
		} {
			c.libServer = server
			if c.perf != nil {
				c.perf.iters, c.perf.mtu, c.perf.server = libIters, 1024, server
			}
			cases = append(cases, c)
		}
	}
	for _, c := range cases {
		t.Run(c.String(), func(t *testing.T) { runLibCase(t, h, g, c) })
	}
	// rdma_cm (librdmacm.so.1): rping and perftest -R, the connection over
	// the IB CM on QP1.
	cmOpcode := map[string]string{"rping": "RDMA READ", "ib_write_bw": "RDMA WRITE", "ib_read_bw": "RDMA READ", "ib_send_bw": "SEND",
		"ib_write_lat": "RDMA WRITE", "ib_read_lat": "RDMA READ", "ib_send_lat": "SEND"}
	for _, c := range cmCases() {
		t.Run("rdma_cm/"+c.String(), func(t *testing.T) {
			requireRdmacm(t)
			pcap := runCMCase(t, h, g, libDevice, "udp port 4791", c)
			out := checkLibCapture(t, pcap, cmOpcode[c.tool()])
			for _, m := range []string{"CM REQ", "CM REP", "CM RTU"} {
				if !strings.Contains(out, m) {
					t.Errorf("the capture has no %s:\n%s", m, lastLines(out, 12))
				}
			}
		})
	}
	// rdma_cm's own examples: ucmatose (RC, RDMA_PS_TCP and RDMA_PS_IB)
	// and udaddy (UD, RDMA_PS_UDP: SIDR).
	for _, c := range cmToolCases() {
		t.Run("rdma_cm/"+c.String(), func(t *testing.T) {
			requireRdmacm(t)
			runCMToolCase(t, h, g, c)
		})
	}
}

func runLibCase(t *testing.T, h *interop.Harness, g *interop.Guest, c libCase) {
	pcap := filepath.Join(t.TempDir(), "tap.pcap")
	gidFlag := "-g"
	var common []string
	if c.perf != nil {
		gidFlag, common = "-x", c.perf.args()
	} else {
		common = []string{"-n", strconv.Itoa(pingpongIters), "-s", strconv.Itoa(c.pp.size), "-c"}
		if c.pp.mode == "srq" {
			common = append(common, "-q", strconv.Itoa(srqQPs))
		}
	}
	libArgs := append([]string{"-d", "sr_roce0", gidFlag, "1"}, common...)
	kernArgs := append([]string{"-d", "rxe0", gidFlag, g.GIDIndex(t, false)}, common...)

	stop := g.PcapAll(t, pcap, "udp port 4791")
	lib, kern := libExchange(t, h, g, c.tool, c.libServer, libArgs, kernArgs)
	stop()

	if c.pp != nil && c.pp.mode == "srq" {
		checkSRQExchange(t, g, lib.Stdout, kern.Stdout, *c.pp)
	} else if c.pp != nil {
		hl, hr := checkPingpongOutput(t, c.tool+" (softrdma's libraries)", lib.Stdout, *c.pp)
		gl, gr := checkPingpongOutput(t, c.tool+" (rxe)", kern.Stdout, *c.pp)
		if hl != gr || gl != hr {
			t.Errorf("the two ends disagree on the addresses:\nlibraries local %+v remote %+v\nrxe local %+v remote %+v", hl, hr, gl, gr)
		}
		if want := "::ffff:" + interop.HostIPv4; hl.gid != want {
			t.Errorf("the libraries' GID %s, want %s", hl.gid, want)
		}
		if want := "::ffff:" + g.IP; gl.gid != want {
			t.Errorf("rxe's GID %s, want %s", gl.gid, want)
		}
		for _, out := range []string{lib.Stdout, kern.Stdout} {
			if strings.Contains(out, "invalid data") {
				t.Errorf("the server's -c check failed:\n%s", out)
			}
		}
	} else {
		t.Logf("libraries: %s", perfResultRow(lib.Stdout))
		t.Logf("rxe: %s", perfResultRow(kern.Stdout))
		ls := parsePerfRun(t, c.tool+" (softrdma's libraries)", lib.Stdout, *c.perf, c.libServer)
		ks := parsePerfRun(t, c.tool+" (rxe)", kern.Stdout, *c.perf, !c.libServer)
		checkPerfSides(t, ls, ks, *c.perf)
		if want := "::ffff:" + interop.HostIPv4; len(ls.gid) == 0 || ls.gid[0] != want {
			t.Errorf("the libraries' GID %v, want %s", ls.gid, want)
		}
		if want := "::ffff:" + g.IP; len(ks.gid) == 0 || ks.gid[0] != want {
			t.Errorf("rxe's GID %v, want %s", ks.gid, want)
		}
	}
	checkLibCapture(t, pcap, c.opcode)
}

// libExchangeTimeout bounds one end of one exchange.
const libExchangeTimeout = 3 * time.Minute

// libExchange runs tool between softrdma's libraries on the host (libArgs) and
// rxe in the guest (kernArgs), the libraries' end as the server if libServer,
// and returns both ends' results, failing the test unless both succeeded. The
// client is started once the server listens on its TCP port.
func libExchange(t *testing.T, h *interop.Harness, g *interop.Guest, tool string, libServer bool, libArgs, kernArgs []string) (lib, kern interop.Result) {
	t.Helper()
	if libServer {
		p := h.LibStart(t, libDevice, tool, libArgs...)
		if !p.WaitListenTCP(libPort, time.Minute) {
			t.Fatalf("the libraries' %s server did not listen:\n%s", tool, p.Wait(time.Second))
		}
		kern = g.Exec(t, libExchangeTimeout, append([]string{tool}, append(kernArgs, interop.HostIPv4)...)...)
		wait := libExchangeTimeout
		if !kern.OK() {
			wait = 10 * time.Second // the server may wait for ever
		}
		lib = p.Wait(wait)
	} else {
		job := g.ExecBackground(t, append([]string{tool}, kernArgs...)...)
		g.WaitListenTCP(t, libPort, time.Minute)
		ctx, cancel := context.WithTimeout(context.Background(), libExchangeTimeout)
		defer cancel()
		lib = h.LibRun(ctx, t, libDevice, tool, append(libArgs, g.IP)...)
		wait := libExchangeTimeout
		if !lib.OK() {
			job.Kill("TERM") // the server may wait for ever
			wait = 10 * time.Second
		}
		kern = job.Wait(t, wait)
	}
	if !lib.OK() || !kern.OK() {
		t.Fatalf("exchange failed\nsoftrdma's libraries:\n%s\nrxe:\n%s", lib, kern)
	}
	return lib, kern
}

// checkLibCapture checks a capture of an exchange between the libraries and a
// kernel: softrdma decode finds no error (every CRC verified, both ends'), and
// the message opcode; tshark finds no malformed frame and dissects as
// InfiniBand (or iWARP) every RDMA frame decode finds. The tap's tcpdump may
// drop frames under emulation, so counts are not checked.
func checkLibCapture(t *testing.T, pcap, opcode string) (decoded string) {
	t.Helper()
	out := interop.Decode(t, pcap)
	var frames, rdma int
	for _, l := range strings.Split(out, "\n") {
		if n, _ := fmt.Sscanf(l, "%d frames (pcap), %d RDMA frames", &frames, &rdma); n == 2 {
			break
		}
	}
	if rdma == 0 {
		t.Errorf("the capture has no RDMA frame:\n%s", lastLines(out, 8))
	}
	if opcode != "" && !strings.Contains(out, " "+opcode) {
		t.Errorf("the capture has no %s:\n%s", opcode, lastLines(out, 12))
	}
	malformed, ib := interop.TsharkMalformed(t, pcap)
	if malformed > 0 {
		t.Errorf("tshark finds %d malformed frames in %s", malformed, filepath.Base(pcap))
	}
	if ib >= 0 && ib != rdma {
		t.Errorf("tshark decodes %d frames as InfiniBand, softrdma decode %d RDMA frames", ib, rdma)
	}
	t.Logf("capture: %d RDMA frames, decoded without error, %d malformed in tshark", rdma, max(malformed, 0))
	return out
}

// srqQPs is ibv_srq_pingpong's -q: the QPs each side posts to from its one
// shared receive queue (the tool's default is 16; two keep the emulated
// guest's exchange short).
const srqQPs = 2

// checkSRQExchange checks both ends' ibv_srq_pingpong output: srqQPs local
// and as many remote address lines, the byte and iteration lines, each QP of
// one end the remote of the same QP of the other, the IPv4-mapped GIDs, and
// the servers' -c check.
func checkSRQExchange(t *testing.T, g *interop.Guest, libOut, kernOut string, c pingpongCase) {
	t.Helper()
	parse := func(who, out string) (local, remote []pingpongAddr) {
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(lines) != 2*srqQPs+2 {
			t.Errorf("%s printed %d lines, want %d:\n%s", who, len(lines), 2*srqQPs+2, out)
			return nil, nil
		}
		for i, l := range lines[:2*srqQPs] {
			if i < srqQPs {
				m := localRE.FindStringSubmatch(l)
				if m == nil {
					t.Errorf("%s: local address line %q", who, l)
					return nil, nil
				}
				local = append(local, pingpongAddr{m[1], m[2], m[4]})
			} else {
				m := remoteRE.FindStringSubmatch(l)
				if m == nil {
					t.Errorf("%s: remote address line %q", who, l)
					return nil, nil
				}
				remote = append(remote, pingpongAddr{m[1], m[2], m[3]})
			}
		}
		b, it := bytesRE.FindStringSubmatch(lines[2*srqQPs]), itersRE.FindStringSubmatch(lines[2*srqQPs+1])
		if b == nil || it == nil {
			t.Errorf("%s: result lines %q", who, lines[2*srqQPs:])
			return nil, nil
		}
		if want := strconv.Itoa(c.size * pingpongIters * 2); b[1] != want || it[1] != strconv.Itoa(pingpongIters) {
			t.Errorf("%s: %s bytes, %s iters, want %s and %d", who, b[1], it[1], want, pingpongIters)
		}
		return local, remote
	}
	hl, hr := parse("ibv_srq_pingpong (softrdma's libraries)", libOut)
	gl, gr := parse("ibv_srq_pingpong (rxe)", kernOut)
	if !slices.Equal(hl, gr) || !slices.Equal(gl, hr) {
		t.Errorf("the two ends disagree on the addresses:\nlibraries local %+v remote %+v\nrxe local %+v remote %+v", hl, hr, gl, gr)
	}
	for _, a := range hl {
		if want := "::ffff:" + interop.HostIPv4; a.gid != want {
			t.Errorf("the libraries' GID %s, want %s", a.gid, want)
		}
	}
	for _, a := range gl {
		if want := "::ffff:" + g.IP; a.gid != want {
			t.Errorf("rxe's GID %s, want %s", a.gid, want)
		}
	}
	for _, out := range []string{libOut, kernOut} {
		if strings.Contains(out, "invalid data") {
			t.Errorf("the server's -c check failed:\n%s", out)
		}
	}
}

// cmToolCase is one exchange of rdma-core's ucmatose or udaddy (librdmacm's
// examples) with itself over rdma_cm: one end on softrdma's libraries, the
// other on the kernel's rxe; ps is ucmatose's -P (port space).
type cmToolCase struct {
	tool, ps  string
	libServer bool
}

func (c cmToolCase) String() string {
	dir := "rxe-server"
	if c.libServer {
		dir = "lib-server"
	}
	return fmt.Sprintf("%s/%s/%s", c.tool, c.ps, dir)
}

// cmToolCases are ucmatose over RDMA_PS_TCP and RDMA_PS_IB and udaddy over
// RDMA_PS_UDP, both directions.
func cmToolCases() []cmToolCase {
	var cases []cmToolCase
	for _, server := range []bool{false, true} {
		cases = append(cases,
			cmToolCase{tool: "ucmatose", ps: "tcp", libServer: server},
			cmToolCase{tool: "ucmatose", ps: "ib", libServer: server},
			cmToolCase{tool: "udaddy", ps: "udp", libServer: server})
	}
	return cases
}

// cmToolMessages is each tool's message count (-C), one connection (-c 1).
const cmToolMessages = 5

// runCMToolCase runs c between the libraries on the host and rxe in g,
// capturing on the guest's tap: both ends must end their transfers with
// return status 0 (udaddy's server after sending its replies), and the
// capture must decode with no error and hold the connection's CM exchange
// (REQ, REP, RTU for ucmatose, with the port space's service ID: 0x0106 or
// 0x013F then the port; SIDR_REQ and SIDR_REP for udaddy) and its SENDs.
func runCMToolCase(t *testing.T, h *interop.Harness, g *interop.Guest, c cmToolCase) {
	pcap := filepath.Join(t.TempDir(), "tap.pcap")
	port, ps := 7471, 0x0106 // ucmatose's default port; RDMA_PS_TCP
	common := []string{"-c", "1", "-C", strconv.Itoa(cmToolMessages)}
	switch {
	case c.tool == "udaddy":
		port, ps = 7174, 0x0111 // udaddy's fixed port; RDMA_PS_UDP (its -p is the port space)
	case c.ps == "ib":
		ps = 0x013F
		common = append(common, "-P", "ib", "-p", strconv.Itoa(port))
	default:
		common = append(common, "-P", "tcp", "-p", strconv.Itoa(port))
	}
	srv := g.IP
	if c.libServer {
		srv = interop.HostIPv4
	}
	serverArgs := append([]string{"-b", srv}, common...)
	clientArgs := append([]string{"-s", srv}, common...)

	stop := g.PcapAll(t, pcap, "udp port 4791")
	var lib, kern interop.Result
	if c.libServer {
		// RoCE's rdma_cm listens on QP1: the client is rerun while refused.
		p := h.LibStart(t, libDevice, c.tool, serverArgs...)
		kern = retryCMClient(func() interop.Result {
			return g.Exec(t, libExchangeTimeout, append([]string{c.tool}, clientArgs...)...)
		})
		wait := libExchangeTimeout
		if !kern.OK() {
			wait = 10 * time.Second
		}
		lib = p.Wait(wait)
	} else {
		job := g.ExecBackground(t, append([]string{c.tool}, serverArgs...)...)
		g.WaitCMListen(t, port, time.Minute)
		lib = retryCMClient(func() interop.Result {
			ctx, cancel := context.WithTimeout(context.Background(), libExchangeTimeout)
			defer cancel()
			return h.LibRun(ctx, t, libDevice, c.tool, clientArgs...)
		})
		wait := libExchangeTimeout
		if !lib.OK() {
			job.Kill("TERM")
			wait = 10 * time.Second
		}
		kern = job.Wait(t, wait)
	}
	stop()
	if !lib.OK() || !kern.OK() {
		t.Fatalf("exchange failed\nsoftrdma's libraries:\n%s\nrxe:\n%s", lib, kern)
	}
	server := kern
	if c.libServer {
		server = lib
	}
	for _, r := range []interop.Result{lib, kern} {
		if !strings.Contains(r.Stdout, "data transfers complete") || !strings.Contains(r.Stdout, "return status 0") {
			t.Errorf("%s did not complete its transfers:\n%s", c.tool, r)
		}
	}
	if c.tool == "udaddy" && !strings.Contains(server.Stdout, "sending replies") {
		t.Errorf("udaddy's server sent no replies:\n%s", server)
	}
	opcode, msgs := "RC SEND", []string{"CM REQ", "CM REP", "CM RTU"}
	if c.tool == "udaddy" {
		opcode, msgs = "UD SEND", []string{"CM SIDR_REQ", "CM SIDR_REP"}
	}
	out := checkLibCapture(t, pcap, opcode)
	for _, m := range append(msgs, fmt.Sprintf("ServiceID=0x%016x", ps<<16|port)) {
		if !strings.Contains(out, m) {
			t.Errorf("the capture has no %s:\n%s", m, lastLines(out, 12))
		}
	}
}
