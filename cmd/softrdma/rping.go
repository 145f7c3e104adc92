package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/softrdma/softrdma/device"
	"github.com/softrdma/softrdma/rping"
)

const rpingUsage = `usage: softrdma rping -s [-P] [-q] [-a ADDR] [-p PORT] [flags]
       softrdma rping -c [-q] [-I ADDR] -a ADDR [-p PORT] [-C COUNT] [-S SIZE] [-vV] [flags]

rdma-core's rping over rdma_cm: iWARP on TCP (the default) or, with
--transport roce, the IB CM on a RoCE device; either side may be the real tool.

flags:
`

// rpingCmd is softrdma rping: rdma-core's rping (package rping).
func rpingCmd(args []string, stdout, stderr io.Writer) int {
	var o rping.Options
	fs := newFlagSet("rping", rpingUsage, stderr)
	fs.BoolVarP(&o.Server, "server", "s", false, "server side")
	fs.BoolVarP(&o.Client, "client", "c", false, "client side")
	fs.StringVarP(&o.Addr, "addr", "a", "", "address (server: to bind, default any; client: of the server)")
	fs.BoolVarP(&o.Persistent, "persistent", "P", false, "persistent server: serve connection after connection, side by side, until stopped")
	fs.StringVarP(&o.Source, "source", "I", "", "client: the source address to bind to (and the device on it)")
	fs.BoolVarP(&o.SelfQP, "self-qp", "q", false, "create the QP with the verbs and move it with rdma_init_qp_attr's attributes, naming it to rdma_cm (iWARP: the MPA exchange moves it to RTS)")
	fs.IntVarP(&o.Port, "port", "p", 7174, "port")
	fs.IntVarP(&o.Count, "count", "C", 0, "ping count times (0: forever)")
	fs.IntVarP(&o.Size, "size", "S", 64, "ping data size")
	fs.BoolVarP(&o.Verbose, "verbose", "v", false, "display ping data to stdout")
	fs.BoolVarP(&o.Validate, "validate", "V", false, "validate ping data")
	fs.BoolVarP(&o.Debug, "debug", "d", false, "debug printfs (to stdout, as rping), the rdma_cm events included")
	fs.StringVar(&o.Transport, "transport", "iwarp", "iwarp, or roce (rdma_cm over the IB CM on a RoCE device)")
	fs.StringVar(&o.CRC, "crc", "accept", "iWARP: MPA CRC policy: accept (siw's default), request or require")
	fs.StringVar(&o.Pcap, "pcap", "", "write the connection to this pcap file (iWARP: its TCP octets; RoCE: its frames) (pcapng if its name ends in .pcapng)")
	fs.DurationVar(&o.Timeout, "timeout", 0, "give up after this long (0: never)")
	fs.DurationVar(&o.Settle, "settle", rping.Settle, "iWARP client: wait this long after ESTABLISHED before the first SEND (see rping.Settle)")
	metrics := addMetricsFlags(fs)
	if err := parseFlags(fs, args, stderr); err != nil {
		return flagsExit(err)
	}
	if o.Server == o.Client {
		fmt.Fprintln(stderr, "softrdma rping: exactly one of -s and -c")
		return 2
	}
	if o.Client && o.Addr == "" {
		fmt.Fprintln(stderr, "softrdma rping: the client needs -a ADDR")
		return 2
	}
	if o.Persistent && !o.Server {
		fmt.Fprintln(stderr, "softrdma rping: -P is the server's (persistent server mode)")
		return 2
	}
	if o.Source != "" && !o.Client {
		fmt.Fprintln(stderr, "softrdma rping: -I is the client's source address (the server binds -a)")
		return 2
	}
	if o.Size < rping.MinSize || o.Size > rping.MaxSize {
		fmt.Fprintf(stderr, "Invalid size %d (valid range is %d to %d)\n", o.Size, rping.MinSize, rping.MaxSize+1)
		return 2
	}
	if o.Count < 0 {
		fmt.Fprintf(stderr, "Invalid count %d\n", o.Count)
		return 2
	}
	if err := checkFlags(
		intRange("-p", o.Port, 0, 65535),
		durationNonNegative("--timeout", o.Timeout),
		durationNonNegative("--settle", o.Settle),
	); err != nil {
		fmt.Fprintf(stderr, "softrdma rping: %v\n", err)
		return 2
	}
	crc, err := device.ParseCRCPolicy(o.CRC)
	if err != nil {
		fmt.Fprintf(stderr, "softrdma rping: %v\n", err)
		return 2
	}
	switch o.Transport {
	case "iwarp":
	case "roce":
		if o.Server && o.Addr == "" {
			fmt.Fprintln(stderr, "softrdma rping: --transport roce: the server needs -a ADDR (the RoCE device's address)")
			return 2
		}
	default:
		fmt.Fprintf(stderr, "softrdma rping: --transport %q: want iwarp or roce\n", o.Transport)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Timeout)
		defer cancel()
	}
	return metrics.run("rping", stderr, func() int {
		if err := rping.Run(ctx, o, crc, stdout, stderr); err != nil {
			side := "client"
			if o.Server {
				side = "server"
			}
			fmt.Fprintf(stderr, "rping %s failed: %v\n", side, err)
			return 1
		}
		return 0
	})
}
