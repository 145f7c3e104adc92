package counters_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/softrdma/softrdma/counters"
	ib "github.com/softrdma/softrdma/ibtransport"
	"github.com/softrdma/softrdma/ibtransport/ibtest"
)

// flatten turns JSON into KEY.PATH → number (arrays by index), so a test
// names the keys users script with.
func flatten(prefix string, v any, out map[string]float64) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			flatten(prefix+"."+k, x, out)
		}
	case []any:
		for i, x := range v {
			flatten(fmt.Sprintf("%s.%d", prefix, i), x, out)
		}
	case float64:
		out[strings.TrimPrefix(prefix, ".")] = v
	}
}

func jsonOf(t *testing.T, s counters.Snapshot) (string, map[string]float64) {
	t.Helper()
	var b bytes.Buffer
	if err := counters.WriteJSON(&b, s); err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(b.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	flat := map[string]float64{}
	flatten("", v, flat)
	return b.String(), flat
}

var snakeKey = regexp.MustCompile(`"([^"]+)":`)

// checkSnake fails for a JSON key that is not snake_case.
func checkSnake(t *testing.T, js string) {
	t.Helper()
	for _, m := range snakeKey.FindAllStringSubmatch(js, -1) {
		if !regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`).MatchString(m[1]) {
			t.Errorf("JSON key %q is not snake_case", m[1])
		}
	}
}

// roundTrip writes s in Prometheus' format, parses it back and compares.
func roundTrip(t *testing.T, s counters.Snapshot) string {
	t.Helper()
	var b bytes.Buffer
	if err := counters.WritePrometheus(&b, s); err != nil {
		t.Fatal(err)
	}
	back, err := counters.ParsePrometheus(bytes.NewReader(b.Bytes()))
	if err != nil {
		t.Fatalf("ParsePrometheus: %v\n%s", err, b.String())
	}
	if !reflect.DeepEqual(back, s) {
		t.Errorf("Prometheus round trip:\n%+v\nwant\n%+v\nfrom\n%s", back, s, b.String())
	}
	return b.String()
}

// TestCollectAfterExchange moves 4 SENDs of 64 bytes from A to B on the
// engine's test wire, with a loss, a duplicate or a late receive the filter
// picks, and checks Collect's counters of both sides by their JSON keys
// (devices[0].counters.KEY for the device, .qps[0].counters.KEY for the QP;
// only the keys listed, the others must be zero), the text line, and that
// the Prometheus form parses back to the same snapshot.
func TestCollectAfterExchange(t *testing.T) {
	const n, size = 4, 64
	const pkt = 12 + size
	tests := []struct {
		name   string
		filter func(f *ibtest.Frame) ibtest.Action
		late   bool // B posts its receives only after A has sent
		a, b   map[string]float64
		text   []string // in A's or B's text lines
	}{
		{"clean", nil, false,
			map[string]float64{"packets_out": n, "bytes_out": n * pkt, "packets_in": 1, "bytes_in": 16, "acks_received": 1},
			map[string]float64{"packets_in": n, "bytes_in": n * pkt, "packets_out": 1, "bytes_out": 16, "acks_sent": 1},
			[]string{"link A/1 transport roce address 127.0.0.1 state active packets_out 4 bytes_out 304 packets_in 1 bytes_in 16 retransmissions 0"}},
		{"second lost", func(f *ibtest.Frame) ibtest.Action {
			return ibtest.Action{Drop: f.Dir == ibtest.AToB && f.Index == 1}
		}, false,
			map[string]float64{"packets_out": n + 3, "bytes_out": (n + 3) * pkt, "packets_in": 3, "bytes_in": 48, "acks_received": 2,
				"retransmissions": 3, "naks_received.psn_sequence_error": 1},
			map[string]float64{"packets_in": n + 2, "bytes_in": (n + 2) * pkt, "packets_out": 3, "bytes_out": 48, "acks_sent": 2,
				"naks_sent.psn_sequence_error": 1, "drops.out_of_sequence": 2},
			[]string{" naks_sent.psn_sequence_error 1 drops.out_of_sequence 2\n", " retransmissions 3 "}},
		{"first duplicated", func(f *ibtest.Frame) ibtest.Action {
			if f.Dir == ibtest.AToB && f.Index == 0 {
				return ibtest.Action{Duplicates: 1}
			}
			return ibtest.Action{}
		}, false,
			// The copy is a duplicate request, its ACK coalesced with the last's.
			map[string]float64{"packets_out": n, "bytes_out": n * pkt, "packets_in": 1, "bytes_in": 16, "acks_received": 1},
			map[string]float64{"packets_in": n + 1, "bytes_in": (n + 1) * pkt, "packets_out": 1, "bytes_out": 16, "acks_sent": 1,
				"duplicate_requests": 1},
			[]string{" duplicate_requests 1 "}},
		{"no receive posted", nil, true,
			// The first SEND draws an RNR NAK, the other three are
			// dropped out of sequence; after the RNR wait all four go again.
			map[string]float64{"packets_out": 2 * n, "bytes_out": 2 * n * pkt, "packets_in": 2, "bytes_in": 32, "acks_received": 1,
				"rnr_naks_received": 1, "retransmissions": n},
			map[string]float64{"packets_in": 2 * n, "bytes_in": 2 * n * pkt, "packets_out": 2, "bytes_out": 32, "acks_sent": 1,
				"rnr_naks_sent": 1, "drops.out_of_sequence": 3},
			[]string{" rnr_naks_sent 1 "}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ibtest.NewPair(ib.ContextConfig{Seed: 1}, ib.QPTypeRC, ibtest.DefaultConnOptions())
			if err != nil {
				t.Fatal(err)
			}
			p.Wire.Filter = tt.filter
			src, err := p.A.PD.RegMR(make([]byte, n*size), ib.AccessLocalWrite)
			if err != nil {
				t.Fatal(err)
			}
			dst, err := p.B.PD.RegMR(make([]byte, n*size), ib.AccessLocalWrite)
			if err != nil {
				t.Fatal(err)
			}
			recv := func() {
				for i := range n {
					if err := p.B.QP.PostRecv(ib.RecvWR{WRID: uint64(i), SGL: []ib.SGE{dst.SGE(i*size, size)}}); err != nil {
						t.Fatal(err)
					}
				}
			}
			if !tt.late {
				recv()
			}
			for i := range n {
				if err := p.A.QP.PostSend(ib.SendWR{WRID: uint64(i), Opcode: ib.WRSend, SGL: []ib.SGE{src.SGE(i*size, size)}, Signaled: i == n-1}); err != nil {
					t.Fatal(err)
				}
			}
			if tt.late {
				// Until the RNR NAK: B answers the first SEND with it.
				if err := p.Wire.Run(func() bool { return p.B.QP.Counters().RNRNAKsSent > 0 }, 100000); err != nil {
					t.Fatal(err)
				}
				recv()
			}
			if _, err := p.Completions(p.B.CQ, n); err != nil {
				t.Fatal(err)
			}
			if _, err := p.Completions(p.A.CQ, 1); err != nil {
				t.Fatal(err)
			}
			a := counters.Collect(counters.Info{Name: "A", Transport: "roce", Address: netip.MustParseAddr("127.0.0.1")}, p.A.Ctx, nil)
			b := counters.Collect(counters.Info{Name: "B", Transport: "roce", Address: netip.MustParseAddr("127.0.0.2")}, p.B.Ctx, nil)
			s := counters.Snapshot{Devices: []counters.Device{a, b}}
			js, flat := jsonOf(t, s)
			checkSnake(t, js)
			for i, want := range []map[string]float64{tt.a, tt.b} {
				for _, scope := range []string{fmt.Sprintf("devices.%d.counters.", i), fmt.Sprintf("devices.%d.qps.0.counters.", i)} {
					for k, v := range flat {
						if !strings.HasPrefix(k, scope) || strings.Count(k[len(scope):], ".") > 1 {
							continue
						}
						if w := want[k[len(scope):]]; v != w {
							t.Errorf("%s%s = %v, want %v", scope, k[len(scope):], v, w)
						}
					}
					for k := range want {
						if _, ok := flat[scope+k]; !ok {
							t.Errorf("no key %s%s in\n%s", scope, k, js)
						}
					}
				}
			}
			if got := flat["devices.0.qps.0.qpn"]; got != float64(p.A.QP.QPN()) {
				t.Errorf("devices.0.qps.0.qpn = %v, want %d", got, p.A.QP.QPN())
			}
			var text bytes.Buffer
			counters.WriteText(&text, s)
			for _, w := range tt.text {
				if !strings.Contains(text.String(), w) {
					t.Errorf("text: no %q in\n%s", w, text.String())
				}
			}
			roundTrip(t, s)
		})
	}
}

// TestKey checks the snake_case keys drop reasons become.
func TestKey(t *testing.T) {
	for in, want := range map[string]string{
		"P_Key mismatch": "p_key_mismatch", "unknown QP": "unknown_qp", "no receive WQE": "no_receive_wqe",
		"out of sequence": "out_of_sequence", " x--y ": "x_y",
	} {
		if got := counters.Key(in); got != want {
			t.Errorf("Key(%q) = %q, want %q", in, got, want)
		}
	}
	keys := append([]string(nil), counters.DropReasons...)
	sort.Strings(keys)
	for i := 1; i < len(keys); i++ {
		if keys[i] == keys[i-1] {
			t.Errorf("drop reason key %q twice", keys[i])
		}
	}
}

// TestOnly keeps the devices named, in order.
func TestOnly(t *testing.T) {
	s := counters.Snapshot{PID: 3, Devices: []counters.Device{{Name: "a"}, {Name: "b"}, {Name: "c"}}}
	for _, tt := range []struct {
		names []string
		want  string
	}{{nil, "a b c"}, {[]string{"c", "a"}, "a c"}, {[]string{"x"}, ""}} {
		got := s.Only(tt.names)
		var names []string
		for _, d := range got.Devices {
			names = append(names, d.Name)
		}
		if strings.Join(names, " ") != tt.want || got.PID != 3 || got.Devices == nil {
			t.Errorf("Only(%q) = %+v, want %s", tt.names, got, tt.want)
		}
	}
}
