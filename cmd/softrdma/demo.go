package main

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/softrdma/softrdma/demo"
	"github.com/softrdma/softrdma/device"
)

const demoUsage = `usage: softrdma demo [flags]

Two nodes in one process move SEND, WRITE, READ and atomic traffic and verify
every byte: over a simulated link (--transport roce, deterministic for a given
--seed, with optional loss, corruption, latency and bandwidth) or over loopback
TCP (--transport iwarp).

flags:
`

// demoOptions are the flags of softrdma demo.
// demoCmd is softrdma demo (package demo).
func demoCmd(args []string, stdout, stderr io.Writer) int {
	var o demo.Options
	fs := newFlagSet("demo", demoUsage, stderr)
	fs.StringVar(&o.Transport, "transport", "roce", "transport: roce (simulated link) or iwarp (two devices over loopback TCP)")
	fs.IntVarP(&o.Messages, "messages", "n", 200, "messages per operation")
	fs.IntVarP(&o.Size, "size", "s", 16384, "bytes per SEND, WRITE and READ message")
	fs.IntVar(&o.Depth, "depth", 32, "work requests in flight")
	fs.Float64Var(&o.Loss, "loss", 0, "random loss probability on each direction of the link")
	fs.Float64Var(&o.Corrupt, "corrupt", 0, "probability of one flipped bit per frame (the ICRC catches it)")
	fs.DurationVar(&o.Latency, "latency", 10*time.Microsecond, "one-way link latency")
	fs.Float64Var(&o.Bandwidth, "bandwidth", 10e9, "link bandwidth in bit/s")
	fs.IntVar(&o.MTU, "mtu", 1500, "Ethernet MTU of the link (IB MTU as rxe derives it)")
	fs.Uint64Var(&o.Seed, "seed", 1, "simulator seed: the same seed gives the same run")
	fs.StringVar(&o.Pcap, "pcap", "", "write the link's traffic to this pcap file (pcapng if its name ends in .pcapng)")
	fs.StringVar(&o.PcapView, "pcap-view", "received", "roce: what --pcap records: received (each frame as the other node got it: lost ones absent, corrupted ones corrupted, as a capture on the receiving host) or sent (each frame as its sender put it on the link, before loss and corruption)")
	fs.BoolVar(&o.JSON, "json", false, "print the result as JSON")
	fs.StringVar(&o.CRC, "crc", "accept", "iwarp: MPA CRC policy of both sides: accept, request or require")
	if err := parseFlags(fs, args, stderr); err != nil {
		return flagsExit(err)
	}
	switch o.Transport {
	case "roce":
	case "iwarp":
		if o.Loss != 0 || o.Corrupt != 0 {
			fmt.Fprintln(stderr, "softrdma demo: --loss and --corrupt need the simulated link (--transport roce); iwarp runs over real loopback TCP")
			return 2
		}
		if _, err := device.ParseCRCPolicy(o.CRC); err != nil {
			fmt.Fprintf(stderr, "softrdma demo: %v\n", err)
			return 2
		}
	default:
		fmt.Fprintf(stderr, "softrdma demo: --transport %s: want roce or iwarp\n", o.Transport)
		return 2
	}
	switch o.PcapView {
	case "received", "sent":
	default:
		fmt.Fprintf(stderr, "softrdma demo: --pcap-view %q: want received or sent\n", o.PcapView)
		return 2
	}
	if err := demoCheck(o); err != nil {
		fmt.Fprintf(stderr, "softrdma demo: %v\n", err)
		return 2
	}
	res, err := demo.Run(o)
	if o.JSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(res)
	} else {
		res.Print(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "softrdma demo: %v\n", err)
		return 1
	}
	if !res.Verified {
		return 1
	}
	return 0
}

// The demo's limits. Each node registers a buffer of --messages × --size
// octets (and 8 per message for the atomics), so that product is bounded;
// a CQ of 4 × --depth entries must fit the engine's MaxCQE (32768); an
// Ethernet MTU below 256 + rxe's 80 octets of headers carries no IB MTU; and
// the iWARP demo posts a receive for every message of a phase (MaxQPWR).
const (
	demoMaxBuffer   = 256 << 20
	demoMaxDepth    = 8192
	demoMinMTU      = 256 + 80
	demoMaxMTU      = 65535
	demoMaxLatency  = 100 * time.Millisecond
	demoMaxBitRate  = 1e15
	demoMaxIWARPMsg = 16384
)

// demoCheck reports the first flag out of its range, before anything starts: the
// simulator panics on a loss, corruption, bandwidth or latency outside its
// LinkConfig's ranges, -n × -s can overflow int or exhaust the memory, and a
// link MTU too small for any IB MTU drops every frame.
func demoCheck(o demo.Options) error {
	maxMsgs := demoMaxBuffer / 8
	if o.Transport == "iwarp" {
		maxMsgs = demoMaxIWARPMsg
	}
	maxSize := demoMaxBuffer / max(1, min(o.Messages, maxMsgs))
	return checkFlags(
		intRange("--messages", o.Messages, 1, maxMsgs),
		flagRange{"--size", o.Size, 8 <= o.Size && o.Size <= maxSize,
			fmt.Sprintf("8 to %d (--messages × --size, each node's buffer, is at most %d MiB)", maxSize, demoMaxBuffer>>20)},
		intRange("--depth", o.Depth, 1, demoMaxDepth),
		floatRange("--loss", o.Loss, 0, 1, "a probability"),
		floatRange("--corrupt", o.Corrupt, 0, 1, "a probability"),
		durationRange("--latency", o.Latency, 0, demoMaxLatency),
		floatRange("--bandwidth", o.Bandwidth, 1, demoMaxBitRate, "bit/s"),
		intRange("--mtu", o.MTU, demoMinMTU, demoMaxMTU),
	)
}
