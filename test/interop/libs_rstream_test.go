package interop_test

import (
	"context"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/softrdma/softrdma/test/interop"
)

// rstreamPort is the rsockets port of the rstream exchanges (rstream's
// default is 7471, ucmatose's too).
const rstreamPort = 7472

// rstreamArgs: blocking calls, rstream's own check of every transfer, 4
// transfers of 200000 octets each way through a 128 KiB receive buffer
// (-B 65536): the credits and the buffer's wrap are crossed.
var rstreamArgs = []string{"-T", "b", "-T", "v", "-S", "200000", "-C", "4", "-B", "65536", "-p", strconv.Itoa(rstreamPort)}

// rstreamRow is rstream's result row for rstreamArgs.
var rstreamRow = regexp.MustCompile(`(?m)^custom\s+\S+\s+4\s+1\s+`)

// runRstreamCase runs Debian's rstream between softrdma's libraries on the
// host (spec) and rdma-core's rsockets on the kernel's rxe or siw in g,
// capturing filter on the guest's tap: both ends must print their result row
// (rstream -T v checks the octets of every transfer) and exit 0.
func runRstreamCase(t *testing.T, h *interop.Harness, g *interop.Guest, spec, filter string, libServer bool) (pcap string) {
	if r := g.Exec(t, time.Minute, "which", "rstream"); !r.OK() {
		t.Skip("the guest has no rstream (rdmacm-utils)")
	}
	pcap = filepath.Join(t.TempDir(), "tap.pcap")
	srv := g.IP
	if libServer {
		srv = interop.HostIPv4
	}
	serverArgs := append([]string{"-b", srv}, rstreamArgs...)
	clientArgs := append([]string{"-s", srv}, rstreamArgs...)
	stop := g.PcapAll(t, pcap, filter)
	var lib, kern interop.Result
	if libServer {
		p := h.LibStartEnv(t, spec, []string{"SOFTRDMA_DEBUG=1"}, "rstream", serverArgs...)
		kern = retryCMClient(func() interop.Result {
			return g.Exec(t, libExchangeTimeout, append([]string{"rstream"}, clientArgs...)...)
		})
		wait := libExchangeTimeout
		if !kern.OK() {
			wait = 10 * time.Second
		}
		lib = p.Wait(wait)
	} else {
		job := g.ExecBackground(t, append([]string{"rstream"}, serverArgs...)...)
		g.WaitCMListen(t, rstreamPort, time.Minute)
		lib = retryCMClient(func() interop.Result {
			ctx, cancel := context.WithTimeout(context.Background(), libExchangeTimeout)
			defer cancel()
			return h.LibRun(ctx, t, spec, "rstream", clientArgs...)
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
		t.Logf("the capture, its end:\n%s", lastLines(interop.Decode(t, pcap), 60))
		t.Fatalf("exchange failed\nsoftrdma's libraries:\n%s\nkernel:\n%s", lib, kern)
	}
	for _, r := range []interop.Result{lib, kern} {
		if !rstreamRow.MatchString(r.Stdout) {
			t.Errorf("rstream printed no result row:\n%s", r)
		}
	}
	return pcap
}

// rstreamDirs names the two directions of an exchange.
var rstreamDirs = []struct {
	name      string
	libServer bool
}{{"kernel-server", false}, {"lib-server", true}}

// TestLibsRstreamRXE runs rstream (rsockets, rdmacm-utils) between softrdma's
// libraries over RoCE on the host and rdma-core's rsockets on the kernel's
// rxe, both directions. The capture decodes with no error and holds the IB
// CM's REQ, REP and RTU and the data's RDMA WRITEs with immediate.
func TestLibsRstreamRXE(t *testing.T) {
	h := interop.Require(t)
	interop.Libs(t)
	requireRdmacm(t)
	g := h.Boot(t, "libs81", interop.BootOptions{IP: "10.77.0.81", NoIPv6: true, Links: "rxe"})
	for _, d := range rstreamDirs {
		t.Run(d.name, func(t *testing.T) {
			pcap := runRstreamCase(t, h, g, libDevice, "udp port 4791", d.libServer)
			out := checkLibCapture(t, pcap, "RDMA WRITE with Immediate")
			for _, m := range []string{"CM REQ", "CM REP", "CM RTU"} {
				if !regexp.MustCompile(regexp.QuoteMeta(m)).MatchString(out) {
					t.Errorf("the capture has no %s:\n%s", m, lastLines(out, 12))
				}
			}
		})
	}
}

// TestLibsRstreamSiw is TestLibsRstreamRXE over iWARP, against the kernel's
// siw: rsockets there write, then send the 4-octet message inline
// (RS_OPT_MSG_SEND). The capture decodes with no error and holds the MPA
// negotiation; tshark dissects DDP/RDMAP.
func TestLibsRstreamSiw(t *testing.T) {
	h := interop.Require(t)
	interop.Libs(t)
	requireRdmacm(t)
	g := h.Boot(t, "libs82", interop.BootOptions{IP: "10.77.0.82", NoIPv6: true, Links: "siw"})
	for _, d := range rstreamDirs {
		t.Run(d.name, func(t *testing.T) {
			pcap := runRstreamCase(t, h, g, "iwarp:"+interop.HostIPv4, "tcp port "+strconv.Itoa(rstreamPort), d.libServer)
			checkIWARPCapture(t, pcap)
		})
	}
}
