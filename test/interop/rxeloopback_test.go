package interop_test

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/test/interop"
)

// TestRXELoopbackSkipsNetwork pins why make bench-kernel has a table across
// the link between two guests: perftest between two QPs of one guest's rxe0
// moves its data without a single RoCE packet on any interface of the guest
// (rxe_prepare marks a packet for the device's own MAC RXE_LOOPBACK_MASK, and
// rxe_xmit_packet hands it to rxe_loopback, straight into rxe's receive
// path), while a softrdma process on that guest must cross the UDP stack. A
// datagram sent to port 4791 at the same time is captured: the capture works.
func TestRXELoopbackSkipsNetwork(t *testing.T) {
	h := interop.Require(t)
	g := h.Boot(t, "rxeloop44", interop.BootOptions{IP: "10.77.0.44", Links: "rxe"})
	gidx := g.GIDIndex(t, false)
	script := `
set -u
tcpdump -i any -n -U -w /tmp/loop.pcap udp port 4791 2>/tmp/tcpdump.err &
T=$!
sleep 2
ib_write_bw -d rxe0 -x ` + gidx + ` -s 65536 -n 20 -F >/tmp/srv.out 2>&1 &
S=$!
sleep 2
ib_write_bw -d rxe0 -x ` + gidx + ` -s 65536 -n 20 -F 10.77.0.44 >/tmp/cli.out 2>&1
echo "client exit $?"
wait $S
echo "server exit $?"
echo control >/dev/udp/10.77.0.44/4791
sleep 2
kill -INT $T
wait $T
grep -A1 '#bytes' /tmp/cli.out | tail -1
echo "captured $(tcpdump -r /tmp/loop.pcap -n 2>/dev/null | wc -l)"
tcpdump -r /tmp/loop.pcap -n 2>/dev/null | head -5
`
	r := g.ExecShell(t, 3*time.Minute, script)
	t.Logf("%s", r)
	if !r.OK() || !strings.Contains(r.Stdout, "client exit 0") || !strings.Contains(r.Stdout, "server exit 0") {
		t.Fatalf("perftest over rxe0 in one guest failed:\n%s", r)
	}
	if m := regexp.MustCompile(`(?m)^\s*65536\s+20\s+\S+\s+(\S+)`).FindStringSubmatch(r.Stdout); m == nil {
		t.Fatalf("no ib_write_bw result row:\n%s", r.Stdout)
	}
	m := regexp.MustCompile(`captured (\d+)`).FindStringSubmatch(r.Stdout)
	if m == nil {
		t.Fatalf("no capture count:\n%s", r.Stdout)
	}
	// 20 WRITEs of 64 KiB are 1280 packets at IB MTU 1024, and their ACKs:
	// on the wire they would be all of the capture.
	if n, _ := strconv.Atoi(m[1]); n != 1 {
		t.Errorf("captured %d UDP datagrams to port 4791, want exactly the control datagram", n)
	}
}
