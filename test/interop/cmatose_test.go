package interop_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/test/interop"
)

// TestRXECmatose runs softrdma cmatose against librdmacm's ucmatose (RC,
// RDMA_PS_TCP: REQ, REP, RTU, -C 10 SENDs of 100 octets each way, DREQ, DREP)
// and, with --ud, against udaddy (UD, RDMA_PS_UDP: SIDR_REQ and SIDR_REP, 10
// datagrams each way) over the kernel's rxe, both directions. Both sides exit
// 0 and end with "return status 0"; softrdma's capture decodes with no error,
// has the CM exchange and the 20 SENDs, and tshark finds nothing malformed.
func TestRXECmatose(t *testing.T) {
	h := interop.Require(t)
	g := h.Boot(t, "cmatose63", interop.BootOptions{IP: "10.77.0.63", NoIPv6: true, Links: "rxe"})
	for _, c := range []struct {
		tool string
		ud   bool
		cm   []string // CM messages the capture must have
	}{
		{"ucmatose", false, []string{"CM REQ", "CM REP", "CM RTU", "CM DREQ", "CM DREP"}},
		{"udaddy", true, []string{"CM SIDR_REQ", "CM SIDR_REP"}},
	} {
		extra := []string{}
		if c.ud {
			extra = []string{"--ud"}
		}
		t.Run(c.tool+"/rxe-server", func(t *testing.T) {
			pcap := filepath.Join(t.TempDir(), "softrdma.pcap")
			job := g.ExecBackground(t, c.tool, "-b", g.IP)
			var host interop.Result
			for try := 0; try < 60; try++ { // until the guest's tool listens: a REJ (or no SIDR_REP)
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
				host = h.HostRun(ctx, t, append([]string{"cmatose", "-s", g.IP, "--pcap", pcap, "--timeout", "1m"}, extra...)...)
				cancel()
				if host.OK() || !strings.Contains(host.Stderr, "REJECTED") && !strings.Contains(host.Stderr, "UNREACHABLE") {
					break
				}
				time.Sleep(time.Second)
			}
			guest := job.Wait(t, 3*time.Minute)
			cmatoseCheck(t, host, guest, pcap, c.cm)
		})
		t.Run(c.tool+"/softrdma-server", func(t *testing.T) {
			pcap := filepath.Join(t.TempDir(), "softrdma.pcap")
			p := h.HostStart(t, append([]string{"cmatose", "-b", interop.HostIPv4, "--pcap", pcap, "--timeout", "3m"}, extra...)...)
			time.Sleep(2 * time.Second) // it listens within milliseconds
			guest := g.Exec(t, 3*time.Minute, c.tool, "-s", interop.HostIPv4)
			host := p.Wait(3 * time.Minute)
			cmatoseCheck(t, guest, host, pcap, c.cm)
		})
	}
}

func cmatoseCheck(t *testing.T, a, b interop.Result, pcap string, cm []string) {
	t.Helper()
	for _, r := range []interop.Result{a, b} {
		if !r.OK() || !strings.Contains(r.Stdout, "data transfers complete\n") || !strings.HasSuffix(r.Stdout, "return status 0\n") {
			t.Errorf("want exit 0, the data transfers and return status 0:\n%s", r)
		}
	}
	out := interop.Decode(t, pcap)
	for _, m := range cm {
		if !strings.Contains(out, m) {
			t.Errorf("capture has no %s:\n%s", m, out)
		}
	}
	sends := strings.Count(out, "RC SEND Only QP=") + strings.Count(out, "UD SEND only QP=") +
		strings.Count(out, "UD SEND only with Immediate QP=")
	if sends != 20 {
		t.Errorf("capture has %d data SENDs, want 20:\n%s", sends, out)
	}
	if malformed, _ := interop.TsharkMalformed(t, pcap); malformed > 0 {
		t.Errorf("tshark finds %d malformed frames in %s", malformed, pcap)
	}
}
