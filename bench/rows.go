package bench

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/softrdma/softrdma/ibtransport"
)

// verb is one of the three data operations a row measures.
type verb struct {
	name string // WRITE, READ, SEND
	op   ibtransport.WROpcode
}

var verbs = map[string]verb{
	"write": {"WRITE", ibtransport.WRRDMAWrite},
	"read":  {"READ", ibtransport.WRRDMARead},
	"send":  {"SEND", ibtransport.WRSend},
}

// Header lengths of the packets whose sizes the baselines copy.
const (
	bth    = 12
	reth   = 16
	aeth   = 4
	immDt  = 4
	icrc   = 4
	mpaLen = 2  // MPA's ULPDU length
	tagged = 14 // DDP tagged header with RDMAP's control byte
	untag  = 18 // DDP untagged header with RDMAP's control byte
	readRq = 28 // RDMAP Read Request header
)

func pad4(n int) int { return (n + 3) &^ 3 }

// dataPacketLen is the UDP payload (RoCE) or FPDU (iWARP) length of a packet
// carrying n payload bytes of verb v alone in its message (an Only packet,
// or, for n = the path MTU, a Middle one, which has no RETH).
func (e *env) dataPacketLen(v string, n int, middle bool) int {
	if e.transport == "iwarp" {
		hdr := tagged
		if v == "send" {
			hdr = untag
		}
		return pad4(mpaLen + hdr + n)
	}
	switch {
	case middle:
		return bth + pad4(n) + icrc
	case v == "write":
		return bth + reth + pad4(n) + icrc
	case v == "read":
		return bth + aeth + pad4(n) + icrc
	}
	return bth + pad4(n) + icrc
}

// runEnv measures every row of one transport and backend.
func runEnv(e *env, o *Options, emit func(Row)) {
	for _, t := range o.Tests {
		switch t {
		case "write", "read", "send":
			for _, size := range o.Sizes {
				emit(e.bandwidthRow(t, size, o))
				if e.stats != nil && os.Getenv("SOFTRDMA_BENCH_DEBUG") == "1" {
					fmt.Fprint(os.Stderr, e.stats())
				}
			}
		case "rate":
			for _, v := range []string{"write", "read", "send"} {
				emit(e.rateRow(v, o.RateSize, o))
				if e.stats != nil && os.Getenv("SOFTRDMA_BENCH_DEBUG") == "1" {
					fmt.Fprint(os.Stderr, e.stats())
				}
			}
		case "qps":
			for _, n := range o.QPs {
				for _, r := range e.scaleRows(n, o) {
					emit(r)
				}
				emit(e.cmSetupRow(n))
			}
		case "lat":
			for _, v := range []string{"write", "read", "send"} {
				for _, r := range e.latencyRows(v, o.LatSize, o) {
					emit(r)
				}
			}
		}
	}
}

// rounds is how many times each row alternates baseline and softrdma,
// each for a share of the measured time: a machine whose load changes (other
// work on its CPUs) then weighs on both alike.
const rounds = 3

// round returns the warm-up and measured time of round i.
func (o *Options) round(i int) (warm, measure time.Duration) {
	warm = o.Warm
	if i > 0 {
		warm = o.Warm / 4 // the path is warm already
	}
	return warm, o.Measure / rounds
}

func (e *env) row(test string, size int, unit string) Row {
	return Row{Transport: e.transport, Backend: e.backend, Test: test, Size: size, Unit: unit}
}

func failed(r Row, what string, err error) Row {
	r.Note = what + ": " + strings.ReplaceAll(err.Error(), "\n", " ")
	return r
}

// bandwidthRow measures verb v's bandwidth at size, in MiB/s of payload,
// beside the raw path carrying the same payload in packets of the size of
// the transport's full data packets.
func (e *env) bandwidthRow(v string, size int, o *Options) Row {
	verb := verbs[v]
	r := e.row(verb.name+" bw", size, "MiB/s")
	// The baseline: RoCE, datagrams of a full Middle packet (or the Only
	// packet of a smaller message); iWARP, a TCP stream in writes of the
	// message size.
	unit, payload := size, size
	if e.transport == "roce" {
		payload = min(size, e.pathMTU)
		unit = e.dataPacketLen(v, payload, size > e.pathMTU)
	}
	r = e.streamRow(r, verb.op, size, unit, o)
	if r.Note == "" {
		r.Value *= float64(size) / (1 << 20)
		r.Base *= float64(payload) / (1 << 20)
		r.Ratio = ratio(r.Value, r.Base)
	}
	return r
}

// rateRow measures verb v's message rate at size (64 bytes), in millions
// of messages a second, beside the rate of raw packets of the size of the
// packet that carries such a message's data.
func (e *env) rateRow(v string, size int, o *Options) Row {
	verb := verbs[v]
	r := e.row(verb.name+" rate", size, "Mmsg/s")
	r = e.streamRow(r, verb.op, size, e.dataPacketLen(v, size, false), o)
	if r.Note == "" {
		r.Value /= 1e6
		r.Base /= 1e6
		r.Ratio = ratio(r.Value, r.Base)
	}
	return r
}

// streamRow measures, in alternating rounds, the raw path's rate of units
// of unit bytes and softrdma's rate of messages of op and size, both per
// second, and their ratio.
func (e *env) streamRow(r Row, op ibtransport.WROpcode, size, unit int, o *Options) Row {
	// READ data flows from A (the responder) to B; the rest from B to A.
	fromA := op == ibtransport.WRRDMARead
	r.Baseline = e.raw.blastDesc(unit, fromA)
	slots := 0 // receive buffers: SENDs only, at most 64 MiB of them
	if op == ibtransport.WRSend {
		slots = max(16, min(rxDepth, (64<<20)/size))
	}
	q, err := e.newQPs(size, slots)
	if err != nil {
		return failed(r, "setup", err)
	}
	defer q.destroy()
	var baseSecs, secs, allocs, cpu float64
	for i := 0; i < rounds; i++ {
		warm, measure := o.round(i)
		if !o.NoBaseline {
			n, err := e.raw.blast(unit, fromA, warm, measure)
			if err != nil {
				return failed(r, "baseline", err)
			}
			r.BaseCount += n
			baseSecs += measure.Seconds()
		}
		s, err := q.streamOps(op, size, warm, measure)
		if err != nil {
			return failed(r, "softrdma", err)
		}
		r.Samples += s.msgs
		secs += s.secs
		allocs += s.allocs * float64(s.msgs)
		cpu += s.cpu.Seconds()
	}
	r.Value = float64(r.Samples) / secs
	if r.Samples > 0 {
		r.Allocs = allocs / float64(r.Samples)
		r.CPUPerMsg = cpu * 1e6 / float64(r.Samples)
	}
	if baseSecs > 0 {
		r.Base = float64(r.BaseCount) / baseSecs
	}
	return r
}

// ratio is value/base, or 0 without a baseline.
func ratio(value, base float64) float64 {
	if base <= 0 {
		return 0
	}
	return value / base
}

// latencyRows measures verb v's latency at size: min, median and p99.
// WRITE and SEND are ping-pongs reported one way (half the round trip, as
// ib_write_lat and ib_send_lat do; the WRITE carries an immediate so that
// the far side gets a completion instead of polling memory); READ is the
// round trip of one READ (as ib_read_lat). The baseline exchanges packets of
// the same sizes the same way.
func (e *env) latencyRows(v string, size int, o *Options) []Row {
	verb := verbs[v]
	name := verb.name
	op := verb.op
	var req, resp int
	half := true
	switch {
	case v == "read":
		half = false
		if e.transport == "iwarp" {
			req, resp = pad4(mpaLen+untag+readRq), e.dataPacketLen(v, size, false)
		} else {
			req, resp = bth+reth+icrc, e.dataPacketLen(v, size, false)
		}
	case v == "write":
		name, op = "WRITE_IMM", ibtransport.WRRDMAWriteWithImm
		req = e.dataPacketLen(v, size, false) + immDt
		if e.transport == "iwarp" {
			req = e.dataPacketLen(v, size, false) + pad4(mpaLen+untag+immDt) // RFC 7306: a Write, then an Immediate Data message
		}
		resp = req
	default:
		req = e.dataPacketLen(v, size, false)
		resp = req
	}
	rows := []Row{e.row(name+" lat min", size, "us"), e.row(name+" lat median", size, "us"), e.row(name+" lat p99", size, "us")}
	fail := func(what string, err error) []Row {
		for i := range rows {
			rows[i] = failed(rows[i], what, err)
		}
		return rows
	}
	q, err := e.newQPs(size, 0)
	if err != nil {
		return fail("setup", err)
	}
	defer q.destroy()
	var base []time.Duration
	var l latency
	for i := 0; i < rounds; i++ {
		warm, measure := o.round(i)
		if !o.NoBaseline {
			b, err := e.raw.rtt(req, resp, warm, measure)
			if err != nil {
				return fail("baseline", err)
			}
			base = append(base, b...)
		}
		var k latency
		if v == "read" {
			k, err = q.readLatency(size, warm, measure)
		} else {
			k, err = q.pingPong(op, size, warm, measure)
		}
		if err != nil {
			return fail("softrdma", err)
		}
		l.allocs = (l.allocs*float64(len(l.samples)) + k.allocs*float64(len(k.samples))) / float64(max(1, len(l.samples)+len(k.samples)))
		l.samples = append(l.samples, k.samples...)
	}
	if half {
		for i := range base {
			base[i] /= 2
		}
	}
	bmin, bmed, bp99 := percentiles(base)
	smin, smed, sp99 := percentiles(l.samples)
	desc := e.raw.rttDesc(req, resp)
	if half {
		desc += ", one way"
	}
	for i, p := range [][2]float64{{smin, bmin}, {smed, bmed}, {sp99, bp99}} {
		rows[i].Value, rows[i].Base = p[0], p[1]
		if p[0] > 0 {
			rows[i].Ratio = p[1] / p[0]
		}
		rows[i].Baseline = desc
		rows[i].Allocs = l.allocs
		rows[i].Samples, rows[i].BaseCount = len(l.samples), len(base)
	}
	return rows
}
