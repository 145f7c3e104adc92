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
	sends := dataSends(out)
	if sends != 20 {
		t.Errorf("capture has %d data SENDs (not counting duplicates), want 20:\n%s", sends, out)
	}
	if malformed, _ := interop.TsharkMalformed(t, pcap); malformed > 0 {
		t.Errorf("tshark finds %d malformed frames in %s", malformed, pcap)
	}
}

// dataSends counts the data SENDs of softrdma decode's packet lines, each
// once: a retransmission the decoder marks [duplicate] (a slow peer under
// emulation; in CI the last SEND was resent 13 ms on, before rxe's ACKs came)
// is RC doing its job, not an extra message.
func dataSends(decoded string) int {
	n := 0
	for _, line := range strings.Split(decoded, "\n") {
		if strings.Contains(line, "[duplicate]") {
			continue
		}
		for _, op := range []string{"RC SEND Only QP=", "UD SEND only QP=", "UD SEND only with Immediate QP="} {
			n += strings.Count(line, op)
		}
	}
	return n
}

// TestDataSends: the CI capture's lines, a SEND resent and marked
// [duplicate] counted once; CM MADs (UD SEND only CM ...) not at all.
func TestDataSends(t *testing.T) {
	const decoded = ` 1 0.000000 10.77.0.63 → 10.77.0.1 RoCEv2 UD SEND only CM REQ QP=0x000001 PSN=2 AckReq len=256
 4 0.016747 10.77.0.1 → 10.77.0.63 RoCEv2 RC SEND Only QP=0x000012 PSN=3700248 AckReq len=100
 13 0.017033 10.77.0.1 → 10.77.0.63 RoCEv2 RC SEND Only QP=0x000012 PSN=3700257 AckReq len=100
 14 0.019037 10.77.0.63 → 10.77.0.1 RoCEv2 RC Acknowledge QP=0x00ab2e PSN=3700248 AETH ACK MSN=1
 15 0.029648 10.77.0.1 → 10.77.0.63 RoCEv2 RC SEND Only QP=0x000012 PSN=3700257 AckReq len=100 [duplicate]
 26 0.039344 10.77.0.63 → 10.77.0.1 RoCEv2 RC SEND Only QP=0x00ab2e PSN=11475066 AckReq len=100
 27 0.040000 10.77.0.63 → 10.77.0.1 RoCEv2 UD SEND only QP=0x000012 PSN=1 len=100
 28 0.041000 10.77.0.63 → 10.77.0.1 RoCEv2 UD SEND only with Immediate QP=0x000012 PSN=2 len=100
`
	if got := dataSends(decoded); got != 5 {
		t.Errorf("dataSends = %d, want 5", got)
	}
}
