package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/softrdma/softrdma/counters"
)

const statUsage = `usage: softrdma stat [--from ADDR] [--json] [-d NAME]...

Counters per device and per QP, as rdma statistic shows a kernel device's: packets
and bytes each way, retransmissions, timeouts, probes, ACKs, NAKs by code, RNR NAKs,
duplicates, drops by reason. A line per device (link NAME/1) and per live QP
(qp NAME/1 lqpn N); NAKs and drops are listed where not zero.

The counters are those of running processes: softrdma perf, pingpong, rping and
conform serve with --metrics ADDR, and programs run with softrdma's verbs libraries
with SOFTRDMA_METRICS=ADDR. Without --from, every such process of this user (they
announce themselves in $XDG_RUNTIME_DIR/softrdma/metrics); --from ADDR reads one
(HOST:PORT, or PORT on 127.0.0.1, or an http:// URL): any Prometheus scraper can
read the same endpoint, http://ADDR/metrics.

flags:
`

// statCmd is "softrdma stat": flags and wiring; package counters fetches
// and writes.
func statCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("stat", statUsage, stderr)
	from := fs.String("from", "", "the metrics endpoint of one process (--metrics ADDR, SOFTRDMA_METRICS=ADDR)")
	asJSON := fs.Bool("json", false, "JSON (snake_case keys) instead of text")
	only := fs.StringArrayP("device", "d", nil, "only the device NAME (as its link line names it; repeatable)")
	if err := parseFlags(fs, args, stderr); err != nil {
		return flagsExit(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "softrdma stat: takes no arguments, got %q\n", fs.Args())
		fs.Usage()
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var snaps []counters.Snapshot
	if *from != "" {
		s, err := counters.Fetch(ctx, *from)
		if err != nil {
			fmt.Fprintf(stderr, "softrdma stat: --from %s: %v\n", *from, err)
			return 1
		}
		snaps = append(snaps, s.Only(*only))
	} else {
		dir := counters.AnnounceDir()
		var err error
		snaps, err = counters.FetchAnnounced(ctx, dir, *only, func(ep counters.Endpoint, err error) {
			fmt.Fprintf(stderr, "softrdma stat: process %d at %s: %v\n", ep.PID, ep.Addr, err)
		})
		if err != nil {
			fmt.Fprintf(stderr, "softrdma stat: %v\n", err)
			return 1
		}
		if len(snaps) == 0 {
			fmt.Fprintf(stderr, "softrdma stat: no process serves counters (none in %s): run one with --metrics ADDR "+
				"(softrdma perf, pingpong, rping, conform serve) or SOFTRDMA_METRICS=ADDR (softrdma run), or give --from ADDR\n", dir)
			return 1
		}
	}
	if err := counters.WriteProcesses(stdout, *asJSON, snaps); err != nil {
		fmt.Fprintf(stderr, "softrdma stat: %v\n", err)
		return 1
	}
	return 0
}
