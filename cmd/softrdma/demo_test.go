package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/cmd/softrdma/decode"
)

// TestDemo runs softrdma demo as a user would: every operation verified, exit
// 0, on a clean and on a lossy link; the --pcap capture decodes with no error.
func TestDemo(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"clean", []string{"-n", "40"}},
		{"loss", []string{"-n", "40", "--loss", "0.1"}},
		{"corrupt", []string{"-n", "20", "--corrupt", "0.02", "-s", "4096"}},
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
			f, err := os.Open(pcap)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			res, err := decode.Run(f, io.Discard, decode.Options{})
			if err != nil {
				t.Fatal(err)
			}
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
	var res demoResult
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
			f, err := os.Open(pcap)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var text bytes.Buffer
			res, err := decode.Run(f, &text, decode.Options{Summary: true, Flows: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Errors) != 0 || len(res.Notes) != 0 {
				t.Fatalf("decode: errors %v, notes %v", res.Errors, res.Notes)
			}
			// 50 of each: Send, Write, Read Request/Response, 2×50 atomics each way;
			// plus 2 start frames and the zero-length SEND after each of the 5 phases.
			if want := 2 + 50*8 + 5; res.Packets != want {
				t.Errorf("decode found %d MPA frames, want %d\n%s", res.Packets, want, text.String())
			}
		})
	}
	var out, errOut bytes.Buffer
	if code := demoCmd([]string{"--transport", "iwarp", "--loss", "0.1"}, &out, &errOut); code != 2 {
		t.Errorf("--transport iwarp --loss: exit %d, want 2", code)
	}
}
