package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/softrdma/softrdma/cmatose"
)

const cmatoseUsage = `usage: softrdma cmatose -b ADDR [flags]          (server)
       softrdma cmatose -s HOST [-b ADDR] [flags] (client)

librdmacm's ucmatose (RC) or, with --ud, udaddy (UD by SIDR), over RoCEv2
through rdma_cm; either side may be the real tool.

flags:
`

// cmatoseCmd is softrdma cmatose: librdmacm's ucmatose and udaddy
// (package cmatose).
func cmatoseCmd(args []string, stdout, stderr io.Writer) int {
	var o cmatose.Options
	fs := newFlagSet("cmatose", cmatoseUsage, stderr)
	fs.StringVarP(&o.Server, "server", "s", "", "the server's address: run the client (without it: the server)")
	fs.StringVarP(&o.Bind, "bind", "b", "", "the address to bind (server: default any; the RoCE device's address)")
	fs.IntVarP(&o.Count, "count", "C", 10, "messages each way")
	fs.IntVarP(&o.Size, "size", "S", 100, "message size")
	fs.IntVarP(&o.Port, "port", "p", 0, "port (default 7471, udaddy's 7174 with --ud)")
	fs.BoolVar(&o.UD, "ud", false, "be udaddy: UD QPs resolved by SIDR (RDMA_PS_UDP)")
	fs.StringVar(&o.Pcap, "pcap", "", "write every RoCE frame sent and received to this pcap file (pcapng if its name ends in .pcapng)")
	fs.DurationVar(&o.Timeout, "timeout", 2*time.Minute, "give up after this long")
	if err := parseFlags(fs, args, stderr); err != nil {
		return flagsExit(err)
	}
	if o.Port == 0 {
		o.Port = 7471
		if o.UD {
			o.Port = 7174
		}
	}
	if o.Server == "" && o.Bind == "" {
		fmt.Fprintln(stderr, "softrdma cmatose: the server needs -b ADDR (the RoCE device's address)")
		return 2
	}
	// Both sides post -C receives before connecting: the QP's queues hold
	// them all (the engine's MaxQPWR).
	if err := checkFlags(
		intRange("-p", o.Port, 1, 65535),
		intRange("-C", o.Count, 0, 16384),
		intRange("-S", o.Size, 1, 1<<20),
		flagRange{"--timeout", o.Timeout, o.Timeout > 0, "a duration above 0"},
	); err != nil {
		fmt.Fprintf(stderr, "softrdma cmatose: %v\n", err)
		return 2
	}
	name := "cmatose"
	if o.UD {
		name = "udaddy"
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.Timeout)
	defer cancel()
	err := cmatose.Run(ctx, &o, name, stdout)
	fmt.Fprintln(stdout, "test complete")
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		fmt.Fprintln(stdout, "return status 1")
		return 1
	}
	fmt.Fprintln(stdout, "return status 0")
	return 0
}
