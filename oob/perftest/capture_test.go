package perftest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/softrdma/softrdma/oob/internal/capture"
	"github.com/softrdma/softrdma/oob/internal/cmsends"
)

const captures = "../../testdata/captures"

// carrierKind says how a capture carries the exchange.
type carrierKind uint8

const (
	overTCP carrierKind = iota
	overRoCE
	overIWARP
)

type capCase struct {
	name    string
	cfg     Config // Role is set per use
	carrier carrierKind
}

var capCases = []capCase{
	{"rxe-write-bw", Config{Test: WriteBW}, overTCP},
	{"rxe-read-bw", Config{Test: ReadBW}, overTCP},
	{"rxe-send-bw", Config{Test: SendBW}, overTCP},
	{"rxe-atomic-fadd", Config{Test: AtomicBW}, overTCP},
	{"rxe-atomic-cas", Config{Test: AtomicBW}, overTCP},
	{"rxe-write-lat", Config{Test: WriteLat}, overTCP},
	{"rxe-send-lat", Config{Test: SendLat}, overTCP},
	{"rxe-write-bw-rdma-cm", Config{Test: WriteBW, WorkRDMACM: true}, overRoCE},
	{"siw-write-bw", Config{Test: WriteBW, WorkRDMACM: true}, overIWARP},
	{"siw-crc-write-bw", Config{Test: WriteBW, WorkRDMACM: true}, overIWARP},
	{"siw-read-bw", Config{Test: ReadBW, WorkRDMACM: true}, overIWARP},
	{"siw-send-bw", Config{Test: SendBW, WorkRDMACM: true}, overIWARP},
}

func (c capCase) config(role Role) Config {
	cfg := c.cfg
	cfg.Role = role
	cfg.WithGID = true // -x 1 on rxe; rdma_cm always carries the GID
	cfg.MTU = MTU1024
	cfg.Size = 4096
	return cfg
}

// wireMsg is one captured message, attributed to the plan step that exchanges it.
type wireMsg struct {
	step       Step
	stepIndex  int
	fromClient bool
	frame      int // rdma_cm carriers only
	data       []byte
}

// captured holds one capture's exchange: the raw events and the messages.
type captured struct {
	events []capture.Event // TCP segments or SENDs, in capture order
	msgs   []wireMsg       // in plan order: client's then server's message of each exchange
}

func loadCapture(t testing.TB, c capCase) *captured {
	t.Helper()
	path := filepath.Join(captures, c.name+".pcap")
	var (
		events []capture.Event
		err    error
	)
	switch c.carrier {
	case overTCP:
		var conns []*capture.Conn
		if conns, err = capture.TCP(path, DefaultPort); err == nil {
			if len(conns) != 1 {
				t.Fatalf("%s: %d connections, want 1", c.name, len(conns))
			}
			events = conns[0].Events
		}
	case overRoCE:
		events, err = cmsends.RoCESends(path)
	case overIWARP:
		events, err = cmsends.IWARPSends(path, DefaultPort)
	}
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.config(RoleClient)
	plan, err := Plan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	out := &captured{events: events}
	if c.carrier == overTCP {
		streams := map[bool][]byte{}
		for _, e := range events {
			streams[e.FromClient] = append(streams[e.FromClient], e.Data...)
		}
		for i, st := range plan {
			for _, n := range cfg.MessageSizes(st) {
				for _, fromClient := range []bool{true, false} {
					s := streams[fromClient]
					if len(s) < n {
						t.Fatalf("%s: step %d (%v): %d bytes left from client=%v, want %d", c.name, i, st, len(s), fromClient, n)
					}
					out.msgs = append(out.msgs, wireMsg{step: st, stepIndex: i, fromClient: fromClient, data: s[:n]})
					streams[fromClient] = s[n:]
				}
			}
		}
		for fromClient, s := range streams {
			if len(s) != 0 {
				t.Fatalf("%s: %d bytes from client=%v after the plan: %q", c.name, len(s), fromClient, s)
			}
		}
		return out
	}
	queues := map[bool][]capture.Event{}
	for _, e := range events {
		queues[e.FromClient] = append(queues[e.FromClient], e)
	}
	for i, st := range plan {
		for _, n := range cfg.MessageSizes(st) {
			for _, fromClient := range []bool{true, false} {
				q := queues[fromClient]
				if len(q) == 0 {
					t.Fatalf("%s: step %d (%v): no more SENDs from client=%v", c.name, i, st, fromClient)
				}
				if len(q[0].Data) != n {
					t.Fatalf("%s: frame %d, step %d (%v): SEND of %d bytes, want %d", c.name, q[0].Frame, i, st, len(q[0].Data), n)
				}
				out.msgs = append(out.msgs, wireMsg{step: st, stepIndex: i, fromClient: fromClient, frame: q[0].Frame, data: q[0].Data})
				queues[fromClient] = q[1:]
			}
		}
	}
	for fromClient, q := range queues {
		if len(q) != 0 {
			t.Fatalf("%s: %d SENDs from client=%v after the plan (first: frame %d)", c.name, len(q), fromClient, q[0].Frame)
		}
	}
	return out
}

// logInfo is what a tool printed: the client's and the server's Dest fields, and the
// client's report line.
type logInfo struct {
	client, server logDest
	report         []string // bytes, iterations, peak, average, msg rate
	mtu            int
}

type logDest struct {
	lid, qpn, psn uint64
	out           int64 // -1: not printed
	rkey, vaddr   uint64
	hasRDMA       bool
	gid           [16]byte
}

var (
	perfAddr   = regexp.MustCompile(`(local|remote) address: LID (\w+) QPN 0x(\w+) PSN 0x(\w+)(?: OUT 0x(\w+))?(?: RKey 0x(\w+) VAddr 0x(\w+))?\n GID: ([\d:]+)`)
	perfReport = regexp.MustCompile(`(?m)^ (\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$`)
	perfMTU    = regexp.MustCompile(`Mtu\s+: (\d+)\[B\]`)
)

func hexField(t testing.TB, s string) uint64 {
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func parseLog(t testing.TB, name string) logInfo {
	t.Helper()
	clientLog, serverLog, err := capture.Log(captures, name)
	if err != nil {
		t.Fatal(err)
	}
	section := func(s string) (local, remote logDest) {
		m := perfAddr.FindAllStringSubmatch(s, -1)
		if len(m) != 2 {
			t.Fatalf("%s.log: %d address lines, want 2", name, len(m))
		}
		for _, l := range m {
			d := logDest{lid: hexField(t, l[2]), qpn: hexField(t, l[3]), psn: hexField(t, l[4]), out: -1}
			if l[5] != "" {
				d.out = int64(hexField(t, l[5]))
			}
			if l[6] != "" {
				d.hasRDMA, d.rkey, d.vaddr = true, hexField(t, l[6]), hexField(t, l[7])
			}
			g := strings.Split(l[8], ":") // perftest prints the GID bytes in decimal
			if len(g) != 16 {
				t.Fatalf("%s.log: GID %q", name, l[8])
			}
			for i, x := range g {
				v, err := strconv.ParseUint(x, 10, 8)
				if err != nil {
					t.Fatal(err)
				}
				d.gid[i] = byte(v)
			}
			if l[1] == "local" {
				local = d
			} else {
				remote = d
			}
		}
		return
	}
	var li logInfo
	var cr, sl, sr logDest
	li.client, cr = section(clientLog)
	sl, sr = section(serverLog)
	li.server = cr
	if fmt.Sprint(li.client) != fmt.Sprint(sr) || fmt.Sprint(cr) != fmt.Sprint(sl) {
		t.Fatalf("%s.log: client and server logs disagree", name)
	}
	if m := perfReport.FindStringSubmatch(clientLog); m != nil {
		li.report = m[1:]
	}
	m := perfMTU.FindStringSubmatch(clientLog)
	if m == nil {
		t.Fatalf("%s.log: no MTU line", name)
	}
	li.mtu, _ = strconv.Atoi(m[1])
	return li
}

func (d logDest) check(t *testing.T, where string, got Dest) {
	t.Helper()
	if uint64(got.LID) != d.lid || uint64(got.QPN) != d.qpn || uint64(got.PSN) != d.psn || got.GID != d.gid {
		t.Errorf("%s: keys %v, log says LID %#x QPN %#x PSN %#x GID % x", where, got, d.lid, d.qpn, d.psn, d.gid)
	}
	if d.out >= 0 && int64(got.OutReads) != d.out {
		t.Errorf("%s: out_reads %#x, log says %#x", where, got.OutReads, d.out)
	}
	if d.hasRDMA && (uint64(got.RKey) != d.rkey || got.VAddr != d.vaddr) {
		t.Errorf("%s: rkey %#x vaddr %#x, log says %#x %#x", where, got.RKey, got.VAddr, d.rkey, d.vaddr)
	}
}

// TestCaptures splits each capture's exchange into messages by the Plan (every byte must
// be accounted for), decodes each, checks it against the log and re-marshals it.
func TestCaptures(t *testing.T) {
	for _, c := range capCases {
		t.Run(c.name, func(t *testing.T) {
			cp := loadCapture(t, c)
			li := parseLog(t, c.name)
			if li.mtu != 1024 {
				t.Fatalf("log MTU %d", li.mtu)
			}
			cfg := c.config(RoleClient)
			sawKeys := 0
			var reportBytes = map[bool][]byte{}
			for _, m := range cp.msgs {
				where := fmt.Sprintf("step %d (%v) from client=%v", m.stepIndex, m.step, m.fromClient)
				var enc []byte
				var err error
				switch m.step.Kind {
				case StepVersions:
					var v Version
					if err = v.UnmarshalBinary(m.data); err == nil {
						if v != DefaultVersion || v.Number() != 6.06 {
							t.Errorf("%s: version %q", where, v)
						}
						enc, err = v.MarshalBinary()
					}
				case StepSysData:
					// Two 4-byte messages: page size then cache line size.
					want := map[int]uint32{0: 4096, 1: 64}[sysDataIndex(cp.msgs, m)]
					if got := uint32(m.data[0])<<24 | uint32(m.data[1])<<16 | uint32(m.data[2])<<8 | uint32(m.data[3]); got != want {
						t.Errorf("%s: %d, want %d", where, got, want)
					}
					enc = m.data
				case StepMTU:
					var mtu MTU
					if err = mtu.UnmarshalBinary(m.data); err == nil {
						if mtu.Bytes() != li.mtu {
							t.Errorf("%s: MTU %v, log says %d", where, mtu, li.mtu)
						}
						enc, err = mtu.MarshalBinary()
					}
				case StepHandShake:
					var d Dest
					if c.carrier == overTCP {
						if err = d.UnmarshalKeys(m.data, true); err == nil {
							enc, err = d.AppendKeys(nil, true)
						}
					} else if err = d.UnmarshalBinary(m.data); err == nil {
						enc, err = d.MarshalBinary()
					}
					if err != nil {
						break
					}
					if m.step.Zero {
						if d != (Dest{}) {
							t.Errorf("%s: zero handshake carries %v", where, d)
						}
						break
					}
					sawKeys++
					want := li.server
					if m.fromClient {
						want = li.client
					}
					want.check(t, where, d)
					if c.carrier != overTCP && d.GIDIndex != int32(map[carrierKind]int{overRoCE: 1, overIWARP: 0}[c.carrier]) {
						t.Errorf("%s: gid_index %d", where, d.GIDIndex)
					}
				case StepReports:
					reportBytes[m.fromClient] = append(reportBytes[m.fromClient], m.data...)
					enc = m.data
				case StepDone:
					if string(m.data) != Done {
						t.Errorf("%s: %q, want %q", where, m.data, Done)
					}
					enc = m.data
				default:
					t.Fatalf("%s: hook step carries data", where)
				}
				if err != nil {
					t.Fatalf("%s: %v", where, err)
				}
				if !bytes.Equal(enc, m.data) {
					t.Errorf("%s: re-marshalled\n%q\nwant\n%q", where, enc, m.data)
				}
			}
			if sawKeys == 0 {
				t.Fatal("no keys")
			}
			if cfg.Test.Bandwidth() && cfg.Test != SendBW {
				// The client's report is what both sides printed.
				var r BWReport
				if err := r.UnmarshalBinary(reportBytes[true]); err != nil {
					t.Fatal(err)
				}
				got := []string{strconv.FormatUint(r.Size, 10), strconv.FormatUint(r.Iters, 10),
					fmt.Sprintf("%.2f", r.BWPeak), fmt.Sprintf("%.2f", r.BWAvg), fmt.Sprintf("%.6f", r.MsgRateAvg)}
				if fmt.Sprint(got) != fmt.Sprint(li.report) {
					t.Errorf("client report %v, log says %v", got, li.report)
				}
				for fromClient, b := range reportBytes {
					var r BWReport
					if err := r.UnmarshalBinary(b); err != nil {
						t.Fatal(err)
					}
					if enc, _ := r.MarshalBinary(); !bytes.Equal(enc, b) {
						t.Errorf("report from client=%v re-marshalled %x, want %x", fromClient, enc, b)
					}
				}
			} else if len(reportBytes) != 0 {
				t.Errorf("%v exchanged reports", cfg.Test)
			}
		})
	}
}

// sysDataIndex tells which of the two sys-data messages m is.
func sysDataIndex(msgs []wireMsg, m wireMsg) int {
	i := 0
	for _, x := range msgs {
		if x.step.Kind != StepSysData || x.fromClient != m.fromClient {
			continue
		}
		if &x.data[0] == &m.data[0] {
			return i
		}
		i++
	}
	return -1
}

// capturedSide returns what one side of the capture used: its Dests (from its first
// real handshake), its reports (in order) and its MTU.
func capturedSide(t *testing.T, c capCase, cp *captured, client bool) (dests []Dest, reports []BWReport) {
	t.Helper()
	var rep []byte
	for _, m := range cp.msgs {
		if m.fromClient != client {
			continue
		}
		switch m.step.Kind {
		case StepHandShake:
			if m.step.Zero || dests != nil {
				continue
			}
			var d Dest
			var err error
			if c.carrier == overTCP {
				err = d.UnmarshalKeys(m.data, true)
			} else {
				err = d.UnmarshalBinary(m.data)
			}
			if err != nil {
				t.Fatal(err)
			}
			dests = []Dest{d}
		case StepReports:
			rep = append(rep, m.data...)
			if len(rep) == ReportSize {
				var r BWReport
				if err := r.UnmarshalBinary(rep); err != nil {
					t.Fatal(err)
				}
				reports = append(reports, r)
				rep = nil
			}
		}
	}
	return dests, reports
}

// messagePeer adapts a PipeCarrier to capture.Peer.
type messagePeer struct{ c *PipeCarrier }

func (p messagePeer) Write(b []byte) error { return p.c.Send(context.Background(), b) }
func (p messagePeer) Read(n int) ([]byte, error) {
	b := make([]byte, DestBinarySize+64)
	got, err := p.c.Receive(context.Background(), b)
	return b[:got], err
}

// equalIgnoringPadding compares messages, except the padding bytes of binary dests,
// which perftest fills with stack garbage.
func equalIgnoringPadding(_ int, got, want []byte) bool {
	if len(got) == DestBinarySize && len(want) == DestBinarySize {
		g, w := bytes.Clone(got), bytes.Clone(want)
		clear(g[binPad:binVAddr])
		clear(w[binPad:binVAddr])
		return bytes.Equal(g, w)
	}
	return bytes.Equal(got, want)
}

// TestReplay runs each side of each captured exchange against the capture's other side,
// played back byte for byte (TCP) or message for message (rdma_cm), in capture order:
// what Run sends must be what the real tool sent, when it sent it.
func TestReplay(t *testing.T) {
	for _, c := range capCases {
		cp := loadCapture(t, c)
		for _, role := range []Role{RoleClient, RoleServer} {
			t.Run(c.name+"/"+role.String(), func(t *testing.T) {
				isClient := role == RoleClient
				ours, ourReports := capturedSide(t, c, cp, isClient)
				theirs, theirReports := capturedSide(t, c, cp, !isClient)
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()

				var carrier Carrier
				played := make(chan error, 1)
				if c.carrier == overTCP {
					a, b := net.Pipe()
					defer a.Close()
					carrier = NewStreamCarrier(a)
					go func() {
						defer b.Close()
						played <- capture.Play(capture.StreamPeer{RW: b}, cp.events, !isClient, nil)
					}()
				} else {
					a, b := MessagePipe()
					defer a.Close()
					carrier = a
					go func() {
						defer b.Close()
						played <- capture.Play(messagePeer{b}, cp.events, !isClient, equalIgnoringPadding)
					}()
				}
				var calls []string
				runs := 0
				hooks := Hooks{
					ConnectCM: func(context.Context) error { calls = append(calls, "cm"); return nil },
					Setup: func(_ context.Context, r *Result) ([]Dest, error) {
						calls = append(calls, "setup")
						if r.MTU != MTU1024 || r.SysData != DefaultSysData || r.RemoteVersion != DefaultVersion {
							t.Errorf("negotiated %v %v %q", r.MTU, r.SysData, r.RemoteVersion)
						}
						d := ours[0]
						d.Padding = [4]byte{}
						return []Dest{d}, nil
					},
					Connect: func(_ context.Context, local, remote []Dest) error {
						calls = append(calls, "connect")
						if remote[0] != theirs[0] {
							t.Errorf("connect: remote %v, want %v", remote[0], theirs[0])
						}
						return nil
					},
					PostReceives: func(context.Context, uint64) error { calls = append(calls, "post"); return nil },
					Run: func(_ context.Context, size uint64) (BWReport, error) {
						calls = append(calls, "run")
						defer func() { runs++ }()
						if size != 4096 {
							t.Errorf("run size %d", size)
						}
						if runs < len(ourReports) {
							return ourReports[runs], nil
						}
						return BWReport{}, nil
					},
					IdleReport: func() BWReport {
						calls = append(calls, "idle report")
						return ourReports[0]
					},
				}
				res, err := Run(ctx, carrier, c.config(role), hooks)
				if err != nil {
					t.Fatal(err)
				}
				if err := <-played; err != nil {
					t.Fatal(err)
				}
				plan, _ := Plan(c.config(role))
				if res.Steps != len(plan) {
					t.Errorf("%d steps of %d", res.Steps, len(plan))
				}
				if res.Remote[0].QPN != theirs[0].QPN || res.Remote[0].PSN != theirs[0].PSN || res.Remote[0].GID != theirs[0].GID {
					t.Errorf("remote %v, want %v", res.Remote[0], theirs[0])
				}
				if len(theirReports) > 0 {
					if len(res.Reports) != 1 || res.Reports[0].Remote != theirReports[0] {
						t.Errorf("reports %+v, want remote %+v", res.Reports, theirReports[0])
					}
				}
				wantDone := c.carrier == overTCP && c.cfg.Test != WriteLat
				if res.PeerDone != wantDone {
					t.Errorf("peer done %v, want %v", res.PeerDone, wantDone)
				}
				t.Logf("hooks: %v", calls)
			})
		}
	}
}
