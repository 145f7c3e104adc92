package decode

import (
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/gopacket/layers"
)

// wantRTTs computes a capture's round-trip times from its packets, independently of
// the decoder's flows: an ACK (Acknowledge, ATOMIC Acknowledge) to the request of its
// PSN the other way, sent once; a READ request to the First or Only response of its
// PSN; an iWARP Read Request to the Read Response to its sink STag.
func wantRTTs(pkts []Packet) (ack, read []float64) {
	type key struct {
		psn  uint32
		from string
	}
	sent := map[key][]Packet{}
	iwarpReads := map[string]float64{}
	for _, p := range pkts {
		switch {
		case p.Transport == "iWARP" && p.ReadRequest != nil:
			iwarpReads[fmt.Sprint(p.ReadRequest.SinkSTag, p.ReadRequest.SinkTO)] = p.Time
		case p.Transport == "iWARP" && p.Opcode == "Read Response" && p.DDP != nil:
			k := fmt.Sprint(*p.DDP.STag, *p.DDP.TO)
			if t, ok := iwarpReads[k]; ok {
				read = append(read, p.Time-t)
				delete(iwarpReads, k)
			}
		case p.PSN == nil || strings.Contains(p.Opcode, "UD "):
		case strings.Contains(p.Opcode, "Acknowledge") && p.AETH != nil && p.AETH.Syndrome == "ACK":
			if s := sent[key{*p.PSN, p.Dst}]; len(s) == 1 && !strings.Contains(s[0].Opcode, "READ") {
				ack = append(ack, p.Time-s[0].Time)
			}
		case strings.Contains(p.Opcode, "READ response First") || strings.Contains(p.Opcode, "READ response Only"):
			if s := sent[key{*p.PSN, p.Dst}]; len(s) == 1 {
				read = append(read, p.Time-s[0].Time)
			}
		case !strings.Contains(p.Opcode, "response") && !strings.Contains(p.Opcode, "Acknowledge"):
			sent[key{*p.PSN, p.Src}] = append(sent[key{*p.PSN, p.Src}], p)
		}
	}
	return ack, read
}

func statsString(s *RTTStats) string {
	if s == nil {
		return "none"
	}
	return fmt.Sprintf("%d %.9f %.9f %.9f %.9f", s.Samples, s.Min, s.Median, s.P99, s.Max)
}

// TestRTTAndThroughput: for every capture (and one with a request sent twice), each
// flow's RTT statistics equal those computed from the packets by wantRTTs, and its
// throughput intervals add up to its goodput.
func TestRTTAndThroughput(t *testing.T) {
	type tc struct {
		name    string
		capture []byte
	}
	var cases []tc
	for _, file := range captureFiles(t) {
		cases = append(cases, tc{filepath.Base(file), readFile(t, file)})
	}
	lat := readFrames(t, readFile(t, filepath.Join(captureDir, "rxe-write-lat.pcap")))
	// Frame 23 is the first RDMA WRITE Only: sent twice (before its ACK), it gives no
	// sample.
	twice := append(append(append([]frameOut(nil), lat[:23]...), lat[22]), lat[23:]...)
	cases = append(cases, tc{"rxe-write-lat with a request sent twice", writeCapture(t, twice, layers.LinkTypeEthernet, false)})
	samples := 0
	for _, c := range cases {
		run := decodeRun(t, c.capture)
		ack, read := wantRTTs(run.pkts)
		var gotAck, gotRead []*RTTStats
		for _, f := range run.res.Flows {
			if f.RTT != nil {
				if f.RTT.RequestACK != nil {
					gotAck = append(gotAck, f.RTT.RequestACK)
				}
				if f.RTT.ReadResponse != nil {
					gotRead = append(gotRead, f.RTT.ReadResponse)
				}
			}
			if th := f.Throughput; th != nil {
				sum := 0.0
				for _, v := range th.BPS {
					sum += v * th.Interval / 8
				}
				if math.Abs(sum-float64(f.GoodputBytes)) > 1e-6*float64(f.GoodputBytes)+1e-6 || th.Start > f.First || th.Start+float64(len(th.BPS))*th.Interval < f.Last {
					t.Errorf("%s: flow #%d: throughput %+v adds up to %v bytes over %v.., goodput %d over %v-%v", c.name, f.ID, th, sum, th.Start, f.GoodputBytes, f.First, f.Last)
				}
			}
		}
		for _, k := range []struct {
			what string
			got  []*RTTStats
			want []float64
		}{{"request→ACK", gotAck, ack}, {"READ", gotRead, read}} {
			sort.Float64s(k.want)
			g := "none"
			if len(k.got) == 1 {
				g = statsString(k.got[0])
			}
			w := statsString(newRTTStats(k.want))
			if len(k.got) > 1 {
				// Several flows: the samples add up, the extremes are theirs.
				n, lo, hi := 0, math.Inf(1), 0.0
				for _, s := range k.got {
					n, lo, hi = n+s.Samples, min(lo, s.Min), max(hi, s.Max)
				}
				g = fmt.Sprintf("%d %.9f %.9f", n, lo, hi)
				w = fmt.Sprintf("%d %.9f %.9f", len(k.want), k.want[0], k.want[len(k.want)-1])
			}
			if g != w {
				t.Errorf("%s: %s RTT %s, want %s", c.name, k.what, g, w)
			}
			samples += len(k.want)
		}
		if strings.Contains(c.name, "twice") && (len(gotAck) != 1 || gotAck[0].Samples != 19) {
			t.Errorf("%s: request→ACK %v, want 19 samples", c.name, gotAck)
		}
	}
	if samples < 100 {
		t.Errorf("only %d RTT samples in all the captures", samples)
	}
}

// TestQuantiles: nearest-rank median and p99, and the interval choice.
func TestQuantiles(t *testing.T) {
	s := newRTTStats([]float64{5, 1, 4, 2, 3})
	if statsString(s) != "5 1.000000000 3.000000000 5.000000000 5.000000000" {
		t.Errorf("stats %s", statsString(s))
	}
	var hundred []float64
	for i := 100; i >= 1; i-- {
		hundred = append(hundred, float64(i))
	}
	if s := newRTTStats(hundred); s.Median != 50 || s.P99 != 99 {
		t.Errorf("1..100: median %v p99 %v", s.Median, s.P99)
	}
	for _, c := range []struct{ span, want float64 }{{1, 0.02}, {0.004, 0.0001}, {7, 0.2}, {100, 2}, {0, 0}} {
		if got := niceInterval(c.span); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("niceInterval(%v) = %v, want %v", c.span, got, c.want)
		}
	}
}
