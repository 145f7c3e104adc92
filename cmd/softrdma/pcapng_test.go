package main

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/decode"
	"github.com/softrdma/softrdma/internal/syncbuf"
	"github.com/softrdma/softrdma/internal/tcploop"
	"github.com/softrdma/softrdma/perf"
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

// TestPcapNGEveryCommand: every command's --pcap writes pcapng for a
// FILE.pcapng and classic pcap for any other name, and softrdma decode reads
// either back with frames and no error. Each command runs briefly (the
// client's capture where there are two sides): perf write_bw, bench (one
// 4 KiB WRITE row between two loopback addresses, no baseline), demo,
// conform --self (one clean case), rping (iWARP), cmatose and pingpong.
func TestPcapNGEveryCommand(t *testing.T) {
	type run func(t *testing.T, pcap string)
	for _, c := range []struct {
		name string
		run  run
	}{
		{"perf", runPerfPcap},
		{"bench", func(t *testing.T, pcap string) {
			net3 := loopbackNet()
			expectExit0(t, "bench", runCommand, []string{"bench", "--addrs", net3 + "1," + net3 + "2", "--backend", "udp", "--transport", "roce",
				"--tests", "write", "--sizes", "4K", "--time", "20ms", "--warm", "5ms", "--no-baseline", "--pcap-snaplen", "0", "--pcap", pcap})
		}},
		{"demo", func(t *testing.T, pcap string) {
			expectExit0(t, "demo", runCommand, []string{"demo", "-n", "10", "--pcap", pcap})
		}},
		{"conform", func(t *testing.T, pcap string) {
			expectExit0(t, "conform", runCommand, []string{"conform", "--self", "--case", "rc.dup.read", "--pcap", pcap})
		}},
		{"rping", func(t *testing.T, pcap string) {
			port := strconv.Itoa(tcploop.FreePort(t))
			var sOut, sErr syncbuf.Buffer
			done := make(chan int, 1)
			go func() {
				done <- rpingCmd([]string{"-s", "-a", "127.0.0.1", "-p", port, "--timeout", "30s"}, &sOut, &sErr)
			}()
			code, cOut, cErr := untilListening(50*time.Millisecond, []string{"refused"}, func(stdout, stderr io.Writer) int {
				return rpingCmd([]string{"-c", "-a", "127.0.0.1", "-p", port, "-C", "2", "-V", "--pcap", pcap, "--timeout", "30s"}, stdout, stderr)
			})
			if sc := <-done; code != 0 || sc != 0 {
				t.Fatalf("rping: client exit %d, server exit %d\n%s%s\n%s%s", code, sc, cOut, cErr, sOut.String(), sErr.String())
			}
		}},
		{"cmatose", func(t *testing.T, pcap string) {
			net3 := loopbackNet()
			srvIP, cliIP := net3+"1", net3+"2"
			extra := []string{"-p", strconv.Itoa(tcploop.FreePort(t)), "--timeout", "20s", "-C", "3"}
			var sOut, sErr syncbuf.Buffer
			done := make(chan int, 1)
			go func() { done <- cmatoseCmd(append([]string{"-b", srvIP}, extra...), &sOut, &sErr) }()
			code, cOut, cErr := untilListening(100*time.Millisecond, []string{"REJECTED", "UNREACHABLE"}, func(stdout, stderr io.Writer) int {
				return cmatoseCmd(append([]string{"-s", srvIP, "-b", cliIP, "--pcap", pcap}, extra...), stdout, stderr)
			})
			if sc := <-done; code != 0 || sc != 0 {
				t.Fatalf("cmatose: client exit %d, server exit %d\n%s%s\n%s%s", code, sc, cOut, cErr, sOut.String(), sErr.String())
			}
		}},
		{"pingpong", func(t *testing.T, pcap string) {
			net3 := loopbackNet()
			r := runPingpongPair(t, net3+"1", net3+"2", []string{"rc", "-g", "1", "-n", "5"}, nil, []string{"--pcap", pcap})
			if r.srvCode != 0 || r.cliCode != 0 {
				t.Fatalf("pingpong failed\n%s", r)
			}
		}},
	} {
		for _, f := range []struct {
			ext   string
			magic uint32 // of the first block (pcapng's Section Header Block) or of the file header
		}{{"pcapng", 0x0a0d0d0a}, {"pcap", 0xa1b23c4d}} {
			t.Run(c.name+"/"+f.ext, func(t *testing.T) {
				pcap := filepath.Join(t.TempDir(), c.name+"."+f.ext)
				c.run(t, pcap)
				b, err := os.ReadFile(pcap)
				if err != nil {
					t.Fatal(err)
				}
				if len(b) < 12 || binary.LittleEndian.Uint32(b) != f.magic {
					t.Fatalf("%s: starts % x, want magic %#x", filepath.Base(pcap), b[:min(len(b), 12)], f.magic)
				}
				if f.ext == "pcapng" && binary.LittleEndian.Uint32(b[8:]) != 0x1a2b3c4d {
					t.Errorf("%s: byte-order magic % x, want 4d 3c 2b 1a", filepath.Base(pcap), b[8:12])
				}
				res, out := decodeFile(t, pcap, decode.Options{})
				if len(res.Errors) != 0 || res.Frames == 0 {
					t.Errorf("decode: %d frames, errors %v\n%s", res.Frames, res.Errors, out)
				}
			})
		}
	}
}

// expectExit0 runs cmd's args and fails the test unless it exits 0.
func expectExit0(t *testing.T, name string, cmd func([]string, io.Writer, io.Writer) int, args []string) {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := cmd(args, &out, &errOut); code != 0 {
		t.Fatalf("%s: exit %d\n%s%s", name, code, out.String(), errOut.String())
	}
}

// runPerfPcap runs softrdma perf write_bw between two loopback addresses,
// the client with --pcap pcap.
func runPerfPcap(t *testing.T, pcap string) {
	net3 := loopbackNet()
	var srvErr bytes.Buffer
	o, _, _, err := perfParseArgs([]string{"write_bw", "-d", net3 + "1", "-p", "0", "-n", "20", "-s", "4096"}, &srvErr)
	if err != nil {
		t.Fatal(err)
	}
	addr := make(chan net.Addr, 1)
	o.Listening = func(a net.Addr) { addr <- a }
	done := make(chan int, 1)
	go func() { done <- perf.Main(o, io.Discard, &srvErr) }()
	var port int
	select {
	case a := <-addr:
		port = a.(*net.TCPAddr).Port
	case code := <-done:
		t.Fatalf("perf server exited %d before listening: %s", code, srvErr.String())
	case <-time.After(10 * time.Second):
		t.Fatal("the perf server does not listen")
	}
	var out, errOut bytes.Buffer
	code := perfCmd([]string{"write_bw", "-d", net3 + "2", "-p", strconv.Itoa(port), "-n", "20", "-s", "4096", "--pcap", pcap, net3 + "1"}, &out, &errOut)
	if sc := <-done; code != 0 || sc != 0 {
		t.Fatalf("perf: client exit %d, server exit %d\n%s%s\n%s", code, sc, out.String(), errOut.String(), srvErr.String())
	}
}
