package main

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPcapNGFile: --pcap FILE.pcapng writes pcapng (any other name classic
// pcap), which tshark reads back whole: pingpong's client writes a pcapng,
// its server a pcap, and both hold the exchange's RoCEv2 frames.
func TestPcapNGFile(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not installed: nothing independent to read the files back")
	}
	dir := t.TempDir()
	ng, classic := filepath.Join(dir, "client.pcapng"), filepath.Join(dir, "server.pcap")
	r := runPingpongPair(t, "127.0.86.1", "127.0.86.2", []string{"rc", "-g", "1", "-n", "10", "-s", "5000"},
		[]string{"--pcap", classic}, []string{"--pcap", ng})
	if r.srvCode != 0 || r.cliCode != 0 {
		t.Fatalf("exchange failed\n%s", r)
	}
	for _, c := range []struct {
		file  string
		magic uint32
	}{{ng, 0x0a0d0d0a}, {classic, 0xa1b23c4d}} {
		b, err := os.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) < 4 || binary.LittleEndian.Uint32(b) != c.magic {
			t.Fatalf("%s: magic % x, want %#x", filepath.Base(c.file), b[:min(len(b), 4)], c.magic)
		}
		out, err := exec.Command(tshark, "-r", c.file, "-T", "fields", "-e", "udp.dstport").CombinedOutput()
		if err != nil {
			t.Fatalf("tshark -r %s: %v\n%s", filepath.Base(c.file), err, out)
		}
		var n int
		for _, l := range strings.Split(string(bytes.TrimSpace(out)), "\n") {
			if strings.HasPrefix(l, "Running as") { // tshark's warning as root
				continue
			}
			if l != "4791" {
				t.Fatalf("%s: a frame to UDP port %q, want 4791", filepath.Base(c.file), l)
			}
			n++
		}
		if n < 20 {
			t.Fatalf("%s: tshark read %d frames", filepath.Base(c.file), n)
		}
	}
}
