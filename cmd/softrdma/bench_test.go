package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"github.com/softrdma/softrdma/bench"
	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/netio"
	"github.com/softrdma/softrdma/netio/netns"
	"github.com/softrdma/softrdma/roce"
)

// TestBenchRuns runs softrdma bench with tiny measurement times over every
// kind of row (RoCE on the UDP and TAP backends, and iWARP): it must print one JSON
// report with every row there, a number or a note in each, and one table
// without --json. Nothing is asserted about the numbers (benchMeasured): a
// window of 20 ms on a loaded machine may count nothing. Without root the
// command must say, in one line, that it skipped, and succeed.
func TestBenchRuns(t *testing.T) {
	args := []string{"--time", "60ms", "--warm", "10ms", "--sizes", "4K", "--backend", "udp,tap", "--transport", "roce,iwarp", "--qps", "1,3", "--mtu", "1500,9000"}
	var stdout, stderr bytes.Buffer
	if netns.Check() != nil {
		if code := benchCmd(args, &stdout, &stderr); code != 0 || !strings.HasPrefix(stdout.String(), "softrdma bench: skipped:") ||
			strings.Count(stdout.String(), "\n") != 1 {
			t.Fatalf("without namespaces: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
		}
		return
	}
	if code := benchCmd(append(args, "--json"), &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	var rep bench.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, stdout.String())
	}
	seen := map[string]bool{}
	for _, r := range rep.Rows {
		seen[r.Transport+" "+r.Test] = true
		if r.Note != "" {
			t.Logf("%s %s %s %d: %s", r.Transport, r.Backend, r.Test, r.Size, r.Note)
			continue
		}
		if err := benchMeasured(r); err != nil {
			t.Error(err)
		}
	}
	for _, want := range []string{"roce WRITE bw", "roce READ bw", "roce SEND bw", "roce WRITE rate", "roce READ rate",
		"roce SEND rate", "roce WRITE_IMM lat median", "roce READ lat p99", "roce SEND lat min", "iwarp WRITE bw",
		"roce WRITE bw 3 QPs", "roce setup 3 QPs", "roce memory 1 QPs", "iwarp WRITE bw 3 QPs", "iwarp setup 1 QPs", "iwarp memory 3 QPs",
		"roce cm setup 1 QPs", "roce cm setup 3 QPs", "iwarp cm setup 1 QPs", "iwarp cm setup 3 QPs"} {
		if !seen[want] {
			t.Errorf("no %q row", want)
		}
	}
	for _, r := range rep.Rows {
		// rdma_cm's connect rate (issue 22): a number on every backend.
		if strings.HasPrefix(r.Test, "cm setup ") && (r.Note != "" || r.Samples == 0 || r.Unit != "QPs/s") {
			t.Errorf("%s %s %s: samples %d, unit %q, note %q: want connects counted", r.Transport, r.Backend, r.Test, r.Samples, r.Unit, r.Note)
		}
	}
	jumbo := map[string]bool{} // rows at MTU 9000: the bandwidth rows only
	for _, r := range rep.Rows {
		if r.MTU == 9000 {
			jumbo[r.Transport+" "+r.Test] = true
		} else if r.MTU != 1500 {
			t.Errorf("%s %s at MTU %d, want 1500 or 9000", r.Transport, r.Test, r.MTU)
		}
	}
	for _, want := range []string{"roce WRITE bw", "roce READ bw", "roce SEND bw", "iwarp WRITE bw"} {
		if !jumbo[want] {
			t.Errorf("no %q row at MTU 9000 (rows there: %v)", want, jumbo)
		}
	}
	for _, not := range []string{"roce WRITE rate", "roce READ lat p99", "roce WRITE bw 3 QPs"} {
		if jumbo[not] {
			t.Errorf("a %q row at MTU 9000: only the bandwidth rows run at the second MTU", not)
		}
	}
	backends := map[string]bool{}
	for _, r := range rep.Rows {
		if r.Transport == "roce" && r.Test == "WRITE bw" {
			backends[r.Backend] = true
			if r.Note != "" {
				t.Errorf("RoCE WRITE over %s did not run: %s", r.Backend, r.Note)
			}
		}
		if r.Backend == "tap" && r.Test == "READ bw" && !strings.Contains(r.Baseline, "TAP host blaster") {
			t.Errorf("TAP READ row measured against %q, not the TAP-to-UDP direction READ data takes", r.Baseline)
		}
	}
	if !backends["udp"] || !backends["tap"] {
		t.Errorf("RoCE WRITE rows for backends %v, want udp and tap", backends)
	}

	stdout.Reset()
	stderr.Reset()
	traceFile := filepath.Join(t.TempDir(), "bench.trace")
	if code := benchCmd([]string{"--time", "30ms", "--warm", "5ms", "--sizes", "4K", "--backend", "udp", "--transport", "roce",
		"--tests", "write", "--trace", traceFile, "--mtu", "1500,9000"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[2], "transport") || !strings.Contains(lines[3], "WRITE bw") ||
		!strings.Contains(lines[3], " 1500 ") || !strings.Contains(lines[4], " 9000 ") {
		t.Errorf("table:\n%s", stdout.String())
	}
	if fi, err := os.Stat(traceFile); err != nil || fi.Size() == 0 {
		t.Errorf("--trace %s: %v, %v", traceFile, fi, err)
	}
}

// benchMeasured says whether a row without a note holds what a measurement
// gives: a unit, what its baseline is, and numbers that are not negative,
// NaN or infinite. A measured 0 passes: a test checks that the bench ran and
// printed its columns, not what a noisy machine let it measure.
func benchMeasured(r bench.Row) error {
	if r.Unit == "" || r.Baseline == "" || r.Samples < 0 || r.BaseCount < 0 {
		return fmt.Errorf("row without measurement: %+v", r)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"softrdma", r.Value}, {"baseline", r.Base}, {"ratio", r.Ratio}, {"allocs_per_msg", r.Allocs}, {"cpu_us_per_msg", r.CPUPerMsg}} {
		if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return fmt.Errorf("%s %s %d: %s %v is not a measurement", r.Transport, r.Test, r.Size, f.name, f.v)
		}
	}
	return nil
}

// TestBenchMeasured: a row that measured nothing (a loaded machine's empty
// window) passes; one without unit or baseline path, or with a NaN (0/0) or
// negative figure, does not.
func TestBenchMeasured(t *testing.T) {
	ok := bench.Row{Transport: "roce", Test: "WRITE bw", Size: 4096, Unit: "MiB/s", Baseline: "UDP blaster",
		Value: 812.5, Base: 1024, Ratio: 0.79, Allocs: 0.01, Samples: 1000, BaseCount: 4000}
	for _, c := range []struct {
		name string
		edit func(*bench.Row)
		ok   bool
	}{
		{"measured", func(*bench.Row) {}, true},
		{"baseline counted nothing", func(r *bench.Row) { r.Base, r.BaseCount, r.Ratio = 0, 0, 0 }, true},
		{"softrdma counted nothing", func(r *bench.Row) { r.Value, r.Samples, r.Ratio, r.Allocs = 0, 0, 0, 0 }, true},
		{"no unit", func(r *bench.Row) { r.Unit = "" }, false},
		{"no baseline path", func(r *bench.Row) { r.Baseline = "" }, false},
		{"NaN", func(r *bench.Row) { r.Value = math.NaN() }, false},
		{"infinite ratio", func(r *bench.Row) { r.Ratio = math.Inf(1) }, false},
		{"negative", func(r *bench.Row) { r.Base = -1 }, false},
	} {
		r := ok
		c.edit(&r)
		if err := benchMeasured(r); (err == nil) != c.ok {
			t.Errorf("%s: %v, want ok %v", c.name, err, c.ok)
		}
	}
}

// TestBenchFlags refuses what it cannot run, with exit code 2.
func TestBenchFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--transport", "ib"},
		{"--backend", "rdma"},
		{"--tests", "atomic"},
		{"--sizes", "lots"},
		{"--time", "0s"},
		{"--mtu", "100"},
		{"--qp-timeout", "32"},
		{"--qp-timeout", "-1"},
		{"extra"},
		{"--addrs", "127.0.0.1"},
		{"--addrs", "127.0.0.1,127.0.0.1"},
		{"--addrs", "127.0.0.1,::1"},
		{"--addrs", "127.0.0.1,127.0.0.2", "--backend", "afpacket"},
		{"--addrs", "127.0.0.1,127.0.0.2", "--backend", "udp,tap"},
	} {
		var stdout, stderr bytes.Buffer
		if code := benchCmd(args, &stdout, &stderr); code != 2 || stderr.Len() == 0 {
			t.Errorf("%q: exit %d, stderr %q", args, code, stderr.String())
		}
	}
}

// TestBenchAddrs runs softrdma bench between two loopback addresses of this
// namespace (--addrs), which needs no root: RoCE on the udp backend (the only
// backend then) and iWARP each give a WRITE row with a number beside its
// baseline (any number: benchMeasured), and the table says what it ran
// between.
func TestBenchAddrs(t *testing.T) {
	net3 := loopbackNet()
	args := []string{"--addrs", net3 + "1," + net3 + "2", "--time", "60ms", "--warm", "10ms", "--sizes", "4K", "--tests", "write"}
	var stdout, stderr bytes.Buffer
	if code := benchCmd(append(args, "--json"), &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	var rep bench.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, stdout.String())
	}
	var got []string
	for _, r := range rep.Rows {
		got = append(got, r.Transport+"/"+r.Backend)
		if r.Note != "" {
			t.Errorf("row not measured: %+v", r)
		} else if err := benchMeasured(r); err != nil {
			t.Error(err)
		}
	}
	if strings.Join(got, " ") != "roce/udp iwarp/tcp" {
		t.Errorf("rows %v, want roce/udp and iwarp/tcp", got)
	}
	// The counters of each transport's two devices, as softrdma stat's:
	// B, the requester, sent WRITEs, A received them.
	var names []string
	for i, d := range rep.Counters.Devices {
		names = append(names, d.Name)
		if i%2 == 0 && d.Counters.PacketsIn == 0 || i%2 == 1 && d.Counters.PacketsOut == 0 {
			t.Errorf("device %s: %d packets in, %d out", d.Name, d.Counters.PacketsIn, d.Counters.PacketsOut)
		}
		if (d.Link != nil) != (d.Transport == "roce") {
			t.Errorf("device %s (%s): link counts %+v", d.Name, d.Transport, d.Link)
		}
	}
	if want := "roce-udp-1500-a roce-udp-1500-b iwarp-tcp-1500-a iwarp-tcp-1500-b"; strings.Join(names, " ") != want {
		t.Errorf("counters' devices %v, want %s", names, want)
	}
	stdout.Reset()
	if code := benchCmd(args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	if !strings.HasPrefix(stdout.String(), "softrdma bench: addresses "+net3+"1 and "+net3+"2 of this host") {
		t.Errorf("table heading: %q", strings.SplitN(stdout.String(), "\n", 2)[0])
	}
}

// TestBenchPcap runs softrdma bench --pcap over RoCE (udp) and iWARP, WRITE
// bandwidth only, with the default snap length (128) and with whole frames (0):
// the file holds as many frames as the report says, each cut to the snap
// length the report gives; whole, every RDMA frame is well formed (ICRCs and
// CRCs verify: the IPv4 IDs the UDP sockets hid are recovered) and both
// devices' frames are there (each WRITE packet twice: sent by B, received by
// A); cut, the only errors are the cuts, and each RoCE frame still holds its
// BTH, with at least as many WRITE packets. The iWARP connections are there as
// synthesised TCP segments, with at least one WRITE FPDU per message measured.
func TestBenchPcap(t *testing.T) {
	if err := netns.Check(); err != nil {
		t.Skipf("needs network namespaces: %v", err)
	}
	for _, tc := range []struct {
		name    string
		snaplen []string
		want    int
	}{
		{"snaplen-default", nil, bench.DefaultSnaplen},
		{"whole-frames", []string{"--pcap-snaplen", "0"}, netio.CaptureSnapLen},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "bench.pcap")
			// --qp-timeout 20 (4.3 s): the capture slows the devices, and
			// under make test's load a responder fell 7 × 67 ms behind
			// (RETRY_EXC_ERR) with the default.
			args := append([]string{"--time", "60ms", "--warm", "10ms", "--sizes", "4K", "--backend", "udp", "--transport", "roce,iwarp",
				"--tests", "write", "--json", "--pcap", file, "--qp-timeout", "20"}, tc.snaplen...)
			var stdout, stderr bytes.Buffer
			if code := benchCmd(args, &stdout, &stderr); code != 0 {
				t.Fatalf("exit %d\n%s", code, stderr.String())
			}
			var rep bench.Report
			if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
				t.Fatalf("--json output: %v\n%s", err, stdout.String())
			}
			samples := map[string]int{}
			for _, r := range rep.Rows {
				if r.Note != "" {
					t.Fatalf("%s %s did not run: %s", r.Transport, r.Test, r.Note)
				}
				samples[r.Transport] += r.Samples
			}
			c := readPcap(t, file)
			if rep.PcapFrames != uint64(c.res.Frames) || rep.PcapSnaplen != tc.want {
				t.Errorf("report: %d frames, snap length %d; the file holds %d frames, want snap length %d",
					rep.PcapFrames, rep.PcapSnaplen, c.res.Frames, tc.want)
			}
			var roceWrites, iwarpWrites, tcpFrames int
			for i, data := range c.frames {
				if ci := c.infos[i]; ci.CaptureLength > tc.want || ci.Length < ci.CaptureLength || (ci.Length > tc.want) != (ci.CaptureLength < ci.Length) {
					t.Fatalf("frame %d: %d of %d bytes kept, snap length %d", i+1, ci.CaptureLength, ci.Length, tc.want)
				}
				if b := benchFrameBTH(data); b != nil {
					if !b.Opcode().Valid() {
						t.Fatalf("frame %d: BTH %x: opcode not valid", i+1, []byte(b))
					}
					switch b.Opcode() {
					case ib.OpcodeRCRDMAWriteFirst, ib.OpcodeRCRDMAWriteMiddle, ib.OpcodeRCRDMAWriteLast, ib.OpcodeRCRDMAWriteOnly:
						roceWrites++
					}
					continue
				}
				p := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
				if p.Layer(layers.LayerTypeTCP) != nil {
					tcpFrames++
				}
				if pk, ok := c.packets[i+1]; ok && pk.Transport == "iWARP" && pk.Opcode == "Write" {
					iwarpWrites++
				}
			}
			// 4 KiB over IB MTU 1024 is 4 packets, recorded by both devices.
			// (A loaded machine may measure no message in the windows: the warm-ups still write.)
			if roceWrites < 2*4*samples["roce"] || roceWrites == 0 || tcpFrames == 0 {
				t.Errorf("%d RoCE WRITE packets for %d messages, %d TCP segments", roceWrites, samples["roce"], tcpFrames)
			}
			if tc.want < 1000 {
				for _, e := range c.res.Errors {
					if !strings.Contains(e.Reason, "cut short") {
						t.Fatalf("an error not from the snap length: %v", e)
					}
				}
				return
			}
			if len(c.res.Errors) != 0 {
				t.Errorf("%d errors, the first %v", len(c.res.Errors), c.res.Errors[0])
			}
			if iwarpWrites < samples["iwarp"] || iwarpWrites == 0 {
				t.Errorf("%d iWARP WRITE FPDUs for %d messages", iwarpWrites, samples["iwarp"])
			}
		})
	}
}

// benchFrameBTH returns the BTH of an untagged Ethernet/IPv4/UDP frame to port
// 4791, read at its offset without decoding the rest (a frame cut by the snap
// length holds the headers only).
func benchFrameBTH(frame []byte) ib.BTH {
	if len(frame) < 14+20 || binary.BigEndian.Uint16(frame[12:]) != roce.EtherTypeIPv4 || frame[14+9] != roce.IPProtocolUDP {
		return nil
	}
	udp := 14 + 4*int(frame[14]&0x0f)
	if len(frame) < udp+8+ib.BTHLen || binary.BigEndian.Uint16(frame[udp+2:]) != roce.UDPPort {
		return nil
	}
	return ib.BTH(frame[udp+8 : udp+8+ib.BTHLen])
}
