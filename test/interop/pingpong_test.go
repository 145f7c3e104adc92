package interop_test

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/test/interop"
)

func TestMain(m *testing.M) { interop.Main(m) }

// pingpongCase is one exchange between softrdma pingpong on the host and an
// rdma-core ibv_*_pingpong in a guest over its kernel rxe.
type pingpongCase struct {
	mode           string // rc, ud, uc
	ipv6           bool   // RoCEv2 over IPv6 (GID index 2) instead of IPv4 (1)
	size           int
	mtu            int    // -m (rc, uc); 0: the tools' default 1024
	events         bool   // -e on both sides
	softrdmaServer bool   // softrdma is the server, the guest's tool the client
	backend        string // softrdma's --backend; "" is udp
}

// String names the case for t.Run, e.g. "rc/ipv4/softrdma-server/s4096".
func (c pingpongCase) String() string {
	dir := "/rxe-server"
	if c.softrdmaServer {
		dir = "/softrdma-server"
	}
	return c.name(dir)
}

// name is the case's name with dir (who is the server) after the IP version.
func (c pingpongCase) name(dir string) string {
	fam := "ipv4"
	if c.ipv6 {
		fam = "ipv6"
	}
	s := fmt.Sprintf("%s/%s%s/s%d", c.mode, fam, dir, c.size)
	if c.mtu != 0 {
		s += fmt.Sprintf("/m%d", c.mtu)
	}
	if c.events {
		s += "/events"
	}
	if c.backend != "" {
		s += "/" + c.backend
	}
	return s
}

// pingpongIters keeps the exchanges short: the guest runs under TCG emulation.
const pingpongIters = 10

// exchangeTimeout bounds one side of one exchange (TCG: 10-50x slower than native).
const exchangeTimeout = 3 * time.Minute

// TestRXEPingpong runs softrdma pingpong against ibv_rc_pingpong,
// ibv_ud_pingpong and ibv_uc_pingpong over the kernel's rxe in a guest, in
// both directions, over IPv4 and IPv6, with a few message sizes (one, four and
// ten packets at IB MTU 1024 for rc), on a UDP socket and on raw frames
// (afpacket) on the host side. Each exchange must succeed on both sides
// with the tools' exact output format and matching addresses, the server's -c
// check must find every page, and softrdma's capture of the traffic must
// decode with no error (every ICRC of both sides verified) and without a
// malformed frame in tshark.
func TestRXEPingpong(t *testing.T) {
	h := interop.Require(t)
	g := h.Boot(t, "pp31", interop.BootOptions{IP: "10.77.0.31", IP6: "fd77::31", Links: "rxe"})
	var cases []pingpongCase
	for _, server := range []bool{false, true} {
		for _, size := range []int{1024, 4096, 10000} {
			cases = append(cases, pingpongCase{mode: "rc", size: size, softrdmaServer: server, events: size == 4096})
		}
		cases = append(cases,
			pingpongCase{mode: "rc", ipv6: true, size: 4096, softrdmaServer: server},
			pingpongCase{mode: "ud", size: 1024, softrdmaServer: server},
			pingpongCase{mode: "ud", size: 60, softrdmaServer: server, events: true},
			pingpongCase{mode: "ud", ipv6: true, size: 512, softrdmaServer: server},
			pingpongCase{mode: "uc", size: 4096, softrdmaServer: server},
			// raw frames on the host's bridge interface instead of a UDP socket
			pingpongCase{mode: "rc", size: 4096, softrdmaServer: server, backend: "afpacket"},
			pingpongCase{mode: "ud", ipv6: true, size: 1024, softrdmaServer: server, backend: "afpacket"},
		)
	}
	for _, c := range cases {
		t.Run(c.String(), func(t *testing.T) { runPingpongCase(t, h, g, c) })
	}
}

// TestRXEPingpongMTU4096 is rc pingpong at IB MTU 4096: the guest's link (and
// with it the bridge, the host side's interface) has MTU 9000, from which rxe
// derives an active MTU of 4096, as softrdma does.
func TestRXEPingpongMTU4096(t *testing.T) {
	h := interop.Require(t)
	g := h.Boot(t, "pp32", interop.BootOptions{IP: "10.77.0.32", IP6: "fd77::32", Links: "rxe", MTU: 9000})
	for _, server := range []bool{false, true} {
		c := pingpongCase{mode: "rc", size: 16384, mtu: 4096, softrdmaServer: server}
		t.Run(c.String(), func(t *testing.T) { runPingpongCase(t, h, g, c) })
	}
}

func toolFor(mode string) string { return "ibv_" + mode + "_pingpong" }

func runPingpongCase(t *testing.T, h *interop.Harness, g *interop.Guest, c pingpongCase) {
	pcap := filepath.Join(t.TempDir(), "softrdma.pcap")
	// The TCP exchange goes to the guest's IPv4 address even when RoCE runs over
	// IPv6: the rdma-core servers listen on 0.0.0.0 only (getaddrinfo with
	// AI_PASSIVE gives the IPv4 wildcard first and they bind the first that
	// works). softrdma's server listens on both, so the guest's client reaches
	// it over IPv6.
	hostGID, hostIP, guestIP := "1", interop.HostIPv4, g.IP
	if c.ipv6 {
		hostGID, hostIP = "2", interop.HostIPv6
	}
	common := []string{"-n", strconv.Itoa(pingpongIters), "-s", strconv.Itoa(c.size), "-c"}
	if c.mtu != 0 {
		common = append(common, "-m", strconv.Itoa(c.mtu))
	}
	if c.events {
		common = append(common, "-e")
	}
	guestArgs := append([]string{toolFor(c.mode), "-d", "rxe0", "-g", g.GIDIndex(t, c.ipv6)}, common...)
	hostArgs := append([]string{"pingpong", c.mode, "-d", interop.Bridge, "-g", hostGID,
		"--pcap", pcap, "--timeout", exchangeTimeout.String()}, common...)
	if c.backend != "" {
		hostArgs = append(hostArgs, "--backend", c.backend)
	}

	var host, guest interop.Result
	if c.softrdmaServer {
		p := h.HostStart(t, hostArgs...)
		// softrdma listens before it prints its address: the client may connect then.
		if !p.WaitOutput("local address:", time.Minute) {
			t.Fatalf("softrdma server did not start:\n%s", p.Wait(time.Second))
		}
		guest = g.Exec(t, exchangeTimeout, append(guestArgs, hostIP)...)
		wait := exchangeTimeout
		if !guest.OK() {
			wait = 10 * time.Second // the server may wait for ever
		}
		host = p.Wait(wait)
	} else {
		job := g.ExecBackground(t, guestArgs...)
		ctx, cancel := context.WithTimeout(context.Background(), exchangeTimeout+time.Minute)
		defer cancel()
		host = h.HostRun(ctx, t, append(hostArgs, "--wait", "2m", guestIP)...)
		if !host.OK() {
			job.Kill("TERM") // the server may wait for ever
		}
		guest = job.Wait(t, exchangeTimeout)
	}
	if !host.OK() || !guest.OK() {
		t.Fatalf("exchange failed\nhost:\n%s\nguest:\n%s", host, guest)
	}
	t.Logf("softrdma: %s", lastLine(host.Stdout))
	t.Logf("%s: %s", toolFor(c.mode), lastLine(guest.Stdout))

	hl, hr := checkPingpongOutput(t, "softrdma", host.Stdout, c)
	gl, gr := checkPingpongOutput(t, toolFor(c.mode), guest.Stdout, c)
	if hl != gr || gl != hr {
		t.Errorf("the two sides disagree on the addresses:\nsoftrdma local %+v remote %+v\n%s local %+v remote %+v",
			hl, hr, toolFor(c.mode), gl, gr)
	}
	wantHostGID, wantGuestGID := "::ffff:"+interop.HostIPv4, "::ffff:"+g.IP
	if c.ipv6 {
		wantHostGID, wantGuestGID = interop.HostIPv6, g.IP6
	}
	if hl.gid != wantHostGID || gl.gid != wantGuestGID {
		t.Errorf("GIDs %s (softrdma) and %s (rxe), want %s and %s", hl.gid, gl.gid, wantHostGID, wantGuestGID)
	}
	for _, out := range []string{host.Stdout, guest.Stdout} {
		if strings.Contains(out, "invalid data") {
			t.Errorf("the server's -c check failed:\n%s", out)
		}
	}
	checkCapture(t, pcap, c)
}

// pingpongAddr is one "local address:" / "remote address:" line.
type pingpongAddr struct{ qpn, psn, gid string }

var (
	localRE  = regexp.MustCompile(`^  local address:  LID 0x0000, QPN 0x([0-9a-f]{6}), PSN 0x([0-9a-f]{6})([,:]) GID (\S+)$`)
	remoteRE = regexp.MustCompile(`^  remote address: LID 0x0000, QPN 0x([0-9a-f]{6}), PSN 0x([0-9a-f]{6}), GID (\S+)$`)
	bytesRE  = regexp.MustCompile(`^(\d+) bytes in (\d+\.\d\d) seconds = (\d+\.\d\d|inf) Mbit/sec$`)
	itersRE  = regexp.MustCompile(`^(\d+) iters in (\d+\.\d\d) seconds = (\d+\.\d\d|inf) usec/iter$`)
)

// checkPingpongOutput checks that out is exactly the four lines rdma-core 44's
// tools print (ud_pingpong's "PSN 0x...: GID" colon included) and returns the
// addresses.
func checkPingpongOutput(t *testing.T, who, out string, c pingpongCase) (local, remote pingpongAddr) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 4 {
		t.Errorf("%s printed %d lines, want 4:\n%s", who, len(lines), out)
		return
	}
	m := localRE.FindStringSubmatch(lines[0])
	if m == nil {
		t.Errorf("%s: local address line %q", who, lines[0])
		return
	}
	if sep := map[bool]string{true: ":", false: ","}[c.mode == "ud"]; m[3] != sep {
		t.Errorf("%s: local address line %q: separator before GID %q, want %q", who, lines[0], m[3], sep)
	}
	local = pingpongAddr{m[1], m[2], m[4]}
	if m = remoteRE.FindStringSubmatch(lines[1]); m == nil {
		t.Errorf("%s: remote address line %q", who, lines[1])
		return
	}
	remote = pingpongAddr{m[1], m[2], m[3]}
	b := bytesRE.FindStringSubmatch(lines[2])
	it := itersRE.FindStringSubmatch(lines[3])
	if b == nil || it == nil {
		t.Errorf("%s: result lines %q, %q", who, lines[2], lines[3])
		return
	}
	if want := strconv.Itoa(c.size * pingpongIters * 2); b[1] != want {
		t.Errorf("%s: %s bytes, want %s", who, b[1], want)
	}
	if it[1] != strconv.Itoa(pingpongIters) {
		t.Errorf("%s: %s iters, want %d", who, it[1], pingpongIters)
	}
	if b[2] != it[2] {
		t.Errorf("%s: two durations %s and %s", who, b[2], it[2])
	}
	return local, remote
}

// checkCapture decodes softrdma's capture of the exchange: no error (so every
// ICRC of both sides verifies), at least the packets the messages need, and
// nothing tshark calls malformed.
func checkCapture(t *testing.T, pcap string, c pingpongCase) {
	t.Helper()
	out := interop.Decode(t, pcap)
	mtu := c.mtu
	if mtu == 0 {
		mtu = 1024
	}
	perMsg := int(math.Ceil(float64(c.size) / float64(mtu)))
	if c.mode == "ud" {
		perMsg = 1
	}
	want := 2 * pingpongIters * perMsg
	var frames, rdma int
	for _, l := range strings.Split(out, "\n") {
		if n, _ := fmt.Sscanf(l, "%d frames (pcap), %d RDMA frames", &frames, &rdma); n == 2 {
			break
		}
	}
	if rdma < want {
		t.Errorf("capture has %d RDMA frames, want at least %d:\n%s", rdma, want, lastLines(out, 8))
	}
	malformed, ib := interop.TsharkMalformed(t, pcap)
	if malformed > 0 {
		t.Errorf("tshark finds %d malformed frames in %s", malformed, pcap)
	}
	if ib >= 0 && ib != rdma {
		t.Errorf("tshark decodes %d frames as InfiniBand, softrdma decode %d RDMA frames", ib, rdma)
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
