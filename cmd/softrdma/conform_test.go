package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"math/bits"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"github.com/spf13/pflag"

	"github.com/softrdma/softrdma/conform"
	"github.com/softrdma/softrdma/decode"
	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/internal/syncbuf"
	"github.com/softrdma/softrdma/roce"
)

// TestConformSelf runs softrdma conform --self as CI would: the whole RoCE
// catalogue on the simulator, exit 0, the table, and a JUnit file that parses
// with every case in it and no failure.
func TestConformSelf(t *testing.T) {
	junit := filepath.Join(t.TempDir(), "conform.xml")
	var out, errOut bytes.Buffer
	if code := conformCmd([]string{"--self", "--junit", junit}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errOut.String())
	}
	n := len(conform.RoCECases(nil))
	if !strings.Contains(out.String(), "passed, 0 failed, 0 not applicable") || strings.Count(out.String(), "\nPASS ") != n {
		t.Errorf("table:\n%s", out.String())
	}
	b, err := os.ReadFile(junit)
	if err != nil {
		t.Fatal(err)
	}
	var doc conform.JUnitTestSuites
	if err := xml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("junit: %v", err)
	}
	if doc.Tests != n || doc.Failures != 0 || len(doc.Suites) != 1 || len(doc.Suites[0].Cases) != n {
		t.Errorf("junit: %d tests, %d failures", doc.Tests, doc.Failures)
	}
}

// TestConformSelfIWARP runs the iWARP catalogue against softrdma over loopback TCP.
func TestConformSelfIWARP(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := conformCmd([]string{"--self", "--transport", "iwarp", "--json"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errOut.String())
	}
	var rep conform.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || rep.Suite != "iwarp" || rep.Passed != len(conform.IWARPCases(nil)) {
		t.Errorf("report: %v %+v", err, rep)
	}
}

func TestConformFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string // in stdout+stderr
	}{
		{[]string{"--self", "--case", "rc.dup.*", "--json"}, 0, `"passed": 5`},
		{[]string{"--list"}, 0, "rc.psn.gap\n  section: IBTA Vol. 1 9.7.5.1"},
		{[]string{"--list", "--case", "ud.*", "--json"}, 0, `"id": "ud.qkey.wrong"`},
		{[]string{"--self", "--case", "no.such.case"}, 2, "no case matches"},
		{[]string{"--self", "--case", "rc.["}, 2, "bad case pattern"},
		{[]string{}, 2, "exactly one of --self and --peer"},
		{[]string{"--self", "--peer", "x"}, 2, "exactly one of --self and --peer"},
		{[]string{"--self", "--transport", "ib"}, 2, "want roce or iwarp"},
		{[]string{"--self", "--backend", "afpacket"}, 2, "want sim or udp"},
		{[]string{"--self", "extra"}, 2, "unexpected argument"},
		{[]string{"serve"}, 2, "give --addr or --interface"},
		{[]string{"serve", "--transport", "iwarp"}, 2, "give --addr"},
		{[]string{"--list", "--transport", "iwarp", "--case", "mpa.*"}, 0, "mpa.reply.accept\n  section: RFC 5044"},
	} {
		var out, errOut bytes.Buffer
		code := conformCmd(tc.args, &out, &errOut)
		all := out.String() + errOut.String()
		if code != tc.code || !strings.Contains(all, tc.want) {
			t.Errorf("conform %q: exit %d, want %d with %q in\n%s", tc.args, code, tc.code, tc.want, all)
		}
	}
	var out bytes.Buffer
	conformCmd([]string{"--self", "--case", "rc.psn.gap", "--json"}, &out, &out)
	var rep conform.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || len(rep.Cases) != 1 || rep.Cases[0].Result != conform.Pass {
		t.Errorf("--json: %v %+v", err, rep)
	}
}

// pcapContents is a --pcap file read back: softrdma decode's result and
// packets (JSON), and the raw records.
type pcapContents struct {
	res     decode.Result
	packets map[int]decode.Packet // by frame number (a frame may end several MPA frames: the last)
	frames  [][]byte
	infos   []gopacket.CaptureInfo
}

func readPcap(t *testing.T, name string) pcapContents {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	c := pcapContents{packets: map[int]decode.Packet{}}
	if c.res, err = decode.Run(bytes.NewReader(b), &out, decode.Options{JSON: true}); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	for _, line := range bytes.Split(out.Bytes(), []byte("\n")) {
		var p decode.Packet
		if json.Unmarshal(line, &p) == nil && p.Frame > 0 {
			c.packets[p.Frame] = p
		}
	}
	r, err := pcapgo.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	for {
		data, ci, err := r.ReadPacketData()
		if err != nil {
			break
		}
		c.frames, c.infos = append(c.frames, data), append(c.infos, ci)
	}
	if c.res.Frames == 0 || len(c.frames) != c.res.Frames {
		t.Fatalf("%s: %d frames decoded, %d read", name, c.res.Frames, len(c.frames))
	}
	return c
}

// checkErrors checks that every error of the capture contains one of the keys
// of want and that each key is in as many errors as it says (-1: at least one),
// each in a frame sent by the tester (fromTester).
func (c pcapContents) checkErrors(t *testing.T, want map[string]int, fromTester func(frame int) bool) {
	t.Helper()
	got := map[string]int{}
	for _, e := range c.res.Errors {
		key := ""
		for k := range want {
			if strings.Contains(e.Reason, k) {
				key = k
			}
		}
		if key == "" {
			t.Errorf("unexpected error: %v", e)
			continue
		}
		got[key]++
		if !fromTester(e.Frame) {
			t.Errorf("%v: not a frame the tester sent", e)
		}
	}
	for k, n := range want {
		if (n < 0 && got[k] == 0) || (n >= 0 && got[k] != n) {
			t.Errorf("%d errors with %q, want %d", got[k], k, n)
		}
	}
}

// roceSentBy returns whether frame (1-based) is a RoCEv2 frame from src.
func (c pcapContents) roceSentBy(src string) func(int) bool {
	return func(frame int) bool {
		var f roce.Frame
		return frame >= 1 && frame <= len(c.frames) && f.DecodeEthernet(c.frames[frame-1]) == nil && f.Src.Unmap().String() == src
	}
}

// tcpSentBy returns whether frame is a TCP segment from one of the endpoints
// that opened a connection (sent a SYN without ACK): the tester's, whose
// connections are synthesised from its own end (pcaptap.TCP).
func (c pcapContents) tcpSentBy() func(int) bool {
	openers := map[string]bool{}
	src := func(data []byte) (string, *layers.TCP) {
		p := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
		tcp, _ := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
		if tcp == nil || p.NetworkLayer() == nil {
			return "", nil
		}
		return p.NetworkLayer().NetworkFlow().Src().String() + ":" + tcp.SrcPort.String(), tcp
	}
	for _, data := range c.frames {
		if s, tcp := src(data); tcp != nil && tcp.SYN && !tcp.ACK {
			openers[s] = true
		}
	}
	return func(frame int) bool {
		if frame < 1 || frame > len(c.frames) {
			return false
		}
		s, tcp := src(c.frames[frame-1])
		return tcp != nil && openers[s]
	}
}

// ibOf returns the BTH (and the rest of the transport packet) of frame, if it
// is a whole RoCEv2 frame.
func (c pcapContents) ibOf(frame int) ib.BTH {
	var f roce.Frame
	if f.DecodeEthernet(c.frames[frame-1]) != nil || len(f.IB) < ib.BTHLen {
		return nil
	}
	return ib.BTH(f.IB)
}

var conformPcapRE = regexp.MustCompile(`--pcap \S+: (\d+) frames(?: \((\d+) sent, (\d+) received\))?`)

// TestConformPcap runs softrdma conform with --pcap on each backend: the file
// holds every frame the tester sent and received, as many as it reported; the
// frames softrdma decode finds wrong are exactly the ones the cases broke on
// purpose, sent by the tester, flagged for what was broken (a bad ICRC differs
// from the right one in the one bit the case flipped: the frame is as sent);
// the broken frames decode cannot see (a wrong P_Key or Q_Key, a pad count) are
// there as sent.
func TestConformPcap(t *testing.T) {
	const simTester, udpTester = "10.47.91.1", "127.0.0.1"
	icrc, tver := "icrc: value", "bth: transport header version 1 != 0"
	for _, tc := range []struct {
		name   string
		args   []string
		tester string         // the tester's RoCE address; "" for iWARP
		errors map[string]int // see checkErrors
		check  func(t *testing.T, c pcapContents, tester string)
	}{
		{"sim/all", []string{"--self"}, simTester, map[string]int{icrc: 1, tver: 1}, checkBadICRC},
		{"sim/icrc", []string{"--self", "--case", "roce.icrc.bad"}, simTester, map[string]int{icrc: 1}, checkBadICRC},
		{"sim/tver", []string{"--self", "--case", "rc.tver.bad"}, simTester, map[string]int{tver: 1}, nil},
		{"sim/pkey", []string{"--self", "--case", "rc.pkey.wrong,ud.pkey.wrong"}, simTester, nil, func(t *testing.T, c pcapContents, tester string) {
			if n := c.countSent(tester, func(b ib.BTH, _ decode.Packet) bool { return b.PKey() == 0x8001 }); n != 2 {
				t.Errorf("%d frames with P_Key 0x8001 from the tester, want 2 (rc and ud)", n)
			}
		}},
		{"sim/qkey", []string{"--self", "--case", "ud.qkey.wrong"}, simTester, nil, func(t *testing.T, c pcapContents, tester string) {
			if n := c.countSent(tester, func(_ ib.BTH, p decode.Packet) bool { return p.DETH != nil && p.DETH.QKey == 0x2ce2ce2c }); n != 1 {
				t.Errorf("%d frames with Q_Key 0x2ce2ce2c from the tester, want 1", n)
			}
		}},
		{"sim/pad", []string{"--self", "--case", "rc.pad.write"}, simTester, nil, func(t *testing.T, c pcapContents, tester string) {
			// 6 data bytes and 2 pad bytes under BTH pad count 3: payload 5.
			if n := c.countSent(tester, func(b ib.BTH, p decode.Packet) bool {
				return b.PadCount() == 3 && p.PayloadLen != nil && *p.PayloadLen == 5 && p.RETH != nil && p.RETH.DMALen == 6
			}); n != 1 {
				t.Errorf("%d frames with pad count 3 over 8 bytes from the tester, want 1", n)
			}
		}},
		{"udp/broken", []string{"--self", "--backend", "udp", "--case", "roce.icrc.bad,rc.tver.bad,rc.pkey.wrong,rc.dup.read"}, udpTester,
			map[string]int{icrc: 1, tver: 1}, func(t *testing.T, c pcapContents, tester string) {
				checkBadICRC(t, c, tester)
				if n := c.countSent(tester, func(b ib.BTH, _ decode.Packet) bool { return b.PKey() == 0x8001 }); n != 1 {
					t.Errorf("%d frames with P_Key 0x8001 from the tester, want 1", n)
				}
			}},
		{"iwarp/all", []string{"--self", "--transport", "iwarp"}, "", map[string]int{
			"mpa: CRC":                             1,  // mpa.fpdu.bad-crc
			"mpa: private data length 600 > 512":   1,  // mpa.req.pd-too-long
			"rdmap: queue number 7 != 0":           1,  // ddp.qn.invalid
			"rdmap: opcode 14: reserved":           1,  // rdmap.opcode.reserved
			"Send needs the untagged buffer model": 1,  // rdmap.opcode.model
			"octets skipped":                       -1, // what follows a header decode cannot frame (version 0, PD_Length 600)
		}, nil},
		{"iwarp/bad-crc", []string{"--self", "--transport", "iwarp", "--case", "mpa.fpdu.bad-crc"}, "", map[string]int{"mpa: CRC": 1}, nil},
		{"iwarp/clean", []string{"--self", "--transport", "iwarp", "--case", "mpa.reply.*,mpa.crc.*,rdmap.send.deliver"}, "", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "conform.pcap")
			var out, errOut bytes.Buffer
			if code := conformCmd(append(tc.args, "--pcap", file), &out, &errOut); code != 0 {
				t.Fatalf("exit %d\n%s%s", code, out.String(), errOut.String())
			}
			m := conformPcapRE.FindStringSubmatch(errOut.String())
			if m == nil {
				t.Fatalf("no frame count on stderr:\n%s", errOut.String())
			}
			c := readPcap(t, file)
			if m[1] != strconv.Itoa(c.res.Frames) {
				t.Errorf("reported %s frames, the file holds %d", m[1], c.res.Frames)
			}
			if c.res.RDMAFrames == 0 {
				t.Errorf("no RDMA frame in %d", c.res.Frames)
			}
			if tc.tester == "" {
				c.checkErrors(t, tc.errors, c.tcpSentBy())
			} else {
				sent := c.roceSentBy(tc.tester)
				c.checkErrors(t, tc.errors, sent)
				n := 0
				for i := range c.frames {
					if sent(i + 1) {
						n++
					}
				}
				if m[2] != strconv.Itoa(n) || m[3] != strconv.Itoa(c.res.Frames-n) || c.res.RDMAFrames != c.res.Frames {
					t.Errorf("reported %s sent and %s received; the file holds %d from the tester of %d (%d RDMA)", m[2], m[3], n, c.res.Frames, c.res.RDMAFrames)
				}
			}
			if tc.check != nil {
				tc.check(t, c, tc.tester)
			}
		})
	}
}

// countSent counts the RoCE frames from the tester that match.
func (c pcapContents) countSent(tester string, match func(ib.BTH, decode.Packet) bool) int {
	sent, n := c.roceSentBy(tester), 0
	for i := range c.frames {
		if b := c.ibOf(i + 1); b != nil && sent(i+1) && match(b, c.packets[i+1]) {
			n++
		}
	}
	return n
}

var icrcErrorRE = regexp.MustCompile(`icrc: value 0x([0-9a-f]{8}) != computed 0x([0-9a-f]{8})`)

// checkBadICRC checks that the frame roce.icrc.bad broke is a SEND Only whose
// ICRC differs from the right one in one bit (the case flips one), that the
// same SEND follows with the right ICRC, and that the peer did not answer the
// broken one (no frame between them but the tester's).
func checkBadICRC(t *testing.T, c pcapContents, tester string) {
	t.Helper()
	for _, e := range c.res.Errors {
		m := icrcErrorRE.FindStringSubmatch(e.Reason)
		if m == nil {
			continue
		}
		v, _ := strconv.ParseUint(m[1], 16, 32)
		w, _ := strconv.ParseUint(m[2], 16, 32)
		if bits.OnesCount64(v^w) != 1 {
			t.Errorf("%v: more than the one flipped bit differs", e)
		}
		if p := c.packets[e.Frame]; p.Opcode != "RC SEND Only" || p.ICRC != "bad" {
			t.Errorf("frame %d: %+v, want a SEND Only with a bad ICRC", e.Frame, p)
		}
		bad := c.ibOf(e.Frame)
		for f := e.Frame + 1; f <= len(c.frames); f++ {
			if b := c.ibOf(f); b != nil && c.roceSentBy(tester)(f) && b.DestQP() == bad.DestQP() && b.Opcode() == bad.Opcode() {
				if p := c.packets[f]; p.ICRC != "ok" || b.PSN() != bad.PSN() {
					t.Errorf("frame %d, the resend: %+v", f, p)
				}
				return
			}
		}
		t.Errorf("the good SEND after frame %d is not in the capture", e.Frame)
	}
}

// conformServeAddrRE is where conform serve's control protocol listens.
var conformServeAddrRE = regexp.MustCompile(`control protocol \S+ on (\S+) for`)

// TestConformServePcap runs conform serve with --pcap (RoCE over UDP, iWARP)
// and the tester against it over loopback with --pcap: the server's file holds
// as many frames as it reported, the deliberately broken ones flagged as the
// tester's are (every broken frame the tester sent reached the server, and was
// recorded as it came), nothing else wrong.
func TestConformServePcap(t *testing.T) {
	const serverIP, testerIP = "127.0.83.3", "127.0.83.4"
	for _, tc := range []struct {
		name          string
		serve, tester []string
		errors        map[string]int
	}{
		{"roce", []string{"--addr", serverIP}, []string{"--local", testerIP, "--case", "roce.icrc.bad,rc.tver.bad,rc.pkey.wrong,rc.dup.read,ud.*"},
			// ud.len.oversize sends a UD SEND of the port MTU (4096 on lo) + 4
			// bytes: more than any IB MTU, which decode reports.
			map[string]int{"icrc: value": 1, "bth: transport header version 1 != 0": 1, "the largest IB MTU": 1}},
		{"iwarp", []string{"--transport", "iwarp", "--addr", serverIP}, []string{"--transport", "iwarp", "--case", "mpa.fpdu.bad-crc,rdmap.opcode.reserved,mpa.reply.accept"},
			map[string]int{"mpa: CRC": 1, "rdmap: opcode 14: reserved": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			srvFile, cliFile := filepath.Join(dir, "server.pcap"), filepath.Join(dir, "tester.pcap")
			var o conformServeOptions
			fs := pflag.NewFlagSet("", pflag.ContinueOnError)
			o.Listen, o.Backend, o.Transport, o.Pcap, o.UDPPort = serverIP+":0", "udp", "roce", srvFile, roce.UDPPort
			fs.StringVar(&o.Transport, "transport", o.Transport, "")
			fs.StringVar(&o.Addr, "addr", "", "")
			if err := fs.Parse(tc.serve); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			var srvOut, srvErr syncbuf.Buffer
			done := make(chan int, 1)
			go func() { done <- conformServe(ctx, o, &srvOut, &srvErr) }()
			var addr string
			for deadline := time.Now().Add(5 * time.Second); addr == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				if m := conformServeAddrRE.FindStringSubmatch(srvOut.String()); m != nil {
					addr = m[1]
				}
			}
			if addr == "" {
				cancel()
				t.Fatalf("conform serve did not start: exit %d\n%s%s", <-done, srvOut.String(), srvErr.String())
			}
			var out, errOut bytes.Buffer
			code := conformCmd(append([]string{"--peer", addr, "--pcap", cliFile}, tc.tester...), &out, &errOut)
			cancel()
			if sc := <-done; sc != 0 || code != 0 {
				t.Fatalf("tester exit %d, server exit %d\n%s%s\nserver:\n%s%s", code, sc, out.String(), errOut.String(), srvOut.String(), srvErr.String())
			}
			m := conformPcapRE.FindStringSubmatch(srvErr.String())
			if m == nil {
				t.Fatalf("no frame count on the server's stderr:\n%s", srvErr.String())
			}
			srv, cli := readPcap(t, srvFile), readPcap(t, cliFile)
			if m[1] != strconv.Itoa(srv.res.Frames) {
				t.Errorf("server reported %s frames, its file holds %d", m[1], srv.res.Frames)
			}
			if tc.name == "iwarp" {
				// The server's connections are synthesised from its end: the
				// tester's segments are the ones to the listening port.
				cli.checkErrors(t, tc.errors, cli.tcpSentBy())
				opened := srv.tcpSentBy()
				srv.checkErrors(t, tc.errors, func(f int) bool { return !opened(f) })
				return
			}
			cli.checkErrors(t, tc.errors, cli.roceSentBy(testerIP))
			srv.checkErrors(t, tc.errors, srv.roceSentBy(testerIP))
			// Every frame the tester sent reached the server (loopback), and the
			// server sent at least what the tester read.
			fromTester := func(c pcapContents) (n int) {
				for i := range c.frames {
					if c.roceSentBy(testerIP)(i + 1) {
						n++
					}
				}
				return n
			}
			if s, c := fromTester(srv), fromTester(cli); s != c || srv.res.Frames-s < cli.res.Frames-c || srv.res.RDMAFrames != srv.res.Frames {
				t.Errorf("server: %d frames, %d from the tester (%d RDMA); tester: %d frames, %d sent", srv.res.Frames, s, srv.res.RDMAFrames, cli.res.Frames, c)
			}
		})
	}
}

// TestConformWaiversFlag runs conform --waivers: a waiver for a case that passes
// is reported stale and the run still passes; a file with a line without a reason
// is a usage error naming the line; a waiver that matches no case is warned about.
func TestConformWaiversFlag(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.waivers")
	os.WriteFile(good, []byte("# softrdma\nrc.psn.gap  stands in for a known bug\nno.such.*  misspelt\n"), 0o644)
	var out, errOut bytes.Buffer
	if code := conformCmd([]string{"--self", "--case", "rc.psn.gap", "--waivers", good}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "waived but passed (the waiver can go): rc.psn.gap") {
		t.Errorf("the stale waiver is not reported:\n%s", out.String())
	}
	if !strings.Contains(errOut.String(), `line 3: "no.such.*" matches no case`) {
		t.Errorf("the unused waiver is not warned about: %q", errOut.String())
	}
	bad := filepath.Join(dir, "bad.waivers")
	os.WriteFile(bad, []byte("rc.psn.gap\n"), 0o644)
	out.Reset()
	errOut.Reset()
	if code := conformCmd([]string{"--self", "--waivers", bad}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "line 1") {
		t.Errorf("a waiver without a reason: exit %d, %q; want 2 naming line 1", code, errOut.String())
	}
}
