package interop_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/internal/rpingtext"
	"github.com/softrdma/softrdma/test/interop"
)

// TestRXERping runs softrdma rping --transport roce against rdma-core's rping
// over the kernel's rxe (rdma_cm over the IB CM on QP1), both directions,
// -C 10 -S 64 -v (-V on the client). Both sides exit 0 and print rping's lines
// exactly; the capture on the guest's tap (the frames as on the wire) and
// softrdma's own --pcap decode with no error (every ICRC verified) and have no
// frame tshark calls malformed; softrdma's has the connection's REQ, REP, RTU,
// its DREQ, DREP and the ten 64-octet READ responses.
func TestRXERping(t *testing.T) {
	h := interop.Require(t)
	g := h.Boot(t, "cmrping62", interop.BootOptions{IP: "10.77.0.62", NoIPv6: true, Links: "rxe"})
	const count, size = 10, 64
	t.Run("rxe-server", func(t *testing.T) {
		dir := t.TempDir()
		tap, own := filepath.Join(dir, "tap.pcap"), filepath.Join(dir, "softrdma.pcap")
		stop := g.Pcap(t, tap, "udp port 4791")
		job := g.ExecBackground(t, "rping", "-s", "-a", g.IP, "-v")
		var host interop.Result
		for try := 0; try < 60; try++ { // until the guest's rping listens: a REJ
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			host = h.HostRun(ctx, t, "rping", "--transport", "roce", "-c", "-a", g.IP, "-C", "10", "-S", "64", "-v", "-V",
				"--pcap", own, "--timeout", "2m")
			cancel()
			if host.OK() || !strings.Contains(host.Stderr, "REJECTED") {
				break
			}
			time.Sleep(time.Second)
		}
		guest := job.Wait(t, 3*time.Minute)
		stop()
		rpingCheck(t, host, guest, rpingtext.Lines("ping data: ", count, size), rpingtext.Lines("server ping data: ", count, size))
		rpingCheckRoCECapture(t, tap, -1)
		rpingCheckRoCECapture(t, own, count)
	})
	t.Run("softrdma-server", func(t *testing.T) {
		dir := t.TempDir()
		tap, own := filepath.Join(dir, "tap.pcap"), filepath.Join(dir, "softrdma.pcap")
		stop := g.Pcap(t, tap, "udp port 4791")
		p := h.HostStart(t, "rping", "--transport", "roce", "-s", "-a", interop.HostIPv4, "-v", "--pcap", own, "--timeout", "5m")
		time.Sleep(2 * time.Second) // it listens within milliseconds
		guest := g.Exec(t, 3*time.Minute, "rping", "-c", "-a", interop.HostIPv4, "-C", "10", "-S", "64", "-v", "-V")
		host := p.Wait(3 * time.Minute)
		stop()
		rpingCheck(t, guest, host, rpingtext.Lines("ping data: ", count, size), rpingtext.Lines("server ping data: ", count, size))
		rpingCheckRoCECapture(t, tap, -1)
		rpingCheckRoCECapture(t, own, count)
	})
}

// rpingCheckRoCECapture decodes a RoCE rping capture: no errors, the IB CM
// exchange of the connection and of its end and a READ response of the ping
// size per ping (count < 0: neither is checked: tcpdump on the guest's tap
// drops frames under emulation, at either end; softrdma's own capture has them
// all), and no frame tshark calls malformed.
func rpingCheckRoCECapture(t *testing.T, pcap string, count int) {
	t.Helper()
	out := interop.Decode(t, pcap)
	for _, m := range []string{"CM REQ", "CM REP", "CM RTU", "CM DREQ", "CM DREP"} {
		if count >= 0 && !strings.Contains(out, m) {
			t.Errorf("%s: no %s:\n%s", filepath.Base(pcap), m, out)
		}
	}
	if n := strings.Count(out, "RDMA READ response Only QP="); count >= 0 && n != count {
		t.Errorf("%s: %d READ responses, want %d:\n%s", filepath.Base(pcap), n, count, out)
	}
	if malformed, _ := interop.TsharkMalformed(t, pcap); malformed > 0 {
		t.Errorf("tshark finds %d malformed frames in %s", malformed, pcap)
	}
}
