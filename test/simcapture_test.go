package test

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/decode"
	"github.com/softrdma/softrdma/netio"
	"github.com/softrdma/softrdma/sim"
)

// TestSimCapture captures a lossy mixed RC run on the simulated link, both as
// transmitted (before loss) and as delivered, and decodes each capture with
// softrdma decode: every frame is a well-formed RoCEv2 packet whose ICRC
// verifies. If tshark is installed, it must find nothing malformed either and
// must decode every frame as InfiniBand.
func TestSimCapture(t *testing.T) {
	// SIMCAP_DIR keeps the two captures for a look with Wireshark.
	dir := os.Getenv("SIMCAP_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	txPath, rxPath := filepath.Join(dir, "transmitted.pcap"), filepath.Join(dir, "delivered.pcap")
	tx, err := os.Create(txPath)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	rx, err := os.Create(rxPath)
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()

	cfg := baseLink()
	cfg.Loss, cfg.Duplicate = 0.05, 0.01
	p := newSimPair(t, 900, cfg)
	if _, err := p.net.CaptureLinkAt(p.link, tx, netio.FormatPcap, sim.CaptureTransmitted); err != nil {
		t.Fatal(err)
	}
	if _, err := p.net.CaptureLink(p.link, rx); err != nil {
		t.Fatal(err)
	}
	c := p.connectRC(defaultRC())
	n := 400
	if testing.Short() {
		n = 100
	}
	s := newRCStream(p, c, buildWorkload(900, opMixes[4].kinds, n, opMixes[4].maxSize))
	if err := s.run(time.Hour, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.finish(time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := p.net.FlushCaptures(); err != nil {
		t.Fatal(err)
	}
	var sent, delivered uint64
	for _, d := range []sim.Direction{sim.AtoB, sim.BtoA} {
		st := p.link.Stats(d)
		sent += st.Sent
		delivered += st.Delivered
	}
	if c.qa.Counters().Retransmissions == 0 || delivered == sent {
		t.Fatal("the run lost nothing: not a lossy capture")
	}
	for _, cp := range []struct {
		name   string
		path   string
		frames uint64
	}{{"transmitted", txPath, sent}, {"delivered", rxPath, delivered}} {
		t.Run(cp.name, func(t *testing.T) {
			f, err := os.Open(cp.path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			res, err := decode.Run(f, io.Discard, decode.Options{Summary: true, Flows: true})
			if err != nil {
				t.Fatal(err)
			}
			for i, e := range res.Errors {
				if i == 5 {
					t.Errorf("... %d errors in all", len(res.Errors))
					break
				}
				t.Errorf("decode: %v", e)
			}
			if uint64(res.Frames) != cp.frames || res.RDMAFrames != res.Frames || res.Packets != res.Frames {
				t.Errorf("decode read %d frames (%d RDMA, %d packets), the link %s %d",
					res.Frames, res.RDMAFrames, res.Packets, cp.name, cp.frames)
			}
			if len(res.Flows) != 1 || res.Flows[0].Packets != res.Frames || res.Flows[0].Errors != 0 {
				t.Errorf("flows: %+v, want one RC flow of %d packets", res.Flows, res.Frames)
			}
			t.Logf("%s: %d frames, %d errors, notes %d", cp.name, res.Frames, len(res.Errors), len(res.Notes))
			tsharkCheck(t, cp.path, res.Frames)
		})
	}
}

// tsharkCheck runs tshark, if installed, on a capture: nothing malformed
// (with the RPC-over-RDMA dissector disabled: it claims SEND payloads
// heuristically and throws on the empty ones, marking a well-formed zero-length
// SEND Only malformed), and every frame decoded as InfiniBand.
func tsharkCheck(t *testing.T, path string, frames int) {
	t.Helper()
	bin, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark is not on PATH: skipping the Wireshark cross-check")
	}
	run := func(args ...string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append([]string{"-n", "-r", path, "--disable-protocol", "rpcordma"}, args...)...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("tshark %v: %v: %s", args, err, errb.String())
		}
		return out.String()
	}
	if out := run("-Y", "_ws.malformed"); strings.TrimSpace(out) != "" {
		lines := strings.SplitN(out, "\n", 6)
		t.Errorf("tshark finds malformed frames:\n%s", strings.Join(lines[:min(5, len(lines))], "\n"))
	}
	ib := strings.Fields(run("-Y", "infiniband", "-T", "fields", "-e", "frame.number"))
	if len(ib) != frames {
		t.Errorf("tshark decodes %d of %d frames as InfiniBand", len(ib), frames)
	}
}
