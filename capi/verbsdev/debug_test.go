package verbsdev_test

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestDebugLog: with SOFTRDMA_DEBUG=1 the library says on stderr, once, which
// build it is and which devices it exposes (name and SOFTRDMA_DEVICES spec of
// each), and for each refused verb which verb and why; without it, nothing.
// The refusals (testdata/refused.c): a verb not implemented (ibv_reg_dmabuf_mr,
// EOPNOTSUPP), an argument out of range (ibv_create_cq of 0 entries, EINVAL),
// a bad region (ibv_reg_mr of length 0, EINVAL); and through librdmacm.so.1
// a datagram rsocket (udpong: rsocket, EOPNOTSUPP).
func TestDebugLog(t *testing.T) {
	lib := buildLib(t)
	net := randomNet()
	list := "roce:" + net + "1 iwarp:" + net + "1"
	banner := regexp.MustCompile(`(?m)^softrdma: libibverbs\.so\.1 \(softrdma \S+ go\S+, pid \d+\): 2 device\(s\): ` +
		`sr_roce0 \(roce:` + regexp.QuoteMeta(net+"1") + `\), sr_iwarp0 \(iwarp:` + regexp.QuoteMeta(net+"1") + `\)$`)

	_, errOut, err := runBounded(t, lib, list, time.Minute, "ibv_devices")
	if err != nil || len(banner.FindAllString(errOut, -1)) != 1 {
		t.Errorf("ibv_devices (SOFTRDMA_DEBUG=1): %v: want one line matching %q, stderr:\n%s", err, banner, errOut)
	}
	if _, quiet, err := run(t, lib, list, "ibv_devices"); err != nil || quiet != "" {
		t.Errorf("ibv_devices without SOFTRDMA_DEBUG: %v, stderr %q, want nothing", err, quiet)
	}

	prog := compile(t, lib, "refused")
	out, errOut, err := runBounded(t, lib, "roce:"+net+"2", time.Minute, prog)
	if err != nil {
		t.Fatalf("refused: %v\n%s\nstderr:\n%s", err, out, errOut)
	}
	for _, c := range []struct{ errno, debug string }{
		{"errno ibv_reg_dmabuf_mr 95", "softrdma: ibv_reg_dmabuf_mr: not implemented (EOPNOTSUPP)"},
		{"errno ibv_create_cq 22", "softrdma: create cq: "},
		{"errno ibv_reg_mr 22", "softrdma: reg mr: length 0"},
	} {
		if !strings.Contains(out, c.errno) || !strings.Contains(errOut, c.debug) {
			t.Errorf("want %q on stdout and %q on stderr\nstdout:\n%s\nstderr:\n%s", c.errno, c.debug, out, errOut)
		}
	}

	needTools(t, "udpong")
	_, errOut, _ = runBounded(t, lib, "roce:"+net+"3", time.Minute, "udpong", "-b", net+"3")
	if !strings.Contains(errOut, "softrdma: rsocket: SOCK_DGRAM is not implemented (EOPNOTSUPP): softrdma's rsockets are SOCK_STREAM") {
		t.Errorf("udpong: want rsocket's refusal of SOCK_DGRAM, with its reason, on stderr:\n%s", errOut)
	}
}

// bannerPrefix begins the line SOFTRDMA_DEBUG=1 prints when the library
// loads its devices.
const bannerPrefix = "softrdma: libibverbs.so.1 (softrdma "

// maskingPrefix begins the line SOFTRDMA_DEBUG=1 prints when the program
// installs a handler without SA_ONSTACK and the library starts blocking the
// signals around its calls into Go (TestSignals): not a refusal.
const maskingPrefix = "softrdma: blocking signals around calls into Go"

// debugLines returns the library's SOFTRDMA_DEBUG lines in out other than
// its first, which names the build and the devices, and the masking line:
// what it refused or reported.
func debugLines(out string) []string {
	var l []string
	for _, line := range strings.Split(out, "\n") {
		if i := strings.Index(line, "softrdma:"); i >= 0 && !strings.HasPrefix(line[i:], bannerPrefix) &&
			!strings.HasPrefix(line[i:], maskingPrefix) {
			l = append(l, line[i:])
		}
	}
	return l
}
