package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/decode"
	"github.com/softrdma/softrdma/demo"
)

// TestDemo runs softrdma demo as a user would: every operation verified, exit
// 0, on a clean and on a lossy link; the --pcap capture decodes with no error
// (the corrupting link's in the senders' view: in the receivers', the default,
// its corrupted frames fail their ICRC, TestDemoPcapViews).
func TestDemo(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"clean", []string{"-n", "40"}},
		{"loss", []string{"-n", "40", "--loss", "0.1"}},
		{"corrupt", []string{"-n", "20", "--corrupt", "0.02", "-s", "4096", "--pcap-view", "sent"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pcap := filepath.Join(t.TempDir(), "demo.pcap")
			var out, errOut bytes.Buffer
			code := demoCmd(append(tc.args, "--pcap", pcap), &out, &errOut)
			if code != 0 {
				t.Fatalf("exit %d\n%s%s", code, out.String(), errOut.String())
			}
			for _, op := range []string{"SEND", "RDMA_WRITE", "RDMA_READ", "ATOMIC_FETCH_ADD", "ATOMIC_CMP_SWAP", "every byte verified"} {
				if !strings.Contains(out.String(), op) {
					t.Errorf("output lacks %q:\n%s", op, out.String())
				}
			}
			res, _ := decodeFile(t, pcap, decode.Options{})
			if len(res.Errors) != 0 || res.RDMAFrames == 0 {
				t.Fatalf("decode of the demo capture: %d RDMA frames, errors %v", res.RDMAFrames, res.Errors)
			}
		})
	}
}

// TestDemoFailsLoudly: a link that loses almost everything exhausts the retry
// budget; the demo must say so and exit non-zero, not report success.
func TestDemoFailsLoudly(t *testing.T) {
	var out, errOut bytes.Buffer
	code := demoCmd([]string{"-n", "5", "--loss", "0.95", "--json"}, &out, &errOut)
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, out.String(), errOut.String())
	}
	var res demo.Result
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out.String())
	}
	if res.Verified || len(res.Operations) == 0 || res.Operations[0].Verified {
		t.Fatalf("result claims success: %+v", res)
	}
	if !strings.Contains(res.Operations[0].Detail, "IBV_WC_RETRY_EXC_ERR") {
		t.Errorf("first operation's detail %q does not name IBV_WC_RETRY_EXC_ERR", res.Operations[0].Detail)
	}
}

func TestDemoFlags(t *testing.T) {
	for _, args := range [][]string{{"--transport", "bogus"}, {"-n", "0"}, {"--nosuchflag"}} {
		var out, errOut bytes.Buffer
		if code := demoCmd(args, &out, &errOut); code != 2 {
			t.Errorf("demo %v: exit %d, want 2", args, code)
		}
	}
}

// TestDemoIWARP runs softrdma demo --transport iwarp: every phase (atomics
// included, through RFC 7306 between softrdma peers) verified over loopback TCP,
// with and without MPA CRCs; the --pcap capture synthesised from the
// connection's octets decodes with no error and holds every FPDU.
func TestDemoIWARP(t *testing.T) {
	for _, crc := range []string{"accept", "require"} {
		t.Run(crc, func(t *testing.T) {
			pcap := filepath.Join(t.TempDir(), "demo.pcap")
			var out, errOut bytes.Buffer
			code := demoCmd([]string{"--transport", "iwarp", "-n", "50", "-s", "5000", "--crc", crc, "--pcap", pcap}, &out, &errOut)
			if code != 0 {
				t.Fatalf("exit %d\n%s%s", code, out.String(), errOut.String())
			}
			for _, want := range []string{"SEND", "RDMA_WRITE", "RDMA_READ", "ATOMIC_FETCH_ADD", "ATOMIC_CMP_SWAP",
				"every byte verified", "RFC 7306 extensions true", "CRC " + map[string]string{"accept": "false", "require": "true"}[crc]} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
			res, text := decodeFile(t, pcap, decode.Options{Summary: true, Flows: true})
			if len(res.Errors) != 0 || len(res.Notes) != 0 {
				t.Fatalf("decode: errors %v, notes %v", res.Errors, res.Notes)
			}
			// 50 of each: Send, Write, Read Request/Response, 2×50 atomics each way;
			// plus 2 start frames and the zero-length SEND after each of the 5 phases.
			if want := 2 + 50*8 + 5; res.Packets != want {
				t.Errorf("decode found %d MPA frames, want %d\n%s", res.Packets, want, text)
			}
		})
	}
	var out, errOut bytes.Buffer
	if code := demoCmd([]string{"--transport", "iwarp", "--loss", "0.1"}, &out, &errOut); code != 2 {
		t.Errorf("--transport iwarp --loss: exit %d, want 2", code)
	}
}

// TestDemoPcapViews: demo --pcap records by default what each node received,
// so that decoding it agrees with the demo's summary (issue 19: it recorded
// the frames before the link's loss and corruption, and the decode showed
// neither). On a lossy link the received view lacks the dropped frames and
// decode sees PSN gaps; the sent view (--pcap-view sent) holds every frame
// and no gap. On a corrupting link the received view's bad frames are decode
// errors, ICRC errors among them; the sent view has none.
func TestDemoPcapViews(t *testing.T) {
	for _, tc := range []struct {
		name, view string
		args       []string
	}{
		{"loss received", "", []string{"-n", "40", "--loss", "0.1"}},
		{"loss sent", "sent", []string{"-n", "40", "--loss", "0.1"}},
		{"corrupt received", "received", []string{"-n", "20", "--corrupt", "0.02", "-s", "4096"}},
		{"corrupt sent", "sent", []string{"-n", "20", "--corrupt", "0.02", "-s", "4096"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pcap := filepath.Join(t.TempDir(), "demo.pcap")
			args := append(tc.args, "--json", "--pcap", pcap)
			if tc.view != "" {
				args = append(args, "--pcap-view", tc.view)
			}
			var out, errOut bytes.Buffer
			if code := demoCmd(args, &out, &errOut); code != 0 {
				t.Fatalf("exit %d\n%s%s", code, out.String(), errOut.String())
			}
			var demo demo.Result
			if err := json.Unmarshal(out.Bytes(), &demo); err != nil {
				t.Fatal(err)
			}
			res, _ := decodeFile(t, pcap, decode.Options{Flows: true})
			gaps := 0
			for _, fl := range res.Flows {
				gaps += fl.PSNGaps
			}
			sent := tc.view == "sent"
			wantFrames := demo.Frames
			if !sent {
				wantFrames -= demo.Dropped
			}
			if uint64(res.Frames) != wantFrames {
				t.Errorf("the capture holds %d frames; the demo put %d on the link and dropped %d: want %d",
					res.Frames, demo.Frames, demo.Dropped, wantFrames)
			}
			switch {
			case demo.Dropped > 0 && !sent && gaps == 0:
				t.Errorf("%d frames dropped, and decode of the received view sees no PSN gap", demo.Dropped)
			case sent && gaps != 0:
				t.Errorf("decode of the sent view sees %d PSN gaps, want none", gaps)
			}
			switch {
			case demo.Corrupted > 0 && !sent && (res.CRCErrors == 0 || uint64(len(res.Errors)) > demo.Corrupted):
				t.Errorf("%d frames corrupted; decode of the received view: %d errors, %d of them CRC errors",
					demo.Corrupted, len(res.Errors), res.CRCErrors)
			case (sent || demo.Corrupted == 0) && len(res.Errors) != 0:
				t.Errorf("decode: errors %v, want none", res.Errors)
			}
			if strings.HasPrefix(tc.name, "loss") && demo.Dropped == 0 || strings.HasPrefix(tc.name, "corrupt") && demo.Corrupted == 0 {
				t.Errorf("the link lost %d and corrupted %d frames: the case tests nothing", demo.Dropped, demo.Corrupted)
			}
		})
	}
	var out, errOut bytes.Buffer
	if code := demoCmd([]string{"--pcap-view", "both"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), `--pcap-view "both"`) {
		t.Errorf("--pcap-view both: exit %d, stderr %q; want 2 naming it", code, errOut.String())
	}
}

// TestDemoCounters: demo reports both nodes' counters as the counters
// snapshot softrdma stat gives (issue 23), in --json under "counters" and in
// the text as `rdma statistic` lines: node a's retransmissions are the
// table's, its packets out are node b's packets in (RoCE: on a link that
// loses none), and the ICRC drops the summary names are the snapshot's.
func TestDemoCounters(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"roce clean", []string{"-n", "20"}},
		{"roce loss", []string{"-n", "20", "--loss", "0.05"}},
		{"roce corrupt", []string{"-n", "20", "--corrupt", "0.02", "-s", "4096"}},
		{"iwarp", []string{"-n", "10", "--transport", "iwarp"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := demoCmd(append(tc.args, "--json"), &out, &errOut); code != 0 {
				t.Fatalf("exit %d\n%s%s", code, out.String(), errOut.String())
			}
			var res demo.Result
			if err := json.Unmarshal(out.Bytes(), &res); err != nil {
				t.Fatalf("--json output: %v\n%s", err, out.String())
			}
			devs := res.Counters.Devices
			if len(devs) != 2 || devs[0].Name != "a" || devs[1].Name != "b" {
				t.Fatalf("counters has devices %+v, want a and b", devs)
			}
			a, b := devs[0], devs[1]
			var retrans uint64
			for _, op := range res.Operations {
				retrans += op.Retransmissions
			}
			if a.Counters.Retransmissions != retrans {
				t.Errorf("node a's retransmissions %d, the table's %d", a.Counters.Retransmissions, retrans)
			}
			roce := strings.HasPrefix(tc.name, "roce")
			if a.Counters.PacketsOut == 0 || len(a.QPs) != 1 || len(b.QPs) != 1 || roce && a.QPs[0].DestQPN != b.QPs[0].QPN {
				t.Errorf("node a: %d packets out, QPs %+v; node b QPs %+v", a.Counters.PacketsOut, a.QPs, b.QPs)
			}
			if res.Dropped == 0 && res.Corrupted == 0 && a.Counters.PacketsOut != b.Counters.PacketsIn {
				t.Errorf("node a sent %d packets, node b received %d, on a link that lost none", a.Counters.PacketsOut, b.Counters.PacketsIn)
			}
			if icrc := a.Counters.Drops["bad_icrc"] + b.Counters.Drops["bad_icrc"]; icrc != res.BadICRC {
				t.Errorf("bad_icrc_dropped %d, the counters' drops.bad_icrc %d", res.BadICRC, icrc)
			}
			if roce && (a.Link == nil || a.Link.FramesOut == 0) {
				t.Errorf("node a's link counts %+v", a.Link)
			}

			out.Reset()
			if code := demoCmd(tc.args, &out, &errOut); code != 0 {
				t.Fatalf("exit %d\n%s%s", code, out.String(), errOut.String())
			}
			for _, line := range []string{"\nlink a/1 transport ", "\nqp a/1 lqpn ", "\nlink b/1 transport ", "\nqp b/1 lqpn "} {
				if !strings.Contains(out.String(), line) {
					t.Errorf("text output lacks %q:\n%s", line, out.String())
				}
			}
		})
	}
}
