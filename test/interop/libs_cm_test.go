package interop_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/internal/rpingtext"
	"github.com/softrdma/softrdma/test/interop"
)

// requireRdmacm skips the test, in one line, when softrdma's libraries have no
// librdmacm.so.1 (rping and perftest -R cannot load without it).
func requireRdmacm(t *testing.T) {
	t.Helper()
	if !interop.HasLib(t, "librdmacm.so.1") {
		t.Skip("interop: softrdma's libraries have no librdmacm.so.1")
	}
}

// cmCase is one rdma_cm exchange of an unmodified Debian tool with itself:
// rping or perftest -R (bandwidth and latency), one end on softrdma's
// libraries, the other on the kernel's rxe or siw.
type cmCase struct {
	args      []string // both ends' options (the client's gets -a ADDR or ADDR)
	libServer bool
}

func (c cmCase) tool() string { return c.args[0] }

func (c cmCase) String() string {
	dir := "kernel-server"
	if c.libServer {
		dir = "lib-server"
	}
	return fmt.Sprintf("%s/%s", strings.Join(c.args, ""), dir)
}

// rping's options: ten 64-byte pings, verbose (-v), the client verifying (-V).
const rpingCount, rpingSize = 10, 64

// cmCases are the rdma_cm exchanges, both directions.
func cmCases() []cmCase {
	var cases []cmCase
	for _, server := range []bool{false, true} {
		for _, a := range [][]string{
			{"rping"},
			{"ib_write_bw", "-R", "-F", "-n", "5", "-s", "65536"},
			{"ib_read_bw", "-R", "-F", "-n", "5", "-s", "4096"},
			{"ib_send_bw", "-R", "-F", "-n", "5", "-s", "10000"},
			{"ib_write_lat", "-R", "-F", "-n", "5", "-s", "64"},
			{"ib_read_lat", "-R", "-F", "-n", "5", "-s", "64"},
			{"ib_send_lat", "-R", "-F", "-n", "5", "-s", "64"},
		} {
			cases = append(cases, cmCase{args: a, libServer: server})
		}
	}
	return cases
}

// runCMCase runs c between softrdma's libraries (devices spec, on the host)
// and the kernel's rdma_cm device in g, capturing on the guest's tap with
// filter, and checks both ends' output.
func runCMCase(t *testing.T, h *interop.Harness, g *interop.Guest, spec, filter string, c cmCase) (pcap string) {
	pcap = filepath.Join(t.TempDir(), "tap.pcap")
	serverArgs, clientArgs := c.args[1:], c.args[1:]
	port := libPort
	if c.tool() == "rping" {
		port = 7174
		srv := interop.HostIPv4
		if !c.libServer {
			srv = g.IP
		}
		serverArgs = []string{"-s", "-a", srv, "-v"}
		clientArgs = []string{"-c", "-a", srv, "-C", fmt.Sprint(rpingCount), "-S", fmt.Sprint(rpingSize), "-v", "-V"}
	} else if c.libServer {
		clientArgs = append(clientArgs, interop.HostIPv4)
	} else {
		clientArgs = append(clientArgs, g.IP)
	}
	iwarp := strings.HasPrefix(spec, "iwarp:")

	stop := g.PcapAll(t, pcap, filter)
	var lib, kern interop.Result
	if c.libServer {
		var p *interop.Proc
		release := func() {}
		clientCmd := append([]string{c.tool()}, clientArgs...)
		if c.tool() == "rping" {
			p = h.LibStart(t, spec, c.tool(), serverArgs...)
		} else { // perftest's second connection waits for the server's listen
			gate := g.CMGateServer(t)
			if iwarp { // and the server's teardown for the siw client's end
				release, _ = gate.HoldTeardown(t)
			}
			p = h.LibStartEnv(t, spec, gate.Env, c.tool(), serverArgs...)
			clientCmd = append(append([]string{"env"}, gate.ClientEnv...), clientCmd...)
		}
		if iwarp { // iWARP listens on TCP; RoCE's rdma_cm on QP1: the client retries
			if !p.WaitListenTCP(port, time.Minute) {
				t.Fatalf("the libraries' %s server did not listen:\n%s", c.tool(), p.Wait(time.Second))
			}
		}
		kern = retryCMClient(func() interop.Result {
			return g.Exec(t, libExchangeTimeout, clientCmd...)
		})
		release()
		wait := libExchangeTimeout
		if !kern.OK() {
			wait = 10 * time.Second
		}
		lib = p.Wait(wait)
	} else {
		job := g.ExecBackground(t, append([]string{c.tool()}, serverArgs...)...)
		g.WaitCMListen(t, port, time.Minute)
		lib = retryCMClient(func() interop.Result {
			ctx, cancel := context.WithTimeout(context.Background(), libExchangeTimeout)
			defer cancel()
			if c.tool() != "rping" { // perftest's second connection waits for the server's listen
				return h.LibRunCMGated(ctx, t, g, port, spec, c.tool(), clientArgs...)
			}
			return h.LibRun(ctx, t, spec, c.tool(), clientArgs...)
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
		t.Fatalf("exchange failed\nsoftrdma's libraries:\n%s\nkernel:\n%s", lib, kern)
	}
	client, server := kern, lib
	if !c.libServer {
		client, server = lib, kern
	}
	if c.tool() == "rping" {
		rpingCheck(t, client, server, rpingtext.Lines("ping data: ", rpingCount, rpingSize), rpingtext.Lines("server ping data: ", rpingCount, rpingSize))
		return pcap
	}
	// perftest over rdma_cm: both print their result row with the
	// iterations, but ib_read_lat's server, which only answers the reads.
	rows := []interop.Result{client, server}
	if c.tool() == "ib_read_lat" {
		rows = rows[:1]
	}
	for _, r := range rows {
		row := perfResultRow(r.Stdout)
		if f := strings.Fields(row); len(f) < 2 || f[1] != "5" {
			t.Errorf("no result row of 5 iterations:\n%s", r)
		}
	}
	t.Logf("client: %s", perfResultRow(client.Stdout))
	return pcap
}

// TestLibsSiw runs Debian's unmodified rping and perftest over rdma_cm (-R:
// ib_write_bw, ib_read_bw, ib_send_bw) with one end on softrdma's libraries on
// the host (an iWARP device on the bridge's address) and the other on the
// kernel's siw in one guest, the libraries as the server and as the client.
// A client is rerun only while its first connect is refused (the server not
// listening yet, refusedConnect), perftest's second connection waits for the
// server's second listen (cmgate.go), and a perftest server on the libraries
// holds its teardown until the siw client has ended (HoldTeardown: siw fails
// a last SEND it has already sent when the server's FIN overtakes its
// transmit path). rping's lines must be exactly
// rping's, perftest's result rows have the iterations asked for; the capture
// on the guest's tap decodes with 0 errors (MPA start frames and FPDUs of both
// stacks), has the MPA request and reply, and tshark calls no frame
// malformed and dissects iWARP's DDP/RDMAP in it.
func TestLibsSiw(t *testing.T) {
	h := interop.Require(t)
	interop.Libs(t)
	requireRdmacm(t)
	g := h.Boot(t, "libs82", interop.BootOptions{IP: "10.77.0.82", NoIPv6: true, Links: "siw"})
	for _, c := range cmCases() {
		t.Run(c.String(), func(t *testing.T) {
			filter := "tcp port 18515"
			if c.tool() == "rping" {
				filter = "tcp port 7174"
			}
			pcap := runCMCase(t, h, g, "iwarp:"+interop.HostIPv4, filter, c)
			checkIWARPCapture(t, pcap)
		})
	}
}

// checkIWARPCapture: softrdma decode finds no error and the MPA negotiation;
// tshark finds no malformed frame and dissects DDP/RDMAP.
func checkIWARPCapture(t *testing.T, pcap string) {
	t.Helper()
	out := interop.Decode(t, pcap)
	for _, want := range []string{"MPA Request", "MPA Reply"} {
		if !strings.Contains(out, want) {
			t.Errorf("the capture has no %s:\n%s", want, lastLines(out, 12))
		}
	}
	ts := interop.TsharkFrames(t, pcap)
	if ts.Malformed > 0 {
		t.Errorf("tshark finds %d malformed frames in %s", ts.Malformed, filepath.Base(pcap))
	}
	if ts.Protocols != nil && ts.Protocols["iwarp_ddp_rdmap"] == 0 {
		t.Errorf("tshark dissects no frame as iWARP DDP/RDMAP:\n%s", lastLines(out, 12))
	}
}
