package verbsdev_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/decode"
)

// TestPcapEnv runs ibv_rc_pingpong at both ends on softrdma's library (pair)
// with SOFTRDMA_PCAP=DIR/t-%p.EXT: each process captures its device's traffic
// into its own file (%p, its PID), pcapng for .pcapng and classic pcap for
// .pcap, complete at exit (the library's destructor flushes it). Each file
// decodes with no error (every ICRC verified) and holds both directions' 20
// SEND messages; tshark, when installed, reads it and finds no malformed
// frame and as many InfiniBand frames as decode's RDMA frames.
func TestPcapEnv(t *testing.T) {
	lib := buildLib(t)
	const n = 20
	for _, tt := range []struct {
		ext   string
		magic uint32 // the file's first four octets, little-endian
	}{
		{".pcapng", 0x0a0d0d0a},
		{".pcap", 0xa1b23c4d}, // nanosecond pcap
	} {
		t.Run(tt.ext[1:], func(t *testing.T) {
			dir := t.TempDir()
			t.Setenv("SOFTRDMA_PCAP", filepath.Join(dir, "t-%p"+tt.ext))
			pair(t, lib, "ibv_rc_pingpong", "-g", "1", "-n", strconv.Itoa(n), "-s", "64")
			files, _ := filepath.Glob(filepath.Join(dir, "t-*"))
			if len(files) != 2 {
				t.Fatalf("capture files %v, want one per process", files)
			}
			for _, name := range files {
				b, err := os.ReadFile(name)
				if err != nil {
					t.Fatal(err)
				}
				if len(b) < 4 || binary.LittleEndian.Uint32(b) != tt.magic {
					t.Fatalf("%s: starts % x, want the magic %#x", name, b[:min(len(b), 4)], tt.magic)
				}
				res, err := decode.Run(bytes.NewReader(b), io.Discard, decode.Options{Flows: true, Summary: true})
				if err != nil {
					t.Fatalf("%s: decode: %v", name, err)
				}
				sends := 0
				for _, fl := range res.Flows {
					sends += fl.Messages["SEND"]
				}
				if len(res.Errors) != 0 || sends < 2*n {
					t.Errorf("%s: decode: %d RDMA frames, %d SEND messages, %d errors %v; want at least %d SENDs, no error",
						name, res.RDMAFrames, sends, len(res.Errors), res.Errors, 2*n)
				}
				t.Logf("%s: %d frames, %d RDMA frames, %d SEND messages, %d errors", filepath.Base(name), res.Frames, res.RDMAFrames, sends, len(res.Errors))
				tsharkCheck(t, name, res.RDMAFrames)
			}
		})
	}
}

// TestPcapEnvIWARP runs rping on an iWARP device at both ends with
// SOFTRDMA_PCAP=DIR/iw-%p.pcapng: the connections rdma_cm makes in the
// library are recorded (as TCP segments carrying MPA), one file per process,
// which decodes with no error and holds the FPDUs; tshark, when installed,
// reads it, finds no malformed frame and dissects iWARP's DDP/RDMAP.
// Before the fix the library's rdma_cm did not take the device's capture
// hook and both files held no frame.
func TestPcapEnvIWARP(t *testing.T) {
	lib := buildLib(t)
	needTools(t, "rping")
	dir := t.TempDir()
	t.Setenv("SOFTRDMA_PCAP", filepath.Join(dir, "iw-%p.pcapng"))
	port := fmt.Sprint(20000 + rand.IntN(20000))
	common := []string{"-p", port, "-C", "5", "-v", "-V"}
	_, _, attempts := cmPairEnv(t, lib, "iwarp", "rping", "rping", nil,
		func(a string) []string { return append([]string{"-s", "-a", a}, common...) },
		func(a string) []string { return append(append([]string{"-c", "-a", a}, common...), cliSource(a)...) })
	if attempts != 1 {
		t.Skipf("%d pairs started: the killed ones' captures are incomplete", attempts)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "iw-*"))
	if len(files) != 2 {
		t.Fatalf("capture files %v, want one per process", files)
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		res, err := decode.Run(bytes.NewReader(b), io.Discard, decode.Options{Flows: true, Summary: true})
		if err != nil {
			t.Fatalf("%s: decode: %v", name, err)
		}
		if len(res.Errors) != 0 || res.RDMAFrames < 5 {
			t.Errorf("%s: decode: %d frames, %d RDMA frames, %d errors %v; want the pings' FPDUs, no error",
				name, res.Frames, res.RDMAFrames, len(res.Errors), res.Errors)
		}
		t.Logf("%s: %d frames, %d RDMA frames, %d errors", filepath.Base(name), res.Frames, res.RDMAFrames, len(res.Errors))
		if _, err := exec.LookPath("tshark"); err != nil {
			t.Log("tshark not installed: its checks skipped")
			continue
		}
		for _, c := range []struct {
			filter string
			ok     func(int) bool
		}{{"_ws.malformed", func(n int) bool { return n == 0 }}, {"iwarp_ddp_rdmap", func(n int) bool { return n > 0 }}} {
			var o, e bytes.Buffer
			cmd := exec.Command("tshark", "-r", name, "-Y", c.filter, "-T", "fields", "-e", "frame.number")
			cmd.Stdout, cmd.Stderr = &o, &e
			if err := cmd.Run(); err != nil {
				t.Fatalf("tshark -r %s: %v\n%s", name, err, e.String())
			}
			if n := strings.Count(o.String(), "\n"); !c.ok(n) {
				t.Errorf("%s: tshark finds %d frames of %s", name, n, c.filter)
			}
		}
	}
}
