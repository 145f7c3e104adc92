package decode

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/softrdma/softrdma/ibtransport"
)

// Kinds of roceEvent.
const (
	evRequest  uint8 = iota // a request PSN seen for the first time
	evRetx                  // a request PSN seen again: a retransmission
	evACK                   // an ACK (Acknowledge, ATOMIC Acknowledge)
	evNAK                   // a NAK
	evRNR                   // an RNR NAK
	evReadResp              // the first packet of a READ response (First or Only)
	evResp                  // any other response packet
)

// roceEvent is one counted packet of a direction, as the RTTs, throughput and PSN plot
// need it.
type roceEvent struct {
	t       float64 // seconds since the first frame
	psn     uint32
	kind    uint8
	read    bool  // a READ request
	payload int32 // payload bytes delivered once (0 for a duplicate)
}

// addEvent records a counted packet in the direction's timeline.
func (r *roceDir) addEvent(t float64, op ibtransport.Opcode, pkt *ibtransport.Packet, dup bool, payload int) {
	e := roceEvent{t: t, psn: pkt.BTH.PSN()}
	if !dup {
		e.payload = int32(payload)
	}
	switch {
	case op.IsRequest():
		e.kind, e.read = evRequest, op.IsRead()
		if dup {
			e.kind = evRetx
		}
	case pkt.AETH != nil && pkt.AETH.Syndrome().Kind() == ibtransport.AETHKindNAK:
		e.kind = evNAK
	case pkt.AETH != nil && pkt.AETH.Syndrome().Kind() == ibtransport.AETHKindRNRNAK:
		e.kind = evRNR
	case op.IsAck():
		e.kind = evACK
	case op.IsRead() && op.IsFirst():
		e.kind = evReadResp
	default:
		e.kind = evResp
		if dup {
			e.kind = evRetx
		}
	}
	r.events = append(r.events, e)
}

// RTTStats summarizes round-trip time samples, in seconds.
type RTTStats struct {
	Samples int     `json:"samples"`
	Min     float64 `json:"min_s"`
	Median  float64 `json:"median_s"`
	P99     float64 `json:"p99_s"`
	Max     float64 `json:"max_s"`
}

// newRTTStats summarizes samples (sorted in place); nil for none.
func newRTTStats(samples []float64) *RTTStats {
	if len(samples) == 0 {
		return nil
	}
	sort.Float64s(samples)
	return &RTTStats{Samples: len(samples), Min: ns(samples[0]), Median: ns(quantile(samples, 0.5)),
		P99: ns(quantile(samples, 0.99)), Max: ns(samples[len(samples)-1])}
}

// ns rounds seconds to nanoseconds (what a capture's times are, at best).
func ns(s float64) float64 {
	return math.Round(s*1e9) / 1e9
}

// quantile returns the q-quantile of sorted samples (nearest rank).
func quantile(sorted []float64, q float64) float64 {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// Throughput is the data a flow delivered over time: the payload delivered once (no
// duplicates), both directions, in consecutive intervals from Start.
type Throughput struct {
	Interval float64   `json:"interval_s"`
	Start    float64   `json:"start_s"`
	BPS      []float64 `json:"bps"`
}

// maxIntervals bounds the intervals of a flow's throughput.
const maxIntervals = 50

// niceInterval returns the smallest 1, 2 or 5 times a power of ten that splits span
// into at most maxIntervals intervals.
func niceInterval(span float64) float64 {
	if span <= 0 {
		return 0
	}
	raw := span / maxIntervals
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// throughput bins (time, bytes) points into intervals over [first, last].
func throughput(first, last float64, points func(yield func(t float64, bytes int))) *Throughput {
	iv := niceInterval(last - first)
	if iv == 0 {
		return nil
	}
	start := math.Floor(first/iv) * iv
	n := int((last-start)/iv) + 1
	bytes := make([]float64, n)
	points(func(t float64, b int) {
		i := min(max(int((t-start)/iv), 0), n-1)
		bytes[i] += float64(b)
	})
	for i := range bytes {
		bytes[i] = bytes[i] * 8 / iv
	}
	return &Throughput{Interval: iv, Start: ns(start), BPS: bytes}
}

// flowSeries is what the HTML report draws of a flow: its RoCE directions' events, or
// its iWARP payload points, and its RTT samples.
type flowSeries struct {
	dirs     []seriesDir
	ackRTT   []float64
	readRTT  []float64
	iwarpPts []iwarpPoint
}

type seriesDir struct {
	name   string
	events []roceEvent
}

type iwarpPoint struct {
	t       float64
	payload int
	dir     int
}

// roceTimes computes a RoCE flow's RTTs and throughput from its directions' events:
// request→ACK, an ACK's PSN answering the request of that PSN sent once (requests
// sent again give no sample, as in Karn's algorithm), and READ request→first
// response packet. peer returns the direction the other way of a direction, or nil.
func roceTimes(dirs []*roceDir, peer func(*roceDir) *roceDir) (ack, read []float64) {
	for _, req := range dirs {
		resp := peer(req)
		if resp == nil {
			continue
		}
		type pending struct {
			psn   uint32
			t     float64
			retx  bool
			read  bool
			taken bool
		}
		var q []pending // requests in PSN order, oldest first
		reads := map[uint32]int{}
		i, j := 0, 0
		for i < len(req.events) || j < len(resp.events) {
			if j == len(resp.events) || i < len(req.events) && req.events[i].t <= resp.events[j].t {
				e := req.events[i]
				i++
				switch e.kind {
				case evRequest:
					q = append(q, pending{psn: e.psn, t: e.t, read: e.read})
					if e.read {
						reads[e.psn] = len(q) - 1
					}
				case evRetx:
					for k := len(q) - 1; k >= 0; k-- {
						if q[k].psn == e.psn {
							q[k].retx = true
							break
						}
					}
				}
				continue
			}
			e := resp.events[j]
			j++
			switch e.kind {
			case evACK:
				drop := 0
				for drop < len(q) && !ibtransport.PSNLess(e.psn, q[drop].psn) {
					p := q[drop]
					if p.psn == e.psn && !p.retx && !p.read {
						ack = append(ack, e.t-p.t)
					}
					drop++
				}
				if drop > 0 {
					q = q[drop:]
					for k, v := range reads {
						if v < drop {
							delete(reads, k)
						} else {
							reads[k] = v - drop
						}
					}
				}
			case evReadResp:
				if k, ok := reads[e.psn]; ok && !q[k].retx && !q[k].taken {
					read = append(read, e.t-q[k].t)
					q[k].taken = true
				}
			}
		}
	}
	return ack, read
}

// writeTimes prints a flow's RTTs and throughput lines.
func writeTimes(b *strings.Builder, f *FlowSummary) {
	if r := f.RTT; r != nil {
		for _, x := range []struct {
			name string
			s    *RTTStats
		}{{"request→ACK", r.RequestACK}, {"READ request→response", r.ReadResponse}} {
			if x.s != nil {
				fmt.Fprintf(b, "      RTT %s: %d samples, min %s, median %s, p99 %s, max %s\n",
					x.name, x.s.Samples, seconds(x.s.Min), seconds(x.s.Median), seconds(x.s.P99), seconds(x.s.Max))
			}
		}
	}
	if t := f.Throughput; t != nil && len(t.BPS) > 1 {
		fmt.Fprintf(b, "      throughput per %s from %.6f s:", seconds(t.Interval), t.Start)
		for _, v := range t.BPS {
			b.WriteByte(' ')
			b.WriteString(rateShort(v))
		}
		b.WriteString(" bit/s\n")
	}
}

// seconds prints a duration in seconds with a readable unit.
func seconds(s float64) string {
	switch {
	case s >= 1:
		return fmt.Sprintf("%.3f s", s)
	case s >= 1e-3:
		return fmt.Sprintf("%.3f ms", s*1e3)
	}
	return fmt.Sprintf("%.1f µs", s*1e6)
}

// rateShort prints bits per second as 12.3G, 45.6M, 7.8k or 9.
func rateShort(v float64) string {
	switch {
	case v >= 1e9:
		return fmt.Sprintf("%.3gG", v/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%.3gM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.3gk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}
